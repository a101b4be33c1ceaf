import Foundation
import Testing

@testable import Ingot

/// The store contract, one set of tests run against every backend — SQLite, the memory store
/// (written against the public seam alone) and PostgreSQL — the way a new backend is accepted
/// (docs/stores.md): the same pages end in the same tables, with the same counts, whatever the
/// backend and the batch size.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct StoreConformanceTests {
    enum Backend: String, CaseIterable, CustomTestStringConvertible {
        case sqlite, memory, postgresql
        var testDescription: String { rawValue }
    }

    /// SQLite and PostgreSQL, for a suite that otherwise starts nothing: PostgreSQL is left out
    /// at the unit level (`make check` starts no server; docs/reliability.md, "Test levels").
    static var storedBackends: [Backend] { TestLevel.unitOnly ? [.sqlite] : [.sqlite, .postgresql] }
    /// Every backend, PostgreSQL left out at the unit level.
    static var everyBackend: [Backend] { Backend.allCases.filter { !TestLevel.unitOnly || $0 != .postgresql } }

    /// A backend ready for runs of one pipeline: runs write into the same database, `dump` reads
    /// every table as text (sorted, booleans as 0/1).
    struct Harness {
        let run: ([String], Int) throws -> RunSummary
        /// A run of another pipeline (the same entities) into the same database.
        let runWith: (String, [String], Int) throws -> RunSummary
        let dump: () throws -> [String: [[String]]]
        /// A SQLite database's tables as this backend's `dump` prints values (dates, numbers).
        let render: (String) throws -> [String: [[String]]]
    }

    /// How a run is asked to load (`--bulk`, the default, `--no-bulk`): a backend is run under
    /// every load plan it accepts.
    enum Asking: String, CaseIterable, CustomTestStringConvertible {
        case bulk, automatic, noBulk
        var testDescription: String { rawValue }
        var loading: Loading {
            switch self {
            case .bulk: .staged
            case .automatic: .automatic()
            case .noBulk: .batchByBatch
            }
        }
    }

    static func harness(_ backend: Backend, yaml: String, asking: Asking = .automatic) throws -> Harness {
        let config = try PipelineConfig.parse(text: yaml, path: "conformance.yml")
        func options(_ database: String, _ batchRecords: Int) -> RunOptions {
            var options = RunOptions()
            options.databasePath = database
            options.batchRecords = batchRecords
            options.progressInterval = 0
            options.loading = asking.loading
            return options
        }
        /// A harness over the database at `location` (a file or a server): each run opens it itself.
        func harness(at location: String, dump: @escaping () throws -> [String: [[String]]]) -> Harness {
            Harness(
                run: { pages, batch in
                    PipelineRunner(config: config, options: options(location, batch), logger: LogCapture().logger)
                        .run(source: MemoryPageSource(pages))
                },
                runWith: { yaml, pages, batch in
                    PipelineRunner(
                        config: try PipelineConfig.parse(text: yaml, path: "other.yml"), options: options(location, batch),
                        logger: LogCapture().logger
                    )
                    .run(source: MemoryPageSource(pages))
                },
                dump: dump, render: { try PostgresTests.sqliteDump($0, config.model) })
        }
        switch backend {
        case .sqlite:
            let db = temporaryDirectory().appendingPathComponent("c.db").path
            return harness(at: db) { try PostgresTests.sqliteDump(db, config.model) }
        case .memory:
            let store = MemoryStore(model: config.model)
            return Harness(
                run: { pages, batch in
                    PipelineRunner(config: config, options: options("memory", batch), logger: LogCapture().logger)
                        .run(source: MemoryPageSource(pages), store: store)
                },
                // The memory database is bound to one model's layouts: another pipeline must share them.
                runWith: { yaml, pages, batch in
                    let other = try PipelineConfig.parse(text: yaml, path: "other.yml")
                    return PipelineRunner(config: other, options: options("memory", batch), logger: LogCapture().logger)
                        .run(source: MemoryPageSource(pages), store: MemoryStore(model: other.model, database: store.database))
                },
                dump: { store.dump() },
                render: { try StoreSeamTests.sqliteDump($0, config.model) })
        case .postgresql:
            let url = try PostgresServer.freshDatabase()
            return harness(at: url) { try PostgresTests.postgresDump(url, config.model) }
        }
    }

    /// The merge rules' pages (nested objects, bare references under every policy, composite
    /// identities, ordered to-many links, a rejected page and record) end in SQLite's state at the
    /// same batch size, with the same counts (`updated` counts a row once per batch it is in).
    @Test(arguments: Backend.allCases, [1, 3, 50])
    func theMergeRulesEndInTheReferenceState(backend: Backend, batchRecords: Int) throws {
        let harness = try Self.harness(backend, yaml: StoreSeamTests.yaml)
        let summary = try harness.run(StoreSeamTests.pages, batchRecords)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedRecords == 1 && summary.counters.rejectedPages == 1)
        let (reference, db) = try ingest(StoreSeamTests.yaml, StoreSeamTests.pages, batchRecords: batchRecords)
        #expect(summary.counters == reference.counters)
        let expected = try harness.render(db)
        #expect(expected.values.allSatisfy { !$0.isEmpty }, "the pages fill every table")
        let got = try harness.dump()
        for table in expected.keys.sorted() { #expect(got[table] == expected[table], "\(backend): table \(table)") }
    }

    /// Under every load plan a backend decides for the pipeline (``LoadPlan``; a staged load where
    /// the backend and the model allow one, batch by batch otherwise), the same pages end in the
    /// same tables as SQLite's batch-by-batch run, with the same rows inserted and rejected; a
    /// plan the backend refuses fails the run before anything is written, naming why. The merge
    /// rules' pipeline, and the people pipeline of the staged loads (which stage).
    @Test(arguments: [Backend.sqlite, Backend.postgresql], Asking.allCases)
    func everyPlanABackendAcceptsEndsInTheReferenceState(backend: Backend, asking: Asking) throws {
        for (yaml, pages) in [(StoreSeamTests.yaml, StoreSeamTests.pages), (bulkYAML, bulkPages)] {
            let config = try PipelineConfig.parse(text: yaml, path: "conformance.yml")
            var options = RunOptions()
            options.loading = asking.loading
            options.databasePath = backend == .sqlite ? "plan.db" : "postgresql://127.0.0.1/plan"
            let plan = PipelineRunner.loadPlan(config, options, fetching: false, backend: try options.location.get().backend)
            // The people pipeline stages when asked: the staged path is among those run.
            if yaml == bulkYAML && asking == .bulk { #expect(plan.mode == .staged, "\(plan)") }
            let harness = try Self.harness(backend, yaml: yaml, asking: asking)
            let summary = try harness.run(pages, 3)
            if case .refused(let reasons) = plan.mode {
                #expect(summary.status == .failed && (summary.error ?? "").contains(reasons[0]), "\(plan): \(summary.error ?? "")")
                // Refused before the store opened: no table made, or none holding a row.
                #expect((try? harness.dump())?.values.allSatisfy(\.isEmpty) ?? true, "a refused plan writes nothing")
                continue
            }
            #expect(summary.status == .finished, "\(backend) \(plan): \(summary.error ?? "")")
            let (reference, db) = try ingest(yaml, pages, batchRecords: 3)
            #expect(summary.counters.inserted == reference.counters.inserted, "\(backend) \(plan)")
            #expect(summary.counters.rejectedRecords == reference.counters.rejectedRecords, "\(backend) \(plan)")
            let expected = try harness.render(db)
            let got = try harness.dump()
            for table in expected.keys.sorted() { #expect(got[table] == expected[table], "\(backend) \(plan): table \(table)") }
        }
    }

    /// Running the same pages again changes no row and inserts nothing.
    @Test(arguments: Backend.allCases)
    func aSecondRunOfTheSamePagesChangesNothing(backend: Backend) throws {
        let harness = try Self.harness(backend, yaml: StoreSeamTests.yaml)
        #expect(try harness.run(StoreSeamTests.pages, 2).status == .finished)
        let first = try harness.dump()
        let again = try harness.run(StoreSeamTests.pages, 2)
        #expect(again.status == .finished, "\(again.error ?? "")")
        #expect(again.counters.inserted == 0)
        #expect(try harness.dump() == first)
    }

    /// `write: replace` deletes the root rows a complete run did not touch, nullifying what
    /// pointed at them, in every backend alike.
    @Test(arguments: Backend.allCases)
    func writeReplaceDeletesWhatTheRunDidNotTouch(backend: Backend) throws {
        let yaml = StoreSeamTests.yaml.replacingOccurrences(of: "root: person", with: "root: person\nwrite: replace")
        let harness = try Self.harness(backend, yaml: yaml)
        #expect(try harness.run(Array(StoreSeamTests.pages[0...1]), 50).status == .finished)
        let second = try harness.run([#"{"results": [{"id": 2, "name": "Bo", "dogs": [11]}]}"#], 50)
        #expect(second.status == .finished, "\(second.error ?? "")")
        #expect(second.counters.deleted == 3)
        let (_, db) = try ingest(yaml, Array(StoreSeamTests.pages[0...1]), batchRecords: 50)
        try ingest(yaml, [#"{"results": [{"id": 2, "name": "Bo", "dogs": [11]}]}"#], db: db, batchRecords: 50)
        #expect(try harness.dump() == harness.render(db))
    }

    /// A database whose tables disagree with the pipeline is refused before anything is written,
    /// with the same conflicts in every SQL backend (one check, `StoredTables`, above them): a
    /// column of another type (a to-one key follows its target's identity), another identity.
    @Test(arguments: [Backend.sqlite, Backend.postgresql])
    func aDisagreeingDatabaseIsRefusedWithTheSameConflicts(backend: Backend) throws {
        let changed = StoreSeamTests.yaml.replacingOccurrences(of: "score: double", with: "score: integer")
            .replacingOccurrences(of: "dog:\n    identity: id", with: "dog:\n    identity: name")
        #expect(changed.contains("identity: name"))
        let database =
            backend == .sqlite ? temporaryDirectory().appendingPathComponent("c.db").path : try PostgresServer.freshDatabase()
        func run(_ yaml: String) throws -> RunSummary {
            var options = RunOptions()
            options.databasePath = database
            options.progressInterval = 0
            return PipelineRunner(
                config: try PipelineConfig.parse(text: yaml, path: "c.yml"), options: options, logger: LogCapture().logger
            )
            .run(source: MemoryPageSource(StoreSeamTests.pages))
        }
        #expect(try run(StoreSeamTests.yaml).status == .finished)
        let refused = try run(changed)
        #expect(refused.status == .failed && refused.failureKind == .configuration)
        let lines = (refused.error ?? "").components(separatedBy: "\n").dropFirst().map { $0.trimmingCharacters(in: .whitespaces) }
        let (integer, text, real) = backend == .sqlite ? ("INTEGER", "TEXT", "REAL") : ("bigint", "text", "double precision")
        #expect(
            lines.sorted() == [
                "table 'dog': its identity is (id), the pipeline's is (name)",
                "table 'person', column 'best_id': stored as \(integer), the pipeline wants \(text)",
                "table 'person', column 'score': stored as \(real), the pipeline wants \(integer)",
            ], "\(refused.error ?? "")")
    }
}
