/// A savepoint on a connection that speaks SQL strings — PostgreSQL's, a stage file's SQLite
/// (GRDB's own connections use GRDB's `inSavepoint`): `body` runs under savepoint `name` of the
/// open transaction, released when it returns, rolled back to (and released) when it throws, so
/// that only `body`'s work is undone and the transaction stays usable. The statements are the
/// SQL standard's, which both databases read.
enum Savepoint {
    static func run<R>(_ name: String, execute: (String) throws -> Void, _ body: () throws -> R) throws -> R {
        try execute("SAVEPOINT \(name)")
        do {
            let result = try body()
            try execute("RELEASE SAVEPOINT \(name)")
            return result
        } catch {
            try? execute("ROLLBACK TO SAVEPOINT \(name)")
            try? execute("RELEASE SAVEPOINT \(name)")
            throw error
        }
    }
}
