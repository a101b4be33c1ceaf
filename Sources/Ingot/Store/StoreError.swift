import Foundation

/// A database failure that stops a run, or a database Ingot cannot use: what went wrong
/// (``Kind``), in which backend, the database's own message and code, the statement that failed,
/// and what the run was working on (the entity, the batch, the page) where that is known.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, as a caller decides on it (retry, exit code).
    public enum Kind: Sendable, Equatable {
        /// A statement failed (``sql`` says which; ``code`` or ``sqlState`` why).
        case statement
        /// The database refused a value of the batch — a constraint, a type, a size; not the
        /// connection, the disk or a lock. The backend says which of its codes mean this (SQLite's
        /// CONSTRAINT, TOOBIG, MISMATCH, RANGE; PostgreSQL's SQLSTATE classes 22, 23 and 54): the
        /// writer rejects the records that carry such values, and the run goes on.
        case refusedValue
        /// The database is held by another program past the lock timeout (SQLite's BUSY or
        /// LOCKED: a `sqlite3` shell inside a transaction, a backup): a later run may succeed.
        case locked
        /// The database's schema or bookkeeping is not what Ingot made.
        case schema
        /// The database's tables disagree with the pipeline (refused before anything is written).
        case conflict
        /// `--db` names a database Ingot cannot use (a scheme it does not know, an empty path).
        case unsupported
        /// The database server could not be reached (a later run may succeed: exit 75).
        case unreachable
        /// Units of a shared run this job held were taken over by other jobs after their leases
        /// ran out (this job stalled): the transaction was rolled back, the batch's other units
        /// handed back to the queue (``units`` says which were lost).
        case claimLost
    }

    /// What went wrong.
    public var kind: Kind
    /// `sqlite`, `postgresql`, or empty when no backend is concerned yet.
    public var backend: String
    /// The database's (or Ingot's) message.
    public var message: String
    /// The statement that failed, when one did.
    public var sql: String
    /// SQLite's (extended) result code.
    public var code: Int32?
    /// PostgreSQL's SQLSTATE.
    public var sqlState: String?
    /// The entity being written, when the store knew it.
    public var entity: String?
    /// The batch (its number in the run) and its first page's sequence number, when the writer
    /// stage knew them.
    public var batch: Int?
    /// The first page of that batch.
    public var page: Int?
    /// The units of a shared run lost to other jobs (``Kind/claimLost``).
    public var units: [Int] = []

    /// An error of `kind` from `backend` with the database's `message` and, for a failed statement, its SQL and code.
    public init(_ kind: Kind, backend: String = "", message: String, sql: String = "", code: Int32? = nil, sqlState: String? = nil) {
        self.kind = kind
        self.backend = backend
        self.message = message
        self.sql = sql
        self.code = code
        self.sqlState = sqlState
    }

    /// `error`, naming batch `batch` and its first page `page` when it is a store's.
    static func naming(_ error: any Error, batch: Int, page: Int?) -> any Error {
        guard var store = error as? StoreError else { return error }
        store.batch = batch
        store.page = page
        return store
    }

    /// The database's schema or bookkeeping is not what Ingot made.
    public static func schema(_ message: String) -> StoreError { StoreError(.schema, message: message) }
    /// The database's tables disagree with the pipeline.
    public static func conflict(_ message: String) -> StoreError { StoreError(.conflict, message: message) }
    /// `--db` names a database Ingot cannot use.
    public static func unsupported(_ message: String) -> StoreError { StoreError(.unsupported, message: message) }
    /// The database server could not be reached.
    public static func unreachable(_ message: String) -> StoreError { StoreError(.unreachable, message: message) }

    /// The database's message when it refused a value of a batch (``Kind/refusedValue``), else
    /// `nil`: no record causes any other failure.
    public static func refusedValue(_ error: any Error) -> String? {
        switch error {
        case let error as StoreError: error.kind == .refusedValue ? error.message : nil
        case let error as any BackendError: error.refusal
        default: nil
        }
    }

    /// Whether `error` is a database held by another program past the lock timeout
    /// (``Kind/locked``), as another run would hold it: a later run may succeed.
    public static func isLocked(_ error: any Error) -> Bool {
        switch error {
        case let error as StoreError: error.kind == .locked
        case let error as any BackendError: error.isLock
        default: false
        }
    }

    /// The message, with the statement that failed and what the run was working on.
    public var description: String {
        var text: String
        switch (backend, kind) {
        case ("sqlite", .statement), ("sqlite", .refusedValue), ("sqlite", .locked): text = "SQLite error \(code ?? 0): \(message)"
        case ("postgresql", .statement), ("postgresql", .refusedValue), ("postgresql", .locked): text = "PostgreSQL: \(message)"
        default: text = message
        }
        let context = [entity.map { "entity \($0)" }, batch.map { "batch \($0)" }, page.map { "page \($0)" }].compactMap { $0 }
        if !context.isEmpty { text += " [\(context.joined(separator: ", "))]" }
        if !sql.isEmpty { text += " (in: \(sql.prefix(300)))" }
        return text
    }
}

/// A backend library's own error, saying what it means for a run (a backend declares it for the
/// errors its library throws, in its folder: GRDB's `DatabaseError` in `Store/SQLite`), so that
/// ``StoreError/refusedValue(_:)`` and ``StoreError/isLocked(_:)`` name no backend. Errors a
/// backend makes itself carry their ``StoreError/Kind`` already (`StoreError.sqlite(code:message:sql:)`
/// in `Store/SQLite`, `StoreError.postgres(message:sql:state:)` in `Store/PostgreSQL`).
protocol BackendError: Error {
    /// The database's message when it refused a value (a constraint, a type, a size), else `nil`.
    var refusal: String? { get }
    /// Whether the database is held by another connection past the lock timeout.
    var isLock: Bool { get }
}
