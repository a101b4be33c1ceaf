import Foundation

/// An entity declared in Swift, the way Coredatable declares `NSManagedObject` subclasses: a
/// `Decodable` type whose coding keys may be key paths and whose identity is declared on the type.
///
/// ```swift
/// struct Person: IngotEntity {
///     var id: Int
///     var firstName: String?
///     var country: String?
///     var dogs: Set<Dog>?
///
///     enum CodingKeys: String, CodingKey {
///         case id, firstName = "first_name", country = "origin.country.name", dogs
///     }
///     static let identity: [CodingKeys] = [.id]
/// }
/// ```
///
/// `EntityModel(root: Person.self)` derives the same ``EntityModel`` a pipeline file declares:
/// attribute names are the stored properties' names in snake case (`firstName` → `first_name`),
/// their keys the coding keys' string values; an `IngotEntity` property is a to-one relationship,
/// an array (ordered) or set (unordered) of them a to-many.
///
/// Decoding such a type with ``IngotJSONDecoder`` needs a ``DecodingContext`` on the current
/// queue, as a Core Data decoder needs its managed object context; it throws
/// ``IngotDecodingError/missingContext(codingPath:)`` where there is none.
public protocol IngotEntity: Decodable, Sendable {
    associatedtype IdentityKeys: CodingKey
    /// The entity's name (and default table). Default: the type's name in snake case.
    static var entityName: String { get }
    /// The coding keys that identify an object; empty: no identity (always inserted).
    static var identity: [IdentityKeys] { get }
    /// The separator of key paths in coding keys. Default `.`.
    static var keyDelimiter: String { get }
}

extension IngotEntity {
    /// The type's name in snake_case (`PersonRecord` → `person_record`).
    public static var entityName: String { snakeCase(String(describing: Self.self)) }
    /// Key paths are dotted.
    public static var keyDelimiter: String { "." }
}

/// `firstName` → `first_name`, `URLPath` → `url_path`.
func snakeCase(_ name: String) -> String {
    var out = ""
    let chars = Array(name)
    for (i, c) in chars.enumerated() {
        if c.isUppercase {
            let previousLower = i > 0 && (chars[i - 1].isLowercase || chars[i - 1].isNumber)
            let nextLower = i + 1 < chars.count && chars[i + 1].isLowercase
            if i > 0 && (previousLower || (nextLower && chars[i - 1].isUppercase)) { out += "_" }
            out += c.lowercased()
        } else {
            out.append(c)
        }
    }
    return out
}

/// A collection of entities (`[Dog]`, `Set<Dog>`): a to-many relationship.
protocol ToManyEntities {
    static var elementType: any IngotEntity.Type { get }
    static var isOrdered: Bool { get }
}

extension Array: ToManyEntities where Element: IngotEntity {
    static var elementType: any IngotEntity.Type { Element.self }
    static var isOrdered: Bool { true }
}

extension Set: ToManyEntities where Element: IngotEntity {
    static var elementType: any IngotEntity.Type { Element.self }
    static var isOrdered: Bool { false }
}

extension EntityModel {
    /// The model of `root` and of every entity reachable from it through relationships, derived
    /// from their `Decodable` conformances. Throws when a type cannot be probed.
    public init(root: any IngotEntity.Type) throws {
        try self.init(roots: [root])
    }

    /// The model of every entity reachable from `roots` (each entity once, in the order first
    /// met): one database for several root types.
    public init(roots: [any IngotEntity.Type]) throws {
        let probe = SchemaProbe()
        for root in roots { try probe.probe(root) }
        self.init(entities: probe.order.compactMap { probe.entities[$0] })
    }
}
