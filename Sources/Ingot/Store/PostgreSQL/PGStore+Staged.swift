import Foundation
import GRDBSQLite

/// A staged load into PostgreSQL, loaded the way a database loads a dump: the batches are staged
/// as a SQLite staged load stages them, in a stage file of the job's own (``StageFile``,
/// `ingot-stage-<uuid>.db` in the temporary directory); at the end the same folds as SQLite's
/// merge read them back in identity order (``StageFile/fold(settings:interruption:_:)``), and
/// each folded row — each final row once — is streamed into PostgreSQL's `COPY`
/// (``PGStagedCopy``), in the run's last transaction. `--bulk` asks for it; a first load from local pages whose first batch
/// came in no identity order gets it by default (``PGStore/turnStaged(at:)``).
///
/// Why: batch by batch, every record a load re-sends is an `UPDATE` on the server (people-200k:
/// 232,888 of them for 96,801 dogs) and every batch a lookup query; a first load spent 2.3–3.0 s
/// of server time where copying the final rows takes 0.6–0.9 s (docs/performance-notes.md).
///
/// What it asks of the load, checked before anything is written: a single job (not `--join`)
/// and a model a staged load can run (``StageFile/obstacles(_:_:)``); and tables that are
/// empty — the copy inserts every folded row, it does not merge into stored ones: into tables
/// that hold rows the load goes batch by batch, and says so (`bulk.declined`).
///
/// **Resume.** The file is named in PostgreSQL before it is made (`_ingot_state`, key
/// `staged_load:<run id>`, its path; ``PGStore/makeStaging()``). Each commit commits the staging
/// file, then — in PostgreSQL — the run's resume point, counters and rejects: a staged suffix
/// past the resume point is harmless, as in SQLite. The tables see nothing until the copy, which
/// marks the key copied with the rows; the file is removed when the store closes, then the key.
/// A run that ends unfinished keeps its file; `--resume` on the same machine (the same temporary
/// directory) finds it and goes on staging; when it is gone (another machine, a new container)
/// or the load may not stage any more (`--no-bulk`), the run starts again from its first page —
/// its progress and rejects reset, the tables being empty. Kept values (the incremental cursor)
/// wait in the file and reach PostgreSQL with the rows: a later run never reads a cursor past
/// rows not copied.
final class PGStaging {  // writer queue only, as the PGStore that owns it
    /// The stage file the load is staged in and folded from; it holds the kept values too.
    let file: StageFile
    let path: String
    /// The run the staged rows belong to.
    let runID: String
    /// The `_ingot_state` key naming this file (``stateKey(_:)``).
    let key: String
    /// Rejections of the open transaction's batches and its last progress, written to
    /// PostgreSQL at its commit (kept values go to the staging file with the batch).
    private var pendingRejections: [RecordRejection] = []
    private var pendingProgress: RunProgress?
    /// The rows' copy into PostgreSQL committed, or the load was given up: ``close()`` removes the
    /// file (``PGLoad/published``).
    var published = false
    /// The bytes of `COPY` text held before they are sent (a test makes it small, so that a few
    /// rows take every path).
    var copyBytes = PGStaging.defaultCopyBytes

    /// Run `runID`'s staging file at `path` (PostgreSQL names it already): made, or opened again
    /// (`resuming`) to go on with the load it staged.
    init(model: EntityModel, path: String, runID: String, key: String? = nil, resuming: Bool) throws {
        self.path = path
        self.runID = runID
        let key = key ?? PGStaging.stateKey(runID)
        self.key = key
        // The file's token is its key: a file another run made at this path is not read.
        let layouts = EntityLayout.layouts(of: model)
        if resuming {
            guard let file = StageFile.open(at: path, token: key, layouts: layouts) else {
                throw StoreError.conflict("the staging file \(path) is missing, torn or another run's")
            }
            self.file = file
        } else {
            file = try StageFile.create(at: path, token: key, layouts: layouts)
        }
    }

