import Foundation
import Testing

@testable import Ingot

/// The acceptance checks of the people data set, at a small size (make bench runs 200k).
struct PeopleDataSetTests {
    private func python(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", sharedRoot.appendingPathComponent("bench/gen_people.py").path] + arguments
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    @Test(arguments: [false, true])
    func reachesTheExpectedStateAndRerunsChangeNothing(faults: Bool) throws {
        let dir = temporaryDirectory()
        let pages = dir.appendingPathComponent("pages").path
        _ = try python(["--out", pages, "--persons", "3000", "--page-size", "100"] + (faults ? ["--faults"] : []))
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
        #expect(first.status == .finished)
        #expect(first.counters.rejectedRecords == (rejected["missing_id"] ?? -1) + (rejected["wrong_type_id"] ?? -1))
        #expect(first.counters.rejectedPages == rejected["invalid_json_pages"])
        let check = try python(["--check", db, "--expected", pages + "/expected.json"])
        #expect(check.contains(#""ok": true"#), "\(check)")

        let second = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: try DirectoryPageSource(directory: pages, glob: "page-*.json"))
        #expect(second.counters.inserted == 0)
        #expect(try python(["--check", db, "--expected", pages + "/expected.json"]) == check)
    }

    @Test func resultsDoNotDependOnTheNumberOfLanes() throws {
        let dir = temporaryDirectory()
        let pages = dir.appendingPathComponent("pages").path
        _ = try python(["--out", pages, "--persons", "2000", "--page-size", "50", "--faults"])
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
            checks.append(try python(["--check", options.databasePath, "--expected", pages + "/expected.json"]))
        }
        #expect(checks[0].contains(#""ok": true"#))
        #expect(Set(checks).count == 1, "the same database whatever the lanes: \(checks)")
    }
}
