/// Whose transaction a store's commits and rollbacks end (``StoreOpening/transactions``).
package enum TransactionOwner: Sendable, Equatable {
    /// The store's: ``IngestStore/commit()`` commits, ``IngestStore/rollback()`` rolls back.
    case store
    /// The caller's (`IngotDatabase.write`, docs/library.md "Transactions"): the store opens one
    /// transaction and holds it across every run and delete it is handed to. Each of the store's
    /// own transactions is a savepoint inside it — a commit releases it into the held
    /// transaction, a rollback undoes that savepoint only — `close()` leaves it open, identities
    /// are looked up on its own connection (a reader of committed rows would miss what it wrote),
    /// and only ``HeldTransaction/endTransaction(committing:)`` commits or rolls it back.
    case caller
}

/// A store that holds its caller's transaction (``TransactionOwner/caller``).
package protocol HeldTransaction: AnyObject {
    /// Reads on the store's own connection, inside the held transaction: what it wrote included.
    func heldReader() -> any RowReader
    /// Commits the held transaction (`committing`) or rolls it back, then closes the store.
    func endTransaction(committing: Bool) throws
}
