import Foundation
import GRDB
import GRDBSQLite

/// A staged load into PostgreSQL (`ingot run --bulk` on a `postgresql://` database): the load is
/// staged and merged as a SQLite `--bulk` load is (SQLiteStore+Staged.swift), in a SQLite file of
/// the job's own (in the temporary directory, removed when the run ends), and only the merged
/// rows — each final row once — are copied into PostgreSQL (`COPY`, in the run's last
/// transaction), as a database loads a dump.
///
/// Why: batch by batch, every record a load re-sends is an `UPDATE` on the server (people-200k:
/// 232,888 of them for 96,801 dogs) and every lookup a query; a first load spent 2.3 s of server
/// time where copying the final rows takes 0.9 s (docs/benchmarks.md, session 14).
///
/// What it asks of the load, checked before anything is written: a single job (not `--join`),
/// a model a staged load can run (SQLiteStore.stagedLoadObstacles), and tables that are empty —
/// the copy inserts every merged row, it does not merge into stored ones.
///
/// What it gives up: PostgreSQL sees nothing of the load until its end (then all of it, in one
/// transaction), and a stopped or killed load keeps nothing there — its run stays unfinished with
/// no progress, and `--resume` starts it again from its first page (the staging file is the
/// job's own and goes with it). Rejects and kept values (the incremental cursor) are held by the
/// job and written with the rows.
final class PGStaging {  // writer queue only, as the PGStore that owns it
    /// The SQLite store the load is staged and merged in.
    let store: SQLiteStore
    let path: String
    /// Rejections and kept values of committed batches; those of the open transaction.
    private(set) var rejections: [RecordRejection] = []
    private(set) var kept: [String: (pipeline: String, key: String, value: String)] = [:]
    private var pendingRejections: [RecordRejection] = []
    private var pendingKept: [(pipeline: String, key: String, value: String)] = []
    /// The run the held rejections belong to.
    private(set) var runID = ""
    /// The rows were copied into PostgreSQL (in its open transaction).
    var published = false

    init(model: EntityModel) throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("ingot-stage-\(UUID().uuidString).db").path
        var options = SQLiteStore.Options()
        options.staged = true
        store = try SQLiteStore(path: path, model: model, options: options)
    }

    /// Holds a batch's rejections and kept values until its transaction commits.
    func hold(_ progress: RunProgress) {
        runID = progress.runID
        pendingRejections += progress.rejections
        pendingKept += progress.kept
    }

    func commit() throws {
        try store.commit()
        rejections += pendingRejections
        for item in pendingKept { kept[item.pipeline + "\u{0}" + item.key] = item }
        pendingRejections = []
        pendingKept = []
    }

    func rollback() throws {
        pendingRejections = []
        pendingKept = []
        try store.rollback()
    }

    /// Closes the staging store and removes its files.
    func remove() {
        try? store.close()
        for suffix in ["", "-wal", "-shm", ".lock"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    }
}

extension PGStore {
    /// Starts a staged load (PGStaging): refused, with the reason, when this run cannot be one.
    func startStagedLoad() throws {
        var reasons = SQLiteStore.stagedLoadObstacles(model, layouts)
        if joined != nil { reasons.append("a joined run (--join) writes batch by batch") }
        let tables = layouts.map(\.table) + layouts.flatMap { $0.toMany.filter(\.hasJoinTable).map(\.joinTable) }
        let held =
            try connection.execute(
                "SELECT " + tables.map { "EXISTS (SELECT 1 FROM \(PGStore.quote($0)))" }.joined(separator: ", ")
            ).first ?? []
        let filled = zip(tables, held).filter { $0.1 == "t" }.map(\.0)
        if !filled.isEmpty {
            reasons.append("--bulk copies a load into empty tables; \(filled.joined(separator: ", ")) hold rows")
        }
        guard reasons.isEmpty else {
            throw StoreError.conflict("--bulk cannot load this pipeline into PostgreSQL: " + reasons.joined(separator: "; "))
        }
        staging = try PGStaging(model: model)
    }

