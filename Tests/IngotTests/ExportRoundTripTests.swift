import Foundation
import Logging
import Testing

@testable import Ingot

/// `ingot export` gives back what `ingot run --pages` takes "to the same tables", for the
/// pipelines the project ships and the cookbook's, loaded from the fixture server as their APIs
/// serve them: each root entity exported (related rows nested, --depth 1), wrapped at the pipeline's
/// `records:` path, run into a new database, every table compared.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct ExportRoundTripTests {
    static func cases(_ base: String) throws -> [(name: String, yaml: String, roots: [String])] {
        [
            ("people", try String(contentsOf: packageRoot.appendingPathComponent("pipelines/people.yml"), encoding: .utf8), ["person"]),
            ("stripe", RealAPITests.stripe(base), ["customer"]),
            ("twitter", RealAPITests.twitter(base), ["user"]),
            ("reddit", RealAPITests.reddit(base), ["link", "comment"]),
            ("slack", ErrorWhenTests.slack(base, channel: "C1"), ["message"]),
            (
                "jira-issues",
                try cookbook(
                    "jira-issues", base, ["https://your-domain.atlassian.net/": "/jira/", "maxResults, limit: 100": "maxResults, limit: 3"]),
                ["issue"]
            ),
            (
                "shopify-products",
                try cookbook("shopify-products", base, ["https://your-shop.myshopify.com/": "/shopify/", "limit=250": "limit=2"]),
                ["product"]
            ),
            (
                "notion-users",
                try cookbook("notion-users", base, ["https://api.notion.com/": "/notion/", "page_size=100": "page_size=3"]), ["user"]
            ),
        ]
    }

    /// docs/cookbook.md's recipe `name`, pointed at the fixture server at `base` (`changes`:
    /// each host's prefix to the server's path for that API, and smaller pages).
    static func cookbook(_ name: String, _ base: String, _ changes: [String: String]) throws -> String {
        let text = try String(contentsOf: packageRoot.appendingPathComponent("docs/cookbook.md"), encoding: .utf8)
        var recipe = try #require(
            text.components(separatedBy: "```yaml\n").first { $0.hasPrefix("version: 1\nname: \(name)\n") }?.components(separatedBy: "```")
                .first)
        for (from, to) in changes { recipe = recipe.replacingOccurrences(of: from, with: to.hasPrefix("/") ? base + to : to) }
        return recipe
    }

    @Test func everyShippedShapeRoundTrips() throws {
        let server = try FixtureServer()
        for (name, yaml, roots) in try Self.cases(server.base) {
            // Its files are found beside the pipeline file (people.yml's bundled sample).
            let config = try PipelineConfig.parse(text: yaml, path: packageRoot.appendingPathComponent("pipelines/\(name).yml").path)
            let db = temporaryDirectory().appendingPathComponent("\(name).db").path
            var options = RunOptions()
            options.databasePath = db
            options.progressInterval = 0
            let source = try config.makeSource(
                database: nil, maxPageBytes: Page.defaultMaxBytes,
                environment: ["JIRA_API_TOKEN": "t", "SHOPIFY_TOKEN": "t", "NOTION_TOKEN": "t"], logger: Logger(label: "t"))
            let first = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
            #expect(first.status == .finished && first.counters.records > 0, "\(name): \(first.error ?? "")")
            var records: [String] = []
            for root in roots {
                try RecordExporter(config: config, location: try StoreLocation(db), entity: root, filters: [], depth: 1).forEachRecord {
                    records.append($0)
                }
            }
            var page = "[" + records.joined(separator: ",") + "]"
            for key in config.recordsPath.reversed() { page = "{\"\(key)\": \(page)}" }
            let (again, copy) = try ingest(yaml, [page])
            #expect(again.status == .finished && again.counters.rejectedRecords == 0, "\(name): \(again.error ?? "")")
            let original = try StoreSeamTests.sqliteDump(db, config.model)
            let copied = try StoreSeamTests.sqliteDump(copy, config.model)
            for (table, rows) in original { #expect(copied[table] == rows, "\(name): \(table)") }
        }
    }

    /// The cookbook's GitHub pipeline (issues, then each issue's comments: a `for_each` with
    /// `with:`) and PokeAPI's list → detail pages (the list stores nothing; each detail's types
    /// are owned rows), as their APIs serve them: each resource's root exported and run again as
    /// that resource alone, into one new database — every table the same.
    @Test(arguments: ["github", "pokeapi"])
    func forEachPipelinesRoundTripResourceByResource(name: String) throws {
        let server = try FixtureServer()
        let text = name == "github" ? try RealAPITests.github(server.base) : RealAPITests.pokeapi(server.base)
        let config = try PipelineConfig.parse(text: text, path: "\(name).yml")
        let db = temporaryDirectory().appendingPathComponent("\(name).db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        let source = try config.makeSource(
            database: nil, maxPageBytes: Page.defaultMaxBytes, environment: ["GITHUB_TOKEN": "t"], logger: Logger(label: "t"))
        let first = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
        #expect(first.status == .finished && first.counters.rejectedRecords == 0, "\(name): \(first.error ?? "")")
        let copy = temporaryDirectory().appendingPathComponent("\(name)-copy.db").path
        for resource in config.resources {
            guard let root = resource.root else { continue }
            var records: [String] = []
            try RecordExporter(config: config, location: try StoreLocation(db), entity: root, filters: [], depth: 1).forEachRecord {
                records.append($0)
            }
            #expect(!records.isEmpty, "\(name): \(root)")
            // The same pipeline with this resource alone, its pages given.
            let start = try #require(text.range(of: "resources:\n"))
            let end = try #require(text.range(of: "entities:\n", range: start.upperBound..<text.endIndex))
            let alone = text.replacingCharacters(in: start.lowerBound..<end.lowerBound, with: "records: results\nroot: \(root)\n")
                .replacingOccurrences(of: "defaults: {http:", with: "x-defaults: {http:")
                .replacingOccurrences(of: "defaults:\n  http:\n", with: "x-defaults:\n  http:\n")
            let (again, _) = try ingest(alone, [#"{"results": [\#(records.joined(separator: ","))]}"#], db: copy)
            #expect(again.status == .finished && again.counters.rejectedRecords == 0, "\(name) \(resource.name): \(again.error ?? "")")
        }
        let original = try StoreSeamTests.sqliteDump(db, config.model)
        let copied = try StoreSeamTests.sqliteDump(copy, config.model)
        for (table, rows) in original { #expect(copied[table] == rows, "\(name): \(table)") }
    }

    /// pipelines/swapi.yml (six resources, a parent entity, relations read from both sides), as
    /// the Star Wars API serves it: each resource's root exported (identities at depth 0: the
    /// templates write them back as URLs) and run again as that resource, into one new
    /// database — every table the same.
    @Test func theStarWarsAPIRoundTripsResourceByResource() throws {
        let server = try FixtureServer()
        let environment = ["SWAPI_API": server.base]
        let text = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/swapi.yml"), encoding: .utf8)
        let config = try PipelineConfig.parse(text: text, path: "swapi.yml", environment: environment)
        let db = temporaryDirectory().appendingPathComponent("swapi.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        let first = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(
                source: ResourcesPageSource(
                    config: config, environment: environment, maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "t")))
        #expect(first.status == .finished && first.counters.rejectedRecords == 0, "\(first.error ?? "")")
        let copy = temporaryDirectory().appendingPathComponent("copy.db").path
        for resource in config.resources {
            guard let root = resource.root else { continue }
            var records: [String] = []
            try RecordExporter(config: config, location: try StoreLocation(db), entity: root, filters: [], depth: 0).forEachRecord {
                records.append($0)
            }
            // The same pipeline with this resource alone, its pages given.
            let start = try #require(text.range(of: "resources:\n"))
            let end = try #require(text.range(of: "x-dates:"))
            let alone = text.replacingCharacters(in: start.lowerBound..<end.lowerBound, with: "records: results\nroot: \(root)\n")
                .replacingOccurrences(of: "defaults:\n  http:\n", with: "x-defaults:\n  http:\n")
            let (again, _) = try ingest(alone, [#"{"results": [\#(records.joined(separator: ","))]}"#], db: copy)
            #expect(again.status == .finished && again.counters.rejectedRecords == 0, "\(resource.name): \(again.error ?? "")")
        }
        let original = try StoreSeamTests.sqliteDump(db, config.model)
        let copied = try StoreSeamTests.sqliteDump(copy, config.model)
        for (table, rows) in original { #expect(copied[table] == rows, "swapi: \(table)") }
    }
}
