import Dispatch
import Logging
import Synchronization

/// The writer queue's state: resolves each batch the ``BatchAssembler`` hands it (the
/// ``BatchResolver``'s second step), writes it through the store with the run's counters and
/// rejections, and commits.
///
/// Batches share a transaction until `commitRecords` records are saved in it or it has been
/// open `commitInterval` seconds (then it is committed even when no further batch comes), and
/// at the end of the run. Each commit carries the progress and resume state of its last batch,
/// so a killed run loses at most that much work and `--resume` redoes it.
///
/// Every field is confined to `queue`, but `committedBatch` and `hasFailed`; the runner reads
/// `counters` and `failure` only after `finished` fired. The safety net for values a database
/// refuses is in WriterStage+Refused.swift.
final class WriterStage: @unchecked Sendable {  // confined to `queue`
    let queue = DispatchQueue(label: "ingot.writer", qos: .userInitiated)
    /// Also used by the assembler to prepare batches: ``BatchResolver/prepare(_:uncommitted:store:)``
    /// uses only the store's reader of committed rows, which belongs to the assembler's queue.
    let store: any IngestStore
    /// The merge rules, for both queues (a value: each uses its own copy).
    let resolver: BatchResolver
    /// What `write: replace` needs of the rows written, and does at the run's end.
    var replace: ReplaceTracker
    /// The pipeline's model: entity names for the per-entity counts.
    let model: EntityModel
    let runID: String
    let logger: Logger
    private let shared: SharedCounters
    private let finished: @Sendable () -> Void
    /// Stops the run's source when saving fails: a source that waits for work (a joined job's
    /// queue) would otherwise wait on for ever, its leases renewed, and every other job with it.
    private let stopSource: @Sendable () -> Void
    /// Mirrors ``Phase/failed`` for the other queues (the source and the assembler stop).
    private let failed = Mutex(false)
    private(set) var phase = Phase.writing

    /// Where the writer stage is. `writing` → `failed` (nothing more is saved; the source stops)
    /// → `ended`, or `writing` → `ended`: ``finish(_:)`` ends it once, and after that the runner
    /// owns the store (a pending commit timer does nothing).
    enum Phase {
        case writing
        case failed(any Error)
        case ended(Outcome)
    }

    /// How the stage ended.
    enum Outcome {
        case finished
        /// The run was stopped before its source was exhausted.
        case interrupted
        case failed(any Error)
    }

    /// The run's counts, committed and saved: the save and the merge count into it.
    var tally: RunTally
    /// The run's committed counters (read by the runner after `finished` fired).
    var counters: RunCounters { tally.committed }

    /// A joined run: each batch that ends on a whole page is committed with the units it holds
    /// (a page in parts is never committed half).
    let unitTransactions: Bool
    /// A joined job whose rows are exchanged between the jobs, written when every unit is done
    /// (``LoadPlan/defersJoinedBatches``): like a staged batch, it is looked up by nothing — the
    /// parts' writes at the run's end decide what is stored.
    let defersBatches: Bool
    /// When the open transaction commits.
    var commits: CommitPolicy
    let timers: any RunTimers
    /// The pages of the batches staged since the last merge, by seq: where a record a staged
    /// load's merge refuses came from (its source and archive entry).
    var stagedPages: [Int: (source: String, archive: ArchiveLocation?)] = [:]
    private let committed = Atomic<Int>(0)

    /// The number of the last batch committed. Safe from any queue.
    var committedBatch: Int { committed.load(ordering: .acquiring) }
    /// How many rejections are stored and logged, and the lines that say so.
    var rejections: RunRejections
    /// Commit latency goes here, if the run has metrics.
    private let metrics: RunMetrics?
    /// Why saving failed, if it did (read by the runner after `finished` fired).
    var failure: (any Error)? {
        switch phase {
        case .failed(let error), .ended(.failed(let error)): error
        case .writing, .ended: nil
        }
    }

    /// The run was stopped before its source was exhausted (read by the runner after `finished`).
    var interrupted: Bool { if case .ended(.interrupted) = phase { true } else { false } }

    var hasEnded: Bool { if case .ended = phase { true } else { false } }

    /// The writes of the open transaction, to redo when the database refuses a value.
    var redo = RedoLog()
    /// What the load plan turned into so far (``publishLoad()``); read by the summary once the
    /// stage has ended.
    var loaded = LoadOutcome()
    /// The records saved when the writer last asked the store whether the load should turn staged.
    private var recordsAtLastTurnCheck = 0
    /// Whether the store stages batches (``LoadState/staging``), as the writer last saw it
    /// (``publishLoad()``): the assembler looks nothing up for a batch that will be staged.
    private let staging = Atomic<Bool>(false)
    /// The run's page prints, for the next run's refresh (WriterStage+Prints.swift).
    var prints: PrintRecorder
    /// Set once the run's prints are dropped: the lanes stop making footprints, and the source
    /// stops digesting pages (unless a refresh plan needs the digests). Read from any queue.
    let printsOff: StopFlag
    /// Where the records are in a page, for the coding path of a record the database refuses.
    let recordsPath: String

