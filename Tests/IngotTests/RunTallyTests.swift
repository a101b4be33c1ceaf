import Testing

@testable import Ingot

/// The writer's counts as a value (``RunTally``): what a batch's pages add before their rows are
/// written, the kept values a batch records, and commit and rollback of the open transaction.
@Suite struct RunTallyTests {
    static let yaml = """
        version: 1
        name: tally
        source: {http: {url: "https://api.example.com/items"}}
        root: item
        incremental: {cursor_path: updated_at, param: updated_since}
        entities:
          item: {identity: id, attributes: {id: integer, updated_at: string}}
        """

    func tally() throws -> RunTally {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "tally.yml")
        return RunTally(config: config, layouts: EntityLayout.layouts(of: config.model), initial: RunCounters())
    }

    func page(_ seq: Int, records: Int, part: Int = 0, last: Bool = true, cursor: String? = nil) -> DecodedPage {
        var page = DecodedPage(
            seq: seq, source: "p\(seq)", bytes: 10, records: [], rejections: [], pageRejected: false, recordCount: records)
        page.part = part
        page.isLastPart = last
        page.incrementalMax = cursor
        return page
    }

    /// A page in two parts counts once, when its last part is read; its records count in both.
    @Test func aPageInPartsCountsOnceItsRecordsInEveryPart() throws {
        var tally = try tally()
        let (first, _) = tally.reading([page(1, records: 3, part: 0, last: false)])
        #expect(first.pages == 0 && first.records == 3)
        tally.saved(first, batch: 1, incrementalMax: nil)
        let (second, _) = tally.reading([page(1, records: 2, part: 1, last: true), page(2, records: 4)])
        #expect(second.pages == 2 && second.records == 9)
        #expect(tally.uncommittedRecords == 3, "the second batch is read, not saved")
    }

    /// The cursor is kept when it moved past what was saved, by its bytes, and not again.
    @Test func theCursorIsKeptOnlyWhenItMoves() throws {
        var tally = try tally()
        let (max, kept) = tally.keptValues(after: [page(1, records: 1, cursor: "2024-01-02"), page(2, records: 1, cursor: "2024-01-01")])
        #expect(max == "2024-01-02")
        #expect(kept.map(\.key) == ["incremental:updated_since"] && kept.map(\.value) == ["2024-01-02"])
        tally.saved(RunCounters(), batch: 1, incrementalMax: max)
        #expect(tally.keptValues(after: [page(3, records: 1, cursor: "2024-01-02")]).kept.isEmpty)
        #expect(tally.keptValues(after: [page(3, records: 1, cursor: "2023-12-31")]).max == "2024-01-02")
    }

    /// A commit makes the saved counters the committed ones; a rollback drops what the open
    /// transaction saved.
    @Test func aRollbackDropsWhatTheOpenTransactionSaved() throws {
        var tally = try tally()
        var (next, _) = tally.reading([page(1, records: 5)])
        tally.saved(next, batch: 1, incrementalMax: nil)
        tally.commit()
        #expect(tally.committed.records == 5 && tally.uncommittedRecords == 0 && tally.lastSaved == 1)
        (next, _) = tally.reading([page(2, records: 7)])
        tally.saved(next, batch: 2, incrementalMax: nil)
        #expect(tally.uncommittedRecords == 7)
        tally.rollBack()
        #expect(tally.saved.records == 5 && tally.committed.records == 5)
    }
}
