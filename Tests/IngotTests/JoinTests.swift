import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Ingot

/// Several jobs sharing one run (`--join NAME`, docs/scale-out.md): whatever job commits which
/// unit in whatever order, and whichever job is killed, the tables end exactly as one job
/// alone leaves them (SQLite's single run is the reference).
@Suite(.serialized)
struct JoinTests {
    /// StoreSeamTests' pipeline, every relationship stubbing (a joined run refuses the others).
    static let yaml = StoreSeamTests.yaml.replacingOccurrences(of: "vet: {to: vet, missing: ignore}", with: "vet: {to: vet}")

    /// A request to join `name` as a job running `config` over a memory source would make it.
    static func request(_ name: String, _ config: PipelineConfig, lease: Double = 30) -> SharedRunRequest {
        SharedRunRequest(
            name: name, pipeline: config.name, proposedRunID: "r-\(name)", startedAt: Date(), lease: lease, lockTimeout: 5,
            spec: ["pipeline": "sha256:" + SHA256.hex(config.text.utf8), "source": "MemoryPageSource",
                   "max_page_bytes": "\(RunOptions.defaultMaxPageBytes)"])
    }

    /// `jobs` runners of `yaml` over `pages` joined under `name`, at once, each on a thread of
    /// its own with its own source (only the fetcher reads it); their summaries.
    private func runJoined(
        _ yaml: String, _ pages: [String], url: String, name: String, jobs: Int, batchRecords: Int = 2, archives: [String] = []
    ) throws -> [RunSummary] {
        let config = try PipelineConfig.parse(text: yaml, path: "join.yml")
        let summaries = Mutex<[RunSummary]>([])
        let group = DispatchGroup()
        for k in 0..<jobs {
            var options = RunOptions()
            options.archiveDirectory = archives.isEmpty ? nil : archives[k]
            options.databasePath = url
            options.batchRecords = batchRecords
            options.progressInterval = 0
            options.join = name
            options.lease = 2
            let runner = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            group.enter()
            Thread.detachNewThread {
                let summary = runner.run(source: MemoryPageSource(pages))
                summaries.withLock { $0.append(summary) }
                group.leave()
            }
        }
        group.wait()
        return summaries.withLock { $0 }
    }

