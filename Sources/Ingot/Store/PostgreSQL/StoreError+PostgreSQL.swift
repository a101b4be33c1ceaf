extension StoreError {
    /// PostgreSQL failed `sql`; `state` is its SQLSTATE, classified: data exceptions (class 22),
    /// integrity constraint violations (23) and program limits (54: an identity too long for its
    /// index) are a value refused (``Kind/refusedValue``), lock timeouts (55P03) a database held
    /// (``Kind/locked``), anything else a failed statement.
    public static func postgres(message: String, sql: String, state: String? = nil) -> StoreError {
        let kind: Kind =
            switch state {
            case let state? where ["22", "23", "54"].contains(String(state.prefix(2))): .refusedValue
            case "55P03": .locked
            default: .statement
            }
        return StoreError(kind, backend: "postgresql", message: message, sql: sql, sqlState: state)
    }
}
