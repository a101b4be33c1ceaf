import Dispatch
import Logging
import Synchronization

/// The writer queue's state: resolves each batch the ``BatchAssembler`` hands it (the
/// ``BatchResolver``'s second step), writes it through the store with the run's counters and
/// rejections, and commits — a coordinator of small values: where it is (``WriterPhase``), when to
/// commit (``CommitPolicy``), the counts (``RunTally``), the rejections (``RunRejections``),
/// `write: replace` (``ReplaceTracker``), the prints (``PrintRecorder``), the writes and their redo
/// (``TransactionWriter``), the load's turns (``LoadTurns``) and its merge (``StagedLoadMerge``).
/// Each commit carries the progress and resume state of its last batch, so a killed run loses at
/// most that much work and `--resume` redoes it.
///
/// Every field is confined to `queue`, but `committed`, `staging` and `failed`; the runner reads
/// `counters`, `failure`, `loaded` and `prints` only after `finished` fired.
final class WriterStage: @unchecked Sendable {  // confined to `queue`
    let queue = DispatchQueue(label: "ingot.writer", qos: .userInitiated)
    /// A joined job whose rows are exchanged between the jobs, written when every unit is done
    /// (``LoadPlan/defersJoinedBatches``): like a staged batch, it is looked up by nothing.
    let defersBatches: Bool
    /// Set once the run's prints are dropped: the lanes stop making footprints, and the source
    /// stops digesting pages (unless a refresh plan needs the digests). Read from any queue.
    let printsOff: StopFlag
    /// The run's page prints, for the next run's refresh.
    private(set) var prints: PrintRecorder
    /// What the load plan turned into so far.
    var loaded: LoadOutcome { turns.outcome }
    private var phase = WriterPhase.writing

    private var writer: TransactionWriter
    private var tally: RunTally
    private var commits: CommitPolicy
    private var rejections: RunRejections
    private var replace: ReplaceTracker
    private var merge: StagedLoadMerge
    private let model: EntityModel
    private let runID: String
    private let logger: Logger
    private let timers: any RunTimers
    private let metrics: RunMetrics?
    private let shared: SharedCounters
    private let finished: @Sendable () -> Void
    /// Stops the run's source when saving fails: a source that waits for work (a joined job's
    /// queue) would otherwise wait on for ever, its leases renewed, and every other job with it.
    private let stopSource: @Sendable () -> Void
    /// Mirrors ``WriterPhase/failed(_:)`` for the other queues (the source and the assembler stop).
    private let failed = Mutex(false)
    private let committed = Atomic<Int>(0)
    /// Whether the store stages batches, as the writer last saw it: the assembler looks nothing
    /// up for a batch that will be staged.
    private let staging = Atomic<Bool>(false)
    private var turns: LoadTurns

    init(
        store: any IngestStore, config: PipelineConfig, runID: String, options: RunOptions, logger: Logger,
        shared: SharedCounters, initialCounters: RunCounters = RunCounters(), resumed: Bool = false, metrics: RunMetrics? = nil,
        archivePath: String? = nil, keepsPrints: Bool = false, defersBatches: Bool = false,
        stopSource: @escaping @Sendable () -> Void = {}, finished: @escaping @Sendable () -> Void
    ) {
        let layouts = EntityLayout.layouts(of: config.model)
        let recordsPath = config.recordsPath.joined(separator: ".")
        writer = TransactionWriter(
            store: store, resolver: BatchResolver(model: config.model, layouts: layouts, rootRules: config.rootWriteRules),
            model: config.model, recordsPath: recordsPath, logger: logger)
        merge = StagedLoadMerge(model: config.model, recordsPath: recordsPath)
        self.defersBatches = defersBatches
        turns = LoadTurns(exchanged: defersBatches, logger: logger)
        printsOff = StopFlag()
        prints = PrintRecorder(keeps: keepsPrints, maxBytes: options.maxPrintBytes, off: printsOff)
        // A resumed run stored all of its rejections up to the cap.
        rejections = RunRejections(
            caps: RejectionCaps(
                maxRows: options.maxRejectRows, logLimit: options.loggedRejectionLimit,
                alreadyStored: initialCounters.rejectedRecords + initialCounters.rejectedPages),
            archivePath: archivePath, logger: logger)
        tally = RunTally(config: config, layouts: layouts, initial: initialCounters)
        commits = CommitPolicy(
            records: options.commitRecords, interval: options.commitInterval, scope: options.join != nil ? .eachUnit : .batches)
        // The touched rows of an earlier process are gone: a resumed run cannot tell what it did
        // not see. A joined run's last job deletes (PipelineRunner+Join.swift).
        replace = ReplaceTracker(
            config: config, layouts: layouts,
            atEnd: config.replacedEntities.isEmpty || options.join != nil ? .nothing : resumed ? .skipAfterResume : .deleteUntouched)
        (model, self.runID, self.logger, timers, self.metrics) = (config.model, runID, logger, options.timers, metrics)
        (self.shared, self.stopSource, self.finished) = (shared, stopSource, finished)
        publishLoad()
    }

