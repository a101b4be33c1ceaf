import Foundation

/// PostgreSQL's schema for a model: the DDL a run applies (only what is missing, under an
/// advisory lock) and the conflicts that refuse a database whose tables disagree.
extension PGStore {
    /// The schema's lock, for the open transaction: whoever makes tables and indexes takes it
    /// (``applySchema(_:on:checking:)``, ``createIndexes(_:)``).
    static let schemaLock = "SELECT pg_advisory_xact_lock(hashtext('ingot schema'))"

    /// Applies the statements of `schema` that are ``missing(_:in:)``, after `check`, in one
    /// transaction under an advisory lock: jobs starting together must not create the same
    /// tables at once (two `CREATE TABLE IF NOT EXISTS` racing fail on the catalog's unique index).
    /// `check` and the choice of statements read one ``PGCatalog``, taken under the lock; it is
    /// returned with the statements applied (what the schema was before them).
    @discardableResult
    static func applySchema(
        _ schema: [String], on connection: PGConnection, checking check: (PGCatalog) throws -> Void = { _ in }
    ) throws -> (applied: [String], before: PGCatalog) {
        try connection.transaction {
            try connection.execute(PGStore.schemaLock)
            let catalog = try PGCatalog.read(connection)
            try check(catalog)
            let statements = missing(schema, in: catalog)
            for sql in statements { try connection.execute(sql) }
            return (statements, catalog)
        }
    }

    /// The statements of `schema` whose table, column or index does not exist in `catalog`. Each
    /// one is idempotent, but `ALTER TABLE` and `CREATE INDEX` lock their table even when there is
    /// nothing to do, and would wait behind the transactions of jobs already writing it.
    static func missing(_ schema: [String], in catalog: PGCatalog) -> [String] {
        func name(_ word: Substring?) -> String { String(word ?? "").trimmingCharacters(in: CharacterSet(charactersIn: "\"(")) }
        return schema.filter { sql in
            let words = sql.split(whereSeparator: { $0 == " " || $0 == "\n" })
            if sql.hasPrefix("CREATE TABLE IF NOT EXISTS ") { return !catalog.tables.contains(name(words[safe: 5])) }
            if sql.hasPrefix("CREATE INDEX IF NOT EXISTS ") { return !catalog.indexes.contains(name(words[safe: 5])) }
            if sql.hasPrefix("CREATE OR REPLACE FUNCTION ") {
                return !catalog.triggers.contains(name(words[safe: 4]).replacingOccurrences(of: "\"()", with: ""))
            }
            if sql == externalPayloads { return !catalog.payloadsStoredExternally }
            if sql.hasPrefix("ALTER TABLE "), words[safe: 3] == "ADD" {
                return !catalog.columnNames.contains(name(words[safe: 2]) + "." + name(words[safe: 8]))
            }
            return true
        }
    }

    /// The DDL of `model`'s tables and Ingot's own, idempotent: what a run applies when it opens
    /// the database, and what `ingot schema --db postgresql://…` prints.
    static func schema(of model: EntityModel) -> [String] {
        var statements = [
            """
            CREATE TABLE IF NOT EXISTS _ingot_runs (run_id text PRIMARY KEY, pipeline text NOT NULL, started_at timestamptz NOT NULL,
              finished_at timestamptz, status text NOT NULL, pages bigint NOT NULL DEFAULT 0, records bigint NOT NULL DEFAULT 0,
              inserted bigint NOT NULL DEFAULT 0, updated bigint NOT NULL DEFAULT 0, deleted bigint NOT NULL DEFAULT 0,
              rejected_records bigint NOT NULL DEFAULT 0, rejected_pages bigint NOT NULL DEFAULT 0, last_seq bigint, archive text,
              resume_state text, entity_counts text, reject_counts text, join_name text)
            """,
            // Runs shared by several jobs (`--join`) are not resumed by `--resume`: they are joined again.
            "ALTER TABLE _ingot_runs ADD COLUMN IF NOT EXISTS join_name text",
            "ALTER TABLE _ingot_runs ADD COLUMN IF NOT EXISTS resource_counts text",
            """
            CREATE TABLE IF NOT EXISTS _ingot_rejects (run_id text NOT NULL, entity text NOT NULL, coding_path text NOT NULL,
              reason text NOT NULL, source text NOT NULL, record_index bigint, raw text, archive text, archive_entry bigint,
              raw_length bigint, reason_code text)
            """,
            "CREATE INDEX IF NOT EXISTS _ingot_rejects_run ON _ingot_rejects (run_id)",
            // A joined run's rejection: its page's unit, until the run's archive names the entry.
            "ALTER TABLE _ingot_rejects ADD COLUMN IF NOT EXISTS unit bigint",
            "CREATE TABLE IF NOT EXISTS _ingot_state (pipeline text NOT NULL, key text NOT NULL, value text, PRIMARY KEY (pipeline, key))",
            // Page prints for refreshes (PGStore+Prints.swift).
            "CREATE TABLE IF NOT EXISTS _ingot_print_runs (run_id text PRIMARY KEY, pipeline text NOT NULL, fingerprint text NOT NULL)",
            """
            CREATE TABLE IF NOT EXISTS _ingot_page_prints (run_id text NOT NULL, seq bigint NOT NULL, digest bytea NOT NULL,
              records bigint NOT NULL, clean boolean NOT NULL, footprint bytea NOT NULL, PRIMARY KEY (run_id, seq))
            """,
        ]
        let layouts = EntityLayout.layouts(of: model)
        for layout in layouts { statements += tableStatements(layout, layouts: layouts, model: model) }
        statements += oneKindTriggers(model)
        return statements
    }

