import GRDB
import GRDBSQLite

/// What saving one batch did.
struct BatchOutcome: Sendable {
    var inserted = 0
    var updated = 0
    /// Records rejected by the store (a bare reference to a missing row with `missing: reject`).
    var rejections: [RecordRejection] = []
}

/// Which columns a statement writes: one bit per layout slot (at most 128).
struct ColumnMask: Hashable {
    var low: UInt64 = 0
    var high: UInt64 = 0

    @inline(__always) mutating func insert(_ slot: Int) {
        if slot < 64 { low |= 1 << UInt64(slot) } else { high |= 1 << UInt64(slot - 64) }
    }

    @inline(__always) func contains(_ slot: Int) -> Bool {
        slot < 64 ? low & (1 << UInt64(slot)) != 0 : high & (1 << UInt64(slot - 64)) != 0
    }
}

extension Store {
    /// Prepares `pages` for ``save(_:extra:)``. Safe on any queue (it reads only the model): the
    /// pipeline calls it while the writer saves the previous batch. When every relationship stubs
    /// missing targets (the default), the rows are folded here; otherwise folding needs the
    /// identity lookups and happens in `save`.
    nonisolated func prepare(_ pages: [DecodedPage]) -> PreparedBatch {
        let checksReferences = model.entities.contains { $0.relationships.contains { $0.missing != .stub } }
        return PreparedBatch(
            pages: pages, folded: checksReferences ? nil : RowFolder.foldingWithStubs(pages, layouts: layouts))
    }

    /// Saves a batch of decoded pages in one transaction, in page order, so that later pages win.
    ///
    /// For each entity the batch's identities are resolved in **one** query:
    ///
    /// ```sql
    /// SELECT rowid, "id" FROM "person" WHERE "id" IN (SELECT value FROM json_each(?))   -- ? = [17,3,…]
    /// ```
    ///
    /// Records are then folded per identity (later values win, key by key), and each row is
    /// written with a statement for its shape — the columns its records mentioned:
    ///
    /// ```sql
    /// INSERT INTO "person" ("id", "first_name", "email") VALUES (?, ?, ?)    -- a new identity
    /// UPDATE "person" SET "first_name" = ?, "email" = ? WHERE rowid = ?        -- a stored one
    /// DELETE FROM "person_dogs" WHERE "person_id" = ?                          -- a to-many that was given
    /// INSERT OR IGNORE INTO "person_dogs" ("person_id", "dog_id") VALUES (?, ?)
    /// ```
    ///
    /// `extra` runs inside the same transaction, last (rejections, progress).
    func save(
        _ batch: PreparedBatch, extra: (BatchOutcome) throws -> Void
    ) throws -> BatchOutcome {
        var outcome = BatchOutcome()
        try dbQueue.inTransaction(.immediate) { _ in
            var writer = BatchWriter(store: self, batch: batch)
            try writer.prepare()
            try writer.write()
            outcome = writer.outcome
            try extra(outcome)
            return .commit
        }
        return outcome
    }
}
