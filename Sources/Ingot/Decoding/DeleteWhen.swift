/// `delete_when: {path: sys.type, equals: DeletedEntry}` (or `present: true`): a record that
/// matches is a tombstone — it names a row of its entity by its identity, and that row is
/// deleted, with the model's delete rules, where the record stands in the run (docs/pipelines.md,
/// "Deletions in a feed").
package struct DeleteWhen: Sendable, Equatable {
    /// Where the record says it.
    package var path: JSONKeyPath
    /// The value there, as text, that makes the record a tombstone; `nil`: any value that is not
    /// null, `false`, `0` or empty (`deleted: true`, `deleted_at: "2024-…"`).
    package var equals: String?

    /// Whether `record` is a tombstone.
    func matches(_ record: JSONValue) -> Bool {
        guard let value = path.resolve(in: record) else { return false }
        if let equals { return (value.string ?? value.numberText ?? value.bool.map { $0 ? "true" : "false" }) == equals }
        switch value.kind {
        case .null: return false
        case .bool: return value.bool == true
        case .number: return value.numberText != "0"
        case .string: return value.string?.isEmpty == false
        case .array, .object: return value.count > 0
        }
    }
}
