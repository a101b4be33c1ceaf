import Foundation
import Logging
import Testing

@testable import Ingot

/// Every pipeline the project ships — each file of pipelines/ and each recipe of
/// docs/cookbook.md, taken as written with only its host changed — run by two joined jobs into
/// PostgreSQL — batch by batch, and exchanging their rows (`--bulk`) where the model allows it —
/// ends in the tables a single run leaves (docs/scale-out.md, "What holds"). The jobs claim in turn, so each commits pages of its own
/// wherever the run has more than one unit.
@Suite(.tags(.postgres, .process), .beyondUnit, .waitsOffThePool)
struct JoinedRecipesTests {
    struct Shipped: CustomTestStringConvertible, Sendable {
        enum Origin: Sendable {
            /// A recipe of docs/cookbook.md: each URL prefix to the fixture server's path for it
            /// (or a text to another).
            case cookbook([String: String])
            /// A file of pipelines/, its URL prefixes changed the same way.
            case file([String: String])
        }

        var name: String
        var origin: Origin
        var environment: [String: String] = [:]
        var testDescription: String { name }

        func text(_ base: String) throws -> String {
            switch origin {
            case .cookbook(let changes):
                return try ExportRoundTripTests.cookbook(name, base, changes)
            case .file(let changes):
                var text = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/\(name).yml"), encoding: .utf8)
                for (from, to) in changes { text = text.replacingOccurrences(of: from, with: to.hasPrefix("/") ? base + to : to) }
                return text
            }
        }
    }

    static let shipped: [Shipped] =
        [
            Shipped(
                name: "github-users", origin: .file(["https://api.github.com/": "/github/", "per_page=100": "per_page=3"]),
                environment: ["GITHUB_TOKEN": "t0ken"]),
            Shipped(name: "swapi-films", origin: .file(["https://swapi.dev/api/": "/api/"])),
            Shipped(name: "swapi-people", origin: .file(["https://swapi.dev/api/": "/api/"])),
            Shipped(
                name: "github", origin: .cookbook(["https://api.github.com/": "/github/", "per_page=100": "per_page=3"]),
                environment: ["GITHUB_TOKEN": "t0ken"]),
            Shipped(
                name: "stripe-customers", origin: .cookbook(["https://api.stripe.com/": "/stripe/", "limit=100": "limit=10"]),
                environment: ["STRIPE_SECRET_KEY": "sk_test"]),
            Shipped(
                name: "twitter-followers", origin: .cookbook(["https://api.twitter.com/": "/twitter/"]),
                environment: ["TWITTER_BEARER_TOKEN": "t0ken"]),
            Shipped(name: "pokeapi", origin: .cookbook(["https://pokeapi.co/api/v2/": "/pokeapi/api/v2/", "limit=100": "limit=10"])),
            Shipped(name: "reddit-overview", origin: .cookbook(["https://www.reddit.com/user/spez/": "/reddit/r/swift/"])),
            Shipped(
                name: "slack-history",
                origin: .cookbook(["https://slack.com/": "/slack/", "C0123456789": "C1", "limit=200": "limit=2"]),
                environment: ["SLACK_BOT_TOKEN": "xoxb"]),
            Shipped(
                name: "jira-issues",
                origin: .cookbook(["https://your-domain.atlassian.net/": "/jira/", "maxResults, limit: 100": "maxResults, limit: 3"]),
                environment: ["JIRA_API_TOKEN": "t0ken"]),
            Shipped(
                name: "shopify-products", origin: .cookbook(["https://your-shop.myshopify.com/": "/shopify/", "limit=250": "limit=2"]),
                environment: ["SHOPIFY_TOKEN": "t0ken"]),
            Shipped(
                name: "notion-users", origin: .cookbook(["https://api.notion.com/": "/notion/", "page_size=100": "page_size=3"]),
                environment: ["NOTION_TOKEN": "t0ken"]),
        ]
        + CookbookTests.recipes.map { Shipped(name: $0.name, origin: .cookbook($0.changes), environment: $0.environment) }

