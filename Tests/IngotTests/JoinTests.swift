import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Ingot

/// Where the tests' shared runs are kept: PostgreSQL (a fresh database) or a ``MemoryDatabase``
/// whose jobs each have a ``MemoryStore`` of their own — the join's logic tested without a
/// server, through the same contract (`SharedRunStore`).
enum JoinBackend: String, CaseIterable, CustomTestStringConvertible {
    case memory, postgresql
    var testDescription: String { rawValue }
}

/// One database of a join test, and how to run jobs into it and read it.
struct JoinDatabase {
    let backend: JoinBackend
    let model: EntityModel
    /// PostgreSQL's URL (`memory` for the memory backend).
    let url: String
    let memory: MemoryDatabase?

    init(_ backend: JoinBackend, model: EntityModel) throws {
        self.backend = backend
        self.model = model
        switch backend {
        case .postgresql:
            url = try PostgresServer.freshDatabase()
            memory = nil
        case .memory:
            url = "memory"
            memory = MemoryDatabase(model: model)
        }
    }

    /// Runs `runner` over `source` into this database (a store of its own, for the memory backend).
    func run(_ runner: PipelineRunner, _ source: any PageSource) -> RunSummary {
        guard let memory else { return runner.run(source: source) }
        return runner.run(source: source, store: MemoryStore(model: model, database: memory))
    }

    /// A request to join `name` as a job running `config` into this database would make it
    /// (``JoinTests/request(_:_:lease:fetching:given:)``).
    func request(_ name: String, _ config: PipelineConfig, lease: Double = 30, fetching: Bool = false) -> SharedRunRequest {
        JoinTests.request(name, config, lease: lease, fetching: fetching, given: memory != nil)
    }

    /// A store of a job of its own.
    func sharedStore() throws -> any SharedRunStore {
        if let memory { return MemoryStore(model: model, database: memory) }
        return try PGJoinedStore(url: url, model: model, plan: .joinedPositions)
    }

    /// Every table as text, comparable with `sqlite(_:)`'s.
    func dump() throws -> [String: [[String]]] {
        guard let memory else { return try PostgresTests.postgresDump(url, model) }
        return memory.dump()
    }

    /// A SQLite database's tables, printed as this backend's ``dump()`` prints values.
    func sqlite(_ db: String) throws -> [String: [[String]]] {
        memory == nil ? try PostgresTests.sqliteDump(db, model) : try StoreSeamTests.sqliteDump(db, model)
    }

    /// The shared run `name`: its status and where its source ended.
    func join(_ name: String) throws -> (status: String, endSeq: Int?, fetchFailures: Int)? {
        if let memory {
            return memory.state.withLock { $0.joins[name] }.map { ($0.status, $0.endSeq, $0.fetchFailures) }
        }
        let connection = try PGConnection(url: url)
        guard try connection.execute("SELECT to_regclass('_ingot_joins')::text") != [[nil]] else { return nil }
        return try connection.execute("SELECT status, end_seq, fetch_failures FROM _ingot_joins WHERE name = $1", [name])
            .first.map { ($0[0] ?? "", $0[1].flatMap { Int($0) }, $0[2].flatMap { Int($0) } ?? 0) }
    }

    /// Whether a job of shared run `name` asked the others to pause their requests (its
    /// server's `Retry-After`), whether or not the pause ended since.
    func pauseWasAsked(_ name: String) throws -> Bool {
        if let memory { return memory.state.withLock { $0.joins[name]?.pauseUntil != nil } }
        return try PGConnection(url: url).execute("SELECT pause_until IS NOT NULL FROM _ingot_joins WHERE name = $1", [name]) == [["t"]]
    }

    /// The seqs of shared run `name`'s units that are done, in order.
    func unitsDone(_ name: String) throws -> [Int] {
        if let memory {
            return memory.state.withLock { $0.joins[name]?.units.filter { $0.value.status == .done }.map(\.key).sorted() ?? [] }
        }
        return try PGConnection(url: url).execute("SELECT seq FROM _ingot_units WHERE name = $1 AND status = 'done' ORDER BY seq", [name])
            .compactMap { $0[0].flatMap { Int($0) } }
    }

    /// The run rows: status and counters of each.
    func runs() throws -> [(status: String, counters: RunCounters?)] {
        if let memory { return memory.state.withLock { s in s.runOrder.compactMap { s.runs[$0] }.map { ($0.status, $0.counters) } } }
        return try PGConnection(url: url).execute(
            "SELECT status, pages, records, inserted, deleted, rejected_records, rejected_pages FROM _ingot_runs ORDER BY started_at"
        ).map { row in
            var c = RunCounters()
            func int(_ k: Int) -> Int { row[k].flatMap { Int($0) } ?? 0 }
            (c.pages, c.records, c.inserted, c.deleted, c.rejectedRecords, c.rejectedPages) = (
                int(1), int(2), int(3), int(4), int(5), int(6)
            )
            return (row[0] ?? "", c)
        }
    }
}

