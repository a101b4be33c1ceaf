/// The caller's transaction (``TransactionOwner/caller``): one `BEGIN` held from the open to
/// ``endTransaction(committing:)``; ``begin()``, ``commitTransaction()`` and
/// ``rollbackTransaction()`` are a savepoint's inside it meanwhile.
extension PGStore: HeldTransaction {
    func holdTransaction() throws {
        guard !inTransaction else { throw StoreError.schema("a held transaction begins before the store's own") }
        try connection.execute("BEGIN")
        owner = .caller
    }

    func heldReader() -> any RowReader { PostgresBackend.Reader(connection: connection, insideTransaction: true) }

    func endTransaction(committing: Bool) throws {
        defer { try? closeSession() }
        if committing { try commitTransaction() } else { try rollbackTransaction() }
        owner = .store
        try connection.execute(committing ? "COMMIT" : "ROLLBACK")
    }
}
