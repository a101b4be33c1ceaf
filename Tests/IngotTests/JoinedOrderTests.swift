import Foundation
import Testing

@testable import Ingot

/// A unit cut into several batches ends as a single run ends (docs/scale-out.md, "Later pages
/// win, across jobs"): every write of a joined run is ordered by its unit and, within the unit,
/// by the part of it that gave it — not by the unit alone, which two batches of one page share.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct JoinedOrderTests {
    static let yaml = """
        version: 1
        name: changes
        records: results
        root: item
        entities:
          item:
            identity: id
            attributes: {id: integer, status: string, note: string}
            relationships:
              tags: {to: tag, many: true}
          tag:
            identity: name
            attributes: {name: string}
        """

    /// A change log: item 1 created, updated, deleted within one page, its tags replaced each
    /// time (overlapping sets), item 2 changed on both pages.
    static let pages = [
        #"""
        {"results": [
          {"id": 1, "status": "created", "tags": ["a", "b"]}, {"id": 2, "status": "x"},
          {"id": 1, "status": "updated", "tags": ["b", "c"]}, {"id": 3, "note": "three"},
          {"id": 2, "status": "y", "tags": ["c", "d"]}, {"id": 1, "status": "deleted", "tags": ["d"]},
          {"id": 4}, {"id": 1, "note": "last"}, {"id": 2, "tags": []}
        ]}
        """#,
        #"{"results": [{"id": 2, "status": "z"}, {"id": 3, "tags": ["a"]}]}"#,
    ]

    @Test(
        .hangGuard,
        arguments: JoinBackend.allCases,
        [
            (1, Loading.batchByBatch), (2, .batchByBatch), (7, .batchByBatch), (1, .staged), (2, .staged), (7, .staged), (2, .automatic()),
            (7, .automatic()),
        ])
    func aUnitCutIntoBatchesEndsAsASingleRunEnds(backend: JoinBackend, cut: (batchRecords: Int, loading: Loading)) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "changes.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let options = JoinTests.options(database, join: "changes", batchRecords: cut.batchRecords, loading: cut.loading)
        let joined = database.run(
            PipelineRunner(config: config, options: options, logger: LogCapture().logger), MemoryPageSource(Self.pages))
        #expect(joined.status == .finished, "\(joined.error ?? "")")
        let (single, db) = try ingest(Self.yaml, Self.pages)
        #expect(single.status == .finished)
        let expected = try database.sqlite(db)
        #expect(expected["item"]?.contains { $0.contains("deleted") && $0.contains("last") } == true, "\(expected)")
        let dump = try database.dump()
        let differing = Set(dump.keys).union(expected.keys).filter { dump[$0] != expected[$0] }.sorted()
        #expect(dump == expected, "\(differing.map { "\($0): joined \(dump[$0] ?? []) single \(expected[$0] ?? [])" })")
    }

    /// The rule every store that shares runs applies (``WritePositions``): a write replaces a
    /// stored slot when it is not older; a write that gives nothing replaces nothing; a slot a
    /// single run wrote (no position) loses to every unit; a later join wins over any unit of an
    /// earlier one.
    @Test func aWriteWinsWhereItIsNotOlder() {
        let (early, late) = (
            UnitOrder.position(ordinal: 3, key: UnitOrder.key(seq: 2, part: 1)),
            UnitOrder.position(ordinal: 3, key: UnitOrder.key(seq: 2, part: 2))
        )
        #expect(WritePositions.wins(late, over: early) && !WritePositions.wins(early, over: late))
        #expect(WritePositions.wins(late, over: late), "the same part again: its later batch")
        #expect(WritePositions.wins(early, over: nil) && !WritePositions.wins(nil, over: nil))
        let nextJoin = UnitOrder.position(ordinal: 4, key: UnitOrder.key(seq: 1, part: 0))
        #expect(WritePositions.wins(nextJoin, over: UnitOrder.position(ordinal: 3, key: UnitOrder.lastKey(seq: UnitOrder.lastSeq))))
    }

    /// A store that keeps rows in memory applies the rule by ``WritePositions/apply(over:)``: the
    /// columns and sets the write does not lose take its values and positions, a slot it gives
    /// nothing for keeps its own, and `@` only grows.
    @Test func aWriteTakesTheSlotsItDoesNotLose() {
        let (early, late) = (
            UnitOrder.position(ordinal: 3, key: UnitOrder.key(seq: 2, part: 1)),
            UnitOrder.position(ordinal: 3, key: UnitOrder.key(seq: 5, part: 0))
        )
        // Three columns, one set, `@`: two columns and the set stored by the later unit, one
        // column by a single run (0).
        var stored: [Int64] = [late, 0, late, late, late]
        let write = WritePositions(columns: [early, early, nil], sets: [late], touched: early)
        let taken = write.apply(over: &stored)
        #expect(taken.columns == [1] && taken.sets == [0], "the older unit loses where the later one wrote")
        #expect(stored == [late, early, late, late, late], "`@` stays the later unit's")
        var unwritten: [Int64] = [0, 0, 0, 0, 0]
        let all = WritePositions(columns: [early, nil, early], sets: [nil], touched: early).apply(over: &unwritten)
        #expect(all.columns == [0, 2] && all.sets.isEmpty && unwritten == [early, 0, early, 0, early])
    }
}