/// Several jobs sharing one run (`--join NAME`, docs/scale-out.md): whatever job commits which
/// unit in whatever order, and whichever job is killed, the tables end exactly as one job
/// alone leaves them (SQLite's single run is the reference). The logic runs on the memory
/// store and on PostgreSQL; killed processes need PostgreSQL.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct JoinTests {
    /// StoreSeamTests' pipeline, every relationship stubbing (a joined run refuses the others).
    static let yaml = StoreSeamTests.yaml.replacingOccurrences(of: "vet: {to: vet, missing: ignore}", with: "vet: {to: vet}")

    /// A request to join `name` as a job running `config` with the default options over a memory
    /// source (`fetching`: over a source that fetches) would make it, its rows written as that
    /// job's plan says.
    /// `given`: the job runs on a store given to it (the memory backend's), which writes as it
    /// was opened.
    static func request(
        _ name: String, _ config: PipelineConfig, lease: Double = 30, fetching: Bool = false, given: Bool = false
    ) -> SharedRunRequest {
        var options = RunOptions()
        options.join = name
        let plan = given ? .batchByBatch : PipelineRunner.loadPlan(config, options, fetching: fetching, backend: PostgresBackend(url: ""))
        return SharedRunRequest(
            name: name, pipeline: config.name, proposedRunID: "r-\(name)", startedAt: Date(), lease: lease, lockTimeout: 5,
            // The spec a job with the default options reading a MemoryPageSource has.
            spec: PipelineRunner(config: config, options: RunOptions(), logger: LogCapture().logger).joinSpec(
                source: MemoryPageSource([]), plan: plan))
    }

    /// Options of a job joined under `name`.
    static func options(
        _ database: JoinDatabase, join name: String?, batchRecords: Int = 2, archive: String? = nil, loading: Loading = .automatic()
    ) -> RunOptions {
        var options = RunOptions()
        options.loading = loading
        options.archiveDirectory = archive
        options.databasePath = database.url
        options.batchRecords = batchRecords
        options.progressInterval = 0
        options.join = name
        // Leases (30 s) renewed only when a test moves the clock: in-process jobs never lose a
        // unit because the machine was slow; a test that needs a lease to lapse ends it in SQL.
        options.timers = ManualTimers()
        return options
    }

    /// `jobs` runners of `yaml` over `pages` joined under `name`, at once, each on a thread of
    /// its own with its own source (only the fetcher reads it); their summaries.
    static func runJoined(
        _ yaml: String, _ pages: [String], _ database: JoinDatabase, name: String, jobs: Int, batchRecords: Int = 2,
        archives: [String] = []
    ) throws -> [RunSummary] {
        try runJoined(
            try PipelineConfig.parse(text: yaml, path: "join.yml"), database, name: name, jobs: jobs, batchRecords: batchRecords,
            archives: archives, source: { MemoryPageSource(pages) })
    }

    /// `jobs` runners of `config`, each over a `source()` of its own, joined under `name`.
    static func runJoined(
        _ config: PipelineConfig, _ database: JoinDatabase, name: String, jobs: Int, batchRecords: Int = 2, archives: [String] = [],
        loading: Loading = .automatic(), logs: LogCapture = LogCapture(), source: () throws -> any PageSource
    ) throws -> [RunSummary] {
        let summaries = Mutex<[RunSummary]>([])
        let group = DispatchGroup()
        // The jobs claim in turn: each takes units while there are as many as jobs.
        let turns = TakingTurns(jobs: jobs)
        for k in 0..<jobs {
            var options = Self.options(
                database, join: name, batchRecords: batchRecords, archive: archives.isEmpty ? nil : archives[k], loading: loading)
            options.claimTurns = turns
            let runner = PipelineRunner(config: config, options: options, logger: logs.logger)
            let jobSource = try source()
            group.enter()
            Thread.detachNewThread {
                let summary = database.run(runner, jobSource)
                summaries.withLock { $0.append(summary) }
                group.leave()
            }
        }
        group.wait()
        return summaries.withLock { $0 }
    }

    /// Every job of a joined run took part: each committed pages (the jobs claim in turn,
    /// ``TakingTurns``), so the tables a test compares were written by more than one job.
    static func expectShared(_ summaries: [RunSummary], sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(summaries.count > 1, sourceLocation: sourceLocation)
        #expect(
            summaries.allSatisfy { $0.counters.pages > 0 }, "pages per job: \(summaries.map(\.counters.pages))",
            sourceLocation: sourceLocation)
    }

    @Test(.hangGuard, arguments: JoinBackend.allCases, [2, 3])
    func jobsSharingARunEndInASingleJobsState(backend: JoinBackend, jobs: Int) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "join.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let (sqlite, db) = try ingest(Self.yaml, StoreSeamTests.pages)
        let archives = (0..<jobs).map { _ in temporaryDirectory().path }
        let summaries = try Self.runJoined(Self.yaml, StoreSeamTests.pages, database, name: "merge", jobs: jobs, archives: archives)
        #expect(summaries.count == jobs)
        Self.expectShared(summaries)
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.compactMap(\.error))")
        #expect(Set(summaries.map(\.runID)).count == 1)
        let expected = try database.sqlite(db)
        let got = try database.dump()
        for table in expected.keys.sorted() { #expect(got[table] == expected[table], "table \(table)") }
        // Every page once: the jobs' shares add up to the single run's counts.
        #expect(summaries.map(\.counters.pages).reduce(0, +) == sqlite.counters.pages)
        #expect(summaries.map(\.counters.records).reduce(0, +) == sqlite.counters.records)
        // Rows created are counted by the database: once each, whichever job created them.
        #expect(summaries.map(\.counters.inserted).reduce(0, +) == sqlite.counters.inserted)
        let runs = try database.runs()
        #expect(runs.map(\.status) == ["finished"])
        let total = try #require(runs.first?.counters)
        let want: [Int] = [sqlite.counters.pages, sqlite.counters.records, sqlite.counters.rejectedRecords, sqlite.counters.rejectedPages]
        #expect([total.pages, total.records, total.rejectedRecords, total.rejectedPages] == want)
        #expect(try database.join("merge")?.status == "finished")
        #expect(try database.join("merge")?.endSeq == StoreSeamTests.pages.count + 1)
        if backend == .postgresql {
            let connection = try PGConnection(url: database.url)
            #expect(
                try connection.execute("SELECT count(*) FROM _ingot_rejects") == [
                    [String(sqlite.counters.rejectedRecords + sqlite.counters.rejectedPages)]
                ])
            #expect(
                try connection.execute("SELECT count(*) FROM _ingot_units WHERE status = 'done' AND length(payload) = 0") == [
                    [String(StoreSeamTests.pages.count)]
                ])
        }
        // The job that finished the run archived every page, in source order: its replay into
        // SQLite ends where the single run did.
        let files = archives.flatMap { dir in
            ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).map { dir + "/" + $0 }
        }
        #expect(files.count == 1)
        let reader = try ArchiveReader(path: try #require(files.first))
        #expect(reader.entries.map(\.metadata.seq) == Array(1...StoreSeamTests.pages.count))
        if backend == .postgresql {
            // Each rejection names the archive entry of its page, as a single run's does.
            let rejects = try PGConnection(url: database.url).execute("SELECT archive, archive_entry, source FROM _ingot_rejects")
            #expect(rejects.count == sqlite.counters.rejectedRecords + sqlite.counters.rejectedPages && !rejects.isEmpty)
            for row in rejects {
                let entry = reader.entries.first { String($0.metadata.seq) == row[1] }
                #expect(row[0] == files.first && entry?.metadata.source == row[2], "\(row)")
            }
        }
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("replay.db").path
        options.progressInterval = 0
        let replay = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(
            source: ArchivePageSource(reader: reader))
        #expect(replay.status == .finished)
        #expect(try StoreSeamTests.sqliteDump(options.databasePath, config.model) == (try StoreSeamTests.sqliteDump(db, config.model)))
    }

    /// Two joined jobs over compressed JSON Lines files (`*.jsonl.gz`, `*.jsonl.zst`) store every
    /// row, as a single run does, and the finishing job's archive (each file read again) replays
    /// them: a page keeps its compression (a joined job parsed the gzip bytes as JSON Lines: 0 rows, and one
    /// of the jobs exited 0).
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func compressedJSONLinesJoinAsASingleRunReadsThem(backend: JoinBackend) throws {
        let yaml = """
            version: 1
            name: lines
            source: {files: {dir: /unused, glob: "*.jsonl*", format: jsonl}}
            root: item
            entities: {item: {identity: id, attributes: {id: integer, name: string}}}
            """
        let dir = temporaryDirectory().appendingPathComponent("lines").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for file in 0..<6 {
            let lines = (0..<50).map { #"{"id": \#(file * 50 + $0), "name": "n\#(file)"}"# }.joined(separator: "\n") + "\n"
            let plain = dir + "/part-\(file).jsonl"
            if file % 2 == 0 {
                try Data(lines.utf8).write(to: URL(fileURLWithPath: plain))
                let gzip = Process()
                gzip.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                gzip.arguments = ["gzip", "-n", plain]
                try gzip.run()
                gzip.waitUntilExit()
            } else {
                try Data(try Zstd().compress(Array(lines.utf8))).write(to: URL(fileURLWithPath: plain + ".zst"))
            }
        }
        let config = try PipelineConfig.parse(text: yaml, path: "lines.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let archives = (0..<2).map { _ in temporaryDirectory().path }
        let all = try Self.runJoined(config, database, name: "lines", jobs: 2, batchRecords: 50, archives: archives) {
            try DirectoryPageSource(directory: dir, glob: "*.jsonl*")
        }
        #expect(all.allSatisfy { $0.status == .finished }, "\(all.compactMap(\.error))")
        Self.expectShared(all)
        #expect(all.map(\.counters.rejectedRecords).reduce(0, +) == 0)
        #expect(try database.dump()["item"]?.count == 300)
        if backend == .postgresql {
            // Each unit named its file, and the job that claimed it read it: no page went through
            // the work queue (docs/scale-out.md, "Pages any job reads").
            let units = try PGConnection(url: database.url).execute(
                "SELECT labels::json->>'cursor' FROM _ingot_units WHERE name = 'lines' ORDER BY seq")
            let named: [String?] = units.map { row -> String? in row[0]?.split(separator: ":").last.map(String.init) }
            let parts: [String?] = (0..<6).map { k -> String? in "part-\(k).jsonl" + (k % 2 == 0 ? ".gz" : ".zst") }
            #expect(named == parts)
        }
        let files = archives.flatMap { dir in ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).map { dir + "/" + $0 } }
        let reader = try ArchiveReader(path: try #require(files.first))
        #expect(reader.entries.map(\.metadata.compression) == [.gzip, .zstd, .gzip, .zstd, .gzip, .zstd])
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("replay.db").path
        options.progressInterval = 0
        let replay = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(
            source: ArchivePageSource(reader: reader))
        #expect(replay.status == .finished && replay.counters.records == 300, "\(replay.error ?? "")")
        #expect(try rows(options.databasePath, "SELECT count(*) FROM item") == [["300"]])
    }

    /// Pages that are not JSON and hold NUL bytes or invalid UTF-8, in a run of two joined jobs:
    /// rejected pages whose stored text PostgreSQL accepts (each NUL written `\u0000`), and both
    /// jobs finish (a refused `COPY _ingot_rejects` failed a batch and left a job waiting).
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func rejectsHoldingNULAndInvalidUTF8AreStoredAndBothJobsEnd(backend: JoinBackend) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "join.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let hostile = ["{\"results\": [\u{0}\u{0}]}", "\u{0}not json\u{0}", "{\"results\": [{\"id\": \"\u{0}\"}]}"]
        let pages = StoreSeamTests.pages + hostile
        let summaries = try Self.runJoined(Self.yaml, pages, database, name: "nul", jobs: 2)
        #expect(summaries.count == 2 && summaries.allSatisfy { $0.status == .finished }, "\(summaries.compactMap(\.error))")
        #expect(summaries.map(\.counters.rejectedPages).reduce(0, +) >= 2)
        if backend == .postgresql {
            let connection = try PGConnection(url: database.url)
            let stored = try connection.execute("SELECT raw FROM _ingot_rejects WHERE raw LIKE '%u0000%'")
            #expect(stored.count >= 2, "\(stored)")
        }
    }

    /// A batch PostgreSQL fails for a reason that is not a value (a trigger raising an internal
    /// error on one row, as a full disk or a crashed extension would): the job that meets it
    /// fails, and so does every job that takes its unit over; no job waits on for ever, and none
    /// exits 0 (two joined jobs hung after a failed batch, one of them for minutes).
    @Test(.hangGuard) func aBatchThatFailsEndsEveryJobNonZero() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "join.yml")
        let database = try JoinDatabase(.postgresql, model: config.model)
        // The tables first (an empty run), then the trigger that fails person 3's row.
        _ = try Self.runJoined(Self.yaml, [], database, name: "schema", jobs: 1)
        let connection = try PGConnection(url: database.url)
        try connection.execute(
            """
            CREATE FUNCTION fail_three() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
              IF NEW.id = 3 THEN RAISE EXCEPTION 'the disk is on fire' USING ERRCODE = 'XX000'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER fail_three BEFORE INSERT OR UPDATE ON person FOR EACH ROW EXECUTE FUNCTION fail_three()
            """)
        // The jobs on threads of their own; a hang is stopped (so that the test process ends) and
        // fails the test. It hung in about half the tries: the failed job waited for work inside
        // its source, renewing the leases the other job waited on.
        let summaries = Mutex<[RunSummary]>([])
        let group = DispatchGroup()
        let runners = (0..<2).map { _ in
            PipelineRunner(config: config, options: Self.options(database, join: "fails"), logger: LogCapture().logger)
        }
        for runner in runners {
            group.enter()
            Thread.detachNewThread {
                let summary = database.run(runner, MemoryPageSource(StoreSeamTests.pages))
                summaries.withLock { $0.append(summary) }
                group.leave()
            }
        }
        let ended = group.wait(timeout: .now() + 50)
        #expect(ended == .success, "a job still waits after the run failed")
        if ended != .success {
            for runner in runners { runner.stop() }
            group.wait()
        }
        let all = summaries.withLock { $0 }
        #expect(all.count == 2)
        #expect(all.allSatisfy { $0.status == .failed }, "\(all.map { "\($0.status) \($0.error ?? "")" })")
    }

    /// Later runs win over earlier ones, joined or not: positions carry the join's number, and a
    /// single run's writes (no position) lose to any joined unit. `write: replace` deletes, at the
    /// end of a joined run, the rows no unit of it touched.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func runsAfterRunsAndReplaceMatchSQLite(backend: JoinBackend) throws {
        let pages = StoreSeamTests.pages
        let replace = Self.yaml.replacingOccurrences(of: "root: person", with: "root: person\nwrite: replace")
        let config = try PipelineConfig.parse(text: Self.yaml, path: "j.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let (_, db) = try ingest(Self.yaml, Array(pages[0...1]))
        try ingest(Self.yaml, [pages[3]], db: db)
        let bo = [#"{"results": [{"id": 2, "name": "Bo", "dogs": [11]}]}"#, #"{"results": [{"id": 3, "dogs": [7]}]}"#]
        let (sqlite, _) = try ingest(replace, bo, db: db)

        #expect(try Self.runJoined(Self.yaml, Array(pages[0...1]), database, name: "first", jobs: 2).allSatisfy { $0.status == .finished })
        let single = database.run(
            PipelineRunner(config: config, options: Self.options(database, join: nil), logger: LogCapture().logger),
            MemoryPageSource([pages[3]]))
        #expect(single.status == .finished)
        let last = try Self.runJoined(replace, bo, database, name: "last", jobs: 2)
        #expect(last.allSatisfy { $0.status == .finished })
        Self.expectShared(last)
        #expect(try database.runs().last?.counters?.deleted == sqlite.counters.deleted)
        #expect(sqlite.counters.deleted > 0)
        #expect(try database.dump() == (try database.sqlite(db)))
    }

    /// A joined `write: replace` with a `scope:` deletes within every value the units' records
    /// gave the scope column, whichever job wrote them — user 7 too, though note 3 ends in user
    /// 6's scope (the tables alone would not say that 7 was seen) — and the tables end as a
    /// single run's sequence leaves them: user 9's note is out of scope.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func aJoinedReplaceDeletesWithinTheScopesItsUnitsSaw(backend: JoinBackend) throws {
        let yaml = MappingModelTests.notes
        let seed = [
            #"[{"id": 1, "text": "a", "user": {"id": 6}}, {"id": 2, "user": {"id": 6}}, {"id": 3, "user": {"id": 7}}]"#,
            #"[{"id": 4, "user": {"id": 8}}, {"id": 5, "user": {"id": 7}}, {"id": 6, "user": {"id": 9}}]"#,
        ]
        let sync = [
            #"[{"id": 1, "text": "a!", "user": {"id": 6}}, {"id": 3, "user": {"id": 7}}]"#, "[]",
            #"[{"id": 3, "user": {"id": 6}}, {"id": 7, "user": {"id": 8}}]"#,
        ]
        let config = try PipelineConfig.parse(text: yaml, path: "notes.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let (_, db) = try ingest(yaml, seed)
        let (single, _) = try ingest(yaml, sync, db: db)
        #expect(single.counters.deleted == 3, "notes 2, 4 and 5")
        #expect(try Self.runJoined(yaml, seed, database, name: "seed", jobs: 2).allSatisfy { $0.status == .finished })
        let joined = try Self.runJoined(yaml, sync, database, name: "sync", jobs: 3, batchRecords: 1)
        #expect(joined.allSatisfy { $0.status == .finished }, "\(joined.map { $0.error ?? "" })")
        Self.expectShared(joined)
        #expect(try database.runs().last?.counters?.deleted == single.counters.deleted)
        #expect(try database.dump() == (try database.sqlite(db)))
    }

    /// A joined `write: replace` cascades as a single run does: a cascade from a row no unit
    /// touched spares the rows a unit of the run wrote (dog 8, person 2's again), and ends with
    /// the single run's tables — also when its units are committed in order (a walker's dog
    /// `missing: ignore`), whose writes carry no positions but mark the rows they touch.
    @Test(.hangGuard, arguments: JoinBackend.allCases, [false, true])
    func aJoinedReplaceCascadeSparesTheRowsTheRunWrote(backend: JoinBackend, inOrder: Bool) throws {
        let yaml =
            inOrder
            ? MappingModelTests.cascade.replacingOccurrences(of: "{dog: {to: dog}}", with: "{dog: {to: dog, missing: ignore}}")
            : MappingModelTests.cascade
        #expect((PipelineRunner.joinOrder(try PipelineConfig.parse(text: yaml, path: "j.yml")) != .anyOrder) == inOrder)
        let pages = [MappingModelTests.cascadeSeed, #"[{"id": 3}]"#]
        let replace = [#"[{"id": 2, "dogs": [8]}]"#, #"[{"id": 3}]"#]
        let config = try PipelineConfig.parse(text: yaml, path: "j.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let (_, db) = try ingest(yaml, pages)
        let (single, _) = try ingest(yaml, replace, db: db)
        #expect(single.counters.deleted == 4, "person 1, dogs 7 and 9, toy 70")
        #expect(try rows(db, "SELECT id FROM dog") == [["8"]])

        #expect(try Self.runJoined(yaml, pages, database, name: "seed", jobs: 2).allSatisfy { $0.status == .finished })
        let joined = try Self.runJoined(yaml, replace, database, name: "replace", jobs: 2)
        #expect(joined.allSatisfy { $0.status == .finished }, "\(joined.map { $0.error ?? "" })")
        Self.expectShared(joined)
        #expect(try database.runs().last?.counters?.deleted == single.counters.deleted)
        #expect(try database.dump() == (try database.sqlite(db)))
    }

    /// A job that lost a unit (its lease ran out and another job claimed it again) cannot commit
    /// it: its transaction is rolled back, and the batch's other units go back to the queue.
    @Test(arguments: JoinBackend.allCases)
    func aUnitTakenOverCannotBeCommittedByItsFormerHolder(backend: JoinBackend) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "j.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let store = try database.sharedStore()
        let run = try store.joinRun(database.request("lost", config))
        let otherStore = try database.sharedStore()
        let other = try otherStore.joinRun(database.request("lost", config))
        defer { try? otherStore.close() }
        // The source: two pages, enqueued by the fetcher.
        let role = try #require(try run.takeFetcherRole())
        #expect(role.nextSeq == 1 && role.resumeState == nil)
        for seq in 1...2 { #expect(try run.enqueue(Page(seq: seq, source: "p\(seq)", bytes: []), as: seq)) }
        #expect(try run.endSource(at: 3))
        let first = try #require(try run.claim(maxPageBytes: 1 << 20)).page
        let second = try #require(try run.claim(maxPageBytes: 1 << 20)).page
        #expect(try run.claim(maxPageBytes: 1 << 20) == nil)
        // This job stalls past its lease: the other job takes the first unit over.
        if let memory = database.memory {
            memory.expireLeases(of: run.job, in: "lost")
        } else {
            try PGConnection(url: database.url).execute(
                "UPDATE _ingot_units SET lease_until = now() - interval '1 second' WHERE name = 'lost' AND seq = 1")
        }
        let taken = try #require(try other.claim(maxPageBytes: 1 << 20))
        #expect(taken.page.unit?.seq == first.seq && taken.takenFrom == run.job)
        let plan = MappingPlan(model: config.model, root: config.root, framing: config.framing)
        var mapper = RecordMapper(plan: plan)
        var pages: [DecodedPage] = []
        for unit in [first, second] {
            mapper.map(
                bytes: Array(#"{"results": [{"id": \#(unit.seq), "name": "x"}]}"#.utf8), seq: unit.seq, source: "p", partRecords: 100
            ) { part in
                var page = part
                page.unit = unit.unit
                pages.append(page)
            }
        }
        let resolver = BatchResolver(model: config.model, layouts: EntityLayout.layouts(of: config.model))
        let batch = try resolver.resolve(resolver.prepare(pages, uncommitted: UncommittedIdentities(), store: store), store: store)
        let error = #expect(throws: StoreError.self) { try store.write(batch) { _ in } }
        #expect(error?.kind == .claimLost && error?.units == [first.seq], "\(String(describing: error))")
        #expect(try database.dump()["person"] == [])
        // The second unit is back in the queue; the first is the other job's.
        let state = try run.state()
        #expect(state == .running(endSeq: 3, fetching: false, openElsewhere: 2, pending: 1), "\(state)")
        #expect(try other.claim(maxPageBytes: 1 << 20)?.page.unit?.seq == second.seq)
        try store.close()
    }

    /// A claim takes one unit, whatever plan the server picks. With statistics taken when the
    /// queue held one unit, PostgreSQL once ran the claim's `LIMIT 1 FOR UPDATE SKIP LOCKED`
    /// subquery inside a nested loop, once per unit: one statement claimed every pending unit and
    /// the job decoded only the first — the others stayed held by a job that then ended.
    /// The fetcher enqueues a group of pages in one step: units in order, the source's state
    /// the last page's, nothing enqueued by a job that lost the role.
    @Test(arguments: JoinBackend.allCases)
    func aGroupOfPagesIsEnqueuedInOrderInOneStep(backend: JoinBackend) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "j.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let store = try database.sharedStore()
        defer { try? store.close() }
        let run = try store.joinRun(database.request("group", config))
        _ = try #require(try run.takeFetcherRole())
        var pages = (1...3).map { Page(seq: 0, source: "p\($0)", bytes: Array("{\"results\": [{\"id\": \($0)}]}".utf8)) }
        pages[0].resumeState = "after-1"
        pages[2].resumeState = "after-3"
        #expect(try run.enqueue(pages, from: 1))
        // Not from the unit the run expects next: refused, nothing enqueued.
        #expect(try !run.enqueue([Page(seq: 0, source: "stale", bytes: [])], from: 2))
        guard case .running(_, _, _, let pending) = try run.state() else { throw StoreError.schema("not running") }
        #expect(pending == 3)
        for seq in 1...3 {
            let unit = try #require(try run.claim(maxPageBytes: 1 << 20)).page
            #expect(unit.seq == seq && unit.source == "p\(seq)" && unit.bytes == pages[seq - 1].bytes)
        }
        run.releaseFetcherRole()
        let other = try database.sharedStore()
        defer { try? other.close() }
        let taken = try #require(try other.joinRun(database.request("group", config)).takeFetcherRole())
        #expect(taken.nextSeq == 4 && taken.resumeState == "after-3")
    }

    /// An empty numbered page ends the source only once every unit before it is done or held by
    /// the job that found it (docs/scale-out.md, "Numbered pages any job fetches"): the end moves
    /// down to just past it, the fetcher's role is given back for good, pending units after it
    /// leave the queue, and an empty page found after it is let go.
    @Test(arguments: JoinBackend.allCases)
    func anEmptyPageEndsTheSourceOnceTheUnitsBeforeItAreSettled(backend: JoinBackend) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "j.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let (a, b) = (try database.sharedStore(), try database.sharedStore())
        defer {
            try? a.close()
            try? b.close()
        }
        let first = try a.joinRun(database.request("ends", config))
        let second = try b.joinRun(database.request("ends", config))
        _ = try #require(try first.takeFetcherRole())
        #expect(try first.enqueue((1...6).map { Page(seq: $0, source: "p\($0)", bytes: []) }, from: 1))
        func claim(_ run: any SharedRun) throws -> UnitRef { try #require(try run.claim(maxPageBytes: 1 << 20)?.page.unit) }
        let (one, two, three, four) = (try claim(first), try claim(first), try claim(first), try claim(second))
        #expect([one, two, three, four].map(\.seq) == [1, 2, 3, 4])
        // Units 1–3 are another job's and not done: unit 4's page cannot end the source yet,
        // and the job waiting on them claims none after it (nor any held before it).
        #expect(try second.settleEnd(of: four) == .earlierUnitsOpen)
        #expect(try second.claim(maxPageBytes: 1 << 20, before: 4) == nil && first.claim(maxPageBytes: 1 << 20, before: 2) == nil)
        // Unit 3's page can: the units before it are its own job's.
        #expect(try first.settleEnd(of: three) == .ends)
        guard case .running(let end, let fetching, _, let pending) = try first.state() else { throw StoreError.schema("not running") }
        #expect(end == 4 && !fetching && pending == 0, "units 5 and 6, pending, left the queue")
        #expect(try !first.enqueue([Page(seq: 7, source: "p7", bytes: [])], from: 7), "the fetcher's role is over")
        #expect(try first.takeFetcherRole() == nil && second.takeFetcherRole() == nil)
        // Unit 4's page is past the end: let go, out of the queue.
        #expect(try second.settleEnd(of: four) == .pastTheEnd)
        guard case .running(_, _, let elsewhere, _) = try first.state() else { throw StoreError.schema("not running") }
        #expect(elsewhere == 0, "only the first job's units 1–3 are open")
        // A job that died holding units before an empty page: the one waiting takes them over.
        if let memory = database.memory {
            memory.expireLeases(of: first.job, in: "ends")
        } else {
            try PGConnection(url: database.url).execute(
                "UPDATE _ingot_units SET lease_until = now() - interval '1 second' WHERE name = 'ends'")
        }
        let taken = try #require(try second.claim(maxPageBytes: 1 << 20, before: 3))
        #expect(taken.page.unit?.seq == 1 && taken.takenFrom == first.job)
        #expect(try second.claim(maxPageBytes: 1 << 20, before: 2) == nil)
    }

    /// A job waits for work on its queue connection, which listens from its first wait: the
    /// server holds two sessions a job, its writer and its queue (a listener of its own was a
    /// third), and a unit another job enqueues wakes the wait — a wait longer than the hang
    /// guard's limit here, so a missed notification is recorded by the guard, and the run then
    /// ends with the wait.
    @Test(.hangGuard) func aWaitingJobListensOnItsQueueConnection() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "j.yml")
        let database = try JoinDatabase(.postgresql, model: config.model)
        let (a, b) = (try database.sharedStore(), try database.sharedStore())
        defer {
            try? a.close()
            try? b.close()
        }
        let waiting = try a.joinRun(database.request("wake", config))
        let other = try b.joinRun(database.request("wake", config))
        waiting.waitForWork(upTo: 0.05)
        let sessions = try PGConnection(url: database.url).execute(
            """
            SELECT application_name, count(*) FROM pg_stat_activity
            WHERE datname = current_database() AND application_name LIKE 'ingot %' GROUP BY 1 ORDER BY 1
            """)
        #expect(sessions == [["ingot queue", "2"], ["ingot tool", "1"], ["ingot writer", "2"]])
        _ = try #require(try other.takeFetcherRole())
        #expect(try other.enqueue([Page(seq: 0, source: "p1", bytes: [])], from: 1))
        waiting.waitForWork(upTo: HangGuard.limit.inSeconds + 60)
        #expect(try waiting.claim(maxPageBytes: 1 << 20)?.page.seq == 1)
    }

    @Test func aClaimTakesOneUnitWhateverThePlan() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "j.yml")
        let database = try JoinDatabase(.postgresql, model: config.model)
        let store = try database.sharedStore()
        defer { try? store.close() }
        let run = try store.joinRun(database.request("plan", config))
        _ = try #require(try run.takeFetcherRole())
        #expect(try run.enqueue(Page(seq: 1, source: "p1", bytes: []), as: 1))
        // The statistics of a queue of one unit (what autovacuum saw early in a real run).
        let sql = try PGConnection(url: database.url)
        try sql.execute("ANALYZE _ingot_units")
        for seq in 2...40 { #expect(try run.enqueue(Page(seq: seq, source: "p\(seq)", bytes: []), as: seq)) }
        #expect(try run.endSource(at: 41))
        for seq in 1...40 {
            #expect(try run.claim(maxPageBytes: 1 << 20)?.page.unit?.seq == seq)
            let held = try sql.execute("SELECT count(*) FROM _ingot_units WHERE name = 'plan' AND status = 'claimed'")
            #expect(held.first?[0] == "\(seq)", "after claiming unit \(seq)")
        }
        // Planned once, generic, in the job's queue session: never with its values first.
        let queue = try #require(run as? PGSharedRun)
        let plans = try queue.control.withLock { control in
            try control.connection.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH c AS MATERIALIZED%'")
        }
        #expect(plans == [["39", "0"]], "the claim prepared at its second run, then planned generic")
        #expect(try run.claim(maxPageBytes: 1 << 20) == nil)
    }

    /// Two writers waiting on each other: PostgreSQL aborts one transaction (`deadlock_detected`).
    /// When it is a joined job's, holding one batch, the job writes the batch again the careful
    /// way and goes on (`lastWriteRetries`). The test makes the cycle: it holds dog 20 (an
    /// uncommitted insert) while the job copies dogs 10 and 20, then inserts dog 10 itself. The
    /// job's deadlock check runs 2 s after it starts waiting (the test's, 60 s after), so the job
    /// is the one aborted.
    @Test(.hangGuard) func aDeadlockedBatchIsWrittenAgain() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "j.yml")
        let database = try JoinDatabase(.postgresql, model: config.model)
        let name = String(database.url.split(separator: "/").last ?? "")
        try PGConnection(url: database.url).execute("ALTER DATABASE \(name) SET deadlock_timeout = '2s'")
        let store = try database.sharedStore()
        defer { try? store.close() }
        let run = try store.joinRun(database.request("cycle", config))
        _ = try #require(try run.takeFetcherRole())
        #expect(try run.enqueue(Page(seq: 1, source: "p1", bytes: []), as: 1))
        #expect(try run.endSource(at: 2))
        let unit = try #require(try run.claim(maxPageBytes: 1 << 20)).page
        let plan = MappingPlan(model: config.model, root: config.root, framing: config.framing)
        var mapper = RecordMapper(plan: plan)
        var pages: [DecodedPage] = []
        mapper.map(bytes: Array(#"{"results": [{"id": 1, "dogs": [{"id": 10}, {"id": 20}]}]}"#.utf8), seq: 1, source: "p", partRecords: 100)
        {
            var page = $0
            page.unit = unit.unit
            pages.append(page)
        }
        let resolver = BatchResolver(model: config.model, layouts: EntityLayout.layouts(of: config.model))
        let batch = try resolver.resolve(resolver.prepare(pages, uncommitted: UncommittedIdentities(), store: store), store: store)

        let holder = try PGConnection(url: database.url)
        try holder.execute("SET deadlock_timeout = '60s'")
        try holder.execute("BEGIN")
        try holder.execute("INSERT INTO dog (id) VALUES (20)")
        let outcome = Mutex<Result<Int, any Error>?>(nil)
        let writing = DispatchSemaphore(value: 0)
        let writer = store
        Thread.detachNewThread {
            let result = Result { () throws -> Int in
                var retries = 0
                try writer.write(batch) { retries = $0.retries }
                try writer.commit()
                return retries
            }
            outcome.withLock { $0 = result }
            writing.signal()
        }
        let watcher = try PGConnection(url: database.url)
        waitUntil {
            ((try? watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"))?
                .first?[0].flatMap { Int($0) } ?? 0) >= 1
        }
        // Waits for the job's transaction until the server aborts it.
        try holder.execute("INSERT INTO dog (id) VALUES (10)")
        try holder.execute("ROLLBACK")
        writing.wait()
        let retries = try outcome.withLock { $0 }?.get()
        #expect(retries == 1)
        #expect(try watcher.execute("SELECT id FROM dog ORDER BY id").map { $0[0] ?? "" } == ["10", "20"])
        #expect(
            try watcher.execute("SELECT person_id, dog_id FROM person_dogs ORDER BY 2").map { $0.map { $0 ?? "" } } == [
                ["1", "10"], ["1", "20"],
            ])
        #expect(try watcher.execute("SELECT status FROM _ingot_units WHERE name = 'cycle'").map { $0[0] ?? "" } == ["done"])
    }

    /// A joined run is refused before anything is written where nothing can share it; where its
    /// result would depend on which page was written first (`missing: ignore`), its units are
    /// committed in the run's order, and it ends as a single job's run.
    @Test func whatCannotRunJoinedIsRefused() throws {
        func attempt(_ yaml: String, _ database: JoinDatabase?) throws -> RunSummary {
            let config = try PipelineConfig.parse(text: yaml, path: "j.yml")
            var options = RunOptions()
            options.databasePath = database?.url ?? temporaryDirectory().appendingPathComponent("j.db").path
            options.progressInterval = 0
            options.join = "refused"
            let runner = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            let source = MemoryPageSource(StoreSeamTests.pages)
            return database?.run(runner, source) ?? runner.run(source: source)
        }
        let sqlite = try attempt(Self.yaml, nil)
        #expect(sqlite.status == .failed && sqlite.failureKind == .configuration)
        #expect(sqlite.error?.contains("PostgreSQL") == true)
        for backend in JoinBackend.allCases {
            let model = try PipelineConfig.parse(text: StoreSeamTests.yaml, path: "j.yml").model
            let database = try JoinDatabase(backend, model: model)
            let config = try PipelineConfig.parse(text: StoreSeamTests.yaml, path: "j.yml")
            #expect("\(PipelineRunner.joinOrder(config))".contains("person.vet (missing: ignore)"))
            let ordered = try attempt(StoreSeamTests.yaml, database)
            #expect(ordered.status == .finished, "\(backend): \(ordered.error ?? "")")
            let alone = temporaryDirectory().appendingPathComponent("alone.db").path
            var options = RunOptions()
            options.databasePath = alone
            options.progressInterval = 0
            let single = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
                .run(source: MemoryPageSource(StoreSeamTests.pages))
            #expect(single.status == .finished)
            #expect(try database.dump() == (try database.sqlite(alone)), "\(backend)")
        }
    }

    /// A job that joins a run already finished (a pod restarted late) does nothing and succeeds.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func joiningAFinishedRunDoesNothing(backend: JoinBackend) throws {
        let database = try JoinDatabase(backend, model: try PipelineConfig.parse(text: Self.yaml, path: "j.yml").model)
        #expect(try Self.runJoined(Self.yaml, StoreSeamTests.pages, database, name: "done", jobs: 1).allSatisfy { $0.status == .finished })
        let late = try Self.runJoined(Self.yaml, ["not json"], database, name: "done", jobs: 1)
        #expect(late.map(\.status) == [.finished])
        #expect(late.first?.counters.pages == 0)
        #expect(try database.runs().count == 1)
    }

    /// A job stalls holding units and never commits them; once their leases run out, the other
    /// jobs take them over and the run ends exactly as one job alone (no sleeping: the test
    /// ends the stalled job's leases).
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func aStalledJobsUnitsAreTakenOver(backend: JoinBackend) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "j.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let store = try database.sharedStore()
        // The stalled job fetches the whole source and claims the first two units.
        let stalled = try store.joinRun(database.request("stall", config, lease: 2))
        _ = try #require(try stalled.takeFetcherRole())
        for (k, page) in StoreSeamTests.pages.enumerated() {
            #expect(try stalled.enqueue(Page(seq: k + 1, source: "MemoryPageSource#\(k + 1)", bytes: Array(page.utf8)), as: k + 1))
        }
        #expect(try stalled.endSource(at: StoreSeamTests.pages.count + 1))
        #expect(try stalled.claim(maxPageBytes: 1 << 20)?.page.unit?.seq == 1)
        #expect(try stalled.claim(maxPageBytes: 1 << 20)?.page.unit?.seq == 2)
        if let memory = database.memory {
            memory.expireLeases(of: stalled.job, in: "stall")
        } else {
            try PGConnection(url: database.url).execute(
                "UPDATE _ingot_units SET lease_until = now() - interval '1 second' WHERE name = 'stall'")
        }
        let summaries = try Self.runJoined(Self.yaml, [], database, name: "stall", jobs: 2)
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.compactMap(\.error))")
        // The stalled job ends its part: the others finished the run.
        let end = try stalled.endJob(
            status: .failed, counters: RunCounters(), replacing: [], scopes: [:], maxPageBytes: 1 << 20, archive: nil)
        #expect(end.finished == nil)
        try store.close()
        let (sqlite, db) = try ingest(Self.yaml, StoreSeamTests.pages)
        #expect(try database.dump() == (try database.sqlite(db)))
        #expect(try database.runs().map(\.status) == ["finished"])
        #expect(try database.runs().first?.counters?.pages == sqlite.counters.pages)
    }

    /// A job that ends (failed, stopped) holding units it never committed lets them go as it
    /// ends: another job claims them at once, under a lease of 30 s, and knows whose they were.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func aJobThatEndsLetsItsUnitsGoAtOnce(backend: JoinBackend) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "j.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let store = try database.sharedStore()
        let other = try database.sharedStore()
        defer {
            try? store.close()
            try? other.close()
        }
        let ending = try store.joinRun(database.request("ends", config))
        _ = try #require(try ending.takeFetcherRole())
        for (k, page) in StoreSeamTests.pages.prefix(2).enumerated() {
            #expect(try ending.enqueue(Page(seq: k + 1, source: "p\(k + 1)", bytes: Array(page.utf8)), as: k + 1))
        }
        #expect(try ending.claim(maxPageBytes: 1 << 20)?.page.unit?.seq == 1)
        let taker = try other.joinRun(database.request("ends", config))
        let second = try #require(try taker.claim(maxPageBytes: 1 << 20))
        #expect(second.page.unit?.seq == 2 && second.takenFrom == nil)
        #expect(try taker.claim(maxPageBytes: 1 << 20) == nil, "unit 1 is held under its lease")
        _ = try ending.endJob(status: .failed, counters: RunCounters(), replacing: [], scopes: [:], maxPageBytes: 1 << 20, archive: nil)
        let first = try #require(try taker.claim(maxPageBytes: 1 << 20))
        #expect(first.page.unit?.seq == 1 && first.takenFrom == ending.job)
    }

    // MARK: - Processes, one killed

    /// `count` `ingot` processes with `arguments`, a 2 s lease, no archive, no progress lines,
    /// and `environment` added to this process's.
    static func startJobs(_ count: Int, _ arguments: [String], environment: [String: String] = [:]) throws -> [Process] {
        try (0..<count).map { _ in
            let process = Process()
            process.executableURL = CLITests.binary
            process.arguments = arguments + ["--lease", "2", "--progress-interval", "0", "--no-archive"]
            if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return process
        }
    }

    /// The people data set (1,500 persons, pages of 50, with faults), people.yml, and a fresh
    /// database with its tables and the join's made (a job adding a column would wait for the
    /// row held); the first person of the third page has its row held by an insert `holder` has
    /// not committed.
    static func peopleWithAPersonHeld() throws -> (
        pages: String, pipeline: URL, config: PipelineConfig, url: String, holder: PGConnection
    ) {
        let pages = try generatePeople(persons: 1500, pageSize: 50, faults: true)
        let pipeline = packageRoot.appendingPathComponent("pipelines/people.yml")
        let config = try PipelineConfig.parse(text: try String(contentsOf: pipeline, encoding: .utf8), path: "people.yml")
        let url = try PostgresServer.freshDatabase()
        _ = try PGStore(url: url, model: config.model)
        let setup = try PGConnection(url: url)
        for sql in PGStore.joinSchema(of: config.model) { try setup.execute(sql) }
        let third = try Data(contentsOf: URL(fileURLWithPath: pages).appendingPathComponent("page-00003.json"))
        let object = try JSONSerialization.jsonObject(with: third) as? [String: Any]
        let held = try #require((object?["results"] as? [[String: Any]])?.compactMap { $0["id"] as? Int }.first)
        let holder = try PGConnection(url: url)
        try holder.execute("BEGIN")
        try holder.execute("INSERT INTO person (id) VALUES ($1)", [String(held)])
        return (pages, pipeline, config, url, holder)
    }

    /// Waits until every unit of the jobs' run is done and the merge of persons waits for the row
    /// `holder` holds (its statement's start: the server shows the first kilobyte of a query),
    /// then kills every job with `kill -9` and lets the row go. Returns a connection to watch
    /// the database with.
    static func killJobsWhileTheEndMergeWaits(_ processes: [Process], url: String, holder: PGConnection) throws -> PGConnection {
        let watcher = try PGConnection(url: url)
        waitUntil {
            let open = (try? watcher.execute("SELECT count(*) FROM _ingot_units WHERE status <> 'done'"))?.first?[0] ?? nil
            let merging =
                (try? watcher.execute(
                    """
                    SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()
                      AND query LIKE '%COPY "person"%'
                    """))?.first?[0] ?? nil
            return open == "0" && merging == "1"
        }
        for process in processes where process.isRunning { kill(process.processIdentifier, SIGKILL) }
        for process in processes { process.waitUntilExit() }
        try holder.execute("ROLLBACK")
        return watcher
    }

    /// `jobs` processes share a run of the people data set, batch by batch with positions
    /// (`--no-bulk`: deferred batches touch no entity's row before the run's end, see
    /// ``theJobsKilledWhileTheRunsEndMergesLeaveItToTheNext()``); the job that is writing a chosen
    /// person is killed with `kill -9` while its transaction waits (the test holds that person's
    /// row: no timing involved). Its units are taken over once its lease runs out, and the
    /// tables end exactly as a single SQLite run leaves them; every page is counted once.
    @Test(.hangGuard, arguments: [2, 3])
    func aJobKilledMidRunIsTakenOver(jobs: Int) throws {
        let (pages, pipeline, config, url, holder) = try Self.peopleWithAPersonHeld()

        let processes = try Self.startJobs(
            jobs,
            [
                "run", pipeline.path, "--pages", pages, "--db", url, "--join", "people", "--batch-records", "100", "--no-bulk",
            ])
        let watcher = try PGConnection(url: url)
        // The job holding unit 3 (the third page) cannot commit it while the row is held; wait
        // until its transaction waits for the row.
        var victimJob = ""
        waitUntil {
            let waiting =
                (try? watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"))?
                .first?[0].flatMap { Int($0) } ?? 0
            let holder =
                (try? watcher.execute("SELECT job FROM _ingot_units WHERE name = 'people' AND seq = 3 AND status = 'claimed'"))?
                .first?[0] ?? nil
            victimJob = holder ?? ""
            return waiting >= 1 && holder != nil
        }
        let victimPid = try #require(Int32(victimJob.split(separator: "-").dropLast().last ?? ""))
        let victim = try #require(processes.first { $0.processIdentifier == victimPid })
        kill(victim.processIdentifier, SIGKILL)
        victim.waitUntilExit()
        try holder.execute("ROLLBACK")
        for process in processes where process !== victim {
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
        }

        let (sqlite, db) = try PostgresTests.singleSQLiteRun(config, pages: pages)
        #expect(sqlite.status == .finished)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        let connection = try PGConnection(url: url)
        #expect(
            try connection.execute("SELECT status, pages, records, rejected_records, inserted FROM _ingot_runs") == [
                [
                    "finished", String(sqlite.counters.pages), String(sqlite.counters.records), String(sqlite.counters.rejectedRecords),
                    String(sqlite.counters.inserted),
                ]
            ])
        #expect(
            try connection.execute("SELECT count(*) FROM _ingot_rejects") == [
                [String(sqlite.counters.rejectedRecords + sqlite.counters.rejectedPages)]
            ])
        // The victim's unit was claimed again by another job.
        #expect(try connection.execute("SELECT claims > 1, job <> $1 FROM _ingot_units WHERE seq = 3", [victimJob]) == [["t", "t"]])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_units WHERE status <> 'done'") == [["0"]])
    }

    /// Jobs that defer their batches (local pages, the default) write no entity's row before
    /// every unit is done; then they merge the run's tables part by part, and the part holding a
    /// person whose row the test holds waits there (no timing involved). Every job still running
    /// is killed with `kill -9` — the one merging that part, and any waiting to finish the run
    /// behind it — and that part's merge rolls back whole. A job started later under the same
    /// name finds every unit done, merges what is left, and finishes the run: the tables end
    /// exactly as a single SQLite run leaves them.
    @Test(.hangGuard) func theJobsKilledWhileTheRunsEndMergesLeaveItToTheNext() throws {
        let (pages, pipeline, config, url, holder) = try Self.peopleWithAPersonHeld()

        let arguments = ["run", pipeline.path, "--pages", pages, "--db", url, "--join", "people", "--batch-records", "100"]
        let watcher = try Self.killJobsWhileTheEndMergeWaits(try Self.startJobs(2, arguments), url: url, holder: holder)
        #expect(try watcher.execute("SELECT status FROM _ingot_joins") == [["running"]])
        let merged = try #require(try watcher.execute("SELECT count(*) FROM _ingot_join_merged").first?[0].flatMap { Int($0) })
        #expect(merged < StagedExchange.parts, "the held person's part is not written")

        let next = try #require(try Self.startJobs(1, arguments).first)
        next.waitUntilExit()
        #expect(next.terminationStatus == 0)
        let (sqlite, db) = try PostgresTests.singleSQLiteRun(config, pages: pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(
            try watcher.execute("SELECT status, pages, records, inserted FROM _ingot_runs") == [
                ["finished", String(sqlite.counters.pages), String(sqlite.counters.records), String(sqlite.counters.inserted)]
            ])
        #expect(try watcher.execute("SELECT count(*) FROM pg_tables WHERE tablename ~ '^_ingot_run[0-9]+_'") == [["0"]])
        // The foreign key's index a merging job may drop is there again once the run finished.
        #expect(try watcher.execute("SELECT count(*) FROM pg_indexes WHERE indexname = 'person_dogs_dog_id'") == [["1"]])
    }

    /// A join stopped after every unit is done but before its end merge (its job killed while the
    /// merge waits on a held row), then a single run of the same pipeline that stores a newer
    /// value: the single run overtakes the join — its deferred rows dropped, its run failed — and
    /// a job joining its name again is refused, exit 2, saying why. The newer value stays (the
    /// join merged its older rows over it by position: hundreds of rows reverted).
    @Test(.hangGuard) func aSingleRunOvertakesAStoppedJoinWhichIsNeverMergedOverIt() throws {
        let (pages, pipeline, _, url, holder) = try Self.peopleWithAPersonHeld()
        let arguments = ["run", pipeline.path, "--pages", pages, "--db", url, "--join", "people", "--batch-records", "100"]
        let watcher = try Self.killJobsWhileTheEndMergeWaits(try Self.startJobs(1, arguments), url: url, holder: holder)
        #expect(try watcher.execute("SELECT count(*) FROM pg_tables WHERE tablename ~ '^_ingot_run[0-9]+_x'").first?[0] != "0")

        // A single run of the pipeline, newer: persons 1 to 3 renamed.
        let newer = temporaryDirectory()
        try #"{"results": [{"id": 1, "first_name": "Newer"}, {"id": 2, "first_name": "Newer"}, {"id": 3, "first_name": "Newer"}]}"#
            .write(to: newer.appendingPathComponent("page-1.json"), atomically: true, encoding: .utf8)
        let single = try runIngot(["run", pipeline.path, "--pages", newer.path, "--db", url, "--no-archive"])
        #expect(single.status == 0, "\(single.stderr)")
        #expect(try watcher.execute("SELECT status FROM _ingot_joins WHERE name = 'people'") == [["overtaken"]])
        #expect(try watcher.execute("SELECT count(*) FROM pg_tables WHERE tablename ~ '^_ingot_run[0-9]+_x'") == [["0"]])
        #expect(try watcher.execute("SELECT count(*) FROM _ingot_units WHERE name = 'people'") == [["0"]])

        let rejoined = try runIngot(arguments + ["--no-archive", "--progress-interval", "0"])
        #expect(rejoined.status == 2, "\(rejoined.stderr)")
        #expect(
            rejoined.stderr.contains("can no longer be joined") && rejoined.stderr.contains("join under another name"), "\(rejoined.stderr)"
        )
        #expect(
            try watcher.execute("SELECT first_name FROM person WHERE id IN (1, 2, 3) ORDER BY id") == [["Newer"], ["Newer"], ["Newer"]])
    }

    /// A single run resumed after a join of its pipeline was left unfinished overtakes it too:
    /// what the resume stores is read from the source as it is now.
    @Test func aResumedSingleRunOvertakesAJoinLeftUnfinished() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "join.yml")
        let url = try PostgresServer.freshDatabase()
        let store = try PGStore(url: url, model: config.model)
        try store.beginRun(.new(id: "single", pipeline: config.name, startedAt: Date(), archive: nil))
        try store.commit()
        try store.close()
        let jobStore = try PGJoinedStore(url: url, model: config.model, plan: .joinedPositions)
        _ = try jobStore.joinRun(Self.request("left", config))
        try jobStore.close()
        let resumed = try PGStore(url: url, model: config.model)
        try resumed.beginRun(.resumed(id: "single", archive: nil))
        try resumed.commit()
        try resumed.close()
        let watcher = try PGConnection(url: url)
        #expect(try watcher.execute("SELECT status FROM _ingot_joins WHERE name = 'left'") == [["overtaken"]])
        #expect(try watcher.execute("SELECT error FROM _ingot_joins WHERE name = 'left'").first?[0]?.contains("run single") == true)
    }

    /// A source that can only be followed (next URLs): one job fetches and enqueues. The fetcher
    /// is killed with `kill -9` while the server holds its request for page 9 (no timing
    /// involved); once its lease runs out another job takes the role over, resumes the source at
    /// page 9's URL, and the run ends exactly as a single run.
    @Test(.hangGuard) func theFetcherKilledIsReplaced() throws {
        let pages = try generatePeople(persons: 1500, pageSize: 100)
        // Held long enough for the kill, and not forever: under load a lease may lapse and the
        // role move before the kill, leaving request 9 to a job that is not killed.
        let server = try FixtureServer(people: pages, faults: "slow:9", slow: 20)
        let url = try PostgresServer.freshDatabase()
        let pipeline = temporaryDirectory().appendingPathComponent("people-http.yml")
        let text = try peopleOverHTTPText("\(server.base)/people/next", ["paginate: {next_url: next}", "timeout_s: 7200"])
        try Data(text.utf8).write(to: pipeline)
        let processes = try Self.startJobs(2, ["run", pipeline.path, "--db", url, "--join", "follow"])
        let watcher = try PGConnection(url: url)
        var fetcher = ""
        // Page 8 is enqueued and request 9 reached the server (held there): the fetcher is waiting on it.
        waitUntil {
            let row = (try? watcher.execute("SELECT next_seq, fetcher FROM _ingot_joins WHERE name = 'follow'"))?.first
            fetcher = (row?[1] ?? nil) ?? ""
            return row?[0].flatMap { Int($0) } == 9 && !fetcher.isEmpty && (try? server.counters()["people_requests"]) ?? 0 >= 9
        }
        let pid = try #require(Int32(fetcher.split(separator: "-").dropLast().last ?? ""))
        let victim = try #require(processes.first { $0.processIdentifier == pid })
        kill(victim.processIdentifier, SIGKILL)
        victim.waitUntilExit()
        for process in processes where process !== victim {
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
        }
        let config = try PipelineConfig.parse(text: text, path: "people.yml")
        let (sqlite, db) = try PostgresTests.singleSQLiteRun(config, pages: pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(
            try watcher.execute("SELECT status, pages, records FROM _ingot_runs") == [
                [
                    "finished", String(sqlite.counters.pages), String(sqlite.counters.records),
                ]
            ])
        #expect(try watcher.execute("SELECT status, fetcher <> $1 OR fetcher IS NULL FROM _ingot_joins", [fetcher]) == [["finished", "t"]])
    }
}
