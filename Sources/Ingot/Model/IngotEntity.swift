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
    /// The coding keys ``identity`` names (the type's `CodingKeys`). Left to its default when a
    /// type declares no `identity`, which the compiler then refuses, saying what to add.
    associatedtype IdentityKeys: CodingKey = IdentityNotDeclared
    /// The entity's name (and default table). Default: the type's name in snake case.
    static var entityName: String { get }
    /// The coding keys that identify an object; empty: no identity (always inserted).
    static var identity: [IdentityKeys] { get }
    /// The separator of key paths in coding keys. Default `.`.
    static var keyDelimiter: String { get }
    /// The value rule of a coding key's attribute (or of a relationship's bare identities), as a
    /// pipeline file writes it beside the attribute; `nil`: none (the default).
    ///
    /// ```swift
    /// static func rule(for key: CodingKeys) -> IngotRule? {
    ///     switch key {
    ///     case .id: IngotRule(pattern: "/(\\d+)/$")                       // the id inside the record's URL
    ///     case .mass: IngotRule(values: ["unknown": nil], grouping: ",")  // "1,358" → 1358, "unknown" → NULL
    ///     case .homeworld: IngotRule(pattern: "/(\\d+)/$")                // a bare reference given as a URL
    ///     default: nil
    ///     }
    /// }
    /// ```
    static func rule(for key: IdentityKeys) -> IngotRule?
    /// The entity this one specializes (Core Data's parent entity, the pipeline file's
    /// `parent:`): a child shares its parent's identity; the properties the parent declares are
    /// stored once, in the parent's table (its `kind` column names the child), the child's own
    /// in the child's table. `nil` (the default): none.
    static var parent: (any IngotEntity.Type)? { get }
    /// A hook that rewrites each object of this entity before it is mapped (Coredatable's
    /// `initialize(from:)`, Sync's value transformers): it reads and sets the record's keys — an
    /// identity built from two fields, an id sent as text, a value in a format of the API's own
    /// decoded by hand — and the rest of the record maps by default, with every rule. It runs
    /// before the identity is read, in `ingest` and in ``IngotJSONDecoder``, for root and nested
    /// objects alike. A hook that throws rejects the record (reason `prepare_failed`, with its
    /// coding path; its neighbours are saved). `nil` (the default): none.
    ///
    /// ```swift
    /// static let prepare: (@Sendable (inout IngotRecord) throws -> Void)? = { record in
    ///     if let minutes = record.string("runtime")?.split(separator: " ").first { record.set("runtime", Int(minutes)) }
    /// }
    /// ```
    static var prepare: (@Sendable (inout IngotRecord) throws -> Void)? { get }
}

/// The rules of an ``IngotEntity``'s coding key — the pipeline file's keys beside an attribute or
/// a relationship, in Swift (docs/pipelines.md): value rules applied to the JSON text before it is
/// converted, and a relationship's `inverse:`, `owned:`, `missing:`, `delete:`, `fields:` and
/// `operations:`.
public struct IngotRule: Sendable, Equatable {
    /// `coerce: true`: a value of another JSON type that converts without loss (`"1699"`).
    public var coerce: Bool
    /// `pattern:`: a regular expression with one capture group; the text becomes what it captures.
    public var pattern: String?
    /// `template:` beside a pattern: the text the value is written back as (`{}` standing for
    /// it: `"https://swapi.dev/api/people/{}/"`), so that encoding and export give text the
    /// pattern accepts again (``IngotJSONEncoder``).
    public var template: String?
    /// `values:`: texts replaced before conversion (`nil`: NULL).
    public var values: [String: String?]
    /// `grouping:`: a digit group separator removed from integers and doubles (`","`).
    public var grouping: String?
    /// `on_invalid: null`: a value that cannot be converted is stored as NULL, the record kept.
    public var nullOnInvalid: Bool
    /// `default:`: the value of a row inserted without this key; never overwrites.
    public var defaultValue: String?
    /// `const:`: the value every row of the entity gets.
    public var constValue: String?
    /// `format:` of a `Date` property (default ISO 8601 in UTC): `.pattern("EEE MMM dd HH:mm:ss Z yyyy", timeZone: "UTC")`.
    public var dateFormat: DateFormat?
    /// A relationship's `inverse:`: the target's relationship (its property's name in snake
    /// case) that reads the same links from the other side; one join table serves both.
    public var inverse: String?
    /// A to-many's `owned: true`: its targets (without an identity) are rows of this one.
    public var owned: Bool
    /// A relationship's `missing:`: what a bare identity no row has does (default: a stub).
    public var missing: MissingTargetPolicy?
    /// A relationship's `delete: cascade`: the rows `write: replace` deletes take their targets.
    public var deleteCascade: Bool
    /// A to-one's `fields:`: the target's attributes (by name) read from the record's own keys
    /// (key paths), instead of one nested object — Reddit's `subreddit_id` and `subreddit`.
    public var fields: [String: String]
    /// A relationship's `operations:` without `insert`: a target no row has is left out, with its link.
    public var insertsTargets: Bool
    /// `operations:` without `update`: a stored target keeps its values (only the link is written).
    public var updatesTargets: Bool
    /// A to-many's `operations:` without `delete`: a set only adds links, never drops stored ones.
    public var deletesLinks: Bool

