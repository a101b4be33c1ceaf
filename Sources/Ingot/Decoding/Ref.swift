/// A to-one relationship that keeps its target's identity whether or not the target itself is
/// loaded: an object or a bare id in, the id out.
///
/// ```swift
/// struct Dog: IngotEntity, Codable {
///     var id: Int
///     var master: Ref<Person>?      // {"master": 7} or {"master": {"id": 7, "name": "Ada"}}
///     …
/// }
/// dog.master?.id                    // .single(.integer(7)), loaded or not
/// dog.master?.value                 // the Person, when it came as an object or `including: [\.master]`
/// ```
///
/// It encodes as its identity alone (a bare value, or an object of the identity keys for a
/// composite identity): a graph of references cannot loop. Read back by
/// `IngotDatabase.fetch`, it carries the stored key even when the target is not loaded.
public struct Ref<Target: IngotEntity>: Sendable {
    /// The target's identity.
    public var id: IdentityKey
    /// The target, when it is at hand.
    public var value: Target? {
        get { held?.value }
        set { held = newValue.map(Held.init) }
    }
    /// The target, boxed: a type may refer to its own kind (`var manager: Ref<Employee>?`
    /// inside `Employee`), which a value stored inline could not.
    private var held: Held?

    /// A reference to the target with identity `id`.
    public init(id: IdentityKey, value: Target? = nil) {
        self.id = id
        self.held = value.map(Held.init)
    }

    /// An immutable box: `Sendable` as its target is.
    private final class Held: Sendable {
        let value: Target
        init(_ value: Target) { self.value = value }
    }
}

/// A to-many relationship as references: each element keeps its target's identity, and the
/// target itself when it came as an object or was loaded (`including:`); it encodes as the
/// identities alone. `nil` (an optional property): not given, or not loaded.
///
/// ```swift
/// var dogs: Many<Dog>?      // [3, {"id": 4, "name": "Rex"}] in; [3, 4] out
/// ```
public typealias Many<Target: IngotEntity> = [Ref<Target>]

extension Ref: ToOneReference {
    static var targetType: any IngotEntity.Type { Target.self }
    static var valueKeyPath: AnyKeyPath { \Ref<Target>.value }
    static var idKeyPath: AnyKeyPath { \Ref<Target>.id }
}

extension Ref: Decodable {
    /// A bare identity (a number, text or boolean), or the target's object (its identity read
    /// from its identity keys, the target decoded whole).
    public init(from decoder: any Decoder) throws {
        if let single = try? decoder.singleValueContainer(), let value = Ref.scalar(single) {
            self.init(id: .single(value))
            return
        }
        let keys = try decoder.container(keyedBy: Target.IdentityKeys.self)
        var values: [ScalarValue] = []
        for key in Target.identity {
            guard let value = Ref.scalar(keys, key) else {
                throw DecodingError.keyNotFound(
                    key, .init(codingPath: decoder.codingPath, debugDescription: "a reference to \(Target.self) without its identity"))
            }
            values.append(value)
        }
        self.init(id: values.count == 1 ? .single(values[0]) : .composite(values), value: try Target(from: decoder))
    }

    private static func scalar(_ container: any SingleValueDecodingContainer) -> ScalarValue? {
        if let v = try? container.decode(Int64.self) { return .integer(v) }
        if let v = try? container.decode(String.self) { return .text(v) }
        if let v = try? container.decode(Double.self) { return .real(v) }
        if let v = try? container.decode(Bool.self) { return .bool(v) }
        return nil
    }

    private static func scalar(_ container: KeyedDecodingContainer<Target.IdentityKeys>, _ key: Target.IdentityKeys) -> ScalarValue? {
        if let v = try? container.decode(Int64.self, forKey: key) { return .integer(v) }
        if let v = try? container.decode(String.self, forKey: key) { return .text(v) }
        if let v = try? container.decode(Double.self, forKey: key) { return .real(v) }
        if let v = try? container.decode(Bool.self, forKey: key) { return .bool(v) }
        return nil
    }
}

extension Ref: Encodable {
    /// The identity alone: a bare value, or an object of the identity keys.
    public func encode(to encoder: any Encoder) throws {
        switch id {
        case .single(let value):
            try value.encode(to: encoder)
        case .composite(let values):
            var container = encoder.container(keyedBy: Target.IdentityKeys.self)
            for (key, value) in zip(Target.identity, values) { try container.encode(value, forKey: key) }
        }
    }
}

extension Ref: Equatable where Target: Equatable {
    /// The same identity, and the same target or none at hand on both sides.
    public static func == (lhs: Ref, rhs: Ref) -> Bool { lhs.id == rhs.id && lhs.value == rhs.value }
}

extension Ref: Hashable where Target: Hashable {
    /// The identity and the target at hand.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(id)
        hasher.combine(value)
    }
}

/// A reference made from a stored key column alone (a row read back without its target).
protocol ReferenceFromStoredKey {
    /// The key columns' values, in identity order.
    init(storedKey: [ScalarValue])
}

extension Ref: ReferenceFromStoredKey {
    init(storedKey: [ScalarValue]) { self.init(id: storedKey.count == 1 ? .single(storedKey[0]) : .composite(storedKey)) }
}
