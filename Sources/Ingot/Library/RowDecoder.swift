import Foundation

/// Decodes an entity's Swift type from one stored row, through its own `init(from:)`: each coding
/// key finds its attribute by the key it was mapped from (`origin.country.name` → column
/// `country`). Relationships are not loaded: an optional one decodes as `nil`, a required one is a
/// `valueNotFound` error.
struct RowDecoder: Decoder {
    /// Where an entity's coding keys are in its rows: worked out once per fetch, shared by
    /// every row's decoder.
    struct Shape {
        /// Per coding key (its string value): the row's slot of that attribute's column.
        let slots: [String: Int]
        /// The coding keys of relationships.
        let relationships: Set<String>
        /// Per coding key of a to-one: its key columns' slots (a ``Ref`` read back without its
        /// target still knows it).
        let foreignKeys: [String: [Int]]
        let layout: EntityLayout

        init(entity: Entity, layout: EntityLayout) {
            self.init(levels: [(entity, layout)])
        }

        /// A child entity's rows joined to its parents' (``IngotEntity/parent``): each level's
        /// columns follow the one before's in the row; the first level's layout is the row's.
        init(levels: [(entity: Entity, layout: EntityLayout)]) {
            var foreignKeys: [String: [Int]] = [:]
            var slots: [String: Int] = [:]
            var relationships: Set<String> = []
            var offset = 0
            for (entity, layout) in levels {
                for toOne in layout.toOne {
                    foreignKeys[entity.relationships[toOne.relationship].key] = toOne.slots.map { offset + $0 }
                }
                for attribute in entity.attributes where slots[attribute.key] == nil {
                    if let slot = layout.columns.firstIndex(where: { $0.name == attribute.name }) { slots[attribute.key] = offset + slot }
                }
                relationships.formUnion(entity.relationships.map(\.key))
                offset += layout.columns.count
            }
            self.foreignKeys = foreignKeys
            self.slots = slots
            self.relationships = relationships
            self.layout = levels[0].layout
        }
    }

    let shape: Shape
    var slots: [String: Int] { shape.slots }
    var relationships: Set<String> { shape.relationships }
    var layout: EntityLayout { shape.layout }
    let row: [ScalarValue]
    /// The relationships loaded: by coding key (`including:`), or by relationship name (an
    /// export, where two relationships may read one key).
    var loaded: [String: Loaded] = [:]
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    /// What a loaded relationship holds for this row.
    enum Loaded {
        /// A to-one: its target's row, `nil` when it points nowhere.
        case one(RowDecoder?)
        /// A to-many: its targets' rows, in the set's order.
        case many([RowDecoder])
    }

    init(shape: Shape, row: [ScalarValue]) {
        self.shape = shape
        self.row = row
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(RowContainer<Key>(decoder: self))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch(
            [Any].self, .init(codingPath: codingPath, debugDescription: "a stored row is an object, not an array"))
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        throw DecodingError.typeMismatch(
            Any.self, .init(codingPath: codingPath, debugDescription: "a stored row is an object of attributes"))
    }
}

