import Foundation
import Testing

@testable import Ingot

/// Rejects are bounded like everything else (docs/reliability.md, hostile input): they count toward a
/// batch's record and byte bounds, and `_ingot_rejects` keeps at most `--max-reject-rows` rows
/// per run, the rest only counted.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct RejectBoundsTests {
    /// A pipeline of `item {id, name}` read from `dir`.
    func pipeline(_ dir: URL) throws -> String {
        let yml = dir.appendingPathComponent("rj.yml").path
        try itemPipeline("rj", "source: {files: {dir: pages}}").write(toFile: yml, atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("pages"), withIntermediateDirectories: true)
        return yml
    }

    @Test func pastMaxRejectRowsRejectionsAreCountedNotStored() throws {
        let dir = temporaryDirectory()
        let yml = try pipeline(dir)
        // 100 records without identity around 10 good ones, in two pages.
        let bad = Array(repeating: "{\"name\":\"x\"}", count: 50).joined(separator: ",")
        let good = (1...5).map { "{\"id\":\($0)}" }.joined(separator: ",")
        try "[\(bad),\(good)]".write(to: dir.appendingPathComponent("pages/p1.json"), atomically: false, encoding: .utf8)
        let good2 = (11...15).map { "{\"id\":\($0)}" }.joined(separator: ",")
        try "[\(good2),\(bad)]".write(to: dir.appendingPathComponent("pages/p2.json"), atomically: false, encoding: .utf8)
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
        try "[{\"name\":\"x\"},{\"id\":1}]".write(to: dir.appendingPathComponent("pages/p1.json"), atomically: false, encoding: .utf8)
        let db = dir.appendingPathComponent("rj.db").path
        let (status, _, err) = try runIngot(["run", yml, "--db", db, "--no-archive"], environment: ["INGOT_MAX_REJECT_ROWS": "0"])
        #expect(status == 0, "\(err)")
        #expect(try rows(db, "SELECT count(*) FROM _ingot_rejects") == [["0"]])
        #expect(err.contains("rejected_records=1"))
    }

    /// How many records the two tests below reject: enough that holding every rejection at once
    /// (700 MB for a million, before rejections counted toward a batch's bounds) would pass the
    /// bound by more than half, few enough that the debug build's run takes seconds (a million
    /// took 12 CPU-seconds). docs/reliability.md gives the figures for a million.
    static let rejected = 400_000

    /// A 1.2 MB page of 400,000 `{}`: every one a rejection, folded in batches of `batch_records`
    /// like records, so peak memory follows docs/concurrency.md's formula (well under the bound
    /// for the debug build's defaults), and 10,000 reject rows are stored.
    @Test func aPageOfEmptyObjectsStaysWithinTheMemoryBound() throws {
        let dir = temporaryDirectory()
        let yml = try pipeline(dir)
        var page = [UInt8]("[".utf8)
        page.reserveCapacity(3 * Self.rejected + 2)
        for k in 0..<Self.rejected { page += k == 0 ? Array("{}".utf8) : Array(",{}".utf8) }
        page.append(UInt8(ascii: "]"))
        try Data(page).write(to: dir.appendingPathComponent("pages/p.json"))
        try expectAllRejectedWithinTheBound(yml, dir)
    }

    /// `ingot run yml` in `dir` rejects every one of ``rejected`` records, keeps the first 10,000
    /// rejects, and peaks under 160 MB.
    private func expectAllRejectedWithinTheBound(_ yml: String, _ dir: URL) throws {
        let db = dir.appendingPathComponent("rj.db").path
        let (exit, peakKB, text) = try peakRSS([CLITests.binary.path, "run", yml, "--db", db, "--no-archive", "--lanes", "2"])
        #expect(exit == 3, "everything was rejected: \(text)")
        #expect(peakKB < 160_000, "peak RSS \(peakKB) KB")
        #expect(text.contains("rejected_records=\(Self.rejected)"))
        #expect(try rows(db, "SELECT count(*) FROM _ingot_rejects") == [["10000"]])
    }

    /// A JSON Lines file of 400,000 lines that are not JSON: its rejections go on in parts of
    /// `batch_records`, like records (a million peaked at 670 MB, every line's rejection held at
    /// once).
    @Test func linesThatAreNotJSONStayWithinTheMemoryBound() throws {
        let dir = temporaryDirectory()
        let yml = dir.appendingPathComponent("rj.yml").path
        try itemPipeline("rj", "source: {files: {dir: pages, glob: \"*.jsonl\", format: jsonl}}").write(
            toFile: yml, atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("pages"), withIntermediateDirectories: true)
        try Data(String(repeating: "x\n", count: Self.rejected).utf8).write(to: dir.appendingPathComponent("pages/p.jsonl"))
        try expectAllRejectedWithinTheBound(yml, dir)
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
        """.write(toFile: yml, atomically: false, encoding: .utf8)
        let db = dir.appendingPathComponent("fe.db").path
        let (exit, peakKB, text) = try peakRSS([CLITests.binary.path, "run", yml, "--db", db, "--no-archive"])
        #expect(exit == 75, "the first request is refused: \(text.suffix(500))")
        #expect(peakKB < 120_000, "peak RSS \(peakKB) KB")
    }

    /// A pipeline of owners (`id`) with owned children (`n`) and tags given as bare identities,
    /// read from `dir/pages`.
    func ownerPipeline(_ dir: URL) throws -> String {
        let yml = dir.appendingPathComponent("big.yml").path
        try """
        version: 1
        name: big
        source: {files: {dir: pages}}
        root: owner
        entities:
          owner:
            identity: id
            attributes: {id: integer}
            relationships:
              children: {to: child, many: true, owned: true}
              tags: {to: tag, many: true}
          child: {attributes: {n: integer}}
          tag: {identity: id, attributes: {id: integer}}
        """.write(toFile: yml, atomically: false, encoding: .utf8)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("pages"), withIntermediateDirectories: true)
        return yml
    }

    /// `[{"id": first, "KEY": [ELEMENT(0), ELEMENT(1), …]}, …]`: `records` owners of `count`
    /// elements each.
    func bigPage(records: Int, first: Int = 1, key: String, count: Int, element: (Int) -> String) -> Data {
        var page = [UInt8]("[".utf8)
        for r in 0..<records {
            page += Array((r == 0 ? "" : ",").utf8) + Array("{\"id\":\(first + r),\"\(key)\":[".utf8)
            for k in 0..<count { page += Array(((k == 0 ? "" : ",") + element(k)).utf8) }
            page += Array("]}".utf8)
        }
        page += Array("]".utf8)
        return Data(page)
    }

    /// One record holding a million owned children (11 MB) is rejected as too large once it
    /// passes `--max-record-rows` rows and links (each child is a row and a link), before it
    /// takes more memory: the run goes on with the next record. Held whole, such a record took
    /// about 570 bytes per child (1.72 GB for three million).
    @Test func aRecordWithAMillionOwnedChildrenIsRejectedWithinTheMemoryBound() throws {
        let dir = temporaryDirectory()
        let yml = try ownerPipeline(dir)
        var page = bigPage(records: 1, key: "children", count: 1_000_000) { "{\"n\":\($0)}" }
        page.removeLast()  // then one small owner after it
        page += Data(#",{"id":2,"children":[{"n":1}],"tags":[7]}]"#.utf8)
        try page.write(to: dir.appendingPathComponent("pages/p.json"))
        let db = dir.appendingPathComponent("big.db").path
        let (exit, peakKB, text) = try peakRSS([CLITests.binary.path, "run", yml, "--db", db, "--no-archive", "--lanes", "2"])
        #expect(exit == 0, "\(text.suffix(800))")
        #expect(peakKB < 160_000, "peak RSS \(peakKB) KB")
        #expect(try rows(db, "SELECT count(*) FROM owner") == [["1"]])
        #expect(try rows(db, "SELECT count(*) FROM child") == [["1"]])
        #expect(
            try rows(db, "SELECT reason, coding_path FROM _ingot_rejects")
                == [
                    [
                        "the record makes more than 100000 rows and links (--max-record-rows); split it at the source or raise the limit",
                        "[0].children[49999]",
                    ]
                ])
    }

    /// The same for a million bare identities in one to-many (6.9 MB): each is a link, rejected
    /// at the limit; a lower `--max-record-rows` rejects sooner.
    @Test func aRecordWithAMillionBareIdentitiesIsRejectedWithinTheMemoryBound() throws {
        let dir = temporaryDirectory()
        let yml = try ownerPipeline(dir)
        try bigPage(records: 1, key: "tags", count: 1_000_000) { "\($0)" }.write(to: dir.appendingPathComponent("pages/p.json"))
        let db = dir.appendingPathComponent("big.db").path
        let (exit, peakKB, text) = try peakRSS([CLITests.binary.path, "run", yml, "--db", db, "--no-archive", "--lanes", "2"])
        #expect(exit == 3, "everything was rejected: \(text.suffix(800))")
        #expect(peakKB < 160_000, "peak RSS \(peakKB) KB")
        #expect(try rows(db, "SELECT count(*), min(coding_path) FROM _ingot_rejects") == [["1", "[0].tags[99999]"]])
        let small = dir.appendingPathComponent("small.db").path
        let (status, _, err) = try runIngot(["run", yml, "--db", small, "--no-archive", "--max-record-rows", "10"])
        #expect(status == 3, "\(err)")
        #expect(try rows(small, "SELECT coding_path FROM _ingot_rejects") == [["[0].tags[9]"]])
    }

    /// 500 owners of a thousand children each, in one 5 MB page: every record is within the
    /// limit, and the page goes on in parts of about `batch_records × 8` rows and links instead
    /// of parts of `batch_records` records (here, the whole page: half a million rows at once,
    /// which peaked at 424 MB in the debug build; in parts, 217 to 248 MB, most of it SQLite's
    /// page cache and the parsed page).
    @Test func recordsWithBigArraysMakeSmallerParts() throws {
        let dir = temporaryDirectory()
        let yml = try ownerPipeline(dir)
        try bigPage(records: 500, key: "children", count: 1000) { "{\"n\":\($0)}" }.write(to: dir.appendingPathComponent("pages/p.json"))
        let db = dir.appendingPathComponent("big.db").path
        let (exit, peakKB, text) = try peakRSS([CLITests.binary.path, "run", yml, "--db", db, "--no-archive", "--lanes", "2", "--no-bulk"])
        #expect(exit == 0, "\(text.suffix(800))")
        #expect(peakKB < 320_000, "peak RSS \(peakKB) KB")
        #expect(try rows(db, "SELECT count(*), count(DISTINCT owner_id), sum(n) FROM child") == [["500000", "500", "\(500 * 999 * 500)"]])
    }

    /// Runs `command` and returns its exit status, its peak RSS in KB (from the kernel: python3's
    /// `RUSAGE_CHILDREN`; python3 is already a test dependency, the fixture server) and the end
    /// of its stderr.
    private func peakRSS(_ command: [String]) throws -> (exit: Int?, peakKB: Int, text: String) {
        let process = Process()
        process.executableURL = python3
        process.arguments =
            [
                "-c",
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