    /// An entity's table (its identity a unique constraint), its columns added when missing,
    /// the indexes its inverses read by, and its join tables.
    private static func tableStatements(_ layout: EntityLayout, layouts: [EntityLayout], model: EntityModel) -> [String] {
        var statements: [String] = []
        let identity = layout.identitySlots.map { layout.columns[$0].name }
        var definitions = layout.columns.map { column in
            "\(quote(column.name)) \(columnType(column.type))\(identity.contains(column.name) ? " NOT NULL" : "")"
        }
        if !identity.isEmpty {
            definitions.append(
                "CONSTRAINT \(quote(layout.table + "_identity")) UNIQUE (\(identity.map(quote).joined(separator: ", ")))")
        }
        statements.append("CREATE TABLE IF NOT EXISTS \(quote(layout.table)) (\(definitions.joined(separator: ", ")))")
        for column in layout.columns {
            statements.append(
                "ALTER TABLE \(quote(layout.table)) ADD COLUMN IF NOT EXISTS \(quote(column.name)) \(columnType(column.type))")
        }
        for toMany in layout.toMany where toMany.hasJoinTable {  // an owned relationship's table is its target's
            if toMany.isInverse {
                // The inverse's table (made with its owner, declared first), indexed for this side's reads.
                let index = toMany.joinTable + "_" + toMany.sourceColumns.joined(separator: "_")
                statements.append(
                    "CREATE INDEX IF NOT EXISTS \(quote(index)) ON \(quote(toMany.joinTable)) (\(toMany.sourceColumns.map(quote).joined(separator: ", ")))"
                )
                continue
            }
            let defs = joinColumns(toMany, owner: layout.entity, model: model).map { "\(quote($0.name)) \($0.type) NOT NULL" }
            let key = (toMany.sourceColumns + toMany.targetColumns).map(quote).joined(separator: ", ")
            statements.append(
                "CREATE TABLE IF NOT EXISTS \(quote(toMany.joinTable)) (\(defs.joined(separator: ", ")), PRIMARY KEY (\(key)))")
        }
        // Every foreign key indexed (its to-one columns, which a to-one's inverse reads, and a join
        // table's target side), as in SQLite.
        for index in layout.foreignKeyIndexes(of: layouts) { statements.append(index.createStatement) }
        return statements
    }

    /// One identity, one kind (OneKindRule): a child row whose identity a sibling holds is
    /// refused (check_violation, which the safety net rejects record by record).
    private static func oneKindTriggers(_ model: EntityModel) -> [String] {
        var statements: [String] = []
        for rule in OneKindRule.of(model) {
            let held = rule.siblings.map { sibling in
                "EXISTS (SELECT 1 FROM \(quote(sibling)) WHERE \(rule.identity.map { "\(quote($0)) = NEW.\(quote($0))" }.joined(separator: " AND ")))"
            }
            let message = rule.message.replacingOccurrences(of: "'", with: "''")
            statements.append(
                "CREATE OR REPLACE FUNCTION \(quote(rule.name))() RETURNS trigger LANGUAGE plpgsql AS $ingot$ BEGIN IF \(held.joined(separator: " OR ")) "
                    + "THEN RAISE EXCEPTION '\(message)' USING ERRCODE = 'check_violation'; END IF; RETURN NEW; END $ingot$; "
                    + "CREATE OR REPLACE TRIGGER \(quote(rule.name)) BEFORE INSERT ON \(quote(rule.table)) FOR EACH ROW EXECUTE FUNCTION \(quote(rule.name))()"
            )
        }
        return statements
    }

