import Foundation
import Testing

@testable import Ingot

/// A film as SWAPI's API sends it: its identity and its characters' inside URLs (a pattern that
/// also reads a bare number, so that what the encoder writes back reads the same).

/// Every property type docs/library.md lists (as `make consumer` declares them too).
private struct EveryTypeListing: IngotEntity, Codable, Equatable {
    enum Status: String, Codable, CaseIterable { case draft, live }
    enum Tier: Int, Codable { case basic = 1, pro = 2 }
    struct Dimensions: Codable, Equatable {
        var width: Double
        var height: Double
    }
    var id: Int
    var sku: UUID
    var title: String
    var price: Decimal
    var weight: Double?
    var ratio: Float?
    var stock: Int32?
    var views: Int64?
    var small: Int8?
    var unsigned: UInt16?
    var active: Bool
    var listedAt: Date?
    var page: URL?
    var status: Status
    var tier: Tier?
    var dimensions: Dimensions?
    var tags: [String]?
    enum CodingKeys: String, CodingKey {
        case id, sku, title, price, weight, ratio, stock, views, small, unsigned, active, page, status, tier, dimensions, tags
        case listedAt = "listed_at"
    }
    static let identity: [CodingKeys] = [.id]
}

private struct APIFilm: IngotEntity, Codable, Equatable {
    var id: Int
    var title: String?
    var episodeID: Int?
    var director: String?
    var producer: String?
    var releaseDate: String?
    var created: Date?
    var characters: Many<APIPerson>?
    enum CodingKeys: String, CodingKey {
        case id = "url", title, episodeID = "episode_id", director, producer, releaseDate = "release_date", created, characters
    }
    static let identity: [CodingKeys] = [.id]
    static let entityName = "film"
    static func rule(for key: CodingKeys) -> IngotRule? {
        key == .id || key == .characters ? IngotRule(pattern: "(\\d+)/?$") : nil
    }
}

private struct APIPerson: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String?
    enum CodingKeys: String, CodingKey { case id = "url", name }
    static let identity: [CodingKeys] = [.id]
    static let entityName = "person"
    static func rule(for key: CodingKeys) -> IngotRule? { key == .id ? IngotRule(pattern: "(\\d+)/?$") : nil }
}

/// Properties as Swift developers declare them: a URL, a UUID, enums of strings and of
/// integers, an exact Decimal.
private struct Product: IngotEntity, Codable, Equatable {
    enum Status: String, Codable { case active, archived }
    enum Tier: Int, Codable, CaseIterable { case basic = 1, gold = 2 }
    var id: UUID
    var homepage: URL?
    var status: Status?
    var tier: Tier?
    var price: Decimal?
    enum CodingKeys: String, CodingKey { case id, homepage, status, tier, price }
    static let identity: [CodingKeys] = [.id]
    static let entityName = "product"
}

/// A required enum of raw values that is not `CaseIterable`: no case can be named to read the
/// model with.
private struct Ticket: IngotEntity, Codable {
    enum State: String, Codable { case open, closed }
    var id: Int
    var state: State
    enum CodingKeys: String, CodingKey { case id, state }
    static let identity: [CodingKeys] = [.id]
    static let entityName = "ticket"
}

/// An event with an instant and a day (`yyyy-MM-dd`), both `Date`s in Swift.
private struct Event: IngotEntity, Codable, Equatable {
    var id: Int
    var at: Date?
    var day: Date?
    enum CodingKeys: String, CodingKey { case id, at, day }
    static let identity: [CodingKeys] = [.id]
    static func rule(for key: CodingKeys) -> IngotRule? {
        key == .day ? IngotRule(dateFormat: .pattern("yyyy-MM-dd", timeZone: "UTC")) : nil
    }
}

private struct Maker: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String?
    enum CodingKeys: String, CodingKey { case id, name }
    static let identity: [CodingKeys] = [.id]
}

private struct Toy: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String?
    var maker: Maker?
    enum CodingKeys: String, CodingKey { case id, name, maker }
    static let identity: [CodingKeys] = [.id]
}

