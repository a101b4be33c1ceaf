import Foundation

/// Where a store's load stands (``IngestStore/loadState``): how the writer hands it the next
/// batch follows from it, and from nothing else the store knows.
public enum LoadState: Sendable, Equatable, CustomStringConvertible {
    /// Each batch written into the tables, visible at its commit; identities looked up batch by
    /// batch.
    case batchByBatch
    /// Batch by batch, because the staged load the plan asked for or tried was declined, and why
    /// (tables that hold rows, a staging file that could not be made): logged as `bulk.declined`.
    case declined(String)
    /// Batches go to the stage: nothing is looked up, and `default:` and `const:` are filled when
    /// the load merges (``IngestStore/mergeStaged(fills:stored:refused:)``), which knows which
    /// rows it inserts.
    case staging

    /// As `run.summary` and the logs show it.
    public var description: String {
        switch self {
        case .batchByBatch: "batch by batch"
        case .declined(let reason): "batch by batch (staging declined: \(reason))"
        case .staging: "staging"
        }
    }
}

/// When the writer asks a store whether its load turns staged (``IngestStore/turnStaged(at:)``);
/// the store's ``LoadPlan`` says whether it may at all.
public enum StagingMoment: Sendable, Equatable {
    /// Before the first batch is written: a full one whose records came in no identity order.
    /// A store whose plan stages from the first batch does when its tables are all empty.
    case firstBatch
    /// Between transactions, with the records saved since the last time it was asked: a store
    /// whose plan turns staged by size does once its database outgrew the plan's bytes.
    case betweenTransactions(records: Int)
}
