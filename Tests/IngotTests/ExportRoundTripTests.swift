import Foundation
import Logging
import Testing

@testable import Ingot

/// `ingot export` gives back what `ingot run --pages` takes "to the same tables", for the
/// pipelines the project ships and the cookbook's, loaded from the fixture server as their APIs
/// serve them: each root entity exported (related rows nested, --depth 1), wrapped at the pipeline's
/// `records:` path, run into a new database, every table compared.
@Suite(.serialized)
struct ExportRoundTripTests {
    static func cases(_ base: String) throws -> [(name: String, yaml: String, roots: [String])] {
        [
            ("people", try String(contentsOf: packageRoot.appendingPathComponent("pipelines/people.yml"), encoding: .utf8), ["person"]),
            ("stripe", RealAPITests.stripe(base), ["customer"]),
            ("twitter", RealAPITests.twitter(base), ["user"]),
            ("reddit", RealAPITests.reddit(base), ["link", "comment"]),
        ]
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
            let first = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
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
}
