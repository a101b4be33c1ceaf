import Foundation

/// Encodes entities back into the JSON they were decoded from: each coding key that is a key path
/// (`origin.country.name`, `names[0].name`) rebuilds its nested objects and arrays, dates are ISO
/// 8601 in UTC, an attribute that is `nil` is `null` (the row's column is NULL), and a
/// relationship that is `nil` — not loaded — is left out, so that ingesting the output again
/// changes nothing it did not hold. Values are plain structs: a graph cannot loop.
///
/// ```swift
/// let people = try await db.fetch(Person.self, including: [\.dogs])
/// let json = try IngotJSONEncoder().encode(people)   // [{"id":1,"origin":{"country":{"name":"UK"}},"dogs":[{"id":7,…}]}]
/// ```
public struct IngotJSONEncoder: Sendable {
    /// An encoder.
    public init() {}

    /// `values` as a JSON array.
    public func encode<T: IngotEntity & Encodable>(_ values: [T]) throws -> Data {
        let model = try EntityModel(root: T.self)
        let array = ArrayNode()
        for value in values {
            let node = ObjectNode()
            try value.encode(to: TreeEncoder(node: .object(node), model: model, entity: model.entity(named: T.entityName)))
            array.items.append(.object(node))
        }
        var out = ""
        JSONTree.write(.array(array), to: &out)
        return Data(out.utf8)
    }

    /// `value` as a JSON object.
    public func encode<T: IngotEntity & Encodable>(_ value: T) throws -> Data {
        let model = try EntityModel(root: T.self)
        let node = ObjectNode()
        try value.encode(to: TreeEncoder(node: .object(node), model: model, entity: model.entity(named: T.entityName)))
        var out = ""
        JSONTree.write(.object(node), to: &out)
        return Data(out.utf8)
    }
}

extension EntityModel {
    /// The entity named `name`, if the model has it.
    fileprivate func entity(named name: String) -> Entity? { entities.first { $0.name == name } }
}

// MARK: - The encoder

/// Encodes into a node of the tree. With an `entity`, coding keys are that entity's key paths.
private struct TreeEncoder: Encoder {
    enum Target {
        case object(ObjectNode)
        case array(ArrayNode)
        /// A single value goes here.
        case slot((JSONTree) throws -> Void)
    }

    let node: Target
    let model: EntityModel
    let entity: Entity?
    var codingPath: [any CodingKey] = []
    /// The type whose `encode(to:)` this encoder serves, when it serves one value's: handed back
    /// to a single-value container, it would encode itself again, endlessly.
    var serving: Any.Type? = nil
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        let object: ObjectNode
        switch node {
        case .object(let node): object = node
        case .array(let array):
            object = ObjectNode()
            array.items.append(.object(object))
        case .slot(let put):
            object = ObjectNode()
            try? put(.object(object))
        }
        return KeyedEncodingContainer(EntityContainer<Key>(encoder: self, object: object))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        let array: ArrayNode
        switch node {
        case .array(let node): array = node
        case .object:
            array = ArrayNode()
        case .slot(let put):
            array = ArrayNode()
            try? put(.array(array))
        }
        return ItemsContainer(encoder: self, array: array)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleContainer(encoder: self) }

    /// `value` as a tree: scalars as JSON text (every integer width, `Float`, `Double`, `Decimal`
    /// as numbers; `URL` as its text, `UUID` in the lower case APIs send), dates as ISO 8601,
    /// entities with their own key paths, anything else through its own `encode(to:)`.
    ///
    /// Every value a single-value container is handed must be one of the scalars here: handed to
    /// its own `encode(to:)`, a scalar encodes itself through that same container again, endlessly
    /// (an `Int32` or a `Decimal` crashed the process so, `IngotJSONEncoderTests`).
    func tree(_ value: some Encodable, at path: [any CodingKey]) throws -> JSONTree {
        switch value {
        case let v as String: return JSONTree.string(v)
        case let v as Bool: return .scalar(v ? "true" : "false")
        case let v as Double:
            guard v.isFinite else {
                throw EncodingError.invalidValue(v, .init(codingPath: path, debugDescription: "JSON has no \(v)"))
            }
            return .scalar(JSONTree.number(v))
        case let v as Float: return try tree(Double(v), at: path)
        case let v as any BinaryInteger: return .scalar(String(describing: v))
        case let v as Decimal:
            guard v.isFinite else {
                throw EncodingError.invalidValue(v, .init(codingPath: path, debugDescription: "JSON has no \(v)"))
            }
            return .scalar(v.description)
        case let v as URL: return JSONTree.string(v.absoluteString)
        case let v as UUID: return JSONTree.string(v.uuidString.lowercased())
        case let v as Date: return JSONTree.string(JSONTree.instant(v))
        default:
            var result: JSONTree = .scalar("null")
            let entity = (value as? any IngotEntity).flatMap { model.entity(named: type(of: $0).entityName) }
            let encoder = TreeEncoder(
                node: .slot { result = $0 }, model: model, entity: entity, codingPath: path, serving: type(of: value))
            try value.encode(to: encoder)
            return result
        }
    }
}

