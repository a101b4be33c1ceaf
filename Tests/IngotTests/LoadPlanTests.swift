import Foundation
import Testing

@testable import Ingot

/// How a run writes its batches is one value decided once (Store/LoadPlan.swift): the decision
/// as a table, and a run's `run.started` says the plan its dry run printed.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct LoadPlanTests {
    static let sqlite = SQLiteBackend(path: "/tmp/x.db").loadCapabilities
    static let postgres = PostgresBackend(url: "postgresql://127.0.0.1/x").loadCapabilities

    static func decide(
        _ loading: Loading, joined: Bool = false, fetching: Bool = false, write: [String] = [], model: [String] = [],
        _ capabilities: LoadCapabilities = sqlite
    ) -> LoadPlan.Mode {
        LoadPlan.decide(
            LoadPlan.Inputs(
                loading: loading, joined: joined, fetching: fetching, writeObstacles: write, modelObstacles: model,
                capabilities: capabilities)
        ).mode
    }

    @Test func theDecisionAsATable() {
        #expect(Self.decide(.staged) == .staged)
        #expect(Self.decide(.staged, model: ["entity a has no identity"]) == .refused(["entity a has no identity"]))
        // `--bulk` on a joined job defers its batches, from any source; what a staged load
        // cannot run is refused as for a single job.
        #expect(Self.decide(.staged, joined: true, Self.postgres) == .joined(.deferredAsked))
        #expect(Self.decide(.staged, joined: true, fetching: true, Self.postgres) == .joined(.deferredAsked))
        #expect(Self.decide(.staged, joined: true, model: ["m"], Self.postgres) == .refused(["m"]))
        #expect(Self.decide(.batchByBatch) == .batchByBatch(obstacles: []))
        #expect(Self.decide(.batchByBatch, joined: true, Self.postgres) == .joined(.positions))
        // Local pages: staged at 4 MiB, or from the first batch; a fetching source at 40 MiB only.
        #expect(Self.decide(.automatic()) == .automatic(afterBytes: 4 << 20, fromFirstBatch: true))
        #expect(Self.decide(.automatic(), fetching: true) == .automatic(afterBytes: 40 << 20, fromFirstBatch: false))
        #expect(Self.decide(.automatic(afterBytes: 5 << 20)) == .automatic(afterBytes: 5 << 20, fromFirstBatch: false))
        #expect(Self.decide(.automatic(), write: ["w"], model: ["m"]) == .batchByBatch(obstacles: ["w", "m"]))
        #expect(Self.decide(.automatic(), joined: true, Self.postgres) == .joined(.deferred))
        #expect(Self.decide(.automatic(), joined: true, fetching: true, Self.postgres) == .joined(.positions))
        #expect(Self.decide(.automatic(), joined: true, model: ["m"], Self.postgres) == .joined(.positions))
    }

    /// What each backend is asked to do follows from the plan and its capabilities alone.
    @Test func theStoreKnobsFollowThePlan() {
        let auto = LoadPlan(mode: .automatic(afterBytes: 4 << 20, fromFirstBatch: true), capabilities: Self.sqlite)
        #expect(auto.stageAfterBytes == 4 << 20 && auto.stagesFromFirstBatch && !auto.stagesAtOpen && auto.mayStage)
        let pg = LoadPlan(mode: .automatic(afterBytes: 40 << 20, fromFirstBatch: false), capabilities: Self.postgres)
        #expect(pg.stageAfterBytes == nil, "PostgreSQL does not turn staged by size")
        #expect(!pg.stagesFromFirstBatch && pg.mayStage)
        let never = LoadPlan(mode: .batchByBatch(obstacles: []), capabilities: Self.sqlite)
        #expect(never.stageAfterBytes == nil && !never.stagesFromFirstBatch && !never.mayStage)
        let joined = LoadPlan(mode: .joined(.deferred), capabilities: Self.postgres)
        #expect(!joined.stagesFromFirstBatch && !joined.mayStage && joined.stageAfterBytes == nil)
        // Its rows are exchanged between the jobs and written at the run's end; a fetching joined
        // job's (and every other plan's) are not, unless asked (`--bulk`).
        #expect(joined.defersJoinedBatches)
        let positions = LoadPlan(mode: .joined(.positions), capabilities: Self.postgres)
        #expect(!positions.defersJoinedBatches && !positions.stagesFromFirstBatch && !positions.mayStage)
        let asked = LoadPlan(mode: .joined(.deferredAsked), capabilities: Self.postgres)
        #expect(asked.defersJoinedBatches && !asked.mayStage && !asked.stagesAtOpen)
        // Which first batch the writer offers: a full one in no identity order (the store decides
        // whether it may stage: `stagesFromFirstBatch`, or a given store's own rules).
        #expect(LoadPlan.stagesFirstBatch(records: 1000, inIdentityOrder: false))
        #expect(!LoadPlan.stagesFirstBatch(records: 999, inIdentityOrder: false))
        #expect(!LoadPlan.stagesFirstBatch(records: 5000, inIdentityOrder: true))
        #expect(!auto.defersJoinedBatches && !pg.defersJoinedBatches && !never.defersJoinedBatches)
        // A joined job's requests' answers: in claim order when it is asked to defer (its units
        // then come in a row: its batches hold consecutive units), as they come for every other plan.
        #expect(asked.answerOrder == .claimed)
        #expect([auto, pg, never, joined, positions].allSatisfy { $0.answerOrder == .asTheyCome })
    }

    /// The `load:` line of `--dry-run` is the plan `run.started` and `run.summary` log, for each
    /// way of asking, on SQLite and PostgreSQL.
    @Test(arguments: [[], ["--bulk"], ["--no-bulk"], ["--bulk-after-mib", "5"]])
    func aDryRunSaysThePlanARunRuns(flags: [String]) throws {
        for db in [temporaryDirectory().appendingPathComponent("plan.db").path, try PostgresServer.freshDatabase()] {
            let common = ["run", "pipelines/people.yml", "--db", db] + flags
            let dry = try runIngot(common + ["--dry-run"])
            #expect(dry.status == 0, "\(dry.stderr)")
            let line = try #require(dry.stdout.split(separator: "\n").first { $0.hasPrefix("load: ") })
            let planned = try #require(line.firstMatch(of: /\(load=([a-z_.]+)\)$/)?.1, "\(line)")
            let run = try runIngot(common + ["--no-archive", "--progress-interval", "0"])
            #expect(run.status == 0, "\(run.stderr.suffix(500))")
            let started = try #require(run.stderr.split(separator: "\n").first { $0.contains("msg=run.started") })
            #expect(
                logfmtFields(started).contains("load=\(planned)"),
                "\(flags) \(db.hasPrefix("postgres") ? "PostgreSQL" : "SQLite"): \(started)")
            let summary = try #require(run.stderr.split(separator: "\n").last { $0.contains("msg=run.summary") })
            #expect(logfmtFields(summary).contains("load=\(planned)"), "the summary names the plan too: \(summary)")
        }
    }
}

