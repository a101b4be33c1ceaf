import Foundation
import GRDBSQLite
import Synchronization

/// The stage of a staged load, for either backend: a SQLite file of its own (beside the
/// database, `<database>.stage`, for SQLite; `ingot-stage-<uuid>.db` in the job's temporary
/// directory for PostgreSQL), on a connection of its own, with a rollback journal. Batches are
/// appended to its staging tables (``append(_:)``, StageFile+Load.swift); once the source is
/// exhausted, its folds read them back per identity (``fold(settings:interruption:_:)``) and
/// hand each folded row to the backend's ``FoldedRowWriter`` — SQLite's merge, PostgreSQL's
/// `COPY` — so that the merge rules of a staged load have one home whatever the backend.
///
/// Why a file of its own for SQLite (the staging tables were once in the database): there, the
/// staged rows went through the WAL and were copied again by its checkpoints, and once merged
/// they left their pages in the file as free pages (people-10M: a 3.7 GB file of which the
/// tables used half). Here they are written once (a rollback journal keeps only the few pages an
/// append changes), the merge's fold threads read them without touching the database, and the
/// file goes when the merge has committed.
///
/// **Order of commits.** A staged batch's rows are committed here *before* the store commits
/// the batch's resume point. A stop between the two leaves rows staged past the resume point:
/// the resumed run stages those pages again, which is harmless (the later copy of a record wins,
/// with the same values, so a repeated suffix folds to what it folded to once). The other order
/// could lose rows.
///
/// **Which load it belongs to.** The file holds a token, and the store that names it the same
/// token — SQLite's database in `_ingot_state` (pipeline `''`, key `staged_load:PIPELINE`, ``stateKey(of:)``) from the load's
/// first commit until its merge commits; PostgreSQL the file's `_ingot_state` key. A file whose
/// token the store does not hold is stale — made by a load stopped before its first commit, or
/// left behind after its merge committed — and is not read.
///
/// Used on the writer's queue only (the fold threads open read-only connections of their own).
final class StageFile {
    /// The key under which the database holds the token of its staged load (PostgreSQL's keys
    /// name the run; an earlier Ingot's SQLite key named no pipeline).
    static let stateKey = "staged_load"
    /// The key under which a SQLite database holds the token of `pipeline`'s staged load: a
    /// load's state is its pipeline's, and a run of another pipeline never reads or clears it.
    static func stateKey(of pipeline: String) -> String { pipeline.isEmpty ? stateKey : stateKey + ":" + pipeline }
    /// The key under which a SQLite database holds where `pipeline`'s staged load began (the
    /// run's progress then), to go back to when the staging file is lost.
    static func originKey(of pipeline: String) -> String { "staged_load_origin" + (pipeline.isEmpty ? "" : ":" + pipeline) }

    let path: String
    let token: String
    /// How the last ``fold(settings:interruption:_:)`` read each entity's staging table.
    var reads: [StagedReadPlan] = []
    /// ``reads`` as the merge's log line says them (``WriteResult/reads``): `person: 300 runs, buffered`.
    var shownReads: [String] { zip(layouts, reads).map { "\($0.table): \($1)" } }
    let handle: OpaquePointer
    /// The layouts of the entities it stages, by entity.
    let layouts: [EntityLayout]
    private var statements: [String: RawStatement] = [:]

    /// Whether the file is on disk (the database is; an in-memory database stages in memory).
    var isFile: Bool { path != ":memory:" }

    /// The staging file of `pipeline`'s loads into the database at `database` (`:memory:` for an
    /// in-memory one): one per pipeline, so that a run of another pipeline never removes or
    /// overwrites it. The name is percent-encoded down to letters, digits and `-._~`.
    static func path(for database: String, pipeline: String = "") -> String {
        if isInMemory(database) { return ":memory:" }
        return pipeline.isEmpty ? database + ".stage" : database + ".stage." + URLText.formEncoded(pipeline)
    }

    /// Whether a SQLite path names a database in memory: `:memory:`, empty (a temporary one), or
    /// a `file:` URI with `mode=memory` or `:memory:` (`IngotDatabase.inMemory`'s shared one).
    static func isInMemory(_ path: String) -> Bool {
        path.isEmpty || path == ":memory:" || path.hasPrefix("file::memory:")
            || (path.hasPrefix("file:") && path.contains("mode=memory"))
    }

    /// Creates a new, empty staging file at `path` (removing any there), with a staging table
    /// per entity of `layouts` and `token`.
    static func create(at path: String, token: String, layouts: [EntityLayout], durability: Durability = .resumable) throws -> StageFile {
        remove(at: path)
        let file = try StageFile(path: path, token: token, layouts: layouts)
        if durability == .throwaway { try file.execute("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF") }
        try file.execute("CREATE TABLE _ingot_stage_meta (token TEXT NOT NULL)")
        let insert = try file.statement("INSERT INTO _ingot_stage_meta (token) VALUES (?)")
        insert.bind(.text(token), at: 1)
        try insert.execute()
        for layout in layouts {
            try file.execute(
                "CREATE TABLE \(StageFile.quote(StageFile.table(of: layout))) (\(StageFile.stagedColumns(of: layout).joined(separator: ", ")))"
            )
        }
        try file.execute(
            "CREATE TABLE \(StagedRun.table) (\(StagedRun.columns.map { "\($0.0) \($0.1) NOT NULL" }.joined(separator: ", ")))")
        try file.execute(
            "CREATE TABLE _ingot_stage_kept (pipeline TEXT NOT NULL, key TEXT NOT NULL, value TEXT, PRIMARY KEY (pipeline, key))")
        return file
    }

