import GRDB

/// Brings a SQLite database's date text to the fixed-width stored form (``DateConverter``:
/// `2014-12-20T21:17:50.330000Z`), in which text order is time order.
///
/// Databases written before that form kept the shortest text (`…:50.33Z`, `…:30Z`), which sorts
/// out of time order (`…:50.33Z` after `…:50.338Z`). When a store opens a database, each date
/// column of the model's tables (entity tables, and the key columns of join tables that
/// reference a date identity) is rewritten once, in the transaction that records it in
/// `_ingot_date_columns`; a column created empty is recorded at once. The rewrite is one
/// `UPDATE` per column that touches only text of the old form, and is one-to-one (one instant,
/// one text before and after), so identity indexes hold throughout. PostgreSQL stores
/// `timestamptz` and needs none of this.
enum DateTextMigration {
    /// A column holding date text.
    struct Column: Hashable {
        var table: String
        var column: String
    }

    /// The date columns of `layouts`' tables.
    static func columns(of model: EntityModel, layouts: [EntityLayout]) -> [Column] {
        func isDate(_ type: AttributeType) -> Bool { if case .date = type { true } else { false } }
        var columns: [Column] = []
        for layout in layouts {
            columns += layout.columns.filter { isDate($0.type) }.map { Column(table: layout.table, column: $0.name) }
            for toMany in layout.toMany where toMany.hasJoinTable && !toMany.isInverse {
                let source = model.entities[layout.entity].identityAttributes
                let target = model.entities[toMany.target].identityAttributes
                for (name, attribute) in zip(toMany.sourceColumns + toMany.targetColumns, source + target) where isDate(attribute.type) {
                    columns.append(Column(table: toMany.joinTable, column: name))
                }
            }
        }
        var seen = Set<Column>()
        return columns.filter { seen.insert($0).inserted }
    }

    /// The statement that rewrites `column`'s old-form date-times (a date without a time has one
    /// form and is left alone).
    static func rewrite(_ column: Column) -> String {
        let c = SQLiteStore.quote(column.column)
        let digit = "[0-9]"
        let shape =
            String(repeating: digit, count: 4) + "-" + digit + digit + "-" + digit + digit + "T" + digit + digit + ":"
            + digit + digit + ":" + digit + digit + "*Z"
        return """
            UPDATE \(SQLiteStore.quote(column.table)) SET \(c) = CASE WHEN length(\(c)) = 20 THEN substr(\(c), 1, 19) || '.000000Z' \
            ELSE substr(\(c), 1, 20) || substr(substr(\(c), 21, length(\(c)) - 21) || '000000', 1, 6) || 'Z' END \
            WHERE typeof(\(c)) = 'text' AND length(\(c)) BETWEEN 20 AND 26 AND \(c) GLOB '\(shape)' \
            AND (length(\(c)) = 20 OR substr(\(c), 20, 1) = '.')
            """
    }

    /// Rewrites the date columns of `layouts` not yet recorded as rewritten, and records them,
    /// in one transaction; returns the columns it rewrote.
    @discardableResult
    static func migrate(_ db: Database, model: EntityModel, layouts: [EntityLayout]) throws -> [Column] {
        let wanted = columns(of: model, layouts: layouts)
        guard !wanted.isEmpty else { return [] }
        let done = Set(
            try Row.fetchAll(db, sql: "SELECT tbl, col FROM _ingot_date_columns").map { Column(table: $0[0], column: $0[1]) })
        let pending = wanted.filter { !done.contains($0) }
        guard !pending.isEmpty else { return [] }
        try db.inTransaction {
            for column in pending {
                try db.execute(sql: rewrite(column))
                try db.execute(
                    sql: "INSERT OR IGNORE INTO _ingot_date_columns (tbl, col) VALUES (?, ?)", arguments: [column.table, column.column])
            }
            return .commit
        }
        return pending
    }
}
