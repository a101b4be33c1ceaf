import Logging

/// Where a run's load stands as the writer sees it, and its turns (``LoadPlan``): the store asked
/// to stage the load at a full first batch whose records came in no identity order, and between
/// transactions once the database outgrew the page cache; what came of it logged (`bulk.started`,
/// `bulk.declined` the first time with the store's reason) and kept (``LoadOutcome``). A value
/// the ``WriterStage`` owns and uses on its queue.
struct LoadTurns {
    /// What the load plan turned into so far.
    private(set) var outcome: LoadOutcome
    /// The records saved when the store was last asked between transactions.
    private var recordsAtLastCheck = 0
    private let logger: Logger

    init(exchanged: Bool, logger: Logger) {
        outcome = LoadOutcome()
        outcome.exchanged = exchanged
        self.logger = logger
    }

    /// Notes where `store`'s load stands after `records` records were saved: whether it stages.
    mutating func note(_ store: any IngestStore, records: Int) -> Bool {
        let state = store.loadState
        outcome.note(state, records: records)
        return state == .staging
    }

    /// Notes a merge of `rows` rows into the tables.
    mutating func merged(rows: Int) { outcome.merged(rows: rows) }

    /// Before batch `batch` is written, `records` records in it, `saved` saved before: whether
    /// the store turned the load staged from this first batch
    /// (``LoadPlan/stagesFirstBatch(records:inIdentityOrder:)``, ``StagingMoment/firstBatch``).
    mutating func firstBatch(_ batch: PreparedBatch, records: Int, saved: Int, store: any IngestStore) throws -> Bool {
        guard batch.number == 1, store.loadState != .staging,
            LoadPlan.stagesFirstBatch(records: records, inIdentityOrder: batch.arrivedInIdentityOrder)
        else { return false }
        return try turn(store, at: .firstBatch, saved: saved)
    }

    /// After a commit, `saved` records saved in all: whether the store turned the load staged
    /// (``StagingMoment/betweenTransactions(records:)``, the records since it was last asked).
    mutating func betweenTransactions(saved: Int, store: any IngestStore) throws -> Bool {
        guard store.loadState != .staging else { return false }
        let records = saved - recordsAtLastCheck
        recordsAtLastCheck = saved
        return try turn(store, at: .betweenTransactions(records: records), saved: saved)
    }

    private mutating func turn(_ store: any IngestStore, at moment: StagingMoment, saved: Int) throws -> Bool {
        let before = store.loadState
        switch try store.turnStaged(at: moment) {
        case .staging:
            logger.info("bulk.started", metadata: [LogKey.records: .int(saved)])
            return true
        case .declined(let reason) where before != .declined(reason):
            // A store that could not stage says why (a staging file it could not make).
            logger.notice("bulk.declined", metadata: [LogKey.reason: "\(reason)"])
        case .declined, .batchByBatch: break
        }
        return false
    }
}
