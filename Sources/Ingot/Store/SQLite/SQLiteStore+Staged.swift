import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// Staged loading (`ingot run --bulk`): a big load written the way a database loads a dump
/// instead of row by row.
///
/// Find-or-create costs each record a few random page touches (the identity index, the row, the
/// rows it links to, the join table). While the tables fit in the page cache that is cheap; once
/// they are several times bigger, every touch is a read and, at the next commit, a write of a
/// whole page: people-10M ran at a tenth of people-200k's rate per record (docs/performance-notes.md).
/// A staged load does no lookup and touches no table page while the run lasts:
///
/// 1. each batch's rows, folded as always (one row per identity per batch, later records win
///    key by key), are appended to a staging table per entity (`_ingot_stage_<table>`) with the
///    mask of the columns the records gave and their to-many sets (a compact blob); batches
///    commit with the resume point as usual, so `kill -9` and `--resume` keep their guarantees;
/// 2. when the source is exhausted, each staging table is read back sorted by identity, then by
///    arrival (SQLite's sorter, spilling to temporary files: memory stays bounded), and each
///    identity's rows are merged with the same rules — a column takes the value of the last row
///    that gave it, a to-many the last set given — and written once, in identity order, so every
///    B-tree only grows at its right edge; then the staging tables are emptied. All of it in the
///    run's last transaction: the tables change only when the load commits whole.
/// 3. into tables that hold rows, each merged identity is looked up as it comes — in identity
///    order, so the stored rows are read in one sweep — and a stored row is updated only where a
///    given column differs, its sets replaced only where they differ; a stored row only referred
///    to is left alone.
///
/// What needs a stored row to decide (`insert_only`/`update_only`/`replace`, `missing:
/// reject|ignore`, relationship `operations:`, owned rows, parent entities, inverse
/// relationships, entities without identity) is refused before the run starts.
extension SQLiteStore {
    /// Why `model` cannot be loaded staged; empty when it can.
    static func stagedLoadObstacles(_ model: EntityModel, _ layouts: [EntityLayout]) -> [String] {
        var reasons: [String] = []
        for (entity, layout) in zip(model.entities, layouts) {
            if entity.identityAttributes.isEmpty { reasons.append("entity \(entity.name) has no identity") }
            if entity.parent != nil { reasons.append("entity \(entity.name) has a parent") }
            if model.entities.contains(where: { $0.parent == entity.name }) { reasons.append("entity \(entity.name) is a parent") }
            for relationship in entity.relationships {
                if relationship.missing != .stub { reasons.append("\(entity.name).\(relationship.name) does not stub missing targets") }
                if !relationship.insertsTargets || !relationship.updatesTargets || !relationship.deletesLinks {
                    reasons.append("\(entity.name).\(relationship.name) limits its operations")
                }
            }
            for toMany in layout.toMany {
                let name = "\(entity.name).\(entity.relationships[toMany.relationship].name)"
                if toMany.isOwned { reasons.append("\(name) is owned") }
                if toMany.isInverse || toMany.isForeignKey { reasons.append("\(name) has an inverse") }
                if toMany.keepsLinks { reasons.append("\(name) only adds links") }
            }
            if layout.toMany.count > 255 { reasons.append("entity \(entity.name) has more than 255 to-many relationships") }
        }
        return reasons
    }

    /// The page cache of a staged load, in KiB.
    static let stagedCacheKiB = 8192

    /// The staging table of entity `layout`.
    static func stageTable(_ layout: EntityLayout) -> String { "_ingot_stage_\(layout.table)" }

