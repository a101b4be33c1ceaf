import Foundation
import Testing

@testable import Ingot

private let yaml = """
    version: 1
    name: parts
    records: results
    root: person
    entities:
      person:
        identity: id
        attributes: {id: integer, name: string, n: integer}
        relationships:
          dogs: {to: dog, many: true}
      dog:
        identity: id
        attributes: {id: integer, name: string}
    """

/// A big page is decoded in parts of a batch's size; the database and the counters must be the
/// same as with the page whole.
struct PartsTests {
    /// Pages of 10 records with repeats across and within pages, nested and bare dogs, and a bad
    /// record in each page.
    private var pages: [String] {
        (0..<6).map { p in
            let records = (0..<10).map { k -> String in
                let id = (p * 7 + k) % 23
                if k == 4 { return #"{"id": "bad \#(p)"}"# }
                return
                    #"{"id": \#(id), "name": "p\#(p)k\#(k)", "n": \#(p * 10 + k), "dogs": [{"id": \#(id % 5), "name": "d\#(p)"}, \#(id % 3 + 10)]}"#
            }
            return #"{"results": [\#(records.joined(separator: ","))]}"#
        }
    }

    private let content = [
        "SELECT id, name, n FROM person ORDER BY id",
        "SELECT id, name FROM dog ORDER BY id",
        "SELECT person_id, dog_id FROM person_dogs ORDER BY 1, 2",
        "SELECT coding_path, record_index FROM _ingot_rejects ORDER BY rowid",
        "SELECT pages, records, inserted, rejected_records, rejected_pages, last_seq, status FROM _ingot_runs",
    ]

    /// A part also ends at its records' rows and links (8 × the batch's records): each record
    /// is still counted once, in the part that holds it, and so is each resource's share.
    @Test func partsThatEndByTheirRowsCountEachRecordOnce() throws {
        let records = (0..<10).map { k in
            #"{"id": \#(k), "dogs": [\#((0..<20).map { String(100 * k + $0) }.joined(separator: ", "))]}"#
        }
        let page = #"{"results": [\#(records.joined(separator: ","))]}"#
        let (whole, _) = try ingest(yaml, [page])
        let (parts, _) = try ingest(yaml, [page], batchRecords: 5)
        #expect(whole.counters.records == 10)
        #expect(parts.counters.records == 10 && parts.counters.pages == 1, "\(parts.counters.records)")
    }

    @Test(arguments: [1, 2, 3, 7])
    func aPageInPartsGivesTheSameDatabaseAsThePageWhole(partRecords: Int) throws {
        let (wholeSummary, whole) = try ingest(yaml, pages, lanes: 2, batchRecords: 1000)
        let (partsSummary, parts) = try ingest(yaml, pages, lanes: 2, batchRecords: partRecords, commitRecords: 4)
        for sql in content {
            #expect(try rows(parts, sql) == rows(whole, sql), "\(sql)")
        }
        // `updated` counts rows rewritten per batch, so it grows with smaller batches; the rest match.
        var counters = partsSummary.counters
        counters.updated = wholeSummary.counters.updated
        for (name, whole) in wholeSummary.counters.entities { counters.entities[name]?.updated = whole.updated }
        #expect(counters == wholeSummary.counters)
        #expect(partsSummary.counters.pages == 6)
        #expect(partsSummary.counters.records == 60)
        #expect(partsSummary.counters.rejectedRecords == 6)
    }

    @Test func theMapperHandsOnPartsInOrderWithTheLastOneCompletingThePage() throws {
        let bytes = Array(pages[0].utf8)
        let parts = try mapped(yaml, bytes, partRecords: 3)
        #expect(parts.map(\.part) == [0, 1, 2, 3])
        #expect(parts.map(\.recordCount) == [3, 3, 3, 1])
        #expect(parts.map(\.isLastPart) == [false, false, false, true])
        #expect(parts.map(\.pageBytes) == [0, 0, 0, bytes.count])
        #expect(parts.map(\.bytes).reduce(0, +) == bytes.count, "the parts' spans cover the page")
        #expect(parts.flatMap { $0.records.map(\.index) } == [0, 1, 2, 3, 5, 6, 7, 8, 9])
        #expect(parts[1].rejections.map(\.recordIndex) == [4])
    }

    /// The parts `page` is mapped into by the pipeline `text`, at `partRecords`.
    private func mapped(_ text: String, _ page: [UInt8], partRecords: Int) throws -> [DecodedPage] {
        let config = try PipelineConfig.parse(text: text, path: "p.yml")
        var mapper = RecordMapper(plan: MappingPlan(model: config.model, root: config.root, framing: config.framing))
        var parts: [DecodedPage] = []
        mapper.map(bytes: page, seq: 1, source: "p", partRecords: partRecords) { parts.append($0) }
        return parts
    }

    private let items = """
        version: 1
        name: items
        root: item
        entities:
          item: {identity: id, attributes: {id: integer}}
        """

    /// Rejections count toward a part's records like records do, so a page of nothing but
    /// rejections (`{}`: no identity) goes on in parts of `partRecords`, never held whole: the
    /// memory bound of a page of a million of them is `make bench`'s `bounds` case.
    @Test func rejectionsGoOnInPartsLikeRecords() throws {
        let page = Array(("[" + Array(repeating: "{}", count: 1000).joined(separator: ",") + "]").utf8)
        let parts = try mapped(items, page, partRecords: 100)
        #expect(parts.count == 10)
        #expect(parts.allSatisfy { $0.rejections.count == 100 && $0.records.isEmpty })
        #expect(parts.flatMap { $0.rejections.map(\.recordIndex) } == (0..<1000).map { $0 })
        #expect(parts.map(\.isLastPart) == Array(repeating: false, count: 9) + [true])
    }

    /// The same for JSON Lines whose lines are not JSON: each line's rejection is a record's.
    @Test func linesThatAreNotJSONGoOnInParts() throws {
        let jsonl = items + "\nsource: {files: {dir: pages, format: jsonl}}\n"
        let parts = try mapped(jsonl, Array(String(repeating: "x\n", count: 1000).utf8), partRecords: 100)
        #expect(parts.count == 10)
        #expect(parts.allSatisfy { $0.rejections.count == 100 })
        #expect(parts.flatMap(\.rejections).allSatisfy { $0.code == .notJSON })
    }

    /// A part also ends at `partRecords × rowsPerRecord` rows and links: records of a hundred
    /// owned children (201 rows and links each) go one to a part where ten would fit by count.
    @Test func recordsWithBigArraysMakeSmallerParts() throws {
        let owners = """
            version: 1
            name: owners
            root: owner
            entities:
              owner:
                identity: id
                attributes: {id: integer}
                relationships: {children: {to: child, many: true, owned: true}}
              child: {attributes: {n: integer}}
            """
        let records = (0..<30).map { r in #"{"id":\#(r),"children":[\#((0..<100).map { #"{"n":\#($0)}"# }.joined(separator: ","))]}"# }
        let page = Array(("[" + records.joined(separator: ",") + "]").utf8)
        let parts = try mapped(owners, page, partRecords: 10)
        #expect(parts.count == 30)
        #expect(parts.allSatisfy { $0.records.count == 1 && $0.cost == 201 }, "\(parts.map(\.cost))")
        let whole = try mapped(owners, page, partRecords: 1000)
        #expect(whole.count == 1 && whole[0].records.count == 30)
    }
}
