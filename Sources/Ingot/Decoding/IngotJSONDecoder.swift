import Foundation

/// Decodes `Decodable` types straight from Ingot's JSON tape: no `Any`, no Foundation parsing.
///
/// Coding keys may be key paths (`origin.country.name`): a key that is not a member of the
/// object is followed through nested objects. ``IngotEntity`` values are registered with the
/// current queue's ``DecodingContext`` (later objects with the same identity replace earlier
/// ones); decoding one with no context throws ``IngotDecodingError/missingContext(codingPath:)``.
public struct IngotJSONDecoder: Sendable {
    /// What the types' `init(from:)` find in `decoder.userInfo`. A ``DecodingContext`` under
    /// ``Swift/CodingUserInfoKey/ingotContext`` is the context of this decoder's decodes (a
    /// one-off decode, on any queue), before the current queue's.
    public var userInfo: [CodingUserInfoKey: any Sendable] = [:]

    /// A decoder.
    public init() {}

    /// Decodes `type` from the JSON in `bytes`, registering the entities it decodes in the
    /// context of ``userInfo`` or else the current queue's `DecodingContext`.
    public func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        let document = try JSONDocument(bytes: bytes)
        return try TapeDecoder(value: document.root, codingPath: [], userInfo: userInfo).decodeValue(type)
    }

    /// Decodes `type` from the JSON in `data` (what `URLSession` and `JSONDecoder` hand around),
    /// as the bytes' `decode` does.
    public func decode<T: Decodable>(_ type: T.Type, from data: Data) throws -> T {
        try decode(type, from: [UInt8](data))
    }
}

extension CodingUserInfoKey {
    /// The ``DecodingContext`` of one decode, in ``IngotJSONDecoder/userInfo``:
    /// `decoder.userInfo[.ingotContext] = DecodingContext(name: "import")`.
    public static let ingotContext = CodingUserInfoKey(rawValue: "ingot.context")!
}

private struct TapeDecoder: Decoder {
    let value: JSONValue
    var codingPath: [any CodingKey]
    /// The key path separator of the entity being decoded (``IngotEntity/keyDelimiter``).
    var delimiter: String
    /// The decoder's `userInfo` (``IngotJSONDecoder/userInfo``), handed to every nested decoder.
    let info: [CodingUserInfoKey: any Sendable]
    var userInfo: [CodingUserInfoKey: Any] { info }

    init(value: JSONValue, codingPath: [any CodingKey], delimiter: String = "", userInfo: [CodingUserInfoKey: any Sendable] = [:]) {
        self.value = value
        self.codingPath = codingPath
        self.delimiter = delimiter
        self.info = userInfo
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard value.kind == .object else { throw mismatch([String: Int].self) }
        return KeyedDecodingContainer(TapeKeyedContainer<Key>(object: value, codingPath: codingPath, delimiter: delimiter, info: info))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard value.kind == .array else { throw mismatch([Int].self) }
        return TapeUnkeyedContainer(elements: Array(value.elements), codingPath: codingPath, info: info)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { TapeSingleValueContainer(decoder: self) }

    func mismatch(_ type: Any.Type) -> DecodingError {
        .typeMismatch(type, .init(codingPath: codingPath, debugDescription: "expected \(type), found \(value.kind.rawValue)"))
    }

    /// Decodes `T` from this value, with the special cases the tape handles itself.
    func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
        if let entity = type as? any IngotEntity.Type {
            let context = try (info[.ingotContext] as? DecodingContext) ?? DecodingContext.current(codingPath: codingPath)
            var decoder = self
            decoder.delimiter = entity.keyDelimiter
            if let prepare = entity.prepare, value.kind == .object {
                // The entity's hook rewrites the object first (its identity included).
                do {
                    let rewritten = try RecordRewrite(owner: "\(entity)", body: prepare).apply(to: value, delimiter: entity.keyDelimiter)
                    decoder = TapeDecoder(value: rewritten.root, codingPath: codingPath, delimiter: entity.keyDelimiter, userInfo: info)
                } catch {
                    throw DecodingError.dataCorrupted(
                        .init(codingPath: codingPath, debugDescription: "prepare: \(error)", underlyingError: error))
                }
            }
            let object = try T(from: decoder)
            if let object = object as? any IngotEntity {
                context.register(object, identity: decoder.identity(entity))
            }
            return object
        }
        if type == Date.self {
            let interval: Double? = value.string.flatMap { text in
                Array(text.utf8).withUnsafeBufferPointer { bytes in
                    guard let civil = DateConverter.parseISO8601(bytes) else { return nil }
                    let seconds =
                        DateConverter.days(civil.year, civil.month, civil.day) * 86400 + civil.hour * 3600
                        + civil.minute * 60 + civil.second - (civil.offsetSeconds ?? 0)
                    let fraction = civil.fraction.isEmpty ? 0 : Double("0." + String(decoding: civil.fraction, as: UTF8.self)) ?? 0
                    return Double(seconds) + fraction
                }
            }
            guard let interval, let date = Date(timeIntervalSince1970: interval) as? T else { throw mismatch(Date.self) }
            return date
        }
        // Scalars Foundation decodes in a shape of its own (a URL as `{"relative": …}`): from the
        // text APIs send, as `JSONDecoder` and an ingest read them.
        if type == URL.self {
            guard let text = value.string, let url = URL(string: text) as? T else { throw mismatch(URL.self) }
            return url
        }
        if type == UUID.self {
            guard let text = value.string, let uuid = UUID(uuidString: text) as? T else { throw mismatch(UUID.self) }
            return uuid
        }
        if type == Decimal.self {
            guard let text = value.numberText ?? value.string, let decimal = Decimal(string: text) as? T else {
                throw mismatch(Decimal.self)
            }
            return decimal
        }
        return try T(from: self)
    }

