import GRDB
import GRDBSQLite
import Synchronization

extension SQLiteStore {
    /// Which of `keys` are stored, with their rowids, on the write connection.
    /// Notes whether `batch` writes a row below the highest identity the run wrote before, per
    /// entity (its rows are in identity order): a load whose identities do not come in order
    /// touches the tables at random (``turnStaged(at:)``).
    func noteScatter(_ batch: ResolvedBatch) {
        guard stageAfterBytes != nil else { return }
        for (entity, rows) in batch.rows.merged.enumerated() {
            guard let first = rows.rows.first?.identity, let last = rows.rows.last?.identity else { continue }
            if let highest = highestIdentity[entity], IdentityKey.precedes(first, highest) { scattered = true }
            if highestIdentity[entity].map({ IdentityKey.precedes($0, last) }) ?? true { highestIdentity[entity] = last }
        }
    }

    /// A staged load looks nothing up: its merge reads each stored row once, in identity order
    /// (lookups into a filled database would read it at random, and fill the read connection's
    /// page cache for nothing).
    package func lookup(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef] {
        if isStaging { return [:] }
        return try writerLookup().stored(entity, keys)
    }

    /// The same on the read-only connection (committed rows only); `nil` for an in-memory
    /// database, which has none. Used from the assembler's queue only.
    package func lookupCommitted(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef]? {
        if isStaging { return [:] }
        // The reader would miss what the held transaction wrote: the writer looks them up.
        if hold.isHeld { return nil }
        return try readerAccess.withLock { _ in try readerLookup?.stored(entity, keys) }
    }

    /// A load that turned staged reads no more on the read connection: its page cache goes down
    /// to a staged load's (it held up to 40 MiB of the tables), and with the writer's (freed when
    /// the load turned) the memory goes back to the system — so that the staged load and its
    /// merge's sorters start from a staged load's footprint (people-1M: 126 → 98 MB at the turn).
    /// Writer queue, under ``readerAccess`` (the assembler may be looking a batch up).
    func releaseReaderCache() {
        readerAccess.withLock { _ in
            guard !readerCacheShrunk, let readConnection else { return }
            readerCacheShrunk = true
            sqlite3_exec(readConnection, "PRAGMA cache_size = -\(StageFile.cacheKiB)", nil, nil, nil)
            sqlite3_db_release_memory(readConnection)
            _ = glibcMallocTrim(0)
        }
    }

    /// Writes a resolved batch in the open transaction.
    ///
    /// For each entity the batch's identities were resolved in **one** query (``IdentityLookup``):
    ///
    /// ```sql
    /// SELECT "person".rowid, "person"."id" FROM json_each(?) AS j CROSS JOIN "person" ON "person"."id" = j.value
    ///   -- ? = [3,17,…]: the batch's identities, sorted
    /// ```
    ///
    /// (on the read connection by the resolver's `prepare` when it can, else on this one).
    ///
    /// The rows, folded per identity by the resolver, are written in identity order, each with
    /// a statement for its shape — the columns its records mentioned:
    ///
    /// ```sql
    /// INSERT INTO "person" ("id", "first_name", "email") VALUES (?, ?, ?), (?, ?, ?), …  -- new identities, 32 a statement
    /// UPDATE "person" SET "first_name" = ?1, "email" = ?2 WHERE rowid = ?3
    ///   AND ("first_name" IS NOT ?1 OR "email" IS NOT ?2)                                -- a stored one, when it differs
    /// SELECT "dog_id" FROM "person_dogs" WHERE "person_id" = ?                            -- a to-many that was given:
    /// DELETE FROM "person_dogs" WHERE "person_id" = ?                                     -- replaced when it differs
    /// INSERT OR IGNORE INTO "person_dogs" ("person_id", "dog_id") VALUES (?, ?), …        -- 64 links a statement
    /// ```
    ///
    /// `then` runs inside the same transaction, last (rejections, progress).
    ///
    /// The batch is saved inside the store's open write transaction (begun when none is open) and
    /// stays uncommitted until ``commit()``: several batches can share one transaction, so pages
    /// that every batch dirties are written to the WAL once per commit instead of once per batch.
    /// When a batch fails, the whole open transaction is rolled back (the batches saved in it
    /// before too): what was committed, with its resume state, stays consistent. (A savepoint per
    /// batch would keep them, but it copies every page a batch dirties; measured here, it ate the
    /// gain of sharing the transaction.)
    package func write(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        try dbQueue.writeWithoutTransaction { db in
            try beginWrite(db)
            do {
                try writeOrStage(batch)
                try then(lastWrite)
            } catch {
                stageFile?.rollback()
                try? endWrite(committing: false, db)
                throw error
            }
        }
    }

