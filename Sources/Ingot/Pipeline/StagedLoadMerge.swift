import Logging

/// The end of a staged load (`--bulk`, or a load staged from its first batch or turned staged):
/// the staged rows merged into the tables (``IngestStore/mergeStaged(fills:stored:refused:)``),
/// counted as the merge wrote them, each row the database refuses rejected naming the record
/// that gave it last. Keeps, meanwhile, where the staged pages came from. A value the
/// ``WriterStage`` owns and uses on its queue.
struct StagedLoadMerge {
    /// What one merge wrote.
    struct Report {
        /// Per entity (by index): the rows inserted and the stubs among them, as the store counts.
        let written: WriteResult
        /// Per entity (by index): the stored rows the records mentioned, as the run counts them.
        let stored: [EntityCounts]
        /// Rows the merge changed among those the records mentioned.
        let changedRows: Int
        /// The rows the database refused, as rejected records.
        let refusals: [RecordRejection]
        /// How long the merge took.
        let seconds: Double
    }

    private let model: EntityModel
    /// Where the records are in a page, for the coding path of a refused row's record.
    private let recordsPath: String
    /// The pages of the batches staged since the last merge, by seq: where a record a merge
    /// refuses came from (its source and archive entry).
    private var pages: [Int: (source: String, archive: ArchiveLocation?)] = [:]

    init(model: EntityModel, recordsPath: String) {
        self.model = model
        self.recordsPath = recordsPath
    }

    /// Notes the pages of a staged batch (a page in parts by its first).
    mutating func staged(_ batch: [DecodedPage]) {
        for page in batch where page.part == 0 { pages[page.seq] = (page.source, page.archive) }
    }

    /// Merges the staged rows into the tables in `store`'s open transaction, `fills` as inserts
    /// fill them, counting each stored row with `tally`; says so (`bulk.merging`: progress lines
    /// stop meanwhile), and what it met (`batch.retried`, `bulk.refused`).
    mutating func run(
        on store: any IngestStore, fills: [[(slot: Int, value: ScalarValue, always: Bool)]], tally: inout RunTally, logger: Logger
    ) throws -> Report {
        logger.info("bulk.merging", metadata: [LogKey.records: .int(tally.saved.records)])
        let started = ContinuousClock.now
        var stored = Array(repeating: EntityCounts(), count: model.entities.count)
        var changed = 0
        var refusals: [RecordRejection] = []
        let written = try store.mergeStaged(
            fills: fills,
            stored: { entity, identity, isChanged in
                if isChanged { changed += 1 }
                if stored.indices.contains(entity) { tally.countStored(entity, identity, changed: isChanged, into: &stored[entity]) }
            },
            refused: { entity, identity, reason, record in refusals.append(refusal(entity, identity, reason, record)) })
        pages = [:]
        if written.retries > 0 {
            logger.warning("batch.retried", metadata: [LogKey.reason: "deadlock", "attempts": .int(written.retries + 1)])
        }
        if !refusals.isEmpty {
            logger.warning(
                "bulk.refused",
                metadata: [
                    "rows": .int(refusals.count),
                    LogKey.reason: "the database refused rows of the staged merge: each is rejected naming its record, the rest merged",
                ])
        }
        return Report(
            written: written, stored: stored, changedRows: changed, refusals: refusals, seconds: (ContinuousClock.now - started).inSeconds)
    }

    /// Says what the last merge wrote, `rows` rows in all (`bulk.merged`, with how it read each
    /// entity's staged rows: ``StagedReadPlan``).
    func log(_ report: Report, rows: Int, logger: Logger) {
        logger.info(
            "bulk.merged",
            metadata: [
                "rows": .int(rows), "merge_s": .seconds(report.seconds), "reads": "\(report.written.reads.joined(separator: "; "))",
            ])
    }

    /// The rejection of a row the merge could not write: it names the record that gave the row
    /// last (its page, coding path and archive entry; the row merges every record of its
    /// identity), with the database's message. A record staged by an earlier process (a resumed
    /// load) is named by its page's seq.
    private func refusal(
        _ entity: Int, _ identity: IdentityKey, _ reason: String, _ record: (seq: Int, index: Int)?
    ) -> RecordRejection {
        let name = model.entities.indices.contains(entity) ? model.entities[entity].name : "?"
        let page = record.flatMap { pages[$0.seq] }
        var rejection = RecordRejection(
            entity: name, codingPath: record.map { recordsPath + "[\($0.index)]" } ?? "",
            reason:
                "the database refused the row merged from this and the earlier records of \(name) \(String("\(identity)".prefix(100))): \(reason.prefix(500))",
            source: page?.source ?? record.map { "page \($0.seq) of the run" } ?? "the staged load's merge", recordIndex: record?.index,
            raw: "", code: .unstorable)
        rejection.archive = page?.archive
        return rejection
    }
}
