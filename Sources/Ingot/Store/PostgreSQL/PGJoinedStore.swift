import Foundation

/// A job's store in a run several jobs share (`--join`, docs/scale-out.md), chosen when the store
/// opens from the run's load plan (``LoadPlan/Mode/joined(_:)``), as GRDB's `DatabasePool` is
/// chosen beside `DatabaseQueue`: a single run's store (``PGStore``: batch by batch, staged, held)
/// and this one share one table writer — the entities' tables, rows, links, `COPY`, the staging
/// file — which is ``tables``, a ``PGStore`` it owns; what only a joined job does lives here: the
/// units it marks done with each transaction, the way it writes its batches (``JoinedWrites``:
/// exchanged between the jobs and written when every unit is done, PGStore+Exchange.swift, or
/// with positions at each commit), and its part's progress. A joined job never stages a load of
/// its own: the run's parts are its stage.
///
/// `@unchecked Sendable`: used from the writer queue only, as ``tables`` is (its reader
/// connection, from the assembler's queue, is reached through ``lookupCommitted(_:_:)``, which
/// keeps no state here).
final class PGJoinedStore: IngestStore, @unchecked Sendable {  // writer-queue confined, as said above
    /// The table writer this store shares with a single run's.
    let tables: PGStore
    /// This job's part in the run, once it joined (``joinRun(_:)``); a write before is refused.
    var joined: JoinContext?
    /// The units marked done in ``tables``' open transaction, and that transaction's number: a
    /// transaction that ended (committed or rolled back, whoever ended it) leaves none.
    private var marked: (transaction: Int, units: Set<UnitRef>) = (0, [])

    init(tables: PGStore) { self.tables = tables }

    convenience init(url: String, model: EntityModel, plan: LoadPlan, stopped: StopFlag? = nil) throws {
        self.init(tables: try PGStore(url: url, model: model, plan: plan, stopped: stopped))
    }

    /// The units marked done in the open transaction.
    var unitsInTransaction: Set<UnitRef> {
        get { tables.inTransaction && marked.transaction == tables.transactionNumber ? marked.units : [] }
        set { marked = (tables.transactionNumber, newValue) }
    }

    /// This job's part, or why there is none yet.
    private func part() throws -> JoinContext {
        guard let joined else { throw StoreError.schema("a joined job's store writes once the job joined its run") }
        return joined
    }

    // MARK: - Lookups, runs, the load: the table writer's

    var layouts: [EntityLayout] { tables.layouts }
    var migration: [String] { tables.migration }

    func lookup(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef] {
        try tables.lookup(entity, keys)
    }

    func lookupCommitted(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef]? {
        try tables.lookupCommitted(entity, keys)
    }

    func unfinishedRun(pipeline: String) throws -> UnfinishedRun? { try tables.unfinishedRun(pipeline: pipeline) }
    func beginRun(_ run: RunBeginning) throws { try tables.beginRun(run) }

    func finishRun(id: String, status: RunStatus, counters: RunCounters, finishedAt: Date) throws {
        try tables.finishRun(id: id, status: status, counters: counters, finishedAt: finishedAt)
    }

    func delete(_ rows: RowsToDelete, of entity: Int, sparing: [Int: Set<IdentityKey>]) throws -> Int {
        try tables.delete(rows, of: entity, sparing: sparing)
    }

    func unfilledStubs() throws -> [Int: Int] { try tables.unfilledStubs() }
    func interrupt() { tables.interrupt() }
    /// Commits as this job, then closes the table writer.
    func close() throws {
        try commit()
        try tables.close()
    }

    var loadState: LoadState { tables.loadState }

    /// A joined job stages nothing of its own (its rows go to the run's parts or the tables).
    func turnStaged(at moment: StagingMoment) throws -> LoadState { tables.loadState }

