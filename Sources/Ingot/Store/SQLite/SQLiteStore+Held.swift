import GRDB

/// The caller's transaction (``TransactionOwner/caller``): one `BEGIN IMMEDIATE` held from the
/// open to ``endTransaction(committing:)``, the store's own transactions savepoints inside it.
extension SQLiteStore: HeldTransaction {
    /// Begins the transaction held for the caller (the write lock taken at once).
    func holdTransaction() throws {
        try dbQueue.writeWithoutTransaction { db in try db.beginTransaction(.immediate) }
        hold = .held(savepoint: false)
    }

    /// Begins one of the store's own write transactions, unless one is open: a transaction, or
    /// a savepoint in the transaction held for the caller.
    func beginWrite(_ db: Database) throws {
        switch hold {
        case .none:
            if !db.isInsideTransaction { try db.beginTransaction(.immediate) }
        case .held(savepoint: false):
            try db.execute(sql: "SAVEPOINT ingot_held")
            hold = .held(savepoint: true)
        case .held(savepoint: true): break
        }
    }

    /// Ends the store's own open write transaction, if any: committed (`committing`) or rolled
    /// back — in a held transaction, the savepoint released or undone.
    func endWrite(committing: Bool, _ db: Database) throws {
        switch hold {
        case .none:
            guard db.isInsideTransaction else { return }
            if committing { try db.commit() } else { try db.rollback() }
        case .held(savepoint: false): break
        case .held(savepoint: true):
            hold = .held(savepoint: false)
            if !committing { try db.execute(sql: "ROLLBACK TO ingot_held") }
            try db.execute(sql: "RELEASE ingot_held")
        }
    }

    /// `body` in a write transaction of its own (GRDB's `write`), or under a savepoint of its
    /// own in the held transaction.
    func writeTransaction<T>(_ body: (Database) throws -> T) throws -> T {
        guard hold.isHeld else { return try dbQueue.write(body) }
        return try dbQueue.writeWithoutTransaction { db in
            var result: T?
            try db.inSavepoint {
                result = try body(db)
                return .commit
            }
            guard let result else { throw StoreError.schema("a savepoint ended without its result") }
            return result
        }
    }

    package func heldReader() -> any RowReader { HeldReader(store: self) }

    package func endTransaction(committing: Bool) throws {
        defer { try? closeConnections() }
        try dbQueue.writeWithoutTransaction { db in
            try endWrite(committing: committing, db)
            hold = .none
            guard db.isInsideTransaction else { return }
            if committing { try db.commit() } else { try db.rollback() }
        }
    }

    /// Reads inside the held transaction, on the store's write connection.
    final class HeldReader: RowReader {
        private let store: SQLiteStore

        init(store: SQLiteStore) { self.store = store }

        func select(_ query: RowQuery) throws -> [[ScalarValue]] {
            try store.dbQueue.writeWithoutTransaction { db in try SQLiteStore.select(query, in: db) }
        }

        /// Read-only: `query_only` while it runs.
        func rows(sql: String, arguments: [ScalarValue]) throws -> (columns: [String], rows: [[ScalarValue]]) {
            try store.dbQueue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA query_only = ON")
                defer { try? db.execute(sql: "PRAGMA query_only = OFF") }
                return try SQLiteStore.rows(sql: sql, arguments: arguments, in: db)
            }
        }
    }
}

/// Where the SQLite store stands with its caller's transaction (``TransactionOwner``).
enum TransactionHold: Equatable {
    /// Its transactions are its own.
    case none
    /// It holds the caller's; `savepoint`: one of its own transactions is open inside it.
    case held(savepoint: Bool)

    var isHeld: Bool { self != .none }
}
