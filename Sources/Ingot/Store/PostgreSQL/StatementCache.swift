/// Which statements a connection runs prepared: a statement with parameters is parsed and
/// planned on every run unless it is prepared, and a joined run's jobs repeat a few of them
/// thousands of times (claims, the queue's state, notifications, units marked done): on
/// people-200k with eight jobs, the server's parsing and planning were a fifth of its CPU
/// (docs/stores.md, "Prepared statements").
///
/// A statement is prepared the second time its text runs — a statement run once (a schema
/// step, a statement whose text carries a batch's values) is never kept — and at most
/// ``limit`` are, for the connection's life: the server keeps a plan per prepared statement
/// and backend. A prepared statement outlives a rolled-back transaction; a table it reads
/// dropped and made again is planned again by the server.
struct StatementCache {
    /// What to do with a statement's text.
    enum Decision: Equatable {
        /// Its first run, or the cache is full: parsed and planned as it runs.
        case runUnprepared
        /// Prepare it under this name, then run it.
        case prepare(String)
        /// Prepared already, under this name.
        case prepared(String)
    }

    /// Prepared statements a connection keeps at most.
    let limit: Int
    /// Texts seen once are forgotten when this many are remembered.
    let seenLimit: Int
    private var names: [String: String] = [:]
    private var seen: Set<String> = []
    /// Names given so far: a forgotten statement's name is never given again.
    private var given = 0

    init(limit: Int = 128, seenLimit: Int = 1024) {
        self.limit = limit
        self.seenLimit = seenLimit
    }

    /// How many statements are prepared.
    var count: Int { names.count }

    /// What to do with `sql` now; a `.prepare` is confirmed by ``prepared(_:as:)`` once the
    /// server prepared it.
    mutating func lookUp(_ sql: String) -> Decision {
        if let name = names[sql] { return .prepared(name) }
        guard names.count < limit else { return .runUnprepared }
        if seen.remove(sql) != nil {
            given += 1
            return .prepare("ingot_\(given)")
        }
        if seen.count >= seenLimit { seen.removeAll(keepingCapacity: true) }
        seen.insert(sql)
        return .runUnprepared
    }

    /// Notes that the server prepared `sql` as `name`.
    mutating func prepared(_ sql: String, as name: String) {
        names[sql] = name
    }

    /// Forgets `sql`'s prepared statement (the server refused to run its plan: a table it
    /// reads changed its columns' types): it is prepared again, under a new name, at its next
    /// second run.
    mutating func forget(_ sql: String) {
        names[sql] = nil
    }
}
