import Foundation

/// Where a run's data goes, as `--db` names it: a SQLite file (a path, or `sqlite:PATH`) or a
/// PostgreSQL database (`postgresql://…` or `postgres://…`). The one place that picks a backend:
/// the runner opens its store here, and `schema`, `--dry-run` and the incremental cursor read
/// through here too. It sits above every backend's folder (the layer `Store/Backends`), so that
/// nothing above the stores names a backend.
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

    /// The backend that serves this location (``StoreBackend``): the one place a scheme becomes
    /// a backend.
    package var backend: any StoreBackend {
        switch self {
        case .sqlite(let path): SQLiteBackend(path: path)
        case .postgres(let url): PostgresBackend(url: url)
        }
    }

    /// Opens the store (creating or checking the schema of `model`) for a run.
    package func open(model: EntityModel, options: StoreOpening) throws -> any IngestStore {
        try backend.open(model: model, options: options)
    }

    /// The DDL of `model`'s tables in this backend, as `ingot schema` prints it.
    package func schema(of model: EntityModel) throws(StoreError) -> [String] {
        try backend.schema(of: model)
    }

    /// What a run of `model` would do here, writing nothing (``StoreBackend/plan(model:)``).
    package func plan(model: EntityModel) throws -> (exists: Bool, conflicts: [String], statements: [String]) {
        try backend.plan(model: model)
    }

    /// A value kept for `pipeline` across runs (the incremental cursor); `nil` when there is
    /// none, or no database yet.
    package func keptValue(model: EntityModel, pipeline: String, key: String) throws -> String? {
        try backend.keptValue(model: model, pipeline: pipeline, key: key)
    }

    /// The rows `query` selects (``StoreBackend/select(_:)``).
    package func select(_ query: RowQuery) throws -> [[ScalarValue]] {
        try backend.select(query)
    }

    /// A reader kept open across selects (``StoreBackend/reader()``).
    package func reader() throws -> any RowReader {
        try backend.reader()
    }

    /// `url` with its password replaced by `REDACTED` in every form libpq reads one: user info
    /// (multi-host URLs too), `?password=`, percent-encoded (``Redactor/databaseSecrets(_:)``).
    package static func redacted(_ url: String) -> String {
        Redactor.redactingDatabase(url)
    }
}
