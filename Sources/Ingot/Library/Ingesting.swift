import Foundation

// What an ingest takes and gives: how it treats stored rows (`IngotDatabase.Write`), its report,
// its failure, and the bytes it reads as a run's one page.

extension IngotDatabase {
    /// How an ingest treats the rows already stored, as a pipeline file's `write:` does.
    public struct Write: Sendable, Equatable {
        var mode: WriteMode
        var scope: String?
        var rejectsUnknown = false

        /// Insert new identities, update stored ones key by key; never delete (the default).
        public static let merge = Write(mode: .merge)
        /// Merge, then delete the rows of `T` this input did not mention: a cache cleared and
        /// refilled by each refresh (only after the whole input was saved).
        public static let replace = Write(mode: .replace)
        /// Only new rows: a record whose row exists is skipped whole, and counted.
        public static let insertOnly = Write(mode: .insertOnly)
        /// Only rows that exist: a record of an unknown identity is skipped whole, and counted.
        public static let updateOnly = Write(mode: .updateOnly)

        /// `replace` within a scope (Sync's "sync the notes of user 6"): only the rows whose
        /// `scope` — the key (or key path) of one of `T`'s attributes or to-ones, as its coding
        /// key names it — holds a value this input gave are candidates for deletion.
        public static func replace(scope: String) -> Write { Write(mode: .replace, scope: scope) }

        /// `updateOnly`, a record of an unknown identity rejected (`unknown_identity`, with its
        /// coding path) instead of skipped when `rejectingUnknown`.
        public static func updateOnly(rejectingUnknown: Bool) -> Write {
            Write(mode: .updateOnly, rejectsUnknown: rejectingUnknown)
        }
    }
}

/// What one ``IngotDatabase/ingest(_:from:at:write:)`` did. `report[Person.self]?.inserted`
/// reads an entity's counts by its type; `print(report)` says it in one line:
/// `run <id>: 3 records; person 2 inserted, 1 rejected; 1 rejected ([1].id: …)`.
public struct IngestReport: Sendable, CustomStringConvertible {
    /// The run's id in `_ingot_runs`.
    public var runID: String
    /// Records read (rejected ones included).
    public var records: Int
    /// Rows deleted (``IngotDatabase/Write/replace``: the rows the input did not mention).
    public var deleted: Int
    /// Records skipped whole (``IngotDatabase/Write/insertOnly`` and ``IngotDatabase/Write/updateOnly``).
    public var skipped: Int
    /// Per entity: rows inserted, updated, left unchanged, stubs, rejected records.
    public var entities: [String: EntityCounts]
    /// The records (or the page) that could not be saved, each with its entity, coding path
    /// (`[3].dogs[1].id`) and reason.
    public var rejections: [RecordRejection]

    /// The counts of entity `type` (``IngotEntity/entityName``): `nil` when the input had none.
    public subscript<T: IngotEntity>(_ type: T.Type) -> EntityCounts? { entities[T.entityName] }

    /// One line: the run, the records, each entity's counts that are not zero, the rejections
    /// (the first three with their coding paths).
    public var description: String {
        var parts = ["run \(runID): \(records) record\(records == 1 ? "" : "s")"]
        for (name, counts) in entities.sorted(by: { $0.key < $1.key }) {
            let said = [
                ("inserted", counts.inserted), ("updated", counts.updated), ("unchanged", counts.unchanged), ("stubs", counts.stubs),
                ("rejected", counts.rejected),
            ].filter { $0.1 > 0 }.map { "\($0.1) \($0.0)" }
            if !said.isEmpty { parts.append("\(name) " + said.joined(separator: ", ")) }
        }
        if deleted > 0 { parts.append("\(deleted) deleted") }
        if skipped > 0 { parts.append("\(skipped) skipped") }
        if !rejections.isEmpty {
            let first = rejections.prefix(3).map { "\($0.codingPath.isEmpty ? "the page" : $0.codingPath): \($0.reason.prefix(80))" }
            parts.append(
                "\(rejections.count) rejected (\(first.joined(separator: "; "))\(rejections.count > 3 ? "; …" : ""))")
        }
        return parts.joined(separator: "; ")
    }

    init(summary: RunSummary, rejections: [RecordRejection]) {
        runID = summary.runID
        records = summary.counters.records
        deleted = summary.counters.deleted
        skipped = summary.counters.skippedRecords
        entities = summary.counters.entities
        self.rejections = rejections
    }
}

/// An ingest whose database failed (nothing of its input was saved).
public struct IngestError: Error, Sendable, CustomStringConvertible {
    /// The run's id.
    public var runID: String
    /// What failed.
    public var message: String
    /// `ingest RUN failed: MESSAGE`.
    public var description: String { "ingest \(runID) failed: \(message)" }
}

/// The bytes given to ``IngotDatabase/ingest(_:from:at:write:)``, as the one page of a run.
final class BytesPageSource: PageSource, @unchecked Sendable {  // `bytes` is taken once, on the run's source queue
    private var bytes: [UInt8]?
    private let source: String

    init(bytes: [UInt8], source: String) {
        self.bytes = bytes
        self.source = source
    }

    func next() throws -> Page? {
        guard let bytes else { return nil }
        self.bytes = nil
        return Page(seq: 1, source: source, bytes: bytes)
    }

    var origin: String { source }
}
