import Foundation
import Testing

@testable import Ingot

/// Rejects are bounded like everything else (docs/reliability.md, hostile input): they count toward a
/// batch's record and byte bounds, and `_ingot_rejects` keeps at most `--max-reject-rows` rows
/// per run, the rest only counted.
@Suite(.serialized)
struct RejectBoundsTests {
    /// A pipeline of `item {id, name}` read from `dir`.
    func pipeline(_ dir: URL) throws -> String {
        let yml = dir.appendingPathComponent("rj.yml").path
        try itemPipeline("rj", "source: {files: {dir: pages}}").write(toFile: yml, atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("pages"), withIntermediateDirectories: true)
        return yml
    }

    @Test func pastMaxRejectRowsRejectionsAreCountedNotStored() throws {
        let dir = temporaryDirectory()
        let yml = try pipeline(dir)
        // 100 records without identity around 10 good ones, in two pages.
        let bad = Array(repeating: "{\"name\":\"x\"}", count: 50).joined(separator: ",")
        let good = (1...5).map { "{\"id\":\($0)}" }.joined(separator: ",")
        try "[\(bad),\(good)]".write(to: dir.appendingPathComponent("pages/p1.json"), atomically: true, encoding: .utf8)
        let good2 = (11...15).map { "{\"id\":\($0)}" }.joined(separator: ",")
        try "[\(good2),\(bad)]".write(to: dir.appendingPathComponent("pages/p2.json"), atomically: true, encoding: .utf8)
        let db = dir.appendingPathComponent("rj.db").path
        let archives = dir.appendingPathComponent("archives").path
        let (status, out, err) = try runIngot([
            "run", yml, "--db", db, "--archive-dir", archives, "--max-reject-rows", "25", "--batch-records", "7",
        ])
        #expect(status == 0, "\(err)")
        #expect(try rows(db, "SELECT count(*) FROM item") == [["10"]])
        #expect(try rows(db, "SELECT count(*), min(record_index) FROM _ingot_rejects") == [["25", "0"]])
        #expect(out.contains("rejected_records=100") || err.contains("rejected_records=100"))
        #expect(err.contains("item.rejected=100") && err.contains("rejects.missing_identity=100"))
        let warning = err.split(separator: "\n").first { $0.contains("msg=rejects.truncated") }.map(String.init) ?? ""
        #expect(warning.contains("max_reject_rows=25") && warning.contains("archive=\(archives)/rj-"), "\(warning)")
        #expect(err.components(separatedBy: "msg=rejects.truncated").count == 2, "one warning per run")
    }

    @Test func zeroStoresNoRejectRow() throws {
        let dir = temporaryDirectory()
        let yml = try pipeline(dir)
        try "[{\"name\":\"x\"},{\"id\":1}]".write(to: dir.appendingPathComponent("pages/p1.json"), atomically: true, encoding: .utf8)
        let db = dir.appendingPathComponent("rj.db").path
        let (status, _, err) = try runIngot(["run", yml, "--db", db, "--no-archive"], environment: ["INGOT_MAX_REJECT_ROWS": "0"])
        #expect(status == 0, "\(err)")
        #expect(try rows(db, "SELECT count(*) FROM _ingot_rejects") == [["0"]])
        #expect(err.contains("rejected_records=1"))
    }

    /// A 3 MB page of a million `{}`: a million rejections, folded in batches of `batch_records`
    /// like records, so peak memory follows docs/concurrency.md's formula (about 125 MB here for
    /// the debug build's defaults; it took 700 MB when rejections did not count), and 10,000
    /// reject rows are stored.
    @Test func aPageOfAMillionEmptyObjectsStaysWithinTheMemoryBound() throws {
        let dir = temporaryDirectory()
        let yml = try pipeline(dir)
        var page = [UInt8]("[".utf8)
        page.reserveCapacity(3_000_002)
        for k in 0..<1_000_000 { page += k == 0 ? Array("{}".utf8) : Array(",{}".utf8) }
        page.append(UInt8(ascii: "]"))
        try Data(page).write(to: dir.appendingPathComponent("pages/p.json"))
        let db = dir.appendingPathComponent("rj.db").path
        let (exit, peakKB, text) = try peakRSS([CLITests.binary.path, "run", yml, "--db", db, "--no-archive", "--lanes", "2"])
        #expect(exit == 3, "everything was rejected: \(text)")
        #expect(peakKB < 160_000, "peak RSS \(peakKB) KB")
        #expect(text.contains("rejected_records=1000000"))
        #expect(try rows(db, "SELECT count(*) FROM _ingot_rejects") == [["10000"]])
    }