private struct RowContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let decoder: RowDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }
    var allKeys: [Key] { decoder.slots.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool {
        decoder.slots[key.stringValue] != nil || decoder.relationships.contains(key.stringValue)
    }

    private func value(_ key: Key) throws -> ScalarValue {
        guard let slot = decoder.slots[key.stringValue] else {
            let why =
                decoder.relationships.contains(key.stringValue)
                ? "the relationship '\(key.stringValue)' was not loaded (declare it optional)"
                : "no stored attribute has the key '\(key.stringValue)'"
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: why))
        }
        return decoder.row[slot]
    }

    private func mismatch<T>(_ type: T.Type, _ key: Key, _ value: ScalarValue) -> DecodingError {
        DecodingError.typeMismatch(type, .init(codingPath: codingPath + [key], debugDescription: "the stored value is \(value)"))
    }

    private func present(_ key: Key) throws -> ScalarValue {
        let v = try value(key)
        if v == .null {
            throw DecodingError.valueNotFound(Any.self, .init(codingPath: codingPath + [key], debugDescription: "the stored value is NULL"))
        }
        return v
    }

    func decodeNil(forKey key: Key) throws -> Bool {
        switch decoder.loaded[key.stringValue] {
        case .one(let target)?: return target == nil
        case .many?: return false
        case nil: break
        }
        if decoder.slots[key.stringValue] == nil { return decoder.relationships.contains(key.stringValue) }
        return try value(key) == .null
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool {
        switch try present(key) {
        case .bool(let v): return v
        case .integer(let v): return v != 0
        case let v: throw mismatch(type, key, v)
        }
    }

    func decode(_ type: String.Type, forKey key: Key) throws -> String {
        guard case .text(let s) = try present(key) else { throw mismatch(type, key, try value(key)) }
        return s
    }

    func decode(_ type: Double.Type, forKey key: Key) throws -> Double {
        switch try present(key) {
        case .real(let v): return v
        case .integer(let v): return Double(v)
        case let v: throw mismatch(type, key, v)
        }
    }

    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { Float(try decode(Double.self, forKey: key)) }

    private func integer<T: FixedWidthInteger>(_ type: T.Type, _ key: Key) throws -> T {
        let v = try present(key)
        guard case .integer(let n) = v, let out = T(exactly: n) else { throw mismatch(type, key, v) }
        return out
    }

    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try integer(type, key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try integer(type, key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try integer(type, key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try integer(type, key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try integer(type, key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try integer(type, key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try integer(type, key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try integer(type, key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try integer(type, key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try integer(type, key) }

    /// A `Ref` not loaded still has its stored key; everything else as the protocol decodes it.
    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        if decoder.loaded[key.stringValue] == nil, let reference = type as? any ReferenceFromStoredKey.Type,
            let slots = decoder.shape.foreignKeys[key.stringValue]
        {
            let stored = slots.map { decoder.row[$0] }
            return stored.contains(.null) ? nil : reference.init(storedKey: stored) as? T
        }
        guard contains(key), try !decodeNil(forKey: key) else { return nil }
        // A loaded target that cannot be decoded as its type (a stub, a row without a required
        // key) is left out, and said: the row that names it still decodes.
        if case .one(let target?)? = decoder.loaded[key.stringValue] {
            do {
                return try T(from: target)
            } catch {
                DecodeSkips.current?.add(target, error)
                return nil
            }
        }
        return try decode(type, forKey: key)
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        if decoder.loaded[key.stringValue] == nil, let reference = type as? any ReferenceFromStoredKey.Type,
            let slots = decoder.shape.foreignKeys[key.stringValue], !slots.contains(where: { decoder.row[$0] == .null }),
            let value = reference.init(storedKey: slots.map { decoder.row[$0] }) as? T
        {
            return value
        }
        switch decoder.loaded[key.stringValue] {
        case .one(let target?)?: return try T(from: target)
        case .one(nil)?:
            throw DecodingError.valueNotFound(
                type, .init(codingPath: codingPath + [key], debugDescription: "the relationship points nowhere"))
        case .many(let targets)?:
            do {
                return try T(from: ManyDecoder(targets: targets, codingPath: codingPath + [key]))
            } catch {
                // Some target cannot be decoded as the element type: the others are kept.
                guard let collection = T.self as? any LoadedCollection.Type else { throw error }
                return try T(from: ManyDecoder(targets: collection.decodable(targets), codingPath: codingPath + [key]))
            }
        case nil: break
        }
        if decoder.relationships.contains(key.stringValue) { _ = try value(key) }
        let v = try present(key)
        if type == Date.self {
            guard case .text(let text) = v, let date = RowDecoder.date(text) else { throw mismatch(type, key, v) }
            // The cast cannot fail: T is Date.
            if let date = date as? T { return date }
        }
        // A JSON attribute (any other Decodable property): its stored text, decoded. A value kept
        // as one text or number (URL, UUID, Decimal, an enum of raw values) decodes from it as
        // its JSON does: a number as it is, a text as a JSON string.
        let text: String
        switch v {
        case .text(let stored): text = stored
        case .integer(let n): text = String(n)
        default: throw mismatch(type, key, v)
        }
        do {
            return try JSONDecoder().decode(T.self, from: Data(text.utf8))
        } catch {
            if case .text(let stored) = v, let quoted = try? JSONEncoder().encode(stored),
                let value = try? JSONDecoder().decode(T.self, from: quoted)
            {
                return value
            }
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: codingPath + [key], debugDescription: "the stored JSON does not decode as \(T.self)", underlyingError: error
                ))
        }
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        throw DecodingError.typeMismatch(type, .init(codingPath: codingPath + [key], debugDescription: "stored attributes are flat"))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        throw DecodingError.typeMismatch([Any].self, .init(codingPath: codingPath + [key], debugDescription: "stored attributes are flat"))
    }

    func superDecoder() throws -> any Decoder { decoder }
    func superDecoder(forKey key: Key) throws -> any Decoder { decoder }
}

/// A loaded to-many relationship as the array a `[T]` or `Set<T>` property decodes from.
private struct ManyDecoder: Decoder {
    let targets: [RowDecoder]
    var codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        throw DecodingError.typeMismatch(type, .init(codingPath: codingPath, debugDescription: "a to-many relationship is an array"))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer { Targets(targets: targets, codingPath: codingPath) }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        throw DecodingError.typeMismatch(Any.self, .init(codingPath: codingPath, debugDescription: "a to-many relationship is an array"))
    }

    private struct Targets: UnkeyedDecodingContainer {
        let targets: [RowDecoder]
        var codingPath: [any CodingKey]
        var currentIndex = 0
        var count: Int? { targets.count }
        var isAtEnd: Bool { currentIndex >= targets.count }

        init(targets: [RowDecoder], codingPath: [any CodingKey]) {
            self.targets = targets
            self.codingPath = codingPath
        }

        mutating func decodeNil() throws -> Bool { false }

        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "past the last target"))
            }
            defer { currentIndex += 1 }
            return try T(from: targets[currentIndex])
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "past the last target"))
            }
            defer { currentIndex += 1 }
            return try targets[currentIndex].container(keyedBy: type)
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            throw DecodingError.typeMismatch([Any].self, .init(codingPath: codingPath, debugDescription: "a target is an object"))
        }

        mutating func superDecoder() throws -> any Decoder {
            guard !isAtEnd else {
                throw DecodingError.valueNotFound(Any.self, .init(codingPath: codingPath, debugDescription: "past the last target"))
            }
            defer { currentIndex += 1 }
            return targets[currentIndex]
        }
    }
}

