import Foundation

/// A `Predicate` or `SortDescriptor` that cannot become SQL: said before any row is read, never a
/// silent scan of the whole table filtered in memory.
public struct IngotQueryError: Error, Sendable, CustomStringConvertible {
    /// What could not be translated, and what can be.
    public var message: String
    /// The message.
    public var description: String { message }
}

/// The columns of one entity a predicate's key paths may name: its attributes, by the Swift
/// property's name (`firstName` → column `first_name`).
struct QueryColumns {
    let typeName: String
    let entity: Entity
    let layout: EntityLayout
    /// A child entity's parents, nearest first (``IngotEntity/parent``): the properties it
    /// inherits are their columns.
    var parents: [(entity: Entity, layout: EntityLayout)] = []
    /// The model and every entity's layout: where a relationship in a predicate leads.
    var world: (model: EntityModel, layouts: [EntityLayout])?
    /// The alias of the row this scope reads: a related row in a subquery (`r1`, `r2`…); `nil`
    /// for the fetched table itself.
    var alias: String?
    /// How many relationships deep this scope is (its subquery's aliases are numbered by it).
    var depth = 0
    /// The scopes of the variables of the closures the translation is inside (`$0` of
    /// `labels.contains { $0.name == "bug" }`), by variable.
    var bound: [PredicateExpressions.VariableID: QueryColumns] = [:]
    /// When this scope stands for a to-many relationship's targets as a whole (the variable of
    /// `labels?.contains { … }` before `contains`): the way to them.
    var targets: Hop?

    /// The way from a row to the rows a relationship relates it to (``follow(_:)``). A class:
    /// a scope holds the hop its targets came by, and the hop the scope.
    final class Hop {
        /// The target's scope: its rows, aliased.
        let target: QueryColumns
        /// A to-one (one row or none) rather than a to-many.
        let toOne: Bool
        /// The subquery's `FROM` and the condition that correlates it with the row.
        let from: String
        let condition: RowExpression

        init(target: QueryColumns, toOne: Bool, from: String, condition: RowExpression) {
            self.target = target
            self.toOne = toOne
            self.from = from
            self.condition = condition
        }
    }

    /// The property `\Person.firstName` names, snake-cased as the model names it (`first_name`).
    private func property(_ keyPath: AnyKeyPath) throws -> (text: String, property: Substring, name: String) {
        // `\Person.firstName`: the type, then the property (one level: entities are flat).
        let text = "\(keyPath)"
        let parts = text.split(separator: ".")
        guard parts.count == 2, let property = parts.last else {
            throw IngotQueryError(message: "\(text): only a property of \(typeName) itself can be named here")
        }
        return (text, property, snakeCase(String(property)))
    }

    /// The relationship `\Person.dogs` stands for (its index in the entity's relationships).
    func relationship(_ keyPath: AnyKeyPath) throws -> Int {
        let (text, property, _) = try self.property(keyPath)
        return try relationship(named: property, in: text)
    }

    /// The relationship Swift property `property` stands for; `text`: the key path it is part of.
    func relationship(named property: Substring, in text: String) throws -> Int {
        guard let r = entity.relationships.firstIndex(where: { $0.name == snakeCase(String(property)) }) else {
            throw IngotQueryError(message: "\(text): \(typeName).\(property) is not a relationship")
        }
        return r
    }

    /// The column `\Person.firstName` stands for.
    func column(_ keyPath: AnyKeyPath) throws -> EntityLayout.Column {
        try located(keyPath).column
    }

    /// The column `\Starship.name` stands for, and where: level 0 is the entity's own table,
    /// level n its n-th parent's (an inherited property).
    func located(_ keyPath: AnyKeyPath) throws -> (level: Int, column: EntityLayout.Column) {
        let (text, property, _) = try self.property(keyPath)
        return try located(property, in: text)
    }

