import Foundation
import GRDB

/// What a pipeline needs from the database it ingests into, and nothing more: create or check
/// the schema (when it is opened), look up stored identities, write a resolved batch, keep the
/// run's bookkeeping, commit. ``Store`` (SQLite, one writer, WAL) is the backend today; another
/// database is another conformer. The merge rules are not here: folding, reference policies,
/// rejections and counts are the ``BatchResolver``'s, the same for every backend; a store
/// writes what it is given.
///
/// A store is used from two queues, never concurrently for the same call: ``lookupCommitted(_:_:)``
/// from the assembler's (it may read on a connection of its own), everything else from the writer's.
public protocol IngestStore: IdentityLookups {
    /// The column layout of each entity, in the model's order, as the store writes them: entities
    /// and columns travel by position (``ResolvedBatch/rows(of:)``), so a run refuses a store whose
    /// layouts are not the resolver's (``EntityLayout/layouts(of:)`` of the run's model).
    var layouts: [EntityLayout] { get }

    // MARK: Runs

    /// The most recent run of `pipeline` when it did not finish: what `--resume` continues.
    func unfinishedRun(pipeline: String) throws -> UnfinishedRun?
    /// Records the start of a run (status running).
    func beginRun(id: String, pipeline: String, startedAt: Date, archive: String?) throws
    /// Marks a resumed run running again.
    func reopenRun(id: String, archive: String?) throws
    /// Commits what is open, then records how the run ended.
    func finishRun(id: String, status: RunStatus, counters: RunCounters, finishedAt: Date) throws

    // MARK: Batches

    /// Writes a resolved batch in the open transaction (beginning one when none is): inserts,
    /// updates of the present columns, link replacements; then runs `then` in it with what the
    /// write did. When either throws, the open transaction is rolled back — or, for a store that
    /// ``undoesBatchesAlone``, only this batch's work.
    func write(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws
    /// Whether a ``write(_:then:)`` that fails undoes only its own batch (a savepoint per batch,
    /// cheap in a server database) and leaves the open transaction with the batches before it.
    /// Otherwise the writer stage keeps the open transaction's batches to redo them when it
    /// looks for the record a database refused. Default `false`.
    var undoesBatchesAlone: Bool { get }
    /// Writes `batch` in the open transaction (beginning one when none is) under a savepoint:
    /// when it or `then` throws, only its own work is undone — the transaction and the batches
    /// written in it before stay — and the error is rethrown. The slow path that finds the
    /// records a database refuses (``StoreError/refusedValue(_:)``); never used by a joined run.
    func writeIsolated(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws
    /// Inside `save`'s `extra`: the batch's rejections, the run's counters and where its source
    /// continues, so that a commit always describes its last batch.
    func recordProgress(_ progress: RunProgress) throws
    /// Whether batches were written since the last commit.
    var hasUncommittedBatches: Bool { get }
    /// Commits the batches written since the last commit (nothing when none were).
    func commit() throws
    /// Rolls the open transaction back (a batch could not be resolved): what was committed stays.
    func rollback() throws

    // MARK: write: replace

    /// Deletes the rows of `entity` whose identity is not in `keeping` — only those whose
    /// `scope.column` holds one of `scope.values`, when a scope is given (`write: {mode: replace,
    /// scope: …}`) — in the open transaction, nullifying what pointed at them, and, through
    /// `delete: cascade`, the rows they link to but those in `sparing` (per entity, the rows the
    /// run wrote: a cascade never deletes what this run stored). Returns how many were deleted.
    func deleteUntouched(
        entity: Int, keeping: Set<IdentityKey>, sparing: [Int: Set<IdentityKey>], scope: (column: String, values: [ScalarValue])?
    ) throws -> Int

    /// Per entity (by index) that relationships stub: rows still holding only their identity.
    func unfilledStubs() throws -> [Int: Int]

    // MARK: Staged loads (--bulk)

    /// Batches go to staging tables and reach the entities' tables at ``mergeStaged(fills:)``
    /// (SQLiteStore+Staged.swift). Default `false`.
    var isStaging: Bool { get }
    /// Merges what a staged load staged into the tables, in the open transaction, filling
    /// `default:` and `const:` columns (per entity: slot, value, whether always) as inserts do;
    /// returns per entity (by index) the rows inserted and the stubs among them, and calls
    /// `stored` with each stored row the records mentioned (entity, identity, whether changed)
    /// and `refused` with each row the database refused (a trigger or constraint added to a
    /// table: the row and its links are left out, the merge goes on).
    func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void,
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String) -> Void
    ) throws -> WriteResult
    /// Turns the load staged from the next batch on when the database has outgrown what batch
    /// by batch writes cheaply; called between transactions with the records saved since the
    /// last call. Whether it did.
    func startStagingIfOutgrown(records: Int) throws -> Bool

