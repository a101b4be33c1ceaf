import Dispatch
import Foundation
import GRDB
import Testing

@testable import Ingot

private struct Dog: IngotEntity, Hashable, Codable {
    var id: Int
    var name: String?
    var breed: String?
    enum CodingKeys: String, CodingKey { case id, name, breed }
    static let identity: [CodingKeys] = [.id]
}

private struct Person: IngotEntity, Codable, Equatable {
    var id: Int
    var firstName: String?
    var country: String?
    var score: Double?
    var dogs: Set<Dog>?
    var best: Dog?

    enum CodingKeys: String, CodingKey {
        case id, firstName = "first_name", country = "origin.country.name", score, dogs, best = "best_friend"
    }
    static let identity: [CodingKeys] = [.id]
}

private struct Planet: IngotEntity {
    var name: String
    var climate: String?
    enum CodingKeys: String, CodingKey { case name, climate }
    static let identity: [CodingKeys] = [.name]
}

private struct Film: IngotEntity, Codable, Equatable {
    var episodeID: Int
    var title: String?
    var director: String?
    var created: Date?
    var rating: Double?
    var canon: Bool?
    enum CodingKeys: String, CodingKey {
        case episodeID = "episode_id", title, director, created, rating = "meta.rating", canon
    }
    static let identity: [CodingKeys] = [.episodeID]
}

private struct SWPlanet: IngotEntity, Codable {
    var id: Int
    var name: String?
    enum CodingKeys: String, CodingKey { case id = "url", name }
    static let identity: [CodingKeys] = [.id]
    static let entityName = "planet"
    static func rule(for key: CodingKeys) -> IngotRule? { key == .id ? IngotRule(pattern: "/(\\d+)/$") : nil }
}

private struct SWPerson: IngotEntity, Codable {
    var id: Int
    var name: String?
    var height: Int?
    var mass: Double?
    var homeworld: SWPlanet?
    var seen: Date?
    var source: String?
    enum CodingKeys: String, CodingKey { case id = "url", name, height, mass, homeworld, seen = "created_at", source }
    static let identity: [CodingKeys] = [.id]
    static let entityName = "person"
    static func rule(for key: CodingKeys) -> IngotRule? {
        switch key {
        case .id, .homeworld: IngotRule(pattern: "/(\\d+)/$")
        case .height: IngotRule(values: ["unknown": nil], nullOnInvalid: true)
        case .mass: IngotRule(values: ["unknown": nil], grouping: ",")
        case .seen: IngotRule(dateFormat: .pattern("EEE MMM dd HH:mm:ss Z yyyy", timeZone: "UTC"))
        case .source: IngotRule(constValue: "swapi")
        default: nil
        }
    }
}

private struct SWFilm: IngotEntity, Codable, Hashable {
    var id: Int
    var title: String?
    var characters: Set<SWCharacter>?
    enum CodingKeys: String, CodingKey { case id, title, characters }
    static let identity: [CodingKeys] = [.id]
    static let entityName = "film"
    static func rule(for key: CodingKeys) -> IngotRule? { key == .characters ? IngotRule(inverse: "films") : nil }
}

private struct SWCharacter: IngotEntity, Codable, Hashable {
    var id: Int
    var name: String?
    var films: Set<SWFilm>?
    enum CodingKeys: String, CodingKey { case id, name, films }
    static let identity: [CodingKeys] = [.id]
    static let entityName = "character"
    static func rule(for key: CodingKeys) -> IngotRule? { key == .films ? IngotRule(inverse: "characters") : nil }
}

private struct Pokemon: IngotEntity, Codable {
    var id: Int
    var name: String?
    var types: [TypeSlot]?
    enum CodingKeys: String, CodingKey { case id, name, types }
    static let identity: [CodingKeys] = [.id]
    static func rule(for key: CodingKeys) -> IngotRule? { key == .types ? IngotRule(owned: true) : nil }
}

private struct TypeSlot: IngotEntity, Codable {
    var slot: Int?
    var type: PokeType?
    enum CodingKeys: String, CodingKey { case slot, type }
    static let identity: [CodingKeys] = []
}

private struct PokeType: IngotEntity, Codable {
    var name: String
    enum CodingKeys: String, CodingKey { case name }
    static let identity: [CodingKeys] = [.name]
}

private struct Owner: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String?
    var pets: [Pet]?
    enum CodingKeys: String, CodingKey { case id, name, pets }
    static let identity: [CodingKeys] = [.id]
}

private struct Pet: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String?
    var master: Ref<Owner>?
    enum CodingKeys: String, CodingKey { case id, name, master }
    static let identity: [CodingKeys] = [.id]
}

private struct Vet: IngotEntity, Codable, Equatable {
    var city: String
    var license: Int
    var name: String?
    enum CodingKeys: String, CodingKey { case city, license, name }
    static let identity: [CodingKeys] = [.city, .license]
}

