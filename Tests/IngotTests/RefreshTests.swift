import Foundation
import GRDB
import Testing

@testable import Ingot

/// Refreshes write only what changed, and counts mean rows: each row counts
/// once per run — inserted, updated or unchanged, stubs among the inserted — the same at every
/// batch size and in every backend; a rerun of the same pages writes nothing.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct RefreshTests {
    static let yaml = """
        version: 1
        name: refresh
        records: results
        root: person
        entities:
          person:
            identity: id
            attributes: {id: integer, name: string, score: double}
            relationships:
              dogs: {to: dog, many: true}
              friends: {to: person, many: true, ordered: true}
          dog:
            identity: id
            attributes: {id: integer, name: string}
        """

    /// Person 1 and 2 appear twice in the run (consistent records, as a cache refresh sends them).
    static let pages = [
        #"{"results": [{"id": 1, "name": "A", "dogs": [7, 8]}, {"id": 2, "name": "B", "friends": [1]}]}"#,
        #"{"results": [{"id": 1, "score": 1.5}, {"id": 3, "name": "C", "dogs": [{"id": 7, "name": "Rex"}]}]}"#,
        #"{"results": [{"id": 2, "name": "B", "friends": [1]}]}"#,
    ]

    /// The next refresh: person 1's name changed (its dogs in another order: the same set),
    /// person 2 first unchanged, then its friends changed by a later page.
    static let changed = [
        #"{"results": [{"id": 1, "name": "A!", "dogs": [8, 7]}, {"id": 2, "name": "B", "friends": [1]}]}"#,
        pages[1],
        #"{"results": [{"id": 2, "name": "B", "friends": [1, 3]}]}"#,
    ]

    private func counts(_ summary: RunSummary, _ entity: String) -> EntityCounts {
        var counts = summary.counters.entities[entity] ?? EntityCounts()
        counts.unfilled = nil
        return counts
    }

    @Test(arguments: StoreConformanceTests.Backend.allCases, [1, 2, 50])
    func eachRowCountsOncePerRun(backend: StoreConformanceTests.Backend, batchRecords: Int) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.yaml)
        let first = try harness.run(Self.pages, batchRecords)
        #expect(first.status == .finished, "\(first.error ?? "")")
        // Person 1 and 2 were inserted by this run: their later records count nothing more.
        #expect(counts(first, "person") == EntityCounts(inserted: 3))
        // Dog 7 was created as a stub and filled by the run: only dog 8 is still a stub.
        #expect(counts(first, "dog") == EntityCounts(inserted: 2, stubs: 1))
        let state = try harness.dump()

        let again = try harness.run(Self.pages, batchRecords)
        #expect(again.status == .finished, "\(again.error ?? "")")
        #expect(counts(again, "person") == EntityCounts(unchanged: 3), "\(again.counters.entities)")
        // Dog 7 is given as an object (a record of it); dog 8 only referred to.
        #expect(counts(again, "dog") == EntityCounts(unchanged: 1), "\(again.counters.entities)")
        #expect((again.counters.inserted, again.counters.updated, again.counters.unchanged) == (0, 0, 4))
        #expect(try harness.dump() == state)

        let third = try harness.run(Self.changed, batchRecords)
        #expect(third.status == .finished, "\(third.error ?? "")")
        // Person 1 changed; person 2 unchanged at first, then changed: updated, not both.
        #expect(counts(third, "person") == EntityCounts(updated: 2, unchanged: 1), "\(third.counters.entities)")
        #expect(counts(third, "dog") == EntityCounts(unchanged: 1))
    }

    /// A rerun of the same pages writes no row and no link: SQLite's triggers see no UPDATE,
    /// DELETE or INSERT.
    @Test func aRerunWritesNothingInSQLite() throws {
        let (_, db) = try ingest(Self.yaml, Self.pages, batchRecords: 2)
        try DatabaseQueue(path: db).write { db in
            try db.execute(sql: "CREATE TABLE writes (n INTEGER)")
            for table in ["person", "dog", "person_dogs", "person_friends"] {
                for event in ["INSERT", "UPDATE", "DELETE"] {
                    try db.execute(
                        sql: "CREATE TRIGGER \(table)_\(event) AFTER \(event) ON \(table) BEGIN INSERT INTO writes VALUES (1); END")
                }
            }
        }
        let (again, _) = try ingest(Self.yaml, Self.pages, db: db, batchRecords: 2)
        #expect(again.counters.unchanged == 4)
        #expect(try rows(db, "SELECT count(*) FROM writes") == [["0"]])
        let (third, _) = try ingest(Self.yaml, Self.changed, db: db, batchRecords: 2)
        #expect(third.counters.updated == 2)
        // Person 1's name (its dogs are the same set); person 2's friends, replaced as a set
        // (one link deleted, two inserted).
        #expect(try rows(db, "SELECT count(*) FROM writes") == [["4"]])
    }

    /// The same in PostgreSQL: no row version changes (`xmin`) on a rerun.
    @Test func aRerunWritesNothingInPostgreSQL() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: Self.yaml, path: "r.yml")
        func run(_ pages: [String]) -> RunSummary {
            var options = RunOptions()
            options.databasePath = url
            options.batchRecords = 2
            options.progressInterval = 0
            return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(pages))
        }
        #expect(run(Self.pages).status == .finished)
        let connection = try PGConnection(url: url)
        let versions =
            "SELECT 'p' || id, xmin::text FROM person UNION ALL SELECT 'd' || id, xmin::text FROM dog"
            + " UNION ALL SELECT 'l' || person_id || '-' || dog_id, xmin::text FROM person_dogs"
            + " UNION ALL SELECT 'f' || person_id || '-' || friends_id, xmin::text FROM person_friends ORDER BY 1"
        let before = try connection.execute(versions)
        let again = run(Self.pages)
        #expect(again.counters.unchanged == 4 && again.counters.updated == 0)
        #expect(try connection.execute(versions) == before)
        let third = run(Self.changed)
        #expect(third.counters.updated == 2)
        func byRow(_ rows: [[String?]]) -> [String: String] {
            Dictionary(uniqueKeysWithValues: rows.map { ($0[0] ?? "", $0[1] ?? "") })
        }
        let (old, new) = (byRow(before), byRow(try connection.execute(versions)))
        #expect(new.keys.filter { old[$0] != new[$0] }.sorted() == ["f2-3", "p1"], "person 1's row and person 2's new friend only")
    }
}

/// The ledger's integer set: sparse groups become bitmaps past 4,096 members; any Int64.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct IntegerSetTests {
    @Test func membersSurviveEveryRepresentation() {
        var set = IntegerSet()
        var expected: Set<Int64> = []
        var generator = SeededGenerator(seed: 18)
        let interesting: [Int64] = [0, -1, 65_535, 65_536, Int64.min, Int64.max]
        // Dense ids 1…10,000 (two groups turn into bitmaps), sparse large ones, and the edges.
        let values = Array(1...10_000) + (0..<2_000).map { _ in Int64(bitPattern: generator.next()) } + interesting
        for v in values {
            set.insert(v)
            expected.insert(v)
        }
        for v in values.prefix(5_000) where v % 3 == 0 {
            set.remove(v)
            expected.remove(v)
        }
        set.remove(Int64.min)
        expected.remove(Int64.min)
        for v in values + [10_001, -2, 123_456_789] { #expect(set.contains(v) == expected.contains(v), "\(v)") }
    }
}