    /// The store; the assembler prepares batches with its reader of committed rows, which belongs
    /// to the assembler's queue (``BatchResolver/prepare(_:uncommitted:store:)``).
    var store: any IngestStore { writer.store }
    /// The merge rules, for both queues (a value: each uses its own copy).
    var resolver: BatchResolver { writer.resolver }
    /// The run's committed counters.
    var counters: RunCounters { tally.committed }
    /// The number of the last batch committed. Safe from any queue.
    var committedBatch: Int { committed.load(ordering: .acquiring) }
    /// Whether the store stages batches, as the writer last saw it. Safe from any queue.
    var stagesBatches: Bool { staging.load(ordering: .acquiring) }
    /// Whether saving failed (the source stops reading). Safe from any queue.
    var hasFailed: Bool { failed.withLock { $0 } }
    /// Why saving failed, if it did.
    var failure: (any Error)? { phase.failure }
    /// The run was stopped before its source was exhausted.
    var interrupted: Bool { phase.isInterrupted }
    private var load: LoadState { store.loadState }
    /// Its batches are resolved as a stage takes them (unfolded, no lookups, `default:` and
    /// `const:` left to the merge): the store stages them, or defers them to the run's end.
    private var resolvesForStage: Bool { load == .staging || defersBatches }
    /// A joined run: each batch that ends on a whole page is committed with the units it holds.
    private var unitTransactions: Bool { commits.scope == .eachUnit }

    /// Saves a batch: rows, links, rejections and counters, in the open transaction; commits when
    /// the transaction is big or old enough. Does nothing once the run has failed.
    func save(_ batch: PreparedBatch) {
        dispatchPrecondition(condition: .onQueue(queue))
        let pages = batch.pages
        guard phase.isWriting, !pages.isEmpty else { return }
        var (next, rejected) = tally.reading(pages)
        let (newMax, kept) = tally.keptValues(after: pages)
        let seen = replace.scopeValues(of: batch)
        // Only a whole page moves the resume point: a crash after part of a page was committed
        // redoes the whole page (re-applying its first parts is harmless).
        func progress(_ outcome: BatchOutcome) -> RunProgress {
            var counters = next
            counters.add(outcome, model: model)
            var made = RunProgress(
                runID: runID, counters: counters, lastSeq: pages.last { $0.isLastPart }?.seq,
                resumeState: pages.last { $0.isLastPart && $0.resumeState != nil }?.resumeState,
                rejections: rejections.storable(rejected + outcome.rejections), kept: kept)
            // A joined job's units carry the scope values the run's end deletes within.
            if unitTransactions { made.scopeValues = seen }
            return made
        }
        do {
            if try turns.firstBatch(batch, records: next.records - tally.saved.records, saved: tally.saved.records, store: store) {
                publishLoad()
            }
            let (resolved, outcome) = try writer.write(batch, staging: resolvesForStage, tally: &tally, progress: progress)
            replace.note(resolved, scopeValues: seen)
            next.add(outcome, model: model)
            rejected += outcome.rejections
            prints.keep(pages, refused: !outcome.rejections.isEmpty)
            tally.saved(next, batch: batch.number, incrementalMax: newMax)
            if load == .staging { merge.staged(pages) }
            rejections.stored(rejected.count)
            rejections.log(rejected)
        } catch {
            saveFailed(batch, error)
            return
        }
        // A batch whose tombstones deleted rows is committed at once: the next batch's lookups
        // read what is committed, and must not find the deleted rows (BatchAssembler waits). A
        // joined run commits whole units only: within one, the next batches are looked up again
        // in the open transaction (TransactionWriter).
        let deletes = pages.contains { !$0.deletions.isEmpty }
        if deletes && (!unitTransactions || pages.last?.endsUnit == true) { commit() } else { commitIfDue(pages) }
    }

