import Foundation

/// What a pipeline needs from the database it ingests into, and nothing more: create or check
/// the schema (when it is opened), look up stored identities, write a resolved batch, keep the
/// run's bookkeeping, commit. ``Store`` (SQLite, one writer, WAL) is the backend today; another
/// database is another conformer. The merge rules are not here: folding, reference policies,
/// rejections and counts are the ``BatchResolver``'s, the same for every backend; a store
/// writes what it is given.
///
/// A store is used from two queues, never concurrently for the same call: ``lookupCommitted(_:_:)``
/// from the assembler's (it may read on a connection of its own), everything else from the writer's.
public protocol IngestStore: IdentityLookups {
    /// The column layout of each entity, in the model's order, as the store writes them: entities
    /// and columns travel by position (``ResolvedBatch/rows(of:)``), so a run refuses a store whose
    /// layouts are not the resolver's (``EntityLayout/layouts(of:)`` of the run's model).
    var layouts: [EntityLayout] { get }

    // MARK: Runs

    /// The most recent run of `pipeline` when it did not finish: what `--resume` continues.
    func unfinishedRun(pipeline: String) throws -> UnfinishedRun?
    /// Records the start of a run (status running).
    func beginRun(id: String, pipeline: String, startedAt: Date, archive: String?) throws
    /// Marks a resumed run running again.
    func reopenRun(id: String, archive: String?) throws
    /// Commits what is open, then records how the run ended.
    func finishRun(id: String, status: RunStatus, counters: RunCounters, finishedAt: Date) throws

    // MARK: Batches

    /// Writes a resolved batch in the open transaction (beginning one when none is): inserts,
    /// updates of the present columns, link replacements; then runs `then` in it with what the
    /// write did. When either throws, the open transaction is rolled back — or, for a store that
    /// ``undoesBatchesAlone``, only this batch's work.
    func write(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws
    /// Whether a ``write(_:then:)`` that fails undoes only its own batch (a savepoint per batch,
    /// cheap in a server database) and leaves the open transaction with the batches before it.
    /// Otherwise the writer stage keeps the open transaction's batches to redo them when it
    /// looks for the record a database refused. Default `false`.
    var undoesBatchesAlone: Bool { get }
    /// Writes `batch` in the open transaction (beginning one when none is) under a savepoint:
    /// when it or `then` throws, only its own work is undone — the transaction and the batches
    /// written in it before stay — and the error is rethrown. The slow path that finds the
    /// records a database refuses (``StoreError/refusedValue(_:)``); never used by a joined run.
    func writeIsolated(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws
    /// Inside `save`'s `extra`: the batch's rejections, the run's counters and where its source
    /// continues, so that a commit always describes its last batch.
    func recordProgress(_ progress: RunProgress) throws
    /// Whether batches were written since the last commit.
    var hasUncommittedBatches: Bool { get }
    /// Commits the batches written since the last commit (nothing when none were).
    func commit() throws
    /// Rolls the open transaction back (a batch could not be resolved): what was committed stays.
    func rollback() throws

    // MARK: write: replace

    /// Deletes the rows of `entity` whose identity is not in `keeping` — only those whose
    /// `scope.column` holds one of `scope.values`, when a scope is given (`write: {mode: replace,
    /// scope: …}`) — in the open transaction, nullifying what pointed at them, and, through
    /// `delete: cascade`, the rows they link to but those in `sparing` (per entity, the rows the
    /// run wrote: a cascade never deletes what this run stored). Returns how many were deleted.
    func deleteUntouched(
        entity: Int, keeping: Set<IdentityKey>, sparing: [Int: Set<IdentityKey>], scope: (column: String, values: [ScalarValue])?
    ) throws -> Int

    /// Per entity (by index) that relationships stub: rows still holding only their identity.
    func unfilledStubs() throws -> [Int: Int]

    // MARK: Staged loads (--bulk)

    /// Batches go to staging tables and reach the entities' tables at ``mergeStaged(fills:)``
    /// (SQLiteStore+Staged.swift). Default `false`.
    var isStaging: Bool { get }
    /// Merges what a staged load staged into the tables, in the open transaction, filling
    /// `default:` and `const:` columns (per entity: slot, value, whether always) as inserts do;
    /// returns per entity (by index) the rows inserted and the stubs among them, and calls
    /// `stored` with each stored row the records mentioned (entity, identity, whether changed)
    /// and `refused` with each row the database refused (a trigger or constraint added to a
    /// table: the row and its links are left out, the merge goes on).
    func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void,
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String) -> Void
    ) throws -> WriteResult
    /// Turns the load staged from the next batch on when the database has outgrown what batch
    /// by batch writes cheaply; called between transactions with the records saved since the
    /// last call. Whether it did.
    func startStagingIfOutgrown(records: Int) throws -> Bool

    /// Stages the load from its first batch, before anything is written, when the store may
    /// (``StoreOpening/stagesFromTheStart``) and its tables are empty; called by the writer with a
    /// first batch whose records came in no identity order. Whether it did.
    func startStagingAtFirstBatch() throws -> Bool

    /// A joined job's staged load holds a stretch of consecutive units, and a batch of `units`
    /// would not continue it (another job holds a unit between): the writer merges the stretch
    /// first, then writes the batch as joined batches are written. Called before each batch.
    func stagedStretchBreaks(at units: [UnitRef]) throws -> Bool

    /// Releases the connections. The store is not used after this.
    func close() throws

    /// The statements opening the store applied to a database that held the pipeline's tables
    /// already (columns, tables, indexes a changed pipeline added): the run logs them as
    /// `schema.migrated`. Empty when nothing changed, or the database was new.
    var migration: [String] { get }

    /// Why a staged load (`--bulk`) was asked for and the store loads batch by batch instead
    /// (PostgreSQL's tables hold rows: its staged load only copies into empty ones); the run logs
    /// it as `bulk.declined`. `nil` when it stages as asked, or was not asked to.
    var stagingDeclined: String? { get }

    /// Takes the database's lock on runs of `pipeline` for as long as the store is open,
    /// waiting up to `timeout` seconds for another run to let it go; throws a held
    /// ``RunLockError`` (exit 75) when it does not. SQLite's is a file beside the database,
    /// taken before the store opens (``RunLock``); a server database takes it here.
    func lockRuns(of pipeline: String, timeout: Double) throws

    /// Makes a statement in flight return at once with an error, from any thread: a stopped run
    /// must not wait for a database that does not answer. The store is not written afterwards.
    func interrupt()
}

extension IngestStore {
    /// Not a staged load.
    package var isStaging: Bool { false }

    /// Nothing staged, nothing merged.
    package func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void,
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String) -> Void
    ) throws -> WriteResult { WriteResult(counts: []) }

    /// Batch by batch throughout.
    package func startStagingIfOutgrown(records: Int) throws -> Bool { false }

    /// Batch by batch throughout.
    package func startStagingAtFirstBatch() throws -> Bool { false }
    package func stagedStretchBreaks(at units: [UnitRef]) throws -> Bool { false }

    /// A store without a schema of its own to migrate.
    public var migration: [String] { [] }

    /// A store that stages as asked, or refuses.
    public var stagingDeclined: String? { nil }

    /// A failed write rolls the whole open transaction back.
    public var undoesBatchesAlone: Bool { false }

    /// No lock of the store's own (SQLite's run lock is a file, taken before the store opens).
    public func lockRuns(of pipeline: String, timeout: Double) throws {}

    /// An embedded database always answers.
    public func interrupt() {}
}

extension SQLiteStore: IngestStore {}
