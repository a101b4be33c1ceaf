import GRDB
import GRDBSQLite

/// What saving one batch did.
struct BatchOutcome: Sendable {
    var inserted = 0
    var updated = 0
    /// Per entity (by index in the model): inserted, updated, stubs (rejections are counted by the writer stage).
    var entities: [EntityCounts] = []
    /// Records rejected by the store (a bare reference to a missing row with `missing: reject`).
    var rejections: [RecordRejection] = []
}

/// The identities of the batches handed to the writer and not committed yet, per batch number
/// and entity. A read connection does not see those rows, so ``Store/prepare(_:uncommitted:)``
/// counts them as stored.
struct UncommittedIdentities: Sendable {
    private var batches: [(number: Int, identities: [[IdentityKey: Int]])] = []

    /// Remembers the identities of batch `number`, per entity.
    mutating func append(_ number: Int, _ identities: [[IdentityKey: Int]]) {
        batches.append((number, identities))
    }

    /// Forgets the batches up to `number`: they are committed, so a reader sees them.
    mutating func dropCommitted(through number: Int) {
        batches.removeAll { $0.number <= number }
    }

    func contains(_ key: IdentityKey, entity: Int) -> Bool {
        batches.contains { $0.identities[entity][key] != nil }
    }
}

extension Store {
    /// Prepares `pages` for ``save(_:extra:)``. Safe on any queue (it reads only the model): the
    /// pipeline calls it while the writer saves the previous batch. When every relationship stubs
    /// missing targets (the default), the rows are folded here; otherwise folding needs the
    /// identity lookups and happens in `save`.
    ///
    /// Folded batches are also resolved here, on the store's read connection, which sees only
    /// committed batches: the identities of batches saved (or being saved) but not committed yet
    /// (`uncommitted`) count as stored too, with their rowid unknown
    /// (``IdentityLookup/pendingRowid``). Call it from one queue only.
    func prepare(_ pages: [DecodedPage], uncommitted: UncommittedIdentities) -> PreparedBatch {
        let checksReferences = model.entities.contains { $0.relationships.contains { $0.missing != .stub } }
        guard !checksReferences else { return PreparedBatch(pages: pages, folded: nil, existing: nil) }
        var folder = RowFolder.foldingWithStubs(pages, layouts: layouts)
        folder.sortByIdentity()
        // The records live on in the folded rows; the pages keep only what the writer counts.
        var pages = pages
        for k in pages.indices {
            pages[k].records = []
            pages[k].rows = []
            pages[k].storage = RowStorage()
        }
        guard let reader = readerLookup else { return PreparedBatch(pages: pages, folded: folder, existing: nil) }
        var existing = [[IdentityKey: Int64]](repeating: [:], count: layouts.count)
        var rowids = [[Int64?]](repeating: [], count: layouts.count)
        do {
            for (entity, rows) in folder.merged.enumerated() where !rows.index.isEmpty {
                var found = try reader.stored(entity, rows.index.keys)
                for key in rows.index.keys where found[key] == nil && uncommitted.contains(key, entity: entity) {
                    found[key] = IdentityLookup.pendingRowid
                }
                rowids[entity] = rows.rowids(found)
                existing[entity] = found
            }
        } catch {
            // The writer looks them up itself.
            return PreparedBatch(pages: pages, folded: folder, existing: nil)
        }
        return PreparedBatch(pages: pages, folded: folder, existing: existing, rowids: rowids)
    }

    /// Saves a batch of decoded pages in one transaction, in page order, so that later pages win.
    ///
    /// For each entity the batch's identities are resolved in **one** query:
    ///
    /// ```sql
    /// SELECT "person".rowid, "person"."id" FROM json_each(?) AS j CROSS JOIN "person" ON "person"."id" = j.value
    ///   -- ? = [3,17,…]: the batch's identities, sorted
    /// ```
    ///
    /// (run by ``prepare(_:uncommitted:)`` on the read connection when it can, else here).
    ///
    /// Records are then folded per identity (later values win, key by key), and the rows are
    /// written in identity order, each with a statement for its shape — the columns its records
    /// mentioned:
    ///
    /// ```sql
    /// INSERT INTO "person" ("id", "first_name", "email") VALUES (?, ?, ?), (?, ?, ?), …  -- new identities, 32 a statement
    /// UPDATE "person" SET "first_name" = ?, "email" = ? WHERE rowid = ?                   -- a stored one
    /// DELETE FROM "person_dogs" WHERE "person_id" = ?                                     -- a to-many that was given
    /// INSERT OR IGNORE INTO "person_dogs" ("person_id", "dog_id") VALUES (?, ?), …        -- 64 links a statement
    /// ```
    ///
    /// `extra` runs inside the same transaction, last (rejections, progress).
    ///
    /// The batch is saved inside the store's open write transaction (begun when none is open) and
    /// stays uncommitted until ``commit()``: several batches can share one transaction, so pages
    /// that every batch dirties are written to the WAL once per commit instead of once per batch.
    /// When a batch fails, the whole open transaction is rolled back (the batches saved in it
    /// before too): what was committed, with its resume state, stays consistent. (A savepoint per
    /// batch would keep them, but it copies every page a batch dirties; measured here, it ate the
    /// gain of sharing the transaction.)
    func save(
        _ batch: PreparedBatch, extra: (BatchOutcome) throws -> Void
    ) throws -> BatchOutcome {
        try dbQueue.writeWithoutTransaction { db in
            if !db.isInsideTransaction { try db.beginTransaction(.immediate) }
            do {
                var writer = BatchWriter(store: self, batch: batch)
                try writer.prepare()
                try writer.write()
                try extra(writer.outcome)
                return writer.outcome
            } catch {
                try? db.rollback()
                throw error
            }
        }
    }

    /// Whether batches were saved since the last commit.
    var hasUncommittedBatches: Bool {
        dbQueue.inDatabase { $0.isInsideTransaction }
    }

    /// Commits the batches saved since the last commit (nothing when none is open).
    func commit() throws {
        try dbQueue.writeWithoutTransaction { db in
            if db.isInsideTransaction { try db.commit() }
        }
    }
}
