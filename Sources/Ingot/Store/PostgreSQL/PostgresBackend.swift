import Foundation

/// A PostgreSQL database (`postgresql://…`), which several machines and jobs can share.
package struct PostgresBackend: StoreBackend {
    package var url: String

    package init(url: String) { self.url = url }

    package func open(model: EntityModel, options: StoreOpening) throws -> any IngestStore {
        if options.staged {
            throw StoreError.conflict("--bulk loads SQLite databases only; a PostgreSQL run writes batch by batch (run it without --bulk)")
        }
        return try PGStore(url: url, model: model)
    }

    package func schema(of model: EntityModel) throws(StoreError) -> [String] { PGStore.schema(of: model) }

    /// Connecting writes nothing; the schema statements are idempotent (IF NOT EXISTS).
    package func plan(model: EntityModel) throws -> (exists: Bool, conflicts: [String], statements: [String]) {
        let connection = try PGConnection(url: url)
        return (true, try PGStore.schemaConflicts(model, connection), try PGStore.missing(PGStore.schema(of: model), connection))
    }

    package func keptValue(model: EntityModel, pipeline: String, key: String) throws -> String? {
        let connection = try PGConnection(url: url)
        let rows = try? connection.execute("SELECT value FROM _ingot_state WHERE pipeline = $1 AND key = $2", [pipeline, key])
        return rows?.first?[0] ?? nil
    }

    /// The run lock is PostgreSQL's own (an advisory lock the store takes).
    package var lockablePath: String? { nil }
}
