import Foundation

/// A key of an entity's table — its identity (`<table>_identity`) or a join table's primary key
/// — that a joined run's parts are copied without, and that is built again, sorted and once,
/// when they are in (docs/scale-out.md, "Keys built after the parts' copies").
///
/// Each part's copy inserted an entry per row into the key's index, in its part's order: the
/// parts hash their identities, so eight jobs' copies land all over the index and each entry
/// is searched for from its root, where a single job's copy in identity order appends to its
/// right edge. That search was the largest share of what a joined run made the server do
/// beyond a single run.
struct MergeKey: Codable, Equatable, Sendable {
    var table: String
    var constraint: String
    var columns: [String]
    var primary: Bool

    /// Where the dropped key is recorded until it is built again: `_ingot_state`, under the
    /// empty pipeline and this key.
    var stateKey: String { MergeKey.statePrefix + constraint }
    static let statePrefix = "rebuild:"

    var dropStatement: String {
        "ALTER TABLE \(PGStore.quote(table)) DROP CONSTRAINT IF EXISTS \(PGStore.quote(constraint))"
    }

    var addStatement: String {
        "ALTER TABLE \(PGStore.quote(table)) ADD CONSTRAINT \(PGStore.quote(constraint)) "
            + "\(primary ? "PRIMARY KEY" : "UNIQUE") (\(columns.map(PGStore.quote).joined(separator: ", ")))"
    }

    /// The keys of `layouts`' tables whose columns are all of a fixed width (``fixedWidth(_:model:)``):
    /// each identity, and each join table's primary key (named `<join table>_pkey`, as
    /// `CREATE TABLE` names it).
    static func keys(of layouts: [EntityLayout], model: EntityModel) -> [MergeKey] {
        let fixed = fixedWidth(layouts, model: model)
        var keys: [MergeKey] = []
        for layout in layouts {
            let identity = layout.identitySlots.map { layout.columns[$0].name }
            if !identity.isEmpty {
                keys.append(MergeKey(table: layout.table, constraint: layout.table + "_identity", columns: identity, primary: false))
            }
            for toMany in layout.toMany where toMany.hasJoinTable && !toMany.isInverse {
                keys.append(
                    MergeKey(
                        table: toMany.joinTable, constraint: toMany.joinTable + "_pkey",
                        columns: toMany.sourceColumns + toMany.targetColumns,
                        primary: true))
            }
        }
        return keys.filter { key in key.columns.allSatisfy { fixed.contains(key.table + "." + $0) } }
    }

    /// The columns (`table.column`) of `layouts`' tables and join tables whose type has a fixed
    /// width. Only a key or index of those is dropped: the server refuses a text (or numeric,
    /// or JSON) value too long for an index entry as the row is copied — the record is then
    /// rejected, naming it (`RefusedValueTests`) — and would refuse it only when the index is
    /// built, failing the run's end.
    static func fixedWidth(_ layouts: [EntityLayout], model: EntityModel) -> Set<String> {
        let widths: Set<String> = ["bigint", "double precision", "boolean", "date", "timestamptz"]
        var columns: Set<String> = []
        for layout in layouts {
            for column in layout.columns where widths.contains(PGStore.columnType(column.type)) {
                columns.insert(layout.table + "." + column.name)
            }
            for toMany in layout.toMany where toMany.hasJoinTable && !toMany.isInverse {
                for column in PGStore.joinColumns(toMany, owner: layout.entity, model: model) where widths.contains(column.type) {
                    columns.insert(toMany.joinTable + "." + column.name)
                }
            }
        }
        return columns
    }
}

