import Foundation

/// What a pipeline needs from the database it ingests into, and nothing more: create or check
/// the schema (when it is opened), look up stored identities, write a resolved batch, keep the
/// run's bookkeeping, commit. SQLite (one writer, WAL) and PostgreSQL are its backends; another
/// database is another conformer (docs/stores.md, "Adding a backend"). The merge rules are not here: folding, reference policies,
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
    /// Records a new run (status running), or marks a resumed one running again.
    func beginRun(_ run: RunBeginning) throws
    /// Commits what is open, then records how the run ended.
    func finishRun(id: String, status: RunStatus, counters: RunCounters, finishedAt: Date) throws

    // MARK: Batches

    /// Writes a resolved batch in the open transaction (beginning one when none is): inserts,
    /// updates of the present columns, link replacements — or, while the load is staging
    /// (``loadState``), appends its rows to the stage; then runs `then` in it with what the
    /// write did. When either throws, the open transaction is rolled back — or, for a store that
    /// ``undoesBatchesAlone``, only this batch's work.
    func write(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws
    /// Whether a ``write(_:then:)`` that fails undoes only its own batch (a savepoint per batch,
    /// cheap in a server database) and leaves the open transaction with the batches before it.
    /// Otherwise the writer stage keeps the open transaction's batches to redo them when it
    /// looks for the record a database refused.
    var undoesBatchesAlone: Bool { get }
    /// Writes `batch` in the open transaction (beginning one when none is) under a savepoint:
    /// when it or `then` throws, only its own work is undone — the transaction and the batches
    /// written in it before stay — and the error is rethrown. The slow path that finds the
    /// records a database refuses (``StoreError/refusedValue(_:)``); never used by a joined run.
    func writeIsolated(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws
    /// Inside `save`'s `extra`: the batch's rejections, the run's counters and where its source
    /// continues, so that a commit always describes its last batch.
    func recordProgress(_ progress: RunProgress) throws
    /// Commits the batches written since the last commit; whether there were any. A commit that
    /// fails leaves nothing of its transaction open: a resume point is never committed without
    /// the rows it counts (a staged load's stage first, then the database).
    @discardableResult func commit() throws -> Bool
    /// Rolls the open transaction back (a batch could not be resolved): what was committed stays.
    func rollback() throws

    // MARK: The load (LoadPlan)

    /// Where the load stands: batch by batch, declined (with why), or staging. The store opened
    /// under its ``LoadPlan`` (``StoreOpening/plan``) and moves from one to the next itself, at
    /// ``turnStaged(at:)`` or ``mergeStaged(fills:stored:refused:)``; the writer reads it where it
    /// hands the store a batch, and nothing else asks the store about its mode.
    var loadState: LoadState { get }
    /// Turns the load staged at `moment`, when its plan says it may then (a first batch in no
    /// identity order into empty tables; a database outgrown by size) and nothing is open;
    /// returns ``loadState`` afterwards.
    func turnStaged(at moment: StagingMoment) throws -> LoadState
    /// Merges what the load staged into the tables, in the open transaction, filling `default:`
    /// and `const:` columns (per entity: slot, value, whether always) as inserts do; returns per
    /// entity (by index) the rows inserted and the stubs among them, and calls `stored` with each
    /// stored row the records mentioned (entity, identity, whether changed) and `refused` with
    /// each row the database refused (a trigger or constraint added to a table: the row and its
    /// links are left out, the merge goes on), with the record that gave it last (its page's seq
    /// and its index in the page; `nil` when the stage does not say). Afterwards the load goes on
    /// batch by batch.
    func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void,
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String, _ record: (seq: Int, index: Int)?) -> Void
    ) throws -> WriteResult

    // MARK: write: replace

    /// Deletes `rows` of `entity` in the open transaction (one is begun if none is), nullifying
    /// what pointed at them and removing the join rows naming them, and, through `delete:
    /// cascade`, the rows they link to but those in `sparing` (per entity, the rows a run wrote:
    /// a cascade never deletes what the run stored). Returns how many rows were deleted, the
    /// cascade's included.
    func delete(_ rows: RowsToDelete, of entity: Int, sparing: [Int: Set<IdentityKey>]) throws -> Int

    /// Per entity (by index) that relationships stub: rows still holding only their identity.
    func unfilledStubs() throws -> [Int: Int]

    // MARK: The store itself

    /// The statements opening the store applied to a database that held the pipeline's tables
    /// already (columns, tables, indexes a changed pipeline added): the run logs them as
    /// `schema.migrated`. Empty when nothing changed, or the database was new.
    var migration: [String] { get }

    /// Makes a statement in flight return at once with an error, from any thread: a stopped run
    /// must not wait for a database that does not answer. The store is not written afterwards.
    func interrupt()

    /// Releases the connections and the run lock. The store is not used after this.
    func close() throws
}

extension IngestStore {
    /// Batch by batch throughout.
    public var loadState: LoadState { .batchByBatch }

    /// A store that never stages stays as it is.
    public func turnStaged(at moment: StagingMoment) throws -> LoadState { loadState }

    /// Nothing staged, nothing merged.
    public func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void,
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String, _ record: (seq: Int, index: Int)?) -> Void
    ) throws -> WriteResult { WriteResult(counts: []) }

    /// A store without a schema of its own to migrate.
    public var migration: [String] { [] }

    /// A failed write rolls the whole open transaction back.
    public var undoesBatchesAlone: Bool { false }

    /// An embedded database always answers.
    public func interrupt() {}
}

/// Which rows of an entity ``IngestStore/delete(_:of:sparing:)`` deletes.
public enum RowsToDelete: Sendable {
    /// `write: replace`: the rows whose identity is not in `keeping` — only those whose
    /// `scope.column` holds one of `scope.values`, when a scope is given (`write: {mode: replace,
    /// scope: …}`).
    case untouched(keeping: Set<IdentityKey>, scope: (column: String, values: [ScalarValue])?)
    /// The library's `delete`: the rows with these identities.
    case listed(Set<IdentityKey>)
}
