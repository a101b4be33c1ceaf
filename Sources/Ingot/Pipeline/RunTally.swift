/// The run's counts as its writer keeps them: what is committed, what the open transaction saved
/// on top of it, each row counted once per run (``RunLedger``), the batch last saved, and the
/// incremental cursor and sync URL a batch records with its rows.
///
/// A value the ``WriterStage`` holds (confined to its queue, as everything there) and that
/// `RunTallyTests` build alone: a batch is read (`reading(_:)`: pages, records, rejections,
/// rows a refresh left out), written, then `saved(_:batch:incrementalMax:)`; a commit makes the
/// saved counters the committed ones, a rollback the other way round.
struct RunTally {
    /// What is committed: the run's counters once its writer has ended.
    private(set) var committed: RunCounters
    /// `committed` and what the open transaction saved since.
    private(set) var saved: RunCounters
    /// The number of the last batch saved.
    private(set) var lastSaved = 0
    /// The highest incremental cursor value saved so far.
    private(set) var incrementalMax: String?
    private var ledger: RunLedger
    private let entityNames: [String]
    /// A pipeline with several resources: their names, by index (counts per resource).
    private let resourceNames: [String]?
    private let pipeline: String
    /// `incremental:` and the cursor's parameter: the key the cursor is kept under.
    private let incrementalKey: String?

    init(config: PipelineConfig, layouts: [EntityLayout], initial: RunCounters) {
        committed = initial
        saved = initial
        ledger = RunLedger(layouts: layouts)
        entityNames = config.model.entities.map(\.name)
        resourceNames = config.hasSeveralResources ? config.resources.map(\.name) : nil
        pipeline = config.name
        incrementalKey = config.incremental.map { "incremental:" + $0.param }
    }

    /// The records saved in the open transaction.
    var uncommittedRecords: Int { saved.records - committed.records }

    /// The counters with `pages` read, before their rows are written, and the pages' rejections.
    /// The rows a refresh left as stored are counted unchanged here (the ledger marks them).
    mutating func reading(_ pages: [DecodedPage]) -> (RunCounters, [RecordRejection]) {
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

    /// The incremental cursor after `pages`, and the kept values to record with them (the cursor
    /// when it moved, the last sync URL).
    func keptValues(after pages: [DecodedPage]) -> (max: String?, kept: [(pipeline: String, key: String, value: String)]) {
        var newMax = incrementalMax
        for page in pages {
            if let value = page.incrementalMax, newMax.map({ $0.utf8.lexicographicallyPrecedes(value.utf8) }) ?? true { newMax = value }
        }
        var kept: [(pipeline: String, key: String, value: String)] = []
        if let key = incrementalKey, let value = newMax, value != incrementalMax { kept.append((pipeline, key, value)) }
        if let sync = pages.last(where: { $0.syncState != nil })?.syncState { kept.append((pipeline, PipelineConfig.syncKey, sync)) }
        return (newMax, kept)
    }

    /// Batch `batch` saved in the open transaction, the counters at `next`.
    mutating func saved(_ next: RunCounters, batch: Int, incrementalMax: String?) {
        saved = next
        lastSaved = batch
        self.incrementalMax = incrementalMax
    }

    /// Rows `write: replace` deleted at the run's end, in the open transaction.
    mutating func deleted(_ rows: Int) { saved.deleted += rows }

    /// The open transaction committed.
    mutating func commit() { committed = saved }

    /// The open transaction rolled back: what it saved is not counted.
    mutating func rollBack() { saved = committed }

    /// Counts what a write did: the store's own counts in a run shared by several jobs, else the
    /// run's ledger (each row once per run).
    mutating func count(_ resolved: ResolvedBatch, _ result: WriteResult, into outcome: inout BatchOutcome) {
        if let counts = result.counts {
            outcome.recount(counts)
        } else {
            ledger.count(resolved, unchanged: result.unchanged, into: &outcome)
        }
    }

    /// A row a staged merge found stored (`changed`: it changed it), counted in `counts` once.
    mutating func countStored(_ entity: Int, _ identity: IdentityKey, changed: Bool, into counts: inout EntityCounts) {
        ledger.countStored(entity, identity, changed: changed, into: &counts)
    }

    /// Adds what a staged merge wrote (`written`, per entity, as the database counted it) and what
    /// its callbacks counted of stored rows (`stored`) to the saved counters; returns the rows
    /// inserted.
    mutating func addMerged(_ written: [EntityCounts], stored: [EntityCounts]) -> Int {
        var inserted = 0
        for (entity, var counts) in written.enumerated() where entityNames.indices.contains(entity) && stored.indices.contains(entity) {
            counts.stubs += stored[entity].stubs
            counts.updated += stored[entity].updated
            counts.unchanged = stored[entity].unchanged
            let name = entityNames[entity]
            saved.entities[name, default: EntityCounts()].inserted += counts.inserted
            saved.entities[name, default: EntityCounts()].stubs += counts.stubs
            saved.entities[name, default: EntityCounts()].updated += counts.updated
            saved.entities[name, default: EntityCounts()].unchanged += counts.unchanged
            saved.inserted += counts.inserted
            saved.updated += counts.updated
            saved.unchanged += counts.unchanged
            inserted += counts.inserted
        }
        return inserted
    }

    /// Rows the database refused in a staged merge, counted as rejected records.
    mutating func addRefused(_ refusals: [RecordRejection]) {
        for r in refusals { saved.entities[r.entity, default: EntityCounts()].rejected += 1 }
        saved.rejectedRecords += refusals.count
        saved.rejectsByReason[RejectReason.unstorable.rawValue, default: 0] += refusals.count
    }

    /// Counts the rows a refresh left as stored (a page left out, or the clean rows of a page it
    /// applied in part): each row a record mentions is unchanged (unless this run changes it
    /// later: the ledger then counts it updated).
    private mutating func countLeftOut(_ footprint: PageFootprint, into counters: inout RunCounters) {
        for (entity, rows) in footprint.entities where entityNames.indices.contains(entity) {
            var counts = EntityCounts()
            for identity in rows.mentioned { ledger.countStored(entity, identity, changed: false, into: &counts) }
            guard counts != EntityCounts() else { continue }
            counters.entities[entityNames[entity], default: EntityCounts()].unchanged += counts.unchanged
            counters.unchanged += counts.unchanged
        }
    }
}