    /// Stages the load from its first batch, before anything is written, when the store may
    /// (``StoreOpening/stagesFromTheStart``) and its tables are empty; called by the writer with a
    /// first batch whose records came in no identity order. Whether it did.
    func startStagingAtFirstBatch() throws -> Bool

    /// A joined job's staged load holds a stretch of consecutive units, and a batch of `units`
    /// would not continue it (another job holds a unit between): the writer merges the stretch
    /// first, then writes the batch as joined batches are written. Called before each batch.
    func stagedStretchBreaks(at units: [UnitRef]) throws -> Bool

    /// Releases the connections. The store is not used after this.
    func close() throws

    /// The statements opening the store applied to a database that held the pipeline's tables
    /// already (columns, tables, indexes a changed pipeline added): the run logs them as
    /// `schema.migrated`. Empty when nothing changed, or the database was new.
    var migration: [String] { get }

    /// Why a staged load (`--bulk`) was asked for and the store loads batch by batch instead
    /// (PostgreSQL's tables hold rows: its staged load only copies into empty ones); the run logs
    /// it as `bulk.declined`. `nil` when it stages as asked, or was not asked to.
    var stagingDeclined: String? { get }

    /// Takes the database's lock on runs of `pipeline` for as long as the store is open,
    /// waiting up to `timeout` seconds for another run to let it go; throws a held
    /// ``RunLockError`` (exit 75) when it does not. SQLite's is a file beside the database,
    /// taken before the store opens (``RunLock``); a server database takes it here.
    func lockRuns(of pipeline: String, timeout: Double) throws

    /// Makes a statement in flight return at once with an error, from any thread: a stopped run
    /// must not wait for a database that does not answer. The store is not written afterwards.
    func interrupt()
}

/// What one ``IngestStore/write(_:then:)`` did, handed to its `then` (inside the write's
/// transaction) — or a staged load's merge (``IngestStore/mergeStaged(fills:stored:refused:)``:
/// per entity the rows inserted and the stubs among them, and its retries).
public struct WriteResult: Sendable {
    /// Per entity (by index), what the write did when the store counted it itself; `nil`: as the
    /// batch's resolver counted (from its lookups). Several jobs writing one run (PostgreSQL,
    /// `--join`) may create the same row at once: only the database knows which job inserted it.
    public var counts: [EntityCounts]?
    /// Per entity (by index), the positions in the batch's rows (``ResolvedBatch/rows(of:)``) of
    /// the stored rows the write found equal to what the batch gives — every present column and
    /// every given link set — and so did not write. `nil`: the store does not compare (each
    /// stored row a record mentions counts as updated). The run counts rows from it
    /// (``RunLedger``): `updated` versus `unchanged`.
    public var unchanged: [[Int]]?
    /// How many times the batch was written again because the database broke a deadlock between
    /// jobs sharing a run (each time in a new transaction); 0 for one writer.
    public var retries: Int

    /// A write that counted nothing itself and compared nothing: what a store that does not
    /// compare returns.
    public init(counts: [EntityCounts]? = nil, unchanged: [[Int]]? = nil, retries: Int = 0) {
        self.counts = counts
        self.unchanged = unchanged
        self.retries = retries
    }
}

extension IngestStore {
    /// Not a staged load.
    package var isStaging: Bool { false }

    /// Nothing staged, nothing merged.
    package func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void,
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String) -> Void
    ) throws -> WriteResult { WriteResult(counts: []) }

    /// Batch by batch throughout.
    package func startStagingIfOutgrown(records: Int) throws -> Bool { false }

    /// Batch by batch throughout.
    package func startStagingAtFirstBatch() throws -> Bool { false }
    package func stagedStretchBreaks(at units: [UnitRef]) throws -> Bool { false }

    /// A store without a schema of its own to migrate.
    public var migration: [String] { [] }

    /// A store that stages as asked, or refuses.
    public var stagingDeclined: String? { nil }

    /// A failed write rolls the whole open transaction back.
    public var undoesBatchesAlone: Bool { false }

    /// No lock of the store's own (SQLite's run lock is a file, taken before the store opens).
    public func lockRuns(of pipeline: String, timeout: Double) throws {}

    /// An embedded database always answers.
    public func interrupt() {}
}