    init(
        store: any IngestStore, config: PipelineConfig, runID: String, options: RunOptions, logger: Logger,
        shared: SharedCounters, initialCounters: RunCounters = RunCounters(), resumed: Bool = false, metrics: RunMetrics? = nil,
        archivePath: String? = nil, keepsPrints: Bool = false, defersBatches: Bool = false,
        stopSource: @escaping @Sendable () -> Void = {}, finished: @escaping @Sendable () -> Void
    ) {
        self.defersBatches = defersBatches
        loaded.exchanged = defersBatches
        self.stopSource = stopSource
        self.printsOff = StopFlag()
        self.prints = PrintRecorder(keeps: keepsPrints, maxBytes: options.maxPrintBytes, off: printsOff)
        // A resumed run stored all of its rejections up to the cap.
        self.rejections = RunRejections(
            caps: RejectionCaps(
                maxRows: options.maxRejectRows, logLimit: options.loggedRejectionLimit,
                alreadyStored: initialCounters.rejectedRecords + initialCounters.rejectedPages),
            archivePath: archivePath, logger: logger)
        self.recordsPath = config.recordsPath.joined(separator: ".")
        self.metrics = metrics
        self.store = store
        self.model = config.model
        let layouts = EntityLayout.layouts(of: config.model)
        self.resolver = BatchResolver(model: config.model, layouts: layouts, rootRules: config.rootWriteRules)
        self.tally = RunTally(config: config, layouts: layouts, initial: initialCounters)
        self.runID = runID
        self.commits = CommitPolicy(records: options.commitRecords, interval: options.commitInterval)
        self.timers = options.timers
        self.unitTransactions = options.join != nil
        // The touched rows of an earlier process are gone: a resumed run cannot tell what it did
        // not see. A joined run's last job deletes (PipelineRunner+Join.swift).
        self.replace = ReplaceTracker(
            config: config, layouts: layouts,
            atEnd: config.replacedEntities.isEmpty || options.join != nil ? .nothing : resumed ? .skipAfterResume : .deleteUntouched)
        self.logger = logger
        self.shared = shared
        self.finished = finished
        publishLoad()
    }

    /// Where the store's load stands (writer queue).
    var load: LoadState { store.loadState }

    /// Whether the store stages batches, as the writer last saw it. Safe from any queue.
    var stagesBatches: Bool { staging.load(ordering: .acquiring) }
    /// Its batches are resolved as a stage takes them (unfolded, no lookups, `default:` and
    /// `const:` left to the merge): the store stages them, or defers them to the run's end.
    var resolvesForStage: Bool { load == .staging || defersBatches }

    /// Publishes where the load stands for the assembler, after whatever may have moved it: the
    /// store's opening, a turn, a merge.
    func publishLoad() {
        let state = store.loadState
        staging.store(state == .staging, ordering: .releasing)
        loaded.note(state, records: tally.saved.records)
    }

    /// Whether saving failed (the source stops reading). Safe from any queue.
    var hasFailed: Bool { failed.withLock { $0 } }

    /// The first failure is the one reported; later ones (a commit after it) are only logged.
    func fail(_ error: any Error) {
        dispatchPrecondition(condition: .onQueue(queue))
        switch phase {
        case .writing:
            phase = .failed(error)
            stopSource()
        case .failed: break
        case .ended: assertionFailure("the writer stage failed after it ended: \(error)")
        }
        failed.withLock { $0 = true }
    }

    /// After the last batch: `write: replace` deletes untouched rows (only after the whole
    /// source was seen), then the run is over.
    func finish(_ end: SourceEnd) {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !hasEnded else {
            assertionFailure("the writer stage ends once")
            return
        }
        var wasInterrupted = false
        defer {
            commit()
            phase = .ended(failure.map { .failed($0) } ?? (wasInterrupted ? .interrupted : .finished))
            finished()
        }
        switch end {
        case .exhausted:
            if load == .staging && failure == nil {
                // The last staged batches first: the merge's fold reads them on another
                // connection, which sees committed rows only (a crash in the merge resumes to it).
                commit()
                if failure == nil { mergeStaged() }
            }
            switch replace.atEnd {
            case .deleteUntouched where failure == nil:
                do {
                    try tally.deleted(replace.deleteUntouched(from: store, after: tally.saved, logger: logger))
                } catch {
                    fail(error)
                }
            case .skipAfterResume:
                logger.warning(
                    "replace.skipped",
                    metadata: [
                        LogKey.reason: "a resumed run cannot know every row its source holds; no row is deleted"
                    ])
            default: break
            }
        case .interrupted:
            wasInterrupted = true
            if replace.atEnd != .nothing {
                logger.warning("replace.skipped", metadata: [LogKey.reason: "the run was interrupted; no row is deleted"])
            }
        case .failed(let error):
            fail(error)
        }
    }

    /// Commits the batches saved since the last commit and publishes their counters.
    func commit() {
        dispatchPrecondition(condition: .onQueue(queue))
        commits.ended()
        redo.transactionEnded()
        do {
            let clock = ContinuousClock()
            let started = clock.now
            guard try store.commit() else { return }
            let elapsed = clock.now - started
            metrics?.recordCommit(elapsed)
            if logger.logLevel <= .debug {
                let ms = elapsed.inSeconds * 1000
                logger.debug(
                    "batch.committed",
                    metadata: [
                        LogKey.records: .int(tally.uncommittedRecords), LogKey.pages: .int(tally.saved.pages - counters.pages),
                        "commit_ms": .seconds(ms),
                    ])
            }
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
            fail(error)
            return
        }
        // Between transactions: a load whose database outgrew the page cache goes on staged.
        guard load != .staging, case .writing = phase else { return }
        do {
            let records = tally.saved.records - recordsAtLastTurnCheck
            recordsAtLastTurnCheck = tally.saved.records
            if try store.turnStaged(at: .betweenTransactions(records: records)) == .staging {
                publishLoad()
                logger.info("bulk.started", metadata: [LogKey.records: .int(tally.saved.records)])
            }
        } catch {
            logger.error("batch.failed", metadata: [LogKey.error: "\(error)", LogKey.seq: .int(0)])
            fail(error)
        }
    }
}
