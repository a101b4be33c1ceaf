import CSQLiteTuning
import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// The SQLite backend: owns the write connection to the database (a GRDB `DatabaseQueue` in WAL
/// mode) and a read connection of committed rows, creates the schema from the model, and saves
/// batches in transactions the writer stage commits.
///
/// All SQL Ingot runs against SQLite is generated here (schema, identity lookups, inserts,
/// updates, links, bookkeeping).
///
/// Not thread-safe, and used from one queue at a time: the runner's thread opens it and records
/// the run's start and end; during the run, the writer queue owns the write connection and
/// everything else, and the assembler's queue the read connection (``lookupCommitted(_:_:)``
/// only). The runner hands it from one to the next through the stages' queues, which order the
/// handovers.
package final class SQLiteStore: @unchecked Sendable {  // one queue at a time (runner's, writer's); reader: assembler's
    package struct Options: Sendable {
        /// SQLite page cache in MiB. Default 40: it bounds memory on big databases (the OS page
        /// cache still holds the file); measured here, people-1M peaked at 218 MB with 128.
        package var cacheMiB = 40
        /// WAL size in MiB past which SQLite checkpoints it into the database. Default 80: a bulk
        /// writer that checkpoints every 1000 pages (SQLite's default, 4 MiB with 4 KiB pages)
        /// rewrites the same pages over and over; measured here, 5.7 s → 4.1 s on people-200k.
        package var walCheckpointMiB = 80
        /// Seconds to wait for a lock another connection holds (a reader opening the file, another
        /// run) before failing. Default 30.
        package var lockTimeout: Double = 30
        /// Called with the SQL of every statement executed (tests count identity lookups with it).
        package var statementObserver: (@Sendable (String) -> Void)?
        /// A staged load (`--bulk`, SQLiteStore+Staged.swift): batches go to staging tables,
        /// merged into the tables when the source is exhausted.
        package var staged = false
        /// A load that turns staged at the first commit after which the database file holds
        /// this many bytes (``turnStaged(at:)``); `nil`: never.
        package var stageAfterBytes: Int?
        /// A load into empty tables may stage from its first batch (``turnStaged(at:)``).
        package var stagesFromTheStart = false
        /// The run resumes an unfinished one: a staged load keeps what it staged.
        package var resuming = false
        /// A staging table with this many rows or more is folded in two parts at once
        /// (``FoldPart``; tests make it small).
        package var foldSplitRows = FoldPart.splitRows

        package init() {}
    }

    let model: EntityModel
    package let layouts: [EntityLayout]
    let dbQueue: DatabaseQueue
    /// Prepared statements, keyed by their SQL; finalized by `close()`.
    var statements: [String: RawStatement] = [:]
    var connection: OpaquePointer?
    /// Insert and update statements by shape; finalized by `close()`.
    var shapeStatements: [ShapeKey: RawStatement] = [:]
    /// Per entity, the positions of the stored rows the last batch write left as they were.
    var lastUnchanged: [[Int]] = []
    /// Where the load stands (SQLiteStore+Staged.swift), writer queue: batch by batch → staging
    /// (its stage file) → merged in the open transaction → batch by batch once that commits and
    /// the file is gone; a merge rolled back is staging again. ``moveLoad(to:)`` refuses any other
    /// move.
    private(set) var phase = LoadPhase.batchByBatch
    /// When a load turns staged (``Options/stageAfterBytes``).
    let stageAfterBytes: Int?
    /// Where a staged load stages (``StageFile/path(for:)``).
    let stagePath: String
    /// A load into tables that were all empty when the store opened may stage from its first
    /// batch (``Options/stagesFromTheStart``).
    let stagesFromTheStart: Bool
    /// A staging table with this many rows or more is folded in two parts (``FoldPart``).
    let foldSplitRows: Int64
    /// The merge runs under a rollback journal, not the WAL (``leaveWALForMerge()``): back to
    /// the WAL once it commits or rolls back.
    var mergeLeftWAL = false
    /// A staged load's merge is running (set and cleared on the writer's queue, read by
    /// ``interrupt()`` from any thread).
    let isMerging = Atomic<Bool>(false)
    /// The connections a merge's fold threads read on while it runs (SQLiteStore+StagedMerge.swift),
    /// for ``interrupt()`` (as addresses: a pointer is not `Sendable`).
    let foldConnections = Mutex<[UInt]>([])
    /// What opening the store added to a database that held the pipeline's tables already.
    package private(set) var migration: [String] = []
    /// Identity lookups on the write connection (writer queue).
    private var writerLookupStorage: IdentityLookup?
    /// A read-only connection and its lookups, used by the assembler queue to resolve the next
    /// batch while the writer saves the current one, then, once the source is exhausted, by a
    /// staged load's merge to fold on another thread (SQLiteStore+StagedMerge.swift). `nil` for an
    /// in-memory database.
    private(set) var readConnection: OpaquePointer?
    private(set) var readerLookup: IdentityLookup?
    /// The read connection's page cache was shrunk once the load turned staged.
    var readerCacheShrunk = false
    /// Held while the read connection is used: by the assembler's lookups, and by the writer's
    /// queue once, to shrink its cache when the load turns staged (``releaseReaderCache()``). A
    /// connection opened `NOMUTEX` may move between threads, never be used by two at once.
    let readerAccess = Mutex(())
    /// Per entity, the highest identity the run wrote batch by batch, and whether a batch since the
    /// writer last asked wrote below it (writer queue; ``noteScatter(_:)``).
    var highestIdentity: [Int: IdentityKey] = [:]
    var scattered = false
    private var traceContext: Unmanaged<TraceContext>?
    /// The run lock the backend took before opening the store (``SQLiteBackend``), released once
    /// the store is closed: closing a descriptor of the database drops SQLite's own locks
    /// (``RunLock``).
    var runLock: RunLock?

    // MARK: - Opening

    /// Opens (or creates) the database at `path` and brings its schema up to `model`: missing
    /// tables, columns and indexes are created; nothing is dropped.
    package init(path: String, model: EntityModel, options: Options = Options()) throws {
        _ = SQLiteStore.tuneSQLite
        self.model = model
        self.layouts = EntityLayout.layouts(of: model)
        stageAfterBytes = SQLiteStore.stagedLoadObstacles(model, layouts).isEmpty ? options.stageAfterBytes : nil
        stagePath = StageFile.path(for: path)
        stagesFromTheStart = options.stagesFromTheStart && stageAfterBytes != nil && !options.staged && !options.resuming
        foldSplitRows = options.foldSplitRows
        var config = Configuration()
        // Declared foreign keys are for tools; Ingot's writes keep them true and do not pay for checks.
        config.foreignKeysEnabled = false
        // Bounded: SQLite takes milliseconds as an Int32 (a longer wait trapped).
        config.busyMode = .timeout(min(max(0, options.lockTimeout), 86_400))
        // Batches share a write transaction until the writer commits (see `save`).
        config.allowsUnsafeTransactions = true
        let cache = options.cacheMiB
        let checkpointMiB = options.walCheckpointMiB
        let observer = options.statementObserver
        config.prepareDatabase { db in
            // 16 KiB pages (for a new database; an existing one keeps its own): fewer, larger
            // pages to dirty and write per batch. Measured on people-200k: 3.7-3.9 s -> 3.4-3.5 s.
            // `secure_delete = FAST`: Debian's SQLite is built with secure delete on, which
            // zeroes every page a delete frees, so emptying a staged load's staging tables wrote
            // them once more through the WAL (people-10M: 8 s -> 4.6 s after the merge); FAST
            // still overwrites deleted content in the pages that stay in use (docs/stores.md).
            try db.execute(
                sql:
                    "PRAGMA page_size = 16384; PRAGMA synchronous = NORMAL; PRAGMA temp_store = MEMORY; PRAGMA secure_delete = FAST; PRAGMA cache_size = -\(cache * 1024)"
            )
            let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096
            try db.execute(sql: "PRAGMA wal_autocheckpoint = \(max(1000, checkpointMiB * 1_048_576 / pageSize))")
            if let observer {
                db.trace(options: .statement) { event in
                    if case .statement(let statement) = event { observer(statement.sql) }
                }
            }
        }
        dbQueue = try DatabaseQueue(path: path, configuration: config)
        // WAL, set here rather than by GRDB's `journalMode = .wal`: that also checks the size of
        // the `-wal` file through Foundation, and another program closing the database (a
        // sqlite3 shell, a test reading the run's progress) removes the file in between: the
        // open failed with "The file doesn't exist" (a DatabaseQueue needs no WAL file up front).
        let mode = try dbQueue.writeWithoutTransaction { db in try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL") }
        guard mode == "wal" || path.isEmpty || path == ":memory:" else {
            throw StoreError.schema("could not put \(path) in WAL mode (journal_mode is \(mode ?? "unknown"))")
        }
        // A database whose tables disagree with the pipeline is refused before anything is written.
        let conflicts = try dbQueue.inDatabase { db in try SQLiteStore.schemaConflicts(model, existing: db) }
        if !conflicts.isEmpty {
            try? dbQueue.close()
            throw StoreError.conflict(
                "the database's tables disagree with the pipeline; nothing was written:\n  " + conflicts.joined(separator: "\n  "))
        }
        try SQLiteStore.migrator.migrate(dbQueue)
        try dbQueue.inDatabase { db in
            let existed = try layouts.contains { try db.tableExists($0.table) }
            let statements = try SQLiteStore.schemaStatements(model, existing: db)
            for sql in statements { try db.execute(sql: sql) }
            try DateTextMigration.migrate(db, model: model, layouts: layouts)
            if existed { migration = statements }
            connection = db.sqliteConnection
            if let connection { try RowFeed.register(on: connection, arities: StagedMerge.feedArities(layouts)) }
        }
        var reader: OpaquePointer?
        if path != ":memory:" && !path.isEmpty,
            sqlite3_open_v2(path, &reader, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK, let reader
        {
            readConnection = reader
            readerLookup = IdentityLookup(connection: reader, layouts: layouts)
            if let observer {
                let context = Unmanaged.passRetained(TraceContext(observer))
                traceContext = context
                sqlite3_trace_v2(
                    reader, UInt32(SQLITE_TRACE_STMT),
                    { _, context, statement, _ in
                        guard let context, let statement else { return 0 }
                        let sql = sqlite3_sql(OpaquePointer(statement)).map { String(cString: $0) } ?? ""
                        Unmanaged<TraceContext>.fromOpaque(context).takeUnretainedValue().observer(sql)
                        return 0
                    }, context.toOpaque())
            } else {
                traceContext = nil
            }
        } else {
            sqlite3_close_v2(reader)
            readerLookup = nil
            traceContext = nil
        }
        do {
            if options.staged {
                try prepareStagedLoad(resuming: options.resuming, atOpen: true)
            } else {
                try settleStagedLoad(resuming: options.resuming)
            }
        } catch {
            try? close()
            throw error
        }
    }

    /// Before the first connection: SQLite's memory statistics off (they take a global mutex on
    /// every allocation).
    private static let tuneSQLite: Void = { _ = ingot_sqlite_disable_memstatus() }()

    /// The lookups on the write connection.
    func writerLookup() throws(StoreError) -> IdentityLookup {
        if let lookup = writerLookupStorage { return lookup }
        guard let connection else { throw StoreError.schema("the store is closed") }
        let lookup = IdentityLookup(connection: connection, layouts: layouts)
        writerLookupStorage = lookup
        return lookup
    }

    /// A staged load's merge runs under a rollback journal instead of the WAL when nothing else
    /// holds the database (SQLite refuses the switch otherwise, and the merge goes on in the
    /// WAL): a page a transaction adds past the file's end is not journaled, so the merged
    /// tables are written once, where through the WAL they were written there, then copied into
    /// the database by the checkpoint (people-10M: 1.9 GB twice). A stop during the merge rolls
    /// back from the journal as from the WAL; the next run opens the database in WAL mode again.
    /// The read connection closes first: a staged load looks nothing up. Writer queue, between
    /// transactions; ``mergeLeftWAL`` says whether it switched.
    func leaveWALForMerge() {
        guard stageFile?.isFile == true, !hasUncommittedBatches else { return }
        readerLookup?.finalize()
        readerLookup = nil
        sqlite3_close_v2(readConnection)
        readConnection = nil
        // Through GRDB: it watches the connection's commits.
        let mode = try? dbQueue.writeWithoutTransaction { db in try String.fetchOne(db, sql: "PRAGMA journal_mode = DELETE") }
        mergeLeftWAL = mode == "delete"
    }

    /// Back to the WAL after a merge under a rollback journal (``leaveWALForMerge()``), on the
    /// database's queue, outside a transaction.
    func returnToWAL(_ db: Database) {
        guard mergeLeftWAL else { return }
        mergeLeftWAL = false
        _ = try? String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
    }

    /// Finalizes prepared statements, closes the database, then lets the run lock go.
    package func close() throws {
        defer { runLock = nil }
        dbQueue.inDatabase { _ in
            for statement in statements.values { statement.finalize() }
            for statement in shapeStatements.values { statement.finalize() }
            writerLookupStorage?.finalize()
        }
        statements = [:]
        shapeStatements = [:]
        readerLookup?.finalize()
        sqlite3_close_v2(readConnection)
        readConnection = nil
        stageFile?.close()
        phase = .batchByBatch  // closed: the store is not used any more
        traceContext?.release()
        try dbQueue.close()
    }

    // MARK: - Schema

    /// Ingot's own tables, versioned with GRDB migrations.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE _ingot_runs (
                      run_id TEXT PRIMARY KEY,
                      pipeline TEXT NOT NULL,
                      started_at TEXT NOT NULL,
                      finished_at TEXT,
                      status TEXT NOT NULL,
                      pages INTEGER NOT NULL DEFAULT 0,
                      records INTEGER NOT NULL DEFAULT 0,
                      inserted INTEGER NOT NULL DEFAULT 0,
                      updated INTEGER NOT NULL DEFAULT 0,
                      deleted INTEGER NOT NULL DEFAULT 0,
                      rejected_records INTEGER NOT NULL DEFAULT 0,
                      rejected_pages INTEGER NOT NULL DEFAULT 0,
                      last_seq INTEGER
                    );
                    CREATE TABLE _ingot_rejects (
                      run_id TEXT NOT NULL,
                      entity TEXT NOT NULL,
                      coding_path TEXT NOT NULL,
                      reason TEXT NOT NULL,
                      source TEXT NOT NULL,
                      record_index INTEGER,
                      raw TEXT
                    );
                    CREATE INDEX _ingot_rejects_run ON _ingot_rejects(run_id);
                    """)
        }
        migrator.registerMigration("v2: rejects name their archive entry") { db in
            try db.execute(
                sql: """
                    ALTER TABLE _ingot_rejects ADD COLUMN archive TEXT;
                    ALTER TABLE _ingot_rejects ADD COLUMN archive_entry INTEGER;
                    ALTER TABLE _ingot_runs ADD COLUMN archive TEXT;
                    """)
        }
        migrator.registerMigration("v3: resume and incremental state") { db in
            try db.execute(
                sql: """
                    ALTER TABLE _ingot_runs ADD COLUMN resume_state TEXT;
                    CREATE TABLE _ingot_state (
                      pipeline TEXT NOT NULL,
                      key TEXT NOT NULL,
                      value TEXT,
                      PRIMARY KEY (pipeline, key)
                    );
                    """)
        }
        migrator.registerMigration("v4: rejects keep a bounded prefix of their text, and its whole length") { db in
            try db.execute(sql: "ALTER TABLE _ingot_rejects ADD COLUMN raw_length INTEGER")
        }
        migrator.registerMigration("v5: counts per entity") { db in
            try db.execute(sql: "ALTER TABLE _ingot_runs ADD COLUMN entity_counts TEXT")
        }
        migrator.registerMigration("v6: rejects by reason") { db in
            try db.execute(
                sql: """
                    ALTER TABLE _ingot_runs ADD COLUMN reject_counts TEXT;
                    ALTER TABLE _ingot_rejects ADD COLUMN reason_code TEXT;
                    """)
        }
        migrator.registerMigration("v7: counts per resource") { db in
            try db.execute(sql: "ALTER TABLE _ingot_runs ADD COLUMN resource_counts TEXT")
        }
        migrator.registerMigration("v8: page prints for refreshes") { db in
            try db.execute(
                sql: """
                    CREATE TABLE _ingot_print_runs (
                      run_id TEXT PRIMARY KEY,
                      pipeline TEXT NOT NULL,
                      fingerprint TEXT NOT NULL
                    );
                    CREATE TABLE _ingot_page_prints (
                      run_id TEXT NOT NULL,
                      seq INTEGER NOT NULL,
                      digest BLOB NOT NULL,
                      records INTEGER NOT NULL,
                      clean INTEGER NOT NULL,
                      footprint BLOB NOT NULL,
                      PRIMARY KEY (run_id, seq)
                    ) WITHOUT ROWID;
                    """)
        }
        migrator.registerMigration("v9: date columns in the fixed-width form") { db in
            // The columns DateTextMigration has rewritten (or created in the fixed-width form).
            try db.execute(
                sql: "CREATE TABLE _ingot_date_columns (tbl TEXT NOT NULL, col TEXT NOT NULL, PRIMARY KEY (tbl, col)) WITHOUT ROWID")
        }
        return migrator
    }

    /// What a run of `model` would do to the database at `path`, without writing anything (the
    /// file is opened read-only, and not created): the conflicts that would refuse the run, and
    /// the statements that would bring the schema up to the model.
    package static func plan(model: EntityModel, databasePath path: String) throws -> (
        exists: Bool, conflicts: [String], statements: [String]
    ) {
        guard path != ":memory:", FileManager.default.fileExists(atPath: path) else {
            return (false, [], schema(of: model))
        }
        var config = Configuration()
        config.readonly = true
        let queue = try DatabaseQueue(path: path, configuration: config)
        defer { try? queue.close() }
        return try queue.read { db in
            (true, try schemaConflicts(model, existing: db), try schemaStatements(model, existing: db))
        }
    }

    /// The DDL of `model`'s tables, as `ingot schema` prints it.
    package static func schema(of model: EntityModel) -> [String] {
        let layouts = EntityLayout.layouts(of: model)
        return layouts.flatMap { definitions($0, of: layouts, model: model).map(\.sql) }
    }

    /// A table or an index the schema creates, by name.
    private enum SchemaObject {
        case table(String)
        case index(String)
        case trigger(String)
    }

    /// `FOREIGN KEY (columns) REFERENCES` the identity of `entity`: declared for tools that read
    /// relations (`.schema`, Datasette, ORMs), deferred, and not enforced by Ingot's connection
    /// (the links it writes keep them true: a bare identity no row has makes a stub, or no link).
    private static func foreignKey(_ columns: [String], to entity: Int, model: EntityModel) -> String {
        let target = model.entities[entity]
        return "FOREIGN KEY (\(columns.map(quote).joined(separator: ", "))) REFERENCES \(quote(target.table)) "
            + "(\(target.identity.map(quote).joined(separator: ", "))) DEFERRABLE INITIALLY DEFERRED"
    }

    /// What `layout` needs in the database: its table, its identity index, its join tables.
    private static func definitions(
        _ layout: EntityLayout, of layouts: [EntityLayout], model: EntityModel
    ) -> [(object: SchemaObject, sql: String)] {
        var definitions: [(SchemaObject, String)] = []
        let identity = layout.identitySlots.map { layout.columns[$0].name }
        var columns = layout.columns.map { column in
            "\(quote(column.name)) \(SQLiteStore.columnType(column.type))\(identity.contains(column.name) ? " NOT NULL" : "")"
        }
        for toOne in layout.toOne where !model.entities[toOne.target].identity.isEmpty {
            columns.append(foreignKey(toOne.slots.map { layout.columns[$0].name }, to: toOne.target, model: model))
        }
        // An owned row's owner (its leading identity columns).
        if let name = model.entities[layout.entity].owner, let owner = model.index(of: name) {
            columns.append(foreignKey(Array(identity.dropLast()), to: owner, model: model))
        }
        definitions.append((.table(layout.table), "CREATE TABLE IF NOT EXISTS \(quote(layout.table)) (\(columns.joined(separator: ", ")))"))
        if !identity.isEmpty {
            let index = layout.table + "_identity"
            definitions.append(
                (
                    .index(index),
                    "CREATE UNIQUE INDEX IF NOT EXISTS \(quote(index)) ON \(quote(layout.table))(\(identity.map(quote).joined(separator: ", ")))"
                ))
        }
        // The key columns of this table a to-one's inverse reads (`planet.residents` ↔ `homeworld_id`), indexed.
        for other in layouts {
            for toMany in other.toMany where toMany.isForeignKey && toMany.joinTable == layout.table {
                let index = toMany.joinTable + "_" + toMany.sourceColumns.joined(separator: "_")
                definitions.append(
                    (
                        .index(index),
                        "CREATE INDEX IF NOT EXISTS \(quote(index)) ON \(quote(toMany.joinTable))(\(toMany.sourceColumns.map(quote).joined(separator: ", ")))"
                    ))
            }
        }
        for toMany in layout.toMany where toMany.hasJoinTable {  // an owned relationship's table is its target's
            if toMany.isInverse {
                // The inverse's table (made with its owner, declared first), indexed for this side's reads.
                let index = toMany.joinTable + "_" + toMany.sourceColumns.joined(separator: "_")
                definitions.append(
                    (
                        .index(index),
                        "CREATE INDEX IF NOT EXISTS \(quote(index)) ON \(quote(toMany.joinTable))(\(toMany.sourceColumns.map(quote).joined(separator: ", ")))"
                    ))
                continue
            }
            let source = model.entities[layout.entity].identityAttributes.map { SQLiteStore.columnType($0.type) }
            let target = model.entities[toMany.target].identityAttributes.map { SQLiteStore.columnType($0.type) }
            var defs = zip(toMany.sourceColumns, source).map { "\(quote($0)) \($1) NOT NULL" }
            defs += zip(toMany.targetColumns, target).map { "\(quote($0)) \($1) NOT NULL" }
            if toMany.isOrdered { defs.append("\"position\" INTEGER NOT NULL") }
            defs.append(foreignKey(toMany.sourceColumns, to: layout.entity, model: model))
            defs.append(foreignKey(toMany.targetColumns, to: toMany.target, model: model))
            let key = (toMany.sourceColumns + toMany.targetColumns).map(quote).joined(separator: ", ")
            definitions.append(
                (
                    .table(toMany.joinTable),
                    "CREATE TABLE IF NOT EXISTS \(quote(toMany.joinTable)) (\(defs.joined(separator: ", ")), PRIMARY KEY (\(key))) WITHOUT ROWID"
                ))
        }
        // One identity, one kind (OneKindRule): a child row whose identity a sibling holds is refused.
        for rule in OneKindRule.of(model) where rule.table == layout.table {
            let held = rule.siblings.map { sibling in
                "EXISTS (SELECT 1 FROM \(quote(sibling)) WHERE \(rule.identity.map { "\(quote($0)) = NEW.\(quote($0))" }.joined(separator: " AND ")))"
            }
            let message = rule.message.replacingOccurrences(of: "'", with: "''")
            definitions.append(
                (
                    .trigger(rule.name),
                    "CREATE TRIGGER IF NOT EXISTS \(quote(rule.name)) BEFORE INSERT ON \(quote(rule.table)) WHEN \(held.joined(separator: " OR ")) "
                        + "BEGIN SELECT RAISE(ABORT, '\(message)'); END"
                ))
        }
        return definitions
    }

    /// The DDL that brings an existing database up to `model`, and only what is missing: new
    /// tables, join tables and identity indexes, and `ALTER TABLE … ADD COLUMN` for columns a
    /// changed pipeline added. A run applies it; `--dry-run` prints it.
    private static func schemaStatements(_ model: EntityModel, existing db: Database) throws -> [String] {
        var statements: [String] = []
        let layouts = EntityLayout.layouts(of: model)
        for layout in layouts {
            if try db.tableExists(layout.table) {
                let present = Set(try db.columns(in: layout.table).map { $0.name.lowercased() })
                for column in layout.columns where !present.contains(column.name.lowercased()) {
                    statements.append(
                        "ALTER TABLE \(quote(layout.table)) ADD COLUMN \(quote(column.name)) \(SQLiteStore.columnType(column.type))")
                }
            }
            for (object, sql) in definitions(layout, of: layouts, model: model) {
                let exists: Bool
                switch object {
                case .table(let name): exists = try db.tableExists(name)
                case .index(let name), .trigger(let name):
                    let type = if case .trigger = object { "trigger" } else { "index" }
                    exists =
                        try Bool.fetchOne(
                            db, sql: "SELECT 1 FROM sqlite_master WHERE type = ? AND name = ? COLLATE NOCASE", arguments: [type, name])
                        ?? false
                }
                if !exists { statements.append(sql) }
            }
        }
        return statements
    }

    /// How the existing tables of `db` disagree with `model` (``StoredTables/conflicts(with:columnType:)``).
    static func schemaConflicts(_ model: EntityModel, existing db: Database) throws -> [String] {
        var tables: [String: StoredTables.Table] = [:]
        for layout in EntityLayout.layouts(of: model) {
            // The join tables a to-one would have had as a to-many too (a relationship that changed kind).
            let wouldJoin = layout.toOne.map { "\(layout.table)_\(model.entities[layout.entity].relationships[$0.relationship].name)" }
            for name in [layout.table] + layout.toMany.map(\.joinTable) + wouldJoin where try db.tableExists(name) {
                let index = try db.indexes(on: name).first { $0.name.lowercased() == (name + "_identity").lowercased() }
                tables[name.lowercased()] = StoredTables.Table(
                    columns: Dictionary(try db.columns(in: name).map { ($0.name.lowercased(), $0.type) }, uniquingKeysWith: { a, _ in a }),
                    identity: index?.columns,
                    // A unique index is added to a table without duplicates: an empty one, surely.
                    acceptsIdentity: try Int.fetchOne(db, sql: "SELECT count(*) FROM \(quote(name))") ?? 0 == 0)
            }
        }
        return StoredTables(tables: tables, caseInsensitive: true).conflicts(with: model, columnType: columnType)
    }

    static func quote(_ identifier: String) -> String { "\"\(identifier)\"" }

    /// The SQLite column type that stores `type`: INTEGER (integers; booleans as 0 or 1), REAL,
    /// TEXT (strings; dates as ISO-8601 text in UTC; JSON as its text).
    static func columnType(_ type: AttributeType) -> String {
        switch type {
        case .integer, .bool: "INTEGER"
        case .double: "REAL"
        case .string, .date, .json: "TEXT"
        }
    }

    // MARK: - Statements

    /// The prepared statement for `sql`, prepared once per store.
    func statement(_ sql: String) throws(StoreError) -> RawStatement {
        if let statement = statements[sql] { return statement }
        guard let connection else { throw StoreError.schema("the store is closed") }
        let statement = try RawStatement(connection: connection, sql: sql)
        statements[sql] = statement
        return statement
    }
}

/// Carries a statement observer through SQLite's C trace callback.
final class TraceContext {
    let observer: @Sendable (String) -> Void
    init(_ observer: @escaping @Sendable (String) -> Void) { self.observer = observer }
}

/// The load's lifecycle (``SQLiteStore/phase``): its moves are checked here, where the phase is
/// kept.
extension SQLiteStore {
    /// Where a SQLite load stands (``phase``).
    enum LoadPhase: CustomStringConvertible {
        /// Batches written into the tables.
        case batchByBatch
        /// Batches appended to the stage file's tables.
        case staging(StageFile)
        /// The stage merged into the tables in the open transaction: the file goes at its commit.
        case merged(StageFile)

        var description: String {
            switch self {
            case .batchByBatch: "batch by batch"
            case .staging: "staging"
            case .merged: "merged, not committed"
            }
        }
    }

    /// Batches are staged.
    var isStaging: Bool { if case .staging = phase { true } else { false } }

    /// The stage file, while the load stages or its merge is not committed.
    var stageFile: StageFile? {
        switch phase {
        case .staging(let file), .merged(let file): file
        case .batchByBatch: nil
        }
    }

    /// Moves the load to `next`, refusing a move its lifecycle does not have: batch by batch →
    /// staging → merged → batch by batch (committed) or staging (rolled back). A refused move
    /// closes the stage file it was given, if that is not the load's own.
    func moveLoad(to next: LoadPhase) throws(StoreError) {
        switch (phase, next) {
        case (.batchByBatch, .staging), (.staging, .merged), (.merged, .batchByBatch), (.merged, .staging):
            phase = next
        default:
            if case .staging(let file) = next, file !== stageFile { file.close() }
            throw StoreError.schema("a load cannot go from \(phase) to \(next)")
        }
    }
}
