import Dispatch
import Foundation
import Logging

/// Saving one batch, step by step: its pages' counters, the kept values, staging from a first
/// batch, the write with its progress, what replace and cascades need, a failed save, the commit
/// when it is due.
extension WriterStage {
    /// Saves a batch: rows, links, rejections and counters, in the open transaction; commits when
    /// the transaction is big or old enough. Does nothing once the run has failed.
    func save(_ batch: PreparedBatch) {
        dispatchPrecondition(condition: .onQueue(queue))
        let pages = batch.pages
        guard case .writing = phase, !pages.isEmpty else { return }
        var (next, rejections) = tally.reading(pages)
        let (newMax, state) = tally.keptValues(after: pages)
        let seen = replace.scopeValues(of: batch)
        // Only a whole page moves the resume point: a crash after part of a page was committed
        // redoes the whole page (re-applying its first parts is harmless).
        func progress(_ outcome: BatchOutcome) -> RunProgress {
            var committed = next
            committed.add(outcome, model: model)
            var made = RunProgress(
                runID: runID, counters: committed, lastSeq: pages.last { $0.isLastPart }?.seq,
                resumeState: pages.last { $0.isLastPart && $0.resumeState != nil }?.resumeState,
                rejections: self.rejections.storable(rejections + outcome.rejections), kept: state)
            // A joined job's units carry the scope values the run's end deletes within.
            if unitTransactions { made.scopeValues = seen }
            return made
        }
        do {
            try stageFromFirstBatchIfDue(batch, records: next.records - tally.saved.records)
            let (resolved, outcome) = try write(batch, progress: progress)
            replace.note(resolved, scopeValues: seen)
            next.add(outcome, model: model)
            rejections += outcome.rejections
            prints.keep(pages, refused: !outcome.rejections.isEmpty)
            tally.saved(next, batch: batch.number, incrementalMax: newMax)
            if load == .staging {
                for page in pages where page.part == 0 { stagedPages[page.seq] = (page.source, page.archive) }
            }
            self.rejections.stored(rejections.count)
            self.rejections.log(rejections)
        } catch {
            saveFailed(batch, error)
            return
        }
        // A batch whose tombstones deleted rows is committed at once: the next batch's lookups
        // read what is committed, and must not find the deleted rows (BatchAssembler waits).
        if pages.contains(where: { !$0.deletions.isEmpty }) { commit() } else { commitIfDue(pages) }
    }

    /// A first batch the writer offers (``LoadPlan/stagesFirstBatch(records:inIdentityOrder:)``: a
    /// full one whose records came in no identity order): the store stages the load from it when it may, into
    /// empty tables (``IngestStore/turnStaged(at:)``, ``StagingMoment/firstBatch``).
    private func stageFromFirstBatchIfDue(_ batch: PreparedBatch, records: Int) throws {
        guard batch.number == 1, LoadPlan.stagesFirstBatch(records: records, inIdentityOrder: batch.arrivedInIdentityOrder) else { return }
        let before = load
        guard before != .staging else { return }
        switch try store.turnStaged(at: .firstBatch) {
        case .staging:
            publishLoad()
            if load == .staging { logger.info("bulk.started", metadata: [LogKey.records: .int(tally.saved.records)]) }
        case .declined(let reason) where before != .declined(reason):
            // A store that could not stage says why (a staging file it could not make).
            logger.notice("bulk.declined", metadata: [LogKey.reason: "\(reason)"])
        case .declined, .batchByBatch: break
        }
    }