    /// How the existing tables disagree with `model` (``StoredTables/conflicts(with:columnType:)``),
    /// as `catalog` has them. An identity is a constraint, never added to a table that exists.
    static func schemaConflicts(_ model: EntityModel, _ catalog: PGCatalog, _ connection: PGConnection) throws -> [String] {
        var tables: [String: StoredTables.Table] = [:]
        for column in catalog.columns {
            // The catalog spells timestamptz out.
            tables[column.table, default: StoredTables.Table(columns: [:], identity: nil, acceptsIdentity: false)].columns[column.name] =
                column.type == "timestamp with time zone" ? "timestamptz" : column.type
        }
        for (table, identity) in catalog.identities { tables[table]?.identity = identity }
        // An identity a joined run's merge dropped is the table's still: built again by the run's end.
        let recorded = catalog.tables.contains("_ingot_state") ? try recordedKeys(connection) : []
        for key in recorded where !key.primary && tables[key.table]?.identity == nil {
            tables[key.table]?.identity = key.columns
        }
        return StoredTables(tables: tables, caseInsensitive: false).conflicts(with: model, columnType: columnType)
    }
}

/// What the schema step reads of the current schema, in one statement: its tables' columns,
/// indexes, triggers and identity constraints. A job's first statements meet the server's catalog
/// caches cold: read as six statements over two sessions, the schema step cost the server about
/// 17 ms a job, against 7 ms as one (`psql` sessions in turn, docs/scale-out.md "Where the
/// server's time goes now").
struct PGCatalog: Sendable {
    /// Every column of the schema's tables and views, its type as `format_type` spells it.
    private(set) var columns: [(table: String, name: String, type: String)] = []
    /// `table.column` of each of `columns`.
    private(set) var columnNames: Set<String> = []
    private(set) var tables: Set<String> = []
    private(set) var indexes: Set<String> = []
    private(set) var triggers: Set<String> = []
    /// Each table's identity (its `<table>_identity` unique constraint), its columns in order.
    private(set) var identities: [String: [String]] = [:]
    /// Whether the work queue's payloads are stored out of line, uncompressed (``PGStore/externalPayloads``).
    private(set) var payloadsStoredExternally = false

    /// Read from `pg_catalog` directly — `information_schema.columns` checks privileges row by
    /// row and took about 5 ms of the server's CPU a call (docs/scale-out.md, "Measured").
    static func read(_ connection: PGConnection) throws -> PGCatalog {
        var catalog = PGCatalog()
        var identities: [(table: String, column: String, order: Int)] = []
        for row in try connection.execute(
            """
            SELECT 'c', c.relname, a.attname, format_type(a.atttypid, NULL), a.attstorage::text FROM pg_catalog.pg_attribute a
            JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
            WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
              AND a.attnum > 0 AND NOT a.attisdropped
            UNION ALL SELECT 'i', c.relname, NULL, NULL, NULL FROM pg_catalog.pg_class c
            WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('i', 'I')
            UNION ALL SELECT 't', t.tgname, NULL, NULL, NULL FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
            WHERE c.relnamespace = current_schema()::regnamespace
            UNION ALL SELECT 'u', c.relname, a.attname, u.ord::text, NULL FROM pg_catalog.pg_constraint k
            JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
            CROSS JOIN LATERAL unnest(k.conkey) WITH ORDINALITY AS u(attnum, ord)
            JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum
            WHERE c.relnamespace = current_schema()::regnamespace AND k.contype = 'u' AND k.conname = c.relname || '_identity'
            """)
        {
            guard let kind = row[0], let name = row[1] else { continue }
            switch kind {
            case "c":
                guard let column = row[2], let type = row[3] else { continue }
                catalog.columns.append((name, column, type))
                catalog.columnNames.insert(name + "." + column)
                catalog.tables.insert(name)
                if name == "_ingot_units", column == "payload" { catalog.payloadsStoredExternally = row[4] == "e" }
            case "i": catalog.indexes.insert(name)
            case "t": catalog.triggers.insert(name)
            case "u":
                guard let column = row[2], let order = row[3].flatMap({ Int($0) }) else { continue }
                identities.append((name, column, order))
            default: continue
            }
        }
        for identity in identities.sorted(by: { ($0.table, $0.order) < ($1.table, $1.order) }) {
            catalog.identities[identity.table, default: []].append(identity.column)
        }
        return catalog
    }
}
