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
    /// `write: replace`: the root entity, and the identities of it this run wrote (kept rows).
    /// `write: replace`: the root entities whose untouched rows the run deletes at its end (one
    /// for a pipeline; each replacing resource's, with `resources:`).
    private let replaceEntities: [Int]
    /// Per replaced entity, the identities the run's batches held.
    private var touched: [Int: Set<IdentityKey>] = [:]
    /// The entities a replaced entity's `delete: cascade` reaches, and the identities of theirs
    /// the run wrote: a cascade from an untouched row spares them (it deleted a row this run
    /// stored, and the next run inserted it again).
    private let cascadeTargets: [Int]
    private var written: [Int: Set<IdentityKey>] = [:]
    /// Per replaced entity with a `scope:`: its scope column's slot, and the values the run saw there.
    private var scopes: [Int: (column: String, slot: Int, seen: Set<ScalarValue>)] = [:]
    /// The rows this run counted, so each counts once (inserted, updated or unchanged).
    var ledger: RunLedger
    /// The pipeline's model: entity names for the per-entity counts.
    let model: EntityModel
    let runID: String
    /// What `write: replace` does at the end of this run.
    private let replace: ReplaceAtEnd
    let logger: Logger
    private let loggedRejectionLimit: Int
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

    /// The run's committed counters (read by the runner after `finished` fired).
    private(set) var counters: RunCounters
    /// The counters including the batches saved since the last commit (the writer queue's, as
    /// everything here; WriterStage+Merge.swift counts a staged merge into them).
    var saved: RunCounters

    /// A joined run: each batch that ends on a whole page is committed with the units it holds
    /// (a page in parts is never committed half).
    let unitTransactions: Bool
    private let commitRecords: Int
    private let commitInterval: Double
    /// When the open transaction's first batch was saved.
    /// When the open transaction's first batch was saved (``RunOptions/timers``' clock).
    private var transactionStart: Double?
    private let timers: any RunTimers
    /// The number of the last batch saved.
    private var lastSaved = 0
    /// Bumped by each commit, so a pending commit timer knows its transaction is gone.
    private var commitGeneration = 0
    private let committed = Atomic<Int>(0)

    /// The number of the last batch committed. Safe from any queue.
    var committedBatch: Int { committed.load(ordering: .acquiring) }
    private var loggedRejections = 0
    /// `--max-reject-rows`, and how many `_ingot_rejects` rows this run has stored (a resumed
    /// run stored all of its rejections up to the cap).
    private let maxRejectRows: Int
    private var storedRejectRows: Int
    /// The `rejects.truncated` warning was logged (once per process).
    private var rejectRowsTruncated = false
    /// The run's archive, named by the `rejects.truncated` warning.
    private let archivePath: String?
    private let pipeline: String
    /// Commit latency goes here, if the run has metrics.
    private let metrics: RunMetrics?
    /// `incremental.param` and the highest cursor value committed so far.
    private let incrementalKey: String?
    private var incrementalMax: String?
    /// Why saving failed, if it did (read by the runner after `finished` fired).
    var failure: (any Error)? {
        switch phase {
        case .failed(let error), .ended(.failed(let error)): error
        case .writing, .ended: nil
        }
    }

    /// The run was stopped before its source was exhausted (read by the runner after `finished`).
    var interrupted: Bool {
        if case .ended(.interrupted) = phase { true } else { false }
    }

    private var hasEnded: Bool {
        if case .ended = phase { true } else { false }
    }

    /// Counts what a write did, inside its `then`: the store's own counts in a run shared by
    /// several jobs, else the run's ledger (each row once per run).
    func count(_ resolved: ResolvedBatch, _ result: WriteResult, into outcome: inout BatchOutcome) {
        if let counts = result.counts {
            outcome.recount(counts)
        } else {
            ledger.count(resolved, unchanged: result.unchanged, into: &outcome)
        }
    }

    /// The writes of the open transaction, in order, to redo when the database refuses a value
    /// of a later batch (it rolls the whole transaction back): each batch as the assembler
    /// prepared it (its lookups are redone) with the progress it recorded. Cleared at each
    /// commit; a transaction holding more than ``maxRetainedBytes`` of them commits early.
    var openWrites: [(batch: PreparedBatch, progress: RunProgress?)] = []
    var retainedBytes = 0
    /// The records saved when the writer last asked the store whether the load should turn staged.
    private var recordsAtLastTurnCheck = 0
    /// The most page bytes of batches an open transaction keeps for a redo. 32 MiB.
    static let maxRetainedBytes = 32 << 20
    /// A value was refused in the open transaction: the identities the assembler counted as
    /// written but not committed may not be, so later batches are looked up again.
    var refusedInTransaction = false
    /// The run's page prints, for the next run's refresh (WriterStage+Prints.swift).
    var prints: PrintRecorder
    /// Set once the run's prints are dropped: the lanes stop making footprints, and the source
    /// stops digesting pages (unless a refresh plan needs the digests). Read from any queue.
    let printsOff: StopFlag
    /// Where the records are in a page, for the coding path of a record the database refuses.
    let recordsPath: String
    /// A pipeline with several resources: their names, by index (counts per resource).
    let resourceNames: [String]?

    init(
        store: any IngestStore, config: PipelineConfig, runID: String, options: RunOptions, logger: Logger,
        shared: SharedCounters, initialCounters: RunCounters = RunCounters(), resumed: Bool = false, metrics: RunMetrics? = nil,
        archivePath: String? = nil, keepsPrints: Bool = false, stopSource: @escaping @Sendable () -> Void = {},
        finished: @escaping @Sendable () -> Void
    ) {
        self.stopSource = stopSource
        self.printsOff = StopFlag()
        self.prints = PrintRecorder(keeps: keepsPrints, maxBytes: options.maxPrintBytes, off: printsOff)
        self.maxRejectRows = max(0, options.maxRejectRows)
        self.storedRejectRows = min(initialCounters.rejectedRecords + initialCounters.rejectedPages, max(0, options.maxRejectRows))
        self.archivePath = archivePath
        self.recordsPath = config.recordsPath.joined(separator: ".")
        self.resourceNames = config.hasSeveralResources ? config.resources.map(\.name) : nil
        self.metrics = metrics
        self.store = store
        self.model = config.model
        let layouts = EntityLayout.layouts(of: config.model)
        self.resolver = BatchResolver(model: config.model, layouts: layouts, rootRules: config.rootWriteRules)
        self.ledger = RunLedger(layouts: layouts)
        for (entity, column) in config.replaceScopes {
            if let slot = layouts[entity].columns.firstIndex(where: { $0.name == column }) {
                scopes[entity] = (column, slot, [])
            }
        }
        self.replaceEntities = config.replacedEntities
        self.cascadeTargets = WriterStage.reached(from: config.replacedEntities, model: config.model, layouts: layouts)
        self.runID = runID
        self.pipeline = config.name
        self.incrementalKey = config.incremental.map { "incremental:" + $0.param }
        self.counters = initialCounters
        self.saved = initialCounters
        self.commitRecords = max(1, options.commitRecords)
        self.commitInterval = options.commitInterval
        self.timers = options.timers
        self.unitTransactions = options.join != nil
        // The touched rows of an earlier process are gone: a resumed run cannot tell what it did
        // not see. A joined run's last job deletes (PipelineRunner+Join.swift).
        self.replace =
            config.replacedEntities.isEmpty || options.join != nil ? .nothing : resumed ? .skipAfterResume : .deleteUntouched
        self.logger = logger
        self.loggedRejectionLimit = options.loggedRejectionLimit
        self.shared = shared
        self.finished = finished
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
            if store.isStaging && failure == nil {
                // The last staged batches first: the merge's fold reads them on another
                // connection, which sees committed rows only (a crash in the merge resumes to it).
                commit()
                if failure == nil { mergeStaged() }
            }
            switch replace {
            case .deleteUntouched where failure == nil: deleteUntouched()
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
            if replace != .nothing {
                logger.warning("replace.skipped", metadata: [LogKey.reason: "the run was interrupted; no row is deleted"])
            }
        case .failed(let error):
            fail(error)
        }
    }

    /// Saves a batch: rows, links, rejections and counters, in the open transaction; commits when
    /// the transaction is big or old enough. Does nothing once the run has failed.
    func save(_ batch: PreparedBatch) {
        dispatchPrecondition(condition: .onQueue(queue))
        let pages = batch.pages
        guard case .writing = phase, !pages.isEmpty else { return }
        // A joined job's staged stretch of units that this batch would not continue is written
        // first (PGStore+JoinedStaging.swift); this batch goes batch by batch.
        do {
            if try store.stagedStretchBreaks(at: pages.units) { writeStretch() }
        } catch {
            logger.error("batch.failed", metadata: [LogKey.error: "\(error)", LogKey.seq: .int(pages.first?.seq ?? 0)])
            fail(error)
        }
        guard case .writing = phase else { return }
        var (next, rejections) = tally(pages)
        let (newMax, state) = keptValues(after: pages)
        // Only a whole page moves the resume point: a crash after part of a page was committed
        // redoes the whole page (re-applying its first parts is harmless).
        func progress(_ outcome: BatchOutcome) -> RunProgress {
            var committed = next
            committed.add(outcome, model: model)
            return RunProgress(
                runID: runID, counters: committed, lastSeq: pages.last { $0.isLastPart }?.seq,
                resumeState: pages.last { $0.isLastPart && $0.resumeState != nil }?.resumeState,
                rejections: storable(rejections + outcome.rejections), kept: state)
        }
        do {
            try stageFromFirstBatchIfDue(batch, records: next.records - saved.records)
            let (resolved, outcome) = try write(batch, progress: progress)
            incrementalMax = newMax
            noteWritten(resolved)
            next.add(outcome, model: model)
            rejections += outcome.rejections
            prints.keep(pages, refused: !outcome.rejections.isEmpty)
            saved = next
            lastSaved = batch.number
            storedRejectRows = min(maxRejectRows, storedRejectRows + rejections.count)
            log(rejections)
        } catch {
            saveFailed(batch, error)
            return
        }
        commitIfDue(pages)
    }

    /// The run's counters with `pages` read, before their rows are written, and the pages'
    /// rejections.
    private func tally(_ pages: [DecodedPage]) -> (RunCounters, [RecordRejection]) {
        var next = saved
        var rejections: [RecordRejection] = []
        for page in pages {
            // A page in parts counts once, when its last part is saved.
            if page.isLastPart { next.pages += 1 }
            next.records += page.recordCount
            next.skippedRecords += page.skipped
            for (attribute, n) in page.invalidValues { next.invalidValues[attribute, default: 0] += n }
            if let names = resourceNames, names.indices.contains(page.resource) {
                if page.isLastPart { next.resourcePages[names[page.resource], default: 0] += 1 }
                next.resourceRecords[names[page.resource], default: 0] += page.recordCount
            }
            next.bytes += page.pageBytes
            if page.pageRejected { next.rejectedPages += 1 } else { next.rejectedRecords += page.rejections.count }
            for r in page.rejections {
                if r.recordIndex != nil { next.entities[r.entity, default: EntityCounts()].rejected += 1 }
                next.rejectsByReason[r.code.rawValue, default: 0] += 1
            }
            rejections += page.rejections
            if page.leftOut {
                next.unchangedPages += 1
                if let encoded = page.encodedFootprint, let rows = try? PageFootprint(decoding: encoded) {
                    countLeftOut(rows, into: &next)
                }
            }
            if let rows = page.unchangedRows { countLeftOut(rows, into: &next) }
        }
        return (next, rejections)
    }

    /// The incremental cursor after `pages`, and the kept values to record with them.
    private func keptValues(after pages: [DecodedPage]) -> (String?, [(pipeline: String, key: String, value: String)]) {
        var newMax = incrementalMax
        for page in pages {
            if let value = page.incrementalMax, newMax.map({ $0.utf8.lexicographicallyPrecedes(value.utf8) }) ?? true { newMax = value }
        }
        var state: [(pipeline: String, key: String, value: String)] = []
        if let key = incrementalKey, let value = newMax, value != incrementalMax { state.append((pipeline, key, value)) }
        return (newMax, state)
    }

    /// A full first batch whose records came in no identity order, into empty tables: the load is
    /// staged from it (``IngestStore/startStagingAtFirstBatch()``).
    private func stageFromFirstBatchIfDue(_ batch: PreparedBatch, records: Int) throws {
        guard batch.number == 1, !batch.arrivedInIdentityOrder, records >= WriterStage.firstBatchToStage else { return }
        // A store that could not stage says why (a staging file it could not make).
        let declined = store.stagingDeclined
        if try store.startStagingAtFirstBatch() {
            // A joined job's first batch that holds no stretch of units: the store gives the
            // staged load up at once (PGStore+JoinedStaging.swift).
            _ = try store.stagedStretchBreaks(at: batch.pages.units)
            if store.isStaging { logger.info("bulk.started", metadata: [LogKey.records: .int(saved.records)]) }
        } else if let reason = store.stagingDeclined, reason != declined {
            logger.notice("bulk.declined", metadata: [LogKey.reason: "\(reason)"])
        }
    }

    /// Resolves and writes `batch` with its progress, in the open transaction; a batch the
    /// database refuses a value of is written record by record (WriterStage+Refused.swift).
    private func write(
        _ batch: PreparedBatch, progress: (BatchOutcome) -> RunProgress
    ) throws -> (ResolvedBatch, BatchOutcome) {
        var batch = batch
        if refusedInTransaction { batch.refs = nil }
        let resolved: ResolvedBatch
        do {
            resolved = try resolver.resolve(batch, store: store, fillsDefaults: !store.isStaging)
        } catch {
            try? store.rollback()
            throw error
        }
        var outcome = resolved.outcome
        var recorded: RunProgress?
        var retries = 0
        do {
            try store.write(resolved) { result in
                count(resolved, result, into: &outcome)
                retries = result.retries
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

    /// What `write: replace`, cascades and replace scopes need to know of the rows written.
    private func noteWritten(_ resolved: ResolvedBatch) {
        for entity in replaceEntities { touched[entity, default: []].formUnion(resolved.rows.merged[entity].index.keys) }
        for entity in cascadeTargets { written[entity, default: []].formUnion(resolved.rows.merged[entity].index.keys) }
        for (entity, scope) in scopes {
            let rows = resolved.rows.merged[entity]
            for row in rows.rows where row.mask.contains(scope.slot) {
                if let value = rows.storage.value(row.valueStart + scope.slot), value != .null { scopes[entity]?.seen.insert(value) }
            }
        }
    }

    /// A batch that could not be saved: a unit lost to another job leaves the rest of the run
    /// going; anything else rolls the open transaction back and fails the run.
    private func saveFailed(_ batch: PreparedBatch, _ error: any Error) {
        openWrites = []
        retainedBytes = 0
        saved = counters
        if let lost = error as? StoreError, lost.kind == .claimLost {
            // This job stalled past a lease and another job took a unit over: the transaction was
            // rolled back and its other units handed back to the queue; their work counts elsewhere.
            logger.warning("unit.lost", metadata: ["units": "\(lost.units.map(String.init).joined(separator: ","))"])
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
            if pages.last?.isLastPart == true { commit() }
            return
        }
        if transactionStart == nil {
            // The transaction's first batch: commit it after `commitInterval` even if no batch follows.
            transactionStart = timers.now()
            let generation = commitGeneration
            // Weak: a run that ended does not keep its stage (and its store's connections)
            // alive until the timer fires.
            timers.after(commitInterval, on: queue) { [weak self] in
                guard let self else { return }
                if !hasEnded && commitGeneration == generation { commit() }
            }
        }
        let age = timers.now() - (transactionStart ?? timers.now())
        if saved.records - counters.records >= commitRecords || age >= commitInterval || retainedBytes >= WriterStage.maxRetainedBytes {
            commit()
        }
    }

    /// Commits the batches saved since the last commit and publishes their counters.
    func commit() {
        dispatchPrecondition(condition: .onQueue(queue))
        commitGeneration += 1
        transactionStart = nil
        openWrites = []
        retainedBytes = 0
        refusedInTransaction = false
        guard store.hasUncommittedBatches else { return }
        do {
            let clock = ContinuousClock()
            let started = clock.now
            try store.commit()
            let elapsed = clock.now - started
            metrics?.recordCommit(elapsed)
            if logger.logLevel <= .debug {
                let ms = elapsed.inSeconds * 1000
                logger.debug(
                    "batch.committed",
                    metadata: [
                        LogKey.records: .int(saved.records - counters.records), LogKey.pages: .int(saved.pages - counters.pages),
                        "commit_ms": .seconds(ms),
                    ])
            }
            counters = saved
            committed.store(lastSaved, ordering: .releasing)
            shared.value.withLock { $0 = counters }
        } catch {
            logger.error("commit.failed", metadata: [LogKey.error: "\(error)"])
            // Whatever part of the transaction did not commit is rolled back now, so that nothing
            // later (the run's end commits what is open) commits a resume point past rows that
            // are not durable: a staging file that failed its commit keeps its rows out, and the
            // database's progress must follow it.
            try? store.rollback()
            saved = counters
            fail(error)
            return
        }
        // Between transactions: a load whose database outgrew the page cache goes on staged.
        guard !store.isStaging, case .writing = phase else { return }
        do {
            let records = saved.records - recordsAtLastTurnCheck
            recordsAtLastTurnCheck = saved.records
            if try store.startStagingIfOutgrown(records: records) {
                logger.info("bulk.started", metadata: [LogKey.records: .int(saved.records)])
            }
        } catch {
            logger.error("batch.failed", metadata: [LogKey.error: "\(error)", LogKey.seq: .int(0)])
            fail(error)
        }
    }

    /// Counts, stores and logs rows a staged merge refused, as rejected records (the records
    /// that made a row are not known any more: they were folded into it), in the merge's
    /// transaction.
    func recordMergeRefusals(_ refusals: [RecordRejection]) throws {
        prints.drop("the staged merge refused rows, whose pages it cannot name")
        for r in refusals { saved.entities[r.entity, default: EntityCounts()].rejected += 1 }
        saved.rejectedRecords += refusals.count
        saved.rejectsByReason[RejectReason.unstorable.rawValue, default: 0] += refusals.count
        let stored = storable(refusals)
        storedRejectRows = min(maxRejectRows, storedRejectRows + refusals.count)
        try store.recordProgress(RunProgress(runID: runID, counters: saved, lastSeq: nil, resumeState: nil, rejections: stored))
        log(refusals)
    }

    /// `write: replace`: deletes the root rows this run did not touch, only after a complete view
    /// of the source (no rejected page or record).
    private func deleteUntouched() {
        guard saved.rejectedPages == 0 && saved.rejectedRecords == 0 else {
            logger.warning(
                "replace.skipped",
                metadata: [
                    LogKey.reason:
                        "the run rejected \(saved.rejectedPages) pages and \(saved.rejectedRecords) records; its view of the source is incomplete, so no row is deleted"
                ])
            return
        }
        do {
            for entity in replaceEntities {
                let scope = scopes[entity].map { (column: $0.column, values: Array($0.seen)) }
                saved.deleted += try store.deleteUntouched(entity: entity, keeping: touched[entity] ?? [], sparing: written, scope: scope)
            }
        } catch {
            fail(error)
        }
    }

    /// The entities `delete: cascade` relationships reach from `roots` (the roots too, when a
    /// cascade comes back to them).
    static func reached(from roots: [Int], model: EntityModel, layouts: [EntityLayout]) -> [Int] {
        let edges = CascadeEdge.edges(model, layouts)
        var seen = Set<Int>()
        var frontier = roots
        while let next = frontier.popLast() {
            for edge in edges where edge.from == next && seen.insert(edge.to).inserted { frontier.append(edge.to) }
        }
        return seen.sorted()
    }

    /// The rejections of a batch that still fit under `--max-reject-rows`; the first time some do
    /// not, a `rejects.truncated` warning (once per process: the counts keep every one).
    private func storable(_ rejections: [RecordRejection]) -> [RecordRejection] {
        let room = maxRejectRows - storedRejectRows
        guard rejections.count > room else { return rejections }
        if !rejectRowsTruncated {
            rejectRowsTruncated = true
            var metadata: Logger.Metadata = [
                "max_reject_rows": .int(maxRejectRows),
                LogKey.reason:
                    "further rejections are counted per reason and entity, not stored in _ingot_rejects; the archive holds every page",
            ]
            if let archivePath { metadata[LogKey.archive] = "\(archivePath)" }
            logger.warning("rejects.truncated", metadata: metadata)
        }
        return Array(rejections.prefix(max(0, room)))
    }

    private func log(_ rejections: [RecordRejection]) {
        for r in rejections {
            loggedRejections += 1
            if loggedRejections > loggedRejectionLimit { break }
            var metadata: Logger.Metadata = [
                LogKey.entity: "\(r.entity)", LogKey.codingPath: "\(r.codingPath)", LogKey.reason: "\(r.reason)",
                LogKey.source: "\(r.source)",
            ]
            if let archive = r.archive { metadata[LogKey.archive] = "\(archive)" }
            if let index = r.recordIndex {
                metadata[LogKey.recordIndex] = .int(index)
                logger.warning("record.rejected", metadata: metadata)
            } else {
                metadata[LogKey.bytes] = .int(r.rawLength)
                logger.warning("page.rejected", metadata: metadata)
            }
            if loggedRejections == loggedRejectionLimit {
                logger.warning(
                    "record.rejected.more",
                    metadata: [
                        LogKey.reason: "further rejections are counted and stored in _ingot_rejects (up to --max-reject-rows), not logged"
                    ])
            }
        }
    }
}

/// The run's committed counters, readable from any queue (the progress timer, `stop()` callers).
final class SharedCounters: Sendable {
    let value = Mutex(RunCounters())
}

/// What `write: replace` does when a run's source is exhausted.
enum ReplaceAtEnd: Sendable {
    /// `write: merge`.
    case nothing
    /// Delete the root rows the run did not touch (when it rejected nothing).
    case deleteUntouched
    /// A resumed run: it cannot know what the earlier process touched, so it deletes nothing and says so.
    case skipAfterResume
}
