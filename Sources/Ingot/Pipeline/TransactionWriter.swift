import Logging

/// The writer stage's hands on the store: a batch resolved and written with its progress, its
/// tombstones deleted, and the safety net for values a database refuses (docs/reliability.md) —
/// the writes of the open transaction kept for a redo (``RedoLog``), a refused batch halved down
/// to the records the database refuses (``RefusalSearch``). A value the ``WriterStage`` owns and
/// uses on its queue; the stage decides when to commit, this writes.
struct TransactionWriter {
    /// Also used by the assembler to prepare batches: ``BatchResolver/prepare(_:uncommitted:store:)``
    /// uses only the store's reader of committed rows, which belongs to the assembler's queue.
    let store: any IngestStore
    /// The merge rules, for both queues (a value: each uses its own copy).
    let resolver: BatchResolver
    private let model: EntityModel
    /// Where the records are in a page, for the coding path of a record the database refuses.
    private let recordsPath: String
    private let logger: Logger
    /// The writes of the open transaction, to redo when the database refuses a value.
    private var redo = RedoLog()
    /// Tombstones deleted rows in the open transaction, which the assembler's lookups (of
    /// committed rows) still find: later batches are looked up again in the transaction. A
    /// single run commits such a batch at once instead; a joined one cannot commit part of a unit.
    private var deletedInTransaction = false

    init(store: any IngestStore, resolver: BatchResolver, model: EntityModel, recordsPath: String, logger: Logger) {
        self.store = store
        self.resolver = resolver
        self.model = model
        self.recordsPath = recordsPath
        self.logger = logger
    }

    /// Page bytes the open transaction keeps for a redo (``CommitPolicy/saved(records:retainedBytes:now:)``).
    var retainedBytes: Int { redo.bytes }

    /// Commits the open transaction, what `tally` saved since its last commit, timing the commit
    /// into `metrics`; whether anything was open. The writes kept for a redo are let go either way.
    mutating func commit(_ tally: RunTally, metrics: RunMetrics?) throws -> Bool {
        redo.transactionEnded()
        deletedInTransaction = false
        let clock = ContinuousClock()
        let started = clock.now
        guard try store.commit() else { return false }
        let elapsed = clock.now - started
        metrics?.recordCommit(elapsed)
        if logger.logLevel <= .debug {
            logger.debug(
                "batch.committed",
                metadata: [
                    LogKey.records: .int(tally.uncommittedRecords), LogKey.pages: .int(tally.saved.pages - tally.committed.pages),
                    "commit_ms": .seconds(elapsed.inSeconds * 1000),
                ])
        }
        return true
    }

    /// A batch failed and its transaction was rolled back: nothing is left to redo.
    mutating func dropWrites() { redo.dropWrites() }

    /// Resolves and writes `batch` with its progress in the open transaction — unfolded for a
    /// stage when `staging` (``WriterStage/resolvesForStage``) — counting what was written with
    /// `tally`; a batch the database refuses a value of is written record by record.
    mutating func write(
        _ batch: PreparedBatch, staging: Bool, tally: inout RunTally, progress: (BatchOutcome) -> RunProgress
    ) throws -> (ResolvedBatch, BatchOutcome) {
        var batch = batch
        if redo.refusedInTransaction || deletedInTransaction { batch.refs = nil }
        let resolved: ResolvedBatch
        do {
            resolved = try resolver.resolve(batch, store: store, staging: staging)
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
            outcome = try saveRefusing(batch, refusal: error, staging: staging, tally: &tally, progress: progress)
        }
        return (resolved, outcome)
    }

    /// Deletes the rows `batch`'s tombstones name (`delete_when:`), with the model's delete rules,
    /// in the open transaction, counting them in `outcome`. Whether there were any.
    private mutating func deleteTombstones(of batch: PreparedBatch, into outcome: inout BatchOutcome) throws -> Bool {
        var byEntity: [Int: Set<IdentityKey>] = [:]
        for page in batch.decoded ?? batch.pages {
            for tombstone in page.deletions { byEntity[tombstone.entity, default: []].insert(tombstone.identity) }
        }
        guard !byEntity.isEmpty else { return false }
        for (entity, identities) in byEntity.sorted(by: { $0.key < $1.key }) {
            outcome.deleted += try store.delete(.listed(identities), of: entity, sparing: [:])
        }
        deletedInTransaction = true
        return true
    }

    /// Keeps a write of the open transaction for a redo.
    private mutating func remember(_ batch: PreparedBatch, _ progress: RunProgress?) {
        guard !store.undoesBatchesAlone else { return }
        redo.keep(batch, progress)
    }