    /// The column Swift property `property` stands for, and where; `text`: the key path it is part of.
    func located(_ property: Substring, in text: String) throws -> (level: Int, column: EntityLayout.Column) {
        let name = snakeCase(String(property))
        for (level, (entity, layout)) in ([(entity, layout)] + parents).enumerated() {
            if entity.attributes.contains(where: { $0.name == name }), let column = layout.columns.first(where: { $0.name == name }) {
                return (level, column)
            }
        }
        throw IngotQueryError(
            message: "\(text): \(typeName).\(property) is not a stored attribute (a to-many cannot be sorted on: it has no single value)")
    }

    /// The expression of `keyPath`'s column.
    func expression(_ keyPath: AnyKeyPath) throws -> RowExpression {
        let (level, column) = try located(keyPath)
        let reference: RowExpression
        if let alias {
            guard level == 0 else {
                throw IngotQueryError(message: "\(keyPath): an inherited property of a related \(typeName) cannot be filtered on yet")
            }
            reference = .aliased(alias, column.name)
        } else {
            reference = level == 0 ? .column(column.name) : .inherited(level: level, column: column.name)
        }
        if case .date = column.type { return .time(reference) }
        if column.type == .decimal { return .decimal(reference) }
        return reference
    }
}

extension QueryColumns {
    /// The scope a key path expression reads: its root variable's (a closure's `$0`), else this.
    func scope(of path: any PredicateKeyPath) -> QueryColumns {
        path.rootVariable.flatMap { bound[$0] } ?? self
    }

    /// The way from this scope's row along relationship `keyPath` (`\Issue.user`,
    /// `\Issue.labels`): a to-one's target by the foreign key columns, a to-many's through its
    /// join table, an owned child's or a to-one's inverse's by the key columns their rows hold.
    func follow(_ keyPath: AnyKeyPath) throws -> Hop {
        try follow(relationship: try relationship(keyPath), in: "\(keyPath)")
    }

    /// The way from this scope's row along relationship `r`; `keyPath`: the key path it is part of.
    func follow(relationship r: Int, in keyPath: String) throws -> Hop {
        guard let world else { throw IngotQueryError(message: "\(keyPath): relationships cannot be filtered on here") }
        let depth = self.depth + 1
        let alias = "r\(depth)"
        func q(_ name: String) -> String { RowExpression.quote(name) }
        func own(_ name: String) -> RowExpression { self.alias.map { .aliased($0, name) } ?? .column(name) }
        let identity = layout.identitySlots.map { layout.columns[$0].name }
        let target: Int
        let toOne: Bool
        var from: String
        var condition: [RowExpression]
        if let one = layout.toOne.first(where: { $0.relationship == r }) {
            target = one.target
            toOne = true
            let targetLayout = world.layouts[target]
            from = "\(q(targetLayout.table)) AS \(q(alias))"
            condition = zip(one.slots, targetLayout.identitySlots).map {
                .matches(.aliased(alias, targetLayout.columns[$1].name), own(layout.columns[$0].name))
            }
        } else if let many = layout.toMany.first(where: { $0.relationship == r }), many.sourceColumns.count == identity.count {
            target = many.target
            toOne = false
            let targetLayout = world.layouts[target]
            from = "\(q(targetLayout.table)) AS \(q(alias))"
            var key = alias
            if many.hasJoinTable {
                key = "j\(depth)"
                let on = zip(targetLayout.identitySlots, many.targetColumns).map {
                    "\(q(alias)).\(q(targetLayout.columns[$0].name)) = \(q(key)).\(q($1))"
                }
                from = "\(q(many.joinTable)) AS \(q(key)) JOIN \(from) ON \(on.joined(separator: " AND "))"
            }
            condition = zip(many.sourceColumns, identity).map { .matches(.aliased(key, $0), own($1)) }
        } else {
            throw IngotQueryError(message: "\(keyPath): \(typeName) has no identity its related rows could be found by")
        }
        guard let first = condition.first else {
            throw IngotQueryError(message: "\(keyPath): the related \(world.model.entities[target].name) has no identity to match")
        }
        var scope = QueryColumns(
            typeName: world.model.entities[target].name, entity: world.model.entities[target], layout: world.layouts[target])
        scope.world = world
        scope.alias = alias
        scope.depth = depth
        scope.bound = bound
        return Hop(target: scope, toOne: toOne, from: from, condition: condition.dropFirst().reduce(first) { .and($0, $1) })
    }
}