private struct Patient: IngotEntity, Codable {
    var id: Int
    var vet: Vet?
    var vets: [Vet]?
    var clinic: Ref<Vet>?
    enum CodingKeys: String, CodingKey { case id, vet, vets, clinic }
    static let identity: [CodingKeys] = [.id]
}

private struct Transport: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String?
    var model: String?
    enum CodingKeys: String, CodingKey { case id, name, model }
    static let identity: [CodingKeys] = [.id]
}

private struct Starship: IngotEntity, Codable {
    var id: Int
    var name: String?
    var model: String?
    var hyperdriveRating: Double?
    enum CodingKeys: String, CodingKey { case id, name, model, hyperdriveRating = "hyperdrive_rating" }
    static let identity: [CodingKeys] = [.id]
    static var parent: (any IngotEntity.Type)? { Transport.self }
}

private struct Vehicle: IngotEntity, Codable {
    var id: Int
    var name: String?
    var vehicleClass: String?
    enum CodingKeys: String, CodingKey { case id, name, vehicleClass = "vehicle_class" }
    static let identity: [CodingKeys] = [.id]
    static var parent: (any IngotEntity.Type)? { Transport.self }
}

private struct Kennel: IngotEntity, Codable {
    var id: Int
    var dogs: Many<Pup>?
    enum CodingKeys: String, CodingKey { case id, dogs }
    static let identity: [CodingKeys] = [.id]
}

private struct Pup: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String?
    enum CodingKeys: String, CodingKey { case id, name }
    static let identity: [CodingKeys] = [.id]
}

