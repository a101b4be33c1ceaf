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
    ///
    /// Folded batches are also resolved here, on the store's read connection: the batch being
    /// saved may not be committed yet, so the identities it holds (`inFlight`, per entity) count
    /// as stored too (with their rowid unknown, ``IdentityLookup/pendingRowid``). Any earlier
    /// batch is committed: the pipeline saves one batch at a time. Call it from one queue only.
    func prepare(_ pages: [DecodedPage], inFlight: [[IdentityKey: Int]]?) -> PreparedBatch {
        let checksReferences = model.entities.contains { $0.relationships.contains { $0.missing != .stub } }
        guard !checksReferences else { return PreparedBatch(pages: pages, folded: nil, existing: nil) }
        let folder = RowFolder.foldingWithStubs(pages, layouts: layouts)
        // The records live on in the folded rows; the pages keep only what the writer counts.
        var pages = pages
        for k in pages.indices { pages[k].records = [] }
        guard let reader = readerLookup else { return PreparedBatch(pages: pages, folded: folder, existing: nil) }
        var existing = [[IdentityKey: Int64]](repeating: [:], count: layouts.count)
        do {
            for (entity, rows) in folder.merged.enumerated() where !rows.index.isEmpty {
                var found = try reader.stored(entity, rows.index.keys)
                if let pending = inFlight?[entity] {
                    for key in rows.index.keys where found[key] == nil && pending[key] != nil {
                        found[key] = IdentityLookup.pendingRowid
                    }
                }
                existing[entity] = found
            }
        } catch {
            // The writer looks them up itself.
            return PreparedBatch(pages: pages, folded: folder, existing: nil)
        }
        return PreparedBatch(pages: pages, folded: folder, existing: existing)
    }

    /// Saves a batch of decoded pages in one transaction, in page order, so that later pages win.
    ///
    /// For each entity the batch's identities are resolved in **one** query:
    ///
    /// ```sql
    /// SELECT rowid, "id" FROM "person" WHERE "id" IN (SELECT value FROM json_each(?))   -- ? = [17,3,…]
    /// ```
    ///
    /// (run by ``prepare(_:inFlight:)`` on the read connection when it can, else here)
    ///
    /// ```sql
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