extension QueryColumns {
    /// The properties a key path's text names in turn (`\Product.vendor?.name?` → `vendor`,
    /// `name`), a computed one as Swift prints it (`<computed 0x… (Optional<Vendor>)>`, whose
    /// type may hold dots).
    static func components(of text: String) -> [String] {
        var names: [String] = []
        var current = ""
        var angle = 0
        for ch in text.dropFirst() {  // the backslash
            if ch == "<" { angle += 1 }
            if ch == ">" { angle -= 1 }
            if ch == ".", angle == 0 {
                names.append(current)
                current = ""
            } else {
                current.append(ch)
            }
        }
        names.append(current)
        return names.dropFirst().map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "?!")) }
    }

    /// What a `SortDescriptor`'s key path sorts by: a property of the entity itself (`\.name`,
    /// an inherited one at its parent's level), or a property of the row a chain of to-ones
    /// leads to (`\Product.vendor?.name`, `\Product.vendor?.country?.code`; through a `Ref`,
    /// `\Post.author?.value?.login`) as a subquery per hop — NULL where a hop finds no row, so
    /// it sorts as a `nil` property does. A to-many has no single value to sort by: refused.
    func sortKey(_ keyPath: AnyKeyPath) throws -> (level: Int, column: EntityLayout.Column, through: RowExpression?) {
        let text = "\(keyPath)"
        let names = Self.components(of: text)
        guard names.count > 1 else {
            let (level, column) = try located(keyPath)
            return (level, column, nil)
        }
        var scope = self
        var hops: [Hop] = []
        var rest = names[...]
        while rest.count > 1, let name = rest.popFirst() {
            // A reference's target (`author?.value`, a computed property Swift prints as
            // `<computed 0x… (Optional<Target>)>`): the row the hop reached. Only a property of
            // that row may follow it.
            if name.hasPrefix("<computed"), !hops.isEmpty, !rest.isEmpty { continue }
            let hop = try scope.follow(relationship: try scope.relationship(named: Substring(name), in: text), in: text)
            guard hop.toOne else {
                throw IngotQueryError(message: "\(text): \(scope.typeName).\(name) is a to-many: it has no single value to sort by")
            }
            hops.append(hop)
            scope = hop.target
        }
        guard let last = rest.first, let alias = scope.alias else {
            throw IngotQueryError(message: "\(text): only a property, or a property through to-ones, can be sorted on")
        }
        let (level, column) = try scope.located(Substring(last), in: text)
        guard level == 0 else {
            throw IngotQueryError(message: "\(text): an inherited property of a related \(scope.typeName) cannot be sorted on yet")
        }
        var value: RowExpression = .aliased(alias, column.name)
        if case .date = column.type { value = .time(value) }
        if column.type == .decimal { value = .decimal(value) }
        for hop in hops.reversed() { value = .related(.init(from: hop.from, condition: hop.condition, value: value)) }
        return (0, column, value)
    }
}

/// A predicate's variable (the `$0` of a closure inside it).
protocol PredicateVariable {
    var variableID: PredicateExpressions.VariableID { get }
}

extension PredicateExpressions.Variable: PredicateVariable {
    var variableID: PredicateExpressions.VariableID { key }
}

/// A key path expression: the variable it starts from, and the key path.
protocol PredicateKeyPath {
    var rootVariable: PredicateExpressions.VariableID? { get }
    var anyKeyPath: AnyKeyPath { get }
}