    /// Appends a batch to the stage, in the file's open transaction (rolled back whole when it
    /// fails); `then` gets what a staged batch writes: nothing counted yet (its rows are counted
    /// when they are copied).
    func write(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        do {
            try file.append(batch)
            try then(nothingWritten)
        } catch {
            file.rollback()
            throw error
        }
    }

    /// ``write(_:then:)`` under a savepoint: when it fails, only this batch's rows are undone.
    func writeIsolated(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        try file.isolated {
            try file.append(batch)
            try then(nothingWritten)
        }
    }

    private var nothingWritten: WriteResult {
        WriteResult(
            counts: Array(repeating: EntityCounts(), count: file.layouts.count), unchanged: Array(repeating: [], count: file.layouts.count))
    }

    /// Batches were staged since the last commit.
    var hasUncommittedBatches: Bool { file.isInTransaction }

    /// A new staging file's path, in `directory` (`nil`: the temporary directory).
    static func newPath(in directory: String? = nil) -> String {
        let base = directory.map { URL(fileURLWithPath: $0) } ?? FileManager.default.temporaryDirectory
        return base.appendingPathComponent("ingot-stage-\(UUID().uuidString).db").path
    }

    /// Before the path in a `staged_load:` key: the rows were copied, the file is to go.
    static let copiedMark = "copied:"

    /// The staging file a `staged_load:` key's value names, copied or not.
    static func path(named value: String) -> String {
        value.hasPrefix(copiedMark) ? String(value.dropFirst(copiedMark.count)) : value
    }

    /// The `_ingot_state` key naming the staging file of run `runID`.
    static func stateKey(_ runID: String) -> String { "staged_load:" + runID }

    /// Holds a batch's progress until its transaction commits (its kept values in the file,
    /// with its rows).
    func hold(_ progress: RunProgress) throws {
        for item in progress.kept { try file.keep(pipeline: item.pipeline, key: item.key, value: item.value) }
        pendingRejections += progress.rejections
        pendingProgress = progress
    }

    /// Commits the staged batches (their kept values with them) and hands back what PostgreSQL
    /// is to commit next: the last progress, with every rejection since the last commit.
    func commit() throws -> RunProgress? {
        do {
            try file.commit()
        } catch {
            // The staged rows are not durable: the progress that counts them is never written.
            rollback()
            throw error
        }
        defer {
            pendingRejections = []
            pendingProgress = nil
        }
        guard var progress = pendingProgress else { return nil }
        progress.rejections = pendingRejections
        progress.kept = []
        return progress
    }

    func rollback() {
        pendingRejections = []
        pendingProgress = nil
        file.rollback()
    }

    /// The kept values the load's batches gave (the incremental cursor), from the staging file.
    func keptValues() throws -> [(pipeline: String, key: String, value: String)] {
        try file.keptValues()
    }

    /// Closes the staging store, and removes its files once the rows are copied; an unfinished
    /// run keeps them for `--resume`.
    func close() {
        file.close()
        if published { PGStaging.remove(at: path, directory: URL(fileURLWithPath: path).deletingLastPathComponent().path) }
    }

