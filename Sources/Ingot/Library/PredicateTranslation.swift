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
        let (text, property, name) = try self.property(keyPath)
        guard let r = entity.relationships.firstIndex(where: { $0.name == name }) else {
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
        let (text, property, name) = try self.property(keyPath)
        for (level, (entity, layout)) in ([(entity, layout)] + parents).enumerated() {
            if entity.attributes.contains(where: { $0.name == name }), let column = layout.columns.first(where: { $0.name == name }) {
                return (level, column)
            }
        }
        throw IngotQueryError(
            message: "\(text): \(typeName).\(property) is not a stored attribute (relationships cannot be filtered or sorted on yet)")
    }

    /// The expression of `keyPath`'s column.
    func expression(_ keyPath: AnyKeyPath) throws -> RowExpression {
        let (level, column) = try located(keyPath)
        let reference: RowExpression = level == 0 ? .column(column.name) : .inherited(level: level, column: column.name)
        if case .date = column.type { return .time(reference) }
        if column.type == .decimal { return .decimal(reference) }
        return reference
    }
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
            throw IngotQueryError(
                message:
                    "\(type(of: expression)) has no SQL translation; filters take ==, !=, <, <=, >, >=, &&, ||, !, ?? and [values].contains(property) on stored attributes"
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
        case let v as UUID: return .value(.text(v.uuidString))
        case let v as Decimal:
            guard let text = DecimalText.canonical(v.description) else {
                throw IngotQueryError(message: "the decimal \(v) cannot be compared in SQL")
            }
            return .decimal(.value(.text(text)))
        case let v as any RawRepresentable: return try constant(v.rawValue)
        default:
            throw IngotQueryError(
                message:
                    "a constant of type \(type(of: value)) cannot be compared in SQL (Bool, integers, Double, String, Date, URL, UUID, Decimal, an enum of raw values)"
            )
        }
    }
}

extension PredicateExpressions.KeyPath: RowExpressible {
    func rowExpression(_ columns: QueryColumns) throws -> RowExpression { try columns.expression(keyPath) }
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