    /// Prepares a staged load: the model must allow it, and its staging file is made — or, when
    /// this run resumes a load that staged rows already (`resuming`), opened again. `atOpen`: the
    /// load is the whole run's (`--bulk`), prepared before the run has begun; else it begins
    /// within the running run, after what it committed.
    func prepareStagedLoad(resuming: Bool, atOpen: Bool = false) throws {
        let obstacles = SQLiteStore.stagedLoadObstacles(model, layouts)
        if !obstacles.isEmpty {
            throw StoreError.conflict("--bulk cannot load this pipeline: " + obstacles.joined(separator: "; "))
        }
        try refuseEarlierStagedLoad()
        try dbQueue.inDatabase { db in
            // Sorts spill to temporary files; a small page cache: staging only appends, the merge
            // writes in key order, and SQLite's sorter takes as much memory again as the cache
            // for each sorted run it keeps in memory (40 MiB each: people-1M peaked at 184 MiB).
            try db.execute(sql: "PRAGMA temp_store = FILE; PRAGMA cache_size = -\(SQLiteStore.stagedCacheKiB)")
            // A load that turned staged frees the pages its smaller cache no longer holds.
            sqlite3_db_release_memory(db.sqliteConnection)
        }
        let token = try state(pipeline: "", key: StageFile.stateKey)
        if resuming, let token, let file = StageFile.open(at: stagePath, token: token, layouts: layouts) {
            try moveLoad(to: .staging(file))
        } else {
            if resuming, token != nil { try restageFromOrigin() }
            let token = UUID().uuidString
            try moveLoad(to: .staging(try StageFile.create(at: stagePath, token: token, layouts: layouts)))
            // Where the load begins, then the token: the file holds the token before the database
            // does, and a file the database does not name is stale (StageFile).
            try keepStagedLoadOrigin(atRunStart: atOpen)
            try setState(pipeline: "", key: StageFile.stateKey, value: token)
        }
    }

    /// Keeps where a staged load begins (``StageFile/originKey``): the committed progress of the
    /// running run — counters, last page, resume state, its last reject — or, `atRunStart`, the
    /// start of the run about to begin (no run named: the run a resume continues, from nothing);
    /// and the kept values (the incremental cursor). Between transactions, before the load's
    /// first staged batch.
    private func keepStagedLoadOrigin(atRunStart: Bool) throws {
        try dbQueue.writeWithoutTransaction { db in
            try db.execute(sql: "DELETE FROM _ingot_state WHERE pipeline = '' AND key = ?", arguments: [StageFile.originKey])
            try db.execute(
                sql: """
                    INSERT INTO _ingot_state (pipeline, key, value)
                    SELECT '', ?1, json_object('run_id', r.run_id, 'pages', coalesce(r.pages, 0), 'records', coalesce(r.records, 0),
                      'inserted', coalesce(r.inserted, 0), 'updated', coalesce(r.updated, 0),
                      'rejected_records', coalesce(r.rejected_records, 0), 'rejected_pages', coalesce(r.rejected_pages, 0),
                      'last_seq', r.last_seq, 'resume_state', r.resume_state, 'entity_counts', r.entity_counts,
                      'reject_counts', r.reject_counts, 'resource_counts', r.resource_counts,
                      'rejects_rowid', (SELECT coalesce(max(rowid), 0) FROM _ingot_rejects),
                      'kept', (SELECT json_group_array(json_array(pipeline, key, value)) FROM _ingot_state WHERE pipeline <> ''))
                    FROM (SELECT 1) LEFT JOIN (
                      SELECT * FROM _ingot_runs WHERE status = 'running' AND NOT ?2 ORDER BY started_at DESC, rowid DESC LIMIT 1
                    ) r
                    """, arguments: [StageFile.originKey, atRunStart])
        }
    }

    /// The unfinished staged load's staging file is missing, torn or another load's: its staged
    /// rows are gone, so the run goes back to where the load began (its progress, rejects and
    /// kept values as they were then; ``keepStagedLoadOrigin()``), and the resume reads those
    /// pages again — a load staged from its first batch from the first page. Refused (the run
    /// must start over) only when the database does not say where the load began.
    func restageFromOrigin() throws {
        guard let origin = try state(pipeline: "", key: StageFile.originKey) else {
            throw StoreError.conflict(
                "the unfinished staged load's staging file \(stagePath) is missing or another load's, and the database does not say where the load began: run the pipeline again without --resume"
            )
        }
        try dbQueue.write { db in
            // A load that began with its run goes back to the start of the run a resume continues.
            let runID =
                try String.fetchOne(db, sql: "SELECT json_extract(?, '$.run_id')", arguments: [origin])
                ?? String.fetchOne(db, sql: "SELECT run_id FROM _ingot_runs ORDER BY started_at DESC, rowid DESC LIMIT 1")
            try db.execute(
                sql: """
                    UPDATE _ingot_runs SET pages = json_extract(?1, '$.pages'), records = json_extract(?1, '$.records'),
                      inserted = json_extract(?1, '$.inserted'), updated = json_extract(?1, '$.updated'),
                      rejected_records = json_extract(?1, '$.rejected_records'), rejected_pages = json_extract(?1, '$.rejected_pages'),
                      last_seq = json_extract(?1, '$.last_seq'), resume_state = json_extract(?1, '$.resume_state'),
                      entity_counts = json_extract(?1, '$.entity_counts'), reject_counts = json_extract(?1, '$.reject_counts'),
                      resource_counts = json_extract(?1, '$.resource_counts')
                    WHERE run_id = ?2
                    """, arguments: [origin, runID])
            try db.execute(
                sql: "DELETE FROM _ingot_rejects WHERE run_id = ?2 AND rowid > json_extract(?1, '$.rejects_rowid')",
                arguments: [origin, runID])
            try db.execute(sql: "DELETE FROM _ingot_state WHERE pipeline <> ''")
            try db.execute(
                sql: """
                    INSERT INTO _ingot_state (pipeline, key, value)
                    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
                    FROM json_each(json_extract(?1, '$.kept'))
                    """, arguments: [origin])
            try db.execute(
                sql: "DELETE FROM _ingot_state WHERE pipeline = '' AND key IN (?, ?)", arguments: [StageFile.stateKey, StageFile.originKey])
        }
        StageFile.remove(at: stagePath)
    }