    /// Resolves and writes `batch` with its progress, in the open transaction; a batch the
    /// database refuses a value of is written record by record (WriterStage+Refused.swift).
    private func write(
        _ batch: PreparedBatch, progress: (BatchOutcome) -> RunProgress
    ) throws -> (ResolvedBatch, BatchOutcome) {
        var batch = batch
        if redo.refusedInTransaction { batch.refs = nil }
        let resolved: ResolvedBatch
        do {
            resolved = try resolver.resolve(batch, store: store, staging: resolvesForStage)
        } catch {
            try? store.rollback()
            throw error
        }
        var outcome = resolved.outcome
        var recorded: RunProgress?
        var retries = 0
        do {
            try store.write(resolved) { result in
                tally.count(resolved, result, into: &outcome)
                retries = result.retries
                let made = progress(outcome)
                try store.recordProgress(made)
                recorded = made
            }
            // Tombstones delete their rows after the batch's writes, in its transaction; the
            // progress is recorded again with them counted.
            if try deleteTombstones(of: batch, into: &outcome) {
                let made = progress(outcome)
                try store.recordProgress(made)
                recorded = made
            }
            if retries > 0 {
                logger.warning(
                    "batch.retried",
                    metadata: [LogKey.reason: "deadlock", "attempts": .int(retries + 1), LogKey.seq: .int(batch.pages.first?.seq ?? 0)])
            }
            remember(batch, recorded)
        } catch let error where StoreError.refusedValue(error) != nil {
            outcome = try saveRefusing(batch, refusal: error, progress: progress)
        }
        return (resolved, outcome)
    }

    /// Deletes the rows `batch`'s tombstones name (`delete_when:`), with the model's delete rules,
    /// in the open transaction, counting them in `outcome`. Whether there were any.
    func deleteTombstones(of batch: PreparedBatch, into outcome: inout BatchOutcome) throws -> Bool {
        var byEntity: [Int: Set<IdentityKey>] = [:]
        for page in batch.decoded ?? batch.pages {
            for tombstone in page.deletions { byEntity[tombstone.entity, default: []].insert(tombstone.identity) }
        }
        guard !byEntity.isEmpty else { return false }
        for (entity, identities) in byEntity.sorted(by: { $0.key < $1.key }) {
            outcome.deleted += try store.delete(.listed(identities), of: entity, sparing: [:])
        }
        return true
    }

    /// A batch that could not be saved: a unit lost to another job leaves the rest of the run
    /// going; anything else rolls the open transaction back and fails the run.
    private func saveFailed(_ batch: PreparedBatch, _ error: any Error) {
        redo.dropWrites()
        commits.releaseRetained()
        tally.rollBack()
        if let lost = error as? StoreError, lost.kind == .claimLost {
            // This job stalled past a lease and another job took a unit over, or a deadlock with
            // another job aborted the transaction: it was rolled back and its other units handed
            // back to the queue; their work counts elsewhere.
            logger.warning(
                "unit.lost", metadata: ["units": "\(lost.units.map(String.init).joined(separator: ","))", LogKey.reason: "\(lost.message)"])
            return
        }
        // The store's error says which batch and page it was writing.
        var error = error
        if var store = error as? StoreError {
            store.batch = batch.number
            store.page = batch.pages.first?.seq
            error = store
        }
        logger.error("batch.failed", metadata: [LogKey.error: "\(error)", LogKey.seq: .int(batch.pages.first?.seq ?? 0)])
        // The open transaction is rolled back (a store that undoes batches alone kept it): what
        // is committed, with its resume state, stays as it was.
        try? store.rollback()
        fail(error)
    }

    /// Commits when the open transaction is big or old enough (or, in a shared run, at the end
    /// of each unit); its first batch starts the commit interval's timer.
    private func commitIfDue(_ pages: [DecodedPage]) {
        if unitTransactions {
            if pages.last?.endsUnit == true { commit() }
            return
        }
        switch commits.saved(records: tally.uncommittedRecords, now: timers.now()) {
        case .commit: commit()
        case .wait(let timer?):
            // The transaction's first batch: committed after the interval even if no batch follows.
            // Weak: a run that ended does not keep its stage (and its store's connections) alive
            // until the timer fires.
            timers.after(commits.interval, on: queue) { [weak self] in
                guard let self else { return }
                if !hasEnded && commits.isOpen(timer) { commit() }
            }
        case .wait(nil): break
        }
    }
}
