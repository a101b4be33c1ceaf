import Foundation
import Testing

@testable import Ingot

/// Rejects are bounded like everything else (docs/reliability.md, hostile input): they count toward a
/// batch's record and byte bounds (`PartsTests`), `_ingot_rejects` keeps at most `--max-reject-rows`
/// rows per run, the rest only counted, and a record is rejected past `--max-record-rows`. The
/// peak memory of a million rejections is measured by `make bench`'s `bounds` case, not here.
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

    /// A record past `--max-record-rows` rows and links (each owned child is a row and a link)
    /// is rejected as too large where it passes the limit, before it takes more memory, and the
    /// run goes on with the next record. The memory bound of a record of a million children
    /// (and of a million bare identities) is `make bench`'s `bounds` case.
    @Test func aRecordPastMaxRecordRowsIsRejectedWhereItPassesIt() throws {
        let dir = temporaryDirectory()
        let yml = try ownerPipeline(dir)
        var page = bigPage(records: 1, key: "children", count: 5000) { "{\"n\":\($0)}" }
        page.removeLast()  // then one small owner after it
        page += Data(#",{"id":2,"children":[{"n":1}],"tags":[7]}]"#.utf8)
        try page.write(to: dir.appendingPathComponent("pages/p.json"))
        let db = dir.appendingPathComponent("big.db").path
        let (status, _, err) = try runIngot(["run", yml, "--db", db, "--no-archive", "--max-record-rows", "1000"])
        #expect(status == 0, "\(err.suffix(800))")
        #expect(try rows(db, "SELECT count(*) FROM owner") == [["1"]])
        #expect(try rows(db, "SELECT count(*) FROM child") == [["1"]])
        #expect(
            try rows(db, "SELECT reason, coding_path FROM _ingot_rejects")
                == [
                    [
                        "the record makes more than 1000 rows and links (--max-record-rows); split it at the source or raise the limit",
                        "[0].children[499]",
                    ]
                ])
    }

    /// The same for bare identities in one to-many: each is a link.
    @Test func bareIdentitiesCountTowardMaxRecordRows() throws {
        let dir = temporaryDirectory()
        let yml = try ownerPipeline(dir)
        try bigPage(records: 1, key: "tags", count: 1000) { "\($0)" }.write(to: dir.appendingPathComponent("pages/p.json"))
        let db = dir.appendingPathComponent("big.db").path
        let (status, _, err) = try runIngot(["run", yml, "--db", db, "--no-archive", "--max-record-rows", "10"])
        #expect(status == 3, "everything was rejected: \(err.suffix(800))")
        #expect(try rows(db, "SELECT coding_path FROM _ingot_rejects") == [["[0].tags[9]"]])
    }
}
