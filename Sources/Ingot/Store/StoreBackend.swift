import Foundation

/// A store backend as `--db` reaches it: opening a store for a run, and what `ingot schema`,
/// `--dry-run` and the incremental cursor ask of a database of it. One per backend
/// (``SQLiteBackend``, ``PostgresBackend``); `StoreLocation` picks one by the `--db` scheme, so a
/// new backend is a new conformer and a scheme, and nothing else changes above the stores.
package protocol StoreBackend: Sendable {
    /// Opens the store (creating or checking the schema of `model`) for a run.
    func open(model: EntityModel, options: StoreOpening) throws -> any IngestStore
    /// The DDL of `model`'s tables, as `ingot schema` prints it.
    func schema(of model: EntityModel) throws(StoreError) -> [String]
    /// What a run of `model` would do, writing nothing: whether the database exists, the
    /// conflicts that would refuse the run, the statements that would bring its schema up to it.
    func plan(model: EntityModel) throws -> (exists: Bool, conflicts: [String], statements: [String])
    /// A value kept for `pipeline` across runs (the incremental cursor); `nil` when there is none.
    func keptValue(model: EntityModel, pipeline: String, key: String) throws -> String?
    /// The rows `query` selects, each its columns in order, as the mapper makes them: booleans
    /// as `.bool`, dates as text (`yyyy-MM-dd`, or ISO 8601 in UTC), JSON as its text.
    func select(_ query: RowQuery) throws -> [[ScalarValue]]
    /// A reader that keeps its connection open across selects (the library's fetches, an
    /// export's pages): ``select(_:)`` opens one per query.
    func reader() throws -> any RowReader
    /// What this backend can do with a load (``LoadPlan``).
    var loadCapabilities: LoadCapabilities { get }
    /// Why a staged load cannot run `model` here; empty when it can.
    func stagedLoadObstacles(_ model: EntityModel) -> [String]
    /// What keeps a database that lives only while a connection to it is open (SQLite in
    /// memory) alive between runs, until it is released; `nil` for one that lives on its own.
    func keepAlive() throws -> (any AnyObject & Sendable)?
}

extension StoreBackend {
    /// A database that lives on its own (a file, a server) needs nothing to keep it.
    package func keepAlive() throws -> (any AnyObject & Sendable)? { nil }
}

/// Reads rows of one database through one connection kept open; used by one caller at a time
/// (a library database's queue, an export).
package protocol RowReader: AnyObject {
    /// The rows `query` selects (``StoreBackend/select(_:)``).
    func select(_ query: RowQuery) throws -> [[ScalarValue]]
    /// The rows of a statement the caller wrote (`IngotDatabase.query`), read-only — a write in
    /// it fails — with its `arguments` bound to the backend's own placeholders (`?` in SQLite,
    /// `$1…` in PostgreSQL): the columns' names and each row's values (PostgreSQL's as text).
    func rows(sql: String, arguments: [ScalarValue]) throws -> (columns: [String], rows: [[ScalarValue]])
}

/// What every backend is opened with (a backend's own knobs stay its own: SQLite's cache and
/// checkpoint sizes are ``SQLiteStore/Options``).
package struct StoreOpening: Sendable {
    /// The pipeline whose run lock the store takes at open and holds until it closes, waiting
    /// up to ``lockTimeout`` for another run to let it go (a held ``RunLockError``, exit 75,
    /// when it does not); `nil`: no lock (a store opened for reading, or the library's).
    package var lockingRunsOf: String?
    /// The run is a job of a shared run (`--join`): a store that shares runs takes its lock
    /// shared, when the job joins (``SharedRunStore/joinRun(_:)``), not at open.
    package var joining = false
    /// Seconds to wait for another run or program holding the database.
    package var lockTimeout: Double = 30
    /// Called with the text of every statement the store runs (tests count identity lookups).
    package var statementObserver: (@Sendable (String) -> Void)?
    /// How the run writes its batches (``LoadPlan``), decided before the store opens.
    package var plan = LoadPlan.batchByBatch
    /// The run resumes an unfinished one.
    package var resuming = false
    /// Set when the run stops: a connection being made gives up (SIGTERM while a database
    /// server never answers ends the run at once, not after its connect timeout).
    package var stopped: StopFlag?
    /// Whose transaction the store's commits end (``TransactionOwner``): its own, or one it holds
    /// for the caller until ``HeldTransaction/endTransaction(committing:)``.
    package var transactions = TransactionOwner.store

    package init(
        lockingRunsOf pipeline: String? = nil, joining: Bool = false, lockTimeout: Double = 30,
        statementObserver: (@Sendable (String) -> Void)? = nil, plan: LoadPlan = .batchByBatch, resuming: Bool = false,
        stopped: StopFlag? = nil
    ) {
        self.lockingRunsOf = pipeline
        self.joining = joining
        self.stopped = stopped
        self.lockTimeout = lockTimeout
        self.statementObserver = statementObserver
        self.plan = plan
        self.resuming = resuming
    }
}
