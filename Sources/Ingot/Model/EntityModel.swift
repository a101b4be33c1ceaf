/// The entities a pipeline writes: their attributes, identity and relationships.
///
/// A model is a plain value, built either from a pipeline file (``PipelineConfig``) or from Swift
/// types (``IngotEntity``); both produce the same `EntityModel`, and everything downstream (the
/// record mapper, the store's schema) reads only this.
public struct EntityModel: Sendable, Equatable {
    /// Entities in declaration order.
    public var entities: [Entity]
    /// The Swift names of a model declared in Swift (``init(roots:)``), for messages in the terms
    /// it was written in; `nil` for a pipeline file's.
    var swiftNames: SwiftNames?

    /// Two models are equal when their entities are, however they were declared.
    public static func == (a: EntityModel, b: EntityModel) -> Bool { a.entities == b.entities }

    /// A model of `entities` (validate it with ``validate()``).
    public init(entities: [Entity]) {
        self.entities = entities
    }

    /// The entity named `name`.
    public subscript(name: String) -> Entity? {
        entities.first { $0.name == name }
    }

    /// The position of the entity named `name` in ``entities``.
    public func index(of name: String) -> Int? {
        entities.firstIndex { $0.name == name }
    }

    /// The column of `entity` that a record's key path `keyPath` fills: an attribute read at it
    /// (or named so), or the key column of a to-one read at it whose target has one identity.
    package func scopeColumn(_ keyPath: String, of entity: String) -> String? {
        guard let e = self[entity] else { return nil }
        if let attribute = e.attributes.first(where: { $0.key == keyPath }) ?? e.attribute(named: keyPath) { return attribute.name }
        guard
            let relationship = e.relationships.first(where: {
                !$0.isToMany && $0.fields.isEmpty && ($0.key == keyPath || $0.name == keyPath)
            }),
            let target = self[relationship.target], target.identity.count == 1
        else { return nil }
        return relationship.foreignKeyColumns(target: target).first
    }

    /// Whether some entity names `entity` as its ``Entity/parent``: its table then has a `kind`
    /// column naming each row's concrete entity.
    public func hasChildren(_ entity: String) -> Bool {
        entities.contains { $0.parent == entity }
    }

    /// The model with what owned and child entities take from others completed:
    /// - an entity a relationship owns (``Relationship/owned``) takes its owner's identity (as
    ///   the owner's join columns name it) and `position` (`_position` when it declares a
    ///   `position` of its own) as its first attributes and identity —
    ///   an owned entity's owned entities in turn, from the owner's completed identity;
    /// - a child entity (``Entity/parent``) takes its parent's identity attributes (its own
    ///   table's key, joined to the parent's row); what else the parent declares stays in the
    ///   parent's tables, and a child's record fills both.
    package func completed() -> EntityModel {
        var expanded = self
        var changed = true
        while changed {
            changed = false
            for entity in expanded.entities where !entity.identity.isEmpty {
                for relationship in entity.relationships where relationship.owned {
                    guard let k = expanded.index(of: relationship.target), expanded.entities[k].identity.isEmpty,
                        expanded.entities[k].owner == nil, expanded.entities[k].parent == nil
                    else { continue }
                    let columns = entity.joinColumns()
                    let keys = zip(columns, entity.identityAttributes).map { Attribute(name: $0, type: $1.type) }
                    // The position's column, named so that it meets none the entity declares
                    // (Shopify's product options have a `position` of their own).
                    var position = "position"
                    while expanded.entities[k].attribute(named: position) != nil { position = "_" + position }
                    expanded.entities[k].attributes = keys + [Attribute(name: position, type: .integer)] + expanded.entities[k].attributes
                    expanded.entities[k].identity = columns + [position]
                    expanded.entities[k].owner = entity.name
                    changed = true
                }
            }
        }
        let owned = expanded
        for (k, entity) in owned.entities.enumerated() {
            guard let name = entity.parent, name != entity.name, let parent = owned[name] else { continue }
            let inherited = parent.identityAttributes.filter { entity.attribute(named: $0.name) == nil }
            expanded.entities[k].attributes = inherited + entity.attributes
            expanded.entities[k].identity = parent.identity
        }
        return expanded
    }
}

