import Foundation
import GRDB

/// The SQLite schema of a model: Ingot's own tables (GRDB migrations), the entities' tables,
/// indexes and foreign keys, the statements a changed pipeline adds, the conflicts that refuse a
/// run, and `--dry-run`'s plan.
extension SQLiteStore {
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
        guard !StageFile.isInMemory(path), FileManager.default.fileExists(atPath: path) else {
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
    private enum SchemaObject: Equatable {
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
    /// A to-many's join table (`WITHOUT ROWID`, keyed by both sides, foreign keys declared);
    /// for an inverse, whose table its owner made, the index this side reads it by.
    private static func joinTable(
        _ toMany: EntityLayout.ToMany, of layout: EntityLayout, model: EntityModel
    ) -> (object: SchemaObject, sql: String) {
        if toMany.isInverse {
            let index = toMany.joinTable + "_" + toMany.sourceColumns.joined(separator: "_")
            return (
                .index(index),
                "CREATE INDEX IF NOT EXISTS \(quote(index)) ON \(quote(toMany.joinTable))(\(toMany.sourceColumns.map(quote).joined(separator: ", ")))"
            )
        }
        let source = model.entities[layout.entity].identityAttributes.map { SQLiteStore.columnType($0.type) }
        let target = model.entities[toMany.target].identityAttributes.map { SQLiteStore.columnType($0.type) }
        var defs = zip(toMany.sourceColumns, source).map { "\(quote($0)) \($1) NOT NULL" }
        defs += zip(toMany.targetColumns, target).map { "\(quote($0)) \($1) NOT NULL" }
        if toMany.isOrdered { defs.append("\"position\" INTEGER NOT NULL") }
        defs.append(foreignKey(toMany.sourceColumns, to: layout.entity, model: model))
        defs.append(foreignKey(toMany.targetColumns, to: toMany.target, model: model))
        let key = (toMany.sourceColumns + toMany.targetColumns).map(quote).joined(separator: ", ")
        return (
            .table(toMany.joinTable),
            "CREATE TABLE IF NOT EXISTS \(quote(toMany.joinTable)) (\(defs.joined(separator: ", ")), PRIMARY KEY (\(key))) WITHOUT ROWID"
        )
    }

    /// `CREATE INDEX IF NOT EXISTS name ON table(columns)`.
    private static func index(_ name: String, on table: String, _ columns: [String]) -> (object: SchemaObject, sql: String) {
        (.index(name), ForeignKeyIndex(name: name, table: table, columns: columns).createStatement)
    }

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
        // An owned row's owner (its leading identity columns); a child entity's parent.
        if let name = model.entities[layout.entity].owner, let owner = model.index(of: name) {
            columns.append(foreignKey(Array(identity.dropLast()), to: owner, model: model))
        }
        if let name = model.entities[layout.entity].parent, let parent = model.index(of: name), parent != layout.entity {
            columns.append(foreignKey(identity, to: parent, model: model))
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
        for toMany in layout.toMany where toMany.hasJoinTable {  // an owned relationship's table is its target's
            definitions.append(joinTable(toMany, of: layout, model: model))
        }
        // Every foreign key is indexed (its to-one columns — which a to-one's inverse,
        // `planet.residents` ↔ `homeworld_id`, reads —, a join table's target side), so that a
        // join from either side is a lookup, not a scan (docs/pipelines.md, "Schema").
        for key in layout.foreignKeyIndexes(of: layouts) {
            definitions.append(index(key.name, on: key.table, key.columns))
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
    static func schemaStatements(_ model: EntityModel, existing db: Database) throws -> [String] {
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
    /// TEXT (strings; dates as ISO-8601 text in UTC; JSON as its text; decimals in their canonical
    /// text, ``DecimalText``: exact, equal values equal text).
    static func columnType(_ type: AttributeType) -> String {
        switch type {
        case .integer, .bool: "INTEGER"
        case .double: "REAL"
        case .string, .date, .json, .decimal: "TEXT"
        }
    }
}
