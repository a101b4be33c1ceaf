import Foundation
import Testing

@testable import Ingot

/// The acceptance checks of the people data set, at a small size (make bench runs 200k).
struct PeopleDataSetTests {
    @Test(arguments: [false, true])
    func reachesTheExpectedStateAndRerunsChangeNothing(faults: Bool) throws {
        let dir = temporaryDirectory()
        let pages = try generatePeople(persons: 3000, pageSize: 100, faults: faults)
        let expected = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: pages + "/expected.json"))) as? [String: Any])
        let rejected = try #require(expected["rejected"] as? [String: Int])
        var config = try PipelineConfig.load(path: packageRoot.appendingPathComponent("pipelines/people.yml").path)
        config.source = .files(directory: pages, glob: "page-*.json")
        let db = dir.appendingPathComponent("people.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        options.batchRecords = 700
        let first = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: try DirectoryPageSource(directory: pages, glob: "page-*.json"))
        #expect(first.status == .finished, "\(first.error ?? "")")
        #expect(first.counters.rejectedRecords == (rejected["missing_id"] ?? -1) + (rejected["wrong_type_id"] ?? -1))
        #expect(first.counters.rejectedPages == rejected["invalid_json_pages"])
        let check = try checkPeople(db, pages)
        #expect(check.contains(#""ok": true"#), "\(check)")

        let second = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: try DirectoryPageSource(directory: pages, glob: "page-*.json"))
        #expect(second.counters.inserted == 0)
        #expect(try checkPeople(db, pages) == check)
    }

    @Test func resultsDoNotDependOnTheNumberOfLanes() throws {
        let dir = temporaryDirectory()
        let pages = try generatePeople(persons: 2000, pageSize: 50, faults: true)
        var config = try PipelineConfig.load(path: packageRoot.appendingPathComponent("pipelines/people.yml").path)
        config.source = .files(directory: pages, glob: "page-*.json")
        var checks: [String] = []
        for lanes in [1, 2, 4, 8] {
            var options = RunOptions()
            options.databasePath = dir.appendingPathComponent("lanes-\(lanes).db").path
            options.progressInterval = 0
            options.lanes = lanes
            options.batchRecords = 300
            let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
                .run(source: try DirectoryPageSource(directory: pages, glob: "page-*.json"))
            #expect(summary.status == .finished)
            checks.append(try checkPeople(options.databasePath, pages))
        }
        #expect(checks[0].contains(#""ok": true"#))
        #expect(Set(checks).count == 1, "the same database whatever the lanes: \(checks)")
    }
}
