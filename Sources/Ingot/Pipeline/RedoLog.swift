/// The writes of the open transaction kept to be written again (docs/reliability.md): when the
/// database refuses a value of a later batch it rolls the whole transaction back, and each batch
/// kept here — as the assembler prepared it, its lookups to be redone — is written again with
/// the progress it recorded. Emptied when the transaction ends; a transaction that keeps more than
/// ``CommitPolicy/maxRetainedBytes`` of pages here commits early (``bytes``).
struct RedoLog {
    /// The writes kept, in order.
    private(set) var writes: [(batch: PreparedBatch, progress: RunProgress?)] = []
    /// The page bytes the kept writes hold.
    private(set) var bytes = 0
    /// A value was refused in the open transaction: the identities the assembler counted as
    /// written but not committed may not be, so later batches are looked up again.
    private(set) var refusedInTransaction = false

    /// Keeps `batch` (without what only its first write needs) and its progress.
    mutating func keep(_ batch: PreparedBatch, _ progress: RunProgress?) {
        var kept = batch
        kept.refs = nil
        kept.decoded = nil
        keepRedone((kept, progress))
    }

    /// A value was refused: the writes to redo, in order (the log starts again empty, and keeps
    /// them again as they are redone).
    mutating func takeForRedo() -> [(batch: PreparedBatch, progress: RunProgress?)] {
        refusedInTransaction = true
        defer { dropWrites() }
        return writes
    }

    /// Keeps a write redone as it was.
    mutating func keepRedone(_ write: (batch: PreparedBatch, progress: RunProgress?)) {
        writes.append(write)
        bytes += write.batch.pages.reduce(0) { $0 + $1.bytes }
    }

    /// The transaction ended: committed, or rolled back with the run's failure.
    mutating func transactionEnded() {
        dropWrites()
        refusedInTransaction = false
    }

    /// A batch failed and its transaction was rolled back: nothing is left to redo.
    mutating func dropWrites() {
        writes = []
        bytes = 0
    }
}
