import Foundation
import GRDB
import GRDBSQLite
import Synchronization
import Testing

@testable import Ingot

/// Within what a staged load accepts: a key path, a to-one stubbing its target, a to-many of
/// nested objects and bare ids, an ordered to-many, a composite identity, `default:` and `const:`.
let bulkYAML = personPipeline(
    "shelter", beforeCountry: ["email: string"],
    attributes: [#"status: {type: string, default: "new"}"#, #"source: {type: string, const: "api"}"#],
    relationships: ["visits: {to: visit, many: true, ordered: true}"], dogAttributes: ["breed: string"],
    entities: ["visit:\n  identity: [clinic, day]\n  attributes: {clinic: string, day: string, note: string}"])

func bulkPage(_ records: String) -> String { #"{"results": [\#(records)]}"# }

/// The people pipeline over a generated people data set: its pages, the pipeline reading them,
/// and run options writing into a new database (`people.db`) with no progress lines.
private func peopleLoad(persons: Int, pageSize: Int, faults: Bool = false) throws -> (
    pages: String, config: PipelineConfig, options: RunOptions
) {
    let pages = try generatePeople(persons: persons, pageSize: pageSize, faults: faults)
    var config = try PipelineConfig.load(path: packageRoot.appendingPathComponent("pipelines/people.yml").path)
    config.source = .files(directory: pages, glob: "page-*.json")
    var options = RunOptions()
    options.databasePath = temporaryDirectory().appendingPathComponent("people.db").path
    options.progressInterval = 0
    return (pages, config, options)
}

/// A people load of `persons` staged (`--bulk`) in batches and commits of 100 records, stopped
/// by its source failing after `pages` pages: its pages, pipeline and options.
private func stoppedStagedLoad(persons: Int, failingAfter pages: Int) throws -> (
    pages: String, config: PipelineConfig, options: RunOptions
) {
    var (directory, config, options) = try peopleLoad(persons: persons, pageSize: 100)
    options.batchRecords = 100
    options.commitRecords = 100
    options.loading = .staged
    let failed = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
        .run(source: FailingAfter(try DirectoryPageSource(directory: directory, glob: "page-*.json"), pages: pages))
    #expect(failed.status == .failed)
    return (directory, config, options)
}

/// Records that exercise every merge rule across pages: re-sent rows, absent keys, nulls, a key
/// path's root without its leaf, sets replaced and cleared, a bare id stubbing a dog that a later
/// record fills, one that stays a stub, a duplicate within a set, a to-one given then nulled.
let bulkPages = [
    bulkPage(
        #"""
        {"id": 3, "name": "Ada", "email": "ada@x", "origin": {"country": {"name": "Chile"}}, "score": 1.5,
         "dogs": [{"id": 10, "name": "Rex"}, 11, 10], "best_friend": 11,
         "visits": [{"clinic": "north", "day": "2026-01-02", "note": "ok"}, {"clinic": "south", "day": "2026-01-03"}]},
        {"id": 1, "name": "Grace", "dogs": [12]},
        {"id": 2, "name": "Linus", "status": "vip", "dogs": []}
        """#),
    bulkPage(
        #"""
        {"id": 3, "email": null, "origin": {"country": {}}, "dogs": [{"id": 11, "breed": "pug"}]},
        {"id": 1, "score": 2, "best_friend": 12},
        {"id": 4, "name": "Hedy", "best_friend": 13}
        """#),
    bulkPage(
        #"""
        {"id": 1, "best_friend": null, "visits": [{"clinic": "south", "day": "2026-01-03", "note": "again"}]},
        {"id": 2, "dogs": [{"id": 14, "name": "Odie", "breed": null}]},
        {"id": 12, "name": "not a person"},
        {"id": 3, "name": "Ada L."}
        """#),
]

private let tables = [
    "SELECT * FROM person ORDER BY id", "SELECT * FROM dog ORDER BY id", "SELECT * FROM visit ORDER BY clinic, day",
    "SELECT * FROM person_dogs ORDER BY person_id, dog_id", "SELECT * FROM person_visits ORDER BY 1, 2, 3, 4",
]

struct BulkLoadTests {
    /// The staged merge reaches the state the batch-by-batch path reaches, whatever the batch
    /// size, and counts the same rows.
    @Test(arguments: [1, 2, 1000])
    func aStagedLoadEndsInTheSameTablesAsBatchByBatch(batchRecords: Int) throws {
        let (plain, plainDB) = try ingest(bulkYAML, bulkPages, batchRecords: batchRecords)
        let (staged, stagedDB) = try ingest(bulkYAML, bulkPages, batchRecords: batchRecords, bulk: true)
        #expect(plain.status == .finished && staged.status == .finished, "\(staged.error ?? "")")
        for sql in tables {
            #expect(try rows(stagedDB, sql) == rows(plainDB, sql), "\(sql)")
        }
        for entity in ["person", "dog", "visit"] {
            #expect(staged.counters.entities[entity]?.inserted == plain.counters.entities[entity]?.inserted, "\(entity)")
            #expect(staged.counters.entities[entity]?.stubs == plain.counters.entities[entity]?.stubs, "\(entity)")
        }
        #expect(staged.counters.inserted == plain.counters.inserted)
        // The rules, read off the merged tables themselves.
        #expect(
            try rows(stagedDB, "SELECT id, name, email, country, score, status, source FROM person ORDER BY id") == [
                ["1", "Grace", "NULL", "NULL", "2.0", "new", "api"],
                ["2", "Linus", "NULL", "NULL", "NULL", "vip", "api"],
                ["3", "Ada L.", "NULL", "NULL", "1.5", "new", "api"],
                ["4", "Hedy", "NULL", "NULL", "NULL", "new", "api"],
                ["12", "not a person", "NULL", "NULL", "NULL", "new", "api"],
            ])
        #expect(try rows(stagedDB, "SELECT id, best_id FROM person WHERE best_id IS NOT NULL ORDER BY id") == [["3", "11"], ["4", "13"]])
        #expect(
            try rows(stagedDB, "SELECT person_id, dog_id FROM person_dogs ORDER BY 1, 2") == [["1", "12"], ["2", "14"], ["3", "11"]])
        #expect(
            try rows(stagedDB, "SELECT id, name, breed FROM dog WHERE id IN (11, 13) ORDER BY id") == [
                ["11", "NULL", "pug"], ["13", "NULL", "NULL"],
            ])
        #expect(staged.counters.entities["dog"]?.stubs == 2, "13 and 12 (a bare id never sent as an object): \(staged.counters.entities)")
        // The staging file goes once merged, and left no staged row in the database.
        #expect(!FileManager.default.fileExists(atPath: stageFile(stagedDB)))
        #expect(try rows(stagedDB, "PRAGMA freelist_count") == [["0"]])
    }

    /// Into tables that hold rows, a staged load merges as batch by batch does: stored rows
    /// updated where the records differ (sets replaced where they differ), rows only referred
    /// to left alone, new rows inserted; each row counted once. Loaded again, nothing changes and
    /// nothing is written.
    @Test(arguments: [1, 1000])
    func aStagedLoadMergesIntoStoredRows(batchRecords: Int) throws {
        // What is stored first: some of the persons and dogs, other values, other sets.
        let before = bulkPage(
            #"""
            {"id": 3, "name": "Ada", "email": "old@x", "score": 9.5, "dogs": [{"id": 10, "name": "Rex"}, 12],
             "visits": [{"clinic": "south", "day": "2026-01-03"}, {"clinic": "north", "day": "2026-01-02", "note": "ok"}]},
            {"id": 2, "name": "Linus", "status": "vip", "dogs": []},
            {"id": 7, "name": "Untouched", "dogs": [10], "best_friend": 11}
            """#)
        let (first, plainDB) = try ingest(bulkYAML, [before])
        #expect(first.status == .finished, "\(first.error ?? "")")
        let stagedDB = temporaryDirectory().appendingPathComponent("staged.db").path
        try FileManager.default.copyItem(atPath: plainDB, toPath: stagedDB)
        let (plain, _) = try ingest(bulkYAML, bulkPages, db: plainDB, batchRecords: batchRecords)
        let (staged, _) = try ingest(bulkYAML, bulkPages, db: stagedDB, batchRecords: batchRecords, bulk: true)
        #expect(plain.status == .finished && staged.status == .finished, "\(staged.error ?? "")")
        for sql in tables {
            #expect(try rows(stagedDB, sql) == rows(plainDB, sql), "\(sql)")
        }
        // Person 7 and its links are as they were; person 2's status kept (absent), its set replaced.
        #expect(try rows(stagedDB, "SELECT id, name, best_id FROM person WHERE id = 7") == [["7", "Untouched", "11"]])
        #expect(try rows(stagedDB, "SELECT dog_id FROM person_dogs WHERE person_id = 7") == [["10"]])
        #expect(try rows(stagedDB, "SELECT status FROM person WHERE id = 2") == [["vip"]])
        let person = staged.counters.entities["person"]
        #expect(person?.inserted == 3, "1, 4 and 12: \(staged.counters.entities)")
        #expect(person?.updated == 2, "2 (its dogs) and 3: \(staged.counters.entities)")
        #expect(person?.unchanged == 0)
        #expect(
            staged.counters.entities["dog"]?.updated == 1, "10 is not given again; 11, a stub, gets a breed: \(staged.counters.entities)")
        for entity in ["person", "dog", "visit"] {
            #expect(staged.counters.entities[entity]?.inserted == plain.counters.entities[entity]?.inserted, "\(entity)")
        }

        // Again: equal rows and sets are not written (a trigger on each table would see them).
        let queue = try DatabaseQueue(path: stagedDB)
        try queue.write { db in
            try db.execute(sql: "CREATE TABLE writes (n)")
            for table in ["person", "dog", "visit", "person_dogs", "person_visits"] {
                try db.execute(sql: "CREATE TRIGGER w_\(table)_u AFTER UPDATE ON \(table) BEGIN INSERT INTO writes VALUES (1); END")
                try db.execute(sql: "CREATE TRIGGER w_\(table)_i AFTER INSERT ON \(table) BEGIN INSERT INTO writes VALUES (1); END")
                try db.execute(sql: "CREATE TRIGGER w_\(table)_d AFTER DELETE ON \(table) BEGIN INSERT INTO writes VALUES (1); END")
            }
        }
        try queue.close()
        let (again, _) = try ingest(bulkYAML, bulkPages, db: stagedDB, batchRecords: batchRecords, bulk: true)
        #expect(again.status == .finished, "\(again.error ?? "")")
        #expect(try rows(stagedDB, "SELECT count(*) FROM writes") == [["0"]])
        #expect(again.counters.inserted == 0 && again.counters.updated == 0, "\(again.counters.entities)")
        #expect(again.counters.entities["person"]?.unchanged == 5, "\(again.counters.entities)")
        for sql in tables {
            #expect(try rows(stagedDB, sql) == rows(plainDB, sql), "\(sql)")
        }
    }

    /// A load turns staged at the first commit after which the database holds
    /// `stageAfterBytes`: the rows written batch by batch stay counted as they were, the rest is
    /// merged at the end into the same tables, with the same rows inserted.
    @Test(arguments: [1, 2])
    func aLoadTurnsStagedOnceItsDatabaseOutgrowsTheCache(batchRecords: Int) throws {
        let logs = LogCapture()
        let (plain, plainDB) = try ingest(bulkYAML, bulkPages, batchRecords: batchRecords, commitRecords: batchRecords)
        let (turned, turnedDB) = try ingest(
            bulkYAML, bulkPages, batchRecords: batchRecords, commitRecords: batchRecords, logs: logs, stageAfterBytes: 1)
        #expect(plain.status == .finished && turned.status == .finished, "\(turned.error ?? "")")
        for sql in tables {
            #expect(try rows(turnedDB, sql) == rows(plainDB, sql), "\(sql)")
        }
        // Every count as batch by batch (no record here changes a value and changes it back).
        for entity in ["person", "dog", "visit"] {
            #expect(turned.counters.entities[entity] == plain.counters.entities[entity], "\(entity)")
        }
        // Batch by batch first (a row in the tables before the merge), staged after.
        let started = logs.all.firstIndex { $0.contains("msg=bulk.started") }
        let merging = logs.all.firstIndex { $0.contains("msg=bulk.merging") }
        if let started, let merging { #expect(started < merging) } else { Issue.record("no bulk.started then bulk.merging: \(logs.all)") }
        #expect(!FileManager.default.fileExists(atPath: stageFile(turnedDB)))
        // Not with --no-bulk, nor below the size.
        let neverLogs = LogCapture()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "b.yml")
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("never.db").path
        options.progressInterval = 0
        options.batchRecords = batchRecords
        options.commitRecords = batchRecords
        options.loading = .batchByBatch
        let never = PipelineRunner(config: config, options: options, logger: neverLogs.logger).run(source: MemoryPageSource(bulkPages))
        #expect(never.status == .finished)
        #expect(!neverLogs.all.contains { $0.contains("msg=bulk.") }, "\(neverLogs.all)")
        let (_, _) = try ingest(bulkYAML, bulkPages, batchRecords: batchRecords, logs: neverLogs)
        #expect(!neverLogs.all.contains { $0.contains("msg=bulk.") }, "the default size is not reached: \(neverLogs.all)")
    }

    /// Past the size, a load turns staged only when its records come in no identity order:
    /// records whose identities come in order append to the tables, which batch by batch does
    /// cheaply at any size (sixteen million `{"id":n}` took 8.7 s so, 21.6 s staged).
    @Test func onlyALoadInNoIdentityOrderTurnsStaged() throws {
        let yaml = itemPipeline("items", "records: results")
        let n = 30000
        func pages(_ id: (Int) -> Int) -> [String] {
            stride(from: 0, to: n, by: 1000).map { start in
                bulkPage((start..<start + 1000).map { #"{"id": \#(id($0)), "name": "item \#(id($0))"}"# }.joined(separator: ","))
            }
        }
        // 7919 is prime to 30000: every id once, scattered.
        for (ordered, id) in [(true, { (k: Int) in k }), (false, { (k: Int) in k * 7919 % n })] {
            let logs = LogCapture()
            let (summary, db) = try ingest(
                yaml, pages(id), batchRecords: 1000, commitRecords: 1000, logs: logs, stageAfterBytes: 64 << 10)
            #expect(summary.status == .finished, "\(summary.error ?? "")")
            #expect(try rows(db, "SELECT count(*), count(DISTINCT id) FROM item") == [["\(n)", "\(n)"]])
            let turned = logs.all.contains { $0.contains("msg=bulk.started") }
            #expect(turned == !ordered, "ordered \(ordered): \(logs.all.filter { $0.contains("bulk.") })")
        }
    }

    /// The people data set turned staged midway (bad records and pages included) loads exactly,
    /// counting the rows a batch-by-batch run counts as inserted, and resumes exactly after a
    /// failure once staged.
    @Test func thePeopleDataSetTurnsStagedAndResumes() throws {
        var (pages, config, options) = try peopleLoad(persons: 2000, pageSize: 100, faults: true)
        options.batchRecords = 300
        options.commitRecords = 300
        options.databasePath = temporaryDirectory().appendingPathComponent("plain.db").path
        let plain = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: try DirectoryPageSource(directory: pages, glob: "page-*.json"))
        // 300 KB: a few batches in.
        options.loading = .automatic(afterBytes: 300_000)
        options.databasePath = temporaryDirectory().appendingPathComponent("turned.db").path
        let logs = LogCapture()
        let turned = PipelineRunner(config: config, options: options, logger: logs.logger)
            .run(source: try DirectoryPageSource(directory: pages, glob: "page-*.json"))
        #expect(plain.status == .finished && turned.status == .finished, "\(turned.error ?? "")")
        #expect(logs.all.contains { $0.contains("msg=bulk.started") }, "\(logs.all.suffix(5))")
        // The summaries say what each plan turned into.
        #expect(plain.loaded == "batch by batch", "\(plain.loaded ?? "")")
        let started = logs.all.first { $0.contains("msg=bulk.started") }?.split(separator: " ").first { $0.hasPrefix("records=") } ?? ""
        let loaded = turned.loaded ?? ""
        #expect(
            loaded.hasPrefix("batch by batch, then staged after \(started.filter(\.isNumber)) records, ")
                && loaded.hasSuffix(" rows merged"),
            "\(loaded) / \(started)")
        #expect(try checkPeople(options.databasePath, pages).contains(#""ok": true"#))
        #expect(turned.counters.inserted == plain.counters.inserted)
        #expect(turned.counters.rejectedRecords == plain.counters.rejectedRecords)
        #expect(turned.counters.rejectedPages == plain.counters.rejectedPages)

        // Stopped once staged (two pages before the end), resumed as it was started: exact.
        options.databasePath = temporaryDirectory().appendingPathComponent("resumed.db").path
        let failedLogs = LogCapture()
        let pageCount = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.count
        let failed = PipelineRunner(config: config, options: options, logger: failedLogs.logger)
            .run(source: FailingAfter(try DirectoryPageSource(directory: pages, glob: "page-*.json"), pages: pageCount - 2))
        #expect(failed.status == .failed)
        #expect(failedLogs.all.contains { $0.contains("msg=bulk.started") }, "\(failedLogs.all.suffix(5))")
        options.resume = true
        let resumed = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(try checkPeople(options.databasePath, pages).contains(#""ok": true"#))
    }

    /// A stop during a merge interrupts its fold thread's statement as well as the writer's: the
    /// merge throws (no thread left waiting), its transaction rolls back — the tables as they
    /// were, the staged rows kept — and the load resumes exactly.
    @Test func aStopInterruptsTheMergesFoldThread() throws {
        // More folded rows than the chunks in flight hold (``MergeChannel/room``, chunks of
        // 16 KiB here: about 28 of the persons'), so the fold is still reading when the writer
        // meets the first stored row.
        var (pages, config, options) = try peopleLoad(persons: 3000, pageSize: 300)
        let db = options.databasePath
        let plain = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: try DirectoryPageSource(directory: pages, glob: "page-*.json"))
        #expect(plain.status == .finished)
        // Staged again, the source failing after its last page: the staged rows stay unmerged.
        options.loading = .staged
        let pageCount = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.count
        let staged = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: FailingAfter(try DirectoryPageSource(directory: pages, glob: "page-*.json"), pages: pageCount))
        #expect(staged.status == .failed)
        let before = try rows(db, "SELECT count(*), sum(length(first_name)), (SELECT count(*) FROM person_dogs) FROM person")
        let stagedRows = try rows(stageFile(db), "SELECT count(*) FROM _ingot_stage_person")
        #expect(Int(stagedRows[0][0]) ?? 0 >= 3000)

        var storeOptions = SQLiteStore.Options()
        storeOptions.pipeline = config.name
        storeOptions.plan = .sqliteStaged
        storeOptions.resuming = true
        storeOptions.folds.chunkBytes = 16 << 10
        let store = try SQLiteStore(path: db, model: config.model, options: storeOptions)
        var stops = 0
        #expect(throws: StoreError.self) {
            _ = try store.mergeStaged(
                fills: [],
                stored: { _, _, _ in
                    stops += 1
                    if stops == 1 { store.interrupt() }
                }, refused: { _, _, _, _ in })
        }
        try store.rollback()
        try store.close()
        #expect(stops >= 1 && stops < 3000, "the merge stopped partway: \(stops) stored rows reached")
        #expect(try rows(db, "SELECT count(*), sum(length(first_name)), (SELECT count(*) FROM person_dogs) FROM person") == before)
        #expect(try rows(stageFile(db), "SELECT count(*) FROM _ingot_stage_person") == stagedRows)

        options.resume = true
        let resumed = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))
    }

    /// A first load's merge drops the foreign keys' indexes of its empty tables and builds them
    /// after its rows, in its own transaction: a merge stopped past the drop leaves the index as
    /// it was; the merged load has it (and its queries use it); a merge into tables that hold
    /// rows keeps it throughout.
    @Test func aFirstLoadsMergeBuildsTheForeignKeysIndexesAfterItsRows() throws {
        var (pages, config, options) = try stoppedStagedLoad(persons: 1500, failingAfter: 6)
        let db = options.databasePath
        let index = "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'person_dogs_dog_id'"
        let definition = try rows(db, index)
        #expect(definition.count == 1)

        let store = Mutex<SQLiteStore?>(nil)
        let statements = Mutex<[String]>([])
        var storeOptions = SQLiteStore.Options()
        storeOptions.pipeline = config.name
        storeOptions.plan = .sqliteStaged
        storeOptions.resuming = true
        storeOptions.statementObserver = { sql in
            statements.withLock { $0.append(sql) }
            if sql.hasPrefix("INSERT INTO \"person\"") { store.withLock { $0?.interrupt() } }
        }
        let stopped = try SQLiteStore(path: db, model: config.model, options: storeOptions)
        store.withLock { $0 = stopped }
        #expect(throws: StoreError.self) { _ = try stopped.mergeStaged(fills: [], stored: { _, _, _ in }, refused: { _, _, _, _ in }) }
        try stopped.rollback()
        store.withLock { $0 = nil }
        try stopped.close()
        #expect(statements.withLock { $0.contains { $0.hasPrefix("DROP INDEX \"person_dogs_dog_id\"") } })
        #expect(try rows(db, index) == definition)
        #expect(try rows(db, "SELECT count(*) FROM person") == [["0"]])

        options.resume = true
        let resumed = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))
        #expect(try rows(db, index) == definition)
        #expect(try rows(db, "PRAGMA integrity_check") == [["ok"]])
        let plan = try rows(db, "EXPLAIN QUERY PLAN SELECT person_id FROM person_dogs WHERE dog_id = 5").flatMap { $0 }
        #expect(plan.contains { $0.contains("person_dogs_dog_id") }, "\(plan)")

        // Staged again into the filled tables: nothing dropped.
        statements.withLock { $0.removeAll() }
        options.resume = false
        options.fullRefresh = true
        options.statementObserver = { sql in statements.withLock { $0.append(sql) } }
        let logs = LogCapture()
        let again = PipelineRunner(config: config, options: options, logger: logs.logger)
            .run(source: try DirectoryPageSource(directory: pages, glob: "page-*.json"))
        #expect(again.status == .finished, "\(again.error ?? "")")
        #expect(logs.all.contains { $0.contains("msg=bulk.merged") }, "the pages merged again")
        #expect(statements.withLock { !$0.contains { $0.hasPrefix("DROP INDEX") } })
        #expect(try rows(db, index) == definition)
    }

    /// A staged load of `config` from `source` into `db` in batches of 2 records, its folds
    /// reading the staging tables as `folds` say.
    private func stagedLoad(_ config: PipelineConfig, _ source: any PageSource, db: String, folds: FoldSettings) throws -> RunSummary {
        var storeOptions = SQLiteStore.Options()
        storeOptions.plan = .sqliteStaged
        storeOptions.folds = folds
        let store = try SQLiteStore(path: db, model: config.model, options: storeOptions)
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        options.batchRecords = 2
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source, store: store)
        try store.close()
        return summary
    }

    /// Folds that read the staging tables otherwise than by a cursor a run end in the tables such
    /// folds make: through buffers a slice at a time (``BufferedRunMerge``, here every table of
    /// more than one run), or sorted whole by SQLite and folded in two parts at once, split at a
    /// median identity sampled from the staged rows (``FoldPart``; here every table, however
    /// small) — the merge rules' pages (re-sent rows, nulls, stubs, a composite identity), and the
    /// people data set, exactly.
    @Test(arguments: [FoldRead.buffered, .sortedInTwoParts])
    func foldsReadingOtherwiseEndAsCursorsDo(read: FoldRead) throws {
        var folds = FoldSettings()
        switch read {
        case .buffered: folds.cursorRuns = 1
        case .sortedInTwoParts:
            folds.readsRuns = false
            folds.splitRows = 1
        }
        let pages = bulkPages + bulkPages.reversed()
        let (plain, plainDB) = try ingest(bulkYAML, pages, batchRecords: 2)
        let otherDB = temporaryDirectory().appendingPathComponent("other.db").path
        let other = try stagedLoad(
            try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml"), MemoryPageSource(pages), db: otherDB, folds: folds)
        #expect(other.status == .finished && plain.status == .finished, "\(other.error ?? "")")
        for sql in tables { #expect(try rows(otherDB, sql) == rows(plainDB, sql), "\(sql)") }
        #expect(other.counters.inserted == plain.counters.inserted)
        let (directory, config, options) = try peopleLoad(persons: 2000, pageSize: 100, faults: true)
        let people = try stagedLoad(
            config, try DirectoryPageSource(directory: directory, glob: "page-*.json"), db: options.databasePath, folds: folds)
        #expect(people.status == .finished, "\(people.error ?? "")")
        let check = try checkPeople(options.databasePath, directory)
        #expect(check.contains(#""ok": true"#), "\(check)")
    }

    enum FoldRead: CaseIterable, Sendable { case buffered, sortedInTwoParts }

    /// The people data set (bad records and pages included) loads exactly.
    @Test func thePeopleDataSetLoadsExactly() throws {
        var (pages, config, options) = try peopleLoad(persons: 2000, pageSize: 100, faults: true)
        options.batchRecords = 300
        options.loading = .staged
        let logs = LogCapture()
        let summary = PipelineRunner(config: config, options: options, logger: logs.logger)
            .run(source: try DirectoryPageSource(directory: pages, glob: "page-*.json"))
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let check = try checkPeople(options.databasePath, pages)
        #expect(check.contains(#""ok": true"#), "\(check)")
        let merging = logs.all.firstIndex { $0.contains("msg=bulk.merging") && $0.contains("records=") }
        let merged = logs.all.firstIndex { $0.contains("msg=bulk.merged") && $0.contains("rows=") }
        if let merging, let merged { #expect(merging < merged) } else { Issue.record("no bulk.merging then bulk.merged: \(logs.all)") }
    }

    /// A staged load stopped by a failure keeps what it committed in the staging tables (the
    /// tables stay empty); a run without `--bulk` refuses to start over it; `--bulk --resume`
    /// finishes it exactly.
    @Test func aFailedStagedLoadResumes() throws {
        var (pages, config, options) = try stoppedStagedLoad(persons: 1500, failingAfter: 6)
        let db = options.databasePath
        #expect(try rows(db, "SELECT count(*) FROM person") == [["0"]])
        #expect(try Int(rows(stageFile(db), "SELECT count(*) FROM _ingot_stage_person")[0][0]) ?? 0 >= 500)

        var never = options
        never.loading = .batchByBatch
        never.resume = true
        let refused = PipelineRunner(config: config, options: never, logger: LogCapture().logger).run()
        #expect(refused.status == .failed)
        #expect(refused.error?.contains("resume it with --resume, without --no-bulk") == true, "\(refused.error ?? "")")
        var fresh = options
        fresh.loading = .automatic()
        let refusedFresh = PipelineRunner(config: config, options: fresh, logger: LogCapture().logger).run()
        #expect(refusedFresh.status == .failed, "a run that is not a resume does not merge another run's staged rows")

        // Resumed without --bulk: the load goes on staged.
        options.loading = .automatic()
        options.resume = true
        let resumed = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        let check = try checkPeople(db, pages)
        #expect(check.contains(#""ok": true"#), "\(check)")
    }

    /// The staging file commits before the database's resume point (StageFile): a stop between
    /// the two leaves the next pages' rows staged past the resume point. The resumed run stages
    /// them again, and the load ends exact.
    @Test func rowsStagedPastTheResumePointAreHarmless() throws {
        var (pages, config, options) = try stoppedStagedLoad(persons: 1500, failingAfter: 6)
        let db = options.databasePath
        let resumePoint = try Int(rows(db, "SELECT last_seq FROM _ingot_runs")[0][0]) ?? -1
        let files = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.sorted()
        #expect(resumePoint >= 1 && resumePoint + 3 < files.count, "resume point \(resumePoint)")

        // The three pages after the resume point, staged by a load of their own that stops
        // before its merge; their rows appended to the first load's staging file.
        let next = temporaryDirectory()
        for file in files[(resumePoint + 1)...(resumePoint + 3)] {
            try FileManager.default.copyItem(atPath: pages + "/" + file, toPath: next.appendingPathComponent(file).path)
        }
        var scratch = options
        scratch.databasePath = temporaryDirectory().appendingPathComponent("scratch.db").path
        let partial = PipelineRunner(config: config, options: scratch, logger: LogCapture().logger)
            .run(source: FailingAfter(try DirectoryPageSource(directory: next.path, glob: "page-*.json"), pages: 3))
        #expect(partial.status == .failed)
        let before = try Int(rows(stageFile(db), "SELECT count(*) FROM _ingot_stage_person")[0][0]) ?? 0
        let queue = try DatabaseQueue(path: stageFile(db))
        try queue.writeWithoutTransaction { stage in
            try stage.execute(sql: "ATTACH DATABASE ? AS scratch", arguments: [stageFile(scratch.databasePath)])
            try stage.inTransaction {
                // The rows with their sorted runs (StagedRuns.swift), as a staged batch commits them.
                for table in ["_ingot_stage_person", "_ingot_stage_dog"] {
                    let base = try Int64.fetchOne(stage, sql: "SELECT coalesce(max(rowid), 0) FROM \(table)") ?? 0
                    try stage.execute(sql: "INSERT INTO \(table) SELECT * FROM scratch.\(table) ORDER BY rowid")
                    try stage.execute(
                        sql:
                            "INSERT INTO _ingot_stage_runs SELECT stage, first + ?1, last + ?1 FROM scratch._ingot_stage_runs WHERE stage = ?2",
                        arguments: [base, table])
                }
                return .commit
            }
            try stage.execute(sql: "DETACH DATABASE scratch")
        }
        try queue.close()
        #expect(try Int(rows(stageFile(db), "SELECT count(*) FROM _ingot_stage_person")[0][0]) ?? 0 >= before + 250)

        options.resume = true
        let resumed = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        let check = try checkPeople(db, pages)
        #expect(check.contains(#""ok": true"#), "\(check)")
        #expect(!FileManager.default.fileExists(atPath: stageFile(db)))
    }

    /// A staged load's state is its pipeline's: after its staging file is lost, a run of another
    /// pipeline into the same database (which stages too) leaves the load's token, origin and
    /// kept values alone, and the load's `--resume` goes back to where it began and ends exact
    /// (it ended `finished` with the rows of the staged pages missing).
    @Test func aLostStagingFileIsNotForgottenByAnotherPipeline() throws {
        let (pages, config, options) = try stoppedStagedLoad(persons: 400, failingAfter: 3)
        let db = options.databasePath
        try FileManager.default.removeItem(atPath: stageFile(db))
        #expect(try rows(db, "SELECT count(*) FROM person") == [["0"]])
        try DatabaseQueue(path: db).write { db in
            try db.execute(sql: "INSERT INTO _ingot_state (pipeline, key, value) VALUES ('people', 'incremental:kept', 'mine')")
        }

        // Another pipeline, staged from its first batch (tables of its own, all empty), twice.
        let other = itemPipeline("other", "records: results")
        for _ in 0..<2 {
            let (summary, _) = try ingest(other, [#"{"results": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}"#], db: db, bulk: true)
            #expect(summary.status == .finished, "\(summary.error ?? "")")
        }
        #expect(try rows(db, "SELECT count(*) FROM _ingot_state WHERE pipeline = '' AND key LIKE 'staged_load%:people'") == [["2"]])

        var resume = options
        resume.resume = true
        let resumed = PipelineRunner(config: config, options: resume, logger: LogCapture().logger).run()
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        let check = try checkPeople(db, pages)
        #expect(check.contains(#""ok": true"#), "\(check)")
        #expect(try rows(db, "SELECT count(*) FROM item") == [["2"]])
        #expect(try rows(db, "SELECT count(*) FROM _ingot_state WHERE key LIKE 'staged_load%'") == [["0"]])
    }

    /// A staging file no unfinished load of the database holds (another load's, or one whose
    /// load stopped before its first commit) goes when a run opens the database; a resume whose
    /// staging file is gone goes back to where the load began and stages its pages again (it was
    /// refused), and a run that is not a resume reads every page again and ends exact.
    @Test func aStrayStagingFileGoesAndAMissingOneIsStagedAgain() throws {
        let (pages, config, options) = try stoppedStagedLoad(persons: 600, failingAfter: 3)
        let db = options.databasePath
        try FileManager.default.removeItem(atPath: stageFile(db))

        var resume = options
        resume.resume = true
        let restaged = PipelineRunner(config: config, options: resume, logger: LogCapture().logger).run()
        #expect(restaged.status == .finished, "\(restaged.error ?? "")")
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))

        // Another load's file where this database's would be.
        let stray = try DatabaseQueue(path: stageFile(db))
        try stray.write { stage in
            try stage.execute(sql: "CREATE TABLE _ingot_stage_meta (token TEXT NOT NULL); INSERT INTO _ingot_stage_meta VALUES ('another')")
        }
        try stray.close()
        var plain = options
        plain.loading = .automatic()
        let again = PipelineRunner(config: config, options: plain, logger: LogCapture().logger).run()
        #expect(again.status == .finished, "\(again.error ?? "")")
        #expect(!FileManager.default.fileExists(atPath: stageFile(db)))
        #expect(try rows(db, "SELECT count(*) FROM _ingot_state WHERE key LIKE 'staged_load%'") == [["0"]])
        let check = try checkPeople(db, pages)
        #expect(check.contains(#""ok": true"#), "\(check)")
    }

    /// By default a load from local pages stages (here from its first batch, whose records come
    /// in no identity order; else at 4 MiB), and one from a source that fetches goes on batch by
    /// batch to 40 MiB (its waits hide the writes): the same pages read from a directory and
    /// through a source that says it fetches. The size each load turns at is the one its
    /// `run.started` names; that a load turns at the size it is given is
    /// ``thePeopleDataSetTurnsStagedAndResumes``'s (it took 30,000 persons to pass 4 MiB here).
    @Test func aSourceThatFetchesTurnsLater() throws {
        let (pages, config, options) = try peopleLoad(persons: 3000, pageSize: 1000)
        for fetching in [false, true] {
            var options = options
            options.databasePath = temporaryDirectory().appendingPathComponent("turn.db").path
            let logs = LogCapture()
            let directory = try DirectoryPageSource(directory: pages, glob: "page-*.json")
            let run = PipelineRunner(config: config, options: options, logger: logs.logger)
                .run(source: fetching ? FetchingSource(directory) : directory)
            #expect(run.status == .finished, "\(run.error ?? "")")
            #expect(logs.all.contains { $0.contains("msg=bulk.started") } == !fetching, "fetching \(fetching): \(logs.all)")
            let line = logs.all.first { $0.contains("msg=run.started") } ?? ""
            let started = Set(logfmtFields(line))
            let (load, bytes) = fetching ? ("automatic.by_size", 40 << 20) : ("automatic.by_size_or_first_batch", 4 << 20)
            #expect(started.isSuperset(of: ["load=\(load)", "stage_after_bytes=\(bytes)"]), "\(started.sorted())")
            let check = try checkPeople(options.databasePath, pages)
            #expect(check.contains(#""ok": true"#), "\(check)")
        }
    }

    /// A first batch of 1,000 records or more whose records come in no identity order, into
    /// empty tables, stages the load from the start; one in order, a smaller one, or one into
    /// tables that hold rows goes batch by batch (and may turn later).
    @Test func aScatteredFirstBatchStagesFromTheStart() throws {
        func load(_ ids: [Int], db: String? = nil) throws -> (staged: Bool, db: String) {
            let records = ids.map { #"{"id": \#($0), "name": "n\#($0)"}"# }
            let pages = stride(from: 0, to: records.count, by: 500).map {
                bulkPage(records[$0..<min($0 + 500, records.count)].joined(separator: ", "))
            }
            let logs = LogCapture()
            let (run, path) = try ingest(bulkYAML, pages, db: db, logs: logs)
            #expect(run.status == .finished, "\(run.error ?? "")")
            let (low, high) = (ids.min() ?? 0, ids.max() ?? 0)
            #expect(try rows(path, "SELECT count(*) FROM person WHERE id BETWEEN \(low) AND \(high)") == [["\(Set(ids).count)"]])
            return (logs.all.contains { $0.contains("msg=bulk.started") && $0.contains("records=0") }, path)
        }
        var rng = SeededGenerator(seed: 11)
        let scattered = Array(1...1500).shuffled(using: &rng)
        let first = try load(scattered)
        #expect(first.staged)
        #expect(try !load(Array(1...1500)).staged, "in identity order")
        #expect(try !load(Array(scattered.prefix(900))).staged, "a first batch under 1,000 records")
        #expect(try !load(scattered.map { $0 + 5000 }, db: first.db).staged, "into tables that hold rows")
    }

    /// The merge runs under a rollback journal when nothing else holds the database, and in the
    /// WAL when something does (SQLite refuses the switch then); either way the load ends exact
    /// and the database is back in WAL mode, with no journal left behind.
    @Test func theMergeLeavesTheWALOnlyWhenItHoldsTheDatabaseAlone() throws {
        for held in [false, true] {
            var (pages, config, options) = try peopleLoad(persons: 800, pageSize: 100)
            let db = options.databasePath
            options.loading = .staged
            var other: OpaquePointer?
            if held {
                // Another program's connection, which has read the database (WAL mode).
                let seed = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
                    .run(source: FailingAfter(try DirectoryPageSource(directory: pages, glob: "page-*.json"), pages: 0))
                #expect(seed.status == .failed)
                #expect(sqlite3_open_v2(db, &other, SQLITE_OPEN_READONLY, nil) == SQLITE_OK)
                #expect(sqlite3_exec(other, "SELECT count(*) FROM person", nil, nil, nil) == SQLITE_OK)
            }
            let statements = Mutex<[String]>([])
            options.statementObserver = { sql in statements.withLock { $0.append(sql) } }
            let run = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
            sqlite3_close_v2(other)
            #expect(run.status == .finished, "\(run.error ?? "")")
            #expect(statements.withLock { $0 }.contains("PRAGMA journal_mode = DELETE"))
            #expect(try rows(db, "PRAGMA journal_mode") == [["wal"]])
            #expect(!FileManager.default.fileExists(atPath: db + "-journal"))
            let check = try checkPeople(db, pages)
            #expect(check.contains(#""ok": true"#), "held \(held): \(check)")
        }
    }

    /// A row the database refuses in the merge (a trigger added to the table) is left out, with
    /// its links, and rejected with the database's message; the rest is merged, on insert and on
    /// update alike, and the run finishes.
    @Test func aRowRefusedInTheMergeIsRejectedAndTheRestMerged() throws {
        let (seed, db) = try ingest(bulkYAML, [bulkPage(#"{"id": 1, "name": "Grace"}, {"id": 2, "name": "Linus"}"#)])
        #expect(seed.status == .finished)
        try RefusedValueTests.refusePoison(in: db, table: "person")
        let pages = [
            bulkPage(#"{"id": 3, "name": "poison", "dogs": [10]}, {"id": 4, "name": "Hedy", "dogs": [11]}"#),
            bulkPage(#"{"id": 1, "name": "poison"}, {"id": 2, "name": "Linus T."}"#),
        ]
        let logs = LogCapture()
        let (run, _) = try ingest(bulkYAML, pages, db: db, logs: logs, bulk: true)
        #expect(run.status == .finished, "\(run.error ?? "")")
        #expect(run.counters.rejectedRecords == 2)
        #expect(run.counters.entities["person"]?.rejected == 2)
        #expect(try rows(db, "SELECT id, name FROM person ORDER BY id") == [["1", "Grace"], ["2", "Linus T."], ["4", "Hedy"]])
        #expect(try rows(db, "SELECT person_id, dog_id FROM person_dogs ORDER BY 1, 2") == [["4", "11"]])
        #expect(
            try rows(db, "SELECT count(*), min(reason_code), min(entity) FROM _ingot_rejects WHERE reason LIKE '%poison value refused%'")
                == [["2", "unstorable", "person"]])
        #expect(logs.all.contains { $0.contains("poison value refused") }, "\(logs.all)")
    }

    /// New rows are inserted many to a statement (``RowFeed``): one refused among them leaves
    /// out only itself and its links; the rows before and after it keep theirs, positions too.
    @Test func aRowRefusedAmongManyNewRowsLeavesOnlyItOut() throws {
        let (seed, db) = try ingest(bulkYAML, [bulkPage(#"{"id": 1, "name": "Grace"}"#)])
        #expect(seed.status == .finished)
        try RefusedValueTests.refusePoison(in: db, table: "person")
        let records = (20...25).map { id in
            let name = id == 22 ? "poison" : "p\(id)"
            return #"{"id": \#(id), "name": "\#(name)", "dogs": [\#(100 + id), \#(200 + id)], "#
                + #""visits": [{"clinic": "c\#(id)", "day": "d2"}, {"clinic": "c\#(id)", "day": "d1"}]}"#
        }
        let (run, _) = try ingest(bulkYAML, [bulkPage(records.joined(separator: ", "))], db: db, bulk: true)
        #expect(run.status == .finished, "\(run.error ?? "")")
        #expect(run.counters.entities["person"]?.rejected == 1)
        #expect(run.counters.entities["person"]?.inserted == 5)
        #expect(
            try rows(db, "SELECT id, name, status, source FROM person WHERE id >= 20 ORDER BY id")
                == [20, 21, 23, 24, 25].map { ["\($0)", "p\($0)", "new", "api"] })
        #expect(
            try rows(db, "SELECT person_id, dog_id FROM person_dogs ORDER BY 1, 2")
                == [20, 21, 23, 24, 25].flatMap { [["\($0)", "\(100 + $0)"], ["\($0)", "\(200 + $0)"]] })
        #expect(
            try rows(db, "SELECT person_id, visit_clinic, visit_day, position FROM person_visits ORDER BY 1, 4")
                == [20, 21, 23, 24, 25].flatMap { [["\($0)", "c\($0)", "d2", "0"], ["\($0)", "c\($0)", "d1", "1"]] })
    }

    /// What a staged load cannot do is refused before anything is written, saying why.
    @Test func whatAStagedLoadCannotDoIsRefused() throws {
        // A model whose rules need stored rows; a write mode that does.
        let owned = bulkYAML.replacingOccurrences(
            of: "visits: {to: visit, many: true, ordered: true}", with: "visits: {to: visit, many: true, owned: true}"
        )
        .replacingOccurrences(of: "identity: [clinic, day]\n", with: "")
        let (ownedRun, _) = try ingest(owned, bulkPages, bulk: true)
        #expect(ownedRun.status == .failed)
        #expect(ownedRun.error?.contains("person.visits is owned") == true, "\(ownedRun.error ?? "")")
        let replace = bulkYAML.replacingOccurrences(of: "root: person\n", with: "root: person\nwrite: replace\n")
        let (replaceRun, _) = try ingest(replace, bulkPages, bulk: true)
        #expect(replaceRun.status == .failed)
        #expect(replaceRun.error?.contains("write: replace") == true, "\(replaceRun.error ?? "")")
    }
}

/// Serves the pages of `inner` up to `pages`, then fails.
final class FailingAfter: PageSource, @unchecked Sendable {  // used from the source queue only
    private let inner: any PageSource
    private var left: Int
    init(_ inner: any PageSource, pages: Int) {
        self.inner = inner
        self.left = pages
    }
    func next() throws -> Page? {
        guard left > 0 else { throw CocoaError(.fileReadUnknown) }
        left -= 1
        return try inner.next()
    }
}

/// The pages of `inner`, from a source that says it fetches them (``FetchReporting``).
final class FetchingSource: FetchReporting, @unchecked Sendable {  // used from the source queue only
    private let inner: any PageSource
    init(_ inner: any PageSource) { self.inner = inner }
    func next() throws -> Page? { try inner.next() }
    func useMetrics(_ metrics: any FetchObserver) {}
}

/// A SQLite store's load moves along its lifecycle only — batch by batch → staging → merged →
/// batch by batch once committed, or staging again when the merge is rolled back — and refuses
/// any other move (SQLiteStore.moveLoad(to:)).
struct SQLiteLoadPhaseTests {
    @Test func anIllegalMoveIsRefused() throws {
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let db = temporaryDirectory().appendingPathComponent("phase.db").path
        let plain = try SQLiteStore(path: db, model: config.model)
        #expect(plain.loadState == .batchByBatch)
        #expect(throws: StoreError.self, "nothing staged to merge") {
            _ = try plain.mergeStaged(fills: [], stored: { _, _, _ in }, refused: { _, _, _, _ in })
        }
        try plain.close()

        var options = SQLiteStore.Options()
        options.plan = .sqliteStaged
        let store = try SQLiteStore(path: db, model: config.model, options: options)
        let file = try #require(store.stageFile)
        #expect(store.loadState == .staging)
        #expect(throws: StoreError.self, "staging twice") { try store.moveLoad(to: .staging(file)) }
        #expect(throws: StoreError.self, "back to batch by batch without a merge") { try store.moveLoad(to: .batchByBatch) }
        #expect(store.loadState == .staging, "a refused move leaves the load where it was")

        _ = try store.mergeStaged(fills: [], stored: { _, _, _ in }, refused: { _, _, _, _ in })
        #expect("\(store.phase)" == "merged, not committed")
        #expect(throws: StoreError.self, "merging twice") {
            _ = try store.mergeStaged(fills: [], stored: { _, _, _ in }, refused: { _, _, _, _ in })
        }
        try store.rollback()
        #expect(store.loadState == .staging, "a merge rolled back stages again")
        _ = try store.mergeStaged(fills: [], stored: { _, _, _ in }, refused: { _, _, _, _ in })
        #expect(try store.commit())
        #expect(store.loadState == .batchByBatch && store.stageFile == nil)
        #expect(!FileManager.default.fileExists(atPath: stageFile(db)), "the merged stage file goes at the commit")
        try store.close()
    }
}
