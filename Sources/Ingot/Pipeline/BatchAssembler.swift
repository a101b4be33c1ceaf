import Dispatch

/// Reorders decoded pages by `seq` and cuts them into batches of about `batchRecords` records
/// (or fewer, once a batch's pages hold `batchBytes` bytes: big records must not make big
/// batches), handing each to the ``WriterStage``. Runs on its own serial queue, so pages keep being
/// collected (and lanes keep decoding) while the writer saves the previous batch.
///
/// A batch also closes on time: `interval` seconds (the commit interval) after its first page
/// came, on the next whole page. A slow source (a page every 300 ms) would otherwise fill
/// `batchRecords` only after minutes, and nothing it fetched meanwhile would be committed: a
/// `kill -9` would cost all of it. So a transaction holds about two commit intervals of a slow
/// source's work at most (the batch's, then the writer's own).
///
/// Backpressure: at most one batch is being saved while the next one is assembled. When the next
/// one is full and the writer is still busy, `deliver` blocks this queue; pages then stop being
/// consumed, the source's in-flight slots run out, and the source waits.
///
/// Every field is confined to `queue`.
final class BatchAssembler: @unchecked Sendable {  // confined to `queue`
    let queue = DispatchQueue(label: "ingot.assembler", qos: .userInitiated)
    private let writer: WriterStage
    /// Records per batch, per resource (by index): a batch holds one resource's pages when their
    /// limits differ.
    private let batchLimits: [Int]
    private let byteLimit: Int
    /// Called with a page's raw byte count once it is folded (its in-flight slot is free).
    private let pageConsumed: @Sendable (Int) -> Void
    /// One batch may be saving while the next is assembled.
    private let saving = DispatchSemaphore(value: 1)

    /// Decoded pages (or parts of pages, in order) that arrived before their turn.
    private var waiting: [Int: [DecodedPage]] = [:]
    private var nextSeq = 1
    /// The unit (and claim) of the last part folded, and that part's number within it
    /// (``DecodedPage/unitPart``).
    private var lastUnit: UnitRef?
    private var unitPart = 0
    private var sourceEnd: (total: Int, end: SourceEnd)?
    private var batch: [DecodedPage] = []
    private var batchRecords = 0
    /// The batch delivered last held tombstones (`delete_when:`).
    private var afterTombstones = false
    /// The rows and links the batch's records make (``DecodedPage/cost``).
    private var batchCost = 0
    private var batchBytes = 0
    /// Batches handed to the writer so far.
    private var delivered = 0
    /// The identities of the delivered batches the writer has not committed yet: only the keys,
    /// so a batch itself is freed once saved.
    private var uncommitted = UncommittedIdentities()
    /// A refresh's plan, told of each decoded page (its changed pages' rows decide which pages
    /// after them are left out).
    var refresh: RefreshPlan?
    /// How long a batch stays open after its first page, at most (seconds), and the clock.
    private let interval: Double
    private let timers: any RunTimers
    /// Bumped by each delivery, so a pending close-on-time timer knows its batch is gone.
    private var generation = 0

    init(
        writer: WriterStage, batchLimits: [Int], byteLimit: Int = RunOptions.defaultBatchBytes, firstSeq: Int = 1,
        interval: Double = .infinity, timers: any RunTimers = DispatchTimers(), pageConsumed: @escaping @Sendable (Int) -> Void
    ) {
        self.interval = interval
        self.timers = timers
        self.writer = writer
        self.nextSeq = firstSeq
        self.batchLimits = batchLimits.isEmpty ? [RunOptions.defaultBatchRecords] : batchLimits.map { max(1, $0) }
        self.byteLimit = max(1, byteLimit)
        self.pageConsumed = pageConsumed
    }

    func receive(_ page: DecodedPage) {
        dispatchPrecondition(condition: .onQueue(queue))
        refresh?.absorb(page)
        waiting[page.seq, default: []].append(page)
        drain()
    }

    /// The source produced `total` pages, then stopped for `end`.
    func sourceFinished(total: Int, end: SourceEnd) {
        dispatchPrecondition(condition: .onQueue(queue))
        sourceEnd = (total, end)
        drain()
    }

    /// Hands the open batch to the writer now, unless it ends inside a page (its other parts are
    /// on their way). A joined run's source calls it before it waits for work: the units in the
    /// batch are claimed by this job, and other jobs wait for them to be committed. The
    /// close-on-time timer calls it too.
    func flush() {
        dispatchPrecondition(condition: .onQueue(queue))
        guard !batch.isEmpty, batch.last?.isLastPart == true, sourceEnd == nil else { return }
        deliver(last: false)
    }

    // MARK: - Internals

