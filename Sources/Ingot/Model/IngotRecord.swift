import Foundation

/// One object of an ``IngotEntity`` as the API sent it, handed to the entity's
/// ``IngotEntity/prepare`` hook before it is mapped: the hook reads and rewrites its keys —
/// an identity built from two fields, an id sent as text, a value in a format of the API's own —
/// and the rewritten object is then mapped with the pipeline's rules (its identity looked up,
/// absent keys left alone, `null` clearing).
///
/// Keys are the entity's coding keys: key paths with its ``IngotEntity/keyDelimiter``
/// (`origin.country.name`); reading follows nested objects, writing makes the ones missing.
/// `set(key, value)` writes a value (`nil`: `null`), `setNull(key)` writes `null`, `remove(key)`
/// makes the key absent (the stored value stays).
///
/// ```swift
/// static let prepare: (@Sendable (inout IngotRecord) throws -> Void)? = { record in
///     // GitHub's `owner.login` + `name` → one text identity, "apple/swift"
///     guard let owner = record.string("owner.login"), let name = record.string("name") else { return }
///     record.set("full_name", "\(owner)/\(name)")
/// }
/// ```
public struct IngotRecord: Sendable {
    /// A JSON value of the record, as a tree (the record's few keys: searched in order).
    indirect enum Value: Sendable, Equatable {
        case null
        case bool(Bool)
        /// A number, as its JSON text (exact whatever its size).
        case number(String)
        case string(String)
        case array([Value])
        case object([(String, Value)])

        static func == (a: Value, b: Value) -> Bool {
            switch (a, b) {
            case (.null, .null): true
            case (.bool(let x), .bool(let y)): x == y
            case (.number(let x), .number(let y)): x == y
            case (.string(let x), .string(let y)): x == y
            case (.array(let x), .array(let y)): x == y
            case (.object(let x), .object(let y)): x.count == y.count && zip(x, y).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
            default: false
            }
        }
    }

    private(set) var members: [(String, Value)]
    let delimiter: String

    init(members: [(String, Value)] = [], delimiter: String = ".") {
        self.members = members
        self.delimiter = delimiter
    }

    // MARK: Reading

    /// Whether the record has `key`, even as `null`.
    public func has(_ key: String) -> Bool { value(key) != nil }

    /// Whether `key` is present and `null`.
    public func isNull(_ key: String) -> Bool { value(key) == .null }

    /// The string at `key`; `nil` when absent, `null` or not a string.
    public func string(_ key: String) -> String? {
        if case .string(let s)? = value(key) { return s }
        return nil
    }

    /// The integer at `key` (a JSON number without fraction that fits 64 bits); `nil` otherwise.
    public func integer(_ key: String) -> Int? {
        if case .number(let text)? = value(key) { return Int(text) }
        return nil
    }

    /// The number at `key`; `nil` when absent, `null` or not a number.
    public func double(_ key: String) -> Double? {
        if case .number(let text)? = value(key) { return Double(text) }
        return nil
    }

    /// The boolean at `key`; `nil` when absent, `null` or not `true`/`false`.
    public func bool(_ key: String) -> Bool? {
        if case .bool(let b)? = value(key) { return b }
        return nil
    }

    /// The JSON text of the value at `key` (any type: an object, an array); `nil` when absent.
    public func json(_ key: String) -> String? {
        value(key).map { value in
            var out = ""
            Self.write(value, to: &out)
            return out
        }
    }

    // MARK: Writing

    /// Sets `key` to a string, or to `null` for `nil` (which clears the column).
    public mutating func set(_ key: String, _ value: String?) { set(key, value: value.map(Value.string) ?? .null) }

    /// Sets `key` to an integer, or to `null` for `nil`.
    public mutating func set(_ key: String, _ value: Int?) { set(key, value: value.map { .number(String($0)) } ?? .null) }

    /// Sets `key` to a number, or to `null` for `nil` (or a value JSON cannot hold: NaN, ±∞).
    public mutating func set(_ key: String, _ value: Double?) {
        guard let value, value.isFinite else { return set(key, value: .null) }
        set(key, value: .number("\(value)"))
    }

    /// Sets `key` to a boolean, or to `null` for `nil`.
    public mutating func set(_ key: String, _ value: Bool?) { set(key, value: value.map(Value.bool) ?? .null) }

    /// Sets `key` to `null` (which clears the column); `set(key, nil)` is ambiguous.
    public mutating func setNull(_ key: String) { set(key, value: .null) }

