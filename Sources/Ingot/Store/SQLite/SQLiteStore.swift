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
        /// How the run writes its batches (``LoadPlan/decide(_:)``): staged from the start
        /// (`--bulk`, SQLiteStore+Staged.swift: batches go to staging tables, merged when the
        /// source is exhausted), turning staged once the database holds so many bytes or from a
        /// first batch into empty tables (``turnStaged(at:)``), or batch by batch. The store reads
        /// it; it is handed no Boolean of its own.
        package var plan = LoadPlan.batchByBatch
        /// The run resumes an unfinished one: a staged load keeps what it staged.
        package var resuming = false
        /// The pipeline whose runs the store writes (`nil`: the library's, which names none): a
        /// staged load's state and staging file are its own (``stateOwner``).
        package var pipeline: String?
        /// How the merge's folds read the staging tables (``StagedReadPlan``) and when one is
        /// folded in two parts at once (``FoldPart``); tests change them.
        package var folds = FoldSettings()

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
    /// When a load turns staged (``LoadPlan/stageAfterBytes``, unless the model cannot stage).
    let stageAfterBytes: Int?
    /// Where a staged load stages (``StageFile/path(for:pipeline:)``).
    let stagePath: String
    /// The pipeline whose staged load this store may make, resume or forget (`""`: none named).
    /// Its token and origin are kept under its name (``StageFile/stateKey(of:)``); a run of
    /// another pipeline into the same database leaves them alone.
    let stateOwner: String
    var stagedLoadKey: String { StageFile.stateKey(of: stateOwner) }
    var stagedOriginKey: String { StageFile.originKey(of: stateOwner) }
    /// A load into tables that were all empty when the store opened may stage from its first
    /// batch (``LoadPlan/stagesFromFirstBatch``).
    let stagesFromTheStart: Bool
    /// A staging table with this many rows or more is folded in two parts (``FoldPart``).
    let foldSettings: FoldSettings
    /// The merge runs under a rollback journal, not the WAL (``leaveWALForMerge()``): back to
    /// the WAL once it commits or rolls back.
    var mergeLeftWAL = false
    /// A staged load's merge is running (set and cleared on the writer's queue, read by
    /// ``interrupt()`` from any thread).
    let isMerging = Atomic<Bool>(false)
    /// The connections a merge's folds read on while it runs, for ``interrupt()``.
    let folds = FoldInterruption()
    /// What opening the store added to a database that held the pipeline's tables already.
    package private(set) var migration: [String] = []
    /// Identity lookups on the write connection (writer queue).
    private var writerLookupStorage: IdentityLookup?
    /// A read-only connection and its lookups, used by the assembler queue to resolve the next
    /// batch while the writer saves the current one (a staged load's merge closes it: it looks
    /// nothing up; ``leaveWALForMerge()``). `nil` for an in-memory database.
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
    /// Whether the store holds its caller's transaction (``TransactionOwner/caller``).
    var hold = TransactionHold.none

    // MARK: - Opening

    /// Opens (or creates) the database at `path` and brings its schema up to `model`: missing
    /// tables, columns and indexes are created; nothing is dropped.
    package init(path: String, model: EntityModel, options: Options = Options()) throws {
        _ = SQLiteStore.tuneSQLite
        self.model = model
        self.layouts = EntityLayout.layouts(of: model)
        stageAfterBytes = StageFile.obstacles(model, layouts).isEmpty ? options.plan.stageAfterBytes : nil
        stateOwner = options.pipeline ?? ""
        stagePath = StageFile.path(for: path, pipeline: stateOwner)
        stagesFromTheStart = options.plan.stagesFromFirstBatch && stageAfterBytes != nil && !options.plan.stagesAtOpen && !options.resuming
        foldSettings = options.folds
        dbQueue = try DatabaseQueue(path: path, configuration: SQLiteStore.configuration(options))
        // WAL, set here rather than by GRDB's `journalMode = .wal`: that also checks the size of
        // the `-wal` file through Foundation, and another program closing the database (a
        // sqlite3 shell, a test reading the run's progress) removes the file in between: the
        // open failed with "The file doesn't exist" (a DatabaseQueue needs no WAL file up front).
        let mode = try dbQueue.writeWithoutTransaction { db in try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL") }
        guard mode == "wal" || StageFile.isInMemory(path) else {
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
            if let connection { try RowFeed.register(on: connection, arities: RowFeed.arities(for: layouts)) }
        }
        (readConnection, traceContext) = SQLiteStore.openReader(path: path, observer: options.statementObserver)
        readerLookup = readConnection.map { IdentityLookup(connection: $0, layouts: layouts) }
        do {
            if options.plan.stagesAtOpen {
                try prepareStagedLoad(resuming: options.resuming, atOpen: true)
            } else {
                try settleStagedLoad(resuming: options.resuming)
            }
        } catch {
            try? close()
            throw error
        }
    }

    /// GRDB's configuration of the writer connection: no foreign-key checks, a bounded busy
    /// timeout, transactions the writer spans over batches, and the pragmas each connection gets.
    private static func configuration(_ options: Options) -> Configuration {
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
        return config
    }

    /// The read-only connection the assembler looks identities up on (none for an in-memory
    /// database), traced to `observer` when there is one.
    private static func openReader(
        path: String, observer: (@Sendable (String) -> Void)?
    ) -> (OpaquePointer?, Unmanaged<TraceContext>?) {
        var reader: OpaquePointer?
        guard !StageFile.isInMemory(path),
            sqlite3_open_v2(path, &reader, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK, let reader
        else {
            sqlite3_close_v2(reader)
            return (nil, nil)
        }
        guard let observer else { return (reader, nil) }
        let context = Unmanaged.passRetained(TraceContext(observer))
        sqlite3_trace_v2(
            reader, UInt32(SQLITE_TRACE_STMT),
            { _, context, statement, _ in
                guard let context, let statement else { return 0 }
                let sql = sqlite3_sql(OpaquePointer(statement)).map { String(cString: $0) } ?? ""
                Unmanaged<TraceContext>.fromOpaque(context).takeUnretainedValue().observer(sql)
                return 0
            }, context.toOpaque())
        return (reader, context)
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
        // A held transaction outlives the runs it is handed to: only its end closes the store.
        if hold.isHeld {
            try commit()
            return
        }
        try closeConnections()
    }

    func closeConnections() throws {
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

extension SQLiteStore: IngestStore {}