/// One entity: a table of rows with an optional identity.
public struct Entity: Sendable, Equatable {
    /// Its name, as the pipeline file and messages give it.
    public var name: String
    /// The SQL table; defaults to the entity's name.
    public var table: String
    /// Attribute names that identify a row (one: simple identity; several: composite). Empty: the
    /// entity has no identity and every record inserts a row.
    public var identity: [String]
    /// Its columns read from records.
    public var attributes: [Attribute]
    /// Its links to other entities.
    public var relationships: [Relationship]
    /// The separator of key paths in this entity's `key`s.
    public var keyDelimiter: String
    /// `parent:` (Core Data's entity inheritance): the entity this one specializes. A child's
    /// record is one row in the parent's table (the parent's attributes and relationships, and
    /// `kind`: the child's name) and one in the child's (its identity and its own attributes).
    public var parent: String?
    /// Set for an entity some relationship owns (``Relationship/owned``): the owning entity.
    /// Its first attributes are then the owner's identity and `position`, its identity; the
    /// mapper fills them, no record key does.
    public var owner: String?
    /// Declared in Swift (``IngotEntity/prepare``): the hook each of its objects goes through
    /// before it is mapped. A pipeline file has none.
    var prepare: RecordRewrite?

    /// An entity `name` stored in `table` (default: its name), identified by `identity`.
    public init(
        name: String, table: String? = nil, identity: [String] = [], attributes: [Attribute],
        relationships: [Relationship] = [], keyDelimiter: String = "."
    ) {
        self.name = name
        self.table = table ?? name
        self.identity = identity
        self.attributes = attributes
        self.relationships = relationships
        self.keyDelimiter = keyDelimiter
    }

    /// The attribute named `name`.
    public func attribute(named name: String) -> Attribute? {
        attributes.first { $0.name == name }
    }

    /// The identity's attributes, in identity order.
    public var identityAttributes: [Attribute] {
        identity.compactMap { attribute(named: $0) }
    }
}

/// A column of an entity, read from the record at `key`.
public struct Attribute: Sendable, Equatable {
    /// Its name, as the pipeline file and messages give it.
    public var name: String
    /// What it stores.
    public var type: AttributeType
    /// The key path in the record (`origin.country.name`); defaults to the attribute's name.
    public var key: String
    /// Accept a value of another JSON type that converts without loss (`"1699"` for an integer).
    public var coerce: Bool
    /// `values:`: a value's text replaced before conversion (`"unknown"` → `nil`, that is NULL).
    public var values: [String: String?] = [:]
    /// `pattern:`: a regular expression with one capture group; the value's text becomes what
    /// it captures (no match: the value cannot be converted).
    public var pattern: String?
    /// `grouping:` (integers and doubles): a digit group separator removed before conversion
    /// (`","`: `"1,000"` → 1000).
    public var grouping: String?
    /// `template:` (with `pattern:`): the source's text rebuilt from the stored value, `{}` being
    /// the value (`"https://swapi.dev/api/people/{}/"`): what `ingot export` writes, so that the
    /// pattern reads the value back.
    public var template: String?
    /// `on_invalid: null`: a value that cannot be converted is stored as NULL and the record
    /// kept (counted per attribute); `false` (the default) rejects the record.
    public var nullOnInvalid = false

    /// `default:` (as text): the value of a row inserted without this key (stubs included); it
    /// never overwrites a stored value.
    public var defaultValue: String?
    /// `const:` (as text): the value every row of the entity gets, inserted or updated, stubs
    /// included (a discriminator, a source tag).
    public var constValue: String?
    /// A Swift type's non-optional property: a row without its value (a stub) is not a value of
    /// the type, so the library's `fetch` and `count` both leave such rows out. Pipeline files
    /// declare none.
    public var required = false
    /// A Swift `CaseIterable` enum's raw values, as text: a record giving any other value is
    /// rejected with its coding path (stored, it would be a row no value of the type can hold).
    public var cases: [String]?
    /// A Swift enum of raw values that is not `CaseIterable` (its cases cannot be listed): the
    /// enum's own `init(rawValue:)` says which values it holds; a record giving any other is
    /// rejected as for ``cases``.
    var rawValues: RawValueCheck?
    /// Text stored in lower case (a Swift `UUID`): one identity whatever the case an API sends it
    /// in; predicates and `fetch(id:)` compare the lower case too.
    public var foldsCase = false

    /// Whether a rule rewrites the value's text before it is converted.
    public var rewritesText: Bool { !values.isEmpty || pattern != nil || grouping != nil }

    /// An attribute `name` of `type`, read at `key` (default: its name).
    public init(name: String, type: AttributeType, key: String? = nil, coerce: Bool = false) {
        self.name = name
        self.type = type
        self.key = key ?? name
        self.coerce = coerce
    }
}

