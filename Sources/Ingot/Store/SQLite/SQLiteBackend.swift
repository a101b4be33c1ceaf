import Foundation
import GRDBSQLite

/// A SQLite file: the embedded default.
package struct SQLiteBackend: StoreBackend {
    package var path: String

    package init(path: String) { self.path = path }

    /// Takes the run lock (``RunLock``, a file beside the database: one run at a time, joined
    /// or not) before the store opens, and hands it to the store, which releases it once closed.
    /// A database another program holds past the lock timeout (a `sqlite3` shell inside a
    /// transaction, a backup) is refused as a held lock is: exit 75.
    package func open(model: EntityModel, options: StoreOpening) throws -> any IngestStore {
        let lock = try options.lockingRunsOf.flatMap { _ in
            try lockablePath.map { try RunLock(databasePath: $0, timeout: options.lockTimeout) }
        }
        do {
            let store = try openStore(model: model, options: options)
            store.runLock = lock
            return store
        } catch let error where StoreError.isLocked(error) {
            throw RunLockError(
                path: path, holder: nil, isHeld: true,
                message:
                    "another program holds a lock on the database (a sqlite3 shell inside a transaction, a backup?); gave up after \(options.lockTimeout) s (--lock-timeout): \(error)"
            )
        }
    }

    private func openStore(model: EntityModel, options: StoreOpening) throws -> SQLiteStore {
        var storeOptions = SQLiteStore.Options()
        storeOptions.lockTimeout = options.lockTimeout
        storeOptions.statementObserver = options.statementObserver
        storeOptions.plan = options.plan
        storeOptions.resuming = options.resuming
        storeOptions.pipeline = options.lockingRunsOf
        let store = try SQLiteStore(path: path, model: model, options: storeOptions)
        if options.transactions == .caller {
            do {
                try store.holdTransaction()
            } catch {
                try? store.close()
                throw error
            }
        }
        return store
    }

    package func schema(of model: EntityModel) throws(StoreError) -> [String] { SQLiteStore.schema(of: model) }

    package func plan(model: EntityModel) throws -> (exists: Bool, conflicts: [String], statements: [String]) {
        try SQLiteStore.plan(model: model, databasePath: path)
    }

    package func keptValue(model: EntityModel, pipeline: String, key: String) throws -> String? {
        try SQLiteStore.state(databasePath: path, model: model, pipeline: pipeline, key: key)
    }

    package func select(_ query: RowQuery) throws -> [[ScalarValue]] {
        try reader().select(query)
    }

    package func reader() throws -> any RowReader {
        try SQLiteStore.Reader(databasePath: path)
    }

    /// A database in memory shared by its connections (a `file:…?mode=memory&cache=shared` URI,
    /// as `IngotDatabase.inMemory` names one): a connection held open until the keeper goes, so
    /// that what one run wrote is there for the next.
    package func keepAlive() throws -> (any AnyObject & Sendable)? {
        guard path.hasPrefix("file:"), StageFile.isInMemory(path) else { return nil }
        return try MemoryDatabaseKeeper(path: path)
    }

    /// The file the run lock sits beside; `nil` for an in-memory database.
    private var lockablePath: String? { StageFile.isInMemory(path) ? nil : path }

    /// Staged loads turn on by the file's size, into tables that hold rows too; no shared runs.
    package var loadCapabilities: LoadCapabilities {
        LoadCapabilities(turnsStagedBySize: true, stagesOnlyIntoEmptyTables: false, sharesRuns: false)
    }

    package func stagedLoadObstacles(_ model: EntityModel) -> [String] {
        StageFile.obstacles(model, EntityLayout.layouts(of: model))
    }
}

/// A connection to a shared in-memory SQLite database, held open (and never used) so that the
/// database outlives each run's own connections; closed when the keeper goes.
final class MemoryDatabaseKeeper: @unchecked Sendable {  // the handle is never used, only closed once, in deinit
    private let handle: OpaquePointer

    init(path: String) throws {
        var handle: OpaquePointer?
        let code = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI, nil)
        guard code == SQLITE_OK, let handle else {
            sqlite3_close_v2(handle)
            throw StoreError.sqlite(code: code, message: "could not open the in-memory database \(path)", sql: "open")
        }
        self.handle = handle
    }

    deinit { sqlite3_close_v2(handle) }
}
