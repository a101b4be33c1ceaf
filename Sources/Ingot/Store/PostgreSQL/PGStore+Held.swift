/// The caller's transaction (``TransactionOwner/caller``): one `BEGIN` held from the open to
/// ``endTransaction(committing:)``; ``begin()``, ``commitTransaction()`` and
/// ``rollbackTransaction()`` are a savepoint's inside it meanwhile.
extension PGStore: HeldTransaction {
    func holdTransaction() throws {
        guard !inTransaction else { throw StoreError.schema("a held transaction begins before the store's own") }
        try connection.execute("BEGIN")
        hold = .held(savepoint: false)
    }

    func heldReader() -> any RowReader { PGHeldReader(connection: connection) }

    func endTransaction(committing: Bool) throws {
        defer { try? closeSession() }
        if committing { try commitTransaction() } else { try rollbackTransaction() }
        hold = .none
        try connection.execute(committing ? "COMMIT" : "ROLLBACK")
    }
}

/// Reads inside the held transaction, on the store's connection.
final class PGHeldReader: RowReader {
    private let connection: PGConnection

    init(connection: PGConnection) { self.connection = connection }

    func select(_ query: RowQuery) throws -> [[ScalarValue]] {
        try PostgresBackend.select(query, on: connection)
    }

    /// Not inside a held transaction: a statement of the caller's could not be kept read-only
    /// there (`BEGIN READ ONLY` would end the transaction).
    func rows(sql: String, arguments: [ScalarValue]) throws -> (columns: [String], rows: [[ScalarValue]]) {
        throw StoreError.unsupported("a statement of your own is read outside a transaction (IngotDatabase.query)")
    }
}
