/// Another run holds the database (a temporary failure: retry later), as each backend finds it:
/// SQLite's run lock file (`RunLock`), PostgreSQL's advisory lock on the pipeline.
package struct RunLockError: Error, Sendable, CustomStringConvertible {
    /// The lock file, or the database as shown (no secrets).
    package var path: String
    /// Who holds it, as far as the backend can tell (`pid=… run_id=…`, `run_id=…`).
    package var holder: String?
    /// Another run holds it (temporary), as opposed to a lock file that cannot be opened.
    package var isHeld: Bool
    package var message: String
    /// `path: message (holder)`.
    package var description: String { "\(path): \(message)\(holder.map { " (\($0))" } ?? "")" }
}
