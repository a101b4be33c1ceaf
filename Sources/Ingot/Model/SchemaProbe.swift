import Foundation

/// Derives entities from `IngotEntity` types by running their `init(from:)` against a decoder
/// that answers every request with a placeholder and writes down what was asked: the key and the
/// Swift type of each property.
final class SchemaProbe {
    var entities: [String: Entity] = [:]
    var order: [String] = []
    /// The types' and properties' own names, for messages.
    var swiftNames = SwiftNames()
    /// Placeholders being built inside one another (a guard against types that recurse).
    var placeholderDepth = 0

    struct Unsupported: Error, CustomStringConvertible {
        var description: String
    }

    func probe(_ type: any IngotEntity.Type) throws {
        let name = type.entityName
        guard entities[name] == nil else { return }
        order.append(name)
        entities[name] = Entity(name: name, identity: [], attributes: [], keyDelimiter: type.keyDelimiter)
        let instance = try type.init(from: ProbeDecoder(probe: self, entity: name))
        guard var entity = entities[name] else { return }
        // Name columns after the stored properties: a synthesized `init(from:)` decodes them in
        // declaration order, which is the order `Mirror` lists them in.
        let labels = Mirror(reflecting: instance).children.compactMap(\.label)
        let keys = recordedKeys[name] ?? []
        var nameOfKey: [String: String] = [:]
        if labels.count == keys.count {
            for (key, label) in zip(keys, labels) { nameOfKey[key] = snakeCase(label.hasPrefix("_") ? String(label.dropFirst()) : label) }
            for k in entity.attributes.indices {
                entity.attributes[k].name = nameOfKey[entity.attributes[k].key] ?? entity.attributes[k].name
            }
            for k in entity.relationships.indices {
                entity.relationships[k].name = nameOfKey[entity.relationships[k].key] ?? entity.relationships[k].name
            }
            for (key, label) in zip(keys, labels) {
                guard let relationship = entity.relationships.first(where: { $0.key == key }) else { continue }
                swiftNames.properties[name, default: [:]][relationship.name] = label.hasPrefix("_") ? String(label.dropFirst()) : label
            }
        }
        swiftNames.types[name] = String(describing: type)
        entity.identity = type.identity.map { nameOfKey[$0.stringValue] ?? snakeCase($0.stringValue) }
        entity.prepare = type.prepare.map { RecordRewrite(owner: String(reflecting: type), body: $0) }
        // Value rules, as the pipeline file's keys beside an attribute or a relationship.
        let rules = type.rules(forKeys: keys)
        for k in entity.attributes.indices {
            if let rule = rules[entity.attributes[k].key] { entity.attributes[k].apply(rule) }
        }
        // A child keeps only what its parent does not declare (the parent's table stores that).
        if let parent = type.parent, parent.entityName != name {
            try probe(parent)
            if let declared = entities[parent.entityName] {
                let inherited = Set(declared.attributes.map(\.name)).subtracting(entity.identity)
                entity.attributes.removeAll { inherited.contains($0.name) }
                let related = Set(declared.relationships.map(\.name))
                entity.relationships.removeAll { related.contains($0.name) }
            }
            entity.parent = parent.entityName
        }
        for k in entity.relationships.indices {
            if let rule = rules[entity.relationships[k].key] { entity.relationships[k].apply(rule) }
        }
        entities[name] = entity
    }

    /// Per entity: the keys its `init(from:)` asked for, in order.
    private var recordedKeys: [String: [String]] = [:]

    func record(_ entity: String, key: any CodingKey, type: any Decodable.Type, required: Bool) throws {
        guard var e = entities[entity] else { return }
        guard !(recordedKeys[entity] ?? []).contains(key.stringValue) else { return }
        recordedKeys[entity, default: []].append(key.stringValue)
        let name = snakeCase(key.stringValue)
        if let target = type as? any IngotEntity.Type {
            try probe(target)
            e = entities[entity] ?? e
            e.relationships.append(Relationship(name: name, target: target.entityName, key: key.stringValue))
        } else if let reference = type as? any ToOneReference.Type {
            try probe(reference.targetType)
            e = entities[entity] ?? e
            e.relationships.append(Relationship(name: name, target: reference.targetType.entityName, key: key.stringValue))
        } else if let references = type as? any ToManyReferences.Type {
            try probe(references.targetType)
            e = entities[entity] ?? e
            e.relationships.append(
                Relationship(
                    name: name, target: references.targetType.entityName, isToMany: true, isOrdered: references.isOrdered,
                    key: key.stringValue))
        } else if let many = type as? any ToManyEntities.Type {
            try probe(many.elementType)
            e = entities[entity] ?? e
            e.relationships.append(
                Relationship(
                    name: name, target: many.elementType.entityName, isToMany: true, isOrdered: many.isOrdered, key: key.stringValue))
        } else {
            var attribute = Attribute(name: name, type: SchemaProbe.attributeType(type), key: key.stringValue)
            attribute.required = required
            attribute.foldsCase = type == UUID.self
            if let enumeration = type as? any (CaseIterable & RawRepresentable).Type,
                attribute.type == .string || attribute.type == .integer
            {
                attribute.cases = SchemaProbe.rawValues(enumeration)
            } else if let enumeration = type as? any RawRepresentable.Type, attribute.type == .string || attribute.type == .integer {
                attribute.rawValues = RawValueCheck.of(enumeration)
            }
            e.attributes.append(attribute)
        }
        entities[entity] = e
    }