    /// A 2 MB JSON Lines file of a million lines that are not JSON: its rejections go on in parts
    /// of `batch_records`, like records (it peaked at 670 MB, every line's rejection held at once).
    @Test func aMillionLinesThatAreNotJSONStayWithinTheMemoryBound() throws {
        let dir = temporaryDirectory()
        let yml = dir.appendingPathComponent("rj.yml").path
        try itemPipeline("rj", "source: {files: {dir: pages, glob: \"*.jsonl\", format: jsonl}}").write(
            toFile: yml, atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("pages"), withIntermediateDirectories: true)
        try Data(String(repeating: "x\n", count: 1_000_000).utf8).write(to: dir.appendingPathComponent("pages/p.jsonl"))
        let db = dir.appendingPathComponent("rj.db").path
        let (exit, peakKB, text) = try peakRSS([CLITests.binary.path, "run", yml, "--db", db, "--no-archive", "--lanes", "2"])
        #expect(exit == 3, "everything was rejected: \(text)")
        #expect(peakKB < 160_000, "peak RSS \(peakKB) KB")
        #expect(text.contains("rejected_records=1000000"))
        #expect(try rows(db, "SELECT count(*) FROM _ingot_rejects") == [["10000"]])
    }

    /// A `for_each` over 300,000 parent records keeps its requests in a temporary file, their
    /// offsets in memory: the run (whose first request is refused at once: nothing listens on
    /// port 1) peaks at about 94 MB, where holding every request as strings took 151 MB.
    @Test func aForEachsRequestsAreNotHeldInMemory() throws {
        let dir = temporaryDirectory()
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("list"), withIntermediateDirectories: true)
        var page = #"{"results": ["#
        page.reserveCapacity(12_000_000)
        for k in 0..<300_000 { page += (k == 0 ? "" : ", ") + #"{"id": \#(k), "name": "item-\#(k)"}"# }
        page += "]}"
        try Data(page.utf8).write(to: dir.appendingPathComponent("list/list.json"))
        let yml = dir.appendingPathComponent("fe.yml").path
        try """
        version: 1
        name: fe
        defaults: {http: {url: "http://127.0.0.1:1/api/", retry: {attempts: 1, base_delay_ms: 1, max_delay_ms: 1}, timeout_s: 2}}
        resources:
          - {name: list, source: {files: {dir: list, glob: "*.json"}}, records: results}
          - {name: detail, for_each: {resource: list, path: "items/{id}", with: {listed_as: name}}, records: ".", root: item}
        entities:
          item: {identity: id, attributes: {id: integer, listed_as: string}}
        """.write(toFile: yml, atomically: true, encoding: .utf8)
        let db = dir.appendingPathComponent("fe.db").path
        let (exit, peakKB, text) = try peakRSS([CLITests.binary.path, "run", yml, "--db", db, "--no-archive"])
        #expect(exit == 75, "the first request is refused: \(text.suffix(500))")
        #expect(peakKB < 120_000, "peak RSS \(peakKB) KB")
    }

    /// Runs `command` and returns its exit status, its peak RSS in KB (from the kernel: python3's
    /// `RUSAGE_CHILDREN`; python3 is already a test dependency, the fixture server) and the end
    /// of its stderr.
    private func peakRSS(_ command: [String]) throws -> (exit: Int?, peakKB: Int, text: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments =
            [
                "python3", "-c",
                """
                import resource, subprocess, sys
                p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
                sys.stdout.write(p.stderr[-3000:])
                """,
            ] + command
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let first = text.split(separator: "\n").first?.split(separator: " ") ?? []
        return (first.first.flatMap { Int($0) }, first.dropFirst().first.flatMap { Int($0) } ?? .max, text)
    }
}
