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
    /// A child entity's parent tables (``Entity/parent``), nearest first, joined on the identity
    /// columns they share, so that a filter or a sort can name an inherited column
    /// (``RowExpression/inherited(level:column:)``; level 1 is the first parent). The table's own
    /// columns are then qualified (`"t0"."name"`).
    package var parents: [Parent] = []
    /// Selects how many rows match instead of the rows: one row of one integer (no order, no
    /// limit, no offset).
    package var countsRows = false
    /// The table is aliased `"t0"` and its columns qualified even without parents: the filter
    /// reaches related rows in subqueries (``RowExpression/related``), whose own columns could
    /// share a name with the table's.
    package var aliasesTable = false

    /// A parent table and the identity columns it shares with the child.
    package struct Parent: Sendable, Equatable {
        package var table: String
        package var keys: [String]

        package init(table: String, keys: [String]) {
            self.table = table
            self.keys = keys
        }
    }

    /// One sort key. Text sorts by its bytes on both backends (PostgreSQL: `COLLATE "C"`).
    package struct Order: Sendable, Equatable {
        package var column: String
        package var descending: Bool
        package var isText: Bool
        /// 0: the table's own column; n: the n-th parent's (``RowQuery/parents``).
        package var level: Int
        /// A date or an instant: SQLite sorts it through `julianday()`, as predicates compare it.
        package var isTime: Bool
        /// An exact decimal: SQLite sorts its text as a number, as predicates compare it.
        package var isDecimal: Bool
        /// A related row's column instead of the table's (a subquery through to-ones,
        /// ``RowExpression/related``, its time or decimal reading included); `column` names it.
        package var through: RowExpression?

        package init(column: String, descending: Bool, isText: Bool, level: Int = 0, isTime: Bool = false, isDecimal: Bool = false) {
            self.column = column
            self.descending = descending
            self.isText = isText
            self.level = level
            self.isTime = isTime
            self.isDecimal = isDecimal
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
        let joined = !parents.isEmpty || aliasesTable
        var sql = "SELECT \(select.joined(separator: ", ")) FROM \(RowExpression.quote(table))"
        if joined {
            sql += " AS \"t0\""
            for (k, parent) in parents.enumerated() {
                let on = parent.keys.map { "\"t\(k + 1)\".\(RowExpression.quote($0)) = \"t0\".\(RowExpression.quote($0))" }
                sql += " LEFT JOIN \(RowExpression.quote(parent.table)) AS \"t\(k + 1)\" ON \(on.joined(separator: " AND "))"
            }
        }
        if let filter { sql += " WHERE " + filter.sql(dialect, &parameters, qualified: joined) }
        let storage = dialect == .sqlite ? "rowid" : "ctid"
        // ORDER BY names the table's columns qualified: a bare name means the select list's
        // column of that name first, which a backend may have converted (PostgreSQL reads
        // `"position"::text`, and text sorts 10 before 9).
        let owner = joined ? "\"t0\"" : RowExpression.quote(table)
        let sorted =
            order.map { item in
                let text = dialect == .postgres && item.isText ? " COLLATE \"C\"" : ""
                var column = (joined ? "\"t\(item.level)\"" : owner) + "." + RowExpression.quote(item.column)
                if item.isTime && dialect == .sqlite { column = "julianday(\(column))" }
                if item.isDecimal && dialect == .sqlite { column = "CAST(\(column) AS NUMERIC)" }
                if let through = item.through { column = through.sql(dialect, &parameters, qualified: joined) }
                return column + text + (item.descending ? " DESC NULLS LAST" : " ASC NULLS FIRST")
            }
            + tiebreak.map { name in
                let text = dialect == .postgres && columns.contains { $0.name == name && $0.type == .string } ? " COLLATE \"C\"" : ""
                return owner + "." + RowExpression.quote(name) + text + " ASC"
            } + (storageOrder ? [owner + "." + storage] : [])
        if countsRows { return (sql, parameters) }
        if !sorted.isEmpty { sql += " ORDER BY " + sorted.joined(separator: ", ") }
        if let limit { sql += " LIMIT \(max(0, limit))" }
        if offset > 0 { sql += (limit == nil && dialect == .sqlite ? " LIMIT -1" : "") + " OFFSET \(offset)" }
        return (sql, parameters)
    }
}

extension RowExpression {
    /// A text constant: what makes a comparison one of text.
    var isText: Bool {
        if case .value(.text) = self { return true }
        return false
    }

    /// Whether the expression names a parent's column.
    package var namesInherited: Bool {
        switch self {
        case .inherited: true
        case .column, .value, .aliased: false
        case .compare(let a, _, let b), .and(let a, let b), .or(let a, let b), .coalesce(let a, let b), .matches(let a, let b):
            a.namesInherited || b.namesInherited
        case .not(let a), .among(let a, _), .time(let a), .decimal(let a): a.namesInherited
        case .related(let related): related.condition.namesInherited || (related.value?.namesInherited ?? false)
        }
    }

    /// Whether the expression reaches related rows (``related(_:)``).
    package var namesRelated: Bool {
        switch self {
        case .related: true
        case .column, .value, .aliased, .inherited: false
        case .compare(let a, _, let b), .and(let a, let b), .or(let a, let b), .coalesce(let a, let b), .matches(let a, let b):
            a.namesRelated || b.namesRelated
        case .not(let a), .among(let a, _), .time(let a), .decimal(let a): a.namesRelated
        }
    }
}