/// Every way of asking on every backend, from local files and over HTTP, with a first batch in
/// identity order and one scattered: the plan the dry run prints is the one `run.started` logs,
/// and the run's `bulk.*` events are the ones the plan says (docs/architecture.md, "One page through the layers").
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct LoadPlanMatrixTests {
    enum Backend: String, CaseIterable, Sendable { case sqlite, postgres, memory }
    enum Asking: String, CaseIterable, Sendable { case bulk, automatic, noBulk, join, joinBulk }
    enum Source: String, CaseIterable { case files, http }
    enum Order: String, CaseIterable { case ordered, scattered }

    static func yaml(_ source: Source, pages: String, server: FixtureServer) -> String {
        let from =
            source == .files
            ? "  files: {dir: \(pages), glob: \"page-*.json\"}"
            : "  http: {url: \"\(server.base)/people/next\", paginate: {next_url: next}}"
        return """
            version: 1
            name: planned
            source:
            \(from)
            records: results
            root: person
            entities:
              person:
                identity: id
                attributes: {id: integer, name: string}
                relationships:
                  dogs: {to: dog, many: true, key: dogs}
              dog:
                identity: id
                attributes: {id: integer}
            """
    }

    /// Three pages of 500 persons, each with a dog: ids in order, or shuffled (seeded).
    static func pages(_ order: Order) throws -> String {
        var ids = Array(1...1500)
        var rng = SeededGenerator(seed: 7)
        if order == .scattered { ids.shuffle(using: &rng) }
        let dir = temporaryDirectory().appendingPathComponent("pages")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        for page in 0..<3 {
            let records = ids[page * 500..<(page + 1) * 500].map { #"{"id": \#($0), "name": "p\#($0)", "dogs": [\#($0 % 40)]}"# }
            let text = #"{"next": null, "results": ["# + records.joined(separator: ",") + "]}"
            try text.write(to: dir.appendingPathComponent(String(format: "page-%05d.json", page + 1)), atomically: false, encoding: .utf8)
        }
        return dir.path
    }

    /// The `bulk.*` events a run under `mode` logs, when its first batch came in `order`.
    static func events(_ mode: LoadPlan.Mode, _ order: Order) -> [String] {
        let merged = ["bulk.merging", "bulk.merged"]
        switch mode {
        case .staged: return merged
        case .automatic(_, let first): return first && order == .scattered ? ["bulk.started"] + merged : []
        // A joined job stages nothing of its own: its rows are exchanged between the jobs, or
        // written with positions.
        case .joined, .batchByBatch, .given, .refused: return []
        }
    }

    @Test(arguments: Backend.allCases, Asking.allCases)
    func theRunDoesWhatItsPlanSays(backend: Backend, asking: Asking) throws {
        let joins = asking == .join || asking == .joinBulk
        if backend == .sqlite && joins {
            // SQLite shares no runs: the join is refused before a row or a run is written, naming why.
            let pages = try Self.pages(.ordered)
            let server = try FixtureServer(people: pages)
            let config = try PipelineConfig.parse(text: Self.yaml(.files, pages: pages, server: server), path: "planned.yml")
            var options = RunOptions()
            options.progressInterval = 0
            options.loading = asking == .joinBulk ? .staged : .automatic()
            options.join = "plan"
            options.databasePath = temporaryDirectory().appendingPathComponent("plan.db").path
            let run = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
            #expect(run.status == .failed && run.failureKind == .configuration, "\(asking): \(run.error ?? "")")
            #expect(run.error?.contains("--join needs a database that several jobs can share") == true, "\(run.error ?? "")")
            let written =
                FileManager.default.fileExists(atPath: options.databasePath)
                ? try rows(options.databasePath, "SELECT (SELECT count(*) FROM person) + (SELECT count(*) FROM _ingot_runs)") : [["0"]]
            #expect(written == [["0"]], "no row and no run written")
            // The dry run meets the same refusal, says it, and exits 2 as the run does.
            let file = temporaryDirectory().appendingPathComponent("planned.yml")
            try Self.yaml(.files, pages: pages, server: server).write(to: file, atomically: false, encoding: .utf8)
            let dry = try runIngot(
                ["run", file.path, "--db", options.databasePath, "--join", "plan", "--dry-run"] + (asking == .joinBulk ? ["--bulk"] : []))
            #expect(dry.status == 2, "\(dry.stdout) \(dry.stderr)")
            #expect(dry.stdout.contains("join: refused: --join needs a database that several jobs can share"), "\(dry.stdout)")
            #expect(!FileManager.default.fileExists(atPath: options.databasePath), "the dry run made no file")
            return
        }
        for order in Order.allCases {
            let pages = try Self.pages(order)
            let server = try FixtureServer(people: pages)
            for source in Source.allCases {
                let config = try PipelineConfig.parse(text: Self.yaml(source, pages: pages, server: server), path: "planned.yml")
                var options = RunOptions()
                options.progressInterval = 0
                options.loading = asking == .bulk || asking == .joinBulk ? .staged : asking == .noBulk ? .batchByBatch : .automatic()
                if joins { options.join = "plan-\(UUID().uuidString.prefix(8))" }
                options.databasePath =
                    backend == .postgres
                    ? try PostgresServer.freshDatabase() : temporaryDirectory().appendingPathComponent("plan.db").path
                let logs = LogCapture()
                let runner = PipelineRunner(config: config, options: options, logger: logs.logger)
                let plan: LoadPlan
                let run: RunSummary
                let label = "\(backend) \(asking) \(source) \(order)"
                if backend == .memory {
                    plan = LoadPlan(mode: .given, capabilities: LoadPlan.batchByBatch.capabilities)
                    let made = try config.makeSource(database: try options.location.get(), maxPageBytes: 1 << 26, logger: logs.logger)
                    run = runner.run(source: made, store: MemoryStore(model: config.model))
                } else {
                    let backendValue = try options.location.get().backend
                    plan = PipelineRunner.loadPlan(config, options, fetching: config.fetches(pages: nil), backend: backendValue)
                    run = runner.run()
                }
                #expect(run.status == .finished, "\(label): \(run.error ?? "")")
                let started = logs.all.first { $0.contains("msg=run.started") } ?? ""
                #expect(logfmtFields(started).contains("load=\(plan.code)"), "\(label): \(started)")
                let events = logs.all.compactMap { line in
                    line.split(separator: " ").first { $0.hasPrefix("msg=bulk.") }.map { String($0.dropFirst(4)) }
                }
                #expect(events == Self.events(plan.mode, order), "\(label): \(plan)")
                // The summary says what the plan turned into, as the events do.
                let loaded = run.loaded ?? ""
                if plan.defersJoinedBatches {
                    #expect(loaded.hasPrefix("exchanged between the jobs"), "\(label): \(loaded)")
                    let summaryLine = logs.all.last { $0.contains("msg=run.summary") } ?? ""
                    #expect(logfmtFields(summaryLine).contains("loaded=exchanged"), "\(label): \(summaryLine)")
                    #expect(run.counters.entities["person"]?.inserted == 1500, "\(label)")
                    continue
                }
                let staged = events.contains("bulk.merged")
                #expect(staged == loaded.hasSuffix("rows merged"), "\(label): \(loaded)")
                let stagedFromTheStart: Bool = if case .staged = plan.mode { true } else { false }
                #expect(
                    loaded.hasPrefix("staged from the first batch") == (events.contains("bulk.started") || stagedFromTheStart),
                    "\(label): \(loaded)")
                #expect(staged || loaded.hasPrefix("batch by batch"), "\(label): \(loaded)")
                // The summary line says it as a value (docs/logging.md).
                let summaryLine = logs.all.last { $0.contains("msg=run.summary") } ?? ""
                let outcome =
                    !staged
                    ? (loaded.contains("declined") ? "batch_by_batch.declined" : "batch_by_batch")
                    : loaded.hasPrefix("staged from the first batch") ? "staged.first_batch" : "staged.after_records"
                #expect(logfmtFields(summaryLine).contains("loaded=\(outcome)"), "\(label): \(summaryLine)")
                #expect(run.counters.entities["person"]?.inserted == 1500, "\(label)")
                if backend != .memory, !joins {
                    // What the dry run of the same pipeline file prints.
                    let file = temporaryDirectory().appendingPathComponent("planned.yml")
                    try Self.yaml(source, pages: pages, server: server).write(to: file, atomically: false, encoding: .utf8)
                    let flags = [.bulk: ["--bulk"], .noBulk: ["--no-bulk"]][asking] ?? []
                    let dry = try runIngot(["run", file.path, "--db", options.databasePath, "--dry-run"] + flags)
                    #expect(dry.stdout.contains("load: \(plan) (load=\(plan.code))\n"), "\(label): \(dry.stdout)")
                }
            }
        }
    }
}

extension LoadPlan.Mode {
    var isRefused: Bool { if case .refused = self { true } else { false } }
}
