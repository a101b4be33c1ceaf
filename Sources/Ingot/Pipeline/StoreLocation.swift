import Foundation

/// Where a run's data goes, as `--db` names it: a SQLite file (a path, or `sqlite:PATH`) or a
/// PostgreSQL database (`postgresql://…` or `postgres://…`). The one place that picks a backend:
/// the runner opens its store here, and `schema`, `--dry-run` and the incremental cursor read
/// through here too.
package enum StoreLocation: Sendable, Equatable, CustomStringConvertible {
    case sqlite(path: String)
    case postgres(url: String)

    /// The location `value` names. A URL of another scheme is refused; anything else is a path.
    package init(_ value: String) throws(StoreError) {
        let lower = value.lowercased()
        if lower.hasPrefix("postgresql://") || lower.hasPrefix("postgres://") {
            self = .postgres(url: value)
        } else if lower.hasPrefix("sqlite://") {
            self = .sqlite(path: String(value.dropFirst("sqlite://".count)))
        } else if lower.hasPrefix("sqlite:") {
            self = .sqlite(path: String(value.dropFirst("sqlite:".count)))
        } else if let colon = value.firstIndex(of: ":"), value[..<colon].allSatisfy({ $0.isLetter }), value[colon...].hasPrefix("://") {
            throw StoreError.unsupported("'\(value[..<colon])' databases are not supported: give a SQLite path or a postgresql:// URL")
        } else {
            self = .sqlite(path: value)
        }
        if case .sqlite(let path) = self, path.isEmpty { throw StoreError.unsupported("an empty database path") }
    }

    /// As shown in logs: a URL without its password.
    package var description: String {
        switch self {
        case .sqlite(let path): path
        case .postgres(let url): StoreLocation.redacted(url)
        }
    }

    /// The SQLite file, for the run lock beside it; `nil` for other backends and in-memory databases.
    var lockablePath: String? {
        guard case .sqlite(let path) = self, path != ":memory:" else { return nil }
        return path
    }

    /// Opens the store (creating or checking the schema of `model`) for a run.
    func open(model: EntityModel, options: RunOptions) throws -> any IngestStore {
        switch self {
        case .sqlite(let path):
            var storeOptions = Store.Options()
            storeOptions.lockTimeout = options.lockTimeout
            storeOptions.statementObserver = options.statementObserver
            return try Store(path: path, model: model, options: storeOptions)
        case .postgres(let url):
            return try PGStore(url: url, model: model)
        }
    }

    /// The DDL of `model`'s tables in this backend, as `ingot schema` prints it.
    package func schema(of model: EntityModel) throws(StoreError) -> [String] {
        switch self {
        case .sqlite: return Store.schema(of: model)
        case .postgres: return PGStore.schema(of: model)
        }
    }

    /// What a run of `model` would do here, writing nothing: whether the database exists, the
    /// conflicts that would refuse the run, the statements that would bring its schema up to
    /// the model.
    package func plan(model: EntityModel) throws -> (exists: Bool, conflicts: [String], statements: [String]) {
        switch self {
        case .sqlite(let path): return try Store.plan(model: model, databasePath: path)
        case .postgres(let url):
            // Connecting writes nothing; the schema statements are idempotent (IF NOT EXISTS).
            let connection = try PGConnection(url: url)
            return (true, try PGStore.schemaConflicts(model, connection), try PGStore.missing(PGStore.schema(of: model), connection))
        }
    }

    /// A value kept for `pipeline` across runs (the incremental cursor); `nil` when there is
    /// none, or no database yet.
    package func keptValue(model: EntityModel, pipeline: String, key: String) throws -> String? {
        switch self {
        case .sqlite(let path): return try Store.state(databasePath: path, model: model, pipeline: pipeline, key: key)
        case .postgres(let url):
            let connection = try PGConnection(url: url)
            let rows = try? connection.execute("SELECT value FROM _ingot_state WHERE pipeline = $1 AND key = $2", [pipeline, key])
            return rows?.first?[0] ?? nil
        }
    }

    /// `url` with its password replaced by `REDACTED` in every form libpq reads one: user info
    /// (multi-host URLs too), `?password=`, percent-encoded (``Redactor/databaseSecrets(_:)``).
    static func redacted(_ url: String) -> String {
        Redactor.redactingDatabase(url)
    }
}
