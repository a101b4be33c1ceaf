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

    init(connection: OpaquePointer, layouts: [EntityLayout]) {
        self.connection = connection
        self.layouts = layouts
    }

    /// Which of `keys` are stored, with their rowids.
    func stored(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef] {
        let statement = try statement(entity)
        statement.bind(.text(IdentityLookup.jsonArray(keys)), at: 1)
        var found = [IdentityKey: StoredRef](minimumCapacity: keys.count)
        let layout = layouts[entity]
        let count = Int32(layout.identitySlots.count)
        // SQLite stores booleans as 0 and 1: read back as the values the mapper makes.
        let booleans = layout.identitySlots.map { layout.columns[$0].type == .bool }
        func value(_ row: OpaquePointer, _ k: Int32) -> ScalarValue {
            let v = RawStatement.column(row, k)
            guard booleans[Int(k) - 1], case .integer(let n) = v else { return v }
            return .bool(n != 0)
        }
        try statement.query { row in
            let rowid = StoredRef.handle(sqlite3_column_int64(row, 0))
            if count == 1 {
                found[.single(value(row, 1))] = rowid
            } else {
                found[.composite((1...count).map { value(row, $0) })] = rowid
            }
        }
        return found
    }

    /// `keys` as a JSON array for `json_each`. Single integers (the common case) are sorted, so
    /// that the lookup probes the identity index forwards, and written digit by digit.
    static func jsonArray(_ keys: some Collection<IdentityKey>) -> String {
        var integers: [Int64] = []
        integers.reserveCapacity(keys.count)
        for key in keys {
            guard case .single(.integer(let v)) = key else { return JSONText.array(of: keys) }
            integers.append(v)
        }
        integers.sort()
        // 20 digits and a sign at most per integer, a comma, the brackets.
        return String(unsafeUninitializedCapacity: integers.count * 21 + 2) { out in
            var n = 0
            out[n] = UInt8(ascii: "[")
            n += 1
            var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // scratch for up to 24 digits
            for (k, value) in integers.enumerated() {
                if k > 0 {
                    out[n] = UInt8(ascii: ",")
                    n += 1
                }
                if value < 0 {
                    out[n] = UInt8(ascii: "-")
                    n += 1
                }
                var magnitude = value.magnitude
                let count = withUnsafeMutableBytes(of: &digits) { scratch in
                    var count = 0
                    repeat {
                        scratch[count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                        magnitude /= 10
                        count += 1
                    } while magnitude > 0
                    for d in 0..<count { out[n + d] = scratch[count - 1 - d] }
                    return count
                }
                n += count
            }
            out[n] = UInt8(ascii: "]")
            return n + 1
        }
    }

    func finalize() {
        for statement in statements.values { statement.finalize() }
        statements = [:]
    }

    private func statement(_ entity: Int) throws -> RawStatement {
        if let statement = statements[entity] { return statement }
        let layout = layouts[entity]
        let columns = layout.identitySlots.map { SQLiteStore.quote(layout.columns[$0].name) }
        let table = SQLiteStore.quote(layout.table)
        let sql: String
        if columns.count == 1 {
            // json_each drives, the identity index is probed once per key, in the order given.
            sql =
                "SELECT \(table).rowid, \(table).\(columns[0]) FROM json_each(?) AS j CROSS JOIN \(table) ON \(table).\(columns[0]) = j.value"
        } else {
            let on = columns.enumerated().map { "\(table).\($1) = json_extract(j.value, '$[\($0)]')" }
            sql =
                "SELECT \(table).rowid, \(columns.map { "\(table).\($0)" }.joined(separator: ", ")) FROM json_each(?) AS j JOIN \(table) ON \(on.joined(separator: " AND "))"
        }
        let statement = try RawStatement(connection: connection, sql: sql)
        statements[entity] = statement
        return statement
    }
}
