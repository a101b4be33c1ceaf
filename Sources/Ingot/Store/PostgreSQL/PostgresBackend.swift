import Foundation

/// A PostgreSQL database (`postgresql://…`), which several machines and jobs can share.
package struct PostgresBackend: StoreBackend {
    package var url: String

    package init(url: String) { self.url = url }

    package func open(model: EntityModel, options: StoreOpening) throws -> any IngestStore {
        let store = try PGStore(url: url, model: model, plan: options.plan, stopped: options.stopped)
        do {
            // A joined job takes the lock shared, when it joins (PGSharedRun).
            if let pipeline = options.lockingRunsOf, !options.joining {
                try store.lockRuns(of: pipeline, timeout: options.lockTimeout, shared: false)
            }
            if options.plan.stagesAtOpen { try store.startStagedLoad() }
            if options.transactions == .caller { try store.holdTransaction() }
        } catch {
            try? store.close()
            throw error
        }
        // A joined job's store shares this one's table writer (PGJoinedStore).
        if options.plan.isJoined { return PGJoinedStore(tables: store) }
        return store
    }

    package func schema(of model: EntityModel) throws(StoreError) -> [String] { PGStore.schema(of: model) }

    /// Staged loads copy into empty tables only, from the first batch or `--bulk`; jobs share runs.
    package var loadCapabilities: LoadCapabilities {
        LoadCapabilities(turnsStagedBySize: false, stagesOnlyIntoEmptyTables: true, sharesRuns: true)
    }

    /// A staged load stages and folds in a SQLite file of the job's own: SQLite's rules.
    package func stagedLoadObstacles(_ model: EntityModel) -> [String] {
        StageFile.obstacles(model, EntityLayout.layouts(of: model))
    }

    /// Connecting writes nothing; the schema statements are idempotent (IF NOT EXISTS).
    package func plan(model: EntityModel) throws -> (exists: Bool, conflicts: [String], statements: [String]) {
        let connection = try PGConnection(url: url, role: .tool)
        let catalog = try PGCatalog.read(connection)
        return (true, try PGStore.schemaConflicts(model, catalog, connection), PGStore.missing(PGStore.schema(of: model), in: catalog))
    }

    package func keptValue(model: EntityModel, pipeline: String, key: String) throws -> String? {
        let connection = try PGConnection(url: url, role: .tool)
        let rows = try? connection.execute("SELECT value FROM _ingot_state WHERE pipeline = $1 AND key = $2", [pipeline, key])
        return rows?.first?[0] ?? nil
    }

    package func select(_ query: RowQuery) throws -> [[ScalarValue]] {
        try reader().select(query)
    }

    package func reader() throws -> any RowReader {
        Reader(connection: try PGConnection(url: url, role: .tool))
    }

    /// Reads through one connection, kept open across selects — or (`insideTransaction`) the
    /// connection of a store holding its caller's transaction (``HeldTransaction``).
    final class Reader: RowReader {
        private let connection: PGConnection
        private let insideTransaction: Bool

        init(connection: PGConnection, insideTransaction: Bool = false) {
            self.connection = connection
            self.insideTransaction = insideTransaction
        }

        func select(_ query: RowQuery) throws -> [[ScalarValue]] {
            try PostgresBackend.select(query, on: connection)
        }

        /// Read-only: in a `READ ONLY` transaction, rolled back after. Not inside a held
        /// transaction: a statement of the caller's could not be kept read-only there (`BEGIN
        /// READ ONLY` would end it).
        func rows(sql: String, arguments: [ScalarValue]) throws -> (columns: [String], rows: [[ScalarValue]]) {
            guard !insideTransaction else {
                throw StoreError.unsupported("a statement of your own is read outside a transaction (IngotDatabase.query)")
            }
            try connection.execute("BEGIN READ ONLY")
            defer { _ = try? connection.execute("ROLLBACK") }
            let (columns, rows) = try connection.executeNamed(sql, arguments.map(PostgresBackend.parameter))
            return (columns, rows.map { row in row.map { $0.map(ScalarValue.text) ?? .null } })
        }
    }

    /// The rows `query` selects on `connection`.
    static func select(_ query: RowQuery, on connection: PGConnection) throws -> [[ScalarValue]] {
        // Values come back as text; dates and instants in the mapper's own forms.
        let columns = query.columns.map { column -> String in
            let c = query.reference(column.name)
            switch PGStore.columnType(column.type) {
            case "timestamptz": return "to_char(\(c) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
            case "date": return "to_char(\(c), 'YYYY-MM-DD')"
            default: return "\(c)::text"
            }
        }
        let (sql, parameters) = query.sql(select: query.countsRows ? ["count(*)::text"] : columns, dialect: .postgres)
        if query.countsRows {
            let rows = try connection.execute(sql, parameters.map(PostgresBackend.parameter))
            return [[.integer((rows.first?[0] ?? nil).flatMap { Int64($0) } ?? 0)]]
        }
        return try connection.execute(sql, parameters.map(PostgresBackend.parameter)).map { row in
            zip(row, query.columns).map { text, column in PostgresBackend.value(text, column.type) }
        }
    }

    /// A value as a text parameter (its type inferred from the column it meets).
    static func parameter(_ value: ScalarValue) -> String? {
        switch value {
        case .null: nil
        case .integer(let v): String(v)
        case .real(let v): String(v)
        case .bool(let v): v ? "t" : "f"
        case .text(let s): s
        }
    }

    /// A column's text as the mapper would have made its value.
    static func value(_ text: String?, _ type: AttributeType) -> ScalarValue {
        guard let text else { return .null }
        switch type {
        case .integer: return Int64(text).map(ScalarValue.integer) ?? .text(text)
        case .double: return Double(text).map(ScalarValue.real) ?? .text(text)
        case .decimal: return .text(DecimalText.canonical(text) ?? text)
        case .bool: return .bool(text == "t" || text == "true")
        case .date(.pattern(let pattern, _)) where DatePattern(pattern)?.hasTime == false: return .text(text)
        case .date:
            // to_char's six fraction digits, trimmed as the mapper trims them (none when zero).
            var trimmed = text.hasSuffix("Z") ? String(text.dropLast()) : text
            while trimmed.hasSuffix("0") { trimmed.removeLast() }
            if trimmed.hasSuffix(".") { trimmed.removeLast() }
            return .text(trimmed + "Z")
        case .string, .json: return .text(text)
        }
    }

    /// The run lock is PostgreSQL's own (an advisory lock the store takes).
}
