import Foundation
import GRDB
import Testing

@testable import Ingot

/// The safety net for what no check foresaw: when the database refuses a value, the records it
/// refuses are found and rejected with its message, and the rest of the batch — and the batches
/// before it in the same transaction — are saved.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct RefusedValueTests {
    static let yaml = itemPipeline("refused")

    /// Makes SQLite refuse `name = 'poison'` in `table` of database `db`, on insert and on update
    /// (a trigger raising ABORT, SQLITE_CONSTRAINT): what a user's own constraint would do.
    static func refusePoison(in db: String, table: String) throws {
        let queue = try DatabaseQueue(path: db)
        try queue.write { db in
            for event in ["INSERT", "UPDATE"] {
                try db.execute(
                    sql: """
                        CREATE TRIGGER poison_\(event.lowercased()) BEFORE \(event) ON \(table) WHEN NEW.name = 'poison'
                        BEGIN SELECT RAISE(ABORT, 'poison value refused'); END
                        """)
            }
        }
        try queue.close()
    }

    func page(_ items: [(Int, String)]) -> String {
        "[" + items.map { "{\"id\":\($0.0),\"name\":\"\($0.1)\"}" }.joined(separator: ",") + "]"
    }

    /// SQLite refuses `name = 'poison'` (a trigger raising ABORT, SQLITE_CONSTRAINT), on insert
    /// and on update. Batches of two records share one transaction, so the batch that fails
    /// has saved batches before it in the open transaction.
    @Test(arguments: [1, 2, 100])
    func aRefusedRecordIsRejectedAndTheRestSaved(batchRecords: Int) throws {
        let (seed, db) = try ingest(Self.yaml, [page([(0, "seed"), (3, "three")])])
        #expect(seed.status == .finished)
        try Self.refusePoison(in: db, table: "item")
        let logs = LogCapture()
        let pages = [
            page([(1, "one"), (2, "two"), (4, "four")]),
            page([(5, "five"), (6, "six"), (7, "poison"), (8, "eight")]),
            page([(9, "nine"), (3, "poison"), (10, "ten")]),
        ]
        let (summary, _) = try ingest(Self.yaml, pages, db: db, batchRecords: batchRecords, commitRecords: 1000, logs: logs)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(
            try rows(db, "SELECT id, name FROM item ORDER BY id") == [
                ["0", "seed"], ["1", "one"], ["2", "two"], ["3", "three"], ["4", "four"], ["5", "five"], ["6", "six"], ["8", "eight"],
                ["9", "nine"], ["10", "ten"],
            ])
        let rejects = try rows(
            db, "SELECT entity, coding_path, reason_code, source, record_index, reason FROM _ingot_rejects ORDER BY source")
        #expect(
            rejects.map { Array($0.prefix(5)) } == [
                ["item", "[2]", "unstorable", "page-2.json", "2"], ["item", "[1]", "unstorable", "page-3.json", "1"],
            ])
        #expect(rejects.first?[5].contains("the database refused it (item 7): poison value refused") == true, "\(rejects)")
        #expect(rejects.last?[5].contains("(item 3): poison value refused") == true, "\(rejects)")
        #expect(summary.counters.records == 10)
        #expect(summary.counters.rejectedRecords == 2)
        #expect(summary.counters.rejectsByReason["unstorable"] == 2)
        #expect(summary.counters.entities["item"]?.rejected == 2)
        #expect(summary.counters.inserted == 8)  // 1, 2, 4, 5, 6, 8, 9, 10
        #expect(logs.all.contains { $0.contains("msg=batch.refused") && $0.contains("poison value refused") })
        // The run row describes the last batch: a resume finds nothing left to do.
        #expect(try rows(db, "SELECT status, rejected_records FROM _ingot_runs ORDER BY started_at DESC LIMIT 1") == [["finished", "2"]])
    }

    /// A record of a page with several arrays (`records: {paths: …}`) the database refuses is named
    /// in its own array (`users[1]`), as a record the mapping rejects is, not by its place among
    /// all of the page's records.
    @Test func aRefusedSideloadIsNamedInItsOwnArray() throws {
        let (seed, db) = try ingest(RecordsLayoutTests.sideloads, [#"{"users": [{"id": 1, "name": "seed"}]}"#])
        #expect(seed.status == .finished)
        try Self.refusePoison(in: db, table: "user")
        let page =
            #"{"tickets": [{"id": 5, "subject": "a", "requester_id": 2}], "users": [{"id": 2, "name": "Bo"}, {"id": 3, "name": "poison"}]}"#
        let (summary, _) = try ingest(RecordsLayoutTests.sideloads, [page], db: db)
        #expect(summary.status == .finished && summary.counters.rejectedRecords == 1, "\(summary.counters)")
        let rejects = try rows(db, "SELECT entity, coding_path, record_index FROM _ingot_rejects")
        #expect(rejects == [["user", "users[1]", "1"]], "\(rejects)")
        #expect(try rows(db, "SELECT id, name FROM user ORDER BY id") == [["1", "seed"], ["2", "Bo"]])
    }

    /// PostgreSQL refuses a text identity too long for its unique index (SQLSTATE 54000, "index
    /// row size … exceeds btree … maximum 2704"); SQLite has no such limit. The record is
    /// rejected with PostgreSQL's message, its neighbours are saved.
    static let longYAML = """
        version: 1
        name: long
        root: key
        entities:
          key:
            identity: name
            attributes: {name: string, n: integer}
        """

    /// 3,000 letters from a fixed-seed generator: nothing PostgreSQL's compression shrinks.
    static let long: String = {
        var state: UInt64 = 42
        return String(
            (0..<3000).map { _ -> Character in
                state = state &* 6364136223846793005 &+ 1442695040888963407
                return Character(UnicodeScalar(UInt8(97 + (state >> 33) % 26)))
            })
    }()

    @Test func anIdentityTooLongForPostgreSQLsIndexIsRejected() throws {
        let (yaml, long) = (Self.longYAML, Self.long)
        let pages = ["[{\"name\":\"a\",\"n\":1},{\"name\":\"\(long)\",\"n\":2},{\"name\":\"b\",\"n\":3}]"]
        let url = try PostgresServer.freshDatabase()
        let logs = LogCapture()
        let (summary, _) = try ingest(yaml, pages, db: url, logs: logs)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT name, n FROM key ORDER BY n") == [["a", "1"], ["b", "3"]])
        let rejects = try connection.execute("SELECT coding_path, reason_code, reason FROM _ingot_rejects")
        #expect(rejects.count == 1)
        #expect(rejects.first?[0] == "[1]" && rejects.first?[1] == "unstorable")
        #expect(rejects.first?[2]?.contains("exceeds btree") == true, "\(rejects)")
        #expect(summary.counters.rejectedRecords == 1 && summary.counters.inserted == 2)
    }

    /// A staged load (a first batch of 1,200 records in no identity order, into empty tables)
    /// meets a row the database refuses in its merge — SQLite's trigger, PostgreSQL's index
    /// limit — and rejects it naming the record that gave it last, as a refusal batch by batch
    /// does: its page, coding path and index (the stage keeps each row's origin). The other
    /// 1,199 rows are stored.
    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .postgresql])
    func aStagedMergeNamesTheRecordItRefuses(backend: StoreConformanceTests.Backend) throws {
        var rng = SeededGenerator(seed: 5)
        let ids = Array(1...1200).shuffled(using: &rng)
        let postgres = backend == .postgresql
        func record(_ k: Int) -> String {
            postgres ? "{\"name\":\"k\(ids[k])\",\"n\":\(ids[k])}" : "{\"id\":\(ids[k]),\"name\":\"n\(ids[k])\"}"
        }
        var second = (700..<1200).map(record)
        second[7] = postgres ? "{\"name\":\"\(Self.long)\",\"n\":0}" : "{\"id\":\(ids[707]),\"name\":\"poison\"}"
        let pages = ["[" + (0..<700).map(record).joined(separator: ",") + "]", "[" + second.joined(separator: ",") + "]"]
        let yaml = postgres ? Self.longYAML : Self.yaml
        let db = postgres ? try PostgresServer.freshDatabase() : temporaryDirectory().appendingPathComponent("staged.db").path
        if !postgres {
            // The tables, empty, with the trigger.
            #expect(try ingest(yaml, ["[]"], db: db).summary.status == .finished)
            try Self.refusePoison(in: db, table: "item")
        }
        let logs = LogCapture()
        let (summary, _) = try ingest(yaml, pages, db: db, batchRecords: 2000, logs: logs)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(logs.all.contains { $0.contains("msg=bulk.started") }, "the load was staged")
        #expect(summary.counters.rejectedRecords == 1)
        let sql = "SELECT coding_path, source, record_index, reason_code, reason FROM _ingot_rejects"
        let rejects = postgres ? try PGConnection(url: db).execute(sql).map { $0.map { $0 ?? "NULL" } } : try rows(db, sql)
        #expect(rejects.map { Array($0.prefix(4)) } == [["[7]", "page-2.json", "7", "unstorable"]], "\(rejects)")
        #expect(rejects.first?[4].contains(postgres ? "exceeds btree" : "poison value refused") == true, "\(rejects)")
        let stored =
            postgres
            ? try PGConnection(url: db).execute("SELECT count(*) FROM key") == [["1199"]]
            : try rows(db, "SELECT count(*) FROM item") == [["1199"]]
        #expect(stored)
    }

    /// A joined run meets the same value, the record is rejected naming its place in its page,
    /// the run finished: exchanged (the default), the part that holds it is written the careful
    /// way when every unit is done, the refused row left out (`join.merged` counts it); batch by
    /// batch with positions, in a page saved in parts (batches of two records, one transaction
    /// per page), the part before it is redone and the unit done. `a`, given by units 1 and 2,
    /// holds unit 2's value.
    @Test(.hangGuard, arguments: [Loading.automatic(), .batchByBatch])
    func aJoinedRunRejectsTheRecordAndFinishes(loading: Loading) throws {
        func key(_ name: String, _ n: Int) -> String { "{\"name\":\"\(name)\",\"n\":\(n)}" }
        let pages = [
            "[\(key("a", 1)),\(key("b", 2))]",
            "[\(key("c", 3)),\(key("d", 4)),\(key(Self.long, 5)),\(key("a", 6)),\(key("f", 7))]",
        ]
        let url = try PostgresServer.freshDatabase()
        var options = RunOptions()
        options.databasePath = url
        options.batchRecords = 2
        options.progressInterval = 0
        options.join = "long"
        options.lease = 5
        options.loading = loading
        let logs = LogCapture()
        let summary = PipelineRunner(
            config: try PipelineConfig.parse(text: Self.longYAML, path: "long.yml"), options: options, logger: logs.logger
        )
        .run(source: MemoryPageSource(pages))
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let connection = try PGConnection(url: url)
        #expect(
            try connection.execute("SELECT name, n FROM key ORDER BY n") == [
                ["b", "2"], ["c", "3"], ["d", "4"], ["a", "6"], ["f", "7"],
            ])
        #expect(try connection.execute("SELECT coding_path, reason_code FROM _ingot_rejects") == [["[2]", "unstorable"]])
        #expect(try connection.execute("SELECT status FROM _ingot_joins") == [["finished"]])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_units WHERE status = 'done'") == [["2"]])
        if loading == .batchByBatch {
            #expect(logs.all.contains { $0.contains("msg=batch.refused") })
        } else {
            #expect(logs.all.contains { $0.contains("msg=join.merged") && $0.contains("rejected_records=1") }, "\(logs.all)")
            #expect(summary.counters.rejectedRecords == 1)
        }
    }

    /// Only what a record can cause is looked for: a lost connection, a full disk or a lock are
    /// failures of the run, not of a value.
    @Test func onlyDataErrorsAreRefusedValues() {
        #expect(
            StoreError.refusedValue(StoreError.sqlite(code: 19, message: "CHECK constraint failed", sql: "")) == "CHECK constraint failed")
        // 1811: SQLITE_CONSTRAINT_TRIGGER, an extended code of CONSTRAINT.
        #expect(StoreError.refusedValue(StoreError.sqlite(code: 1811, message: "trigger", sql: "")) == "trigger")
        #expect(StoreError.refusedValue(StoreError.sqlite(code: 5, message: "database is locked", sql: "")) == nil)
        #expect(StoreError.refusedValue(StoreError.sqlite(code: 13, message: "database or disk is full", sql: "")) == nil)
        #expect(StoreError.refusedValue(StoreError.postgres(message: "bad", sql: "", state: "22007")) == "bad")
        #expect(StoreError.refusedValue(StoreError.postgres(message: "too long", sql: "", state: "54000")) == "too long")
        #expect(StoreError.refusedValue(StoreError.postgres(message: "deadlock", sql: "", state: "40P01")) == nil)
        #expect(StoreError.refusedValue(StoreError.postgres(message: "gone", sql: "", state: "08006")) == nil)
        #expect(StoreError.refusedValue(StoreError.unreachable("down")) == nil)
    }

    /// Each backend classifies its own codes: the kinds say what a caller decides on, and nothing
    /// above the stores reads a result code or an SQLSTATE.
    @Test func backendsClassifyTheirOwnCodes() {
        #expect(StoreError.sqlite(code: 19, message: "", sql: "").kind == .refusedValue)
        #expect(StoreError.sqlite(code: 5, message: "", sql: "").kind == .locked)
        #expect(StoreError.sqlite(code: 262, message: "", sql: "").kind == .locked)  // SQLITE_LOCKED_SHAREDCACHE
        #expect(StoreError.sqlite(code: 13, message: "", sql: "").kind == .statement)
        #expect(StoreError.postgres(message: "", sql: "", state: "23505").kind == .refusedValue)
        #expect(StoreError.postgres(message: "", sql: "", state: "55P03").kind == .locked)
        #expect(StoreError.postgres(message: "", sql: "", state: "40P01").kind == .statement)
        #expect(StoreError.isLocked(StoreError.sqlite(code: 5, message: "", sql: "")))
        #expect(!StoreError.isLocked(StoreError.postgres(message: "", sql: "", state: "08006")))
        #expect(
            "\(StoreError.sqlite(code: 19, message: "UNIQUE constraint failed", sql: ""))" == "SQLite error 19: UNIQUE constraint failed")
    }
}
