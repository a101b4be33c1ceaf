import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Ingot

/// A joined run's rows exchanged between its jobs (PGStore+Exchange.swift, StagedExchange): every
/// job's batches go to the run's parts, and once every unit is done the parts are folded and
/// copied as a single job's staged load is; the tables end as a single job leaves them.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct JoinedExchangeTests {
    /// Three pages of 1,000 persons each (a job's first batch may be its first page alone:
    /// enough to stage), identities shuffled (in no identity order: staged), with dogs shared
    /// between pages.
    static let pages: [String] = {
        var rng = SeededGenerator(seed: 23)
        let ids = Array(1...3000).shuffled(using: &rng)
        return stride(from: 0, to: ids.count, by: 1000).map { start in
            bulkPage(
                ids[start..<start + 1000].map { id in
                    #"{"id": \#(id), "name": "n\#(id)", "email": "e\#(id)@x", "dogs": [\#(id % 50), {"id": \#(id % 7), "name": "d\#(id)"}]}"#
                }.joined(separator: ", "))
        }
    }()

    /// A job of join `name` over `pages` (it fetches them when no other job does), started;
    /// waits for its summary and log lines.
    private func startJob(
        _ url: String, _ name: String, _ pages: [String], yaml: String = bulkYAML
    ) throws -> () throws -> (RunSummary, [String]) {
        try start(try runner(url, name, yaml: yaml), pages)
    }

    /// A job alone in its run exchanges every unit and writes the parts when its source ends:
    /// the tables, counts and rejects of a single job, no positions (into empty tables: nothing
    /// is left to merge with), the exchange table dropped, nothing left in `_ingot_state`.
    @Test(.hangGuard) func aJobAloneWritesTheWholeRunAtItsEnd() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let pages = Self.pages + [bulkPage(#"{"id": "bad"}, {"id": 5, "name": "Five"}"#)]
        let (summary, logs) = try startJob(url, "alone", pages)()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(logs.contains { $0.contains("msg=join.merged") })
        let (single, db) = try ingest(bulkYAML, pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(summary.counters.inserted == single.counters.inserted && summary.counters.rejectedRecords == 1)
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT count(*) FROM _ingot_rejects") == [["1"]])
        #expect(try connection.execute("SELECT count(*) FROM person WHERE _ingot_pos IS NOT NULL") == [["0"]])
        #expect(try connection.execute("SELECT status, records FROM _ingot_runs") == [["finished", "3002"]])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE pipeline = ''") == [["0"]])
        #expect(try connection.execute("SELECT count(*) FROM pg_tables WHERE tablename ~ '^_ingot_run[0-9]+_'") == [["0"]])
        // Every key the parts were copied without is built again (docs/scale-out.md, "Keys built
        // after the parts' copies"), and holds: a repeated identity is refused.
        #expect(try connection.execute(Self.keys) == Self.allKeys)
        #expect(throws: StoreError.self) { try connection.execute("INSERT INTO person (id) VALUES (5)") }
    }

    /// The tables' keys: identities and join tables' primary keys.
    static let keys = """
        SELECT conname FROM pg_constraint WHERE contype IN ('u', 'p') AND conrelid IN
          ('person'::regclass, 'dog'::regclass, 'visit'::regclass, 'person_dogs'::regclass, 'person_visits'::regclass) ORDER BY conname
        """
    static let allKeys = [["dog_identity"], ["person_dogs_pkey"], ["person_identity"], ["person_visits_pkey"], ["visit_identity"]]

    /// While another run is running (a single run that began before the merge, and may copy
    /// rows straight in), a merge drops no key: only a key keeps its rows from repeating one of
    /// the run's identities.
    @Test func noKeyIsDroppedWhileAnotherRunWrites() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let other = try PGStore(url: url, model: config.model)
        try other.beginRun(.new(id: "other", pipeline: "another", startedAt: Date(), archive: nil))
        try other.commit()
        let store = try PGStore(url: url, model: config.model)
        try store.dropKeysForMerge()
        try store.close()
        let connection = try PGConnection(url: url)
        #expect(try connection.execute(Self.keys) == Self.allKeys)
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE key LIKE 'rebuild:%'") == [["0"]])
        try other.close()
    }

    /// With foreign keys declared (`ingot schema --foreign-keys`) a merge drops no key of a
    /// table they touch: a foreign key depends on the key it references (its drop is refused),
    /// and its deferred checks refuse an `ALTER TABLE` in their transaction. A job alone ends as
    /// a single run does, every key in place.
    @Test(.hangGuard) func aMergeKeepsTheKeysOfTablesWithForeignKeys() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        try PGStore(url: url, model: config.model).close()
        let connection = try PGConnection(url: url)
        for statement in ForeignKey.postgresStatements(of: config.model) { _ = try connection.execute(statement) }
        let (summary, logs) = try startJob(url, "declared", Self.pages)()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(logs.contains { $0.contains("msg=join.merged") })
        #expect(try connection.execute(Self.keys) == Self.allKeys)
        let (_, db) = try ingest(bulkYAML, Self.pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
    }

    /// A merge whose jobs were killed after it dropped the keys of the empty tables (those of a
    /// fixed width: ``MergeKey/keys(of:model:)``): a job that
    /// joins again is not refused for the identities they lack, nor is a single run; the single
    /// run builds every key again and ends exact.
    @Test(.hangGuard) func keysAStoppedMergeDroppedAreBuiltByTheNextSingleRun() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let store = try PGStore(url: url, model: config.model)
        try store.dropKeysForMerge()
        try store.close()
        let connection = try PGConnection(url: url)
        // Keys of a fixed width only: a visit's identity is text (a value too long for an index
        // entry is refused as its row is copied, not when the index is built).
        #expect(try connection.execute(Self.keys) == [["person_visits_pkey"], ["visit_identity"]])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE key LIKE 'rebuild:%'") == [["3"]])
        #expect(try connection.execute("SELECT count(*) FROM pg_indexes WHERE indexname = 'person_dogs_dog_id'") == [["0"]])
        try PGJoinedStore(url: url, model: config.model, plan: .joinedPositions).close()

        var options = RunOptions()
        options.databasePath = url
        options.progressInterval = 0
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(
            source: MemoryPageSource(Self.pages))
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(try connection.execute(Self.keys) == Self.allKeys)
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE key LIKE 'rebuild:%'") == [["0"]])
        #expect(try connection.execute("SELECT count(*) FROM pg_indexes WHERE indexname = 'person_dogs_dog_id'") == [["1"]])
        let (_, db) = try ingest(bulkYAML, Self.pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
    }

    /// A joined run over rows an earlier run stored: a part's copy meets them (a unique
    /// violation) and the part is written the careful way, upserted at the run's last position —
    /// the tables end as two single runs leave them, one after the other, and the stored rows the
    /// run gave again are counted updated.
    @Test(.hangGuard) func rowsStoredBeforeTheRunAreUpserted() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let earlier = [Self.pages[0], bulkPage(#"{"id": 9001, "name": "kept", "email": "k@x"}"#)]
        let first = try #require(Self.pages[1].firstMatch(of: /"id": (\d+)/).map { Int($0.1) ?? 0 })
        let later = [Self.pages[1], bulkPage(#"{"id": \#(first), "email": "later@x"}, {"id": 9001, "name": "renamed"}"#)]
        var options = RunOptions()
        options.databasePath = url
        options.progressInterval = 0
        #expect(
            PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(earlier)).status
                == .finished)

        let (summary, _) = try startJob(url, "later", later)()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let db = temporaryDirectory().appendingPathComponent("two.db").path
        _ = try ingest(bulkYAML, earlier, db: db)
        let (second, _) = try ingest(bulkYAML, later, db: db)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT name, email FROM person WHERE id = 9001") == [["renamed", "k@x"]])
        #expect(summary.counters.entities["person"]?.updated == second.counters.entities["person"]?.updated, "\(summary.counters.entities)")
    }

    /// A job joins a run whose exchange table another job's open batch is writing without
    /// waiting for it: only the job that makes the run makes the table (each `ALTER TABLE` of
    /// it waited for every open batch before — here, for ever, so the database gives up on any
    /// lock after 20 s and the join fails instead).
    @Test(.hangGuard) func aJobJoinsWithoutWaitingForAnOpenBatch() throws {
        let url = try PostgresServer.freshDatabase()
        let name = String(url.split(separator: "/").last ?? "")
        try PGConnection(url: url).execute("ALTER DATABASE \(name) SET lock_timeout = '20s'")
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let first = try PGJoinedStore(url: url, model: config.model, plan: .joinedDeferred)
        defer { try? first.close() }
        _ = try first.joinRun(JoinTests.request("open", config))
        let table = try #require(
            try PGConnection(url: url).execute("SELECT tablename FROM pg_tables WHERE tablename ~ '^_ingot_run[0-9]+_x$'").first?[0] ?? nil)
        let batch = try PGConnection(url: url)
        try batch.execute("BEGIN")
        try batch.execute("INSERT INTO \(table) (part, key, data) VALUES (0, 1, '\\x00'::bytea)")
        let second = try PGJoinedStore(url: url, model: config.model, plan: .joinedDeferred)
        defer { try? second.close() }
        let joined = try second.joinRun(JoinTests.request("open", config))
        #expect(joined.name == "open")
        try batch.execute("ROLLBACK")
    }

    /// Every job of a run writes its rows the same way: a job given `--no-bulk` (positions at
    /// each commit) cannot join a run whose jobs exchange theirs — the run's end would write
    /// their older rows over its newer ones — and is refused before it writes, naming why.
    @Test(.hangGuard) func aJobThatWritesAnotherWayIsRefused() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let other = try PGJoinedStore(url: url, model: config.model, plan: .joinedDeferred)
        defer { try? other.close() }
        _ = try other.joinRun(JoinTests.request("ways", config))
        var (job, logs) = try runner(url, "ways")
        var options = job.options
        options.loading = .batchByBatch
        job = PipelineRunner(config: config, options: options, logger: logs.logger)
        let (summary, _) = try start((job, logs), Self.pages)()
        #expect(summary.status == .failed)
        #expect(
            summary.error?.contains("rows: the run has exchanged, written when every unit is done, this job has written at each commit")
                == true, "\(summary.error ?? "")")
        #expect(try PGConnection(url: url).execute("SELECT count(*) FROM person") == [["0"]])
    }

    /// Another job's batch (unit 2) goes to the run's exchange table, the entities' tables stay
    /// as they were; this job's units 1, 3 and 4 follow; ending the run, it writes the parts
    /// once — unit 4's values win over unit 2's, unit 2's over unit 1's — and drops the table.
    /// The tables and counts are a single job's over the four pages in order.
    @Test(.hangGuard) func everyJobsRowsAreWrittenOnceWhenTheRunEnds() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        // A person of unit 1 (the stretch), renamed by unit 2, given an email by unit 4.
        let first = try #require(Self.pages[0].firstMatch(of: /"id": (\d+)/).map { Int($0.1) ?? 0 })
        let unit2 = bulkPage(
            #"{"id": \#(first), "name": "two", "dogs": [900, {"id": 901, "name": "new"}]}, {"id": 8001, "name": "eight", "email": "8@x"}"#)
        let unit4 = bulkPage(#"{"id": \#(first), "email": "four@x"}, {"id": 8001, "dogs": [1, 2]}, {"id": 8002, "name": "nine"}"#)
        let pages = [Self.pages[0], unit2, Self.pages[1], unit4]
        // The other job fetches: every unit enqueued, unit 2 held.
        let other = try PGJoinedStore(url: url, model: config.model, plan: .joinedDeferred)
        defer { try? other.close() }
        let run = try other.joinRun(JoinTests.request("deferred", config))
        _ = try #require(try run.takeFetcherRole())
        for seq in 1...4 { #expect(try run.enqueue(Page(seq: seq, source: "p\(seq)", bytes: Array(pages[seq - 1].utf8)), as: seq)) }
        #expect(try run.endSource(at: 5))
        let held = try (1...2).map { _ in try #require(try run.claim(maxPageBytes: 1 << 20)).page }
        let connection = try PGConnection(url: url)
        _ = try connection.execute(
            "UPDATE _ingot_units SET status = 'pending', job = NULL, lease_until = NULL WHERE name = 'deferred' AND seq = 1")
        try Self.write(unit2, as: held[1], config, into: other)
        let ordinal = try #require(try connection.execute("SELECT id FROM _ingot_joins WHERE name = 'deferred'").first?[0])
        #expect(try connection.execute("SELECT count(*) FROM person") == [["0"]], "an exchanged batch leaves the tables as they were")
        #expect(try connection.execute("SELECT count(DISTINCT key) FROM _ingot_run\(ordinal)_x") == [["1"]])
        let index = "SELECT to_regclass('person_dogs_dog_id')::oid"
        let before = try #require(try connection.execute(index).first?[0])

        let (summary, logs) = try startJob(url, "deferred", pages)()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(logs.contains { $0.contains("msg=join.merged") })
        let (single, db) = try ingest(bulkYAML, pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(try connection.execute("SELECT name, email FROM person WHERE id = \(first)") == [["two", "four@x"]])
        #expect(summary.counters.inserted == single.counters.inserted, "\(summary.counters.entities) \(single.counters.entities)")
        // The person of unit 1, given again by units 2 and 4: one row the run inserts.
        #expect(summary.counters.updated == single.counters.updated, "\(summary.counters.entities) \(single.counters.entities)")
        #expect(
            try connection.execute("SELECT count(*) FROM pg_tables WHERE tablename ~ '^_ingot_run[0-9]+_'") == [["0"]],
            "the exchange table goes with the run's end")
        #expect(try connection.execute("SELECT status FROM _ingot_joins") == [["finished"]])
        // The foreign key's index of the empty join table was dropped for the parts' copies and
        // built again when the run finished: a new index.
        let after = try #require(try connection.execute(index).first?[0])
        #expect(after != before)
    }

    /// A part's fold takes each column from the last record that gave it. Another job exchanges
    /// units 1 and 2; person 1 is whole in both (unit 2's row wins whole), person 2 whole in
    /// unit 1 and renamed alone in unit 2 (its name from unit 2, the rest from unit 1), person 3
    /// whole in unit 2 only.
    @Test(.hangGuard) func eachColumnComesFromTheLastRecordThatGaveIt() throws {
        let url = try PostgresServer.freshDatabase()
        let yaml = personPipeline("whole")
        let config = try PipelineConfig.parse(text: yaml, path: "whole.yml")
        func person(_ id: Int, _ name: String, _ country: String, dogs: [Int]) -> String {
            #"{"id": \#(id), "name": "\#(name)", "origin": {"country": {"name": "\#(country)"}}, "score": \#(id).5, "dogs": \#(dogs), "best_friend": \#(dogs[0])}"#
        }
        let pages = [
            bulkPage(person(1, "one", "NO", dogs: [1, 2]) + ", " + person(2, "two", "SE", dogs: [3])),
            bulkPage(person(1, "uno", "IT", dogs: [4]) + #", {"id": 2, "name": "dos"}, "# + person(3, "tres", "ES", dogs: [5])),
            bulkPage(person(4, "four", "DK", dogs: [6])),
        ]
        let other = try PGJoinedStore(url: url, model: config.model, plan: .joinedDeferred)
        defer { try? other.close() }
        let run = try other.joinRun(JoinTests.request("whole", config))
        _ = try #require(try run.takeFetcherRole())
        for seq in 1...3 { #expect(try run.enqueue(Page(seq: seq, source: "p\(seq)", bytes: Array(pages[seq - 1].utf8)), as: seq)) }
        #expect(try run.endSource(at: 4))
        for seq in 1...2 {
            try Self.write(pages[seq - 1], as: try #require(try run.claim(maxPageBytes: 1 << 20)).page, config, into: other)
        }
        let connection = try PGConnection(url: url)
        let ordinal = try #require(try connection.execute("SELECT id FROM _ingot_joins WHERE name = 'whole'").first?[0])
        #expect(try connection.execute("SELECT count(DISTINCT key) FROM _ingot_run\(ordinal)_x") == [["2"]])

        let (summary, _) = try startJob(url, "whole", pages, yaml: yaml)()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let (single, db) = try ingest(yaml, pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(
            try connection.execute("SELECT id, name, country, score, best_id FROM person ORDER BY id")
                == [
                    ["1", "uno", "IT", "1.5", "4"], ["2", "dos", "SE", "2.5", "3"], ["3", "tres", "ES", "3.5", "5"],
                    ["4", "four", "DK", "4.5", "6"],
                ])
        #expect(
            try connection.execute("SELECT person_id, dog_id FROM person_dogs ORDER BY 1, 2") == [
                ["1", "4"], ["2", "3"], ["3", "5"], ["4", "6"],
            ])
        #expect(summary.counters.inserted == single.counters.inserted, "\(summary.counters.entities) \(single.counters.entities)")
    }

    /// Writes `text` as the claimed unit `unit` through `store` (another job's write of it, as
    /// its writer stage would: mapped, folded, resolved), and commits.
    private static func write(_ text: String, as unit: Page, _ config: PipelineConfig, into store: PGJoinedStore) throws {
        var mapper = RecordMapper(plan: MappingPlan(model: config.model, root: config.root, framing: config.framing))
        var decoded: [DecodedPage] = []
        mapper.map(bytes: Array(text.utf8), seq: unit.seq, source: "p\(unit.seq)", partRecords: 100) { part in
            var page = part
            page.unit = unit.unit
            decoded.append(page)
        }
        let resolver = BatchResolver(model: config.model, layouts: EntityLayout.layouts(of: config.model))
        try store.write(try resolver.resolve(resolver.prepare(decoded, uncommitted: UncommittedIdentities(), store: store), store: store)) {
            _ in
        }
        try store.commit()
    }

    /// A runner of join `name` into `url`, and its logs. Its leases (30 s) are renewed only when
    /// a test moves its clock (``ManualTimers``): a lease lapses because a test ends it, never
    /// because the machine was slow.
    private func runner(_ url: String, _ name: String, yaml: String = bulkYAML) throws -> (PipelineRunner, LogCapture) {
        let config = try PipelineConfig.parse(text: yaml, path: "bulk.yml")
        var options = RunOptions()
        options.databasePath = url
        options.join = name
        options.timers = ManualTimers()
        options.progressInterval = 0
        let logs = LogCapture()
        return (PipelineRunner(config: config, options: options, logger: logs.logger), logs)
    }

    /// Runs `runner` over `pages` on a thread of its own; waits for its summary and log lines.
    private func start(_ runner: (PipelineRunner, LogCapture), _ pages: [String]) throws -> () throws -> (RunSummary, [String]) {
        let result = Mutex<RunSummary?>(nil)
        let done = DispatchSemaphore(value: 0)
        let (job, logs) = runner
        Thread.detachNewThread {
            let summary = job.run(source: MemoryPageSource(pages))
            result.withLock { $0 = summary }
            done.signal()
        }
        return {
            done.wait()
            return (try #require(result.withLock { $0 }), logs.all)
        }
    }
}