    /// Opening a database for a load that is not staged: a staged load left unfinished (rows
    /// staged, not merged) goes on staged when this run resumes it and may turn staged, and is
    /// refused otherwise (its rows would never reach the tables); a staging file no unfinished
    /// load holds goes.
    func settleStagedLoad(resuming: Bool) throws {
        try refuseEarlierStagedLoad()
        let unfinished = try unfinishedStagedLoad()
        if !unfinished.isEmpty {
            guard resuming, stageAfterBytes != nil else {
                throw StoreError.conflict(
                    "an unfinished staged load staged rows in \(unfinished.joined(separator: ", ")): resume it with --resume, without --no-bulk (nothing was merged yet)"
                )
            }
            try prepareStagedLoad(resuming: true)
            return
        }
        guard let token = try state(pipeline: "", key: StageFile.stateKey) else {
            StageFile.remove(at: stagePath)
            return
        }
        if let file = StageFile.open(at: stagePath, token: token, layouts: layouts) {
            file.close()
        } else if resuming {
            // Its rows are lost: the resume reads their pages again (batch by batch, or staged
            // again when the load may turn).
            try restageFromOrigin()
            return
        }
        StageFile.remove(at: stagePath)
        try setState(pipeline: "", key: StageFile.stateKey, value: nil)
        try setState(pipeline: "", key: StageFile.originKey, value: nil)
    }