extension PGStore {
    /// Before this job writes parts: each key (``MergeKey``) and each foreign key's index of a
    /// table that holds no row yet — a first load's — is dropped, and the key recorded in
    /// `_ingot_state`, in a short transaction under the schema's lock; the transaction that
    /// finishes the run builds them again (``buildKeysDropped()``). The parts hold disjoint
    /// identities and the table held none, so no row of the run meets another without the key.
    /// No other writer may: nothing is dropped while another run is `running` (a run that
    /// begins builds what was dropped before it writes, under the same lock:
    /// ``overtakeUnfinishedJoins(of:by:)``), and a drop that would wait for another job's part
    /// (its copy holds the table) is left out — the key stays, and costs time only. Jobs killed
    /// before the run finishes leave the keys to the next job that finishes it, or to the next
    /// single run; until then the tables are not refused for the identity they lack
    /// (``keysToBuild(_:)``, ``schemaConflicts(_:_:)``).
    func dropKeysForMerge() throws {
        let fixed = MergeKey.fixedWidth(layouts, model: model)
        let indexes = layouts.flatMap { $0.foreignKeyIndexes(of: layouts) }.filter { index in
            index.columns.allSatisfy { fixed.contains(index.table + "." + $0) }
        }
        let steps =
            MergeKey.keys(of: layouts, model: model).map { key in (key.table, Optional(key)) }
            + indexes.map { index in (index.table, MergeKey?.none) }
        try begin()
        do {
            try connection.execute("SET LOCAL lock_timeout = '200ms'")
            try connection.execute(PGStore.schemaLock)
            let alone = try connection.execute(
                "SELECT NOT EXISTS (SELECT 1 FROM _ingot_runs WHERE status = 'running' AND run_id IS DISTINCT FROM $1)", [runID])
            if alone.first?[0] == "t" {
                for (table, key) in steps { try dropForMerge(key, indexes.filter { $0.table == table }, of: table) }
            }
            try commit()
        } catch let error as StoreError where error.sqlState == PGStore.lockNotAvailable {
            try? rollback()
        } catch {
            try? rollback()
            throw error
        }
    }

    /// Drops `key` (recording it), or `indexes`, of `table` if it holds no row, under a
    /// savepoint: a lock it would wait for leaves them. A key is kept on a table with triggers
    /// (``hasTriggers(_:)``).
    private func dropForMerge(_ key: MergeKey?, _ indexes: [ForeignKeyIndex], of table: String) throws {
        guard try holdsNoRow(table) else { return }
        if key != nil, try hasTriggers(table) { return }
        do {
            try connection.inSavepoint("ingot_key") {
                if let key {
                    guard try exists(key) else { return }
                    let recorded = String(decoding: try JSONEncoder().encode(key), as: UTF8.self)
                    try connection.execute(
                        "INSERT INTO _ingot_state (pipeline, key, value) VALUES ('', $1, $2) ON CONFLICT (pipeline, key) DO UPDATE SET value = excluded.value",
                        [key.stateKey, recorded])
                    try connection.execute(key.dropStatement)
                } else {
                    for index in indexes { try connection.execute("DROP INDEX IF EXISTS \(PGStore.quote(index.name))") }
                }
            }
        } catch let error as StoreError where error.sqlState == PGStore.lockNotAvailable {
            return
        }
    }

    /// Builds again, in the open transaction, every key of this model's tables a joined run's
    /// merge dropped and its foreign keys' indexes (one sorted build each), and forgets the
    /// keys. A key that cannot be built — a row another writer put in meanwhile repeats an
    /// identity — fails the transaction, saying which.
    func buildKeysDropped() throws {
        let tables = Set(MergeKey.keys(of: layouts, model: model).map(\.table))
        for key in try PGStore.keysToBuild(connection) where tables.contains(key.table) {
            if try !exists(key), try connection.tableExists(key.table) { try connection.execute(key.addStatement) }
            try connection.execute("DELETE FROM _ingot_state WHERE pipeline = '' AND key = $1", [key.stateKey])
        }
        try createIndexes(layouts.flatMap { $0.foreignKeyIndexes(of: layouts) })
    }

