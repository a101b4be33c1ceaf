import Dispatch
import Foundation
import Testing

@testable import Ingot

/// A TV API's episode (TVmaze's shape): no id of its own — its identity is built from `season`
/// and `number`; its show's id comes as text; its runtime in a format of the API's own.
private struct Episode: IngotEntity, Codable, Equatable {
    var code: String
    var title: String?
    var minutes: Int?
    var show: Ref<Show>?
    enum CodingKeys: String, CodingKey { case code, title, minutes = "runtime", show = "show_id" }
    static let identity: [CodingKeys] = [.code]

    struct BadRuntime: Error, CustomStringConvertible {
        var text: String
        var description: String { "runtime '\(text)' is not like '1h 05m'" }
    }

    static let prepare: (@Sendable (inout IngotRecord) throws -> Void)? = { record in
        if let season = record.integer("season"), let number = record.integer("number") {
            record.set("code", "S\(season < 10 ? "0" : "")\(season)E\(number < 10 ? "0" : "")\(number)")
        }
        if let id = record.string("show_id") { record.set("show_id", Int(id)) }  // "1699" → 1699
        if let text = record.string("runtime") {
            // "1h 05m" → 65, decoded by hand; the other keys map by default.
            let parts = text.split(separator: " ")
            guard parts.count == 2, parts[0].hasSuffix("h"), parts[1].hasSuffix("m"), let hours = Int(parts[0].dropLast()),
                let minutes = Int(parts[1].dropLast())
            else { throw BadRuntime(text: text) }
            record.set("runtime", hours * 60 + minutes)
        }
    }
}

private struct Show: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String?
    var episodes: Many<Episode>?
    enum CodingKeys: String, CodingKey { case id, name, episodes = "_embedded->episodes" }
    static let identity: [CodingKeys] = [.id]
    static let keyDelimiter = "->"
    static let prepare: (@Sendable (inout IngotRecord) throws -> Void)? = { record in
        // A key path in the entity's own delimiter; a key removed is a key the record does not name.
        if record.isNull("_embedded->episodes") { record.remove("_embedded->episodes") }
        if let name = record.string("name") { record.set("name", name.trimmingCharacters(in: .whitespaces)) }
    }
}

/// A review whose stars come as text ("★★★"), decoded by hand in its own `init(from:)`.
private struct Review: IngotEntity, Equatable {
    var id: Int
    var stars: Int?
    var text: String?
    enum CodingKeys: String, CodingKey { case id, stars, text }
    static let identity: [CodingKeys] = [.id]

    init(id: Int, stars: Int?, text: String?) {
        (self.id, self.stars, self.text) = (id, stars, text)
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(Int.self, forKey: .id)
        stars = try container.decodeIfPresent(String.self, forKey: .stars).map { $0.filter { $0 == "★" }.count }
        text = try container.decodeIfPresent(String.self, forKey: .text)
    }
}

/// A note of a user (Sync's example): replaced per user.
private struct Note: IngotEntity, Codable, Equatable {
    var id: Int
    var text: String?
    var user: Int?
    enum CodingKeys: String, CodingKey { case id, text, user = "user_id" }
    static let identity: [CodingKeys] = [.id]
}

/// Reddit: a post names its subreddit in two sibling keys (`subreddit_id`, `subreddit`).
private struct Subreddit: IngotEntity, Codable, Equatable {
    var id: String
    var name: String?
    enum CodingKeys: String, CodingKey { case id, name = "display_name" }
    static let identity: [CodingKeys] = [.id]
}

private struct Post: IngotEntity, Codable {
    var id: String
    var title: String?
    var subreddit: Ref<Subreddit>?
    var crossposts: [Post]?
    enum CodingKeys: String, CodingKey { case id, title, subreddit, crossposts = "crosspost_parent_list" }
    static let identity: [CodingKeys] = [.id]
    static func rule(for key: CodingKeys) -> IngotRule? {
        switch key {
        case .subreddit: IngotRule(fields: ["id": "subreddit_id", "name": "subreddit"])
        // Crossposts only link posts: they create none and change none.
        case .crossposts: IngotRule(insertsTargets: false, updatesTargets: false)
        default: nil
        }
    }
}