extension SQLiteStore: IngestStore {}

/// How a run ended, as its row in the database records it.
public enum RunStatus: String, Sendable {
    /// Every page was read and applied (rejections are counted, not fatal).
    case finished
    /// The run stopped on an error; everything committed before it stays.
    case failed
    /// The run was stopped (SIGINT/SIGTERM) before the end of its source; what was read is saved.
    case interrupted
}

/// The counters of a run, as the summary line and `_ingot_runs` show them.
public struct RunCounters: Sendable, Equatable {
    /// Pages applied (a page in parts counts once).
    public var pages = 0
    /// Of ``pages``, those a refresh left out: byte for byte the last run's, and no row of theirs
    /// touched by a change (their records count as read, their rows as unchanged).
    public var unchangedPages = 0
    /// Records read, rejected ones included.
    public var records = 0
    /// Rows inserted, stubs included.
    public var inserted = 0
    /// Stored rows a record changed (each counted once per run).
    public var updated = 0
    /// Stored rows the run's records mentioned and found equal: not written (each counted once
    /// per run, and not at all once the run changes them).
    public var unchanged = 0
    /// Rows `write: replace` deleted.
    public var deleted = 0
    /// Records rejected.
    public var rejectedRecords = 0
    /// Pages rejected whole.
    public var rejectedPages = 0
    /// Records skipped: of a kind the pipeline maps to no entity (`root: {by: …, other: skip}`).
    public var skippedRecords = 0
    /// `on_invalid: null`: values stored as NULL because they could not be converted, per
    /// `entity.attribute`.
    public var invalidValues: [String: Int] = [:]
    /// A pipeline with several resources: pages applied per resource (by name).
    public var resourcePages: [String: Int] = [:]
    /// The same: records read per resource.
    public var resourceRecords: [String: Int] = [:]
    /// Raw page bytes read.
    public var bytes = 0
    /// The same, per entity (by name): rows inserted and updated, stubs created, records rejected.
    public var entities: [String: EntityCounts] = [:]
    /// Rejected records and pages per ``RejectReason`` code.
    public var rejectsByReason: [String: Int] = [:]

    /// Zero counters.
    public init() {}