/// The type of an attribute. Each backend picks the column type that stores it (SQLite:
/// docs/pipelines.md, "Types").
public enum AttributeType: Sendable, Equatable {
    /// An exact 64-bit integer.
    case integer
    /// A double.
    case double
    /// An exact decimal number (`type: decimal`: Shopify's `"price": "199.00"`), from a JSON
    /// number or string, kept in its canonical text — no `+`, no leading zeros, no trailing
    /// fraction zeros, no exponent (`"199.00"` → `199`, `1.50e2` → `150`), at most 1,000 digits:
    /// TEXT in SQLite (equal values are equal text), `numeric` in PostgreSQL.
    case decimal
    /// Text.
    case string
    /// true or false.
    case bool
    /// A date-time (ISO-8601 in UTC), or a date for a date-only format.
    case date(DateFormat)
    /// Any JSON value, kept as its JSON text.
    case json
}

/// How a date attribute is written in the source.
public enum DateFormat: Sendable, Equatable {
    /// ISO-8601 date-time, fraction optional; without an offset, the time is in `timeZone`.
    case iso8601(timeZone: String)
    /// A fixed pattern of `yyyy`, `MM`, `dd`, `HH`, `mm`, `ss`, `SSS` and literal characters, in `timeZone`.
    case pattern(String, timeZone: String)
    /// Seconds since 1970 (a number, fractions allowed).
    case unixSeconds
    /// Milliseconds since 1970.
    case unixMilliseconds
}

/// A link from an entity to another (or to itself).
public struct Relationship: Sendable, Equatable {
    /// Its name, as the pipeline file and messages give it.
    public var name: String
    /// The target entity's name.
    public var target: String
    /// To-many (a join table) or to-one (a column on this table).
    public var isToMany: Bool
    /// To-many only: keep the JSON order in a `position` column.
    public var isOrdered: Bool
    /// The key path in the record; defaults to the relationship's name.
    public var key: String
    /// What a bare identity that names no stored row does.
    public var missing: MissingTargetPolicy
    /// `values:` for a bare identity's text (as an attribute's), before it is converted to the
    /// target's identity; `nil` in the map: no link.
    public var values: [String: String?] = [:]
    /// `pattern:` for a bare identity's text: what its one capture group matches is the identity.
    public var pattern: String?
    /// `template:` (with `pattern:`): a bare identity's source text rebuilt from the target's
    /// stored identity, `{}` being the value — what `ingot export` writes for the link.
    public var template: String?
    /// `fields:` (to-one only): the target's attributes read from the record's own keys
    /// (Reddit's `subreddit_id`, `subreddit`): attribute name → key path, instead of one nested
    /// object at ``key``. Empty: the relationship reads ``key``.
    public var fields: [String: String] = [:]
    /// `operations:` (Sync's filters), what the relationship may do to its targets: `insert` —
    /// create a target no row has (without it, such a target and its link are left out);
    /// `update` — write a stored target's values (without it, only the link is kept); `delete`
    /// (to-many) — drop the stored links a present set lacks (without it, sets only add links).
    /// All three by default.
    public var insertsTargets = true
    /// See ``insertsTargets``.
    public var updatesTargets = true
    /// See ``insertsTargets``.
    public var deletesLinks = true
    /// `delete: cascade`: when `write: replace` deletes a row of this entity, the rows this
    /// relationship links it to are deleted too (Core Data's rule), and what else pointed at them
    /// is nullified. `false` (`delete: nullify`, the default): only the links to the deleted row go.
    public var cascadesDeletes = false
    /// `owned: true` (to-many only): the targets are objects without an identity of their own,
    /// owned by this entity's row — keyed by it and their position, replaced as a set when the
    /// key is present, deleted with it. No join table: the target's table holds the owner's key.
    public var owned = false
    /// `partial: true`: a nested object through this relationship is a partial copy of its
    /// target (Jira nests an issue's parent as `{id, key, fields: {summary, status}}`): a key
    /// path whose root it gives but whose leaf it lacks leaves the column as stored, where
    /// otherwise the leaf's absence makes it NULL. Objects nested within it are partial too.
    public var partial = false
    /// `on_invalid: null`: a bare identity its rules cannot read (a `pattern` it does not match,
    /// text where the target's identity is a number) makes no link — a to-one's column NULL, a
    /// to-many's element left out — counted, where by default it rejects the record. Two
    /// relationships on one key, each with its `pattern`, read a reference to one of several
    /// kinds (Reddit's `parent_id`: `t1_…` a comment, `t3_…` a link).
    public var nullOnInvalid = false
    /// `inverse:`: the target's relationship that reads the same links from the other side
    /// (`person.films` ↔ `film.characters`): one join table serves both.
    public var inverse: String?