    /// Staging tables in the database itself hold rows: a staged load of an Ingot before session
    /// 16 (which staged there) stopped unfinished. This one cannot finish it.
    private func refuseEarlierStagedLoad() throws {
        let held = try dbQueue.inDatabase { db in
            try layouts.map(SQLiteStore.stageTable).filter { table in
                try db.tableExists(table) && Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM \(SQLiteStore.quote(table)))") == true
            }
        }
        guard held.isEmpty else {
            throw StoreError.conflict(
                "an unfinished staged load of an earlier Ingot staged rows in \(held.joined(separator: ", ")): finish it with that version, or empty those tables and run again without --resume"
            )
        }
    }

    /// Turns this load staged when the database file has grown to ``stageAfterBytes`` and its
    /// records come in no order (and the pipeline allows it): from the next batch on, batches
    /// are staged and merged at the end, the way `--bulk` loads. Called by the writer between
    /// transactions with the records saved since its last call. (``loadState`` says whether it did.)
    ///
    /// Why: batch by batch, a record costs a few random page touches; cheap while the tables
    /// fit in the page cache, a read and a page written per touch once they are several times
    /// bigger (people-1M 17 s, people-10M 738 s). Staged, the rest of the load costs the same per
    /// record whatever the tables' size, and the rows written so far are read in one sweep.
    ///
    /// In no order: since the last call, a batch wrote a row below the highest identity the run
    /// had written (``noteScatter(_:)``). Records whose identities come in order append to the
    /// tables, which batch by batch does cheaply at any size (four pages of 16.6M `{"id":n}`:
    /// 8.7 s so, 21.6 s staged). A property of the records, not of timing: the same load turns
    /// at the same commit every time.
    /// Where the load stands (``IngestStore/loadState``).
    package var loadState: LoadState { isStaging ? .staging : .batchByBatch }

    /// Turns the load staged at `moment` when its plan says it may (``IngestStore/turnStaged(at:)``).
    package func turnStaged(at moment: StagingMoment) throws -> LoadState {
        switch moment {
        case .firstBatch: try startStagingAtFirstBatch()
        case .betweenTransactions(let records): try startStagingIfOutgrown(records: records)
        }
        return loadState
    }

    private func startStagingIfOutgrown(records: Int) throws {
        guard !isStaging, let limit = stageAfterBytes else { return }
        defer { scattered = false }
        guard scattered else { return }
        let bytes = try dbQueue.inDatabase { db in
            try Int.fetchOne(db, sql: "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()") ?? 0
        }
        guard bytes >= limit else { return }
        try prepareStagedLoad(resuming: false)
        releaseReaderCache()
    }

    /// Stages the load from its first batch when it may and the entities' tables are all empty
    /// (``IngestStore/turnStaged(at:)``, ``StagingMoment/firstBatch``): a staged load into empty tables only appends
    /// and merges into nothing, where turning after a first commit merges in between the rows
    /// written before (people-200k: 1.12 s staged from the start against 1.25 s turning at the
    /// first commit; docs/performance-notes.md).
    private func startStagingAtFirstBatch() throws {
        guard stagesFromTheStart, !isStaging else { return }
        let empty = try dbQueue.inDatabase { db in
            try layouts.allSatisfy { layout in
                try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM \(SQLiteStore.quote(layout.table)))") == false
            }
        }
        guard empty else { return }
        try prepareStagedLoad(resuming: false)
    }

    /// A stopped run (a signal) interrupts a staged load's merge, which can take minutes: it
    /// rolls back (the staged rows stay; `--bulk --resume` merges again) and the run ends as
    /// interrupted. Anything else SQLite does finishes on its own within the grace period (SQLite
    /// has no server to wait for), so only the merge is interrupted. Safe from any thread
    /// (`sqlite3_interrupt`).
    package func interrupt() {
        guard isMerging.load(ordering: .sequentiallyConsistent), let connection else { return }
        sqlite3_interrupt(connection)
        foldConnections.withLock { folds in for fold in folds { sqlite3_interrupt(OpaquePointer(bitPattern: fold)) } }
    }

    /// The staging tables holding rows of the database's unfinished staged load, if any.
    func unfinishedStagedLoad() throws -> [String] {
        guard let token = try state(pipeline: "", key: StageFile.stateKey),
            let file = StageFile.open(at: stagePath, token: token, layouts: layouts)
        else { return [] }
        defer { file.close() }
        return try layouts.map(SQLiteStore.stageTable).filter { table in
            var held = false
            try file.statement("SELECT EXISTS (SELECT 1 FROM \(SQLiteStore.quote(table)))").query { row in
                held = sqlite3_column_int64(row, 0) != 0
            }
            return held
        }
    }

    /// Appends a batch's rows to the staging tables (the store's ``write(_:then:)`` in a staged
    /// load), in the staging file's open transaction.
    func stage(_ batch: ResolvedBatch) throws {
        guard let stageFile else { throw StoreError.schema("the staged load has no staging file") }
        try stageFile.begin()
        for (entity, rows) in batch.rows.merged.enumerated() where !rows.rows.isEmpty {
            let layout = layouts[entity]
            let names = layout.columns.map { SQLiteStore.quote($0.name) }.joined(separator: ", ")
            // The batch's rows in one statement (a RowFeed), not one each: appends only.
            let insert = try stageFile.statement(
                "INSERT INTO \(SQLiteStore.quote(SQLiteStore.stageTable(layout))) (\"_ingot_mask_low\", \"_ingot_mask_high\", \"_ingot_sets\", \(names)) \(RowFeed.select(arity: layout.columns.count + 3))"
            )
            let feed = RowFeed()
            var sets: [UInt8] = []
            rows.rows.withUnsafeBufferPointer { all in
                rows.storage.withView { values in
                    for row in all where row.identity != nil {
                        // The identity is always given (a stub's row too): the merge groups by it.
                        var mask = row.mask
                        for slot in layout.identitySlots { mask.insert(slot) }
                        feed.beginRow()
                        feed.append(.integer(Int64(bitPattern: mask.low)))
                        feed.append(.integer(Int64(bitPattern: mask.high)))
                        sets.removeAll(keepingCapacity: true)
                        for k in layout.toMany.indices {
                            guard let targets = rows.storage.linkSets[row.linkStart + k] else { continue }
                            StagedSets.append(k, targets, to: &sets)
                        }
                        if sets.isEmpty {
                            feed.append(.null)
                        } else {
                            sets.withUnsafeBytes { feed.appendBlob($0) }
                        }
                        for slot in layout.columns.indices {
                            if mask.contains(slot) {
                                feed.append(values, row.valueStart + slot)
                            } else {
                                feed.append(.null)
                            }
                        }
                    }
                }
            }
            guard feed.count > 0 else { continue }
            feed.bind(to: insert.handle, at: 1)
            try insert.execute()
        }
    }
}