    /// Before a single job's staged copy, in its transaction: each key (``MergeKey``) of a table
    /// that holds no row is dropped, for ``buildKeys(_:)`` to make again, sorted and once, before
    /// the transaction commits — the committed tables always have their keys. The drop locks the
    /// table until then (as the foreign keys' indexes' drop does), and the folded rows repeat no
    /// identity, so nothing meets a row without its key; a table some other writer filled since
    /// the load was planned keeps it (the drop undone), and its copy meets the key as before, as
    /// does a table with triggers (``hasTriggers(_:)``), and one whose lock would wait more than
    /// a moment for another session (a long reader): the drop takes the table whole, and
    /// readers arriving meanwhile would queue behind it.
    /// Kept during the copy, each row's entry was searched for in the key's index: people-200k,
    /// about two fifths of the server's CPU (docs/performance-notes.md, "One PostgreSQL job
    /// against its COPY floor, paired").
    func dropKeysForStagedCopy() throws -> [MergeKey] {
        struct Kept: Error {}
        var dropped: [MergeKey] = []
        for key in MergeKey.keys(of: layouts, model: model) {
            do {
                try connection.inSavepoint("ingot_key") {
                    guard try exists(key), try !hasTriggers(key.table) else { throw Kept() }
                    guard try dropWithoutWaiting(key.dropStatement), try holdsNoRow(key.table) else { throw Kept() }
                }
                dropped.append(key)
            } catch is Kept {
                continue
            }
        }
        return dropped
    }

    /// Runs `drop` (a `DROP` of an index or a key) in the open transaction if its table's lock
    /// comes within a moment, under a savepoint; `false`, and nothing dropped, when another
    /// session holds the table — a long reader: waiting for it would hold the load, and every
    /// reader arriving meanwhile would queue behind the drop.
    func dropWithoutWaiting(_ drop: String) throws -> Bool {
        do {
            try connection.inSavepoint("ingot_drop") {
                let wait = try connection.execute("SELECT current_setting('lock_timeout')").first?[0] ?? "0"
                try connection.execute("SET LOCAL lock_timeout = '200ms'")
                try connection.execute(drop)
                try connection.execute("SELECT set_config('lock_timeout', $1, true)", [wait])
            }
            return true
        } catch let error as StoreError where error.sqlState == PGStore.lockNotAvailable {
            return false
        }
    }

    /// Builds `keys` again in the open transaction (``dropKeysForStagedCopy()``).
    func buildKeys(_ keys: [MergeKey]) throws {
        for key in keys { try connection.execute(key.addStatement) }
    }

    /// Whether `table` holds no row.
    private func holdsNoRow(_ table: String) throws -> Bool {
        try connection.execute("SELECT NOT EXISTS (SELECT 1 FROM \(PGStore.quote(table)))").first?[0] == "t"
    }

    /// Whether `table` has a trigger — its own, or a foreign key's (`ingot schema --foreign-keys`
    /// declares them deferred, docs/stores.md, "Foreign keys"). Such a table keeps its keys
    /// through a copy: a foreign key that references one depends on it (the drop is refused),
    /// and a deferred trigger's events still pending in the transaction refuse the `ALTER TABLE`
    /// that builds it again.
    private func hasTriggers(_ table: String) throws -> Bool {
        try connection.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE tgrelid = to_regclass($1))", [PGStore.quote(table)]
        ).first?[0] == "t"
    }

    /// Whether `key`'s constraint is on its table now.
    private func exists(_ key: MergeKey) throws -> Bool {
        try connection.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conrelid = to_regclass($1) AND conname = $2)",
            [PGStore.quote(key.table), key.constraint]
        ).first?[0] == "t"
    }

    /// The keys a joined run's merge dropped and no run built again yet, as recorded.
    static func keysToBuild(_ connection: PGConnection) throws -> [MergeKey] {
        guard try connection.tableExists("_ingot_state") else { return [] }
        return try recordedKeys(connection)
    }

    /// ``keysToBuild(_:)`` of a schema known to hold `_ingot_state` (a ``PGCatalog`` read says so).
    static func recordedKeys(_ connection: PGConnection) throws -> [MergeKey] {
        try connection.execute(
            "SELECT value FROM _ingot_state WHERE pipeline = '' AND starts_with(key, $1) ORDER BY key", [MergeKey.statePrefix]
        ).compactMap { row in row[0].flatMap { try? JSONDecoder().decode(MergeKey.self, from: Data($0.utf8)) } }
    }
}