    /// After the last batch: a staged load is merged, `write: replace` deletes untouched rows
    /// (only after the whole source was seen), then the run is over.
    func finish(_ end: SourceEnd) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !phase.hasEnded else { return assertionFailure("the writer stage ends once") }
        if case .failed(let error) = end { fail(error) }
        let exhausted = if case .exhausted = end { true } else { false }
        if exhausted && load == .staging && failure == nil {
            // The last staged batches first: the merge's fold reads them on another connection,
            // which sees committed rows only (a crash in the merge resumes to it).
            commit()
            if failure == nil { mergeStaged() }
        }
        do {
            if failure == nil {
                try tally.deleted(replace.sourceEnded(exhausted: exhausted, store: store, after: tally.saved, logger: logger))
            }
        } catch {
            fail(error)
        }
        commit()
        phase.end(exhausted: exhausted)
        finished()
    }

    /// Commits the batches saved since the last commit and publishes their counters; between
    /// transactions, a load whose database outgrew the page cache goes on staged.
    private func commit() {
        dispatchPrecondition(condition: .onQueue(queue))
        commits.ended()
        do {
            guard try writer.commit(tally, metrics: metrics) else { return }
            tally.commit()
            committed.store(tally.lastSaved, ordering: .releasing)
            shared.value.withLock { $0 = counters }
        } catch {
            logger.error("commit.failed", metadata: [LogKey.error: "\(error)"])
            // Whatever part of the transaction did not commit is rolled back now, so that nothing
            // later (the run's end commits what is open) commits a resume point past rows that
            // are not durable: a staging file that failed its commit keeps its rows out, and the
            // database's progress must follow it.
            try? store.rollback()
            tally.rollBack()
            return fail(error)
        }
        guard phase.isWriting else { return }
        do {
            if try turns.betweenTransactions(saved: tally.saved.records, store: store) { publishLoad() }
        } catch {
            logger.error("batch.failed", metadata: [LogKey.error: "\(error)", LogKey.seq: .int(0)])
            fail(error)
        }
    }

    /// Commits when the commit policy says; a transaction's first batch starts its timer.
    private func commitIfDue(_ pages: [DecodedPage]) {
        let endsUnit = pages.last?.endsUnit == true
        switch commits.saved(records: tally.uncommittedRecords, retainedBytes: writer.retainedBytes, now: timers.now(), endsUnit: endsUnit)
        {
        case .commit: commit()
        case .wait(let timer?):
            // The transaction's first batch: committed after the interval even if no batch follows.
            // Weak: a run that ended does not keep its stage (and its store's connections) alive
            // until the timer fires.
            timers.after(commits.interval, on: queue) { [weak self] in
                guard let self, !phase.hasEnded, commits.isOpen(timer) else { return }
                commit()
            }
        case .wait(nil): break
        }
    }

    /// A batch that could not be saved: a unit lost to another job leaves the rest of the run
    /// going; anything else rolls the open transaction back and fails the run.
    private func saveFailed(_ batch: PreparedBatch, _ error: any Error) {
        writer.dropWrites()
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
        let error = StoreError.naming(error, batch: batch.number, page: batch.pages.first?.seq)
        logger.error("batch.failed", metadata: [LogKey.error: "\(error)", LogKey.seq: .int(batch.pages.first?.seq ?? 0)])
        // The open transaction is rolled back (a store that undoes batches alone kept it): what
        // is committed, with its resume state, stays as it was.
        try? store.rollback()
        fail(error)
    }

    /// A staged load's end: the staged rows merged into the tables in the run's last transaction
    /// (``StagedLoadMerge``), the rows the database refused rejected, the rest counted.
    private func mergeStaged() {
        defer { publishLoad() }
        do {
            let report = try merge.run(on: store, fills: resolver.fills, tally: &tally, logger: logger)
            if !report.refusals.isEmpty {
                // The records that made a row are not known any more (folded into it): the row is
                // rejected naming the last, in the merge's transaction.
                prints.drop("the staged merge refused rows after their pages' prints were kept")
                tally.addRefused(report.refusals)
                let stored = rejections.storable(report.refusals)
                rejections.stored(report.refusals.count)
                try store.recordProgress(
                    RunProgress(runID: runID, counters: tally.saved, lastSeq: nil, resumeState: nil, rejections: stored))
                rejections.log(report.refusals)
            }
            let rows = report.changedRows + tally.addMerged(report.written.counts ?? [], stored: report.stored)
            if unitTransactions {
                // A joined job's counters.
                try store.recordProgress(
                    RunProgress(runID: runID, counters: tally.saved, lastSeq: nil, resumeState: nil, rejections: [], kept: []))
            }
            turns.merged(rows: rows)
            merge.log(report, rows: rows, logger: logger)
        } catch {
            logger.error("batch.failed", metadata: [LogKey.error: "\(error)", LogKey.seq: .int(0)])
            try? store.rollback()
            tally.rollBack()
            fail(error)
        }
    }

    /// Publishes where the load stands for the assembler, after whatever may have moved it: the
    /// store's opening, a turn, a merge.
    private func publishLoad() {
        staging.store(turns.note(store, records: tally.saved.records), ordering: .releasing)
    }

    /// Saving failed: the first failure stops the source.
    private func fail(_ error: any Error) {
        dispatchPrecondition(condition: .onQueue(queue))
        if phase.fail(error) { stopSource() }
        failed.withLock { $0 = true }
    }
}