    /// A rule of these parts (each as the pipeline file's key of the same name).
    public init(
        coerce: Bool = false, pattern: String? = nil, template: String? = nil, values: [String: String?] = [:], grouping: String? = nil,
        nullOnInvalid: Bool = false, defaultValue: String? = nil, constValue: String? = nil, dateFormat: DateFormat? = nil,
        inverse: String? = nil, owned: Bool = false, missing: MissingTargetPolicy? = nil, deleteCascade: Bool = false,
        fields: [String: String] = [:], insertsTargets: Bool = true, updatesTargets: Bool = true, deletesLinks: Bool = true
    ) {
        self.fields = fields
        self.insertsTargets = insertsTargets
        self.updatesTargets = updatesTargets
        self.deletesLinks = deletesLinks
        self.inverse = inverse
        self.owned = owned
        self.missing = missing
        self.deleteCascade = deleteCascade
        self.coerce = coerce
        self.pattern = pattern
        self.template = template
        self.values = values
        self.grouping = grouping
        self.nullOnInvalid = nullOnInvalid
        self.defaultValue = defaultValue
        self.constValue = constValue
        self.dateFormat = dateFormat
    }

    /// `coerce: true` alone.
    public static let coerce = IngotRule(coerce: true)
}

extension IngotEntity {
    /// No value rules.
    public static func rule(for key: IdentityKeys) -> IngotRule? { nil }

    /// No parent entity.
    public static var parent: (any IngotEntity.Type)? { nil }

    /// No hook: records map as the API sent them.
    public static var prepare: (@Sendable (inout IngotRecord) throws -> Void)? { nil }

    /// The rules of the coding keys `keys` (string values), for the schema probe.
    static func rules(forKeys keys: [String]) -> [String: IngotRule] {
        var rules: [String: IngotRule] = [:]
        for key in keys {
            if let codingKey = IdentityKeys(stringValue: key), let rule = rule(for: codingKey) { rules[key] = rule }
        }
        return rules
    }

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

/// A reference to one entity that is not the entity itself (``Ref``): a to-one relationship.
protocol ToOneReference {
    static var targetType: any IngotEntity.Type { get }
    /// `\Ref<Target>.value`: the target itself, as a predicate names it.
    static var valueKeyPath: AnyKeyPath { get }
    /// `\Ref<Target>.id`: the target's identity, as a predicate names it.
    static var idKeyPath: AnyKeyPath { get }
}

/// An array or a set of references (`[Ref<Dog>]`, `Set<Ref<Dog>>`, ``Many``): a to-many
/// relationship, ordered as an array is.
protocol ToManyReferences {
    static var targetType: any IngotEntity.Type { get }
    static var isOrdered: Bool { get }
}

extension Array: ToManyReferences where Element: ToOneReference {
    static var targetType: any IngotEntity.Type { Element.targetType }
    static var isOrdered: Bool { true }
}

extension Set: ToManyReferences where Element: ToOneReference {
    static var targetType: any IngotEntity.Type { Element.targetType }
    static var isOrdered: Bool { false }
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
        // Owned and child entities take their keys from their owners and parents, as a pipeline
        // file's do.
        var entities = probe.order.compactMap { probe.entities[$0] }
        EntityModel.nameInversesByRelationship(&entities, probe.swiftNames)
        EntityModel.pairInverses(&entities)
        self = EntityModel(entities: entities).completed()
        swiftNames = probe.swiftNames
    }

    /// An inverse a rule names by its Swift property (`IngotRule(inverse: "filmList")`) names the
    /// relationship that property is (`film_list`).
    static func nameInversesByRelationship(_ entities: inout [Entity], _ names: SwiftNames) {
        for e in entities.indices {
            for k in entities[e].relationships.indices {
                let relationship = entities[e].relationships[k]
                guard let inverse = relationship.inverse, let properties = names.properties[relationship.target],
                    let match = properties.first(where: { $0.value == inverse && $0.key != inverse })
                else { continue }
                entities[e].relationships[k].inverse = match.key
            }
        }
    }

    /// An inverse declared once, on either side (`IngotRule(inverse: "films")` on
    /// `Film.characters` alone): the other side, a relationship of the target back to this entity
    /// that names no inverse of its own, names this one back — as a pipeline file must spell out
    /// on both sides.
    static func pairInverses(_ entities: inout [Entity]) {
        for (e, entity) in entities.enumerated() {
            for relationship in entity.relationships {
                guard let inverse = relationship.inverse, let t = entities.firstIndex(where: { $0.name == relationship.target }),
                    let k = entities[t].relationships.firstIndex(where: { $0.name == inverse }),
                    entities[t].relationships[k].inverse == nil, entities[t].relationships[k].target == entities[e].name
                else { continue }
                entities[t].relationships[k].inverse = relationship.name
            }
        }
    }
}

/// The ``IngotEntity/IdentityKeys`` of a type that declares no ``IngotEntity/identity``: it only
/// makes the compiler say what to add (`static let identity: [CodingKeys] = [.id]`), where the
/// protocol's requirement alone named an associated type instead ("requires nested type
/// 'IdentityKeys'").
public enum IdentityNotDeclared: CodingKey {}

extension IngotEntity where IdentityKeys == IdentityNotDeclared {
    /// Unavailable: an entity declares the coding keys that identify an object.
    @available(*, unavailable, message: "declare the keys that identify an object: static let identity: [CodingKeys] = [.id]")
    public static var identity: [IdentityNotDeclared] { [] }
}