    /// A batch the database refused a value of. The store rolled the open transaction back: its
    /// earlier writes are redone (looked up again), then the batch's records are written in
    /// halves under savepoints, the refused halves halved again down to the records the database
    /// refuses, which are rejected (`unstorable`, with its message); the rest is saved, with the
    /// batch's progress. Returns what was written. Cost: about 2 log2(n) writes for a poison
    /// record among n, on this slow path only.
    private mutating func saveRefusing(
        _ batch: PreparedBatch, refusal: any Error, staging: Bool, tally: inout RunTally, progress: (BatchOutcome) -> RunProgress
    ) throws -> BatchOutcome {
        logger.warning(
            "batch.refused",
            metadata: [
                LogKey.seq: .int(batch.pages.first?.seq ?? 0), LogKey.error: "\(StoreError.refusedValue(refusal) ?? "\(refusal)")",
                LogKey.reason: "the database refused a value: finding the records it refuses, saving the others",
            ])
        let writes = redo.takeForRedo()
        // A store that undoes a batch alone kept the transaction; any other rolled it back.
        if !store.undoesBatchesAlone { try store.rollback() }
        for write in writes {
            let resolved = try resolver.resolve(write.batch, store: store, staging: staging)
            try store.write(resolved) { _ in if let p = write.progress { try store.recordProgress(p) } }
            var redone = BatchOutcome()
            if try deleteTombstones(of: write.batch, into: &redone), let p = write.progress { try store.recordProgress(p) }
            redo.keepRedone(write)
        }
        let pages = batch.decoded ?? batch.pages
        var outcome = BatchOutcome()
        outcome.entities = Array(repeating: EntityCounts(), count: model.entities.count)
        let records = pages.indices.flatMap { p in pages[p].records.indices.map { (page: p, record: $0) } }
        try writeFindingRefused(records, pages, staging: staging, tally: &tally, &outcome)
        // The batch's pages without their records carry its progress (and, in a joined run, mark
        // its units done even when every record was refused).
        var empty = pages
        for k in empty.indices {
            empty[k].records = []
            empty[k].rows = []
            empty[k].storage = RowStorage()
            empty[k].rejections = []
        }
        _ = try deleteTombstones(of: batch, into: &outcome)
        let made = progress(outcome)
        try store.writeIsolated(try resolver.resolve(PreparedBatch(pages: empty), store: store)) { _ in try store.recordProgress(made) }
        remember(PreparedBatch(pages: empty), made)
        return outcome
    }

    /// Writes `records` of `pages`, each attempt under a savepoint; the records the database
    /// refuses alone (``RefusalSearch``) are rejected.
    private mutating func writeFindingRefused(
        _ records: [(page: Int, record: Int)], _ pages: [DecodedPage], staging: Bool, tally: inout RunTally,
        _ outcome: inout BatchOutcome
    ) throws {
        try RefusalSearch.run(
            records.indices,
            attempt: { range in
                var subset = pages
                for k in subset.indices {
                    subset[k].records = []
                    subset[k].rejections = []
                }
                for (p, r) in records[range] { subset[p].records.append(pages[p].records[r]) }
                let sub = PreparedBatch(pages: subset.filter { !$0.records.isEmpty })
                let resolved = try resolver.resolve(sub, store: store, staging: staging)
                do {
                    var written = resolved.outcome
                    try store.writeIsolated(resolved) { result in tally.count(resolved, result, into: &written) }
                    outcome.add(written)
                    remember(sub, nil)
                    return nil
                } catch {
                    guard let message = StoreError.refusedValue(error) else { throw error }
                    return message
                }
            },
            refused: { k, message in
                let only = records[k]
                outcome.rejections.append(refused(pages[only.page], only.record, message))
            })
    }

    /// The rejection of a record the database refuses, with its message.
    private func refused(_ page: DecodedPage, _ k: Int, _ message: String) -> RecordRejection {
        let record = page.records[k]
        let root = record.rows.isEmpty ? nil : page.rows[record.rows.lowerBound]
        let entity = root.map { model.entities[$0.entity].name } ?? model.entities.first?.name ?? "?"
        let identity = root?.identity.map { String("\($0)".prefix(100)) } ?? "without identity"
        var rejection = RecordRejection(
            entity: entity,
            codingPath: RecordFraming.Records.path(of: record.index, in: page.recordSegments) ?? recordsPath + "[\(record.index)]",
            reason: "the database refused it (\(entity) \(identity)): \(message.prefix(500))", source: page.source,
            recordIndex: record.index, raw: record.raw ?? "", rawLength: record.rawLength,
            code: message.contains(OneKindRule.reasonPrefix) ? .wrongKind : .unstorable)
        rejection.archive = page.archive
        return rejection
    }
}