    /// Removes a staging file and its companions — only when `path` is one Ingot makes
    /// (``isOwn(_:directory:)``), and only regular files: never a link, never a directory.
    static func remove(at path: String, directory: String?) {
        guard isOwn(path, directory: directory) else { return }
        for suffix in ["", "-wal", "-shm", ".lock", "-journal", ".stage", ".stage-journal"] {
            var info = stat()
            guard lstat(path + suffix, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
            unlink(path + suffix)
        }
    }

    /// Whether `path` names a staging file as this job makes them: `ingot-stage-<UUID>.db`
    /// directly in the staging directory (`directory`, else the temporary directory). A path
    /// read from `_ingot_state` is input: whoever can write that table must not make a job open
    /// or remove any other file (docs/reliability.md, hostile input).
    static func isOwn(_ path: String, directory: String?) -> Bool {
        let url = URL(fileURLWithPath: path)
        let name = url.lastPathComponent
        let base = directory.map { URL(fileURLWithPath: $0) } ?? FileManager.default.temporaryDirectory
        guard url.deletingLastPathComponent().standardized.path == base.standardized.path,
            name.hasPrefix("ingot-stage-"), name.hasSuffix(".db")
        else { return false }
        let uuid = name.dropFirst("ingot-stage-".count).dropLast(".db".count)
        return UUID(uuidString: String(uuid)) != nil
    }
}

extension PGStore {
    /// Starts a staged load (PGStaging): refused, with the reason, when the pipeline cannot be
    /// one. Into tables that hold rows it loads batch by batch instead (``loadState``
    /// says why): the copy only inserts — a refresh of a cache that `INGOT_BULK=1` loaded first
    /// goes on running, and so does a resumed run whose copy committed before the job was killed
    /// (its resume point, written with the rows, is past the last page).
    func startStagedLoad() throws {
        let reasons = StageFile.obstacles(model, layouts)
        guard reasons.isEmpty else {
            throw StoreError.conflict("--bulk cannot load this pipeline into PostgreSQL: " + reasons.joined(separator: "; "))
        }
        let filled = try filledTables()
        guard filled.isEmpty else {
            try moveLoad(
                to: .declined(
                    "a staged PostgreSQL load copies into empty tables; \(filled.joined(separator: ", ")) hold rows: batch by batch"))
            return
        }
        try moveLoad(to: .stagedWithTheRun)
    }

    /// Turns the load staged at `moment` (``IngestStore/turnStaged(at:)``): at the first batch
    /// only (PostgreSQL's staged load copies into empty tables), when its plan says it may
    /// (``LoadPlan/stagesFromFirstBatch``: a first load from local pages, not `--no-bulk`), the
    /// pipeline allows a staged load and the entities' tables are all empty — as SQLite's store
    /// does. Batch by batch, people-200k spent 2.3–3.0 s of server time updating the rows it
    /// re-sends, where copying the final rows takes 0.6–0.9 s (docs/performance-notes.md).
    /// (``loadState`` says whether it did.)
    ///
    /// A staging file that cannot be made (a read-only or full temporary directory, as in a
    /// container with a read-only root) leaves the load batch by batch, as it ran before it was
    /// staged by default, and says why (``loadState``: `bulk.declined`).
    func turnStaged(at moment: StagingMoment) throws -> LoadState {
        if case .firstBatch = moment { try startStagingAtFirstBatch() }
        return loadState
    }

    /// Stages from the first batch, as ``turnStaged(at:)`` says.
    func startStagingAtFirstBatch() throws {
        guard plan.stagesFromFirstBatch, staging == nil, !inTransaction,
            StageFile.obstacles(model, layouts).isEmpty, try filledTables().isEmpty
        else { return }
        do {
            try makeStaging()
        } catch let failure as StagingFileFailure {
            try moveLoad(to: .declined("the staging file \(failure.path) could not be made (\(failure.error)): batch by batch"))
            return
        }
    }

    /// Makes the run's staging file, named in PostgreSQL first (committed): a job killed at any
    /// moment leaves no file PostgreSQL does not name, which `--resume` or the next run removes.
    /// A file that cannot be made is not named any more, and throws a ``StagingFileFailure``.
    func makeStaging() throws {
        guard let runID, !inTransaction else { throw StoreError.schema("a staged load begins with its run, between transactions") }
        let path = PGStaging.newPath(in: stagingFiles.directory)
        let key = PGStaging.stateKey(runID)
        try connection.execute(
            "INSERT INTO _ingot_state (pipeline, key, value) VALUES ('', $1, $2) ON CONFLICT (pipeline, key) DO UPDATE SET value = excluded.value",
            [key, path])
        do {
            let made = try PGStaging(model: model, path: path, runID: runID, key: key, resuming: false)
            made.copyBytes = stagingFiles.copyBytes
            try moveLoad(to: .staging(made))
        } catch {
            PGStaging.remove(at: path, directory: stagingFiles.directory)
            try forgetStagingKey(key)
            throw StagingFileFailure(path: path, error: error)
        }
    }