private struct EntityContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let encoder: TreeEncoder
    let object: ObjectNode
    var codingPath: [any CodingKey] { encoder.codingPath }

    private var relationshipKeys: Set<String> { Set(encoder.entity?.relationships.map(\.key) ?? []) }

    /// Puts `value` where `key`'s path leads (its own key when it is no key path of the entity).
    private func put(_ value: JSONTree, _ key: Key) throws {
        guard let entity = encoder.entity,
            entity.attributes.contains(where: { $0.key == key.stringValue }) || relationshipKeys.contains(key.stringValue),
            let path = try? JSONKeyPath(parsing: key.stringValue, delimiter: entity.keyDelimiter), !path.components.isEmpty
        else {
            object.set(key.stringValue, value)
            return
        }
        try JSONKeyPath.place(value, along: path.components[...], in: .object(object))
    }

    mutating func encodeNil(forKey key: Key) throws {
        // A relationship that is nil was not loaded: left out (ingesting the output keeps its links).
        if relationshipKeys.contains(key.stringValue) { return }
        try put(.scalar("null"), key)
    }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        var tree = try encoder.tree(value, at: codingPath + [key])
        // An attribute read through a pattern goes back through its template: text the pattern
        // accepts again (`1` → `"https://swapi.dev/api/people/1/"`).
        if let attribute = encoder.entity?.attributes.first(where: { $0.key == key.stringValue }), let pattern = attribute.pattern,
            case .scalar(let text) = tree
        {
            let bare = value is String ? String(describing: value) : text
            if let template = attribute.template {
                tree = JSONTree.string(template.replacingOccurrences(of: "{}", with: bare))
            } else if AttributeRules.Pattern(pattern)?.capture(in: bare) != bare {
                // Without a template, the value as it is must be what the pattern reads back.
                throw EncodingError.invalidValue(
                    value,
                    .init(
                        codingPath: codingPath + [key],
                        debugDescription:
                            "\(bare) does not read back through pattern '\(pattern)': give the rule a template (IngotRule(pattern:template:), \"…{}…\")"
                    ))
            }
        }
        // A set's members in one order, whatever its hashing (by their JSON text).
        if value is any UnorderedMembers, case .array(let array) = tree {
            array.items.sort { JSONTree.text(of: $0) < JSONTree.text(of: $1) }
        }
        try put(tree, key)
    }

    mutating func encodeIfPresent<T: Encodable>(_ value: T?, forKey key: Key) throws {
        guard let value else { return try encodeNil(forKey: key) }
        try encode(value, forKey: key)
    }

    mutating func encodeIfPresent(_ value: Bool?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: String?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: Double?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: Float?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: Int?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: Int8?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: Int16?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: Int32?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: Int64?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: UInt?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: UInt8?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: UInt16?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: UInt32?, forKey key: Key) throws { try encodeIfPresent(value, key) }
    mutating func encodeIfPresent(_ value: UInt64?, forKey key: Key) throws { try encodeIfPresent(value, key) }

    private mutating func encodeIfPresent<T: Encodable>(_ value: T?, _ key: Key) throws {
        guard let value else { return try encodeNil(forKey: key) }
        try encode(value, forKey: key)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<
        NestedKey
    > {
        let child = ObjectNode()
        try? put(.object(child), key)
        let nested = TreeEncoder(node: .object(child), model: encoder.model, entity: nil, codingPath: codingPath + [key])
        return nested.container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = ArrayNode()
        try? put(.array(child), key)
        return TreeEncoder(node: .array(child), model: encoder.model, entity: nil, codingPath: codingPath + [key]).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder { encoder }
    mutating func superEncoder(forKey key: Key) -> any Encoder { encoder }
}

private struct ItemsContainer: UnkeyedEncodingContainer {
    let encoder: TreeEncoder
    let array: ArrayNode
    var codingPath: [any CodingKey] { encoder.codingPath }
    var count: Int { array.items.count }

    mutating func encodeNil() throws { array.items.append(.scalar("null")) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        array.items.append(try encoder.tree(value, at: codingPath))
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        TreeEncoder(node: .array(array), model: encoder.model, entity: nil, codingPath: codingPath).container(keyedBy: keyType)
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let child = ArrayNode()
        array.items.append(.array(child))
        return TreeEncoder(node: .array(child), model: encoder.model, entity: nil, codingPath: codingPath).unkeyedContainer()
    }

    mutating func superEncoder() -> any Encoder { encoder }
}

private struct SingleContainer: SingleValueEncodingContainer {
    let encoder: TreeEncoder
    var codingPath: [any CodingKey] { encoder.codingPath }

    private func put(_ tree: JSONTree) throws {
        switch encoder.node {
        case .slot(let put): try put(tree)
        case .array(let array): array.items.append(tree)
        case .object:
            throw EncodingError.invalidValue(tree, .init(codingPath: codingPath, debugDescription: "an entity encodes as an object"))
        }
    }

    mutating func encodeNil() throws { try put(.scalar("null")) }
    mutating func encode<T: Encodable>(_ value: T) throws {
        if let serving = encoder.serving, serving == T.self {
            throw EncodingError.invalidValue(
                value, .init(codingPath: codingPath, debugDescription: "\(T.self) encodes itself as itself: not a value JSON can hold"))
        }
        try put(try encoder.tree(value, at: codingPath))
    }
}

/// A collection whose order means nothing (a `Set`): encoded in one order.
private protocol UnorderedMembers {}
extension Set: UnorderedMembers {}