extension PredicateExpressions.KeyPath: PredicateKeyPath {
    var rootVariable: PredicateExpressions.VariableID? { (root as? any PredicateVariable)?.variableID }
    var anyKeyPath: AnyKeyPath { keyPath }
}

/// What a predicate's expression nodes become (``RowExpression``). The `PredicateExpressions`
/// types conform below, whatever their generic arguments: children are reached through casts.
protocol RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression
}

extension RowExpression {
    /// `expression` (a predicate's root) as a row expression.
    static func of(_ expression: Any, _ columns: QueryColumns) throws -> RowExpression {
        guard let node = expression as? any RowExpressible else {
            let what = (expression as? any SwiftTerms)?.swiftTerms ?? "\(type(of: expression))"
            throw IngotQueryError(
                message:
                    "\(what) has no SQL translation; filters take ==, !=, <, <=, >, >=, &&, ||, !, ?? and [values].contains(property) on stored attributes, a related row's through ?. and a to-many's through contains { … } and allSatisfy { … }"
            )
        }
        return try node.rowExpression(columns)
    }

    /// A predicate's constant as a stored value.
    static func constant(_ value: Any) throws -> RowExpression {
        let mirror = Mirror(reflecting: value)
        if mirror.displayStyle == .optional {
            guard let wrapped = mirror.children.first?.value else { return .value(.null) }
            return try constant(wrapped)
        }
        switch value {
        case let v as Bool: return .value(.bool(v))
        case let v as Int: return .value(.integer(Int64(v)))
        case let v as Int64: return .value(.integer(v))
        case let v as Int32: return .value(.integer(Int64(v)))
        case let v as any BinaryInteger:
            guard let i = Int64(exactly: v) else {
                throw IngotQueryError(message: "the integer \(v) is larger than Ingot stores (64 bits)")
            }
            return .value(.integer(i))
        case let v as Double: return .value(.real(v))
        case let v as Float: return .value(.real(Double(v)))
        case let v as String: return .value(.text(v))
        case let v as Date:
            // As Ingot stores an instant (UTC, to the millisecond), compared as a time.
            guard let text = DateConverter().convert(number: v.timeIntervalSince1970, format: .unixSeconds) else {
                throw IngotQueryError(message: "the date \(v) is outside the years Ingot stores (1 to 9999)")
            }
            return .time(.value(.text(text)))
        // As the model stores them (SchemaProbe): text, an exact decimal's canonical text, a raw value.
        case let v as URL: return .value(.text(v.absoluteString))
        // Lower case, as a UUID attribute stores it (``Attribute/foldsCase``).
        case let v as UUID: return .value(.text(v.uuidString.lowercased()))
        case let v as Decimal:
            guard let text = DecimalText.canonical(v.description) else {
                throw IngotQueryError(message: "the decimal \(v) cannot be compared in SQL")
            }
            return .decimal(.value(.text(text)))
        case let v as any RawRepresentable: return try constant(v.rawValue)
        case let v as IdentityKey:
            guard case .single(let value) = v else {
                throw IngotQueryError(message: "the composite identity \(v) cannot be compared in SQL: compare its properties one by one")
            }
            return .value(value)
        default:
            throw IngotQueryError(
                message:
                    "a constant of type \(type(of: value)) cannot be compared in SQL (Bool, integers, Double, String, Date, URL, UUID, Decimal, an enum of raw values)"
            )
        }
    }
}

extension PredicateExpressions.KeyPath: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        let scope = columns.scope(of: self)
        // A reference's identity (`$0.manager?.id == 2`): its target's identity column.
        if let reference = Swift.type(of: keyPath).rootType as? any ToOneReference.Type, reference.idKeyPath == keyPath {
            guard scope.layout.identitySlots.count == 1, let alias = scope.alias else {
                throw IngotQueryError(message: "\(keyPath): a reference's identity compares only when its target has one identity property")
            }
            return .aliased(alias, scope.layout.columns[scope.layout.identitySlots[0]].name)
        }
        return try scope.expression(keyPath)
    }
}