    /// Sets `key` to the value of the JSON text `json` (an object, an array, any value).
    /// Throws when `json` is not JSON.
    public mutating func set(_ key: String, json: String) throws {
        let document = try JSONDocument(bytes: Array(json.utf8))
        set(key, value: Self.value(of: document.root))
    }

    /// Removes `key`: the record then does not name it, and the stored value is left as it is.
    /// Objects the removal leaves empty go too (`a.b` from `{"a": {"b": 1}}` leaves `{}`); a key
    /// path whose object keeps other keys reads as `null` to the mapper, as in any record.
    public mutating func remove(_ key: String) {
        let path = steps(key)
        Self.remove(path[...], from: &members)
    }

    // MARK: Internals

    func steps(_ key: String) -> [String] {
        delimiter.isEmpty ? [key] : key.components(separatedBy: delimiter)
    }

    func value(_ key: String) -> Value? {
        if let exact = members.first(where: { $0.0 == key }) { return exact.1 }
        var current: Value = .object(members)
        for step in steps(key) {
            guard case .object(let members) = current, let next = members.first(where: { $0.0 == step })?.1 else { return nil }
            current = next
        }
        return current
    }

    mutating func set(_ key: String, value: Value) {
        Self.set(steps(key)[...], value, in: &members)
    }

    private static func set(_ path: ArraySlice<String>, _ value: Value, in members: inout [(String, Value)]) {
        guard let first = path.first else { return }
        let rest = path.dropFirst()
        let at = members.firstIndex { $0.0 == first }
        if rest.isEmpty {
            if let at { members[at].1 = value } else { members.append((first, value)) }
            return
        }
        var inner: [(String, Value)] = []
        if let at, case .object(let existing) = members[at].1 { inner = existing }
        set(rest, value, in: &inner)
        if let at { members[at].1 = .object(inner) } else { members.append((first, .object(inner))) }
    }

    private static func remove(_ path: ArraySlice<String>, from members: inout [(String, Value)]) {
        guard let first = path.first, let at = members.firstIndex(where: { $0.0 == first }) else { return }
        let rest = path.dropFirst()
        if rest.isEmpty {
            members.remove(at: at)
        } else if case .object(var inner) = members[at].1 {
            remove(rest, from: &inner)
            // An object left empty goes too: the record then does not name the path at all.
            if inner.isEmpty { members.remove(at: at) } else { members[at].1 = .object(inner) }
        }
    }

    /// The record of the object `object` (an object's members; another value: none).
    init(_ object: JSONValue, delimiter: String) {
        if case .object(let members) = Self.value(of: object) {
            self.init(members: members, delimiter: delimiter)
        } else {
            self.init(delimiter: delimiter)
        }
    }

    static func value(of json: JSONValue) -> Value {
        switch json.kind {
        case .null: return .null
        case .bool: return .bool(json.bool ?? false)
        case .number: return .number(json.rawText)
        case .string: return .string(json.string ?? "")
        case .array: return .array(json.elements.map(value(of:)))
        case .object: return .object(json.members.map { ($0.key.string ?? "", value(of: $0.value)) })
        }
    }

    /// The record as JSON text.
    var jsonText: String {
        var out = ""
        Self.write(.object(members), to: &out)
        return out
    }

    static func write(_ value: Value, to out: inout String) {
        switch value {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let text): out += text
        case .string(let s): JSONText.quote(s, into: &out)
        case .array(let items):
            out += "["
            for (k, item) in items.enumerated() {
                if k > 0 { out += "," }
                write(item, to: &out)
            }
            out += "]"
        case .object(let members):
            out += "{"
            for (k, member) in members.enumerated() {
                if k > 0 { out += "," }
                JSONText.quote(member.0, into: &out)
                out += ":"
                write(member.1, to: &out)
            }
            out += "}"
        }
    }
}

/// An entity's ``IngotEntity/prepare`` hook, carried by the model. Equal when it is the same
/// type's: the model of a type equals itself, and a YAML model has none.
struct RecordRewrite: Sendable, Equatable {
    let owner: String
    let body: @Sendable (inout IngotRecord) throws -> Void

    static func == (a: RecordRewrite, b: RecordRewrite) -> Bool { a.owner == b.owner }

    /// `object` rewritten: the hook applied to its record, which is parsed again.
    func apply(to object: JSONValue, delimiter: String) throws -> JSONDocument {
        var record = IngotRecord(object, delimiter: delimiter)
        try body(&record)
        return try JSONDocument(bytes: Array(record.jsonText.utf8))
    }
}
