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