    static func attributeType(_ type: any Decodable.Type) -> AttributeType {
        switch type {
        case is Bool.Type: .bool
        case is String.Type: .string
        case is Double.Type, is Float.Type: .double
        case is Int.Type, is Int64.Type, is Int32.Type, is Int16.Type, is Int8.Type, is UInt.Type, is UInt32.Type,
            is UInt16.Type, is UInt8.Type, is UInt64.Type:
            .integer
        case is Date.Type: .date(.iso8601(timeZone: "UTC"))
        case is Decimal.Type: .decimal
        // Types Swift developers declare that are one text or one number when encoded.
        case is URL.Type, is UUID.Type: .string
        case let raw as any RawRepresentable.Type: rawValueType(raw) ?? .json
        default: .json
        }
    }

    /// The raw values of every case of `type`, as text.
    static func rawValues<E: CaseIterable & RawRepresentable>(_ type: E.Type) -> [String] {
        E.allCases.map { "\($0.rawValue)" }
    }

    /// An enum of raw values (`String`, an integer type) is stored as its raw value.
    private static func rawValueType<R: RawRepresentable>(_ type: R.Type) -> AttributeType? {
        guard let raw = R.RawValue.self as? any Decodable.Type else { return nil }
        let stored = attributeType(raw)
        return stored == .string || stored == .integer ? stored : nil
    }
}

/// The decoder a ``SchemaProbe`` hands to `init(from:)`.
private struct ProbeDecoder: Decoder {
    let probe: SchemaProbe
    /// The entity being probed; `nil` below a property (nothing more is recorded there).
    let entity: String?
    var codingPath: [any CodingKey] = []
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        KeyedDecodingContainer(ProbeKeyedContainer<Key>(probe: probe, entity: entity, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        ProbeUnkeyedContainer(codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        ProbeSingleValueContainer(probe: probe, codingPath: codingPath)
    }
}

/// An enum's first case: its placeholder (its raw value's placeholder may name no case).
private func firstCase<C: CaseIterable>(_ type: C.Type) -> Any? { C.allCases.first }

/// Placeholder values for the types a probe is asked for.
private func placeholder<T: Decodable>(_ type: T.Type, probe: SchemaProbe, codingPath: [any CodingKey]) throws -> T {
    let value: Any? =
        switch type {
        case is Bool.Type: false
        case is String.Type: ""
        case is Double.Type: 0.0
        case is Float.Type: Float(0)
        case is Int.Type: 0
        case is Int64.Type: Int64(0)
        case is Int32.Type: Int32(0)
        case is Int16.Type: Int16(0)
        case is Int8.Type: Int8(0)
        case is UInt.Type: UInt(0)
        case is UInt64.Type: UInt64(0)
        case is UInt32.Type: UInt32(0)
        case is UInt16.Type: UInt16(0)
        case is UInt8.Type: UInt8(0)
        case is Date.Type: Date(timeIntervalSince1970: 0)
        case is URL.Type: URL(fileURLWithPath: "/")
        case is Decimal.Type: Decimal(0)
        case is UUID.Type: UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
        case let cases as any CaseIterable.Type: firstCase(cases)
        default: nil
        }
    if let value = value as? T { return value }
    // A type that asks for itself again (directly or through a wrapper) would recurse forever.
    guard probe.placeholderDepth < 32 else {
        throw SchemaProbe.Unsupported(description: "cannot derive a model from \(T.self): it nests more than 32 levels deep")
    }
    probe.placeholderDepth += 1
    defer { probe.placeholderDepth -= 1 }
    do {
        return try T(from: ProbeDecoder(probe: probe, entity: nil, codingPath: codingPath))
    } catch {
        let at = codingPath.map(\.stringValue).joined(separator: ".")
        if T.self is any RawRepresentable.Type {
            throw SchemaProbe.Unsupported(
                description:
                    "cannot derive a model from \(T.self) at \(at): an enum of raw values is stored as its raw value, but the model is read without a value to decode, so declare it CaseIterable, or the property optional"
            )
        }
        throw SchemaProbe.Unsupported(description: "cannot derive a model from \(T.self) at \(at): \(error)")
    }
}

private struct ProbeKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let probe: SchemaProbe
    let entity: String?
    var codingPath: [any CodingKey]
    var allKeys: [Key] { [] }

    func contains(_ key: Key) -> Bool { true }
    func decodeNil(forKey key: Key) throws -> Bool { false }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        if let entity { try probe.record(entity, key: key, type: type, required: true) }
        return try placeholder(type, probe: probe, codingPath: codingPath + [key])
    }