    /// Nothing staged: nothing to merge.
    func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void,
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String, _ record: (seq: Int, index: Int)?) -> Void
    ) throws -> WriteResult {
        WriteResult(counts: Array(repeating: EntityCounts(), count: layouts.count))
    }

    // MARK: - Writes

    /// A batch written as ``JoinedWrites`` says: a unit's transaction is rolled back whole when
    /// a batch of it fails (``writeJoined(_:_:then:)``).
    func write(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        try writeJoined(batch, try part(), then: then)
    }

    var undoesBatchesAlone: Bool { false }

    /// ``write(_:then:)`` under a savepoint: the batch marks its units done in the same savepoint;
    /// a unit lost to another job still rolls the whole transaction back.
    func writeIsolated(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        let join = try part()
        try tables.begin()
        let stagedBefore = tables.stagedInTransaction.count
        let unitsBefore = unitsInTransaction
        do {
            try tables.connection.inSavepoint("ingot_isolated") {
                var result = WriteResult()
                result.counts = try writeJoinedRows(batch)
                if join.inOrder { result.unchanged = tables.lastUnchanged }
                try then(result)
            }
        } catch let error as StoreError where error.kind == .claimLost {
            let held = unitsInTransaction
            try? rollback()
            tables.releaseUnits(held, join)
            throw error
        } catch {
            tables.forgetStaging(after: stagedBefore)
            unitsInTransaction = unitsBefore
            throw error
        }
    }

    /// Writes a batch of units (pages of the shared source, in increasing order): marks them done
    /// (this job must still hold each claim: the rows lock until the commit, so a job whose lease
    /// ran out finds them taken), then writes its rows as ``JoinedWrites`` says. The transaction
    /// commits whole units only (the writer commits after a batch that ends on a whole page).
    ///
    /// Jobs that share rows can wait on each other in a cycle (a batch copies its new rows in,
    /// then upserts its stored ones: two passes over a table), and PostgreSQL then aborts one
    /// transaction (`deadlock_detected`). When that transaction held only this batch, it is
    /// written again, the careful way (one upsert per table, in identity order), up to three
    /// times; otherwise its units go back to the queue (``StoreError/Kind/claimLost``), and the
    /// job goes on.
    private func writeJoined(_ batch: ResolvedBatch, _ join: JoinContext, then: (WriteResult) throws -> Void) throws {
        let alone = !tables.inTransaction
        var attempts = 0
        while true {
            try tables.begin()
            var progressed = false
            do {
                let counts = try writeJoinedRows(batch)
                progressed = true
                try then(WriteResult(counts: counts, unchanged: join.inOrder ? tables.lastUnchanged : nil, retries: attempts))
                return
            } catch let error as StoreError where error.sqlState == PGStore.deadlockDetected && alone && !progressed && attempts < 3 {
                try? rollback()
                writeCarefully()
                attempts += 1
            } catch {
                let held = unitsInTransaction
                try? rollback()
                if let store = error as? StoreError, store.kind == .claimLost || store.sqlState == PGStore.deadlockDetected {
                    // A deadlock in a transaction of several batches (or one that came back three
                    // times): nothing of it is written; its units go back to the queue, as a lost
                    // claim's do, and a job writes them again.
                    tables.releaseUnits(held, join)
                    if store.kind != .claimLost {
                        var lost = StoreError.claimLost(held.map(\.seq).sorted())
                        lost.message =
                            "units \(lost.units.map(String.init).joined(separator: ", ")) go back to the queue: their transaction was aborted by a deadlock with another job"
                        throw lost
                    }
                }
                throw error
            }
        }
    }

    /// ``writeJoined(_:_:then:)``'s statements, in the open transaction, the way this job writes
    /// now (``writeCarefully()`` may have moved it); per entity, what they did as the database
    /// counted it.
    private func writeJoinedRows(_ batch: ResolvedBatch) throws -> [EntityCounts]? {
        let join = try part()
        try markDone(Set(batch.units), join)
        let fallback = batch.lastUnitKey
        switch join.writes {
        case .inOrder(let marksTouched):
            // Every unit before these is committed and none after: a single run's writes, counted
            // as the resolver counted them (its lookups saw every unit before).
            try tables.writeEntities(of: batch, direct: false)
            if marksTouched { try tables.markTouched(batch, join) }
            return nil
        case .deferred: return try tables.writeExchanged(batch, join)
        case .positions(.careful): return try tables.writeJoinedEntities(batch, join, fallback: fallback, direct: false)
        case .positions(.direct): break
        }
        // The rows no job had at the lookup are copied straight in, under a savepoint: when
        // another job made one of them since, the batch is written the careful way, and so is
        // every later batch of this job (its run shares rows with other jobs).
        let stagedBefore = tables.stagedInTransaction.count
        return try tables.connection.optimistically(
            "ingot_direct", { try tables.writeJoinedEntities(batch, join, fallback: fallback, direct: true) },
            fallingBackWhen: { PGStore.isUniqueViolation($0) },
            carefully: {
                writeCarefully()
                tables.forgetStaging(after: stagedBefore)
                return try tables.writeJoinedEntities(batch, join, fallback: fallback, direct: false)
            })
    }

    /// From now on, a positional job upserts the rows no job had at its lookup
    /// (``JoinedWrites/Inserts/careful``); other ways of writing stay as they are.
    private func writeCarefully() {
        if case .positions = joined?.writes { joined?.writes = .positions(.careful) }
    }

    /// Marks `units` done in the open transaction (those not marked in it yet): this job must
    /// still hold each claim, else ``StoreError/Kind/claimLost``.
    func markDone(_ units: Set<UnitRef>, _ join: JoinContext) throws {
        let units = units.subtracting(unitsInTransaction)
        guard !units.isEmpty else { return }
        let list = Array(units)
        let marked = try tables.connection.execute(
            """
            UPDATE _ingot_units AS u SET status = 'done', finished_at = now() FROM unnest($3::bigint[], $4::int[]) AS c(seq, claims)
            WHERE u.name = $1 AND u.job = $2 AND u.seq = c.seq AND u.claims = c.claims AND u.status = 'claimed' RETURNING u.seq
            """,
            [join.name, join.job] + PGStore.unitArrays(list))
        unitsInTransaction.formUnion(units)
        if marked.count != units.count {
            let kept = Set(marked.compactMap { $0[0].flatMap { Int($0) } })
            throw StoreError.claimLost(list.map(\.seq).filter { !kept.contains($0) }.sorted())
        }
        // Jobs waiting for the last units to end hear of these when they commit.
        PGSharedRun.notify(on: tables.connection, join.name)
    }

    /// The job's progress: its rejects, kept values and counters, in the open transaction.
    func recordProgress(_ progress: RunProgress) throws {
        let join = try part()
        try tables.recordRejectsAndKept(progress, join: join)
        try tables.recordJobProgress(progress, join)
    }

    // MARK: - Transactions

    /// Commits the open transaction with its units.
    @discardableResult func commit() throws -> Bool { try tables.commit() }

    func rollback() throws { try tables.rollback() }
}

extension PGJoinedStore: PrintKeeping, AnswerKeeping {
    func previousPrints(pipeline: String, fingerprint: String) throws -> PreviousPrints? {
        try tables.previousPrints(pipeline: pipeline, fingerprint: fingerprint)
    }

    func savePrints(_ prints: PrintSpool, runID: String, pipeline: String, fingerprint: String) throws -> Bool {
        try tables.savePrints(prints, runID: runID, pipeline: pipeline, fingerprint: fingerprint)
    }

    func keptAnswers(pipeline: String) throws -> KeptAnswers { try tables.keptAnswers(pipeline: pipeline) }
    func keepAnswers(_ answers: KeptAnswers, pipeline: String) throws { try tables.keepAnswers(answers, pipeline: pipeline) }
}