    /// What `--resume` does with unfinished run `runID`'s staged load, if it has one (PGStaging,
    /// "Resume"): its staging file opened again when it is here and the load may stage; else the
    /// run is to start again from its first page. Whether the run goes on from its resume point.
    func findStagedLoad(of runID: String) throws -> Bool {
        let rows = try connection.execute("SELECT value FROM _ingot_state WHERE pipeline = '' AND key = $1", [PGStaging.stateKey(runID)])
        guard let value = rows.first?[0] ?? nil else { return true }
        if value.hasPrefix(PGStaging.copiedMark) {
            // Copied, and the job killed before it removed the file: nothing left to stage.
            PGStaging.remove(at: PGStaging.path(named: value), directory: stagingFiles.directory)
            try forgetStagingKey(of: runID)
            return true
        }
        let path = value
        if plan.mayStage, PGStaging.isOwn(path, directory: stagingFiles.directory), FileManager.default.fileExists(atPath: path),
            let staging = try? PGStaging(model: model, path: path, runID: runID, resuming: true)
        {
            staging.copyBytes = stagingFiles.copyBytes
            resumedStaging = .staging(staging)
            return true
        }
        resumedStaging = .restart(runID: runID, path: path)
        return false
    }

    /// Takes up what ``findStagedLoad(of:)`` found when run `runID` is reopened: the staged load
    /// goes on in its file, or the run's progress, rejects and staging key are reset and its
    /// file removed (and a load `--bulk` asks for stages in a new one).
    func takeUpStagedLoad(of runID: String) throws {
        defer { resumedStaging = nil }
        switch resumedStaging {
        case .staging(let resumed):
            try moveLoad(to: .staging(resumed))
            return
        case .restart(let id, let path) where id == runID:
            try begin()
            try connection.execute(
                """
                UPDATE _ingot_runs SET pages = 0, records = 0, inserted = 0, updated = 0, rejected_records = 0, rejected_pages = 0,
                  last_seq = NULL, resume_state = NULL, entity_counts = NULL, reject_counts = NULL, resource_counts = NULL WHERE run_id = $1
                """, [id])
            try connection.execute("DELETE FROM _ingot_rejects WHERE run_id = $1", [id])
            try forgetStagingKey(of: id)
            try commitTransaction()
            PGStaging.remove(at: path, directory: stagingFiles.directory)
        default:
            break
        }
        if case .stagedWithTheRun = load { try makeStaging() }
    }

    /// A new run of `pipeline`: the staging files of its earlier runs left unfinished are not
    /// resumed any more — removed (those on this machine) and forgotten.
    func forgetUnfinishedStagedLoads(of pipeline: String) throws {
        let stale = try connection.execute(
            "SELECT s.key, s.value FROM _ingot_state s JOIN _ingot_runs r ON s.key = 'staged_load:' || r.run_id WHERE s.pipeline = '' AND r.pipeline = $1",
            [pipeline])
        for row in stale {
            if let value = row[1] ?? nil { PGStaging.remove(at: PGStaging.path(named: value), directory: stagingFiles.directory) }
            if let key = row[0] { try forgetStagingKey(key) }
        }
    }

    /// Drops the foreign keys' indexes for a staged copy, in its transaction, and remembers them.
    /// An index whose table another session holds (a long reader) is kept
    /// (``dropWithoutWaiting(_:)``).
    private func dropForeignKeyIndexes() throws {
        droppedIndexes = try layouts.flatMap { $0.foreignKeyIndexes(of: layouts) }.filter { index in
            try dropWithoutWaiting("DROP INDEX IF EXISTS \(PGStore.quote(index.name))")
        }
    }

    /// Builds the indexes a committed staged copy dropped.
    func buildForeignKeyIndexes() throws {
        let indexes = droppedIndexes
        droppedIndexes = []
        try createIndexes(indexes)
    }

