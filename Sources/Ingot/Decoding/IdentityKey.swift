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