    /// The batch staged (a staged load) or written into the tables (batch by batch), its
    /// unchanged rows noted for ``lastWrite``.
    private func writeOrStage(_ batch: ResolvedBatch) throws {
        if isStaging {
            guard let stageFile else { throw StoreError.schema("the staged load has no staging file") }
            try stageFile.append(batch)
            lastUnchanged = Array(repeating: [], count: layouts.count)
        } else {
            noteScatter(batch)
            lastUnchanged = try BatchWriter(store: self, batch: batch).write()
        }
    }

    /// ``write(_:then:)`` under a savepoint: when it fails, only this batch's work is undone and
    /// the transaction stays open. The slow path only (a savepoint copies every page the batch
    /// dirties into SQLite's sub-journal).
    package func writeIsolated(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        try dbQueue.writeWithoutTransaction { db in
            try beginWrite(db)
            // GRDB's savepoint: released when the body returns, rolled back to when it throws.
            try db.inSavepoint {
                // A staged batch's rows are in the staging file: undone there too.
                if isStaging, let stageFile {
                    try stageFile.isolated {
                        try writeOrStage(batch)
                        try then(lastWrite)
                    }
                } else {
                    try writeOrStage(batch)
                    try then(lastWrite)
                }
                return .commit
            }
        }
    }

    /// What the last write did: the stored rows it found equal and left as they were; a staged
    /// load counts nothing per batch (its rows are counted when they are merged).
    private var lastWrite: WriteResult {
        WriteResult(counts: isStaging ? Array(repeating: EntityCounts(), count: layouts.count) : nil, unchanged: lastUnchanged)
    }

    /// Whether batches were saved since the last commit.
    var hasUncommittedBatches: Bool {
        switch hold {
        case .none: dbQueue.inDatabase { $0.isInsideTransaction } || stageFile?.isInTransaction == true
        case .held(let savepoint): savepoint
        }
    }

    /// Rolls back the batches saved since the last commit (nothing when none is open).
    package func rollback() throws {
        stageFile?.rollback()
        if case .merged(let file) = phase { try moveLoad(to: .staging(file)) }
        try dbQueue.writeWithoutTransaction { db in
            try endWrite(committing: false, db)
            returnToWAL(db)
        }
    }

    /// Commits the batches saved since the last commit (nothing when none is open): a staged
    /// load's rows first, then the database with the resume point that counts them (StageFile).
    /// Once a staged load's merge has committed, its staging file goes.
    ///
    /// A commit that fails rolls back whatever of it is still open: a staging file that could not
    /// commit takes the database's transaction (the resume point that counts its rows) with it,
    /// and a merge the database could not commit keeps its staging file, which the resume merges
    /// again (docs/reliability.md, "Every write may fail").
    @discardableResult package func commit() throws -> Bool {
        let written = hasUncommittedBatches
        do {
            try stageFile?.commit()
            try dbQueue.writeWithoutTransaction { db in
                try endWrite(committing: true, db)
                returnToWAL(db)
            }
        } catch {
            try? rollback()
            throw error
        }
        if case .merged(let file) = phase {
            file.discard()
            try moveLoad(to: .batchByBatch)
        }
        return written
    }
}