    /// ``rejectsByReason`` as stored in `_ingot_runs.reject_counts`: a JSON object, keys sorted.
    var rejectsJSON: String {
        "{" + rejectsByReason.sorted { $0.key < $1.key }.map { #""\#($0.key)":\#($0.value)"# }.joined(separator: ",") + "}"
    }

    static func rejects(fromJSON text: String?) -> [String: Int] {
        guard let text, let document = try? JSONDocument(bytes: Array(text.utf8)) else { return [:] }
        var result: [String: Int] = [:]
        for (name, value) in document.root.members {
            if let key = name.string, let n = value.int64 { result[key] = Int(n) }
        }
        return result
    }

    /// ``entities`` as stored in `_ingot_runs.entity_counts`: a JSON object, keys sorted.
    var entitiesJSON: String {
        var out = "{"
        for (k, (name, c)) in entities.sorted(by: { $0.key < $1.key }).enumerated() {
            if k > 0 { out += "," }
            JSONText.quote(name, into: &out)
            out += #":{"inserted":\#(c.inserted),"updated":\#(c.updated),"unchanged":\#(c.unchanged),"stubs":\#(c.stubs)"#
            out += #","rejected":\#(c.rejected)"#
            if let unfilled = c.unfilled { out += #","unfilled":\#(unfilled)"# }
            out += "}"
        }
        return out + "}"
    }

    /// ``resourcePages`` and ``resourceRecords`` as stored in `_ingot_runs.resource_counts`:
    /// `{"films":{"pages":1,"records":6},…}`, keys sorted; `nil` for a pipeline without resources.
    var resourcesJSON: String? {
        guard !resourcePages.isEmpty || !resourceRecords.isEmpty else { return nil }
        var out = "{"
        for (k, name) in Set(resourcePages.keys).union(resourceRecords.keys).sorted().enumerated() {
            if k > 0 { out += "," }
            JSONText.quote(name, into: &out)
            out += #":{"pages":\#(resourcePages[name] ?? 0),"records":\#(resourceRecords[name] ?? 0)}"#
        }
        return out + "}"
    }

    /// Reads ``resourcesJSON`` back.
    mutating func readResources(fromJSON text: String?) {
        guard let text, let document = try? JSONDocument(bytes: Array(text.utf8)) else { return }
        for (name, value) in document.root.members {
            guard let key = name.string else { continue }
            resourcePages[key] = value["pages"]?.int64.map { Int($0) } ?? 0
            resourceRecords[key] = value["records"]?.int64.map { Int($0) } ?? 0
        }
    }

    /// Reads ``entitiesJSON`` back into ``entities``, and ``unchanged`` (kept only there) with it.
    mutating func readEntities(fromJSON text: String?) {
        entities = RunCounters.entities(fromJSON: text)
        unchanged = entities.values.reduce(0) { $0 + $1.unchanged }
    }

    /// Reads ``entitiesJSON`` back (a resumed run continues its counts).
    static func entities(fromJSON text: String?) -> [String: EntityCounts] {
        guard let text, let document = try? JSONDocument(bytes: Array(text.utf8)) else { return [:] }
        var result: [String: EntityCounts] = [:]
        for (name, value) in document.root.members {
            guard let key = name.string else { continue }
            func field(_ f: String) -> Int { value[f]?.int64.map { Int($0) } ?? 0 }
            result[key] = EntityCounts(
                inserted: field("inserted"), updated: field("updated"), unchanged: field("unchanged"), stubs: field("stubs"),
                rejected: field("rejected"), unfilled: value["unfilled"]?.int64.map { Int($0) })
        }
        return result
    }
}

/// A run that stopped before the end of its source.
public struct UnfinishedRun: Sendable {
    /// Its id: a resumed run keeps it.
    public var runID: String
    /// Its counters as last committed.
    public var counters: RunCounters
    /// The last page committed.
    public var lastSeq: Int
    /// Where its source continues; `nil` when no batch was committed.
    public var resumeState: String?

    /// An unfinished run as a store read it.
    public init(runID: String, counters: RunCounters, lastSeq: Int, resumeState: String?) {
        self.runID = runID
        self.counters = counters
        self.lastSeq = lastSeq
        self.resumeState = resumeState
    }
}

/// What a batch's transaction records about its run, with its rows: a commit always describes
/// its last batch, so `--resume` continues exactly after it.
public struct RunProgress: Sendable {
    /// The run the batch belongs to.
    public var runID: String
    /// The run's counters including this batch.
    public var counters: RunCounters
    /// The last whole page the batch completes (`nil`: it ends inside a page).
    public var lastSeq: Int?
    /// Where the source continues after that page.
    public var resumeState: String?
    /// The batch's rejections, stored in `_ingot_rejects`.
    public var rejections: [RecordRejection]
    /// Values kept across runs (the incremental cursor), by pipeline and key.
    public var kept: [(pipeline: String, key: String, value: String)] = []
}

/// A database failure that stops a run, or a database Ingot cannot use: what went wrong
/// (``Kind``), in which backend, the database's own message and code, the statement that failed,
/// and what the run was working on (the entity, the batch, the page) where that is known.
public struct StoreError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, as a caller decides on it (retry, exit code).
    public enum Kind: Sendable, Equatable {
        /// A statement failed (``sql`` says which; ``code`` or ``sqlState`` why).
        case statement
        /// The database's schema or bookkeeping is not what Ingot made.
        case schema
        /// The database's tables disagree with the pipeline (refused before anything is written).
        case conflict
        /// `--db` names a database Ingot cannot use (a scheme it does not know, an empty path).
        case unsupported
        /// The database server could not be reached (a later run may succeed: exit 75).
        case unreachable
        /// Units of a shared run this job held were taken over by other jobs after their leases
        /// ran out (this job stalled): the transaction was rolled back, the batch's other units
        /// handed back to the queue (``units`` says which were lost).
        case claimLost
    }

    /// What went wrong.
    public var kind: Kind
    /// `sqlite`, `postgresql`, or empty when no backend is concerned yet.
    public var backend: String
    /// The database's (or Ingot's) message.
    public var message: String
    /// The statement that failed, when one did.
    public var sql: String
    /// SQLite's (extended) result code.
    public var code: Int32?
    /// PostgreSQL's SQLSTATE.
    public var sqlState: String?
    /// The entity being written, when the store knew it.
    public var entity: String?
    /// The batch (its number in the run) and its first page's sequence number, when the writer
    /// stage knew them.
    public var batch: Int?
    /// The first page of that batch.
    public var page: Int?
    /// The units of a shared run lost to other jobs (``Kind/claimLost``).
    public var units: [Int] = []

    /// An error of `kind` from `backend` with the database's `message` and, for a failed statement, its SQL and code.
    public init(_ kind: Kind, backend: String = "", message: String, sql: String = "", code: Int32? = nil, sqlState: String? = nil) {
        self.kind = kind
        self.backend = backend
        self.message = message
        self.sql = sql
        self.code = code
        self.sqlState = sqlState
    }

    /// SQLite failed `sql` with result `code`.
    public static func sqlite(code: Int32, message: String, sql: String) -> StoreError {
        StoreError(.statement, backend: "sqlite", message: message, sql: sql, code: code)
    }

    /// PostgreSQL failed `sql`; `state` is its SQLSTATE.
    public static func postgres(message: String, sql: String, state: String? = nil) -> StoreError {
        StoreError(.statement, backend: "postgresql", message: message, sql: sql, sqlState: state)
    }

    /// The database's schema or bookkeeping is not what Ingot made.
    public static func schema(_ message: String) -> StoreError { StoreError(.schema, message: message) }
    /// The database's tables disagree with the pipeline.
    public static func conflict(_ message: String) -> StoreError { StoreError(.conflict, message: message) }
    /// `--db` names a database Ingot cannot use.
    public static func unsupported(_ message: String) -> StoreError { StoreError(.unsupported, message: message) }
    /// The database server could not be reached.
    public static func unreachable(_ message: String) -> StoreError { StoreError(.unreachable, message: message) }

    /// The database's message when it refused a value of a batch — not the connection, the disk
    /// or a lock: SQLite's CONSTRAINT, TOOBIG, MISMATCH or RANGE; PostgreSQL's data exceptions
    /// (SQLSTATE class 22), integrity constraint violations (23) and program limits (54: an
    /// identity too long for its index). `nil` for every other failure, which no record causes.
    public static func refusedValue(_ error: any Error) -> String? {
        switch error {
        case let error as StoreError where error.kind == .statement:
            if let code = error.code, [18, 19, 20, 25].contains(code & 0xFF) { return error.message }
            if let state = error.sqlState, ["22", "23", "54"].contains(String(state.prefix(2))) { return error.message }
            return nil
        case let error as DatabaseError where [18, 19, 20, 25].contains(error.resultCode.primaryResultCode.rawValue):
            return error.message ?? "\(error.resultCode)"
        default:
            return nil
        }
    }

    /// The message, with the statement that failed and what the run was working on.
    public var description: String {
        var text: String
        switch (kind, backend) {
        case (.statement, "sqlite"): text = "SQLite error \(code ?? 0): \(message)"
        case (.statement, "postgresql"): text = "PostgreSQL: \(message)"
        default: text = message
        }
        let context = [entity.map { "entity \($0)" }, batch.map { "batch \($0)" }, page.map { "page \($0)" }].compactMap { $0 }
        if !context.isEmpty { text += " [\(context.joined(separator: ", "))]" }
        if !sql.isEmpty { text += " (in: \(sql.prefix(300)))" }
        return text
    }
}

extension Date {
    /// The instant as the stores' run bookkeeping writes it: ISO-8601 in UTC, milliseconds.
    var runTimestamp: String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: self)
    }
}

extension RunCounters {
    /// Adds what saving a batch did (rows written, per entity too, and the store's rejections).
    mutating func add(_ outcome: BatchOutcome, model: EntityModel) {
        inserted += outcome.inserted
        updated += outcome.updated
        unchanged += outcome.unchanged
        skippedRecords += outcome.skipped
        rejectedRecords += outcome.rejections.count
        for (k, counts) in outcome.entities.enumerated() where counts != EntityCounts() {
            let name = model.entities[k].name
            entities[name] = (entities[name] ?? EntityCounts()) + counts
        }
        for r in outcome.rejections {
            entities[r.entity, default: EntityCounts()].rejected += 1
            rejectsByReason[r.code.rawValue, default: 0] += 1
        }
    }
}