@Suite
struct LibraryHookTests {
    private static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    private static func database(_ backend: String) throws -> IngotDatabase {
        try libraryDatabase(backend, "hooks", entities: [Show.self]).db
    }

    /// The hook runs before the identity is read: an identity built from two fields, an id sent
    /// as text, a key decoded by hand; the rest maps with the merge rules (a later record of the
    /// same identity wins key by key, `null` clears, an absent key is left alone). A hook that
    /// throws rejects its record with the entity, coding path and reason; its neighbours are saved.
    @Test(arguments: libraryBackends)
    func theHookRewritesRecordsBeforeTheirIdentityIsLookedUp(backend: String) async throws {
        let db = try Self.database(backend)
        let report = try await db.ingest(
            [Episode].self,
            from: Self.bytes(
                #"[{"season": 1, "number": 2, "title": "Pilot", "runtime": "1h 05m", "show_id": "1699"},"#
                    + #" {"season": 1, "number": 3, "title": "Gone", "runtime": "soon"},"#
                    + #" {"season": 1, "number": 4, "title": "Four", "runtime": "0h 42m", "show_id": "1699"},"#
                    + #" {"season": 1, "number": 2, "runtime": null}]"#))
        #expect(report.records == 4)
        #expect(report.entities["episode"]?.inserted == 2 && report.entities["show"]?.inserted == 1)
        let rejection = try #require(report.rejections.first)
        #expect(report.rejections.count == 1)
        #expect(rejection.entity == "episode" && rejection.codingPath == "[1]" && rejection.reasonCode == "prepare_failed")
        #expect(rejection.reason == "prepare: runtime 'soon' is not like '1h 05m'")

        // Re-sent: the same rows (the built identity finds them), an absent runtime left alone.
        let again = try await db.ingest([Episode].self, from: Self.bytes(#"[{"season": 1, "number": 4, "title": "Four!"}]"#))
        #expect(again.entities["episode"]?.updated == 1 && again.entities["episode"]?.inserted == 0)

        let episodes = try await db.fetch(Episode.self, sortBy: [SortDescriptor(\.code)])
        #expect(episodes.map(\.code) == ["S01E02", "S01E04"])
        #expect(episodes.map(\.title) == ["Pilot", "Four!"])
        #expect(episodes.map(\.minutes) == [nil, 42])
        #expect(episodes.map { $0.show?.id } == [.single(.integer(1699)), .single(.integer(1699))])
    }

    /// Nested objects go through their own entity's hook (each episode inside a show), and the
    /// owner's hook sees the key paths of its own delimiter.
    @Test(arguments: libraryBackends)
    func nestedObjectsGoThroughTheirOwnHook(backend: String) async throws {
        let db = try Self.database(backend)
        let report = try await db.ingest(
            [Show].self,
            from: Self.bytes(
                #"[{"id": 1699, "name": "  Dark ", "_embedded": {"episodes": [{"season": 1, "number": 1, "runtime": "0h 51m"},"#
                    + #" {"season": 1, "number": 2, "runtime": "1h 0m"}]}},"#
                    + #" {"id": 1700, "name": "Later", "_embedded": {"episodes": null}}]"#))
        #expect(report.rejections.isEmpty && report.entities["episode"]?.inserted == 2)
        let shows = try await db.fetch(Show.self, sortBy: [SortDescriptor(\.id)], including: [\.episodes])
        #expect(shows.map(\.name) == ["Dark", "Later"])
        #expect(shows[0].episodes?.map(\.id) == [.single(.text("S01E01")), .single(.text("S01E02"))])
        #expect(shows[0].episodes?.compactMap(\.value?.minutes) == [51, 60])
        // `null` was removed by the hook: Later's episodes were not named, so none were cleared or set.
        #expect(shows[1].episodes?.isEmpty == true)

        // A nested object's hook that throws rejects the whole record, at the nested object's path.
        let bad = try await db.ingest(
            [Show].self,
            from: Self.bytes(
                #"[{"id": 1701, "_embedded": {"episodes": [{"season": 1, "number": 1}, {"season": 1, "number": 2, "runtime": "?"}]}}]"#))
        #expect(bad.rejections.map(\.codingPath) == ["[0]._embedded.episodes[1]"], "\(bad.rejections.map(\.codingPath))")
        #expect(bad.rejections.first?.entity == "episode" && bad.entities["show"]?.inserted == 0)

        // Removing the key leaves stored links alone; `[]` would have cleared them.
        _ = try await db.ingest([Show].self, from: Self.bytes(#"[{"id": 1699, "_embedded": {"episodes": null}}]"#))
        let dark = try await db.fetch(Show.self, where: #Predicate { $0.id == 1699 }, including: [\.episodes])
        #expect(dark.first?.episodes?.count == 2)
    }

    /// The context-bound decoder applies the same hook: the object it registers carries the
    /// identity the hook built; a hook's error is a `DecodingError` with the coding path.
    @Test func theDecoderAppliesTheHookToo() throws {
        let queue = DispatchQueue(label: "hooks.decode")
        let context = DecodingContext(name: "hooks")
        try DecodingContext.bind(context, to: queue)
        let episodes = try queue.sync {
            try IngotJSONDecoder().decode(
                [Episode].self, from: Self.bytes(#"[{"season": 2, "number": 10, "runtime": "1h 1m", "show_id": "7"}]"#))
        }
        #expect(episodes == [Episode(code: "S02E10", title: nil, minutes: 61, show: Ref(id: .single(.integer(7))))])
        #expect(context.registeredObject(Episode.self, identity: .single(.text("S02E10"))) != nil)
        #expect(throws: DecodingError.self) {
            try queue.sync { try IngotJSONDecoder().decode([Episode].self, from: Self.bytes(#"[{"code": "x", "runtime": "later"}]"#)) }
        }
    }

    /// A hand-written `init(from:)`: the schema probe reads what it decodes (stars as text), and
    /// `fetch` decodes each row through it.
    @Test func aHandWrittenInitFromDecodesItsOwnKeys() async throws {
        let db = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("reviews.db").path, entities: [Review.self])
        let report = try await db.ingest([Review].self, from: Self.bytes(#"[{"id": 1, "stars": "★★★☆☆", "text": "fine"}, {"id": 2}]"#))
        #expect(report.rejections.isEmpty && report.entities["review"]?.inserted == 2)
        let reviews = try await db.fetch(Review.self, sortBy: [SortDescriptor(\.id)])
        #expect(reviews == [Review(id: 1, stars: 3, text: "fine"), Review(id: 2, stars: nil, text: nil)])
    }

    /// `IngotRecord` reads and writes key paths, JSON text and every scalar; `remove` makes a key absent.
    @Test func aRecordReadsAndWritesKeyPaths() throws {
        let document = try JSONDocument(bytes: Self.bytes(#"{"a": {"b": 1, "c": [1, {"d": true}]}, "s": "x\n", "n": null, "f": 2.5}"#))
        var record = IngotRecord(document.root, delimiter: ".")
        #expect(record.integer("a.b") == 1 && record.double("f") == 2.5 && record.string("s") == "x\n")
        #expect(record.isNull("n") && record.has("n") && !record.has("a.z") && record.bool("a.b") == nil)
        #expect(record.json("a.c") == #"[1,{"d":true}]"#)
        record.set("a.e.f", "new")
        record.set("f", Double.nan)
        try record.set("g", json: #"{"h": [null]}"#)
        record.remove("a.b")
        record.remove("s")
        record.set("t", "value")
        record.setNull("t")
        #expect(record.jsonText == #"{"a":{"c":[1,{"d":true}],"e":{"f":"new"}},"n":null,"f":null,"g":{"h":[null]},"t":null}"#)
        #expect(throws: (any Error).self) { try record.set("x", json: "{") }
    }

    /// The pipeline's write options in Swift: `replace(scope:)` deletes only the untouched rows of
    /// the scopes this input gave (user 6's notes, not user 7's); `updateOnly(rejectingUnknown:)`
    /// rejects an unknown identity instead of skipping it; a scope that names no attribute is
    /// refused before anything is read.
    @Test(arguments: libraryBackends)
    func writeScopesAndUnknownIdentities(backend: String) async throws {
        let db =
            try libraryDatabase(backend, "notes", entities: [Note.self]).db
        _ = try await db.ingest(
            [Note].self,
            from: Self.bytes(#"[{"id": 1, "user_id": 6}, {"id": 2, "user_id": 6}, {"id": 3, "user_id": 7}, {"id": 4, "user_id": 6}]"#))
        let synced = try await db.ingest(
            [Note].self, from: Self.bytes(#"[{"id": 1, "user_id": 6, "text": "kept"}, {"id": 4, "user_id": 6}]"#),
            write: .replace(scope: "user_id"))
        #expect(synced.deleted == 1)
        #expect(try await db.fetch(Note.self, sortBy: [SortDescriptor(\.id)]).map(\.id) == [1, 3, 4])

        let skipped = try await db.ingest([Note].self, from: Self.bytes(#"[{"id": 1, "text": "a"}, {"id": 9}]"#), write: .updateOnly)
        #expect(skipped.skipped == 1 && skipped.rejections.isEmpty)
        let rejected = try await db.ingest(
            [Note].self, from: Self.bytes(#"[{"id": 1, "text": "b"}, {"id": 9}]"#), write: .updateOnly(rejectingUnknown: true))
        #expect(rejected.rejections.map(\.reasonCode) == ["unknown_identity"] && rejected.rejections.first?.codingPath == "[1]")
        #expect(rejected.rejections.first?.raw == #"{"id": 9}"#)
        #expect(try await db.fetch(Note.self, where: #Predicate { $0.id == 1 }).first?.text == "b")
        #expect(try await db.fetch(Note.self).count == 3)

        await #expect(throws: StoreError.self) {
            try await db.ingest([Note].self, from: Self.bytes("[]"), write: .replace(scope: "owner"))
        }
    }

    /// `fields:` and `operations:` in Swift (`IngotRule`): a subreddit built from a post's sibling
    /// keys; crossposts that link stored posts but neither create nor change them.
    @Test func fieldsAndOperationsDeclaredInSwift() async throws {
        let path = temporaryDirectory().appendingPathComponent("reddit.db").path
        let db = try IngotDatabase.sqlite(path, entities: [Post.self])
        _ = try await db.ingest(
            [Post].self,
            from: Self.bytes(#"[{"id": "p1", "title": "First", "subreddit_id": "t5_2qh1i", "subreddit": "AskReddit"}]"#))
        #expect(try rows(path, "SELECT id, name FROM subreddit") == [["t5_2qh1i", "AskReddit"]])
        #expect(try rows(path, "SELECT id, subreddit_id FROM post") == [["p1", "t5_2qh1i"]])
        let report = try await db.ingest(
            [Post].self,
            from: Self.bytes(
                #"[{"id": "p2", "title": "Second", "crosspost_parent_list": [{"id": "p1", "title": "Changed"}, {"id": "p9", "title": "New"}]}]"#
            ))
        #expect(report.rejections.isEmpty)
        #expect(try rows(path, "SELECT id, title FROM post ORDER BY id") == [["p1", "First"], ["p2", "Second"]])
        #expect(try rows(path, "SELECT post_id, crossposts_id FROM post_crossposts") == [["p2", "p1"]])
        let posts = try await db.fetch(Post.self, where: #Predicate { $0.id == "p1" })
        #expect(posts.first?.subreddit?.id == .single(.text("t5_2qh1i")))
    }
}