/// A key path chain in Swift's terms (`\Issue.user?.login`), for messages.
protocol SwiftTerms {
    var swiftTerms: String? { get }
}

extension PredicateExpressions.KeyPath: SwiftTerms {
    var swiftTerms: String? { "\(keyPath)" }
}

extension PredicateExpressions.OptionalFlatMap: SwiftTerms {
    var swiftTerms: String? {
        guard let head = (wrapped as? any SwiftTerms)?.swiftTerms, let tail = (transform as? any SwiftTerms)?.swiftTerms,
            let dot = tail.firstIndex(of: ".")
        else { return nil }
        // A computed property's key path prints its address, not its name.
        let property = tail[tail.index(after: dot)...].hasPrefix("<computed") ? ".(a computed property)" : tail[dot...]
        return head + "?" + property
    }
}

/// An expression that stands for related rows: a relationship's key path (`$0.user`), or `?.`
/// through to-ones to one (`$0.milestone?.creator`). ``hops(_:)`` is `nil` for any other.
protocol RelatedRows {
    func hops(_ columns: QueryColumns) throws -> [QueryColumns.Hop]?
}

extension PredicateExpressions.KeyPath: RelatedRows {
    func hops(_ columns: QueryColumns) throws -> [QueryColumns.Hop]? {
        // A reference's target (`$0.manager?.value?.name`): the row the reference reached.
        if let reference = Swift.type(of: keyPath).rootType as? any ToOneReference.Type, reference.valueKeyPath == keyPath { return [] }
        let scope = columns.scope(of: self)
        guard (try? scope.relationship(keyPath)) != nil else { return nil }
        return [try scope.follow(keyPath)]
    }
}

extension PredicateExpressions.OptionalFlatMap: RelatedRows {
    func hops(_ columns: QueryColumns) throws -> [QueryColumns.Hop]? {
        guard let first = try (wrapped as? any RelatedRows)?.hops(columns), let last = first.last, last.toOne else { return nil }
        var inner = columns
        inner.bound[variable.key] = last.target
        guard let rest = try (transform as? any RelatedRows)?.hops(inner) else { return nil }
        return first + rest
    }
}

extension PredicateExpressions.OptionalFlatMap: RowExpressible {
    /// `$0.user?.login`: the value the related row gives (NULL without one, as `?.` gives
    /// `nil`), as a subquery; each to-one of a chain (`$0.milestone?.creator?.login`) one
    /// subquery deeper. `$0.labels?.contains { … }`: the variable stands for the targets, and
    /// `contains` tests them.
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        let chain = try (wrapped as? any RelatedRows)?.hops(columns)
        if chain?.isEmpty == true, let path = wrapped as? any PredicateKeyPath {
            // `$0.value?.name` where `$0` is a reference to-many's element (`pets.contains { … }`):
            // its target is the row the variable already stands for.
            var inner = columns
            inner.bound[variable.key] = columns.scope(of: path)
            return try RowExpression.of(transform, inner)
        }
        guard let chain, let last = chain.last else {
            throw IngotQueryError(
                message: "\(swiftTerms ?? "?."): ?. translates only after a relationship, to its target's properties (\\Issue.user?.login)")
        }
        var inner = columns
        var wrapping = chain
        if last.toOne {
            inner.bound[variable.key] = last.target
        } else {
            var set = last.target
            set.targets = last
            inner.bound[variable.key] = set
            wrapping.removeLast()
        }
        var value = try RowExpression.of(transform, inner)
        for hop in wrapping.reversed() { value = .related(.init(from: hop.from, condition: hop.condition, value: value)) }
        return value
    }
}