    /// An optional property: recorded as any other, then `nil` when no placeholder can be made
    /// of its type (an enum of raw values that is not `CaseIterable`: no case can be named).
    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        if let entity { try probe.record(entity, key: key, type: type, required: false) }
        if type is any RawRepresentable.Type, !(type is any CaseIterable.Type) { return nil }
        return try placeholder(type, probe: probe, codingPath: codingPath + [key])
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try decode(type, key) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try decode(type, key) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try decode(type, key) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try decode(type, key) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try decode(type, key) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try decode(type, key) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try decode(type, key) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try decode(type, key) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try decode(type, key) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try decode(type, key) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try decode(type, key) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try decode(type, key) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try decode(type, key) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try decode(type, key) }

    private func decode<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T {
        try decode(type, forKey: key) as T
    }

    // An optional property of a standard type comes through its own `decodeIfPresent`, whose
    // default calls `decode`: recorded here as optional, not required.
    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: Float.Type, forKey key: Key) throws -> Float? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: Int8.Type, forKey key: Key) throws -> Int8? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: Int16.Type, forKey key: Key) throws -> Int16? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: Int32.Type, forKey key: Key) throws -> Int32? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: Int64.Type, forKey key: Key) throws -> Int64? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: UInt.Type, forKey key: Key) throws -> UInt? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: UInt8.Type, forKey key: Key) throws -> UInt8? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: UInt16.Type, forKey key: Key) throws -> UInt16? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: UInt32.Type, forKey key: Key) throws -> UInt32? { try decodeIfPresent(type, key) }
    func decodeIfPresent(_ type: UInt64.Type, forKey key: Key) throws -> UInt64? { try decodeIfPresent(type, key) }

    private func decodeIfPresent<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T? {
        try decodeIfPresent(type, forKey: key) as T?
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        KeyedDecodingContainer(ProbeKeyedContainer<NestedKey>(probe: probe, entity: nil, codingPath: codingPath + [key]))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        ProbeUnkeyedContainer(codingPath: codingPath + [key])
    }

    func superDecoder() throws -> any Decoder { ProbeDecoder(probe: probe, entity: nil, codingPath: codingPath) }
    func superDecoder(forKey key: Key) throws -> any Decoder { ProbeDecoder(probe: probe, entity: nil, codingPath: codingPath + [key]) }
}

/// An empty array: collections probe as empty.
private struct ProbeUnkeyedContainer: UnkeyedDecodingContainer {
    var codingPath: [any CodingKey]
    var count: Int? { 0 }
    var isAtEnd: Bool { true }
    var currentIndex: Int { 0 }

    mutating func decodeNil() throws -> Bool { true }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "probe: empty"))
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "probe: empty"))
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { self }
    mutating func superDecoder() throws -> any Decoder {
        throw DecodingError.valueNotFound(Int.self, .init(codingPath: codingPath, debugDescription: "probe: empty"))
    }
}

private struct ProbeSingleValueContainer: SingleValueDecodingContainer {
    let probe: SchemaProbe
    var codingPath: [any CodingKey]
    func decodeNil() -> Bool { false }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try placeholder(type, probe: probe, codingPath: codingPath) }
}

extension Attribute {
    /// The value rules a Swift type declares for this attribute (``IngotRule``), as the pipeline
    /// file's keys beside it would set them.
    fileprivate mutating func apply(_ rule: IngotRule) {
        coerce = coerce || rule.coerce
        pattern = rule.pattern
        template = rule.template
        values = rule.values
        grouping = rule.grouping
        nullOnInvalid = rule.nullOnInvalid
        defaultValue = rule.defaultValue
        constValue = rule.constValue
        if let format = rule.dateFormat, case .date = type { type = .date(format) }
    }
}

extension Relationship {
    /// The options a Swift type declares for this relationship (``IngotRule``), as the pipeline
    /// file's keys beside it would set them.
    fileprivate mutating func apply(_ rule: IngotRule) {
        pattern = rule.pattern
        template = rule.template
        values = rule.values
        inverse = rule.inverse
        owned = rule.owned
        // Owned children keep their order anyway (their position is part of their key).
        if rule.owned { isOrdered = false }
        cascadesDeletes = rule.deleteCascade
        if let missing = rule.missing { self.missing = missing }
        fields = rule.fields
        insertsTargets = rule.insertsTargets
        updatesTargets = rule.updatesTargets
        deletesLinks = rule.deletesLinks
    }
}