    /// Makes foreign keys' indexes a load dropped (``ForeignKeyIndex/createStatement``), under the schema's lock:
    /// a job starting meanwhile makes an index it finds missing, and of two `CREATE INDEX IF NOT
    /// EXISTS` of one name at once the later fails on the catalog (`duplicate key value violates
    /// unique constraint "pg_class_relname_nsp_index"`: `make chaos`, three joined jobs, one
    /// starting while another finished the run). In the open transaction (a savepoint of it), or one of its own.
    func createIndexes(_ indexes: [ForeignKeyIndex]) throws {
        guard !indexes.isEmpty else { return }
        let make = { [connection] in
            try connection.execute(PGStore.schemaLock)
            for index in indexes { try connection.execute(index.createStatement) }
        }
        try connection.transaction(make)
    }

    /// Forgets the key that names run `runID`'s staging file (PGStaging, "Resume").
    func forgetStagingKey(of runID: String) throws {
        try forgetStagingKey(PGStaging.stateKey(runID))
    }

    func forgetStagingKey(_ key: String) throws {
        try connection.execute("DELETE FROM _ingot_state WHERE pipeline = '' AND key = $1", [key])
    }

    /// The entities' and join tables that hold rows.
    private func filledTables() throws -> [String] {
        let tables = layouts.map(\.table) + layouts.flatMap { $0.toMany.filter(\.hasJoinTable).map(\.joinTable) }
        let held =
            try connection.execute(
                "SELECT " + tables.map { "EXISTS (SELECT 1 FROM \(PGStore.quote($0)))" }.joined(separator: ", ")
            ).first ?? []
        return zip(tables, held).filter { $0.1 == "t" }.map(\.0)
    }

    /// Folds the staged load in its SQLite file and streams each folded row — the entity's row,
    /// then its links — into PostgreSQL with `COPY` as the fold hands it over, with the held
    /// rejects and kept values, in this store's transaction (the writer commits it). Counts as a
    /// merge into empty tables counts: every row is new. A row the server refuses is left out
    /// with its links and given to `refused`; the rest is copied.
    ///
    /// The foreign keys' indexes are dropped in the copy's transaction (the tables were empty: a
    /// staged load copies only into empty tables) and built again once it committed
    /// (``buildForeignKeyIndexes()``): one sorted build instead of an index entry per row copied
    /// (people-200k: 5.12 s with them kept during the copy against 4.19 s). A rolled-back copy
    /// keeps them; a job killed between the commit and the build leaves them to the schema the
    /// next run applies.
    func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void,
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String, _ record: (seq: Int, index: Int)?) -> Void
    ) throws -> WriteResult {
        guard case .staging(let staging) = load else { return WriteResult(counts: Array(repeating: EntityCounts(), count: layouts.count)) }
        // The copy in the open transaction, its tables' keys and indexes dropped first and its
        // keys built again before it commits.
        func copy(careful: Bool) throws -> [EntityCounts] {
            try dropForeignKeyIndexes()
            let keys = try dropKeysForStagedCopy()
            let counts = try copyStaged(staging.file, copyBytes: staging.copyBytes, fills: fills, careful: careful, refused: refused)
            try buildKeys(keys)
            return counts
        }
        try begin()
        var counts: [EntityCounts]
        do {
            counts = try copy(careful: false)
        } catch {
            // A value PostgreSQL refuses (a trigger, a constraint, a text identity too long for
            // its index) failed the streaming copy and its transaction, or one its binary format
            // cannot carry abandoned it: folded and copied again, carefully and in text
            // (PGStagedCopy), so that only the refused rows are left out. Rare: a second fold of
            // the whole load is its price.
            guard StoreError.refusedValue(error) != nil || error is PGBinaryCopy.Unfit else { throw error }
            staging.file.rollback()
            try rollbackTransaction()
            try begin()
            counts = try copy(careful: true)
        }
        try moveLoad(to: .copied(staging))
        // With the rows: the kept values (the incremental cursor), and the staging file marked
        // copied — a job killed before it removes the file leaves it to `--resume` or the next
        // run to remove (the resume point went in at the last commit).
        try recordRejectsAndKept(
            RunProgress(runID: staging.runID, counters: RunCounters(), rejections: [], kept: try staging.keptValues()), join: nil)
        try connection.execute(
            "UPDATE _ingot_state SET value = $2 WHERE pipeline = '' AND key = $1", [staging.key, PGStaging.copiedMark + staging.path])
        var result = WriteResult(counts: counts)
        result.reads = staging.file.shownReads
        return result
    }

    /// Folds the staged rows of `file` and copies each entity's folded rows (``PGStagedCopy``), streaming
    /// or `careful`; the rows the server refused (careful only) go to `refused`.
    func copyStaged(
        _ file: StageFile, copyBytes: Int, fills: [[(slot: Int, value: ScalarValue, always: Bool)]], careful: Bool,
        positioned: PGStagedCopy.Positioned? = nil,
        refused: (_ entity: Int, _ identity: IdentityKey, _ reason: String, _ record: (seq: Int, index: Int)?) -> Void
    ) throws -> [EntityCounts] {
        var counts: [EntityCounts] = []
        try file.fold(settings: FoldSettings(), interruption: folds) { entity, rows in
            var copy = PGStagedCopy(
                connection: connection, entity: entity, model: model, layout: layouts[entity],
                fills: fills.indices.contains(entity) ? fills[entity] : [], copyBytes: copyBytes, careful: careful,
                positioned: positioned)
            defer { copy.finalize() }
            // Into empty tables: every folded row is new, none stored.
            try copy.write(rows) { _, _ in }
            try copy.finish()
            for (identity, reason, origin) in copy.refusals { refused(entity, identity, reason, RecordOrigin.decode(origin)) }
            counts.append(copy.counts)
        }
        return counts
    }
}

