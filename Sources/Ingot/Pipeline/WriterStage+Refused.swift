import Logging

/// The safety net for values a database refuses (docs/reliability.md): the writes of the open
/// transaction kept for a redo, and the halving of a refused batch down to its records
/// (``RefusalSearch``).
extension WriterStage {
    /// Keeps a write of the open transaction for a redo.
    func remember(_ batch: PreparedBatch, _ progress: RunProgress?) {
        guard !store.undoesBatchesAlone else { return }
        commits.retain(redo.keep(batch, progress))
    }

    /// A batch the database refused a value of. The store rolled the open transaction back: its
    /// earlier writes are redone (looked up again), then the batch's records are written in
    /// halves under savepoints, the refused halves halved again down to the records the database
    /// refuses, which are rejected (`unstorable`, with its message); the rest is saved, with the
    /// batch's progress. Returns what was written. Cost: about 2 log2(n) writes for a poison
    /// record among n, on this slow path only.
    func saveRefusing(
        _ batch: PreparedBatch, refusal: any Error, progress: (BatchOutcome) -> RunProgress
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
        commits.releaseRetained()
        for write in writes {
            let resolved = try resolver.resolve(write.batch, store: store, staging: resolvesForStage)
            try store.write(resolved) { _ in if let p = write.progress { try store.recordProgress(p) } }
            var redone = BatchOutcome()
            if try deleteTombstones(of: write.batch, into: &redone), let p = write.progress { try store.recordProgress(p) }
            redo.keepRedone(write)
        }
        let pages = batch.decoded ?? batch.pages
        var outcome = BatchOutcome()
        outcome.entities = Array(repeating: EntityCounts(), count: model.entities.count)
        let records = pages.indices.flatMap { p in pages[p].records.indices.map { (page: p, record: $0) } }
        try writeFindingRefused(records, pages, &outcome)
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
    private func writeFindingRefused(
        _ records: [(page: Int, record: Int)], _ pages: [DecodedPage], _ outcome: inout BatchOutcome
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
                let resolved = try resolver.resolve(sub, store: store, staging: resolvesForStage)
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