private struct Pet: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String?
    var toys: [Toy]?
    var keeper: Ref<Keeper>?
    enum CodingKeys: String, CodingKey { case id, name, toys, keeper }
    static let identity: [CodingKeys] = [.id]
}

private struct Keeper: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String?
    var pets: [Pet]?
    enum CodingKeys: String, CodingKey { case id, name, pets }
    static let identity: [CodingKeys] = [.id]
}

struct LibraryRoundTripTests {
    /// The vendored fixture's films as an API page (`{"count", "next", "results": [...]}`, URLs).
    static func filmsPage() throws -> [UInt8] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/swapi/films.json")
        let fixture = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [[String: Any]])
        let results = try fixture.map { item -> [String: Any] in
            var record = try #require(item["fields"] as? [String: Any])
            let pk = try #require(item["pk"] as? Int)
            record["url"] = "https://swapi.dev/api/films/\(pk)/"
            record["characters"] = (record["characters"] as? [Int] ?? []).map { "https://swapi.dev/api/people/\($0)/" }
            return record
        }
        let page: [String: Any] = ["count": results.count, "next": NSNull(), "previous": NSNull(), "results": results]
        return [UInt8](try JSONSerialization.data(withJSONObject: page))
    }

    /// Every property type the docs list, out and back on both backends: ingested, fetched,
    /// encoded, ingested into a second database, fetched — equal, and the tables equal.
    @Test(arguments: libraryBackends)
    func everyPropertyTypeRoundTrips(backend: String) async throws {
        let page =
            #"[{"id": 1, "sku": "6F9619FF-8B86-D011-B42D-00C04FC964FF", "title": "Lamp", "price": "19.99", "weight": 1.25, "#
            + #""ratio": 0.5, "stock": -3, "views": 9007199254740993, "small": -8, "unsigned": 65535, "active": true, "#
            + #""listed_at": "2026-12-06T10:00:00Z", "page": "https://shop.example/lamp?ref=a%20b", "status": "live", "tier": 2, "#
            + #""dimensions": {"width": 10.5, "height": 30}, "tags": ["home", "light"]}, "#
            + #"{"id": 2, "sku": "0f8fad5b-d9cb-469f-a165-70867728950e", "title": "Mug", "price": 4, "active": false, "status": "draft"}]"#
        let (first, _) = try libraryDatabase(backend, "listings1", entities: [EveryTypeListing.self])
        #expect(try await first.ingest([EveryTypeListing].self, from: Array(page.utf8)).rejections.isEmpty)
        let fetched = try await first.fetch(EveryTypeListing.self, sortBy: [SortDescriptor(\.id)])
        #expect(fetched.count == 2 && fetched[0].price == Decimal(string: "19.99") && fetched[0].views == 9_007_199_254_740_993)
        #expect(fetched[0].listedAt == Date(timeIntervalSince1970: 1_796_551_200) && fetched[0].dimensions?.height == 30)
        let (second, _) = try libraryDatabase(backend, "listings2", entities: [EveryTypeListing.self])
        let again = try await second.ingest([EveryTypeListing].self, from: Array(try IngotJSONEncoder().encode(fetched)))
        #expect(again.rejections.isEmpty, "\(again.rejections)")
        #expect(try await second.fetch(EveryTypeListing.self, sortBy: [SortDescriptor(\.id)]) == fetched)
    }

    /// The Star Wars films from the vendored fixtures, ingested as an API page, fetched sorted by
    /// `episode_id` with their characters, encoded, and ingested into a second database: the
    /// same values and the same tables, links included.
    @Test(arguments: libraryBackends)
    func theFilmsRoundTripThroughASecondDatabase(backend: String) async throws {
        let (first, firstAt) = try libraryDatabase(backend, "films", entities: [APIFilm.self])
        let report = try await first.ingest([APIFilm].self, from: try Self.filmsPage(), at: "results")
        #expect(report.rejections.isEmpty && report.entities["film"]?.inserted == 6)
        let films = try await first.fetch(APIFilm.self, sortBy: [SortDescriptor(\.episodeID)], including: [\.characters])
        #expect(films.map(\.episodeID) == [1, 2, 3, 4, 5, 6])
        #expect(films[3].title == "A New Hope" && films[3].id == 1 && films[3].characters?.count == 18)
        let json = try IngotJSONEncoder().encode(films)

        let (second, secondAt) = try libraryDatabase(backend, "again", entities: [APIFilm.self])
        let again = try await second.ingest([APIFilm].self, from: json)
        #expect(again.rejections.isEmpty && again.entities["film"]?.inserted == 6, "\(again.rejections)")
        #expect(try await second.fetch(APIFilm.self, sortBy: [SortDescriptor(\.episodeID)], including: [\.characters]) == films)
        let model = try EntityModel(root: APIFilm.self)
        if backend == "sqlite" {
            #expect(try PostgresTests.sqliteDump(firstAt, model) == (try PostgresTests.sqliteDump(secondAt, model)))
        } else {
            #expect(try PostgresTests.postgresDump(firstAt, model) == (try PostgresTests.postgresDump(secondAt, model)))
        }
    }

    /// `IngotDatabase.inMemory` (and `.sqlite(":memory:")`): a database of its own in memory,
    /// kept between ingests for as long as the object lives, and no file made.
    @Test func anInMemoryDatabaseKeepsWhatEachIngestWrote() async throws {
        let before = Set(try FileManager.default.contentsOfDirectory(atPath: FileManager.default.currentDirectoryPath))
        let db = try IngotDatabase.inMemory(entities: [APIPerson.self])
        let people = (1...3).map { #"{"url": "https://swapi.dev/api/people/\#($0)/", "name": "p\#($0)"}"# }
        _ = try await db.ingest([APIPerson].self, from: Array(("[" + people.joined(separator: ",") + "]").utf8))
        _ = try await db.ingest([APIPerson].self, from: Array(#"[{"url": "4", "name": "p4"}, {"url": "2", "name": "two"}]"#.utf8))
        #expect(try await db.fetch(APIPerson.self, sortBy: [SortDescriptor(\.id)]).map(\.name) == ["p1", "two", "p3", "p4"])
        let other = try IngotDatabase.sqlite(":memory:", entities: [APIPerson.self])
        #expect(try await other.fetch(APIPerson.self).isEmpty, "each in-memory database is its own")
        let after = Set(try FileManager.default.contentsOfDirectory(atPath: FileManager.default.currentDirectoryPath))
        #expect(after.subtracting(before).isEmpty, "\(after.subtracting(before))")
        // close(): what was asked before it is done; after it, every call throws.
        await db.close()
        await db.close()
        await #expect(throws: StoreError.self) { _ = try await db.count(APIPerson.self) }
        await #expect(throws: StoreError.self) { _ = try await db.ingest([APIPerson].self, from: Array("[]".utf8)) }
    }

    /// `count(_:where:)` is the database's `count(*)` under the same predicate translation as
    /// `fetch`, on both backends; `fetch(_:id:)` finds one row by its identity.
    @Test(arguments: libraryBackends)
    func countAndFetchByIdentity(backend: String) async throws {
        let (db, _) = try libraryDatabase(backend, "count", entities: [APIPerson.self])
        #expect(try await db.count(APIPerson.self) == 0)
        let people = (1...12).map { #"{"url": "https://swapi.dev/api/people/\#($0)/", "name": "p\#($0 % 3)"}"# }
        _ = try await db.ingest([APIPerson].self, from: Array(("[" + people.joined(separator: ",") + "]").utf8))
        #expect(try await db.count(APIPerson.self) == 12)
        #expect(try await db.count(APIPerson.self, where: #Predicate { $0.name == "p1" }) == 4)
        #expect(try await db.count(APIPerson.self, where: #Predicate { $0.id > 10 || $0.name == "p0" }) == 5)
        // One by its identity.
        #expect(try await db.fetch(APIPerson.self, id: 7)?.name == "p1")
        #expect(try await db.fetch(APIPerson.self, id: 99) == nil)
    }

    /// A URL, a UUID, enums of raw values and a Decimal open as columns of their stored form
    /// (text, text, their raw values, a decimal) and come back as they went in, on both backends.
    @Test(arguments: libraryBackends)
    func propertiesAsSwiftDevelopersDeclareThem(backend: String) async throws {
        let (db, _) = try libraryDatabase(backend, "products", entities: [Product.self])
        let columns = Dictionary(uniqueKeysWithValues: db.model.entities[0].attributes.map { ($0.name, $0.type) })
        #expect(columns["homepage"] == .string && columns["id"] == .string && columns["status"] == .string)
        #expect(columns["tier"] == .integer && columns["price"] == .decimal)
        let json = #"""
            [{"id": "6F9619FF-8B86-D011-B42D-00C04FC964FF", "homepage": "https://shop.example.org/p/1", "status": "archived",
              "tier": 2, "price": "199.50"},
             {"id": "00000000-0000-0000-0000-000000000002", "status": "active", "tier": 1, "price": 0.10}]
            """#
        let report = try await db.ingest([Product].self, from: Array(json.utf8))
        #expect(report.rejections.isEmpty, "\(report.rejections)")
        let products = try await db.fetch(Product.self, sortBy: [SortDescriptor(\.price)])
        #expect(
            products == [
                Product(
                    id: UUID(uuidString: "00000000-0000-0000-0000-000000000002")!, homepage: nil, status: .active, tier: .basic,
                    price: Decimal(string: "0.1")),
                Product(
                    id: UUID(uuidString: "6F9619FF-8B86-D011-B42D-00C04FC964FF")!, homepage: URL(string: "https://shop.example.org/p/1"),
                    status: .archived, tier: .gold, price: Decimal(string: "199.5")),
            ])
        // In predicates as stored: an enum by its raw value, a URL and a UUID by their text, a
        // decimal as a number (SQLite too: "10.5" is not below "9" as text is).
        let more =
            #"[{"id": "00000000-0000-0000-0000-000000000003", "status": "active", "price": "9"},"#
            + #" {"id": "00000000-0000-0000-0000-000000000004", "status": "active", "price": "10.5"}]"#
        _ = try await db.ingest([Product].self, from: Array(more.utf8))
        let active = Product.Status.active
        let gold = Product.Tier.gold
        #expect(try await db.count(Product.self, where: #Predicate { $0.status == active }) == 3)
        #expect(try await db.count(Product.self, where: #Predicate { $0.tier == gold }) == 1)
        let home = URL(string: "https://shop.example.org/p/1")
        #expect(try await db.count(Product.self, where: #Predicate { $0.homepage == home }) == 1)
        let second = try #require(UUID(uuidString: "00000000-0000-0000-0000-000000000002"))
        #expect(try await db.fetch(Product.self, where: #Predicate { $0.id == second }).map(\.price) == [Decimal(string: "0.1")])
        #expect(try await db.fetch(Product.self, id: second)?.status == .active)
        let ten = Decimal(10)
        #expect(try await db.count(Product.self, where: #Predicate { ($0.price ?? 0) > ten }) == 2)
        #expect(
            try await db.fetch(Product.self, sortBy: [SortDescriptor(\.price)]).compactMap(\.price).map { "\($0)" } == [
                "0.1", "9", "10.5", "199.5",
            ])
    }

    /// A type that cannot be read is refused at open, naming the property and what to do.
    @Test func aRequiredEnumThatCannotBeNamedIsRefusedAtOpen() throws {
        do {
            _ = try IngotDatabase.inMemory(entities: [Ticket.self])
            Issue.record("opened")
        } catch {
            #expect("\(error)".contains("State at state") && "\(error)".contains("CaseIterable"), "\(error)")
        }
    }

    /// `query`: SQL of one's own for what `fetch` cannot say, each row decoded by its column
    /// names, read-only (a write fails and changes nothing), with the backend's placeholders.
    @Test(arguments: libraryBackends)
    func sqlOfOnesOwnIsReadOnly(backend: String) async throws {
        struct Group: Decodable, Equatable {
            var name: String?
            var people: Int
            var top: Double
        }
        let (db, _) = try libraryDatabase(backend, "query", entities: [APIPerson.self])
        let people = (1...7).map { #"{"url": "https://swapi.dev/api/people/\#($0)/", "name": "p\#($0 % 2)"}"# }
        _ = try await db.ingest([APIPerson].self, from: Array(("[" + people.joined(separator: ",") + "]").utf8))
        let placeholder = backend == "sqlite" ? "?" : "$1"
        let groups = try await db.query(
            Group.self,
            sql: "SELECT name, count(*) AS people, max(id) * 1.5 AS top FROM person WHERE id <= \(placeholder) GROUP BY name ORDER BY name",
            arguments: [6])
        #expect(groups == [Group(name: "p0", people: 3, top: 9), Group(name: "p1", people: 3, top: 7.5)])
        await #expect(throws: (any Error).self) { _ = try await db.query(Group.self, sql: "DELETE FROM person") }
        await #expect(throws: (any Error).self) { _ = try await db.query(Group.self, sql: "COMMIT; DELETE FROM person") }
        #expect(try await db.count(APIPerson.self) == 7)
    }

    /// SQL of one's own is read-only in every SQLite database — a file, and a database in memory
    /// (whose URI drops SQLite's read-only flag) — for every kind of statement that writes: DML,
    /// DDL, TEMP objects (a TEMP view named as a table hid the table from every later read on the
    /// shared reader), ATTACH, pragmas that set, transactions, several statements at once. Each is
    /// refused naming what it is, and nothing changes.
    @Test(
        arguments: ["file", "memory"],
        [
            ("DELETE FROM person", "DELETE"), ("INSERT INTO person (id, name) VALUES (99, 'x')", "INSERT"),
            ("UPDATE person SET name = 'x'", "UPDATE"), ("DROP TABLE person", "DROP"), ("CREATE TABLE t (a)", "CREATE"),
            ("CREATE TEMP VIEW person AS SELECT 1 AS id, 'fake' AS name", "CREATE TEMP"),
            ("CREATE TEMP TABLE t AS SELECT * FROM person", "CREATE TEMP"), ("ATTACH DATABASE ':memory:' AS other", "ATTACH"),
            ("PRAGMA user_version = 7", "PRAGMA user_version"), ("PRAGMA query_only = OFF", "PRAGMA query_only"),
            ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode"), ("BEGIN IMMEDIATE", "transaction"),
            ("SELECT 1; DELETE FROM person", "one statement at a time"),
            ("WITH x AS (SELECT 1) DELETE FROM person", "DELETE"),
        ])
    func sqlOfOnesOwnCannotWriteAnySQLiteDatabase(database: String, statement: (sql: String, named: String)) async throws {
        let db: IngotDatabase
        if database == "memory" {
            db = try IngotDatabase.inMemory(entities: [APIPerson.self])
        } else {
            db = try libraryDatabase("sqlite", "own-sql", entities: [APIPerson.self]).db
        }
        _ = try await db.ingest([APIPerson].self, from: Array(#"[{"url": "1", "name": "a"}, {"url": "2", "name": "b"}]"#.utf8))
        struct One: Decodable, Equatable { var n: Int }
        do {
            _ = try await db.query(One.self, sql: statement.sql)
            Issue.record("\(statement.sql) ran")
        } catch {
            #expect("\(error)".contains(statement.named), "\(error)")
        }
        #expect(try await db.fetch(APIPerson.self, sortBy: [SortDescriptor(\.id)]).map(\.name) == ["a", "b"])
        #expect(try await db.count(APIPerson.self) == 2)
        #expect(try await db.query(One.self, sql: "SELECT count(*) AS n FROM person") == [One(n: 2)])
        #expect(try await db.query(One.self, sql: "SELECT count(*) AS n FROM pragma_table_info('person')").first?.n ?? 0 >= 2)
        await db.close()
    }

    /// Numbers sort as numbers on both backends, in `fetch` and in `ingot export`'s keyset walk
    /// (PostgreSQL once sorted by the select list's text of a column: 10 before 9).
    @Test(arguments: libraryBackends)
    func numbersSortAsNumbers(backend: String) async throws {
        let (db, location) = try libraryDatabase(backend, "numbers", entities: [APIPerson.self])
        let people = (1...25).reversed().map { #"{"url": "https://swapi.dev/api/people/\#($0)/", "name": "p\#($0)"}"# }
        _ = try await db.ingest([APIPerson].self, from: Array(("[" + people.joined(separator: ",") + "]").utf8))
        #expect(try await db.fetch(APIPerson.self, sortBy: [SortDescriptor(\.id)]).map(\.id) == Array(1...25))
        // The reader fetches keep open sees what later ingests commit.
        _ = try await db.ingest([APIPerson].self, from: Array(#"[{"url": "26"}]"#.utf8))
        #expect(try await db.fetch(APIPerson.self, sortBy: [SortDescriptor(\.id)]).map(\.id) == Array(1...26))
        _ = try await db.ingest([APIPerson].self, from: Array(#"[{"url": "26", "name": "p26"}]"#.utf8))
        #expect(try await db.fetch(APIPerson.self, where: #Predicate { $0.id == 26 }).first?.name == "p26")
        #expect(try await db.fetch(APIPerson.self, sortBy: [SortDescriptor(\.id, order: .reverse)], limit: 3).map(\.id) == [26, 25, 24])

        let yaml = """
            version: 1
            name: people
            root: person
            entities:
              person:
                identity: id
                attributes: {id: {type: integer, key: url, pattern: "(\\\\d+)/?$", template: "https://swapi.dev/api/people/{}/"}, name: string}
            """
        let config = try PipelineConfig.parse(text: yaml, path: "people.yml")
        var exporter = try RecordExporter(config: config, location: try StoreLocation(location), entity: nil, filters: [], depth: 1)
        exporter.chunk = 4
        var ids: [Int] = []
        try exporter.forEachRecord { text in
            let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
            // The template writes the URL back: the pattern reads the number from it again.
            let url = object?["url"] as? String ?? ""
            ids.append(Int(url.split(separator: "/").last ?? "") ?? -1)
        }
        #expect(ids == Array(1...26))
    }

    /// Text compares and sorts by its bytes on both backends, whatever PostgreSQL's collation
    /// (here ICU's en-US, where "B" sorts after "b"): the same rows for the same predicate.
    @Test(arguments: libraryBackends)
    func textComparesByItsBytes(backend: String) async throws {
        let db =
            try libraryDatabase(
                backend, "text", entities: [APIPerson.self],
                createOptions: "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
            ).db
        let names = ["a", "B", "b", "Ä", "c", "_"]
        let people = names.enumerated().map { #"{"url": "\#($0 + 1)", "name": "\#($1)"}"# }
        _ = try await db.ingest([APIPerson].self, from: Array(("[" + people.joined(separator: ",") + "]").utf8))
        let below = try await db.fetch(APIPerson.self, where: #Predicate { ($0.name ?? "") < "b" }, sortBy: [SortDescriptor(\.name)])
        #expect(below.compactMap(\.name) == ["B", "_", "a"])
        let sorted = try await db.fetch(APIPerson.self, sortBy: [SortDescriptor(\.name, order: .reverse)])
        #expect(sorted.compactMap(\.name) == ["Ä", "c", "b", "a", "_", "B"])
    }

    /// Dates compare as times on both backends: an instant half a second later is later (SQLite
    /// stores "…:31Z" and "…:31.5Z", whose text order is the other way), a day meets an instant at
    /// its midnight, UTC; `nil` is NULL; `contains` of dates is refused, not answered wrongly.
    @Test(arguments: libraryBackends)
    func datesCompareAsTimes(backend: String) async throws {
        let db =
            try libraryDatabase(backend, "events", entities: [Event.self]).db
        _ = try await db.ingest(
            [Event].self,
            from: Array(
                (#"[{"id": 1, "at": "2014-12-10T14:23:31Z", "day": "2026-05-28"}, {"id": 2, "at": "2014-12-10T14:23:31.5Z", "day": "2026-05-29"},"#
                    + #" {"id": 3, "at": "2014-12-10T15:23:31+01:00"}, {"id": 4}]"#).utf8))
        let quarter = Date(timeIntervalSince1970: 1_418_221_411.25)  // 2014-12-10T14:23:31.25Z
        #expect(try await db.fetch(Event.self, where: #Predicate { ($0.at ?? quarter) > quarter }).map(\.id) == [2])
        #expect(try await db.fetch(Event.self, where: #Predicate { $0.at == nil }).map(\.id) == [4])
        let second = Date(timeIntervalSince1970: 1_418_221_411)
        #expect(try await db.fetch(Event.self, where: #Predicate { $0.at == second }, sortBy: [SortDescriptor(\.id)]).map(\.id) == [1, 3])
        let morning = Date(timeIntervalSince1970: 1_779_962_677)  // 2026-05-28T10:04:37Z
        #expect(try await db.fetch(Event.self, where: #Predicate { ($0.day ?? morning) < morning }).map(\.id) == [1])
        // Sorted as times too (by text, "…:31Z" would come after "…:31.5Z").
        let byTime = try await db.fetch(Event.self, sortBy: [SortDescriptor(\.at, order: .reverse), SortDescriptor(\.id)])
        #expect(byTime.map(\.id) == [2, 1, 3, 4])
        await #expect(throws: IngotQueryError.self) {
            try await db.fetch(Event.self, where: #Predicate { [quarter].contains($0.at ?? quarter) })
        }
    }

    /// `nested:` loads the relationships of loaded targets, named on their own types, level by
    /// level: keepers with their pets, the pets' toys, the toys' makers, and each pet's keeper.
    @Test(arguments: libraryBackends)
    func nestedRelationshipsLoadLevelByLevel(backend: String) async throws {
        let db = try libraryDatabase(backend, "keepers", entities: [Keeper.self]).db
        _ = try await db.ingest(
            [Keeper].self,
            from: Array(
                (#"[{"id": 1, "name": "Ana", "pets": [{"id": 10, "name": "Rex", "keeper": 1, "toys": [{"id": 100, "name": "ball", "maker": {"id": 7, "name": "Acme"}}]},"#
                    + #" {"id": 11, "name": "Tom", "keeper": 1, "toys": [{"id": 101, "maker": 8}, {"id": 100}]}]}, {"id": 2, "pets": []}]"#)
                    .utf8))
        let shallow = try await db.fetch(Keeper.self, sortBy: [SortDescriptor(\.id)], including: [\.pets])
        #expect(shallow[0].pets?.map(\.id) == [10, 11] && shallow[0].pets?[0].toys == nil)

        let keepers = try await db.fetch(
            Keeper.self, sortBy: [SortDescriptor(\.id)], including: [\.pets], nested: [\Pet.toys, \Toy.maker, \Pet.keeper])
        let pets = try #require(keepers.first?.pets)
        #expect(pets.map { $0.toys?.map(\.id) } == [[100], [101, 100]])
        #expect(pets[0].toys?.first?.maker == Maker(id: 7, name: "Acme"))
        #expect(pets[1].toys?.map { $0.maker?.id } == [8, 7])
        #expect(pets.map { $0.keeper?.value?.name } == ["Ana", "Ana"])
        #expect(keepers[1].pets == [])

        await #expect(throws: IngotQueryError.self) {
            try await db.fetch(Keeper.self, including: [\.pets], nested: [\Pet.name])
        }
    }
}
