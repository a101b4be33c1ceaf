import GRDBSQLite

/// Finds which identities of a batch are stored, one query per entity:
///
/// ```sql
/// SELECT "person".rowid, "person"."id" FROM json_each(?) AS j CROSS JOIN "person" ON "person"."id" = j.value
///   -- ? = [3,17,…]: the batch's identities, sorted
/// ```
///
/// The writer runs it on the write connection; the assembler runs it on the store's read
/// connection for the next batch while the writer saves the current one (WAL lets a reader see
/// the last committed state without blocking the writer). Each lookup owns its statements and is
/// used from one queue only.
final class IdentityLookup {
    private let connection: OpaquePointer
    private let layouts: [EntityLayout]
    private var statements: [Int: RawStatement] = [:]

    /// The rowid recorded for an identity that the batch being saved creates: stored by the time
    /// this batch is written, its rowid unknown to a reader (the writer then updates by identity).
    static let pendingRowid: Int64 = 0

    init(connection: OpaquePointer, layouts: [EntityLayout]) {
        self.connection = connection
        self.layouts = layouts
    }

    /// Which of `keys` are stored, with their rowids.
    func stored(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: Int64] {
        let statement = try statement(entity)
        statement.bind(.text(JSONText.array(of: IdentityLookup.indexOrder(keys))), at: 1)
        var found = [IdentityKey: Int64](minimumCapacity: keys.count)
        let count = Int32(layouts[entity].identitySlots.count)
        try statement.query { row in
            let rowid = sqlite3_column_int64(row, 0)
            if count == 1 {
                found[.single(RawStatement.column(row, 1))] = rowid
            } else {
                found[.composite((1...count).map { RawStatement.column(row, $0) })] = rowid
            }
        }
        return found
    }

    /// `keys` in index order when they are single integers (the common case), so that the
    /// lookup probes the identity index forwards; else as they come.
    static func indexOrder(_ keys: some Collection<IdentityKey>) -> [IdentityKey] {
        var integers: [Int64] = []
        integers.reserveCapacity(keys.count)
        for key in keys {
            guard case .single(.integer(let v)) = key else { return Array(keys) }
            integers.append(v)
        }
        integers.sort()
        return integers.map { .single(.integer($0)) }
    }

    func finalize() {
        for statement in statements.values { statement.finalize() }
        statements = [:]
    }

    private func statement(_ entity: Int) throws -> RawStatement {
        if let statement = statements[entity] { return statement }
        let layout = layouts[entity]
        let columns = layout.identitySlots.map { Store.quote(layout.columns[$0].name) }
        let table = Store.quote(layout.table)
        let sql: String
        if columns.count == 1 {
            // json_each drives, the identity index is probed once per key, in the order given.
            sql = "SELECT \(table).rowid, \(table).\(columns[0]) FROM json_each(?) AS j CROSS JOIN \(table) ON \(table).\(columns[0]) = j.value"
        } else {
            let on = columns.enumerated().map { "\(table).\($1) = json_extract(j.value, '$[\($0)]')" }
            sql = "SELECT \(table).rowid, \(columns.map { "\(table).\($0)" }.joined(separator: ", ")) FROM json_each(?) AS j JOIN \(table) ON \(on.joined(separator: " AND "))"
        }
        let statement = try RawStatement(connection: connection, sql: sql)
        statements[entity] = statement
        return statement
    }
}
