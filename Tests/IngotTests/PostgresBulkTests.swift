import Foundation
import Testing

@testable import Ingot

/// A staged load into PostgreSQL (`--bulk`, PGStore+Staged.swift): staged and merged in a SQLite
/// file of the job's own, the merged rows copied into empty tables at the end.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct PostgresBulkTests {
    private func run(
        _ yaml: String, _ source: any PageSource, url: String, bulk: Bool, batchRecords: Int? = nil, resume: Bool = false,
        autoBulk: Bool = true, logs: LogCapture = LogCapture()
    ) throws -> RunSummary {
        let config = try PipelineConfig.parse(text: yaml, path: "bulk.yml")
        var options = RunOptions()
        options.databasePath = url
        options.loading = bulk ? .staged : autoBulk ? .automatic() : .batchByBatch
        options.batchRecords = batchRecords
        options.commitRecords = batchRecords ?? options.commitRecords
        options.resume = resume
        options.progressInterval = 0
        return PipelineRunner(config: config, options: options, logger: logs.logger).run(source: source)
    }

    /// A new run removes the staging files of the pipeline's earlier unfinished runs at the paths
    /// `_ingot_state` names — only files Ingot makes (`ingot-stage-<UUID>.db` in the staging
    /// directory), only regular ones: a path planted there (another file, a directory, a link
    /// under Ingot's own name) is left alone. It removed any of them, recursively.
    @Test func onlyStagingFilesIngotMadeAreEverRemoved() throws {
        let url = try PostgresServer.freshDatabase()
        let page = bulkPage(#"{"id": 1, "name": "a"}"#)
        #expect(try run(bulkYAML, MemoryPageSource([page]), url: url, bulk: false).status == .finished)
        let victims = temporaryDirectory()
        let file = victims.appendingPathComponent("precious.txt").path
        let folder = victims.appendingPathComponent("folder").path
        try Data("keep".utf8).write(to: URL(fileURLWithPath: file))
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try Data("keep".utf8).write(to: URL(fileURLWithPath: folder + "/inside.txt"))
        // A link under Ingot's own name, in the temporary directory, pointing at the file.
        let link = FileManager.default.temporaryDirectory.appendingPathComponent("ingot-stage-\(UUID().uuidString).db").path
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: file)
        defer { try? FileManager.default.removeItem(atPath: link) }
        let connection = try PGConnection(url: url)
        for (k, path) in [file, folder, "copied:" + folder, link].enumerated() {
            _ = try connection.execute(
                "INSERT INTO _ingot_runs (run_id, pipeline, started_at, status) VALUES ($1, 'shelter', '2020-01-01T00:00:00Z', 'failed')",
                ["planted-\(k)"])
            _ = try connection.execute(
                "INSERT INTO _ingot_state (pipeline, key, value) VALUES ('', $1, $2)", ["staged_load:planted-\(k)", path])
        }
        #expect(try run(bulkYAML, MemoryPageSource([page]), url: url, bulk: false).status == .finished)
        #expect(FileManager.default.fileExists(atPath: file))
        #expect(FileManager.default.fileExists(atPath: folder + "/inside.txt"))
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: link)) == file, "the link itself is left too")
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE key LIKE 'staged_load:planted-%'") == [["0"]], "forgotten")
    }

    /// Without `--bulk`, a first load from local pages whose first batch came in no identity
    /// order, into empty tables, is staged from that batch, as into SQLite — and ends in the
    /// tables, counts and rejects of a batch-by-batch load (`--no-bulk`). In identity order, into
    /// tables that hold rows or with `--no-bulk`, it goes batch by batch.
    @Test func aScatteredFirstLoadIsStagedFromItsFirstBatch() throws {
        var rng = SeededGenerator(seed: 17)
        let ids = Array(1...1500).shuffled(using: &rng)
        func pages(_ ids: [Int], dogs: Bool) -> [String] {
            let records = ids.map { id in
                #"{"id": \#(id), "name": "n\#(id)""# + (dogs ? #", "dogs": [\#(id % 40), {"id": \#(id % 7), "name": "d\#(id)"}]}"# : "}")
            }
            return stride(from: 0, to: records.count, by: 500).map {
                bulkPage(records[$0..<min($0 + 500, records.count)].joined(separator: ", "))
            } + [bulkPage(#"{"id": "bad"}, {"id": \#(ids.max() ?? 0), "email": "e@x", "dogs": []}"#)]
        }
        let model = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml").model
        func load(_ ids: [Int], url: String? = nil, autoBulk: Bool = true, dogs: Bool = true) throws -> (
            summary: RunSummary, staged: Bool, url: String
        ) {
            let url = try url ?? PostgresServer.freshDatabase()
            let logs = LogCapture()
            let summary = try run(bulkYAML, MemoryPageSource(pages(ids, dogs: dogs)), url: url, bulk: false, autoBulk: autoBulk, logs: logs)
            #expect(summary.status == .finished, "\(summary.error ?? "")")
            return (summary, logs.all.contains { $0.contains("msg=bulk.started") }, url)
        }
        let staged = try load(ids)
        let plain = try load(ids, autoBulk: false)
        #expect(staged.staged && !plain.staged)
        #expect(try PostgresTests.postgresDump(staged.url, model) == (try PostgresTests.postgresDump(plain.url, model)))
        #expect(staged.summary.counters == plain.summary.counters)
        #expect(staged.summary.counters.rejectedRecords == 1 && staged.summary.counters.inserted == 1500 + 40)
        #expect(try PGConnection(url: staged.url).execute("SELECT count(*) FROM _ingot_rejects") == [["1"]])
        #expect(try load(ids, dogs: false).staged)
        #expect(try !load(Array(1...1500), dogs: false).staged, "in identity order")
        #expect(try !load(ids.map { $0 + 5000 }, url: staged.url).staged, "into tables that hold rows")
    }

    /// The tables, the counts and the rejects are what SQLite's staged load and PostgreSQL's
    /// batch-by-batch load make of the same pages, whatever the batch size.
    @Test(arguments: [1, 1000])
    func aStagedLoadEndsAsBatchByBatch(batchRecords: Int) throws {
        let pages = bulkPages + [bulkPage(#"{"id": "five", "name": "bad id"}, {"id": 5, "name": "Alan", "dogs": [10]}"#)]
        let model = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml").model
        let staged = try PostgresServer.freshDatabase()
        let plain = try PostgresServer.freshDatabase()
        let bulk = try run(bulkYAML, MemoryPageSource(pages), url: staged, bulk: true, batchRecords: batchRecords)
        let batches = try run(bulkYAML, MemoryPageSource(pages), url: plain, bulk: false, batchRecords: batchRecords)
        let (sqlite, db) = try ingest(bulkYAML, pages, batchRecords: batchRecords, bulk: true)
        #expect(bulk.status == .finished && batches.status == .finished, "\(bulk.error ?? "") \(batches.error ?? "")")
        let got = try PostgresTests.postgresDump(staged, model)
        #expect(got == (try PostgresTests.postgresDump(plain, model)))
        #expect(got == (try PostgresTests.sqliteDump(db, model)))
        #expect(got["person"]?.count == 6 && got["person_dogs"]?.count == 4, "\(got)")
        #expect(bulk.counters == sqlite.counters)
        for entity in ["person", "dog", "visit"] {
            #expect(bulk.counters.entities[entity]?.inserted == batches.counters.entities[entity]?.inserted, "\(entity)")
            #expect(bulk.counters.entities[entity]?.stubs == batches.counters.entities[entity]?.stubs, "\(entity)")
        }
        let connection = try PGConnection(url: staged)
        #expect(try connection.execute("SELECT count(*), min(coding_path) FROM _ingot_rejects") == [["1", "results[0].id"]])
        #expect(
            try connection.execute("SELECT status, pages, records, inserted FROM _ingot_runs") == [
                ["finished", "4", "12", "\(bulk.counters.inserted)"]
            ])
        // The resume point went in with the rows: a job killed between the copy's commit and
        // the run's end resumes past the last page, not into tables that hold the load.
        #expect(try connection.execute("SELECT last_seq FROM _ingot_runs") == [["4"]])
    }

    /// With copies of a few bytes, every row and every set is sent on its own: the rows' copy is
    /// ended and begun again around each piece of links, and the tables are the same.
    @Test func theCopyInPiecesEndsInTheSameTables() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let summary = try stagedRun(config, MemoryPageSource(bulkPages), url: url, copyBytes: 1)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let (_, db) = try ingest(bulkYAML, bulkPages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
    }

    /// A staged load (`--bulk`) of `source` into `url` whose copy sends `copyBytes` at a time.
    private func stagedRun(_ config: PipelineConfig, _ source: any PageSource, url: String, copyBytes: Int) throws -> RunSummary {
        let store = try PGStore(url: url, model: config.model)
        try store.startStagedLoad()
        store.stagingFiles.copyBytes = copyBytes
        var options = RunOptions()
        options.progressInterval = 0
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source, store: store)
        try store.close()
        return summary
    }

    /// A first load whose staging file cannot be made (its directory cannot be written, as in a
    /// container with a read-only root) goes batch by batch, says why (`bulk.declined`), names
    /// no file, and ends in the same tables.
    @Test func aStagingFileThatCannotBeMadeLeavesTheLoadBatchByBatch() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        var rng = SeededGenerator(seed: 5)
        let records = Array(1...1200).shuffled(using: &rng).map { #"{"id": \#($0), "name": "n\#($0)", "dogs": [\#($0 % 9)]}"# }
        let pages = stride(from: 0, to: records.count, by: 600).map { bulkPage(records[$0..<($0 + 600)].joined(separator: ", ")) }
        let plan = LoadPlan(
            mode: .automatic(afterBytes: 4 << 20, fromFirstBatch: true), capabilities: PostgresBackend(url: url).loadCapabilities)
        let store = try PGStore(url: url, model: config.model, plan: plan)
        store.stagingFiles.directory = temporaryDirectory().appendingPathComponent("missing/deeper").path
        var options = RunOptions()
        options.progressInterval = 0
        let logs = LogCapture()
        let summary = PipelineRunner(config: config, options: options, logger: logs.logger).run(
            source: MemoryPageSource(pages), store: store)
        try store.close()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(logs.all.contains { $0.contains("msg=bulk.declined") && $0.contains("could not be made") }, "\(logs.all)")
        #expect(!logs.all.contains { $0.contains("msg=bulk.started") })
        #expect(try namedStagingFile(url) == nil)
        let (_, db) = try ingest(bulkYAML, pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
    }

    /// The staging file PostgreSQL names for `url`'s one unfinished staged load.
    private func namedStagingFile(_ url: String) throws -> String? {
        let rows = try PGConnection(url: url).execute("SELECT value FROM _ingot_state WHERE pipeline = '' AND key LIKE 'staged_load:%'")
        return rows.count == 1 ? rows[0][0] ?? nil : nil
    }

    /// A staged load (`--bulk`, a batch a record) of the shelter pages, a rejected record first,
    /// into `url`, stopped by its source after two pages: the pages, their directory (a source
    /// `--resume` resumes) and the staging file it kept.
    private func stoppedStagedLoad(_ url: String) throws -> (pages: [String], directory: String, stagingFile: String) {
        let pages = [bulkPage(#"{"id": "bad"}"#)] + bulkPages
        let files = try directory(pages)
        let failed = try run(
            bulkYAML, FailingAfter(try DirectoryPageSource(directory: files, glob: "page-*.json"), pages: 2), url: url, bulk: true,
            batchRecords: 1)
        #expect(failed.status == .failed)
        let named = try namedStagingFile(url)
        #expect(named.map { FileManager.default.fileExists(atPath: $0) } == true, "the staging file stays for --resume")
        return (pages, files, named ?? "")
    }

    /// A staged load stopped before its copy left no row in PostgreSQL, but its resume point,
    /// counters and rejects, and the path of its staging file, which it keeps: `--resume` opens
    /// it again and goes on staging from the resume point (not from the first page), ends
    /// exact, and removes the file with the copy.
    @Test func aStoppedStagedLoadResumesInItsStagingFile() throws {
        let url = try PostgresServer.freshDatabase()
        let model = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml").model
        let (pages, files, stagingFile) = try stoppedStagedLoad(url)
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT count(*) FROM person") == [["0"]])
        #expect(try connection.execute("SELECT status, pages, last_seq FROM _ingot_runs") == [["failed", "2", "2"]])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_rejects") == [["1"]])
        // What the first two pages gave is in the staging file only.
        for n in 1...2 { try FileManager.default.removeItem(atPath: files + "/page-\(n).json") }
        let resumed = try run(
            bulkYAML, try DirectoryPageSource(directory: files, glob: "page-*.json"), url: url, bulk: true, batchRecords: 1, resume: true)
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(resumed.counters.pages == 4 && resumed.counters.rejectedRecords == 1, "\(resumed.counters)")
        #expect(try connection.execute("SELECT count(*) FROM _ingot_rejects") == [["1"]])
        #expect(try namedStagingFile(url) == nil)
        #expect(!FileManager.default.fileExists(atPath: stagingFile), "the staging file goes with the copy")
        let (_, db) = try ingest(bulkYAML, pages)
        #expect(try PostgresTests.postgresDump(url, model) == (try PostgresTests.sqliteDump(db, model)))
    }

    /// `--resume` of a staged load whose staging file is gone (another machine, a new
    /// container), or with `--no-bulk`: the run starts again from its first page — its progress,
    /// rejects and staging key reset, its file (if here) removed — and ends exact.
    @Test(arguments: [true, false])
    func aStagedLoadWhoseFileIsGoneStartsAgain(noBulk: Bool) throws {
        let url = try PostgresServer.freshDatabase()
        let model = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml").model
        let (pages, files, stagingFile) = try stoppedStagedLoad(url)
        if !noBulk { PGStaging.remove(at: stagingFile, directory: nil) }
        let resumed = try run(
            bulkYAML, try DirectoryPageSource(directory: files, glob: "page-*.json"), url: url, bulk: false, batchRecords: 1,
            resume: true, autoBulk: !noBulk)
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(resumed.counters.pages == 4 && resumed.counters.rejectedRecords == 1, "\(resumed.counters)")
        #expect(try PGConnection(url: url).execute("SELECT count(*) FROM _ingot_rejects") == [["1"]])
        #expect(try namedStagingFile(url) == nil)
        #expect(!FileManager.default.fileExists(atPath: stagingFile))
        let (_, db) = try ingest(bulkYAML, pages)
        #expect(try PostgresTests.postgresDump(url, model) == (try PostgresTests.sqliteDump(db, model)))
    }

    /// A copy whose transaction the server refuses at its commit (a deferred constraint trigger
    /// here; a full disk or a lost connection alike) leaves the load staged: its file and the key
    /// naming it stay, the run fails, and `--resume` copies it again and ends exact. When the
    /// file was removed and its key forgotten as if the copy had committed, the resume went on
    /// from its resume point, past every page, and ended `finished` with no row
    /// (docs/reliability.md, "Every write may fail").
    @Test func aCopyWhoseCommitFailsIsCopiedAgainOnResume() throws {
        let url = try PostgresServer.freshDatabase()
        let model = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml").model
        try PGStore(url: url, model: model).close()
        let connection = try PGConnection(url: url)
        _ = try connection.execute(
            """
            CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
              BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
            CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON person
              DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()
            """)
        let failed = try run(bulkYAML, MemoryPageSource(bulkPages), url: url, bulk: true)
        #expect(failed.status == .failed)
        #expect("\(failed.error ?? "")".contains("refused at commit"), "\(failed.error ?? "")")
        #expect(try connection.execute("SELECT count(*) FROM person") == [["0"]])
        let named = try #require(try namedStagingFile(url), "the key naming the staging file stays")
        #expect(FileManager.default.fileExists(atPath: named), "the staging file stays for --resume")

        _ = try connection.execute("DROP TRIGGER refuse_at_commit ON person")
        let resumed = try run(bulkYAML, MemoryPageSource(bulkPages), url: url, bulk: true, resume: true)
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(try namedStagingFile(url) == nil)
        #expect(!FileManager.default.fileExists(atPath: named), "the staging file goes with the copy")
        let (_, db) = try ingest(bulkYAML, bulkPages)
        #expect(try PostgresTests.postgresDump(url, model) == (try PostgresTests.sqliteDump(db, model)))
    }

    /// A staged load's kept values (the incremental cursor) wait in its staging file and reach
    /// PostgreSQL with the rows, while its resume point goes in at each commit: a later run never
    /// reads a cursor past rows that were not copied.
    @Test func keptValuesReachPostgreSQLWithTheRows() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let store = try PGStore(url: url, model: config.model)
        try store.startStagedLoad()
        try store.beginRun(.new(id: "r1", pipeline: "shelter", startedAt: Date(), archive: nil))
        try store.recordProgress(
            RunProgress(
                runID: "r1", counters: RunCounters(), lastSeq: 1, resumeState: nil, rejections: [],
                kept: [(pipeline: "shelter", key: "incremental:since", value: "2026-01-01")]))
        try store.commit()
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT last_seq FROM _ingot_runs") == [["1"]])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE pipeline = 'shelter'") == [["0"]])
        _ = try store.mergeStaged(fills: [], stored: { _, _, _ in }, refused: { _, _, _, _ in })
        try store.commit()
        #expect(try connection.execute("SELECT value FROM _ingot_state WHERE pipeline = 'shelter'") == [["2026-01-01"]])
        // The file is marked copied with the rows, removed when the store closes, then unnamed.
        let named = try connection.execute("SELECT value FROM _ingot_state WHERE pipeline = ''").first?[0] ?? nil
        let path = String(named?.dropFirst(PGStaging.copiedMark.count) ?? "")
        #expect(named?.hasPrefix(PGStaging.copiedMark) == true && FileManager.default.fileExists(atPath: path), "\(named ?? "")")
        try store.close()
        #expect(!FileManager.default.fileExists(atPath: path))
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE pipeline = ''") == [["0"]])
    }

    /// A new run (not `--resume`) forgets an earlier run's unfinished staged load: its file is
    /// removed and its key deleted; the new run loads from the first page.
    @Test func aNewRunForgetsAnUnfinishedStagedLoad() throws {
        let url = try PostgresServer.freshDatabase()
        let (pages, _, stagingFile) = try stoppedStagedLoad(url)
        let again = try run(bulkYAML, MemoryPageSource(pages), url: url, bulk: true, batchRecords: 1)
        #expect(again.status == .finished && again.counters.pages == 4, "\(again.error ?? "")")
        #expect(!FileManager.default.fileExists(atPath: stagingFile))
        #expect(try namedStagingFile(url) == nil)
    }

    /// A job killed after its copy committed but before its run was marked finished: resumed
    /// with `--bulk`, it finds the tables full and its resume point past the last page — it goes
    /// on batch by batch (nothing left), not refused, and the tables stay as they were.
    @Test func aStagedLoadKilledAfterItsCopyResumes() throws {
        let url = try PostgresServer.freshDatabase()
        let model = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml").model
        #expect(try run(bulkYAML, MemoryPageSource(bulkPages), url: url, bulk: true).status == .finished)
        let before = try PostgresTests.postgresDump(url, model)
        // Killed after the copy committed, before the staging file was removed (left marked copied).
        let connection = try PGConnection(url: url)
        let runID = try connection.execute("SELECT run_id FROM _ingot_runs").first?[0] ?? nil
        let leftover = PGStaging.newPath()
        try Data("staged".utf8).write(to: URL(fileURLWithPath: leftover))
        _ = try connection.execute("UPDATE _ingot_runs SET status = 'running', finished_at = NULL")
        _ = try connection.execute(
            "INSERT INTO _ingot_state (pipeline, key, value) VALUES ('', $1, $2)",
            [PGStaging.stateKey(runID ?? ""), PGStaging.copiedMark + leftover])
        let resumed = try run(bulkYAML, MemoryPageSource(bulkPages), url: url, bulk: true, resume: true)
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(!FileManager.default.fileExists(atPath: leftover), "the copied load's file is removed")
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE pipeline = ''") == [["0"]])
        #expect(try PostgresTests.postgresDump(url, model) == before)
        #expect(try PGConnection(url: url).execute("SELECT count(*), min(status) FROM _ingot_runs") == [["1", "finished"]])
    }

    /// A staged copy goes into empty tables without their keys — each identity's unique key and
    /// each join table's primary key, whose index was searched at every row copied — and builds
    /// them, sorted, in its own transaction (each key's index is a new one), so the committed
    /// tables have them all, which the next run's upserts stand on. With foreign keys declared
    /// (`ingot schema --foreign-keys`: a foreign key depends on the key it references, and its
    /// deferred checks refuse an `ALTER TABLE` in their transaction) every key stays in place,
    /// and the load ends in the same tables.
    @Test(arguments: [false, true])
    func aStagedCopyBuildsItsTablesKeysInItsTransaction(foreignKeys: Bool) throws {
        let url = try PostgresServer.freshDatabase()
        let model = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml").model
        #expect(try run(bulkYAML, MemoryPageSource([]), url: url, bulk: false).status == .finished)
        let connection = try PGConnection(url: url)
        if foreignKeys {
            for statement in ForeignKey.postgresStatements(of: model) { _ = try connection.execute(statement) }
        }
        let keys = """
            SELECT conname, conindid::int FROM pg_constraint
             WHERE conrelid::regclass::text IN ('person', 'dog', 'person_dogs') AND contype IN ('u', 'p') ORDER BY 1
            """
        let before = try connection.execute(keys)
        #expect(before.map { $0[0] } == ["dog_identity", "person_dogs_pkey", "person_identity"])
        let first = try run(bulkYAML, MemoryPageSource(bulkPages), url: url, bulk: true)
        #expect(first.status == .finished, "\(first.error ?? "")")
        let after = try connection.execute(keys)
        #expect(after.map { $0[0] } == before.map { $0[0] }, "every key is there")
        for (was, now) in zip(before, after) {
            #expect((was[1] != now[1]) == !foreignKeys, "\(now[0] ?? ""): built again: \(was[1] != now[1])")
        }
        let (_, db) = try ingest(bulkYAML, bulkPages)
        #expect(try PostgresTests.postgresDump(url, model) == (try PostgresTests.sqliteDump(db, model)))
        let again = try run(bulkYAML, MemoryPageSource(bulkPages), url: url, bulk: false)
        #expect(again.status == .finished, "\(again.error ?? "")")
        #expect(again.counters.inserted == 0 && again.counters.entities["person"]?.unchanged == first.counters.entities["person"]?.inserted)
    }

    /// A table another session is reading in an open transaction keeps its key through the
    /// copy (the drop would wait for the reader, and readers after it behind the drop): the
    /// load goes on without waiting, the other keys are built again, and the tables are exact.
    @Test(.hangGuard) func aTableReadMeanwhileKeepsItsKey() throws {
        let url = try PostgresServer.freshDatabase()
        let model = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml").model
        #expect(try run(bulkYAML, MemoryPageSource([]), url: url, bulk: false).status == .finished)
        let connection = try PGConnection(url: url)
        let index = "SELECT conindid::int FROM pg_constraint WHERE conname = $1"
        let person = try connection.execute(index, ["person_identity"])
        let dog = try connection.execute(index, ["dog_identity"])
        // The reader begins once the pages are staged (the run's schema step, which may alter
        // the table, is done) and reads on until the run has ended.
        let source = ReadingAtTheEnd(bulkPages, reader: try PGConnection(url: url), table: "person")
        let summary = try run(bulkYAML, source, url: url, bulk: true)
        #expect(source.began)
        _ = try source.reader.execute("COMMIT")
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(try connection.execute(index, ["person_identity"]) == person, "kept")
        #expect(try connection.execute(index, ["dog_identity"]) != dog, "built again")
        let (_, db) = try ingest(bulkYAML, bulkPages)
        #expect(try PostgresTests.postgresDump(url, model) == (try PostgresTests.sqliteDump(db, model)))
    }

    /// A set's repeated targets are copied once each, at their first position in an ordered
    /// set — bare integer identities (the copy's plain loop, past its short list too) as
    /// composite ones (its general walk) — and the tables are what a batch-by-batch load makes.
    @Test func aSetsRepeatedTargetsAreCopiedOnceAtTheirFirstPosition() throws {
        let yaml = bulkYAML.replacingOccurrences(
            of: "      visits: {to: visit, many: true, ordered: true}",
            with: "      visits: {to: visit, many: true, ordered: true}\n      ranked: {to: dog, many: true, ordered: true}")
        let many = (0..<40).map { "\(100 + $0 % 25)" }.joined(separator: ", ")
        let visit = #"{"clinic": "a", "day": "1"}"#
        let pages = [
            bulkPage(
                #"{"id": 2, "dogs": [\#(many)], "ranked": [\#(many)]}, "#
                    + #"{"id": 1, "dogs": [5, 6, 5, 7, 6], "ranked": [9, 8, 9, 8, 10], "visits": [\#(visit), {"clinic": "b", "day": "2"}, \#(visit)]}"#
            )
        ]
        let model = try PipelineConfig.parse(text: yaml, path: "bulk.yml").model
        let staged = try PostgresServer.freshDatabase()
        let plain = try PostgresServer.freshDatabase()
        #expect(try run(yaml, MemoryPageSource(pages), url: staged, bulk: true).status == .finished)
        #expect(try run(yaml, MemoryPageSource(pages), url: plain, bulk: false).status == .finished)
        #expect(try PostgresTests.postgresDump(staged, model) == (try PostgresTests.postgresDump(plain, model)))
        let connection = try PGConnection(url: staged)
        #expect(
            try connection.execute("SELECT dog_id, position FROM person_ranked WHERE person_id = 1 ORDER BY position") == [
                ["9", "0"], ["8", "1"], ["10", "4"],
            ])
        #expect(
            try connection.execute("SELECT count(*), min(position), max(position) FROM person_ranked WHERE person_id = 2") == [
                ["25", "0", "24"]
            ])
        #expect(try connection.execute("SELECT count(*) FROM person_dogs WHERE person_id = 2") == [["25"]])
        #expect(try connection.execute("SELECT dog_id FROM person_dogs WHERE person_id = 1 ORDER BY dog_id") == [["5"], ["6"], ["7"]])
        #expect(try connection.execute("SELECT position FROM person_visits WHERE person_id = 1 ORDER BY position") == [["0"], ["1"]])
    }

    /// A value PostgreSQL refuses in the copy (here a constraint added to the table) costs its
    /// row only: the streaming copy fails, and the load is folded and copied again carefully —
    /// pieces under savepoints, a refused piece halved down to the refused row — which is left
    /// out with its links and rejected as `unstorable` with the server's message; every other
    /// row is copied (the dog it named too, as SQLite's merge keeps it). In pieces of any size.
    @Test(arguments: [1, 1 << 20])
    func aValueRefusedInTheCopyCostsItsRowOnly(copyBytes: Int) throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        #expect(try run(bulkYAML, MemoryPageSource([]), url: url, bulk: false).status == .finished)
        let connection = try PGConnection(url: url)
        _ = try connection.execute("ALTER TABLE person ADD CONSTRAINT no_poison CHECK (name IS DISTINCT FROM 'poison')")
        _ = try connection.execute("DELETE FROM _ingot_runs")
        let poison = #"{"id": 90, "name": "poison", "dogs": [91, 92]}, {"id": 100, "name": "Ten", "dogs": [92]}"#
        let pages = bulkPages + [bulkPage(poison + #", {"id": 130, "name": "poison"}, {"id": 140, "name": "Fourteen"}"#)]
        let summary = try stagedRun(config, MemoryPageSource(pages), url: url, copyBytes: copyBytes)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedRecords == 2 && summary.counters.entities["person"]?.rejected == 2)
        #expect(summary.counters.rejectsByReason["unstorable"] == 2)
        #expect(try connection.execute("SELECT id FROM person WHERE id >= 90 ORDER BY id") == [["100"], ["140"]])
        #expect(try connection.execute("SELECT person_id, dog_id FROM person_dogs WHERE person_id >= 90") == [["100", "92"]])
        #expect(try connection.execute("SELECT id FROM dog WHERE id >= 91 ORDER BY id") == [["91"], ["92"]])
        let rejects = try connection.execute("SELECT entity, reason_code, reason FROM _ingot_rejects ORDER BY reason")
        #expect(rejects.count == 2 && rejects.allSatisfy { $0[0] == "person" && $0[1] == "unstorable" }, "\(rejects)")
        #expect(rejects.first?[2]?.contains("person 130") == true && rejects.last?[2]?.contains("person 90") == true, "\(rejects)")
        #expect(rejects.allSatisfy { $0[2]?.contains("no_poison") == true }, "\(rejects)")
        // Everything else is what SQLite's staged load makes of the pages without the two.
        let kept = bulkPages + [bulkPage(#"{"id": 100, "name": "Ten", "dogs": [92]}, {"id": 140, "name": "Fourteen"}"#)]
        let (_, db) = try ingest(bulkYAML, kept)
        var expected = try PostgresTests.sqliteDump(db, config.model)
        var got = try PostgresTests.postgresDump(url, config.model)
        expected["dog"] = nil
        got["dog"] = nil
        #expect(got == expected)
        #expect(try connection.execute("SELECT status, rejected_records FROM _ingot_runs") == [["finished", "2"]])
    }

    /// What a staged PostgreSQL load cannot do is refused before anything is written (what
    /// SQLite's staged load refuses); into tables that hold rows — a refresh of a cache a staged
    /// load made first — it goes batch by batch, and the log says why.
    @Test func whatAStagedPostgreSQLLoadCannotDoIsRefused() throws {
        let url = try PostgresServer.freshDatabase()
        let model = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml").model
        #expect(try run(bulkYAML, MemoryPageSource(Array(bulkPages.prefix(1))), url: url, bulk: false).status == .finished)
        let logs = LogCapture()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        var options = RunOptions()
        options.databasePath = url
        options.loading = .staged
        options.progressInterval = 0
        let filled = PipelineRunner(config: config, options: options, logger: logs.logger).run(source: MemoryPageSource(bulkPages))
        #expect(filled.status == .finished, "\(filled.error ?? "")")
        #expect(logs.all.contains { $0.contains("bulk.declined") && $0.contains("hold rows") }, "\(logs.all)")
        let (_, db) = try ingest(bulkYAML, bulkPages)
        #expect(try PostgresTests.postgresDump(url, model) == (try PostgresTests.sqliteDump(db, model)))
        let owned = bulkYAML.replacingOccurrences(
            of: "visits: {to: visit, many: true, ordered: true}", with: "visits: {to: visit, many: true, owned: true}"
        )
        .replacingOccurrences(of: "identity: [clinic, day]\n", with: "")
        let ownedRun = try run(owned, MemoryPageSource(bulkPages), url: try PostgresServer.freshDatabase(), bulk: true)
        #expect(ownedRun.status == .failed)
        #expect(ownedRun.error?.contains("person.visits is owned") == true, "\(ownedRun.error ?? "")")
    }
}

/// `pages` written to a new directory as `page-N.json`: a source `--resume` resumes.
func directory(_ pages: [String]) throws -> String {
    let directory = temporaryDirectory().path
    for (n, page) in pages.enumerated() {
        try Data(page.utf8).write(to: URL(fileURLWithPath: directory).appendingPathComponent("page-\(n + 1).json"))
    }
    return directory
}

/// Pages from memory whose end opens a transaction on `reader` that reads `table`, left open.
private final class ReadingAtTheEnd: PageSource, @unchecked Sendable {  // used from the source queue, then by the test once the run ended
    let reader: PGConnection
    private let table: String
    private let pages: MemoryPageSource
    private(set) var began = false

    init(_ pages: [String], reader: PGConnection, table: String) {
        self.pages = MemoryPageSource(pages)
        self.reader = reader
        self.table = table
    }

    func next() throws -> Page? {
        if let page = try pages.next() { return page }
        if !began {
            // A run that waited for the reader would wait for ever: the server ends the reader
            // after two minutes idle, the run goes on, and the test fails instead of hanging.
            _ = try reader.execute("SET idle_in_transaction_session_timeout = '120s'")
            _ = try reader.execute("BEGIN")
            _ = try reader.execute("SELECT count(*) FROM \(table)")
            began = true
        }
        return nil
    }
}
