import Foundation

/// The identity of a row: one value, or one per key of a composite identity.
public enum IdentityKey: Hashable, Sendable, CustomStringConvertible {
    case single(ScalarValue)
    case composite([ScalarValue])

    /// Hashes the values, as ``==`` compares them.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .single(let v): v.hash(into: &hasher)
        case .composite(let vs): for v in vs { v.hash(into: &hasher) }
        }
    }

    /// The identity's values, one per identity attribute.
    public var values: [ScalarValue] {
        switch self {
        case .single(let v): [v]
        case .composite(let vs): vs
        }
    }

    /// As shown in messages.
    public var description: String {
        switch self {
        case .single(let v): v.description
        case .composite(let vs): "(" + vs.map(\.description).joined(separator: ", ") + ")"
        }
    }
}

/// An identity written as a literal (`ref.id == 2`, `ref.id == "luke"`): one integer or text value.
extension IdentityKey: ExpressibleByIntegerLiteral, ExpressibleByStringLiteral {
    /// `.single(.integer(value))`.
    public init(integerLiteral value: Int64) { self = .single(.integer(value)) }
    /// `.single(.text(value))`.
    public init(stringLiteral value: String) { self = .single(.text(value)) }
}

/// An identity as JSON: one value as it is, a composite one as an array of its values — what a
/// `#Predicate` needs of a constant (`$0.manager?.id == 2`).
extension IdentityKey: Codable {
    /// One value, or an array of them for a composite identity.
    public init(from decoder: any Decoder) throws {
        if var array = try? decoder.unkeyedContainer() {
            var values: [ScalarValue] = []
            while !array.isAtEnd { values.append(try array.decode(ScalarValue.self)) }
            self = .composite(values)
        } else {
            self = .single(try ScalarValue(from: decoder))
        }
    }

    /// One value, or an array of them for a composite identity.
    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .single(let value): try value.encode(to: encoder)
        case .composite(let values):
            var array = encoder.unkeyedContainer()
            for value in values { try array.encode(value) }
        }
    }
}

/// A value as JSON: the scalar it is (a `#Predicate` constant, a reference's identity).
extension ScalarValue: Codable {
    /// A JSON scalar: null, an integer, a number, a text or a boolean.
    public init(from decoder: any Decoder) throws {
        let single = try decoder.singleValueContainer()
        if single.decodeNil() {
            self = .null
        } else if let value = try? single.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? single.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? single.decode(Double.self) {
            self = .real(value)
        } else {
            self = .text(try single.decode(String.self))
        }
    }

    /// As the JSON scalar it is.
    public func encode(to encoder: any Encoder) throws {
        var single = encoder.singleValueContainer()
        switch self {
        case .null: try single.encodeNil()
        case .integer(let v): try single.encode(v)
        case .real(let v): try single.encode(v)
        case .text(let v): try single.encode(v)
        case .bool(let v): try single.encode(v)
        }
    }
}
