import Dispatch
import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// The merge of a SQLite staged load (SQLiteStore+Staged.swift): the stage's folds
/// (``StageFile/fold(settings:interruption:_:)``, on threads of their own) hand each entity's
/// folded rows to ``StagedMerge``, which writes them into the tables on the write connection, in
/// the run's last transaction.
extension SQLiteStore {
    /// Merges the staged rows into the tables, each identity once, in identity order (see
    /// SQLiteStore+Staged.swift), fills `default:` and `const:` columns as inserts do, and
    /// empties the staging tables. Returns, per entity, the rows inserted (and the stubs among
    /// them: rows whose records gave nothing but their identity); calls `stored` with each
    /// stored row the load's records mentioned, and whether merging changed it. Runs in the
    /// open transaction, or in one it begins.
    package func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void,
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String, _ record: (seq: Int, index: Int)?) -> Void
    ) throws -> WriteResult {
        guard case .staging(let file) = phase else { throw StoreError.schema("no staged load to merge: the load is \(phase)") }
        var counts: [EntityCounts] = []
        leaveWALForMerge()
        try foldStaged { entity, rows, db in
            guard let connection else { throw StoreError.schema("the store is closed") }
            let layout = layouts[entity]
            var merge = try StagedMerge(connection: connection, layout: layout, fills: fills.indices.contains(entity) ? fills[entity] : [])
            defer { merge.finalize() }
            try merge.write(rows) { identity, changed in stored(entity, identity, changed) }
            for (identity, reason, origin) in merge.refusals { refused(entity, identity, reason, RecordOrigin.decode(origin)) }
            counts.append(merge.counts)
        }
        // The load is merged when this transaction commits; its staging file goes then (StageFile).
        try setState(pipeline: "", key: stagedLoadKey, value: nil)
        try setState(pipeline: "", key: stagedOriginKey, value: nil)
        try moveLoad(to: .merged(file))
        var result = WriteResult(counts: counts)
        result.reads = file.shownReads
        return result
    }

    /// Folds the staged load (``StageFile/fold(settings:interruption:_:)``) and hands each
    /// entity's folded rows to `write` on the write connection's queue, in the open transaction
    /// (or one it begins). A stop (``interrupt()``) interrupts the folds and the writes.
    func foldStaged(_ write: (_ entity: Int, _ rows: FoldedRows, _ db: Database) throws -> Void) throws {
        guard let stageFile else { throw StoreError.schema("the staged load has no staging file") }
        isMerging.store(true, ordering: .sequentiallyConsistent)
        defer { isMerging.store(false, ordering: .sequentiallyConsistent) }
        try dbQueue.writeWithoutTransaction { db in
            try beginWrite(db)
            let deferred = try dropIndexesOfEmptyTables(db)
            try stageFile.fold(settings: foldSettings, interruption: folds) { entity, rows in try write(entity, rows, db) }
            try buildIndexes(deferred, db)
        }
    }

    /// The page cache of the write connection while it builds the indexes a merge deferred.
    static let indexBuildCacheKiB = 1024

    /// Builds `indexes` (those ``dropIndexesOfEmptyTables(_:)`` dropped) with a small page cache
    /// and one helper thread for SQLite's sorter, then gives the staged load's settings back.
    /// The sorter keeps each sorted run in memory up to the cache's size (4 MiB at least) and
    /// merges its records as linked lists: a run of many megabytes misses the processor's caches
    /// at every step, where runs of a few megabytes stay in them and are merged from temporary
    /// files in order. The helper sorts one run while the scan fills the next, on the core the
    /// merge's folds have left idle by then. `person_dogs_dog_id` (docs/performance-notes.md,
    /// "The deferred index's sort, the merge's writer and its memory"): people-1M's 1.5M keys
    /// 1.12–1.63 s with the staged load's 8 MiB or 40 MiB, 0.64–0.90 s with 1 MiB; people-10M's 15M keys 11.0 s with 1 MiB,
    /// 8.2 s with the helper.
    private func buildIndexes(_ indexes: [ForeignKeyIndex], _ db: Database) throws {
        guard !indexes.isEmpty else { return }
        try db.execute(sql: "PRAGMA cache_size = -\(SQLiteStore.indexBuildCacheKiB); PRAGMA threads = 1")
        for index in indexes { try db.execute(sql: index.createStatement) }
        try db.execute(sql: "PRAGMA cache_size = -\(StageFile.cacheKiB); PRAGMA threads = 0")
    }

    /// The foreign keys' indexes (``EntityLayout/foreignKeyIndexes(of:)``) of the tables that are
    /// empty as the merge begins, dropped in its transaction: built after the merge's rows, one
    /// sorted pass each (SQLite's sorter, spilling to files), in the same transaction — a merge
    /// rolled back keeps them. Written row by row, an index whose keys come in no order (a join
    /// table's target side) outgrows the merge's small page cache and thrashes it: people-1M read
    /// and wrote `person_dogs_dog_id`'s 1,182 pages some 280 times each, 5.5 GB each way, for an
    /// index of 18 MB (docs/performance-notes.md, "Indexes built after a staged merge").
    private func dropIndexesOfEmptyTables(_ db: Database) throws -> [ForeignKeyIndex] {
        var dropped: [ForeignKeyIndex] = []
        for index in layouts.flatMap({ $0.foreignKeyIndexes(of: layouts) }) {
            guard try Bool.fetchOne(db, sql: "SELECT NOT EXISTS (SELECT 1 FROM \(SQLiteStore.quote(index.table)))") == true,
                try Bool.fetchOne(db, sql: "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", arguments: [index.name]) == true
            else { continue }
            try db.execute(sql: "DROP INDEX \(SQLiteStore.quote(index.name))")
            dropped.append(index)
        }
        return dropped
    }
}