    private func drain() {
        while var parts = waiting.removeValue(forKey: nextSeq), !parts.isEmpty {
            var page = parts.removeFirst()
            // Its part of its unit, counted as the unit's parts come, in order (UnitOrder).
            if let unit = page.unit {
                unitPart = unit == lastUnit ? unitPart + 1 : 0
                lastUnit = unit
                page.unitPart = unitPart
            }
            if !parts.isEmpty { waiting[nextSeq] = parts }
            if page.isLastPart { nextSeq += 1 }
            if !writer.hasFailed {
                // A page's size: its JSON, or its stored text when that is bigger (dates from numbers),
                // plus its rejections (what they hold besides their text, which the JSON counts):
                // a page of a million `{}` makes a million rejections, bounded like records.
                let size =
                    max(page.bytes, page.storage.text.count) + page.rejections.count * BatchAssembler.rejectionBytes
                    + (page.encodedFootprint?.count ?? 0)
                if !batch.isEmpty && batchBytes + size > byteLimit { deliver(last: false) }
                // A joined run's batch holds units in increasing order (a unit taken over from
                // another job may come late): its rows fold later-wins, unit by unit. One whose
                // rows are exchanged between the jobs holds consecutive units: no other job's
                // unit lies between two of its own, so its folded rows stand for one stretch of
                // the run (StagedExchange).
                if let unit = page.unit, let last = batch.last?.unit,
                    unit.seq < last.seq || (writer.defersBatches && unit.seq > last.seq + 1)
                {
                    deliver(last: false)
                }
                let limit = batchLimits.indices.contains(page.resource) ? batchLimits[page.resource] : batchLimits[0]
                // Resources of different batch sizes do not share a batch.
                if let last = batch.last, last.resource != page.resource, last.isLastPart, batchLimits.indices.contains(last.resource),
                    batchLimits[last.resource] != limit
                {
                    deliver(last: false)
                }
                if batch.isEmpty { closeOnTime() }
                batch.append(page)
                // A page a refresh left out counts its records: a batch holds as many such pages as
                // it would hold decoded ones.
                batchRecords += max(page.leftOut ? page.recordCount : page.records.count + page.rejections.count, 1)
                batchBytes += size
                batchCost += page.cost
                // A part that ends with a tombstone ends its batch: the batch's deletions come after
                // all of its writes, and the records after the tombstone go to the next batch.
                if batchRecords >= limit || batchBytes >= byteLimit || batchCost / MappingPlan.rowsPerRecord >= limit
                    || !page.deletions.isEmpty
                {
                    deliver(last: false)
                }
            }
            page.laneGate?.signal()
            if page.isLastPart { pageConsumed(page.pageBytes) }
        }
        if let end = sourceEnd, nextSeq > end.total {
            sourceEnd = nil
            deliver(last: true, end: end.end)
        }
    }

    /// Closes the batch just opened after ``interval``, if it is still open then (and ends on a
    /// whole page; else the page's last part closes it, when it comes).
    private func closeOnTime() {
        guard interval.isFinite else { return }
        let opened = generation
        // Weak: a run that ended does not keep its assembler (and the writer) until the timer fires.
        timers.after(interval, on: queue) { [weak self] in
            guard let self, generation == opened else { return }
            flush()
        }
    }

    /// What a ``RecordRejection`` holds besides its raw text, about: its fields and short strings.
    static let rejectionBytes = 256

    private func deliver(last: Bool, end: SourceEnd = .exhausted) {
        delivered += 1
        generation += 1
        // After a batch with tombstones, this one is looked up once that batch is written and
        // committed (WriterStage commits it at once): its deleted rows are then gone for the lookup.
        if afterTombstones {
            saving.wait()
            saving.signal()
        }
        afterTombstones = batch.contains { !$0.deletions.isEmpty }
        // Read what is committed before the lookup starts: a commit in between only makes the
        // lookup see rows it also counts as uncommitted, which is harmless.
        uncommitted.dropCommitted(through: writer.committedBatch)
        // A batch the store will stage, or defer to the run's end, is looked up by nothing (the
        // merge decides).
        let staged = writer.stagesBatches || writer.defersBatches
        var prepared = writer.resolver.prepare(
            batch, uncommitted: uncommitted, store: writer.store, staged: staged, unfolded: staged)
        prepared.number = delivered
        // The writer may stage a load from its first batch when it came in no identity order
        // (IngestStore.turnStaged(at: .firstBatch)); read on the pages as they came, before folding.
        if delivered == 1 { prepared.arrivedInIdentityOrder = BatchResolver.arrivedInIdentityOrder(batch) }
        if prepared.folded != nil { prepared.decoded = batch }
        // Nor is a later batch looked up against it.
        if let folded = prepared.folded, !staged {
            uncommitted.append(delivered, folded.merged.map(\.index.keys))
        }
        batch = []
        batchRecords = 0
        batchCost = 0
        batchBytes = 0
        saving.wait()
        writer.queue.async { [saving, writer, prepared] in
            writer.save(prepared)
            if last { writer.finish(end) }
            saving.signal()
        }
    }
}