/// Where a PostgreSQL load stands (``PGStore/load``).
enum PGLoad: CustomStringConvertible {
    /// Batches written into the tables.
    case batchByBatch
    /// Staged from the start (`--bulk`) into empty tables: the staging file is made when the
    /// run begins (``PGStore/makeStaging()``); nothing is written before.
    case stagedWithTheRun
    /// Batch by batch, because the staged load asked for or tried was declined, and why.
    case declined(String)
    /// Batches staged in the job's staging file.
    case staging(PGStaging)
    /// The folded rows copied into the tables in the open transaction.
    case copied(PGStaging)
    /// The copy committed: the file goes when the store closes.
    case published(PGStaging)

    var description: String {
        switch self {
        case .batchByBatch: "batch by batch"
        case .stagedWithTheRun: "staged once the run begins"
        case .declined: "declined"
        case .staging: "staging"
        case .copied: "copied, not committed"
        case .published: "copied and committed"
        }
    }
}

/// Where a PostgreSQL store's staging files go and how their rows are sent: settings, not
/// decisions — what the store stages and when is its ``LoadPlan`` (``PGStore/plan``).
struct PGStagingFiles {
    /// The bytes of `COPY` text a staged load sends at a time (``PGStaging/copyBytes``).
    var copyBytes = PGStaging.defaultCopyBytes
    /// Where staging files are made; `nil`: the temporary directory (`TMPDIR`).
    var directory: String?
}

/// A staging file that could not be made (PGStore.makeStaging).
struct StagingFileFailure: Error, CustomStringConvertible {
    let path: String
    let error: any Error
    var description: String { "the staging file \(path) could not be made: \(error)" }
}

/// What `--resume` found of an unfinished run's staged load (``PGStore/findStagedLoad(of:)``).
enum ResumedStaging {
    /// Its staging file, opened again: the load goes on staging.
    case staging(PGStaging)
    /// Its file is gone, or the load may not stage: the run starts again from its first page.
    case restart(runID: String, path: String)
}

extension PGStaging {
    /// The bytes of COPY text sent at a time by default: the server works on them while the
    /// next are made.
    static let defaultCopyBytes = 256 << 10
}