extension RowQuery {
    /// How the select list names the table's own column `name`: qualified when parents are joined.
    package func reference(_ name: String) -> String {
        parents.isEmpty && !aliasesTable ? RowExpression.quote(name) : "\"t0\"." + RowExpression.quote(name)
    }
}

/// A condition on a row's columns, as a `Predicate` of the Swift library says it.
package indirect enum RowExpression: Sendable, Equatable {
    case column(String)
    /// A column of the table's `level`-th parent (``RowQuery/parents``): an inherited property.
    case inherited(level: Int, column: String)
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
    /// A point in time (a date or an instant column, or a date constant as its stored text):
    /// SQLite compares its text through `julianday()` (stored instants differ in how many
    /// fraction digits they keep, so text order is not time order); PostgreSQL's `date` and
    /// `timestamptz` compare as they are.
    case time(RowExpression)
    /// An exact decimal (a decimal column, or a decimal constant as its canonical text):
    /// SQLite compares its text as a number (`CAST(… AS NUMERIC)`: text order is not number
    /// order), PostgreSQL's `numeric` as it is.
    case decimal(RowExpression)
    /// A column of a related row, in a subquery (``Related``): `"r1"."login"`.
    case aliased(String, String)
    /// `a = b`, as SQL says it: the condition that correlates a related row (an index can serve
    /// it, where a NULL-safe comparison could not).
    case matches(RowExpression, RowExpression)
    /// Rows of other tables reached through relationships (docs/library.md, "Reading back").
    case related(Related)

    /// A subquery over related rows: `from` (quoted tables and their aliases, joined), the
    /// `condition` that correlates them with the row it starts from, and either the `value` one
    /// related row gives (a to-one: NULL when there is none, as Swift's `?.` gives `nil`) or, with
    /// `value` `nil`, whether any related row meets `condition` (a to-many's `contains { … }`).
    package struct Related: Sendable, Equatable {
        package var from: String
        package var condition: RowExpression
        package var value: RowExpression?
    }

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
    /// `qualified`: parent tables are joined, and the table's own columns are `"t0"."name"`.
    package func sql(_ dialect: RowExpression.Dialect, _ parameters: inout [ScalarValue], qualified: Bool = false) -> String {
        func sql(_ e: RowExpression) -> String { e.sql(dialect, &parameters, qualified: qualified) }
        switch self {
        case .column(let name):
            return qualified ? "\"t0\"." + RowExpression.quote(name) : RowExpression.quote(name)
        case .inherited(let level, let name):
            return "\"t\(level)\"." + RowExpression.quote(name)
        case .value(let value):
            parameters.append(value)
            return dialect == .sqlite ? "?" : "$\(parameters.count)"
        case .compare(let a, let op, let b):
            let left = sql(a)
            let right = sql(b)
            switch (op, dialect) {
            case (.equal, .sqlite): return "(\(left) IS \(right))"
            case (.notEqual, .sqlite): return "(\(left) IS NOT \(right))"
            case (.equal, .postgres): return "(\(left) IS NOT DISTINCT FROM \(right))"
            case (.notEqual, .postgres): return "(\(left) IS DISTINCT FROM \(right))"
            default:
                // Text compares by its bytes, as SQLite does and as sorts do (`COLLATE "C"`),
                // whatever the database's collation.
                let text = dialect == .postgres && (a.isText || b.isText) ? " COLLATE \"C\"" : ""
                return "(\(left)\(text) \(op.rawValue) \(right))"
            }
        case .and(let a, let b):
            return "(\(sql(a)) AND \(sql(b)))"
        case .or(let a, let b):
            return "(\(sql(a)) OR \(sql(b)))"
        case .not(let a):
            // NOT of a comparison with a NULL operand is still false in SQL; Swift's `!` of a
            // false comparison is true: coalesce makes the operand a boolean first.
            return "(NOT coalesce(\(sql(a)), \(dialect == .sqlite ? "0" : "false")))"
        case .coalesce(let a, let b):
            return "coalesce(\(sql(a)), \(sql(b)))"
        case .time(let a):
            // PostgreSQL: a constant is an instant (a `date` column meets it at its midnight,
            // UTC, as SQLite's julianday() reads a day).
            if dialect == .sqlite { return "julianday(\(sql(a)))" }
            if case .value = a { return sql(a) + "::timestamptz" }
            return sql(a)
        case .decimal(let a):
            if dialect == .sqlite { return "CAST(\(sql(a)) AS NUMERIC)" }
            if case .value = a { return sql(a) + "::numeric" }
            return sql(a)
        case .aliased(let alias, let name):
            return RowExpression.quote(alias) + "." + RowExpression.quote(name)
        case .matches(let a, let b):
            return "(\(sql(a)) = \(sql(b)))"
        case .related(let related):
            guard let value = related.value else { return "EXISTS (SELECT 1 FROM \(related.from) WHERE \(sql(related.condition)))" }
            let selected = sql(value)
            return "(SELECT \(selected) FROM \(related.from) WHERE \(sql(related.condition)))"
        case .among(let a, let values):
            guard !values.isEmpty else { return dialect == .sqlite ? "0" : "false" }
            let left = sql(a)
            let list = values.map { sql(.value($0)) }
            return "(\(left) IN (\(list.joined(separator: ", "))))"
        }
    }
}
