extension StoreError {
    /// SQLite failed `sql` with (extended) result `code`, classified: CONSTRAINT, TOOBIG, MISMATCH
    /// or RANGE is a value refused (``Kind/refusedValue``), BUSY or LOCKED a database held by
    /// another program (``Kind/locked``), anything else a failed statement.
    public static func sqlite(code: Int32, message: String, sql: String) -> StoreError {
        let kind: Kind =
            switch code & 0xFF {
            case 18, 19, 20, 25: .refusedValue
            case 5, 6: .locked
            default: .statement
            }
        return StoreError(kind, backend: "sqlite", message: message, sql: sql, code: code)
    }
}