/// `IngotDatabase`: Swift types' JSON saved with the pipeline's merge rules, on SQLite and
/// PostgreSQL alike.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct LibraryTests {
    private static func sqlite() throws -> (IngotDatabase, String) {
        let path = temporaryDirectory().appendingPathComponent("library.db").path
        return (try IngotDatabase.sqlite(path, entities: [Person.self]), path)
    }

    private static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// A nested graph inserted; a later page updates the rows in place: absent keys are left
    /// alone, `null` clears, a bare id links to the stored dog; a duplicate in one array is one
    /// row, the later record winning key by key.
    @Test func theMergeRulesHoldThroughIngest() async throws {
        let (db, path) = try Self.sqlite()
        let first = try await db.ingest(
            [Person].self,
            from: Self.bytes(
                #"[{"id": 1, "first_name": "Ada", "origin": {"country": {"name": "UK"}}, "score": 2.5, "dogs": [{"id": 7, "name": "Rex", "breed": "pug"}]},"#
                    + #" {"id": 2, "first_name": "Bo", "dogs": [7, {"id": 8}]}, {"id": 2, "score": 1.0}]"#))
        #expect(first.records == 3 && first.rejections.isEmpty)
        #expect(first.entities["person"]?.inserted == 2 && first.entities["dog"]?.inserted == 2)
        let second = try await db.ingest([Person].self, from: Self.bytes(#"[{"id": 1, "score": null, "dogs": [8]}]"#))
        #expect(second.entities["person"]?.updated == 1 && second.entities["person"]?.inserted == 0)
        #expect(
            try rows(path, "SELECT id, first_name, country, score FROM person ORDER BY id") == [
                ["1", "Ada", "UK", "NULL"], ["2", "Bo", "NULL", "1.0"],
            ])
        #expect(try rows(path, "SELECT id, name, breed FROM dog ORDER BY id") == [["7", "Rex", "pug"], ["8", "NULL", "NULL"]])
        #expect(try rows(path, "SELECT person_id, dog_id FROM person_dogs ORDER BY 1, 2") == [["1", "8"], ["2", "7"], ["2", "8"]])
        // Each ingest is a run `ingot` sees.
        #expect(try rows(path, "SELECT pipeline, status, records FROM _ingot_runs ORDER BY started_at, rowid").count == 2)
    }

    /// A bad element is rejected whole (no partial row: its dog is not saved either), with its
    /// entity, coding path and reason; its neighbours are saved.
    @Test func aBadElementIsRejectedAndItsNeighboursSaved() async throws {
        let (db, path) = try Self.sqlite()
        let report = try await db.ingest(
            [Person].self,
            from: Self.bytes(#"[{"id": 1}, {"id": 2, "dogs": [{"id": 9, "name": "Max"}], "score": "high"}, {"id": 3}]"#))
        #expect(report.records == 3)
        #expect(report.rejections.map(\.codingPath) == ["[1].score"])
        #expect(report.rejections.first?.entity == "person" && report.rejections.first?.reasonCode == "wrong_type")
        #expect(report.entities["person"]?.rejected == 1)
        #expect(try rows(path, "SELECT id FROM person ORDER BY id") == [["1"], ["3"]])
        #expect(try rows(path, "SELECT count(*) FROM dog") == [["0"]])
    }

    /// Records inside an envelope (`at:`), and one object alone.
    @Test func recordsInsideAnEnvelopeOrOneObject() async throws {
        let (db, path) = try Self.sqlite()
        let page = try await db.ingest(
            [Person].self, from: Self.bytes(#"{"count": 2, "next": null, "results": [{"id": 1}, {"id": 2}]}"#), at: "results")
        #expect(page.records == 2)
        let one = try await db.ingest(Person.self, from: Self.bytes(#"{"id": 3, "first_name": "Cy"}"#))
        #expect(one.records == 1)
        #expect(try rows(path, "SELECT id, first_name FROM person ORDER BY id") == [["1", "NULL"], ["2", "NULL"], ["3", "Cy"]])
        // A page without the envelope's key is a rejected page, not a crash or a thrown error.
        let missing = try await db.ingest([Person].self, from: Self.bytes(#"{"data": []}"#), at: "results")
        #expect(missing.rejections.count == 1 && missing.rejections.first?.recordIndex == nil)
    }

    /// Ingests from several tasks at once take their turn: every row is there, counted once.
    @Test(arguments: libraryBackends)
    func ingestsFromSeveralTasksAtOnce(backend: String) async throws {
        let (db, at) = try libraryDatabase(backend, "library", entities: [Person.self])
        func count(_ sql: String) throws -> [[String]] {
            if backend == "sqlite" { return try rows(at, sql) }
            return try PGConnection(url: at).execute(sql).map { $0.map { $0 ?? "NULL" } }
        }
        let reports = try await withThrowingTaskGroup(of: IngestReport.self) { group in
            for task in 0..<4 {
                group.addTask {
                    let people = (0..<50).map { #"{"id": \#(task * 100 + $0), "dogs": [\#($0)]}"# }
                    return try await db.ingest([Person].self, from: Self.bytes("[" + people.joined(separator: ",") + "]"))
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let persons: [Int] = reports.map { report -> Int in report.entities["person"]?.inserted ?? 0 }
        let dogs: [Int] = reports.map { report -> Int in (report.entities["dog"]?.inserted ?? 0) + (report.entities["dog"]?.stubs ?? 0) }
        #expect(persons.reduce(0, +) == 200)
        #expect((dogs.max() ?? 0) >= 50)
        #expect(try count("SELECT count(*), count(DISTINCT id) FROM person") == [["200", "200"]])
        #expect(try count("SELECT count(*) FROM dog") == [["50"]])
        #expect(try count("SELECT count(*) FROM person_dogs") == [["200"]])
    }

    /// A type outside the database's model is refused before anything is read; so is a
    /// database whose tables disagree with the types.
    @Test func aTypeOutsideTheModelIsRefused() async throws {
        let (db, path) = try Self.sqlite()
        await #expect(throws: StoreError.self) { try await db.ingest([Planet].self, from: Self.bytes("[]")) }
        _ = try await db.ingest([Person].self, from: Self.bytes(#"[{"id": 1}]"#))
        try await DatabaseQueue(path: path).write { try $0.execute(sql: "ALTER TABLE person RENAME COLUMN id TO pid") }
        #expect(throws: StoreError.self) { try IngotDatabase.sqlite(path, entities: [Person.self]) }
    }

    private static let films = #"""
        {"count": 6, "results": [
          {"episode_id": 4, "title": "A New Hope", "director": "George Lucas", "created": "2014-12-10T14:23:31.880000Z", "meta": {"rating": 8.6}, "canon": true},
          {"episode_id": 5, "title": "The Empire Strikes Back", "director": "Irvin Kershner", "created": "2014-12-12T11:26:24.656000Z", "meta": {"rating": 8.7}, "canon": true},
          {"episode_id": 6, "title": "Return of the Jedi", "director": "Richard Marquand", "created": "2014-12-18T10:39:33.255000Z", "meta": {"rating": 8.3}},
          {"episode_id": 1, "title": "The Phantom Menace", "director": "George Lucas", "created": "2014-12-19T16:52:55.740000Z", "meta": {"rating": 6.5}, "canon": true},
          {"episode_id": 2, "title": "Attack of the Clones", "director": "George Lucas", "created": "2014-12-20T10:57:57.886000Z", "canon": false},
          {"episode_id": 3, "title": "Revenge of the Sith", "director": "George Lucas", "created": "2014-12-20T18:49:38.403000Z", "meta": {"rating": 7.6}}
        ]}
        """#

    /// Typed reads: a `#Predicate` and `SortDescriptor`s become SQL; the rows come back as the
    /// values that were ingested (key paths, dates, doubles, booleans, NULLs).
    @Test(arguments: libraryBackends)
    func fetchFiltersSortsAndPagesInSQL(backend: String) async throws {
        let db =
            try libraryDatabase(backend, "films", entities: [Film.self]).db
        let report = try await db.ingest([Film].self, from: Self.bytes(Self.films), at: "results")
        #expect(report.entities["film"]?.inserted == 6 && report.rejections.isEmpty)

        let byEpisode = try await db.fetch(Film.self, sortBy: [SortDescriptor(\.episodeID)])
        #expect(byEpisode.map(\.episodeID) == [1, 2, 3, 4, 5, 6])
        let hope = try #require(byEpisode.first { $0.episodeID == 4 })
        #expect(hope.title == "A New Hope" && hope.rating == 8.6 && hope.canon == true)
        #expect(abs((hope.created?.timeIntervalSince1970 ?? 0) - 1_418_221_411.88) < 0.000_5)
        #expect(byEpisode[1].rating == nil && byEpisode[2].canon == nil)

        let lucas = try await db.fetch(
            Film.self, where: #Predicate { $0.director == "George Lucas" && ($0.rating ?? 0) > 7 },
            sortBy: [SortDescriptor(\.rating, order: .reverse)])
        #expect(lucas.map(\.episodeID) == [4, 3])
        let notCanon = try await db.fetch(Film.self, where: #Predicate { $0.canon != true }, sortBy: [SortDescriptor(\.episodeID)])
        #expect(notCanon.map(\.episodeID) == [2, 3, 6])
        let some = try await db.fetch(Film.self, where: #Predicate { [1, 5, 9].contains($0.episodeID) })
        #expect(some.map(\.episodeID) == [1, 5])
        let unrated = try await db.fetch(Film.self, where: #Predicate { $0.rating == nil })
        #expect(unrated.map(\.episodeID) == [2])
        let notEarly = try await db.fetch(Film.self, where: #Predicate { !($0.episodeID < 4) })
        #expect(notEarly.map(\.episodeID) == [4, 5, 6])
        // NULL first ascending (as Swift orders nil), ties by identity; a window of the result.
        let page = try await db.fetch(
            Film.self, sortBy: [SortDescriptor(\.director), SortDescriptor(\.rating)], limit: 3, offset: 1)
        #expect(page.map(\.episodeID) == [1, 3, 4])
        let byTitle = try await db.fetch(Film.self, sortBy: [SortDescriptor(\.title, order: .reverse)], limit: 2)
        #expect(byTitle.map(\.title) == ["The Phantom Menace", "The Empire Strikes Back"])
    }

    /// Relationships asked for are loaded (a to-many from its join table, a to-one from its key
    /// column), the others are `nil`; a person without dogs has an empty set, not `nil`.
    @Test(arguments: libraryBackends)
    func fetchLoadsTheRelationshipsAskedFor(backend: String) async throws {
        let db =
            try libraryDatabase(backend, "people", entities: [Person.self]).db
        _ = try await db.ingest(
            [Person].self,
            from: Self.bytes(
                #"[{"id": 1, "first_name": "Ada", "dogs": [{"id": 7, "name": "Rex"}, {"id": 8, "name": "Fido"}], "best_friend": 8},"#
                    + #" {"id": 2, "first_name": "Bo", "dogs": [7]}, {"id": 3, "first_name": "Cy", "dogs": []}]"#))
        let people = try await db.fetch(Person.self, sortBy: [SortDescriptor(\.id)], including: [\.dogs, \.best])
        #expect(people.map(\.id) == [1, 2, 3])
        #expect(people[0].dogs == [Dog(id: 7, name: "Rex"), Dog(id: 8, name: "Fido")])
        #expect(people[0].best == Dog(id: 8, name: "Fido"))
        #expect(people[1].dogs == [Dog(id: 7, name: "Rex")] && people[1].best == nil)
        #expect(people[2].dogs == [])
        let plain = try await db.fetch(Person.self, where: #Predicate { $0.id == 1 })
        #expect(plain.count == 1 && plain[0].dogs == nil && plain[0].best == nil && plain[0].firstName == "Ada")
    }

    /// Fetched values encode back into the JSON they came from (key paths nested again, NULL
    /// as null, relationships not loaded left out), and that JSON ingested into a second
    /// database gives the same values.
    @Test func fetchedValuesEncodeBackAndRoundTrip() async throws {
        let first = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("films.db").path, entities: [Film.self])
        _ = try await first.ingest([Film].self, from: Self.bytes(Self.films), at: "results")
        let films = try await first.fetch(Film.self, sortBy: [SortDescriptor(\.episodeID)])
        let json = try IngotJSONEncoder().encode(films)
        let text = String(decoding: json, as: UTF8.self)
        #expect(
            text.hasPrefix(
                #"[{"episode_id":1,"title":"The Phantom Menace","director":"George Lucas","created":"2014-12-19T16:52:55.74Z","meta":{"rating":6.5},"canon":true}"#
            ))
        #expect(
            text.contains(
                #"{"episode_id":2,"title":"Attack of the Clones","director":"George Lucas","created":"2014-12-20T10:57:57.886Z","meta":{"rating":null},"canon":false}"#
            ))
        let second = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("again.db").path, entities: [Film.self])
        let report = try await second.ingest([Film].self, from: json)
        #expect(report.rejections.isEmpty && report.entities["film"]?.inserted == 6)
        #expect(try await second.fetch(Film.self, sortBy: [SortDescriptor(\.episodeID)]) == films)

        // A graph: loaded relationships as nested objects, the rest left out.
        let (people, _) = try Self.sqlite()
        _ = try await people.ingest(
            [Person].self,
            from: Self.bytes(
                #"[{"id": 1, "origin": {"country": {"name": "UK"}}, "dogs": [{"id": 7, "name": "Rex"}], "best_friend": 7}, {"id": 2}]"#))
        let loaded = try await people.fetch(Person.self, sortBy: [SortDescriptor(\.id)], including: [\.dogs])
        let graph = String(decoding: try IngotJSONEncoder().encode(loaded), as: UTF8.self)
        #expect(
            graph
                == #"[{"id":1,"first_name":null,"origin":{"country":{"name":"UK"}},"score":null,"dogs":[{"id":7,"name":"Rex","breed":null}]},"#
                + #"{"id":2,"first_name":null,"origin":{"country":{"name":null}},"score":null,"dogs":[]}]"#)
        let copy = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("copy.db").path, entities: [Person.self])
        _ = try await copy.ingest([Person].self, from: Array(graph.utf8))
        #expect(try await copy.fetch(Person.self, sortBy: [SortDescriptor(\.id)], including: [\.dogs]) == loaded)
    }

    /// Value rules declared in Swift (`rule(for:)`) are the pipeline file's: the identity read
    /// from inside a URL before it is looked up (a record re-sent under another host is the same
    /// row), "unknown" as NULL, "1,358" as 1358, a Twitter date, a bare reference given as a URL,
    /// a constant column; a value that cannot convert is NULL where `nullOnInvalid` says so.
    @Test func valueRulesDeclaredInSwift() async throws {
        let db = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("swapi.db").path, entities: [SWPerson.self])
        let page = #"""
            {"count": 3, "results": [
              {"url": "https://swapi.co/api/people/4/", "name": "Darth Vader", "height": "202", "mass": "136", "homeworld": "https://swapi.co/api/planets/1/", "created_at": "Fri Aug 08 02:16:23 +0000 2008"},
              {"url": "https://swapi.dev/api/people/16/", "name": "Jabba", "height": "175", "mass": "1,358", "homeworld": {"url": "https://swapi.dev/api/planets/24/", "name": "Nal Hutta"}},
              {"url": "https://swapi.dev/api/people/4/", "height": "unknown", "mass": "unknown"},
              {"url": "https://swapi.dev/api/people/9/", "name": "Biggs", "height": "tall"}
            ]}
            """#
        let report = try await db.ingest([SWPerson].self, from: Array(page.utf8), at: "results")
        #expect(report.rejections.isEmpty, "\(report.rejections)")
        #expect(report.entities["person"]?.inserted == 3)
        let people = try await db.fetch(SWPerson.self, sortBy: [SortDescriptor(\.id)], including: [\.homeworld])
        #expect(people.map(\.id) == [4, 9, 16])
        #expect(people[0].name == "Darth Vader" && people[0].height == nil && people[0].mass == nil)
        #expect(people[0].homeworld?.id == 1 && people[0].homeworld?.name == nil)
        #expect(people[0].seen == Date(timeIntervalSince1970: 1_218_161_783))
        #expect(people[1].height == nil && people[1].name == "Biggs")
        #expect(people[2].mass == 1358 && people[2].height == 175 && people[2].homeworld?.name == "Nal Hutta")
        #expect(people.allSatisfy { $0.source == "swapi" })
    }

    /// Relationship rules declared in Swift: an inverse pair shares one join table, so each side
    /// reads what the other wrote; owned children (PokeAPI's type slots) are rows of their owner,
    /// replaced as a set.
    @Test func inverseAndOwnedRelationshipsDeclaredInSwift() async throws {
        let path = temporaryDirectory().appendingPathComponent("swapi.db").path
        let db = try IngotDatabase.sqlite(path, entities: [SWFilm.self])
        _ = try await db.ingest(
            [SWFilm].self, from: Self.bytes(#"[{"id": 1, "title": "A New Hope", "characters": [{"id": 1, "name": "Luke"}, 4]}]"#))
        _ = try await db.ingest([SWCharacter].self, from: Self.bytes(#"[{"id": 4, "name": "Vader", "films": [1, 2]}]"#))
        #expect(
            try rows(path, "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%film%' ORDER BY name") == [
                ["film"], ["film_characters"],
            ])
        let characters = try await db.fetch(SWCharacter.self, sortBy: [SortDescriptor(\.id)], including: [\.films])
        #expect(characters.map(\.id) == [1, 4])
        #expect(characters[0].films?.map(\.id) == [1])
        #expect(Set(characters[1].films?.map(\.id) ?? []) == [1, 2] && characters[1].name == "Vader")
        let films = try await db.fetch(SWFilm.self, sortBy: [SortDescriptor(\.id)], including: [\.characters])
        #expect(films.map(\.id) == [1, 2] && Set(films[0].characters?.map(\.id) ?? []) == [1, 4])

        let pokedex = temporaryDirectory().appendingPathComponent("pokedex.db").path
        let pokemon = try IngotDatabase.sqlite(pokedex, entities: [Pokemon.self])
        let page =
            #"[{"id": 6, "name": "charizard", "types": [{"slot": 1, "type": {"name": "fire"}}, {"slot": 2, "type": {"name": "flying"}}]}]"#
        let report = try await pokemon.ingest([Pokemon].self, from: Self.bytes(page))
        #expect(report.rejections.isEmpty, "\(report.rejections)")
        _ = try await pokemon.ingest([Pokemon].self, from: Self.bytes(#"[{"id": 6, "types": [{"slot": 1, "type": {"name": "fire"}}]}]"#))
        #expect(try rows(pokedex, "SELECT slot, type_id FROM type_slot") == [["1", "fire"]])
        #expect(try rows(pokedex, "SELECT name FROM poke_type ORDER BY name") == [["fire"], ["flying"]])
        _ = try await pokemon.ingest(
            [Pokemon].self,
            from: Self.bytes(#"[{"id": 1, "name": "bulbasaur", "types": [{"slot": 1, "type": {"name": "grass"}}, {"slot": 2}]}]"#))
        let dex = try await pokemon.fetch(Pokemon.self, sortBy: [SortDescriptor(\.id)], including: [\.types])
        #expect(dex.map { $0.types?.map(\.slot) } == [[1, 2], [1]])
        #expect(dex[0].types?.first?.type == nil, "a loaded child's own relationships are not loaded")
    }

    /// `Ref<T>`: an object or a bare id in, the id out; read back, it keeps the stored key when
    /// the target is not loaded, and carries the target when it is.
    @Test func refsKeepTheirIdentityLoadedOrNot() async throws {
        let db = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("pets.db").path, entities: [Owner.self])
        let page =
            #"[{"id": 7, "name": "Ada", "pets": [{"id": 3, "name": "Rex", "master": 7}, {"id": 4, "master": {"id": 8, "name": "Bo"}}]}]"#
        let report = try await db.ingest([Owner].self, from: Self.bytes(page))
        #expect(report.rejections.isEmpty && report.entities["owner"]?.inserted == 2)
        let pets = try await db.fetch(Pet.self, sortBy: [SortDescriptor(\.id)])
        #expect(pets.map { $0.master?.id } == [.single(.integer(7)), .single(.integer(8))])
        #expect(pets.allSatisfy { $0.master?.value == nil })
        let loaded = try await db.fetch(Pet.self, sortBy: [SortDescriptor(\.id)], including: [\.master])
        #expect(loaded.map { $0.master?.value?.name } == ["Ada", "Bo"] && loaded[1].master?.id == .single(.integer(8)))
        let owners = try await db.fetch(Owner.self, where: #Predicate { $0.id == 7 }, including: [\.pets])
        let json = String(decoding: try IngotJSONEncoder().encode(owners), as: UTF8.self)
        #expect(json == #"[{"id":7,"name":"Ada","pets":[{"id":3,"name":"Rex","master":7},{"id":4,"name":null,"master":8}]}]"#)
        // The context-bound decoder reads them too.
        let queue = DispatchQueue(label: "pets")
        try DecodingContext.bind(DecodingContext(name: "pets"), to: queue)
        let decoded = try queue.sync { try IngotJSONDecoder().decode([Owner].self, from: Self.bytes(page)) }
        #expect(decoded.first?.pets?.map { $0.master?.id } == [.single(.integer(7)), .single(.integer(8))])
        #expect(decoded.first?.pets?.last?.master?.value?.name == "Bo")
        // The output ingests back into the same rows.
        let copy = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("copy.db").path, entities: [Owner.self])
        _ = try await copy.ingest([Owner].self, from: Array(json.utf8))
        #expect(try await copy.fetch(Pet.self, sortBy: [SortDescriptor(\.id)]).map { $0.master?.id } == pets.map { $0.master?.id })
    }

    /// A composite identity, through a single object and through a to-many: one row per
    /// (city, license), updated in place, fetched and filtered on its parts.
    @Test func compositeIdentitiesThroughOneObjectAndMany() async throws {
        let path = temporaryDirectory().appendingPathComponent("vets.db").path
        let db = try IngotDatabase.sqlite(path, entities: [Patient.self])
        let page = #"""
            [{"id": 1, "vet": {"city": "Oslo", "license": 3}, "clinic": {"city": "Rome", "license": 3}, "vets": [{"city": "Oslo", "license": 3, "name": "Dr No"}, {"city": "Rome", "license": 3}]},
             {"id": 2, "vet": {"city": "Rome", "license": 3, "name": "Dr Who"}, "vets": [{"city": "Oslo", "license": 3}]}]
            """#
        let report = try await db.ingest([Patient].self, from: Self.bytes(page))
        #expect(report.rejections.isEmpty && report.entities["vet"]?.inserted == 2)
        let vets = try await db.fetch(Vet.self, sortBy: [SortDescriptor(\.city)])
        #expect(vets == [Vet(city: "Oslo", license: 3, name: "Dr No"), Vet(city: "Rome", license: 3, name: "Dr Who")])
        let rome = try await db.fetch(Vet.self, where: #Predicate { $0.city == "Rome" && $0.license == 3 })
        #expect(rome.count == 1)
        #expect(try rows(path, "SELECT count(*) FROM patient_vets") == [["3"]])
        #expect(try rows(path, "SELECT id, vet_city, vet_license FROM patient ORDER BY id") == [["1", "Oslo", "3"], ["2", "Rome", "3"]])
        // Their relationships load by the whole key, both ways round.
        let patients = try await db.fetch(Patient.self, sortBy: [SortDescriptor(\.id)], including: [\.vets, \.vet])
        #expect(patients.map { $0.vet?.name } == ["Dr No", "Dr Who"])
        #expect(patients[0].vets == vets && patients[1].vets == [vets[0]])
        // A composite Ref keeps its whole key when its target is not loaded.
        #expect(patients.map { $0.clinic?.id } == [.composite([.text("Rome"), .integer(3)]), nil])
    }

    /// Parent entities declared in Swift: starships and vehicles share transport's identity and
    /// its columns (stored once, in its table, with a `kind`); each child's own columns are in
    /// its own table; a child fetched comes back whole, joined to its parent's row.
    @Test func parentEntitiesDeclaredInSwift() async throws {
        let path = temporaryDirectory().appendingPathComponent("transport.db").path
        let db = try IngotDatabase.sqlite(path, entities: [Starship.self, Vehicle.self])
        _ = try await db.ingest(
            [Starship].self,
            from: Self.bytes(
                #"[{"id": 10, "name": "Millennium Falcon", "model": "YT-1300", "hyperdrive_rating": 0.5}, {"id": 12, "name": "X-wing"}]"#))
        _ = try await db.ingest([Vehicle].self, from: Self.bytes(#"[{"id": 4, "name": "Sand Crawler", "vehicle_class": "wheeled"}]"#))
        #expect(
            try rows(path, "SELECT id, name, kind FROM transport ORDER BY id") == [
                ["4", "Sand Crawler", "vehicle"], ["10", "Millennium Falcon", "starship"], ["12", "X-wing", "starship"],
            ])
        #expect(try rows(path, "SELECT id, hyperdrive_rating FROM starship ORDER BY id") == [["10", "0.5"], ["12", "NULL"]])
        #expect(try rows(path, "SELECT name FROM pragma_table_info('starship') ORDER BY cid") == [["id"], ["hyperdrive_rating"]])
        let ships = try await db.fetch(Starship.self, sortBy: [SortDescriptor(\.id)])
        #expect(ships.map(\.name) == ["Millennium Falcon", "X-wing"] && ships[0].model == "YT-1300")
        #expect(ships.map(\.hyperdriveRating) == [0.5, nil])
        let all = try await db.fetch(Transport.self, sortBy: [SortDescriptor(\.id)])
        #expect(all.map(\.id) == [4, 10, 12])
        let vehicles = try await db.fetch(Vehicle.self)
        #expect(vehicles.map(\.vehicleClass) == ["wheeled"] && vehicles[0].name == "Sand Crawler")
    }

    /// A child's inherited properties filter and sort like its own: the query joins the parent's
    /// table (its identity column, `id`, is in both and stays the child's own).
    @Test(arguments: libraryBackends)
    func predicatesAndSortsOnInheritedProperties(backend: String) async throws {
        let db =
            try libraryDatabase(backend, "ships", entities: [Starship.self, Vehicle.self]).db
        _ = try await db.ingest(
            [Starship].self,
            from: Self.bytes(
                #"[{"id": 10, "name": "Millennium Falcon", "model": "YT-1300", "hyperdrive_rating": 0.5},"#
                    + #" {"id": 12, "name": "X-wing", "model": "T-65", "hyperdrive_rating": 1.0},"#
                    + #" {"id": 9, "name": "Death Star", "model": "DS-1", "hyperdrive_rating": 4.0}, {"id": 5, "name": "Sentinel"}]"#))
        _ = try await db.ingest([Vehicle].self, from: Self.bytes(#"[{"id": 4, "name": "Sand Crawler", "vehicle_class": "wheeled"}]"#))
        let byName = try await db.fetch(Starship.self, sortBy: [SortDescriptor(\.name)])
        #expect(byName.map(\.id) == [9, 10, 5, 12])
        let fast = try await db.fetch(
            Starship.self, where: #Predicate { ($0.hyperdriveRating ?? 9) < 2 && $0.model != "T-65" }, sortBy: [SortDescriptor(\.model)])
        #expect(fast.map(\.name) == ["Millennium Falcon"])
        let named = try await db.fetch(
            Starship.self, where: #Predicate { ["X-wing", "Sentinel", "Sand Crawler"].contains($0.name) && $0.id > 4 },
            sortBy: [SortDescriptor(\.name, order: .reverse)], limit: 1, offset: 1)
        #expect(named.map(\.id) == [5])
        let unnamedModel = try await db.fetch(Starship.self, where: #Predicate { $0.model == nil }, sortBy: [SortDescriptor(\.id)])
        #expect(unnamedModel.map(\.id) == [5] && unnamedModel[0].name == "Sentinel")
        // Only the child's rows, never a sibling's (the Sand Crawler is a vehicle).
        #expect(try await db.fetch(Starship.self, where: #Predicate { $0.name == "Sand Crawler" }).isEmpty)
    }

    /// `Many<T>` (`[Ref<T>]`): bare ids or objects in, the ids out; loaded, each element carries
    /// its target too; not loaded, `nil`.
    @Test func manyIsAnArrayOfReferences() async throws {
        let db = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("kennel.db").path, entities: [Kennel.self])
        let page = #"[{"id": 1, "dogs": [3, {"id": 4, "name": "Rex"}, 3]}]"#
        let report = try await db.ingest([Kennel].self, from: Self.bytes(page))
        #expect(
            report.rejections.isEmpty && report.entities["pup"]?.inserted == 2 && report.entities["pup"]?.stubs == 1,
            "\(report.entities) \(report.rejections)")
        #expect(try await db.fetch(Kennel.self).first?.dogs == nil)
        let kennel = try #require(try await db.fetch(Kennel.self, including: [\.dogs]).first)
        #expect(kennel.dogs?.map(\.id) == [.single(.integer(3)), .single(.integer(4))])
        #expect(kennel.dogs?.map { $0.value } == [Pup(id: 3), Pup(id: 4, name: "Rex")])
        #expect(String(decoding: try IngotJSONEncoder().encode(kennel), as: UTF8.self) == #"{"id":1,"dogs":[3,4]}"#)
        let queue = DispatchQueue(label: "kennel")
        try DecodingContext.bind(DecodingContext(name: "kennel"), to: queue)
        let decoded = try queue.sync { try IngotJSONDecoder().decode([Kennel].self, from: Self.bytes(page)) }
        #expect(decoded.first?.dogs?.map(\.id) == [.single(.integer(3)), .single(.integer(4)), .single(.integer(3))])
        #expect(decoded.first?.dogs?[1].value?.name == "Rex")
    }

    /// What has no SQL translation is refused before a row is read, saying what does translate.
    @Test func anUntranslatablePredicateIsAnError() async throws {
        let db = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("films.db").path, entities: [Film.self])
        _ = try await db.ingest([Film].self, from: Self.bytes(Self.films), at: "results")
        await #expect(throws: IngotQueryError.self) {
            try await db.fetch(Film.self, where: #Predicate { $0.title?.isEmpty == true })
        }
        let (people, _) = try Self.sqlite()
        let error = await #expect(throws: IngotQueryError.self) {
            try await people.fetch(Person.self, sortBy: [SortDescriptor(\.dogs?.count)])
        }
        #expect(error?.message.contains("dogs") == true)
    }

    /// The same ingests end in the same tables on PostgreSQL.
    @Test func postgreSQLEndsInSQLitesState() async throws {
        let url = try PostgresServer.freshDatabase()
        let (sqlite, path) = try Self.sqlite()
        let postgres = try IngotDatabase.postgres(url, entities: [Person.self])
        let pages = [
            #"[{"id": 1, "first_name": "Ada", "origin": {"country": {"name": "UK"}}, "dogs": [{"id": 7, "name": "Rex"}, 8]}, {"id": 2, "score": "x"}]"#,
            #"[{"id": 1, "first_name": null, "score": 4.5, "dogs": [8]}, {"id": 8, "first_name": "Dee"}]"#,
        ]
        for page in pages {
            let a = try await sqlite.ingest([Person].self, from: Self.bytes(page))
            let b = try await postgres.ingest([Person].self, from: Self.bytes(page))
            #expect(a.entities == b.entities)
            #expect(a.rejections.map(\.codingPath) == b.rejections.map(\.codingPath))
        }
        let model = try EntityModel(root: Person.self)
        #expect(try PostgresTests.postgresDump(url, model) == (try PostgresTests.sqliteDump(path, model)))
        // The history reads the same from both (`ingot runs`, `ingot rejects`).
        let (pgRuns, sqliteRuns) = (try StoreLocation(url).runs(), try StoreLocation(path).runs())
        #expect(pgRuns.map(\.status) == ["finished", "finished"] && pgRuns.map(\.pipeline) == sqliteRuns.map(\.pipeline))
        #expect(pgRuns.map(\.counters) == sqliteRuns.map(\.counters))
        #expect(pgRuns.allSatisfy { $0.startedAt.hasSuffix("Z") && $0.finishedAt?.hasSuffix("Z") == true })
        #expect(try StoreLocation(url).rejections(runID: nil).map(\.1.codingPath) == ["[1].score"])
    }
}