    @Test(.timeLimit(.minutes(1)), arguments: [2, 3])
    func jobsSharingARunEndInASingleJobsState(jobs: Int) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "join.yml")
        let url = try PostgresServer.freshDatabase()
        let (sqlite, db) = try ingest(Self.yaml, StoreSeamTests.pages)
        let archives = (0..<jobs).map { _ in temporaryDirectory().path }
        let summaries = try runJoined(Self.yaml, StoreSeamTests.pages, url: url, name: "merge", jobs: jobs, archives: archives)
        #expect(summaries.count == jobs)
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.compactMap(\.error))")
        #expect(Set(summaries.map(\.runID)).count == 1)
        let expected = try PostgresTests.sqliteDump(db, config.model)
        let got = try PostgresTests.postgresDump(url, config.model)
        for table in expected.keys.sorted() { #expect(got[table] == expected[table], "table \(table)") }
        // Every page once: the jobs' shares add up to the single run's counts.
        #expect(summaries.map(\.counters.pages).reduce(0, +) == sqlite.counters.pages)
        #expect(summaries.map(\.counters.records).reduce(0, +) == sqlite.counters.records)
        // Rows created are counted by the database: once each, whichever job created them.
        #expect(summaries.map(\.counters.inserted).reduce(0, +) == sqlite.counters.inserted)
        let connection = try PGConnection(url: url)
        #expect(
            try connection.execute("SELECT status, pages, records, rejected_records, rejected_pages FROM _ingot_runs") == [
                [
                    "finished", String(sqlite.counters.pages), String(sqlite.counters.records), String(sqlite.counters.rejectedRecords),
                    String(sqlite.counters.rejectedPages),
                ]
            ])
        #expect(
            try connection.execute("SELECT count(*) FROM _ingot_rejects") == [
                [String(sqlite.counters.rejectedRecords + sqlite.counters.rejectedPages)]
            ])
        #expect(
            try connection.execute("SELECT status, end_seq FROM _ingot_joins") == [["finished", String(StoreSeamTests.pages.count + 1)]])
        #expect(
            try connection.execute("SELECT count(*) FROM _ingot_units WHERE status = 'done' AND length(payload) = 0") == [
                [String(StoreSeamTests.pages.count)]
            ])
        // The job that finished the run archived every page, in source order: its replay into
        // SQLite ends where the single run did.
        let files = archives.flatMap { dir in
            ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).map { dir + "/" + $0 }
        }
        #expect(files.count == 1)
        let reader = try ArchiveReader(path: try #require(files.first))
        #expect(reader.entries.map(\.metadata.seq) == Array(1...StoreSeamTests.pages.count))
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("replay.db").path
        options.progressInterval = 0
        let replay = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(
            source: ArchivePageSource(reader: reader))
        #expect(replay.status == .finished)
        #expect(try PostgresTests.sqliteDump(options.databasePath, config.model) == expected)
    }

    /// Later runs win over earlier ones, joined or not: positions carry the join's number, and a
    /// single run's writes (no position) lose to any joined unit. `write: replace` deletes, at the
    /// end of a joined run, the rows no unit of it touched.
    @Test(.timeLimit(.minutes(1))) func runsAfterRunsAndReplaceMatchSQLite() throws {
        let pages = StoreSeamTests.pages
        let replace = Self.yaml.replacingOccurrences(of: "root: person", with: "root: person\nwrite: replace")
        let url = try PostgresServer.freshDatabase()
        let (_, db) = try ingest(Self.yaml, Array(pages[0...1]))
        try ingest(Self.yaml, [pages[3]], db: db)
        let bo = [#"{"results": [{"id": 2, "name": "Bo", "dogs": [11]}]}"#, #"{"results": [{"id": 3, "dogs": [7]}]}"#]
        let (sqlite, _) = try ingest(replace, bo, db: db)

        #expect(try runJoined(Self.yaml, Array(pages[0...1]), url: url, name: "first", jobs: 2).allSatisfy { $0.status == .finished })
        var options = RunOptions()
        options.databasePath = url
        options.progressInterval = 0
        let single = PipelineRunner(
            config: try PipelineConfig.parse(text: Self.yaml, path: "j.yml"), options: options, logger: LogCapture().logger
        )
        .run(source: MemoryPageSource([pages[3]]))
        #expect(single.status == .finished)
        let last = try runJoined(replace, bo, url: url, name: "last", jobs: 2)
        #expect(last.allSatisfy { $0.status == .finished })
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT deleted FROM _ingot_runs WHERE join_name = 'last'") == [[String(sqlite.counters.deleted)]])
        #expect(sqlite.counters.deleted > 0)
        let model = try PipelineConfig.parse(text: Self.yaml, path: "j.yml").model
        #expect(try PostgresTests.postgresDump(url, model) == (try PostgresTests.sqliteDump(db, model)))
    }

    /// A job that lost a unit (its lease ran out and another job claimed it again) cannot commit
    /// it: its transaction is rolled back, and the batch's other units go back to the queue.
    @Test func aUnitTakenOverCannotBeCommittedByItsFormerHolder() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "j.yml")
        let url = try PostgresServer.freshDatabase()
        let store = try PGStore(url: url, model: config.model)
        let run = try store.joinRun(Self.request("lost", config))
        let connection = try PGConnection(url: url)
        for seq in 1...2 {
            try connection.execute(
                "INSERT INTO _ingot_units (name, seq, status, source, payload, length) VALUES ('lost', $1, 'pending', 'p', ''::bytea, 0)",
                [String(seq)])
        }
        let first = try #require(try run.claim(maxPageBytes: 1 << 20)).page
        let second = try #require(try run.claim(maxPageBytes: 1 << 20)).page
        // Another job takes the first unit over (as a claim after its lease ran out does).
        try connection.execute(
            "UPDATE _ingot_units SET job = 'other', claims = claims + 1 WHERE name = 'lost' AND seq = $1", [String(first.seq)])
        let plan = MappingPlan(model: config.model, root: config.root, recordsPath: config.recordsPath)
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
        let error = #expect(throws: StoreError.self) { try store.write(batch) {} }
        #expect(error?.kind == .claimLost && error?.units == [first.seq])
        #expect(try connection.execute("SELECT count(*) FROM person") == [["0"]])
        #expect(
            try connection.execute("SELECT seq, status, job FROM _ingot_units ORDER BY seq") == [
                ["1", "claimed", "other"], ["2", "pending", nil],
            ])
    }

    /// A joined run is refused before anything is written where its result could differ from a
    /// single job's, or where nothing can share it.
    @Test func whatCannotRunJoinedIsRefused() throws {
        func attempt(_ yaml: String, _ database: String) throws -> RunSummary {
            var options = RunOptions()
            options.databasePath = database
            options.progressInterval = 0
            options.join = "refused"
            return PipelineRunner(
                config: try PipelineConfig.parse(text: yaml, path: "j.yml"), options: options, logger: LogCapture().logger
            )
            .run(source: MemoryPageSource(StoreSeamTests.pages))
        }
        let sqlite = try attempt(Self.yaml, temporaryDirectory().appendingPathComponent("j.db").path)
        #expect(sqlite.status == .failed && sqlite.failureKind == .configuration)
        #expect(sqlite.error?.contains("PostgreSQL") == true)
        let url = try PostgresServer.freshDatabase()
        let ordered = try attempt(StoreSeamTests.yaml, url)
        #expect(ordered.status == .failed && ordered.failureKind == .configuration)
        #expect(ordered.error?.contains("person.vet (missing: ignore)") == true)
        #expect(try PGConnection(url: url).execute("SELECT to_regclass('_ingot_joins')::text") == [[nil]])
    }

    /// A job that joins a run already finished (a pod restarted late) does nothing and succeeds.
    @Test(.timeLimit(.minutes(1))) func joiningAFinishedRunDoesNothing() throws {
        let url = try PostgresServer.freshDatabase()
        #expect(try runJoined(Self.yaml, StoreSeamTests.pages, url: url, name: "done", jobs: 1).allSatisfy { $0.status == .finished })
        let late = try runJoined(Self.yaml, ["not json"], url: url, name: "done", jobs: 1)
        #expect(late.map(\.status) == [.finished])
        #expect(late.first?.counters.pages == 0)
        #expect(try PGConnection(url: url).execute("SELECT count(*) FROM _ingot_runs") == [["1"]])
    }

    // MARK: - Processes, one killed

    /// `count` `ingot` processes with `arguments`, a 2 s lease, no archive, no progress lines.
    private func startJobs(_ count: Int, _ arguments: [String]) throws -> [Process] {
        try (0..<count).map { _ in
            let process = Process()
            process.executableURL = CLITests.binary
            process.arguments = arguments + ["--lease", "2", "--progress-interval", "0", "--no-archive"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return process
        }
    }

    /// `jobs` processes share a run of the people data set; the job that is writing a chosen
    /// person is killed with `kill -9` while its transaction waits (the test holds that person's
    /// row: no timing involved). Its units are taken over once its lease runs out, and the
    /// tables end exactly as a single SQLite run leaves them; every page is counted once.
    @Test(.timeLimit(.minutes(2)), arguments: [2, 3])
    func aJobKilledMidRunIsTakenOver(jobs: Int) throws {
        let pages = try generatePeople(persons: 1500, pageSize: 50, faults: true)
        let pipeline = packageRoot.appendingPathComponent("pipelines/people.yml")
        let config = try PipelineConfig.parse(text: try String(contentsOf: pipeline, encoding: .utf8), path: "people.yml")
        let url = try PostgresServer.freshDatabase()
        // The tables first (a job adding a column would wait for the row held below).
        _ = try PGStore(url: url, model: config.model)
        let setup = try PGConnection(url: url)
        for sql in PGStore.joinSchema(of: config.model) { try setup.execute(sql) }
        // The first person of the third page: its row is held by an insert the test does not commit.
        let third = try Data(contentsOf: URL(fileURLWithPath: pages).appendingPathComponent("page-00003.json"))
        let object = try JSONSerialization.jsonObject(with: third) as? [String: Any]
        let held = try #require((object?["results"] as? [[String: Any]])?.compactMap { $0["id"] as? Int }.first)
        let holder = try PGConnection(url: url)
        try holder.execute("BEGIN")
        try holder.execute("INSERT INTO person (id) VALUES ($1)", [String(held)])

        let processes = try startJobs(
            jobs,
            [
                "run", pipeline.path, "--pages", pages, "--db", url, "--join", "people", "--batch-records", "100",
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

    /// A source that can only be followed (next URLs): one job fetches and enqueues. The fetcher
    /// is killed with `kill -9` while the server holds its request for page 9 (no timing
    /// involved); once its lease runs out another job takes the role over, resumes the source at
    /// page 9's URL, and the run ends exactly as a single run.
    @Test(.timeLimit(.minutes(2))) func theFetcherKilledIsReplaced() throws {
        let pages = try generatePeople(persons: 1500, pageSize: 100)
        // Held long enough for the kill, and not forever: under load a lease may lapse and the
        // role move before the kill, leaving request 9 to a job that is not killed.
        let server = try FixtureServer(people: pages, faults: "slow:9", slow: 20)
        let url = try PostgresServer.freshDatabase()
        let pipeline = temporaryDirectory().appendingPathComponent("people-http.yml")
        let text = try peopleOverHTTPText("\(server.base)/people/next", ["paginate: {next_url: next}", "timeout_s: 7200"])
        try Data(text.utf8).write(to: pipeline)
        let processes = try startJobs(2, ["run", pipeline.path, "--db", url, "--join", "follow"])
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