    /// Shipped pipelines joined by another test, with it.
    static let joinedElsewhere = [
        "people": "JoinTests.aJobKilledMidRunIsTakenOver",
        "people-http": "JoinTests.theFetcherKilledIsReplaced",
        "swapi": "JoinedResourcesTests.inversePairsRunJoinedInOrder",
        // Gzipped JSON Lines files.
        "export": "JoinTests.compressedJSONLinesJoinAsASingleRunReadsThem",
    ]

    @Test(.hangGuard, arguments: shipped)
    func aShippedPipelineRunsJoinedAsAlone(_ pipeline: Shipped) throws {
        let server = try FixtureServer()
        let config = try PipelineConfig.parse(
            text: try pipeline.text(server.base), path: "\(pipeline.name).yml", environment: pipeline.environment)
        var options = RunOptions()
        options.join = pipeline.name
        #expect(PipelineRunner.joinRefusal(config, options, sharesRuns: true) == nil)

        let db = temporaryDirectory().appendingPathComponent("alone.db").path
        options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        let single = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(
            source: try source(config, pipeline.environment))
        #expect(single.status == .finished && single.counters.records > 0, "\(single.error ?? "")")

        // Batch by batch with positions (a fetching source's default), and with `--bulk` — the
        // jobs' rows exchanged and written by part at the run's end — where the model allows it.
        var bulk = RunOptions()
        bulk.join = pipeline.name
        bulk.loading = .staged
        let exchanged = PipelineRunner.loadPlan(config, bulk, fetching: true, backend: PostgresBackend(url: "")).defersJoinedBatches
        for loading in exchanged ? [Loading.automatic(), .staged] : [.automatic()] {
            let database = try JoinDatabase(.postgresql, model: config.model)
            let summaries = try JoinTests.runJoined(config, database, name: pipeline.name, jobs: 2, batchRecords: 2, loading: loading) {
                try source(config, pipeline.environment)
            }
            #expect(
                summaries.allSatisfy { $0.status == .finished }, "\(loading): \(summaries.map { "\($0.status) \($0.error ?? "")" })")
            if single.counters.pages > 1 { JoinTests.expectShared(summaries) }
            let (got, want) = (try database.dump(), try database.sqlite(db))
            #expect(got.keys.sorted() == want.keys.sorted())
            for table in want.keys.sorted() { #expect(got[table] == want[table], "\(loading): table \(table)") }
            let total = try #require(try database.runs().first?.counters)
            let counts: [Int] = [
                single.counters.pages, single.counters.records, single.counters.rejectedRecords, single.counters.rejectedPages,
            ]
            #expect([total.pages, total.records, total.rejectedRecords, total.rejectedPages] == counts, "\(loading)")
        }
    }

    /// Every file of pipelines/ and every recipe of docs/cookbook.md is joined above or by the
    /// test named in ``joinedElsewhere``.
    @Test func everyShippedPipelineIsJoinedByATest() throws {
        let files = try FileManager.default.contentsOfDirectory(atPath: packageRoot.appendingPathComponent("pipelines").path)
            .filter { $0.hasSuffix(".yml") }.map { String($0.dropLast(4)) }
        let cookbook = try String(contentsOf: packageRoot.appendingPathComponent("docs/cookbook.md"), encoding: .utf8)
        let recipes = cookbook.components(separatedBy: "```yaml\nversion: 1\nname: ").dropFirst()
            .compactMap { $0.split(separator: "\n").first.map(String.init) }
        let covered = Set(Self.shipped.map(\.name)).union(Self.joinedElsewhere.keys)
        let uncovered: [String] = Set(files + recipes).subtracting(covered).sorted()
        #expect(uncovered.isEmpty, "\(uncovered)")
    }

    private func source(_ config: PipelineConfig, _ environment: [String: String]) throws -> any PageSource {
        try config.makeSource(database: nil, maxPageBytes: Page.defaultMaxBytes, environment: environment, logger: Logger(label: "test"))
    }
}
