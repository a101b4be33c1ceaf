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
    /// Prepares a staged load: the model must allow it, and its staging file is made — or, when
    /// this run resumes a load that staged rows already (`resuming`), opened again. `atOpen`: the
    /// load is the whole run's (`--bulk`), prepared before the run has begun; else it begins
    /// within the running run, after what it committed.
    func prepareStagedLoad(resuming: Bool, atOpen: Bool = false) throws {
        let obstacles = StageFile.obstacles(model, layouts)
        if !obstacles.isEmpty {
            throw StoreError.conflict("--bulk cannot load this pipeline: " + obstacles.joined(separator: "; "))
        }
        try refuseEarlierStagedLoad()
        try dbQueue.inDatabase { db in
            // Sorts spill to temporary files; a small page cache: staging only appends, the merge
            // writes in key order, and SQLite's sorter takes as much memory again as the cache
            // for each sorted run it keeps in memory (40 MiB each: people-1M peaked at 184 MiB).
            try db.execute(sql: "PRAGMA temp_store = FILE; PRAGMA cache_size = -\(StageFile.cacheKiB)")
            // A load that turned staged frees the pages its smaller cache no longer holds.
            sqlite3_db_release_memory(db.sqliteConnection)
        }
        let token = try state(pipeline: "", key: stagedLoadKey)
        if resuming, let token, let file = StageFile.open(at: stagePath, token: token, layouts: layouts) {
            try moveLoad(to: .staging(file))
        } else {
            if resuming, token != nil { try restageFromOrigin() }
            let token = UUID().uuidString
            try moveLoad(to: .staging(try StageFile.create(at: stagePath, token: token, layouts: layouts)))
            // Where the load begins, then the token: the file holds the token before the database
            // does, and a file the database does not name is stale (StageFile).
            try keepStagedLoadOrigin(atRunStart: atOpen)
            try setState(pipeline: "", key: stagedLoadKey, value: token)
        }
    }

    /// Keeps where a staged load begins (``StageFile/originKey(of:)``): the committed progress of the
    /// running run — counters, last page, resume state, its last reject — or, `atRunStart`, the
    /// start of the run about to begin (no run named: the run a resume continues, from nothing);
    /// and the kept values (the incremental cursor). Between transactions, before the load's
    /// first staged batch.
    private func keepStagedLoadOrigin(atRunStart: Bool) throws {
        try dbQueue.writeWithoutTransaction { db in
            try db.execute(sql: "DELETE FROM _ingot_state WHERE pipeline = '' AND key = ?", arguments: [stagedOriginKey])
            try db.execute(
                sql: """
                    INSERT INTO _ingot_state (pipeline, key, value)
                    SELECT '', ?1, json_object('run_id', r.run_id, 'pages', coalesce(r.pages, 0), 'records', coalesce(r.records, 0),
                      'inserted', coalesce(r.inserted, 0), 'updated', coalesce(r.updated, 0),
                      'rejected_records', coalesce(r.rejected_records, 0), 'rejected_pages', coalesce(r.rejected_pages, 0),
                      'last_seq', r.last_seq, 'resume_state', r.resume_state, 'entity_counts', r.entity_counts,
                      'reject_counts', r.reject_counts, 'resource_counts', r.resource_counts,
                      'rejects_rowid', (SELECT coalesce(max(rowid), 0) FROM _ingot_rejects),
                      'kept', (SELECT json_group_array(json_array(pipeline, key, value)) FROM _ingot_state WHERE pipeline <> '' AND pipeline = ?3))
                    FROM (SELECT 1) LEFT JOIN (
                      SELECT * FROM _ingot_runs WHERE status = 'running' AND pipeline = ?3 AND NOT ?2 ORDER BY started_at DESC, rowid DESC LIMIT 1
                    ) r
                    """, arguments: [stagedOriginKey, atRunStart, stateOwner])
        }
    }

    /// The unfinished staged load's staging file is missing, torn or another load's: its staged
    /// rows are gone, so the run goes back to where the load began (its progress, rejects and
    /// kept values as they were then; ``keepStagedLoadOrigin()``), and the resume reads those
    /// pages again — a load staged from its first batch from the first page. Refused (the run
    /// must start over) only when the database does not say where the load began.
    func restageFromOrigin() throws {
        guard let origin = try state(pipeline: "", key: stagedOriginKey) else {
            throw StoreError.conflict(
                "the unfinished staged load's staging file \(stagePath) is missing or another load's, and the database does not say where the load began: run the pipeline again without --resume"
            )
        }
        try writeTransaction { db in
            // A load that began with its run goes back to the start of the run a resume continues.
            let runID =
                try String.fetchOne(db, sql: "SELECT json_extract(?, '$.run_id')", arguments: [origin])
                ?? String.fetchOne(
                    db, sql: "SELECT run_id FROM _ingot_runs WHERE pipeline = ? ORDER BY started_at DESC, rowid DESC LIMIT 1",
                    arguments: [stateOwner])
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
            // Only this pipeline's kept values: another pipeline's are its own.
            try db.execute(sql: "DELETE FROM _ingot_state WHERE pipeline <> '' AND pipeline = ?", arguments: [stateOwner])
            try db.execute(
                sql: """
                    INSERT INTO _ingot_state (pipeline, key, value)
                    SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
                    FROM json_each(json_extract(?1, '$.kept'))
                    """, arguments: [origin])
            try db.execute(
                sql: "DELETE FROM _ingot_state WHERE pipeline = '' AND key IN (?, ?)", arguments: [stagedLoadKey, stagedOriginKey])
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
        guard let token = try state(pipeline: "", key: stagedLoadKey) else {
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
        try setState(pipeline: "", key: stagedLoadKey, value: nil)
        try setState(pipeline: "", key: stagedOriginKey, value: nil)
    }

    /// Staging tables in the database itself hold rows: a staged load of an earlier Ingot, which
    /// staged there (before ``StageFile``), stopped unfinished. This one cannot finish it.
    private func refuseEarlierStagedLoad() throws {
        // An earlier Ingot kept its load's token under a key that names no pipeline.
        if !stateOwner.isEmpty, try state(pipeline: "", key: StageFile.stateKey) != nil {
            throw StoreError.conflict(
                "an unfinished staged load of an earlier Ingot is recorded in this database (_ingot_state key '\(StageFile.stateKey)'): finish it with that version, or delete that key and run again without --resume"
            )
        }
        let held = try dbQueue.inDatabase { db in
            try layouts.map(StageFile.table).filter { table in
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
        folds.interrupt()
    }

    /// The staging tables holding rows of the database's unfinished staged load, if any.
    func unfinishedStagedLoad() throws -> [String] {
        guard let token = try state(pipeline: "", key: stagedLoadKey),
            let file = StageFile.open(at: stagePath, token: token, layouts: layouts)
        else { return [] }
        defer { file.close() }
        return try file.filledTables()
    }
}