    /// A relationship `name` to `target`, read at `key` (default: its name).
    public init(
        name: String, target: String, isToMany: Bool = false, isOrdered: Bool = false, key: String? = nil,
        missing: MissingTargetPolicy = .stub
    ) {
        self.name = name
        self.target = target
        self.isToMany = isToMany
        self.isOrdered = isOrdered
        self.key = key ?? name
        self.missing = missing
    }
}

/// What a relationship given as a bare identity does when no row has that identity.
public enum MissingTargetPolicy: String, Sendable, Equatable, CaseIterable {
    /// Create a row that holds only the identity (filled in when its own record arrives).
    case stub
    /// Leave the link out; the record is saved.
    case ignore
    /// Reject the whole record.
    case reject
}

// MARK: - Column naming

extension Relationship {
    /// The columns of a to-one relationship on its source table: `<relationship>_id`, or
    /// `<relationship>_<key>` per key of a composite target identity. They hold the target's identity.
    public func foreignKeyColumns(target: Entity) -> [String] {
        target.identity.count == 1 ? ["\(name)_id"] : target.identity.map { "\(name)_\($0)" }
    }
}

extension Entity {
    /// The join-table columns naming this entity's side: `<table>_id`, or `<table>_<key>` per key
    /// of a composite identity.
    public func joinColumns(prefix: String? = nil) -> [String] {
        let p = prefix ?? table
        return identity.count == 1 ? ["\(p)_id"] : identity.map { "\(p)_\($0)" }
    }
}

/// The Swift names behind a model declared in Swift: each entity's type, each relationship's
/// property (a relationship's name is its property's, snake-cased).
struct SwiftNames: Sendable, Equatable {
    /// Entity name → the type's name (`Film`).
    var types: [String: String] = [:]
    /// Entity name → relationship name → the property's name (`filmList`).
    var properties: [String: [String: String]] = [:]

    /// `\Film.characters`: how Swift names relationship `relationship` of entity `entity`.
    func keyPath(_ entity: String, _ relationship: String) -> String {
        "\\\(types[entity] ?? entity).\(properties[entity]?[relationship] ?? relationship)"
    }
}

/// Which raw values a Swift enum holds, asked of the enum itself (``Attribute/rawValues``). Equal
/// when it is the same enum's: the model of a type equals itself.
struct RawValueCheck: Sendable, Equatable {
    /// The enum's type, as Swift names it in full (what makes two checks one).
    let owner: String
    /// The enum's name, as a rejection says it.
    let name: String
    /// Whether the enum has a case of this raw value (its text: an integer's digits).
    func accepts(_ text: String) -> Bool { check.accepts(text) }
    private let check: any RawValueChecking

    static func == (a: RawValueCheck, b: RawValueCheck) -> Bool { a.owner == b.owner }

    /// The check of enum `type`, when its raw values are text or an integer type.
    static func of<R: RawRepresentable>(_ type: R.Type) -> RawValueCheck? {
        guard R.RawValue.self == String.self || R.RawValue.self is any FixedWidthInteger.Type else { return nil }
        return RawValueCheck(owner: String(reflecting: type), name: "\(type)", check: EnumCases<R>())
    }
}

/// Whether a text names a case of an enum (``RawValueCheck``).
private protocol RawValueChecking: Sendable {
    func accepts(_ text: String) -> Bool
}

/// The cases of enum `R`: a value with nothing stored (so it is `Sendable` whatever `R` is) that
/// asks `R` for a case by its raw value — text, or an integer's digits.
private struct EnumCases<R: RawRepresentable>: RawValueChecking {
    func accepts(_ text: String) -> Bool {
        if R.RawValue.self == String.self { return (text as? R.RawValue).flatMap(R.init(rawValue:)) != nil }
        guard let integer = R.RawValue.self as? any FixedWidthInteger.Type, let value = Int64(text),
            let raw = Self.integer(value, as: integer) as? R.RawValue
        else { return false }
        return R(rawValue: raw) != nil
    }

    /// `value` as an integer of `type`, when it fits.
    private static func integer<I: FixedWidthInteger>(_ value: Int64, as type: I.Type) -> I? { I(exactly: value) }
}