extension QueryColumns {
    /// The way to the targets a `contains { … }` or `allSatisfy { … }` (`what`) runs over: a
    /// to-many relationship (`$0.labels`), or the variable of `$0.labels?.…` that stands for them.
    func toMany(_ sequence: Any, _ what: String) throws -> Hop {
        let hop: Hop
        if let set = (sequence as? any PredicateVariable).flatMap({ bound[$0.variableID]?.targets }) {
            hop = set
        } else if let path = sequence as? any PredicateKeyPath {
            hop = try scope(of: path).follow(path.anyKeyPath)
        } else {
            throw IngotQueryError(message: "\(what) translates only over a to-many relationship (\\Issue.labels)")
        }
        guard !hop.toOne else { throw IngotQueryError(message: "\(what) needs a to-many relationship, not a to-one") }
        return hop
    }
}

extension PredicateExpressions.SequenceContainsWhere: RowExpressible {
    /// `$0.labels.contains { $0.name == "bug" }`: whether any related row passes the test.
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        let hop = try columns.toMany(sequence, "contains(where:)")
        var inner = columns
        inner.bound[variable.key] = hop.target
        return .related(.init(from: hop.from, condition: .and(hop.condition, try RowExpression.of(test, inner)), value: nil))
    }
}

extension PredicateExpressions.SequenceAllSatisfy: RowExpressible {
    /// `$0.labels.allSatisfy { … }`: no related row fails the test.
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        let hop = try columns.toMany(sequence, "allSatisfy")
        var inner = columns
        inner.bound[variable.key] = hop.target
        return .not(.related(.init(from: hop.from, condition: .and(hop.condition, .not(try RowExpression.of(test, inner))), value: nil)))
    }
}

extension PredicateExpressions.Value: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression { try RowExpression.constant(value) }
}

extension PredicateExpressions.NilLiteral: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression { .value(.null) }
}

extension PredicateExpressions.Equal: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        .compare(try RowExpression.of(lhs, columns), .equal, try RowExpression.of(rhs, columns))
    }
}

extension PredicateExpressions.NotEqual: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        .compare(try RowExpression.of(lhs, columns), .notEqual, try RowExpression.of(rhs, columns))
    }
}

extension PredicateExpressions.Comparison: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        let comparison: RowExpression.Comparison =
            switch op {
            case .lessThan: .less
            case .lessThanOrEqual: .lessOrEqual
            case .greaterThan: .greater
            case .greaterThanOrEqual: .greaterOrEqual
            @unknown default: throw IngotQueryError(message: "the comparison \(op) has no SQL translation")
            }
        return .compare(try RowExpression.of(lhs, columns), comparison, try RowExpression.of(rhs, columns))
    }
}

extension PredicateExpressions.Conjunction: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        .and(try RowExpression.of(lhs, columns), try RowExpression.of(rhs, columns))
    }
}

extension PredicateExpressions.Disjunction: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        .or(try RowExpression.of(lhs, columns), try RowExpression.of(rhs, columns))
    }
}

extension PredicateExpressions.Negation: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression { .not(try RowExpression.of(wrapped, columns)) }
}

extension PredicateExpressions.NilCoalesce: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        .coalesce(try RowExpression.of(lhs, columns), try RowExpression.of(rhs, columns))
    }
}

extension PredicateExpressions.SequenceContains: RowExpressible {
    /// `[constants].contains(property)`: the sequence must be a constant array.
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression {
        let mirror = Mirror(reflecting: sequence)
        guard String(describing: type(of: sequence)).hasPrefix("Value<"),
            let array = mirror.children.first(where: { $0.label == "value" })?.value,
            Mirror(reflecting: array).displayStyle == .collection
        else {
            throw IngotQueryError(message: "contains(_:) translates only as [constants].contains(property)")
        }
        let values = try Mirror(reflecting: array).children.map { child -> ScalarValue in
            guard case .value(let value) = try RowExpression.constant(child.value) else {
                throw IngotQueryError(
                    message: "contains(_:) takes constants that are Bool, integers, Double or String (compare dates with ==)")
            }
            return value
        }
        return .among(try RowExpression.of(element, columns), values)
    }
}
