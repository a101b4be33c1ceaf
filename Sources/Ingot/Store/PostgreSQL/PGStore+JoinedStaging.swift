import Foundation

/// A joined job's staged load: a job of a shared run (`--join`) whose units come in one unbroken
/// stretch — the run's only job, or the first before others join — stages them as a single
/// job's first load is staged (PGStore+Staged.swift), and writes the stretch at once: its units
/// marked done, its folded rows copied in with their positions, in one transaction.
///
/// Why: batch by batch, a joined job does what a single job batch by batch does, and more (each
/// row's positions, a unit's claim): people-200k 4.2–4.7 s against 1.5–1.7 s for a single job's
/// staged first load (docs/performance-notes.md).
///
/// **Why one position is right.** Batch by batch, each column a row is given carries the position
/// of the unit that gave it, and a unit overwrites a column only when its position is not older
/// (PGStore+Join.swift). A stretch is units `a…b` in a row, all this job's: no other job's unit
/// lies between them. So against any other unit `u`, every unit of the stretch is older (`u > b`)
/// or newer (`u < a`) alike, and the fold of the stretch (the last record in it wins, key by key)
/// followed by one position `b` for every column and set it gives decides each column as the
/// units one by one would. When `b` is staged only in part (the stretch written while its page
/// was still coming), the position is that of `b`'s last part staged: `b`'s later parts, written
/// batch by batch, are newer ("Later pages win, across jobs" in docs/scale-out.md).
///
/// **When the stretch ends.** It is written when the job's part ends, when the source has ended
/// and the job would wait for units other jobs hold (they may wait for the stretch's), and before
/// a batch that would not continue it (another job claimed a unit between, or this job took over
/// an older one): that batch and every later one are written batch by batch. The copy goes
/// straight into the tables, in binary; where another job made one of its rows meanwhile (a
/// unique violation), or the server refuses a value, the stretch is merged the careful way
/// instead: in pieces under savepoints, upserted with their positions as joined batches are, a
/// refused row left out and rejected (PGStagedCopy).
///
/// A job killed before its stretch is written committed none of it: its units' leases run out and
/// other jobs take them over. Its staging file (named in `_ingot_state`, key
/// `staged_load:<run>:<job>`) is removed by the job that finishes the run, on its machine.
struct JoinedStretch {
    /// The units staged, in order.
    private(set) var units: [UnitRef] = []
    /// Whether the last unit's page is staged whole (not only its first parts: a page in parts).
    private(set) var lastUnitWhole = true
    /// The order key (``UnitOrder``) of the last part staged.
    private(set) var lastKey = 0

    /// The order key every row of the stretch is written at: past every part of its whole units,
    /// and — when its last unit is staged only in part — at that unit's last part staged, so the
    /// unit's later parts, written batch by batch, win over it as they would over their page's
    /// earlier records (JoinedOrderTests).
    var key: Int {
        guard let last = units.last else { return 0 }
        return lastUnitWhole ? UnitOrder.lastKey(seq: last.seq) : lastKey
    }

    /// The units whose pages are staged whole: all but a last one staged in part, whose other
    /// parts come in a later batch (the stretch may break before it, at a batch that goes on
    /// with another job's unit).
    var wholeUnits: [UnitRef] { lastUnitWhole ? units : Array(units.dropLast()) }

    var isEmpty: Bool { units.isEmpty }

    /// Whether a batch of `units` (in order) goes on the stretch: consecutive, from the
    /// stretch's last unit (a page in parts) or the next.
    func continues(with units: [UnitRef]) -> Bool {
        guard var previous = self.units.last?.seq ?? units.first.map({ $0.seq - 1 }) else { return true }
        for (k, unit) in units.enumerated() {
            guard unit.seq == previous + 1 || (k == 0 && unit == self.units.last) else { return false }
            previous = unit.seq
        }
        return true
    }

    /// Adds a batch of `units` (in order) whose last part's key is `lastKey`.
    mutating func add(_ batch: [UnitRef], lastKey: Int, endingItsPage: Bool) {
        for unit in batch where unit != units.last { units.append(unit) }
        self.lastKey = Swift.max(self.lastKey, lastKey)
        lastUnitWhole = endingItsPage
    }
}

extension PGJoinedStore {
    /// Whether a batch of `units` breaks the stretch (``SharedRunStore/stretchBreaks(at:)``): a
    /// stretch that staged nothing yet is given up instead, and the load goes batch by batch.
    func stretchBreaks(at units: [UnitRef]) throws -> Bool {
        guard joined != nil, tables.isStaging, !stretch.continues(with: units) else { return false }
        guard stretch.isEmpty else { return true }
        // Nothing staged yet: the load goes batch by batch from this batch on.
        dropStaging()
        return false
    }

    /// A staged load that staged nothing is given up: its file removed and forgotten.
    private func dropStaging() {
        guard case .staging(let staging) = tables.load else { return }
        staging.file.rollback()
        staging.published = true  // its close removes the file
        staging.close()
        try? tables.forgetStagingKey(staging.key)
        try? tables.moveLoad(to: .batchByBatch)
    }

