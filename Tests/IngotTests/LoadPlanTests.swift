import Foundation
import Testing

@testable import Ingot

/// How a run writes its batches is one value decided once (Store/LoadPlan.swift): the decision
/// as a table, and a run's `run.started` says the plan its dry run printed.
@Suite(.serialized)
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
        #expect(Self.decide(.staged, joined: true, Self.postgres).isRefused)
        #expect(Self.decide(.batchByBatch) == .batchByBatch(obstacles: []))
        #expect(Self.decide(.batchByBatch, joined: true, Self.postgres) == .batchByBatch(obstacles: []))
        // Local pages: staged at 4 MiB, or from the first batch; a fetching source at 40 MiB only.
        #expect(Self.decide(.automatic()) == .automatic(afterBytes: 4 << 20, fromFirstBatch: true))
        #expect(Self.decide(.automatic(), fetching: true) == .automatic(afterBytes: 40 << 20, fromFirstBatch: false))
        #expect(Self.decide(.automatic(afterBytes: 5 << 20)) == .automatic(afterBytes: 5 << 20, fromFirstBatch: false))
        #expect(Self.decide(.automatic(), write: ["w"], model: ["m"]) == .batchByBatch(obstacles: ["w", "m"]))
        #expect(Self.decide(.automatic(), joined: true, Self.postgres) == .joined(stretches: true))
        #expect(Self.decide(.automatic(), joined: true, fetching: true, Self.postgres) == .joined(stretches: false))
        #expect(Self.decide(.automatic(), joined: true, model: ["m"], Self.postgres) == .joined(stretches: false))
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
        let joined = LoadPlan(mode: .joined(stretches: true), capabilities: Self.postgres)
        #expect(joined.stagesFromFirstBatch && joined.mayStage && joined.stageAfterBytes == nil)
    }

    /// The `load:` line of `--dry-run` is the plan `run.started` and `run.summary` log, for each
    /// way of asking, on SQLite and PostgreSQL.
    @Test(arguments: [[], ["--bulk"], ["--no-bulk"], ["--bulk-after-mib", "5"]])
    func aDryRunSaysThePlanARunRuns(flags: [String]) throws {
        for db in [temporaryDirectory().appendingPathComponent("plan.db").path, try PostgresServer.freshDatabase()] {
            let common = ["run", "pipelines/people.yml", "--db", db] + flags
            let dry = try runIngot(common + ["--dry-run"])
            #expect(dry.status == 0, "\(dry.stderr)")
            let planned = try #require(dry.stdout.split(separator: "\n").first { $0.hasPrefix("load: ") }?.dropFirst("load: ".count))
            let run = try runIngot(common + ["--no-archive", "--progress-interval", "0"])
            #expect(run.status == 0, "\(run.stderr.suffix(500))")
            let started = try #require(run.stderr.split(separator: "\n").first { $0.contains("msg=run.started") })
            #expect(started.contains("load=\"\(planned)\""), "\(flags) \(db.hasPrefix("postgres") ? "PostgreSQL" : "SQLite"): \(started)")
            let summary = try #require(run.stderr.split(separator: "\n").last { $0.contains("msg=run.summary") })
            #expect(summary.contains("load=\"\(planned)\""), "the summary names the plan too: \(summary)")
        }
    }
}

extension LoadPlan.Mode {
    var isRefused: Bool { if case .refused = self { true } else { false } }
}