extension RowDecoder {
    /// A stored date: `yyyy-MM-dd` (midnight UTC) or an ISO 8601 instant, with or without a
    /// fraction.
    static func date(_ text: String) -> Date? {
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) { return date }
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle()) { return date }
        return try? Date(text, strategy: Date.ISO8601FormatStyle().year().month().day())
    }
}

/// The rows a fetch leaves out because they cannot be decoded as their type (docs/library.md,
/// "Rows that do not fit their type"), gathered while one task decodes a fetch's rows (a task
/// local: the decoders reach it without being handed it).
final class DecodeSkips: @unchecked Sendable {  // appended to only by the task that decodes one fetch, then read by it
    @TaskLocal static var current: DecodeSkips?
    private(set) var entries: [(entity: String, identity: String, reason: String)] = []

    /// `decoder`'s row left out, for `error`.
    func add(_ decoder: RowDecoder, _ error: any Error) {
        let identity = decoder.layout.identitySlots.map { decoder.row.indices.contains($0) ? decoder.row[$0].description : "?" }
        entries.append((decoder.layout.table, identity.joined(separator: ", "), DecodeSkips.reason(error)))
    }

    /// A decoding error as one line: where, and what.
    static func reason(_ error: any Error) -> String {
        func path(_ context: DecodingError.Context) -> String {
            context.codingPath.map(\.stringValue).joined(separator: ".") + ": " + context.debugDescription
        }
        switch error {
        case DecodingError.valueNotFound(let type, let context): return "no \(type) at " + path(context)
        case DecodingError.keyNotFound(let key, let context): return "no key \(key.stringValue) at " + path(context)
        case DecodingError.typeMismatch(let type, let context): return "not a \(type) at " + path(context)
        case DecodingError.dataCorrupted(let context): return path(context)
        default: return "\(error)"
        }
    }
}

/// An array or a set of entities: its targets that decode as its element type.
protocol LoadedCollection {
    static func decodable(_ targets: [RowDecoder]) -> [RowDecoder]
}

extension LoadedCollection {
    fileprivate static func keeping<Element: Decodable>(_ targets: [RowDecoder], as element: Element.Type) -> [RowDecoder] {
        targets.filter { target in
            do {
                _ = try Element(from: target)
                return true
            } catch {
                DecodeSkips.current?.add(target, error)
                return false
            }
        }
    }
}

extension Array: LoadedCollection where Element: Decodable {
    static func decodable(_ targets: [RowDecoder]) -> [RowDecoder] { keeping(targets, as: Element.self) }
}

extension Set: LoadedCollection where Element: Decodable {
    static func decodable(_ targets: [RowDecoder]) -> [RowDecoder] { keeping(targets, as: Element.self) }
}
