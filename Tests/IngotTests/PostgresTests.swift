import Foundation
import GRDB
import Testing

@testable import Ingot

/// The PostgreSQL backend against a throwaway server (``PostgresServer``): the same pages end in
/// the same state as in SQLite — values compared by meaning (a double, an instant, a JSON value),
/// since each database prints its types its own way.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct PostgresTests {
    /// Every table of `model` in the PostgreSQL database at `url`, as canonical text, sorted.
    static func postgresDump(_ url: String, _ model: EntityModel) throws -> [String: [[String]]] {
        let connection = try PGConnection(url: url)
        var out: [String: [[String]]] = [:]
        for layout in EntityLayout.layouts(of: model) {
            let columns = layout.columns.map { column -> String in
                let c = "\"\(column.name)\""
                switch PGStore.columnType(column.type) {
                case "boolean": return "CASE WHEN \(c) IS NULL THEN NULL WHEN \(c) THEN '1' ELSE '0' END"
                case "timestamptz": return "to_char(\(c), 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
                case "date": return "to_char(\(c), 'YYYY-MM-DD')"
                default: return "\(c)::text"
                }
            }
            out[layout.table] = try connection.execute("SELECT \(columns.joined(separator: ", ")) FROM \"\(layout.table)\"")
                .map { row in zip(row, layout.columns).map { canonical($0 ?? "NULL", $1.type, postgres: true) } }
                .sorted { $0.lexicographicallyPrecedes($1) }
            for toMany in layout.toMany where toMany.hasJoinTable {
                let linkColumns = (toMany.sourceColumns + toMany.targetColumns + (toMany.isOrdered ? ["position"] : [])).map {
                    "\"\($0)\"::text"
                }
                out[toMany.joinTable] = try connection.execute("SELECT \(linkColumns.joined(separator: ", ")) FROM \"\(toMany.joinTable)\"")
                    .map { $0.map { $0 ?? "NULL" } }.sorted { $0.lexicographicallyPrecedes($1) }
            }
        }
        return out
    }

    /// The reference: one job alone over the pages of directory `pages`, into a new SQLite database.
    static func singleSQLiteRun(_ config: PipelineConfig, pages: String) throws -> (RunSummary, db: String) {
        let db = temporaryDirectory().appendingPathComponent("reference.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: try DirectoryPageSource(directory: pages, glob: "page-*.json"))
        return (summary, db)
    }

    /// The same of a SQLite database.
    static func sqliteDump(_ db: String, _ model: EntityModel) throws -> [String: [[String]]] {
        var out: [String: [[String]]] = [:]
        for layout in EntityLayout.layouts(of: model) {
            let columns = layout.columns.map { "\"\($0.name)\"" }.joined(separator: ", ")
            out[layout.table] = try rows(db, "SELECT \(columns) FROM \"\(layout.table)\"")
                .map { row in zip(row, layout.columns).map { canonical($0, $1.type, postgres: false) } }
                .sorted { $0.lexicographicallyPrecedes($1) }
            for toMany in layout.toMany where toMany.hasJoinTable {
                let linkColumns = (toMany.sourceColumns + toMany.targetColumns + (toMany.isOrdered ? ["position"] : [])).map { "\"\($0)\"" }
                out[toMany.joinTable] = try rows(db, "SELECT \(linkColumns.joined(separator: ", ")) FROM \"\(toMany.joinTable)\"")
                    .sorted { $0.lexicographicallyPrecedes($1) }
            }
        }
        return out
    }

    /// A value as text both databases agree on: doubles and JSON by value, instants to the
    /// microsecond in UTC.
    static func canonical(_ text: String, _ type: AttributeType, postgres: Bool) -> String {
        guard text != "NULL" else { return text }
        switch type {
        case .double:
            return Double(text).map { String($0) } ?? text
        case .json:
            guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8), options: .fragmentsAllowed),
                let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .fragmentsAllowed])
            else { return text }
            return String(decoding: data, as: UTF8.self)
        case .date where !postgres && PGStore.columnType(type) == "timestamptz":
            // SQLite keeps the mapper's text: `yyyy-MM-dd`, or a time with 0-9 fraction digits.
            if text.count == 10 { return text + "T00:00:00.000000Z" }
            guard text.hasSuffix("Z") else { return text }
            let body = text.dropLast()
            let parts = body.split(separator: ".", maxSplits: 1)
            let fraction = parts.count == 2 ? String(parts[1].prefix(6)) : ""
            return parts[0] + "." + fraction.padding(toLength: 6, withPad: "0", startingAt: 0) + "Z"
        default:
            return text
        }
    }

    private func run(_ yaml: String, _ pages: [String], url: String, batchRecords: Int? = nil) throws -> RunSummary {
        let config = try PipelineConfig.parse(text: yaml, path: "pg.yml")
        var options = RunOptions()
        options.databasePath = url
        options.batchRecords = batchRecords
        options.progressInterval = 0
        return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(pages))
    }

    @Test(arguments: [1, 50])
    func theMergeRulesEndInSQLitesState(batchRecords: Int) throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: StoreSeamTests.yaml, path: "pg.yml")
        let (sqlite, db) = try ingest(StoreSeamTests.yaml, StoreSeamTests.pages, batchRecords: batchRecords)
        let summary = try run(StoreSeamTests.yaml, StoreSeamTests.pages, url: url, batchRecords: batchRecords)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters == sqlite.counters)
        let expected = try Self.sqliteDump(db, config.model)
        let got = try Self.postgresDump(url, config.model)
        for table in expected.keys.sorted() { #expect(got[table] == expected[table], "table \(table)") }
        #expect(expected.allSatisfy { !$0.value.isEmpty })
        // Rejects and the run's row, with PostgreSQL's types.
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT count(*), count(DISTINCT reason_code) FROM _ingot_rejects") == [["2", "2"]])
        #expect(try connection.execute("SELECT status, pages, rejected_pages FROM _ingot_runs") == [["finished", "4", "1"]])
        #expect(
            try connection.execute(
                "SELECT data_type FROM information_schema.columns WHERE table_name = 'person' AND column_name IN ('active', 'born', 'seen', 'meta') ORDER BY column_name"
            )
                == [["boolean"], ["date"], ["jsonb"], ["timestamp with time zone"]])
    }

    /// A batch's new rows, and the links of its new owners, are copied straight into their
    /// tables; a batch that meets one already there (here a link left behind by hand, whose owner
    /// is not stored) is written again through the staging tables: the run finishes, nothing is
    /// lost, and the tables are what SQLite makes of the same database.
    @Test func aNewOwnersLinkAlreadyThereIsWrittenTheCarefulWay() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: StoreSeamTests.yaml, path: "pg.yml")
        let first = [#"{"results": [{"id": 100, "dogs": [10]}]}"#]
        let second = [#"{"results": [{"id": 1, "name": "Ada", "dogs": [10, 11, 10], "friends": [100, 100]}, {"id": 2, "dogs": [11]}]}"#]
        #expect(try run(StoreSeamTests.yaml, first, url: url).status == .finished)
        let (_, db) = try ingest(StoreSeamTests.yaml, first)
        let orphan = "INSERT INTO person_dogs (person_id, dog_id) VALUES (1, 10)"
        _ = try PGConnection(url: url).execute(orphan)
        var unchecked = Configuration()
        unchecked.foreignKeysEnabled = false  // SQLite declares the relation; the orphan breaks it on purpose
        try DatabaseQueue(path: db, configuration: unchecked).write { try $0.execute(sql: orphan) }
        let summary = try run(StoreSeamTests.yaml, second, url: url)
        let (sqlite, _) = try ingest(StoreSeamTests.yaml, second, db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters == sqlite.counters)
        #expect(summary.counters.inserted == 3)
        let got = try Self.postgresDump(url, config.model)
        #expect(got == (try Self.sqliteDump(db, config.model)))
        #expect(got["person_dogs"] == [["1", "10"], ["1", "11"], ["100", "10"], ["2", "11"]])
        #expect(got["person_friends"] == [["1", "100", "0"]])
    }

    /// Idle joined jobs sleep on `LISTEN` until a job or the fetcher says there is work: a
    /// notification sent (and committed) before the wait wakes it at once, one inside a
    /// transaction only when that commits, and a wait with nothing pending times out.
    @Test func waitingJobsAreWokenByNotifications() throws {
        let url = try PostgresServer.freshDatabase()
        let (listener, sender) = (try PGConnection(url: url), try PGConnection(url: url))
        try listener.execute("LISTEN \(PGSharedRun.channel)")
        #expect(listener.waitForNotification(timeout: 0) == false)
        PGSharedRun.notify(on: sender, "people-1")
        #expect(listener.waitForNotification(timeout: 60))
        #expect(listener.waitForNotification(timeout: 0) == false, "consumed")
        try sender.execute("BEGIN")
        PGSharedRun.notify(on: sender, "people-1")
        #expect(listener.waitForNotification(timeout: 0) == false, "not before the commit")
        try sender.execute("COMMIT")
        #expect(listener.waitForNotification(timeout: 60))
    }

    /// A joined job's store makes the work queue's tables with the model's, in one schema step
    /// that reads the catalog once (``PGCatalog``): what it reads is every table, column, index,
    /// trigger and identity of the schema, and a second job's step finds nothing missing. On a
    /// database a single run made, the queue's tables are not the pipeline's schema migrated.
    @Test func aJoinedStoreMakesTheQueueWithTheModelFromOneReadOfTheCatalog() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        try PGStore(url: url, model: config.model).close()
        let store = try PGJoinedStore(url: url, model: config.model, plan: .joinedDeferred)
        defer { try? store.close() }
        #expect(store.migration.isEmpty, "\(store.migration)")
        let connection = try PGConnection(url: url)
        let catalog = try PGCatalog.read(connection)
        let layouts = EntityLayout.layouts(of: config.model)
        #expect(catalog.tables.isSuperset(of: layouts.map(\.table) + ["_ingot_runs", "_ingot_joins", "_ingot_units", "_ingot_join_jobs"]))
        for layout in layouts {
            #expect(catalog.columnNames.contains(layout.table + "." + PGStore.positionColumn), "\(layout.table)")
            let identity = layout.identitySlots.map { layout.columns[$0].name }
            #expect(catalog.identities[layout.table] == (identity.isEmpty ? nil : identity), "\(layout.table)")
        }
        #expect(catalog.identities["visit"] == ["clinic", "day"], "a composite identity, in its order")
        #expect(catalog.indexes.isSuperset(of: ["_ingot_units_open", "_ingot_units_pkey"]))
        #expect(catalog.payloadsStoredExternally)
        #expect(PGStore.missing(PGStore.schema(of: config.model) + PGStore.joinSchema(of: config.model), in: catalog).isEmpty)
        // A single run's store opened on the same database applies nothing and meets no conflict.
        let single = try PGStore(url: url, model: config.model)
        #expect(single.migration.isEmpty)
        try single.close()
        #expect(try PGStore.schemaConflicts(config.model, catalog, connection).isEmpty)
    }

    /// Each connection tells the server what it is for (`application_name`), unless the URL
    /// names one: a DBA's `pg_stat_activity` then tells a job's writer from its queue.
    @Test func aConnectionNamesItsRoleUnlessTheURLDoes() throws {
        let url = try PostgresServer.freshDatabase()
        let roles = try PGConnection.Role.allCases.map { role in
            try PGConnection(url: url, role: role).execute("SHOW application_name").first?[0]
        }
        #expect(roles == ["ingot writer", "ingot reader", "ingot queue", "ingot fetcher", "ingot tool"])
        let named = url + (url.contains("?") ? "&" : "?") + "application_name=nightly"
        #expect(try PGConnection(url: named, role: .writer).execute("SHOW application_name") == [["nightly"]])
    }
    /// A statement with parameters runs prepared from its second run (docs/stores.md, "Prepared
    /// statements"), and answers as it would unprepared: after a rollback, with its table made
    /// again, with a column's type changed under it, and failing when its table is gone.
    @Test func repeatedStatementsRunPreparedAndAnswerAsUnprepared() throws {
        let url = try PostgresServer.freshDatabase()
        let connection = try PGConnection(url: url)
        func prepared() throws -> [String?] {
            try connection.execute("SELECT statement FROM pg_prepared_statements ORDER BY name").map { $0[0] }
        }
        try connection.execute("CREATE TABLE t (id bigint, name text); INSERT INTO t VALUES (1, 'a'), (2, 'b')")
        let select = "SELECT name FROM t WHERE id = $1"
        #expect(try connection.execute(select, ["1"]) == [["a"]])
        #expect(try prepared().isEmpty)
        #expect(try connection.execute(select, ["2"]) == [["b"]])
        #expect(try prepared() == [select])
        try connection.execute("BEGIN")
        #expect(try connection.execute(select, ["1"]) == [["a"]])
        try connection.execute("ROLLBACK")
        try connection.execute("DROP TABLE t; CREATE TABLE t (id bigint, name text); INSERT INTO t VALUES (1, 'c')")
        #expect(try connection.execute(select, ["1"]) == [["c"]])
        // A result type the plan did not have: answered unprepared, then prepared afresh.
        try connection.execute("ALTER TABLE t ALTER COLUMN name TYPE bigint USING 7")
        #expect(try connection.execute(select, ["1"]) == [["7"]])
        #expect(try connection.execute(select, ["1"]) == [["7"]])
        #expect(try connection.execute(select, ["1"]) == [["7"]])
        try connection.execute("DROP TABLE t")
        #expect(throws: StoreError.self) { try connection.execute(select, ["1"]) }
    }

    /// A joined job between two parts of the deferred merge asks whether the run's tables are
    /// still there, inside a transaction that began before the job finishing the run dropped
    /// them: the answer is the committed catalog (a name lookup through the backend's cache
    /// answered "still there" here, and the part's merge failed on a missing table).
    @Test func tableExistsSeesADropCommittedInsideATransaction() throws {
        let url = try PostgresServer.freshDatabase()
        let (merging, finishing) = (try PGConnection(url: url), try PGConnection(url: url))
        try finishing.execute("CREATE TABLE _ingot_run1_e0 (id bigint)")
        #expect(try merging.tableExists("_ingot_run1_e0"))
        _ = try merging.execute("SELECT count(*) FROM _ingot_run1_e0")
        try merging.execute("BEGIN")
        try finishing.execute("DROP TABLE _ingot_run1_e0")
        #expect(try merging.tableExists("_ingot_run1_e0") == false)
        try merging.execute("COMMIT")
        #expect(try merging.tableExists("nothing_of_that_name") == false)
    }

    /// A result read a row at a time, as the end of a joined run reads the exchanged blobs
    /// (libpq's single-row mode): every row in order, a NULL as no bytes; a server error after
    /// some rows, and a reader that throws, end the read with their error and leave the
    /// connection usable.
    @Test func binaryValuesAreReadRowByRow() throws {
        struct Enough: Error {}
        let connection = try PGConnection(url: try PostgresServer.freshDatabase())
        var seen: [[UInt8]] = []
        try connection.forEachBinaryValue(
            "SELECT CASE WHEN i = 3 THEN NULL ELSE int4send(i) END FROM generate_series(1, $1::int) AS i", ["4"]
        ) { seen.append(Array($0)) }
        #expect(seen == [[0, 0, 0, 1], [0, 0, 0, 2], [], [0, 0, 0, 4]])

        seen = []
        #expect(throws: StoreError.self) {
            try connection.forEachBinaryValue("SELECT int4send(6 / (3 - i)) FROM generate_series(1, 5) AS i") { seen.append(Array($0)) }
        }
        #expect(seen == [[0, 0, 0, 3], [0, 0, 0, 6]] && connection.lastErrorState == "22012")

        seen = []
        #expect(throws: Enough.self) {
            try connection.forEachBinaryValue("SELECT int4send(i) FROM generate_series(1, 1000) AS i") { value in
                seen.append(Array(value))
                if seen.count == 2 { throw Enough() }
            }
        }
        #expect(seen.count == 2)
        #expect(try connection.execute("SELECT 41 + 1") == [["42"]])
    }

    @Test func replaceAndStubsMatchSQLite() throws {
        let yaml = StoreSeamTests.yaml.replacingOccurrences(of: "root: person", with: "root: person\nwrite: replace")
        let config = try PipelineConfig.parse(text: yaml, path: "pg.yml")
        let url = try PostgresServer.freshDatabase()
        let first = Array(StoreSeamTests.pages[0...1])
        let second = [#"{"results": [{"id": 2, "name": "Bo", "dogs": [11]}]}"#]
        let (_, db) = try ingest(yaml, first)
        let (sqlite, _) = try ingest(yaml, second, db: db)
        #expect(try run(yaml, first, url: url).status == .finished)
        let summary = try run(yaml, second, url: url)
        #expect(summary.counters == sqlite.counters)
        #expect(summary.counters.deleted == 3)
        #expect(try Self.postgresDump(url, config.model) == (try Self.sqliteDump(db, config.model)))
    }

    @Test func thePeopleDataSetMatchesSQLite() throws {
        let pages = try generatePeople(persons: 1500, pageSize: 100, faults: true)
        let text = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/people.yml"), encoding: .utf8)
        let config = try PipelineConfig.parse(text: text, path: "people.yml")
        func runFrom(_ database: String) throws -> RunSummary {
            var options = RunOptions()
            options.databasePath = database
            options.progressInterval = 0
            options.batchRecords = 300
            let source = try DirectoryPageSource(directory: pages, glob: "page-*.json")
            return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
        }
        let db = temporaryDirectory().appendingPathComponent("people.db").path
        let url = try PostgresServer.freshDatabase()
        let sqlite = try runFrom(db)
        let postgres = try runFrom(url)
        #expect(postgres.status == .finished, "\(postgres.error ?? "")")
        #expect(postgres.counters == sqlite.counters)
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))
        #expect(try Self.postgresDump(url, config.model) == (try Self.sqliteDump(db, config.model)))
    }

    /// `kill -9` in the middle of a run into PostgreSQL, then `--resume`: the final state is the
    /// one a single uninterrupted run gives (SQLite's), with no page applied twice. The kill lands
    /// while the server holds request 9, after pages were committed (no timing involved).
    @Test(.hangGuard) func killedAndResumedIsExact() throws {
        let pages = try generatePeople(persons: 1500, pageSize: 100)
        let server = try FixtureServer(people: pages, faults: "slow:9", slow: 3600)
        let url = try PostgresServer.freshDatabase()
        let dir = temporaryDirectory()
        let pipeline = dir.appendingPathComponent("people-http.yml")
        let text = try peopleOverHTTPText("\(server.base)/people/next", ["paginate: {next_url: next}", "timeout_s: 7200"])
        try Data(text.utf8).write(to: pipeline)
        func start() throws -> Process {
            let process = Process()
            process.executableURL = CLITests.binary
            process.arguments = [
                "run", pipeline.path, "--db", url, "--resume", "--no-archive", "--progress-interval", "0", "--batch-records", "100",
                "--commit-records", "100",
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return process
        }
        let first = try start()
        let connection = try PGConnection(url: url)
        waitUntil {
            let committed = (try? connection.execute("SELECT pages FROM _ingot_runs"))?.first?[0].flatMap { Int($0) } ?? 0
            return committed >= 8
        }
        kill(first.processIdentifier, SIGKILL)
        first.waitUntilExit()
        #expect(try connection.execute("SELECT status FROM _ingot_runs") == [["running"]])
        let second = try start()
        second.waitUntilExit()
        #expect(second.terminationStatus == 0)
        #expect(try connection.execute("SELECT count(*), min(status) FROM _ingot_runs") == [["1", "finished"]])

        let config = try PipelineConfig.parse(text: text, path: "people.yml")
        let (sqlite, db) = try Self.singleSQLiteRun(config, pages: pages)
        #expect(sqlite.status == .finished)
        #expect(try Self.postgresDump(url, config.model) == (try Self.sqliteDump(db, config.model)))
        #expect(
            try connection.execute("SELECT pages, records FROM _ingot_runs") == [
                [String(sqlite.counters.pages), String(sqlite.counters.records)]
            ])
    }

    /// PostgreSQL cannot store U+0000 in text or jsonb: such a record is rejected (`unstorable`,
    /// with its coding path), its neighbours are saved, and the run finishes. SQLite does the same
    /// (one rule for every backend).
    @Test func textWithNULIsRejectedNotAFailedBatch() throws {
        let pages = [
            #"{"results": [{"id": 1, "name": "a\u0000b"}, {"id": 2, "name": "ok", "meta": {"k": "x\u0000"}}, {"id": 3, "name": "c", "meta": {"k": "\\u0000"}}]}"#
        ]
        let url = try PostgresServer.freshDatabase()
        let summary = try run(StoreSeamTests.yaml, pages, url: url)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedRecords == 2 && summary.counters.rejectsByReason == ["unstorable": 2])
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT id, meta->>'k' FROM person") == [["3", "\\u0000"]])
        #expect(
            try connection.execute("SELECT coding_path FROM _ingot_rejects ORDER BY record_index") == [
                ["results[0].name"], ["results[1].meta"],
            ])
        let (sqlite, _) = try ingest(StoreSeamTests.yaml, pages)
        #expect(sqlite.counters == summary.counters)
    }

    /// One run of a pipeline at a time per PostgreSQL database: a run waits `--lock-timeout` for
    /// the holder of the pipeline's advisory lock, then fails as temporary (exit 75).
    @Test func aSecondRunOfAPipelineWaitsThenFailsAsTemporary() throws {
        let url = try PostgresServer.freshDatabase()
        #expect(try run(StoreSeamTests.yaml, [StoreSeamTests.pages[0]], url: url).status == .finished)
        let holder = try PGConnection(url: url)
        try holder.execute("SELECT pg_advisory_lock(hashtext('ingot run: seam'))")
        let config = try PipelineConfig.parse(text: StoreSeamTests.yaml, path: "pg.yml")
        var options = RunOptions()
        options.databasePath = url
        options.progressInterval = 0
        options.lockTimeout = 0.2
        let refused = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: MemoryPageSource([StoreSeamTests.pages[1]]))
        #expect(refused.status == .failed && refused.failureKind == .temporary, "\(refused.error ?? "")")
        #expect(refused.error?.contains("another run of pipeline 'seam'") == true)
        try holder.execute("SELECT pg_advisory_unlock(hashtext('ingot run: seam'))")
        #expect(
            PipelineRunner(config: config, options: options, logger: LogCapture().logger)
                .run(source: MemoryPageSource([StoreSeamTests.pages[1]])).status == .finished)
    }

    /// A database whose tables disagree with the pipeline (a column of another type, another
    /// identity) is refused before anything is written, as with SQLite (exit 2).
    @Test func aDisagreeingDatabaseIsRefusedBeforeAnythingIsWritten() throws {
        let url = try PostgresServer.freshDatabase()
        #expect(try run(StoreSeamTests.yaml, [StoreSeamTests.pages[0]], url: url).status == .finished)
        for (old, new) in [("score: double", "score: string"), ("identity: [city, license]", "identity: city")] {
            let changed = StoreSeamTests.yaml.replacingOccurrences(of: old, with: new)
            let refused = try run(changed, [StoreSeamTests.pages[1]], url: url)
            #expect(refused.status == .failed && refused.failureKind == .configuration, "\(new): \(refused.error ?? "")")
            #expect(refused.error?.contains("disagree") == true)
        }
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT count(*) FROM _ingot_runs") == [["1"]])
    }

    /// `--dry-run` against PostgreSQL prints the plan and writes nothing; a disagreeing database is
    /// listed and refused (exit 2).
    @Test func aDryRunWritesNothing() throws {
        let url = try PostgresServer.freshDatabase()
        let pipeline = temporaryDirectory().appendingPathComponent("seam.yml")
        try Data(StoreSeamTests.yaml.utf8).write(to: pipeline)
        func dryRun(_ file: URL, _ extra: [String] = []) throws -> (status: Int32, out: String) {
            let process = Process()
            process.executableURL = CLITests.binary
            process.arguments = ["run", file.path, "--db", url, "--dry-run", "--pages", temporaryDirectory().path] + extra
            let out = Pipe()
            process.standardOutput = out
            process.standardError = Pipe()
            try process.run()
            let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, text)
        }
        let plan = try dryRun(pipeline)
        #expect(plan.status == 0 && plan.out.contains("CREATE TABLE IF NOT EXISTS \"person\""), "\(plan.out)")
        #expect(plan.out.contains("load: batch by batch (--bulk: staged, into empty tables)"), "\(plan.out)")
        // A pipeline a staged load can run, from local pages: staged from the first batch.
        let stageable = temporaryDirectory().appendingPathComponent("shelter.yml")
        try Data(bulkYAML.utf8).write(to: stageable)
        let staged = try dryRun(stageable)
        #expect(staged.out.contains("load: staged from the first batch of a first load in no identity order"), "\(staged.out)")
        #expect(try dryRun(stageable, ["--no-bulk"]).out.contains("load: batch by batch (--no-bulk)"))
        #expect(
            try dryRun(stageable, ["--join", "j"]).out.contains(
                "load: exchanged: each job's batches go to the run's parts"))
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()") == [["0"]])
        #expect(try run(StoreSeamTests.yaml, [StoreSeamTests.pages[0]], url: url).status == .finished)
        // Up to date: nothing to apply is listed (every statement used to be).
        let again = try dryRun(pipeline)
        #expect(again.status == 0 && again.out.contains("schema: 0 statements to apply"), "\(again.out)")
        let changed = temporaryDirectory().appendingPathComponent("changed.yml")
        try Data(StoreSeamTests.yaml.replacingOccurrences(of: "score: double", with: "score: string").utf8).write(to: changed)
        let refused = try dryRun(changed)
        #expect(refused.status == 2 && refused.out.contains("column 'score'"), "\(refused.out)")
        // --bulk: what the seam pipeline asks of stored rows (`missing: ignore`) refuses it, said before a run.
        let bulk = try dryRun(pipeline, ["--bulk"])
        #expect(bulk.out.contains("load: --bulk refused: ") && bulk.out.contains("does not stub missing targets"), "\(bulk.out)")
    }
    /// Another writer (another pipeline on the same tables) inserts a row while a run loads, which
    /// the run then sends: the run's lookup finds it, and the record's keys update it — the other
    /// writer's keys the record did not give stay. Nothing is lost, and the row counts as updated.
    @Test func anotherWritersRowIsMetNotLost() throws {
        let url = try PostgresServer.freshDatabase()
        let pages = [
            #"{"results": [{"id": 1, "name": "Ada", "dogs": [10]}]}"#,
            #"{"results": [{"id": 7, "name": "Seven", "dogs": [10, 11]}, {"id": 2, "name": "Bo"}]}"#,
            #"{"results": [{"id": 8, "name": "Eight"}, {"id": 7, "score": 1.5}]}"#,
        ]
        let config = try PipelineConfig.parse(text: StoreSeamTests.yaml, path: "pg.yml")
        // Creates the tables, empty.
        #expect(try run(StoreSeamTests.yaml, [], url: url).status == .finished)
        let other = try PGConnection(url: url)
        var options = RunOptions()
        options.databasePath = url
        options.batchRecords = 1
        options.progressInterval = 0
        // The other writer's row goes in as the run reads its second page, after its first lookup.
        let source = HookedPageSource(pages, before: 2) {
            _ = try? other.execute("INSERT INTO person (id, name, active) VALUES (7, 'Other', true)")
        }
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let got = try Self.postgresDump(url, config.model)
        #expect(
            got["person"]?.map { Array($0.prefix(2)) + [$0[3], $0[4]] } == [
                ["1", "Ada", "NULL", "NULL"], ["2", "Bo", "NULL", "NULL"], ["7", "Seven", "1.5", "1"], ["8", "Eight", "NULL", "NULL"],
            ])
        #expect(got["person_dogs"] == [["1", "10"], ["7", "10"], ["7", "11"]])
        #expect(summary.counters.entities["person"]?.inserted == 3)
        #expect(summary.counters.entities["person"]?.updated == 1)
    }
}

/// Pages from memory, with `hook` run before page `before` is given (once).
final class HookedPageSource: PageSource, @unchecked Sendable {  // used from the source queue only
    private let pages: MemoryPageSource
    private var given = 0
    private let before: Int
    private let hook: () -> Void
    init(_ pages: [String], before: Int, hook: @escaping () -> Void) {
        self.pages = MemoryPageSource(pages)
        self.before = before
        self.hook = hook
    }
    func next() throws -> Page? {
        given += 1
        if given == before { hook() }
        return try pages.next()
    }

}