    /// Merges the staged load in its SQLite file, then copies every merged row — the entities'
    /// tables, then the join tables — and the held rejects and kept values into PostgreSQL, in
    /// this store's transaction (the writer commits it). Counts as the merge counted: every row
    /// is new (the tables were empty).
    func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void
    ) throws -> [EntityCounts] {
        guard let staging, !staging.published else { return Array(repeating: EntityCounts(), count: layouts.count) }
        let counts = try staging.store.mergeStaged(fills: fills, stored: stored)
        try staging.store.commit()
        try begin()
        for (entity, layout) in layouts.enumerated() {
            let columns = layout.columns.map { (name: $0.name, isBool: $0.type == .bool) }
            try copyStaged(layout.table, columns, from: staging.store)
            for toMany in layout.toMany where toMany.hasJoinTable {
                let names = PGStore.joinColumns(toMany, owner: entity, model: model).map { (name: $0.name, isBool: $0.type == "boolean") }
                try copyStaged(toMany.joinTable, names, from: staging.store)
            }
        }
        staging.published = true
        try recordRejectsAndKept(
            RunProgress(
                runID: staging.runID, counters: RunCounters(), lastSeq: nil, resumeState: nil, rejections: staging.rejections,
                kept: Array(staging.kept.values)))
        return counts
    }

    /// Copies table `table` of the staging file into PostgreSQL's, in one `COPY` sent as it is made.
    private func copyStaged(_ table: String, _ columns: [(name: String, isBool: Bool)], from stage: SQLiteStore) throws {
        let names = columns.map { PGStore.quote($0.name) }.joined(separator: ", ")
        let copy = "COPY \(PGStore.quote(table)) (\(names)) FROM STDIN"
        try connection.beginCopy(copy)
        try stage.dbQueue.inDatabase { db in
            guard let handle = db.sqliteConnection else { throw StoreError.schema("the staging database is closed") }
            let select = try RawStatement(connection: handle, sql: "SELECT \(names) FROM \(PGStore.quote(table))")
            defer { select.finalize() }
            var data: [UInt8] = []
            data.reserveCapacity(PGStaging.copyBytes + 65_536)
            var failure: StoreError?
            try select.query { row in
                guard failure == nil else { return }
                for (k, column) in columns.enumerated() {
                    if k > 0 { data.append(UInt8(ascii: "\t")) }
                    let index = Int32(k)
                    switch sqlite3_column_type(row, index) {
                    case SQLITE_NULL:
                        data.append(UInt8(ascii: "\\"))
                        data.append(UInt8(ascii: "N"))
                    case SQLITE_INTEGER:
                        let value = sqlite3_column_int64(row, index)
                        if column.isBool {
                            data.append(value != 0 ? UInt8(ascii: "t") : UInt8(ascii: "f"))
                        } else {
                            PGStore.appendDecimal(value, to: &data)
                        }
                    case SQLITE_FLOAT:
                        PGStore.appendCopyValue(.real(sqlite3_column_double(row, index)), to: &data)
                    default:
                        let count = Int(sqlite3_column_bytes(row, index))
                        if let text = sqlite3_column_text(row, index) {
                            PGConnection.appendCopyText(UnsafeBufferPointer(start: text, count: count), to: &data)
                        }
                    }
                }
                data.append(UInt8(ascii: "\n"))
                if data.count >= PGStaging.copyBytes {
                    do throws(StoreError) { try connection.putCopyData(data, sql: copy) } catch { failure = error }
                    data.removeAll(keepingCapacity: true)
                }
            }
            if failure == nil, !data.isEmpty {
                do throws(StoreError) { try connection.putCopyData(data, sql: copy) } catch { failure = error }
            }
            // Ended even after a failure: the connection leaves COPY mode (the server's error wins).
            do throws(StoreError) { try connection.endCopy(copy) } catch { failure = error }
            if let failure { throw failure }
        }
    }
}

extension PGStaging {
    /// The bytes of COPY text sent at a time: the server works on them while the next are made.
    static let copyBytes = 256 << 10
}