    /// Writes the stretch, in the open transaction (or one it begins): its units marked done
    /// (still this job's, else ``StoreError/Kind/claimLost``), its folded rows copied with their
    /// positions — straight into the tables, or merged the careful way when that fails — then
    /// its batches' rejections and kept values. Counts as the copy or the merge counted.
    func mergeStretch(
        _ staging: PGStaging, _ join: JoinContext, fills: [[(slot: Int, value: ScalarValue, always: Bool)]],
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String, _ record: (seq: Int, index: Int)?) -> Void
    ) throws -> WriteResult {
        try tables.begin()
        let units = stretch.units
        var counts: [EntityCounts]
        var retries = 0
        do {
            // A last unit staged in part is not done: its other parts are written batch by batch,
            // at the same position, and mark it done (a job dying before then leaves it to be
            // taken over and written again whole, the same values at the same position).
            try markDone(Set(stretch.wholeUnits), join)
            // A stretch that is the whole run (the job was alone): no other unit of the run is
            // left to merge with, so its rows go in as a single job's, without positions — which
            // lose to every page of a later joined run, as a single run's rows do.
            let row = try tables.connection.execute("SELECT end_seq FROM _ingot_joins WHERE name = $1", [join.name])
            let end: Int? = row.first?[0].flatMap { Int($0) }
            let wholeRun = end != nil && units.first?.seq == 1 && stretch.wholeUnits.count == (end ?? 0) - 1
            let position =
                wholeRun ? nil : PGStagedCopy.Stretch(store: tables, position: join.position(stretch.key))
            let copied = try copyStretch(staging, fills: fills, position: position, retries: &retries)
            counts = copied.counts
            let refusals = copied.refusals
            for (entity, identity, reason, record) in refusals { refused(entity, identity, reason, record) }
            staging.file.rollback()
            try tables.recordRejectsAndKept(
                RunProgress(runID: staging.runID, counters: RunCounters(), rejections: stretchRejections, kept: try staging.keptValues()),
                join: join)
            try tables.connection.execute(
                "UPDATE _ingot_state SET value = $2 WHERE pipeline = '' AND key = $1", [staging.key, PGStaging.copiedMark + staging.path])
        } catch {
            // The units go back to the queue at once: other jobs take them over.
            let held = Set(units).union(unitsInTransaction)
            staging.file.rollback()
            try? tables.rollbackTransaction()
            tables.releaseUnits(held, join)
            throw error
        }
        try tables.moveLoad(to: .copied(staging))
        stretchRejections = []
        stretch = JoinedStretch()
        var result = WriteResult(counts: counts, retries: retries)
        result.reads = staging.file.shownReads
        return result
    }

    /// The stretch's folded rows copied in, under a savepoint: straight, then — when another job
    /// made one of its rows (a unique violation), a value is refused or not certain in binary —
    /// the careful way, as joined batches are; a deadlock is written again the careful way, up
    /// to three times. Its counts, and the rows the server refused.
    private func copyStretch(
        _ staging: PGStaging, fills: [[(slot: Int, value: ScalarValue, always: Bool)]], position: PGStagedCopy.Stretch?,
        retries: inout Int
    ) throws -> (counts: [EntityCounts], refusals: [(entity: Int, identity: IdentityKey, reason: String, record: (seq: Int, index: Int)?)])
    {
        let stagedBefore = tables.stagedInTransaction.count
        var careful = false
        var refusals: [(entity: Int, identity: IdentityKey, reason: String, record: (seq: Int, index: Int)?)] = []
        while true {
            do {
                refusals = []
                let counts = try tables.connection.inSavepoint("ingot_stretch") {
                    try tables.copyStaged(staging, fills: fills, careful: careful, stretch: position) { refusals.append(($0, $1, $2, $3)) }
                }
                return (counts, refusals)
            } catch {
                // Another job made one of these rows (a unique violation), or a value is refused
                // or not certain in binary: merged the careful way, as joined batches are. Jobs
                // writing the same rows can wait on each other in a cycle, and the server then
                // aborts one (`deadlock_detected`): written again, the careful way, up to three
                // times, as a joined batch is (PGStore+Join.swift).
                let deadlock = (error as? StoreError)?.sqlState == PGStore.deadlockDetected
                let refused = !careful && (StoreError.refusedValue(error) != nil || error is PGBinaryCopy.Unfit)
                guard refused || (deadlock && retries < 3) else { throw error }
                if deadlock { retries += 1 }
                tables.forgetStaging(after: stagedBefore)
                staging.file.rollback()
                careful = true
            }
        }
    }
}

extension PGStore {
    /// The staging files of joined run `runID`'s jobs left behind (a job killed before its
    /// stretch was written, or before it removed its file): those on this machine removed, every
    /// key forgotten. Called by the job that finishes the run, in its transaction.
    func forgetStretches(of runID: String) throws {
        let keys = try connection.execute(
            "DELETE FROM _ingot_state WHERE pipeline = '' AND starts_with(key, $1) RETURNING value", [PGStaging.stateKey(runID) + ":"])
        for row in keys {
            guard let value = row[0] ?? nil else { continue }
            let path = PGStaging.path(named: value)
            // This job's own file stays until it closes it.
            if path != staging?.path { PGStaging.remove(at: path, directory: stagingFiles.directory) }
        }
    }
}
