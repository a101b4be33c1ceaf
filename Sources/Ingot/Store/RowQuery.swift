import Foundation

/// A read of one table's rows, backend-neutral: its columns, a filter, an order, a window. Each
/// backend renders it in its own SQL (``StoreBackend/select(_:)``); the Swift library builds it
/// from a `Predicate` and `SortDescriptor`s, and for the relationships it loads.
package struct RowQuery: Sendable, Equatable {
    /// The table.
    package var table: String
    /// The columns read, in order, with their types (each backend reads a type its own way).
    package var columns: [EntityLayout.Column]
    /// Columns that break ties after ``order`` (an entity's identity), ascending.
    package var tiebreak: [String]
    /// Which rows; `nil`: all.
    package var filter: RowExpression?
    /// Columns to sort by, in turn, NULL first when ascending and last when descending (as
    /// Swift orders `nil` before any value); the identity breaks ties.
    package var order: [Order] = []
    /// At most this many rows.
    package var limit: Int?
    /// Rows skipped first.
    package var offset = 0
    /// After ``order`` and ``tiebreak``: the order rows were stored in (SQLite's rowid,
    /// PostgreSQL's ctid — insertion order for a table only ever appended to).
    package var storageOrder = false

    /// One sort key. Text sorts by its bytes on both backends (PostgreSQL: `COLLATE "C"`).
    package struct Order: Sendable, Equatable {
        package var column: String
        package var descending: Bool
        package var isText: Bool

        package init(column: String, descending: Bool, isText: Bool) {
            self.column = column
            self.descending = descending
            self.isText = isText
        }
    }

    package init(
        table: String, columns: [EntityLayout.Column], tiebreak: [String] = [], filter: RowExpression? = nil, order: [Order] = [],
        limit: Int? = nil, offset: Int = 0
    ) {
        self.table = table
        self.columns = columns
        self.tiebreak = tiebreak
        self.filter = filter
        self.order = order
        self.limit = limit
        self.offset = offset
    }

    /// All the rows of `layout`'s table (its columns, ties broken by its identity).
    package init(_ layout: EntityLayout) {
        self.init(table: layout.table, columns: layout.columns, tiebreak: layout.identitySlots.map { layout.columns[$0].name })
    }

    /// `SELECT … FROM table WHERE … ORDER BY … LIMIT … OFFSET …` in `dialect`, with its
    /// parameters in order. `select` are the select list's expressions, one per column, quoted.
    package func sql(select: [String], dialect: RowExpression.Dialect) -> (String, [ScalarValue]) {
        var parameters: [ScalarValue] = []
        var sql = "SELECT \(select.joined(separator: ", ")) FROM \(RowExpression.quote(table))"
        if let filter { sql += " WHERE " + filter.sql(dialect, &parameters) }
        let sorted =
            order.map { item in
                let text = dialect == .postgres && item.isText ? " COLLATE \"C\"" : ""
                return RowExpression.quote(item.column) + text + (item.descending ? " DESC NULLS LAST" : " ASC NULLS FIRST")
            } + tiebreak.map { RowExpression.quote($0) + " ASC" } + (storageOrder ? [dialect == .sqlite ? "rowid" : "ctid"] : [])
        if !sorted.isEmpty { sql += " ORDER BY " + sorted.joined(separator: ", ") }
        if let limit { sql += " LIMIT \(max(0, limit))" }
        if offset > 0 { sql += (limit == nil && dialect == .sqlite ? " LIMIT -1" : "") + " OFFSET \(offset)" }
        return (sql, parameters)
    }
}

/// A condition on a row's columns, as a `Predicate` of the Swift library says it.
package indirect enum RowExpression: Sendable, Equatable {
    case column(String)
    case value(ScalarValue)
    /// `=` and `<>` are NULL-safe (Swift's `==` on optionals); the others are SQL's (a NULL
    /// operand makes the comparison false, as no Swift predicate compares `nil` by order).
    case compare(RowExpression, Comparison, RowExpression)
    case and(RowExpression, RowExpression)
    case or(RowExpression, RowExpression)
    case not(RowExpression)
    /// `a ?? b`.
    case coalesce(RowExpression, RowExpression)
    /// `[values].contains(a)`.
    case among(RowExpression, [ScalarValue])

    /// The comparisons a predicate makes.
    package enum Comparison: String, Sendable {
        case equal = "=", notEqual = "<>", less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">="
    }

    /// The SQL a backend speaks.
    package enum Dialect: Sendable {
        case sqlite, postgres
    }

    /// `"name"`, quotes doubled.
    static func quote(_ name: String) -> String { "\"" + name.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }

    /// The expression in `dialect`, its values appended to `parameters` (`?` or `$n`).
    package func sql(_ dialect: RowExpression.Dialect, _ parameters: inout [ScalarValue]) -> String {
        switch self {
        case .column(let name):
            return RowExpression.quote(name)
        case .value(let value):
            parameters.append(value)
            return dialect == .sqlite ? "?" : "$\(parameters.count)"
        case .compare(let a, let op, let b):
            let left = a.sql(dialect, &parameters)
            let right = b.sql(dialect, &parameters)
            switch (op, dialect) {
            case (.equal, .sqlite): return "(\(left) IS \(right))"
            case (.notEqual, .sqlite): return "(\(left) IS NOT \(right))"
            case (.equal, .postgres): return "(\(left) IS NOT DISTINCT FROM \(right))"
            case (.notEqual, .postgres): return "(\(left) IS DISTINCT FROM \(right))"
            default: return "(\(left) \(op.rawValue) \(right))"
            }
        case .and(let a, let b):
            return "(\(a.sql(dialect, &parameters)) AND \(b.sql(dialect, &parameters)))"
        case .or(let a, let b):
            return "(\(a.sql(dialect, &parameters)) OR \(b.sql(dialect, &parameters)))"
        case .not(let a):
            // NOT of a comparison with a NULL operand is still false in SQL; Swift's `!` of a
            // false comparison is true: coalesce makes the operand a boolean first.
            return "(NOT coalesce(\(a.sql(dialect, &parameters)), \(dialect == .sqlite ? "0" : "false")))"
        case .coalesce(let a, let b):
            return "coalesce(\(a.sql(dialect, &parameters)), \(b.sql(dialect, &parameters)))"
        case .among(let a, let values):
            guard !values.isEmpty else { return dialect == .sqlite ? "0" : "false" }
            let left = a.sql(dialect, &parameters)
            let list = values.map { RowExpression.value($0).sql(dialect, &parameters) }
            return "(\(left) IN (\(list.joined(separator: ", "))))"
        }
    }
}