    /// Opens the staging file at `path` when it holds `token`; `nil` when there is none, another
    /// load's, or one SQLite cannot read (torn by a failed write).
    static func open(at path: String, token: String, layouts: [EntityLayout]) -> StageFile? {
        guard path != ":memory:", FileManager.default.fileExists(atPath: path),
            let file = try? StageFile(path: path, token: token, layouts: layouts)
        else { return nil }
        var held: String?
        if let select = try? file.statement("SELECT token FROM _ingot_stage_meta") {
            try? select.query { row in held = sqlite3_column_text(row, 0).map { String(cString: $0) } }
        }
        // A file staged in another row format or without sorted runs (by an earlier version) is
        // not read: the load starts its stage again, as for a lost file. The columns are looked
        // up by name: a `SELECT` of a quoted name no table has reads it as a string instead.
        let described =
            file.layouts.allSatisfy { layout in
                file.columns(of: StageFile.table(of: layout)) == StageFile.stagedColumns(of: layout)
            } && file.columns(of: StagedRun.table) == StagedRun.columns.map { StageFile.quote($0.0) }
        guard held == token, described else {
            file.close()
            return nil
        }
        return file
    }

    /// The columns of `table` in this file, quoted, in order; empty when there is no such table.
    func columns(of table: String) -> [String] {
        var columns: [String] = []
        guard let info = try? statement("SELECT name FROM pragma_table_info(?1) ORDER BY cid") else { return [] }
        info.bind(.text(table), at: 1)
        try? info.query { row in columns.append(StageFile.quote(sqlite3_column_text(row, 0).map { String(cString: $0) } ?? "")) }
        return columns
    }

    /// What a staging file must survive.
    enum Durability {
        /// A crash: a resumed run on this machine takes the file up again (a staged load's),
        /// so its commits are synced and journaled.
        case resumable
        /// Nothing: written and read back within one step that a failure redoes from its
        /// source (a joined run's part, from the exchanged blobs: PGStore+Exchange.swift). No
        /// journal, no sync — with them, each part file's commit waited for the disk.
        case throwaway
    }

    /// Removes the staging file at `path` and its journal.
    static func remove(at path: String) {
        guard path != ":memory:" else { return }
        for suffix in ["", "-journal"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }

    private init(path: String, token: String, layouts: [EntityLayout]) throws {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &handle, flags, nil)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(handle)
            throw StoreError.sqlite(code: code, message: "the staging file \(path): \(message)", sql: "open")
        }
        self.path = path
        self.token = token
        self.handle = handle
        self.layouts = layouts
        do {
            // Appends only, in few transactions: a rollback journal holds the few pages an
            // append changes, and the rows are written once. The sorter spills to temporary
            // files; the page cache is a staged load's.
            try execute(
                "PRAGMA page_size = 16384; PRAGMA journal_mode = DELETE; PRAGMA synchronous = NORMAL; PRAGMA temp_store = FILE; PRAGMA cache_size = -\(StageFile.cacheKiB)"
            )
            try RowFeed.register(on: handle, arities: RowFeed.arities(for: layouts))
        } catch {
            sqlite3_close_v2(handle)
            throw error
        }
    }

    /// Whether a transaction is open.
    var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// The cached statement of `sql` on this file's connection.
    func statement(_ sql: String) throws(StoreError) -> RawStatement {
        if let statement = statements[sql] { return statement }
        let statement = try RawStatement(connection: handle, sql: sql)
        statements[sql] = statement
        return statement
    }

    func execute(_ sql: String) throws(StoreError) {
        var message: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &message)
        defer { sqlite3_free(message) }
        guard code == SQLITE_OK else {
            throw StoreError.sqlite(code: code, message: message.map { String(cString: $0) } ?? "error \(code)", sql: sql)
        }
    }

    /// Begins a transaction unless one is open.
    func begin() throws(StoreError) {
        if !isInTransaction { try execute("BEGIN IMMEDIATE") }
    }

    /// Commits the open transaction, if any.
    func commit() throws(StoreError) {
        if isInTransaction { try execute("COMMIT") }
    }

    /// Rolls back the open transaction, if any.
    func rollback() {
        if isInTransaction { sqlite3_exec(handle, "ROLLBACK", nil, nil, nil) }
    }

    /// Closes the connection (what is not committed is rolled back).
    func close() {
        for statement in statements.values { statement.finalize() }
        statements = [:]
        sqlite3_close_v2(handle)
    }

    /// Closes the connection and removes the file and its journal: a load merged, or a part
    /// written or given up.
    func discard() {
        close()
        StageFile.remove(at: path)
    }
}

/// glibc's `malloc_trim` (malloc.h is not in Swift's Glibc module): returns the heap's free
/// memory to the system.
@_silgen_name("malloc_trim") func glibcMallocTrim(_ pad: Int) -> Int32
