import Foundation
import Testing

@testable import Ingot

/// The run's plan as one value (RunPlan): what a dry run prints is what the run decides — the
/// load plan, whether and how it joins, whether a refresh leaves pages out.
@Suite struct RunPlanTests {
    private func plan(_ options: RunOptions = RunOptions(), fetching: Bool = false, backend: any StoreBackend) throws -> RunPlan {
        RunPlan.make(try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml"), options, fetching: fetching, backend: backend)
    }

    private func joining(_ name: String, resume: Bool = false) -> RunOptions {
        var options = RunOptions()
        options.join = name
        options.resume = resume
        return options
    }

    /// SQLite shares no runs: a join is refused before the database is opened, and the dry run
    /// says so with the same reason, where a PostgreSQL join from local pages exchanges its rows.
    @Test func aJoinIsRefusedWhereTheBackendSharesNoRuns() throws {
        let sqlite = try plan(joining("j"), backend: SQLiteBackend(path: "plan.db"))
        let reason = try #require(sqlite.joinRefusal)
        #expect(sqlite.lines.contains("join: refused: \(reason)"))
        let postgres = try plan(joining("j"), backend: PostgresBackend(url: "postgresql://localhost/x"))
        #expect(postgres.joinRefusal == nil && postgres.load.defersJoinedBatches)
        #expect(postgres.join == .joins(name: "j", madeByJobs: [], readsFiles: true, order: .anyOrder))
        #expect(postgres.lines.first == "load: \(postgres.load) (load=joined.deferred)")
        #expect(postgres.lines.contains { $0.hasPrefix("join: j: ") && $0.contains("each file read by the job that claims it") })
        // `--resume` cannot join: refused on every backend.
        #expect(try plan(joining("j", resume: true), backend: PostgresBackend(url: "postgresql://localhost/x")).joinRefusal != nil)
    }

    /// A joined chain of for_each says which requests the fetcher makes (their records make the
    /// next ones) and which the jobs make: Hacker News's stories are the fetcher's, their
    /// comments the jobs' when they read no records of their own.
    @Test func aJoinedChainOfForEachSaysWhoMakesWhichRequests() throws {
        let yaml = try ExportRoundTripTests.cookbook("hacker-news", "http://127.0.0.1:1", [:])
            .replacingOccurrences(of: ", depth: 3}", with: "}")
        let config = try PipelineConfig.parse(text: yaml, path: "hn.yml")
        let made = RunPlan.make(config, joining("hn"), fetching: true, backend: PostgresBackend(url: "postgresql://localhost/x"))
        #expect(
            made.join
                == .joins(
                    name: "hn", madeByJobs: ["the requests of comments"], madeByFetcher: ["the requests of stories"], readsFiles: false,
                    order: .anyOrder))
        let line = try #require(made.lines.first { $0.hasPrefix("join: hn: ") })
        #expect(
            line.contains("the requests of comments fetched by the jobs that claim them")
                && line.contains("the requests of stories fetched by the fetcher (their records make the next requests)"), "\(line)")
    }

    /// A refresh leaves unchanged pages out unless asked not to; from one HTTP source it fetches
    /// every page first.
    @Test func theRefreshFollowsTheOptionsAndTheSource() throws {
        let backend = SQLiteBackend(path: "plan.db")
        #expect(try plan(backend: backend).refresh == .leavesOut(fetchesFirst: false))
        #expect(try plan(fetching: true, backend: backend).refresh == .leavesOut(fetchesFirst: true))
        var full = RunOptions()
        full.fullRefresh = true
        let plan = try plan(full, backend: backend)
        #expect(plan.refresh == .full && plan.join == nil)
        #expect(plan.lines.count == 2 && plan.lines[1].hasPrefix("refresh: every page is applied (--full-refresh)"))
    }
}
