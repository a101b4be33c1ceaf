import Foundation
import Logging

/// The end of a staged load (`--bulk`, or a load staged from its first batch or turned staged):
/// the staged rows merged into the tables, counted as the merge wrote them.
extension WriterStage {
    /// A staged load (`--bulk`): the staged rows merged into the tables in the run's last
    /// transaction, and counted (`inserted`, `stubs`, `updated`, `unchanged`) as the merge wrote them.
    func mergeStaged() {
        let clock = ContinuousClock()
        let started = clock.now
        // The merge sorts and writes the whole load: progress lines stop meanwhile, so say it.
        logger.info("bulk.merging", metadata: [LogKey.records: .int(tally.saved.records)])
        defer { publishLoad() }
        do {
            var merged = Array(repeating: EntityCounts(), count: model.entities.count)
            var rows = 0
            var refusals: [RecordRejection] = []
            let result = try store.mergeStaged(
                fills: resolver.fills,
                stored: { entity, identity, changed in
                    if changed { rows += 1 }
                    if merged.indices.contains(entity) { tally.countStored(entity, identity, changed: changed, into: &merged[entity]) }
                },
                refused: { entity, identity, reason, record in
                    refusals.append(mergeRefusal(entity, identity, reason, record))
                })
            if !refusals.isEmpty {
                logger.warning(
                    "bulk.refused",
                    metadata: [
                        "rows": .int(refusals.count),
                        LogKey.reason: "the database refused rows of the staged merge: each is rejected naming its record, the rest merged",
                    ])
                try recordMergeRefusals(refusals)
            }
            stagedPages = [:]
            if result.retries > 0 {
                logger.warning("batch.retried", metadata: [LogKey.reason: "deadlock", "attempts": .int(result.retries + 1)])
            }
            rows += tally.addMerged(result.counts ?? [], stored: merged)
            if unitTransactions {
                // A joined job's counters.
                try store.recordProgress(
                    RunProgress(runID: runID, counters: tally.saved, lastSeq: nil, resumeState: nil, rejections: [], kept: []))
            }
            let elapsed = clock.now - started
            loaded.merged(rows: rows)
            logger.info(
                "bulk.merged",
                metadata: [
                    "rows": .int(rows),
                    "merge_s": .seconds(elapsed.inSeconds),
                    // How the merge read each entity's staged rows (StagedReadPlan).
                    "reads": "\(result.reads.joined(separator: "; "))",
                ])
        } catch {
            logger.error("batch.failed", metadata: [LogKey.error: "\(error)", LogKey.seq: .int(0)])
            try? store.rollback()
            tally.rollBack()
            fail(error)
        }
    }

    /// The rejection of a row the staged load's merge could not write: it names the record that
    /// gave the row last (its page, coding path and archive entry; the row merges every record of
    /// its identity), with the database's message. A record staged by an earlier process (a
    /// resumed load) is named by its page's seq.
    private func mergeRefusal(
        _ entity: Int, _ identity: IdentityKey, _ reason: String, _ record: (seq: Int, index: Int)?
    ) -> RecordRejection {
        let name = model.entities.indices.contains(entity) ? model.entities[entity].name : "?"
        let page = record.flatMap { stagedPages[$0.seq] }
        var rejection = RecordRejection(
            entity: name, codingPath: record.map { recordsPath + "[\($0.index)]" } ?? "",
            reason:
                "the database refused the row merged from this and the earlier records of \(name) \(String("\(identity)".prefix(100))): \(reason.prefix(500))",
            source: page?.source ?? record.map { "page \($0.seq) of the run" } ?? "the staged load's merge", recordIndex: record?.index,
            raw: "", code: .unstorable)
        rejection.archive = page?.archive
        return rejection
    }

    /// Counts, stores and logs rows a staged merge refused, as rejected records (the records
    /// that made a row are not known any more: they were folded into it), in the merge's
    /// transaction.
    func recordMergeRefusals(_ refusals: [RecordRejection]) throws {
        prints.drop("the staged merge refused rows after their pages' prints were kept")
        tally.addRefused(refusals)
        let stored = rejections.storable(refusals)
        rejections.stored(refusals.count)
        try store.recordProgress(RunProgress(runID: runID, counters: tally.saved, lastSeq: nil, resumeState: nil, rejections: stored))
        rejections.log(refusals)
    }
}
