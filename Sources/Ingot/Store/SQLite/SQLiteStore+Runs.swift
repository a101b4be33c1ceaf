import Foundation
import GRDB

/// Run bookkeeping: `_ingot_runs` (one row per run, its counters committed with each batch) and
/// `_ingot_rejects` (one row per rejected record or page).
extension SQLiteStore {
    /// Records a new run, or marks a resumed one running again.
    package func beginRun(_ run: RunBeginning) throws {
        try writeTransaction { db in
            switch run {
            case .new(let id, let pipeline, let startedAt, let archive):
                try db.execute(
                    sql: "INSERT INTO _ingot_runs (run_id, pipeline, started_at, status, archive) VALUES (?, ?, ?, 'running', ?)",
                    arguments: [id, pipeline, startedAt.runTimestamp, archive])
            case .resumed(let id, let archive):
                try db.execute(
                    sql: "UPDATE _ingot_runs SET status = 'running', finished_at = NULL, archive = coalesce(?, archive) WHERE run_id = ?",
                    arguments: [archive, id])
            }
            try SQLiteStore.forgetPrints(in: db)
        }
        runLock?.describe(runID: run.id)
    }

    /// Inside a batch's transaction: stores its rejections and the run's counters so far.
    package func recordProgress(_ progress: RunProgress) throws {
        let (runID, counters, lastSeq, resumeState, rejections) = (
            progress.runID, progress.counters, progress.lastSeq, progress.resumeState, progress.rejections
        )
        for item in progress.kept {
            let upsert = try statement(
                "INSERT INTO _ingot_state (pipeline, key, value) VALUES (?, ?, ?) ON CONFLICT (pipeline, key) DO UPDATE SET value = excluded.value"
            )
            upsert.bind(.text(item.pipeline), at: 1)
            upsert.bind(.text(item.key), at: 2)
            upsert.bind(.text(item.value), at: 3)
            try upsert.execute()
        }
        if !rejections.isEmpty {
            let insert = try statement(
                "INSERT INTO _ingot_rejects (run_id, entity, coding_path, reason, source, record_index, raw, archive, archive_entry, raw_length, reason_code) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            )
            for r in rejections {
                insert.bind(.text(runID), at: 1)
                insert.bind(.text(r.entity), at: 2)
                insert.bind(.text(r.codingPath), at: 3)
                insert.bind(.text(r.reason), at: 4)
                insert.bind(.text(r.source), at: 5)
                insert.bind(r.recordIndex.map { .integer(Int64($0)) } ?? .null, at: 6)
                insert.bind(.text(r.raw), at: 7)
                insert.bind(r.archive.map { .text($0.path) } ?? .null, at: 8)
                insert.bind(r.archive.map { .integer(Int64($0.entry)) } ?? .null, at: 9)
                insert.bind(.integer(Int64(r.rawLength)), at: 10)
                insert.bind(.text(r.code.rawValue), at: 11)
                try insert.execute()
            }
        }
        let update = try statement(
            """
            UPDATE _ingot_runs SET pages = ?, records = ?, inserted = ?, updated = ?, rejected_records = ?, rejected_pages = ?,
              last_seq = coalesce(?, last_seq), resume_state = coalesce(?, resume_state), entity_counts = ?,
              reject_counts = ?, resource_counts = ? WHERE run_id = ?
            """)
        update.bind(.integer(Int64(counters.pages)), at: 1)
        update.bind(.integer(Int64(counters.records)), at: 2)
        update.bind(.integer(Int64(counters.inserted)), at: 3)
        update.bind(.integer(Int64(counters.updated)), at: 4)
        update.bind(.integer(Int64(counters.rejectedRecords)), at: 5)
        update.bind(.integer(Int64(counters.rejectedPages)), at: 6)
        update.bind(lastSeq.map { .integer(Int64($0)) } ?? .null, at: 7)
        update.bind(resumeState.map { .text($0) } ?? .null, at: 8)
        update.bind(.text(counters.entitiesJSON), at: 9)
        update.bind(.text(counters.rejectsJSON), at: 10)
        update.bind(counters.resourcesJSON.map { .text($0) } ?? .null, at: 11)
        update.bind(.text(runID), at: 12)
        try update.execute()
    }

    /// The most recent run of `pipeline`, when it did not finish: what `--resume` continues.
    package func unfinishedRun(pipeline: String) throws -> UnfinishedRun? {
        try dbQueue.read { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT run_id, status, pages, records, inserted, updated, rejected_records, rejected_pages, last_seq, resume_state, started_at,
                          entity_counts, reject_counts, resource_counts
                        FROM _ingot_runs WHERE pipeline = ? ORDER BY started_at DESC, rowid DESC LIMIT 1
                        """, arguments: [pipeline]), row["status"] as String? != "finished"
            else { return nil }
            var counters = RunCounters()
            counters.pages = row["pages"]
            counters.records = row["records"]
            counters.inserted = row["inserted"]
            counters.updated = row["updated"]
            counters.rejectedRecords = row["rejected_records"]
            counters.rejectedPages = row["rejected_pages"]
            counters.readEntities(fromJSON: row["entity_counts"])
            counters.rejectsByReason = RunCounters.rejects(fromJSON: row["reject_counts"])
            counters.readResources(fromJSON: row["resource_counts"])
            return UnfinishedRun(
                runID: row["run_id"], counters: counters, lastSeq: row["last_seq"] ?? 0, resumeState: row["resume_state"])
        }
    }

    /// A kept value (the incremental cursor) of the database at `databasePath`; `nil` when there is none.
    package static func state(databasePath: String, model: EntityModel, pipeline: String, key: String) throws -> String? {
        guard FileManager.default.fileExists(atPath: databasePath) else { return nil }
        let store = try SQLiteStore(path: databasePath, model: model)
        defer { try? store.close() }
        return try store.state(pipeline: pipeline, key: key)
    }

    /// Reads a database through one read-only handle, kept open across selects.
    package final class Reader: RowReader {
        private let queue: DatabaseQueue
        private let path: String

        init(databasePath: String) throws {
            var configuration = Configuration()
            configuration.readonly = true
            queue = try DatabaseQueue(path: databasePath, configuration: configuration)
            path = databasePath
        }

        package func select(_ query: RowQuery) throws -> [[ScalarValue]] {
            try queue.read { db in try SQLiteStore.select(query, in: db) }
        }

        /// Read-only whatever the statement says, on a handle of its own (``OwnSQL``): the
        /// shared reader never runs a statement of the caller's.
        package func rows(sql: String, arguments: [ScalarValue]) throws -> (columns: [String], rows: [[ScalarValue]]) {
            try OwnSQL.rows(path: path, sql: sql, arguments: arguments)
        }
    }

    /// The rows of a statement the caller wrote, in `db`: the columns' names and each row's values.
    static func rows(sql: String, arguments: [ScalarValue], in db: Database) throws -> (columns: [String], rows: [[ScalarValue]]) {
        let statement = try db.makeStatement(sql: sql)
        let fetched: [Row] = try Row.fetchAll(statement, arguments: SQLiteStore.arguments(arguments))
        let rows: [[ScalarValue]] = fetched.map { (row: Row) -> [ScalarValue] in
            row.databaseValues.map { (value: DatabaseValue) -> ScalarValue in
                switch value.storage {
                case .null: .null
                case .int64(let v): .integer(v)
                case .double(let v): .real(v)
                case .string(let s): .text(s)
                case .blob(let data): .text(String(decoding: data, as: UTF8.self))
                }
            }
        }
        return (statement.columnNames, rows)
    }

    /// `values` bound as a statement's arguments (booleans as 0 and 1).
    static func arguments(_ values: [ScalarValue]) -> StatementArguments {
        StatementArguments(
            values.map { value -> DatabaseValue in
                switch value {
                case .null: .null
                case .integer(let v): v.databaseValue
                case .real(let v): v.databaseValue
                case .bool(let v): (v ? 1 : 0).databaseValue
                case .text(let s): s.databaseValue
                }
            })
    }

    /// The rows `query` selects in `db`.
    static func select(_ query: RowQuery, in db: Database) throws -> [[ScalarValue]] {
        let (sql, parameters) = query.sql(
            select: query.countsRows ? ["count(*)"] : query.columns.map { query.reference($0.name) }, dialect: .sqlite)
        let arguments = SQLiteStore.arguments(parameters)
        if query.countsRows { return [[.integer(try Int64.fetchOne(db, sql: sql, arguments: arguments) ?? 0)]] }
        return try Row.fetchAll(db, sql: sql, arguments: arguments).map { row in
            zip(row.databaseValues, query.columns).map { value, column in
                switch value.storage {
                case .null: .null
                case .int64(let v): column.type == .bool ? .bool(v != 0) : .integer(v)
                case .double(let v): .real(v)
                case .string(let s): .text(s)
                case .blob(let data): .text(String(decoding: data, as: UTF8.self))
                }
            }
        }
    }

    /// Keeps `value` for `pipeline` under `key` (forgets it when `nil`), in the open
    /// transaction if there is one.
    func setState(pipeline: String, key: String, value: String?) throws {
        try dbQueue.writeWithoutTransaction { db in
            if let value {
                try db.execute(
                    sql:
                        "INSERT INTO _ingot_state (pipeline, key, value) VALUES (?, ?, ?) ON CONFLICT (pipeline, key) DO UPDATE SET value = excluded.value",
                    arguments: [pipeline, key, value])
            } else {
                try db.execute(sql: "DELETE FROM _ingot_state WHERE pipeline = ? AND key = ?", arguments: [pipeline, key])
            }
        }
    }

    /// A value kept for `pipeline` across runs (the incremental cursor).
    func state(pipeline: String, key: String) throws -> String? {
        try dbQueue.read { db in
            try String.fetchOne(db, sql: "SELECT value FROM _ingot_state WHERE pipeline = ? AND key = ?", arguments: [pipeline, key])
        }
    }

    /// Marks the run finished (or failed / interrupted) with its final counters.
    package func finishRun(id: String, status: RunStatus, counters: RunCounters, finishedAt: Date) throws {
        try commit()
        try writeTransaction { db in
            try db.execute(
                sql: """
                    UPDATE _ingot_runs SET status = ?, finished_at = ?, pages = ?, records = ?, inserted = ?, updated = ?,
                      deleted = ?, rejected_records = ?, rejected_pages = ?, entity_counts = ?, reject_counts = ?, resource_counts = ?
                      WHERE run_id = ?
                    """,
                arguments: [
                    status.rawValue, finishedAt.runTimestamp, counters.pages, counters.records, counters.inserted,
                    counters.updated, counters.deleted, counters.rejectedRecords, counters.rejectedPages, counters.entitiesJSON,
                    counters.rejectsJSON, counters.resourcesJSON, id,
                ])
        }
    }

    /// Per entity (by index) that some relationship stubs (`missing: stub`) and that has columns
    /// besides its identity: how many of its rows hold nothing but their identity — stubs no
    /// record has filled yet. One count per such entity (a scan of its table).
    package func unfilledStubs() throws -> [Int: Int] {
        var result: [Int: Int] = [:]
        try dbQueue.read { db in
            for (entity, columns) in model.stubbedEntities(layouts: layouts) {
                let empty = columns.map { "\(SQLiteStore.quote($0)) IS NULL" }.joined(separator: " AND ")
                result[entity] =
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM \(SQLiteStore.quote(layouts[entity].table)) WHERE \(empty)") ?? 0
            }
        }
        return result
    }

    // MARK: - Replace mode

    /// Deletes the rows of `entity` whose identity is not in `keeping` (the rows the run
    /// touched), in the open transaction (the last batch's), which the caller commits, and
    /// applies Core Data's *nullify* rule to every relationship that can point at them: to-one
    /// references to a deleted row become `NULL`, join rows naming it (on either side) are
    /// removed. Returns how many rows were deleted.
    /// A temporary table `name` of `columns` (quoted) holding `keys`, made anew, filled 50,000
    /// keys a statement through `json_each`.
    static func temporaryTable(_ name: String, columns: [String], holding keys: Set<IdentityKey>, _ db: Database) throws {
        let list = columns.joined(separator: ", ")
        try db.execute(sql: "DROP TABLE IF EXISTS temp.\(name)")
        try db.execute(sql: "CREATE TEMP TABLE \(name) (\(list), PRIMARY KEY (\(list)))")
        let fill =
            columns.count == 1
            ? "INSERT OR IGNORE INTO temp.\(name) SELECT value FROM json_each(?)"
            : "INSERT OR IGNORE INTO temp.\(name) SELECT \(columns.indices.map { "json_extract(value, '$[\($0)]')" }.joined(separator: ", ")) FROM json_each(?)"
        let all = Array(keys)
        for start in stride(from: 0, to: all.count, by: 50_000) {
            try db.execute(sql: fill, arguments: [IdentityLookup.jsonArray(all[start..<min(start + 50_000, all.count)])])
        }
    }

    /// `write: replace` and the library's `delete` (``IngestStore/delete(_:of:sparing:)``), in
    /// named steps: the rows to delete in a temporary set, the sets a cascade reaches grown from it
    /// (but the spared rows), then each set deleted with what pointed at its rows.
    package func delete(_ rows: RowsToDelete, of entity: Int, sparing: [Int: Set<IdentityKey>]) throws -> Int {
        var deleted = 0
        try dbQueue.writeWithoutTransaction { db in
            try beginWrite(db)
            // The stored prints describe the rows as the last run left them: a refresh over them
            // would leave the deleted rows' pages out (PrintKeeping).
            try SQLiteStore.forgetPrints(in: db)
            switch rows {
            case .untouched(let keeping, let scope): try collectUntouched(of: entity, keeping: keeping, scope: scope, db)
            case .listed(let identities): try collectListed(of: entity, identities, db)
            }
            var sets: [Int: String] = [entity: "temp._ingot_deleted"]
            let edges = CascadeEdge.edges(model, layouts)
            let spared = try spareTables(edges, sparing, db)
            try growCascade(&sets, along: edges, sparing: spared, db)
            for (deleting, set) in sets.sorted(by: { $0.key < $1.key }) {
                deleted += try delete(deleting, in: set, db)
            }
            for (deleting, set) in sets where deleting != entity { try db.execute(sql: "DROP TABLE \(set)") }
            for name in spared.values { try db.execute(sql: "DROP TABLE \(name)") }
            try db.execute(sql: "DROP TABLE temp._ingot_deleted")
            try db.execute(sql: "DROP TABLE temp._ingot_touched")
        }
        return deleted
    }

    /// `columns` of `qualifier` as one SQL row value (a single column bare).
    private static func rowValue(_ columns: [String], of qualifier: String) -> String {
        let list = columns.map { "\(qualifier).\(SQLiteStore.quote($0))" }.joined(separator: ", ")
        return columns.count == 1 ? list : "(\(list))"
    }

    /// The identities of `entity`'s rows not in `keeping` (within the scope the run saw, when
    /// there is one) into `temp._ingot_deleted`.
    private func collectUntouched(
        of entity: Int, keeping: Set<IdentityKey>, scope: (column: String, values: [ScalarValue])?, _ db: Database
    ) throws {
        let layout = layouts[entity]
        let table = SQLiteStore.quote(layout.table)
        let identity = layout.identitySlots.map { SQLiteStore.quote(layout.columns[$0].name) }
        let match = identity.map { "t.\($0) = \(table).\($0)" }.joined(separator: " AND ")
        try SQLiteStore.temporaryTable("_ingot_touched", columns: identity, holding: keeping, db)
        try db.execute(sql: "DROP TABLE IF EXISTS temp._ingot_deleted")
        let within = scope.map { "AND \(table).\(SQLiteStore.quote($0.column)) IN (SELECT value FROM json_each(?))" } ?? ""
        try db.execute(
            sql: """
                CREATE TEMP TABLE _ingot_deleted AS SELECT \(identity.joined(separator: ", ")) FROM \(table)
                WHERE NOT EXISTS (SELECT 1 FROM temp._ingot_touched AS t WHERE \(match)) \(within)
                """,
            arguments: StatementArguments(scope.map { [IdentityLookup.jsonArray($0.values.map { IdentityKey.single($0) })] } ?? []))
    }

    /// The identities of `entity`'s stored rows among `identities` into `temp._ingot_deleted`
    /// (and an empty `temp._ingot_touched`, as the untouched rows' collection leaves one).
    private func collectListed(of entity: Int, _ identities: Set<IdentityKey>, _ db: Database) throws {
        let layout = layouts[entity]
        let table = SQLiteStore.quote(layout.table)
        let identity = layout.identitySlots.map { SQLiteStore.quote(layout.columns[$0].name) }
        let match = identity.map { "t.\($0) = \(table).\($0)" }.joined(separator: " AND ")
        try SQLiteStore.temporaryTable("_ingot_listed", columns: identity, holding: identities, db)
        try SQLiteStore.temporaryTable("_ingot_touched", columns: identity, holding: [], db)
        try db.execute(sql: "DROP TABLE IF EXISTS temp._ingot_deleted")
        try db.execute(
            sql: """
                CREATE TEMP TABLE _ingot_deleted AS SELECT \(identity.joined(separator: ", ")) FROM \(table)
                WHERE EXISTS (SELECT 1 FROM temp._ingot_listed AS t WHERE \(match))
                """)
        try db.execute(sql: "DROP TABLE temp._ingot_listed")
    }

    /// The rows the run wrote, which no cascade deletes, per entity a cascade reaches: a temporary
    /// table each, by entity.
    private func spareTables(_ edges: [CascadeEdge], _ sparing: [Int: Set<IdentityKey>], _ db: Database) throws -> [Int: String] {
        var spared: [Int: String] = [:]
        for edge in edges where spared[edge.to] == nil && !(sparing[edge.to]?.isEmpty ?? true) {
            let target = layouts[edge.to]
            let columns = target.identitySlots.map { SQLiteStore.quote(target.columns[$0].name) }
            try SQLiteStore.temporaryTable("_ingot_spared_\(edge.to)", columns: columns, holding: sparing[edge.to] ?? [], db)
            spared[edge.to] = "temp._ingot_spared_\(edge.to)"
        }
        return spared
    }

    /// `delete: cascade`: the rows the deleted ones link to through a cascading relationship join
    /// them, each entity's in a set of its own, until no set grows.
    private func growCascade(_ sets: inout [Int: String], along edges: [CascadeEdge], sparing spared: [Int: String], _ db: Database) throws
    {
        var grew = !edges.isEmpty
        while grew {
            grew = false
            for edge in edges {
                guard let from = sets[edge.from] else { continue }
                let target = layouts[edge.to]
                let columns = target.identitySlots.map { SQLiteStore.quote(target.columns[$0].name) }
                guard columns.count == edge.targetColumns.count else { continue }
                let set = sets[edge.to] ?? "temp._ingot_cascade_\(edge.to)"
                if sets[edge.to] == nil {
                    try db.execute(sql: "DROP TABLE IF EXISTS \(set)")
                    try db.execute(sql: "CREATE TEMP TABLE _ingot_cascade_\(edge.to) (\(columns.joined(separator: ", ")))")
                    sets[edge.to] = set
                }
                let source = SQLiteStore.quote(edge.table)
                let picked = edge.targetColumns.map { "\(source).\(SQLiteStore.quote($0))" }
                let targets = SQLiteStore.rowValue(edge.targetColumns, of: source)
                let sparedRows = spared[edge.to].map { " AND \(targets) NOT IN (SELECT * FROM \($0))" } ?? ""
                try db.execute(
                    sql: """
                        INSERT INTO \(set) SELECT DISTINCT \(picked.joined(separator: ", ")) FROM \(source)
                        WHERE \(SQLiteStore.rowValue(edge.ownerColumns, of: source)) IN (SELECT * FROM \(from))
                          AND \(picked.map { "\($0) IS NOT NULL" }.joined(separator: " AND "))
                          AND \(targets) NOT IN (SELECT * FROM \(set))\(sparedRows)
                        """)
                if db.changesCount > 0 { grew = true }
            }
        }
    }

    /// Deletes the rows of `deleting` whose identities are in `set`: to-one references to them
    /// become NULL, what their owned rows own goes (deepest first), and join rows naming them go.
    /// How many rows were deleted.
    private func delete(_ deleting: Int, in set: String, _ db: Database) throws -> Int {
        let layout = layouts[deleting]
        let table = SQLiteStore.quote(layout.table)
        let gone = "(SELECT * FROM \(set))"
        try db.execute(
            sql:
                "DELETE FROM \(table) WHERE \(SQLiteStore.rowValue(layout.identitySlots.map { layout.columns[$0].name }, of: table)) IN \(gone)"
        )
        let deleted = db.changesCount
        let plan = NullifyPlan(deleting: deleting, layouts: layouts)
        for reference in plan.nulled {
            let other = SQLiteStore.quote(reference.table)
            let set = reference.columns.map { "\(SQLiteStore.quote($0)) = NULL" }.joined(separator: ", ")
            try db.execute(sql: "UPDATE \(other) SET \(set) WHERE \(SQLiteStore.rowValue(reference.columns, of: other)) IN \(gone)")
        }
        // The owned rows themselves are their relationship's join rows, below.
        for toMany in layout.toMany where toMany.isOwned {
            let condition = "\(SQLiteStore.rowValue(toMany.sourceColumns, of: SQLiteStore.quote(layouts[toMany.target].table))) IN \(gone)"
            for sql in OwnedRows.deletes(of: toMany.target, where: condition, layouts: layouts, quote: SQLiteStore.quote).dropLast() {
                try db.execute(sql: sql)
            }
        }
        for reference in plan.unlinked {
            let join = SQLiteStore.quote(reference.table)
            try db.execute(sql: "DELETE FROM \(join) WHERE \(SQLiteStore.rowValue(reference.columns, of: join)) IN \(gone)")
        }
        return deleted
    }

}
