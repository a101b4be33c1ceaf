import Foundation

/// What a pipeline needs from the database it ingests into. ``Store`` (SQLite, one writer, WAL)
/// is the backend today; another database (PostgreSQL, so that several jobs can share one) would
/// be another conformer. The stages above never see SQL: schema, identity lookups, statements,
/// transactions and run bookkeeping all live behind this protocol.
///
/// A store is used from two queues, never concurrently for the same call: `prepare` from the
/// assembler's (it may read on a connection of its own), everything else from the writer's.
protocol IngestStore: AnyObject, Sendable {
    // MARK: Runs

    /// The most recent run of `pipeline` when it did not finish: what `--resume` continues.
    func unfinishedRun(pipeline: String) throws -> UnfinishedRun?
    func beginRun(id: String, pipeline: String, startedAt: Date, archive: String?) throws
    /// Marks a resumed run running again.
    func reopenRun(id: String, archive: String?) throws
    /// Commits what is open, then records how the run ended.
    func finishRun(id: String, status: String, counters: RunCounters, finishedAt: Date) throws

    // MARK: Batches

    /// Folds a batch and resolves its identities where that needs no write (on the assembler's
    /// queue, while the writer saves the batch before). Identities of batches saved but not
    /// committed (`uncommitted`) count as stored.
    func prepare(_ pages: [DecodedPage], uncommitted: UncommittedIdentities) -> PreparedBatch
    /// Writes a batch in the open transaction (beginning one when none is), then runs `extra`
    /// in it. When it throws, the open transaction is rolled back.
    func save(_ batch: PreparedBatch, extra: (BatchOutcome) throws -> Void) throws -> BatchOutcome
    /// Inside `save`'s `extra`: the batch's rejections, the run's counters and where its source
    /// continues, so that a commit always describes its last batch.
    func recordProgress(
        runID: String, counters: RunCounters, lastSeq: Int?, resumeState: String?, rejections: [RecordRejection],
        state: [(pipeline: String, key: String, value: String)]
    ) throws
    var hasUncommittedBatches: Bool { get }
    func commit() throws

    // MARK: write: replace

    /// Starts recording which rows of `entity` the run touches.
    func beginReplace(entity: Int) throws
    /// Deletes the rows of the replace entity the run did not touch, in the open transaction.
    func deleteUntouched() throws -> Int

    /// Per entity (by index) that relationships stub: rows still holding only their identity.
    func unfilledStubs() throws -> [Int: Int]

    func close() throws
}

extension Store: IngestStore {}