    /// The identity of the entity object at this value, read from its JSON.
    private func identity(_ entity: any IngotEntity.Type) -> IdentityKey? {
        let keys = entity.identity.map(\.stringValue)
        guard !keys.isEmpty else { return nil }
        var values: [ScalarValue] = []
        for key in keys {
            guard let v = value[key] else { return nil }
            if let i = v.int64 {
                values.append(.integer(i))
            } else if let s = v.string {
                values.append(.text(s))
            } else if let d = v.double {
                values.append(.real(d))
            } else {
                return nil
            }
        }
        return values.count == 1 ? .single(values[0]) : .composite(values)
    }
}

private struct TapeKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let object: JSONValue
    var codingPath: [any CodingKey]
    let delimiter: String
    /// The decoder's `userInfo`, handed to every nested decoder.
    let info: [CodingUserInfoKey: any Sendable]

    var allKeys: [Key] { object.members.compactMap { $0.key.string.flatMap(Key.init(stringValue:)) } }

    /// The member at `key`, following a key path (``JSONKeyPath``'s grammar: `origin.name`,
    /// `names[0].name`) when the key is not a member itself. `.some(nil)`: the path's root is
    /// present but a later step is missing or of another kind; `nil`: absent (an index past the
    /// end of its array, like a missing root).
    private func lookup(_ key: Key) -> JSONValue?? {
        if let v = object[key.stringValue] { return .some(v) }
        guard let path = try? JSONKeyPath(parsing: key.stringValue, delimiter: delimiter), path.components.count > 1,
            case .key(let first) = path.components[0], var current = object[first]
        else { return nil }
        for component in path.components.dropFirst() {
            switch component {
            case .key(let name):
                guard current.kind == .object, let next = current[name] else { return .some(nil) }
                current = next
            case .index, .match:
                guard current.kind == .array else { return .some(nil) }
                guard let next = JSONKeyPath([component]).resolve(in: current) else { return nil }
                current = next
            }
        }
        return .some(current)
    }

    func contains(_ key: Key) -> Bool { lookup(key) != nil }

    func decodeNil(forKey key: Key) throws -> Bool {
        switch lookup(key) {
        case .none: throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no key \(key.stringValue)"))
        case .some(.none): return true
        case .some(.some(let v)): return v.isNull
        }
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard case .some(.some(let v)) = lookup(key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no key \(key.stringValue)"))
        }
        return try TapeDecoder(value: v, codingPath: codingPath + [key], delimiter: delimiter, userInfo: info).decodeValue(type)
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        guard case .some(.some(let v)) = lookup(key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no key \(key.stringValue)"))
        }
        return try TapeDecoder(value: v, codingPath: codingPath + [key], delimiter: delimiter, userInfo: info).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        guard case .some(.some(let v)) = lookup(key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no key \(key.stringValue)"))
        }
        return try TapeDecoder(value: v, codingPath: codingPath + [key], delimiter: delimiter, userInfo: info).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { TapeDecoder(value: object, codingPath: codingPath, delimiter: delimiter, userInfo: info) }
    func superDecoder(forKey key: Key) throws -> any Decoder {
        guard case .some(.some(let v)) = lookup(key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no key \(key.stringValue)"))
        }
        return TapeDecoder(value: v, codingPath: codingPath + [key], delimiter: delimiter, userInfo: info)
    }
}

private struct IndexKey: CodingKey {
    var intValue: Int?
    var stringValue: String { "\(intValue ?? 0)" }
    init(_ index: Int) { intValue = index }
    init?(stringValue: String) { nil }
    init?(intValue: Int) { self.intValue = intValue }
}

private struct TapeUnkeyedContainer: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    var codingPath: [any CodingKey]
    /// The decoder's `userInfo`, handed to every nested decoder.
    let info: [CodingUserInfoKey: any Sendable]
    var currentIndex = 0
    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private mutating func nextDecoder<T>(_ type: T.Type) throws -> TapeDecoder {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "the array has no more elements"))
        }
        defer { currentIndex += 1 }
        return TapeDecoder(value: elements[currentIndex], codingPath: codingPath + [IndexKey(currentIndex)], userInfo: info)
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, elements[currentIndex].isNull else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try nextDecoder(type).decodeValue(type) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try nextDecoder(type).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try nextDecoder([Int].self).unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { try nextDecoder(Int.self) }
}

private struct TapeSingleValueContainer: SingleValueDecodingContainer {
    let decoder: TapeDecoder
    var codingPath: [any CodingKey] { decoder.codingPath }
    var value: JSONValue { decoder.value }

    func decodeNil() -> Bool { value.isNull }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard let v = value.bool else { throw decoder.mismatch(type) }
        return v
    }

    func decode(_ type: String.Type) throws -> String {
        guard let v = value.string else { throw decoder.mismatch(type) }
        return v
    }

    func decode(_ type: Double.Type) throws -> Double {
        guard let v = value.double else { throw decoder.mismatch(type) }
        return v
    }

    func decode(_ type: Float.Type) throws -> Float {
        guard let v = value.double else { throw decoder.mismatch(type) }
        return Float(v)
    }

    func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }

    private func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        if let v = value.int64, let exact = T(exactly: v) { return exact }
        if let text = value.numberText, let exact = T(text) { return exact }
        throw decoder.mismatch(type)
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decodeValue(type) }
}