/// The to-many sets of a staged row, as one blob: per set given, its relationship's index (one
/// byte), the number of targets (4 bytes), then each target's identity values (a count byte,
/// then per value a type byte and its bytes, little-endian). Written and read back by this
/// store only, within one load.
enum StagedSets {
    static func append(_ k: Int, _ targets: [IdentityKey], to out: inout [UInt8]) {
        out.append(UInt8(truncatingIfNeeded: k))
        appendInteger(UInt64(targets.count), bytes: 4, to: &out)
        for target in targets {
            let values = target.values
            out.append(UInt8(truncatingIfNeeded: values.count))
            for value in values {
                switch value {
                case .null: out.append(0)
                case .integer(let v):
                    out.append(1)
                    appendInteger(UInt64(bitPattern: v), bytes: 8, to: &out)
                case .real(let v):
                    out.append(2)
                    appendInteger(v.bitPattern, bytes: 8, to: &out)
                case .bool(let v): out.append(v ? 4 : 3)
                case .text(let s):
                    out.append(5)
                    let utf8 = Array(s.utf8)
                    appendInteger(UInt64(utf8.count), bytes: 4, to: &out)
                    out += utf8
                }
            }
        }
    }

    /// Calls `body` with each set in `bytes`: its relationship index and where its targets are.
    /// A truncated blob (never written so) ends the walk.
    static func sets(in bytes: UnsafeRawBufferPointer, _ body: (_ k: Int, _ targets: Range<Int>) throws -> Void) rethrows {
        var at = 0
        while at + 5 <= bytes.count {
            let k = Int(bytes[at])
            let count = Int(integer(bytes, at + 1, 4))
            at += 5
            let start = at
            for _ in 0..<count {
                guard let next = skipTarget(bytes, at) else { return }
                at = next
            }
            try body(k, start..<at)
        }
    }

    /// Walks the targets of the set at `range`: `value` with each of a target's values (and its
    /// index among them), then `end` once the target is complete.
    static func forEachTarget(
        in bytes: UnsafeRawBufferPointer, _ range: Range<Int>, value: (_ value: ScalarValue, _ index: Int) -> Void,
        end: () throws -> Void
    ) rethrows {
        var at = range.lowerBound
        while at < range.upperBound {
            let n = Int(bytes[at])
            at += 1
            for index in 0..<n {
                let tag = bytes[at]
                at += 1
                switch tag {
                case 1:
                    value(.integer(Int64(bitPattern: integer(bytes, at, 8))), index)
                    at += 8
                case 2:
                    value(.real(Double(bitPattern: integer(bytes, at, 8))), index)
                    at += 8
                case 3: value(.bool(false), index)
                case 4: value(.bool(true), index)
                case 5:
                    let length = Int(integer(bytes, at, 4))
                    at += 4
                    value(.text(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[at..<(at + length)]), as: UTF8.self)), index)
                    at += length
                default: value(.null, index)
                }
            }
            try end()
        }
    }

    /// Where the target at `at` ends; `nil` past the blob's end.
    private static func skipTarget(_ bytes: UnsafeRawBufferPointer, _ start: Int) -> Int? {
        var at = start
        guard at < bytes.count else { return nil }
        let n = Int(bytes[at])
        at += 1
        for _ in 0..<n {
            guard at < bytes.count else { return nil }
            let tag = bytes[at]
            at += 1
            switch tag {
            case 1, 2: at += 8
            case 5:
                guard at + 4 <= bytes.count else { return nil }
                at += 4 + Int(integer(bytes, at, 4))
            default: break
            }
        }
        return at <= bytes.count ? at : nil
    }

    /// The little-endian integer of `count` bytes at `at` (bytes past the end read as 0).
    static func integer(_ bytes: UnsafeRawBufferPointer, _ at: Int, _ count: Int) -> UInt64 {
        var v: UInt64 = 0
        for i in 0..<count where at + i < bytes.count { v |= UInt64(bytes[at + i]) << UInt64(8 * i) }
        return v
    }

    /// Appends the low `bytes` bytes of `v`, little-endian.
    static func appendInteger(_ v: UInt64, bytes: Int, to out: inout [UInt8]) {
        for i in 0..<bytes { out.append(UInt8(truncatingIfNeeded: v >> UInt64(8 * i))) }
    }
}
