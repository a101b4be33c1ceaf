import Foundation

/// The rules every model must follow, whichever way it was declared. Checked before anything runs.
extension EntityModel {
    /// Where in a model a problem is, so a pipeline file can point at the line that declared it.
    package enum Location: Sendable, Hashable {
        case entity(String)
        case table(entity: String)
        case identity(entity: String)
        case attribute(entity: String, name: String)
        case relationship(entity: String, name: String)
        case keyDelimiter(entity: String)
        case parent(entity: String)
    }

    /// One broken rule.
    package struct Problem: Sendable, Equatable, CustomStringConvertible {
        package var location: Location
        package var message: String
        package var description: String { message }
    }

    /// Every broken rule, in declaration order; empty for a valid model.
    package func problems() -> [Problem] {
        var problems = ProblemList()
        schemaNameProblems(&problems)
        if entities.isEmpty { problems.add(.entity(""), "a model needs at least one entity") }
        for entity in entities {
            entityProblems(entity, &problems)
            var columns = attributeProblems(entity, &problems)
            for relationship in entity.relationships { relationshipProblems(relationship, of: entity, columns: &columns, &problems) }
        }
        return problems.items
    }

    /// Problems as they are found, in order.
    struct ProblemList {
        var items: [Problem] = []
        mutating func add(_ location: Location, _ message: String) { items.append(Problem(location: location, message: message)) }
    }

    /// Every name the schema creates (tables, join tables, identity indexes), lowercased, with
    /// what it belongs to: two of them must never meet, in any case.
    private func schemaNameProblems(_ problems: inout ProblemList) {
        func add(_ location: Location, _ message: String) { problems.add(location, message) }
        var tables: [String: String] = [:]
        for (owner, name, location) in schemaNames() {
            let key = name.lowercased()
            if let other = tables[key] {
                add(location, "\(owner) is named '\(name)', which \(other) already uses")
            } else {
                tables[key] = owner
            }
            if Self.reservedPrefix(of: name) != nil, case .relationship = location {
                add(location, "\(owner) is named '\(name)', a reserved name")
            }
            if let limit = Self.nameLimit(of: location), name.utf8.count > limit {
                add(
                    location,
                    "\(owner) is named '\(name)' (\(name.utf8.count) bytes): PostgreSQL cuts names at 63 bytes and Ingot's own names for it add up to \(63 - limit), so it may have at most \(limit)"
                )
            }
        }
    }

    /// An entity's names, parent, `kind` column and size.
    private func entityProblems(_ entity: Entity, _ problems: inout ProblemList) {
        func add(_ location: Location, _ message: String) { problems.add(location, message) }
        let e = entity.name
        if !Self.isSQLIdentifier(e) { add(.entity(e), "entity name '\(e)' is not a valid SQL identifier ([A-Za-z_][A-Za-z0-9_]*)") }
        if !Self.isSQLIdentifier(entity.table) {
            add(.table(entity: e), "table name '\(entity.table)' is not a valid SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
        } else if let reserved = Self.reservedPrefix(of: entity.table) {
            add(
                .table(entity: e),
                "table name '\(entity.table)' is reserved: names starting with \(reserved) (in any case) belong to \(reserved == "sqlite_" ? "SQLite" : "Ingot")"
            )
        } else if Self.reservedTables.contains(entity.table.lowercased()) {
            add(.table(entity: e), "table name '\(entity.table)' is reserved: Ingot keeps its SQLite migrations there")
        }
        if entity.keyDelimiter.isEmpty { add(.keyDelimiter(entity: e), "key_delimiter must not be empty") }
        if let name = entity.parent {
            if name == e {
                add(.parent(entity: e), "entity '\(e)' cannot be its own parent")
            } else if let parent = self[name] {
                if parent.parent != nil {
                    add(
                        .parent(entity: e),
                        "parent '\(name)' has a parent of its own ('\(parent.parent ?? "")'): one level of parents is supported")
                }
                if parent.identity.isEmpty { add(.parent(entity: e), "parent '\(name)' has no identity for its children to share") }
                let inherited = Set(parent.identity)
                for attribute in entity.attributes
                where !inherited.contains(attribute.name) && parent.attribute(named: attribute.name) != nil {
                    add(
                        .attribute(entity: e, name: attribute.name),
                        "attribute '\(attribute.name)' is declared by parent '\(name)' already: a child's record fills its parent's row too"
                    )
                }
            } else {
                add(.parent(entity: e), "parent '\(name)' is not a declared entity")
            }
        }
        if hasChildren(e),
            entity.attribute(named: "kind") != nil
                || entity.relationships.contains(where: {
                    !$0.isToMany && $0.foreignKeyColumns(target: self[$0.target] ?? entity).contains("kind")
                })
        {
            add(
                .attribute(entity: e, name: "kind"),
                "'kind' is the column naming each row's concrete entity in a parent's table: choose another name")
        }
        if entity.attributes.isEmpty { add(.entity(e), "entity '\(e)' has no attributes") }
    }

    /// An entity's attributes and identity; the column names it takes (lowercased), which its
    /// to-ones' key columns must not meet.
    private func attributeProblems(_ entity: Entity, _ problems: inout ProblemList) -> Set<String> {
        func add(_ location: Location, _ message: String) { problems.add(location, message) }
        let e = entity.name
        var columns: Set<String> = []
        for attribute in entity.attributes {
            if !Self.isSQLIdentifier(attribute.name) {
                add(
                    .attribute(entity: e, name: attribute.name),
                    "attribute name '\(attribute.name)' is not a valid SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
            }
            if !columns.insert(attribute.name.lowercased()).inserted {
                add(.attribute(entity: e, name: attribute.name), "attribute '\(attribute.name)' is declared twice")
            }
            if let why = Self.reservedColumn(attribute.name) {
                add(.attribute(entity: e, name: attribute.name), "attribute name '\(attribute.name)' is reserved: \(why)")
            } else if attribute.name.utf8.count > 63 {
                add(
                    .attribute(entity: e, name: attribute.name),
                    "attribute name '\(attribute.name)' is \(attribute.name.utf8.count) bytes: PostgreSQL cuts names at 63")
            }
            if let why = Self.keyPathProblem(attribute.key, delimiter: entity.keyDelimiter) {
                add(.attribute(entity: e, name: attribute.name), why)
            }
        }
        let keyColumns = entity.relationships.filter { !$0.isToMany }.reduce(0) { count, relationship in
            count + max(1, entities.first { $0.name == relationship.target }?.identity.count ?? 1)
        }
        if entity.attributes.count + keyColumns + (hasChildren(e) ? 1 : 0) > ColumnMask.capacity {
            add(
                .entity(e),
                "entity '\(e)' has \(entity.attributes.count + keyColumns) columns (attributes and to-one keys); at most \(ColumnMask.capacity) are supported"
            )
        }
        for name in entity.identity where entity.attribute(named: name) == nil {
            add(.identity(entity: e), "identity '\(name)' names no attribute of entity '\(e)'")
        }
        for attribute in entity.identityAttributes {
            if case .json = attribute.type {
                add(.identity(entity: e), "identity attribute '\(attribute.name)' cannot be of type json")
            }
            if attribute.constValue != nil {
                // A const is filled after the records are folded by identity: every row would
                // end with the same identity, which the identity index refuses at the next run.
                add(
                    .attribute(entity: e, name: attribute.name),
                    "identity attribute '\(attribute.name)' cannot be const: each record's identity comes from the record")
            }
        }
        if Set(entity.identity).count != entity.identity.count {
            add(.identity(entity: e), "identity names an attribute twice")
        }
        return columns
    }

    /// A relationship's names, target, options, inverse and columns.
    private func relationshipProblems(
        _ relationship: Relationship, of entity: Entity, columns: inout Set<String>, _ problems: inout ProblemList
    ) {
        func add(_ location: Location, _ message: String) { problems.add(location, message) }
        let e = entity.name
        let location = Location.relationship(entity: e, name: relationship.name)
        if !Self.isSQLIdentifier(relationship.name) {
            add(location, "relationship name '\(relationship.name)' is not a valid SQL identifier ([A-Za-z_][A-Za-z0-9_]*)")
        }
        if let why = Self.keyPathProblem(relationship.key, delimiter: entity.keyDelimiter) {
            add(location, why)
        }
        guard let target = self[relationship.target] else {
            add(location, "relationship '\(relationship.name)' points to entity '\(relationship.target)', which is not declared")
            return
        }
        if !relationship.fields.isEmpty {
            if relationship.isToMany { add(location, "fields applies to a to-one relationship only") }
            for (attribute, key) in relationship.fields.sorted(by: { $0.key < $1.key }) {
                if target.attribute(named: attribute) == nil {
                    add(location, "fields: '\(attribute)' is no attribute of entity '\(target.name)'")
                }
                if let why = Self.keyPathProblem(key, delimiter: entity.keyDelimiter) { add(location, "fields: \(why)") }
            }
            for name in target.identity where relationship.fields[name] == nil {
                add(location, "fields must give the identity of '\(target.name)': '\(name)' is missing")
            }
        }
        if !relationship.insertsTargets || !relationship.updatesTargets || !relationship.deletesLinks {
            if relationship.owned { add(location, "an owned relationship's rows are replaced as a set: operations do not apply") }
            if relationship.inverse != nil && !relationship.deletesLinks {
                add(location, "a relationship with an inverse replaces its links: leave delete in its operations")
            }
            if !relationship.fields.isEmpty { add(location, "operations do not apply to a relationship read from fields") }
            if relationship.isOrdered && !relationship.deletesLinks {
                add(location, "an ordered relationship's set is its order: leave delete in its operations")
            }
        }
        ownedProblems(relationship, of: entity, target: target, location: location, &problems)
        inverseProblems(relationship, of: entity, target: target, location: location, &problems)
        if target.identity.isEmpty {
            add(location, "relationship '\(relationship.name)' points to entity '\(target.name)', which has no identity to link by")
        }
        keyColumnProblems(relationship, of: entity, target: target, location: location, columns: &columns, &problems)
    }

    /// A to-many's join table columns, or a to-one's key columns in its entity's table.
    private func keyColumnProblems(
        _ relationship: Relationship, of entity: Entity, target: Entity, location: Location, columns: inout Set<String>,
        _ problems: inout ProblemList
    ) {
        func add(_ location: Location, _ message: String) { problems.add(location, message) }
        let e = entity.name
        if relationship.isToMany {
            if entity.identity.isEmpty {
                add(location, "to-many relationship '\(relationship.name)' needs an identity on entity '\(e)' for its join table")
            }
            let joinColumns =
                entity.joinColumns() + target.joinColumns(prefix: relationship.target == entity.name ? relationship.name : nil)
                + (relationship.isOrdered ? ["position"] : [])
            var seenJoin: Set<String> = []
            for column in joinColumns where !seenJoin.insert(column.lowercased()).inserted {
                add(location, "the join table of relationship '\(relationship.name)' would have the column '\(column)' twice")
            }
            for column in joinColumns {
                if let why = Self.reservedColumn(column) {
                    add(
                        location,
                        "the join table of relationship '\(relationship.name)' would have the column '\(column)', a reserved name: \(why)"
                    )
                } else if column.utf8.count > 63 {
                    add(
                        location,
                        "the join table of relationship '\(relationship.name)' would have the column '\(column)' (\(column.utf8.count) bytes): PostgreSQL cuts names at 63"
                    )
                }
            }
        } else {
            if relationship.isOrdered { add(location, "only a to-many relationship can be ordered") }
            for column in relationship.foreignKeyColumns(target: target) {
                if !columns.insert(column.lowercased()).inserted {
                    add(location, "column '\(column)' of relationship '\(relationship.name)' collides with another column")
                } else if let why = Self.reservedColumn(column) {
                    add(location, "column '\(column)' of relationship '\(relationship.name)' is a reserved name: \(why)")
                } else if column.utf8.count > 63 {
                    add(
                        location,
                        "column '\(column)' of relationship '\(relationship.name)' is \(column.utf8.count) bytes: PostgreSQL cuts names at 63"
                    )
                }
            }
        }
    }

    /// `owned: true`: a to-many of objects without an identity, that only its owner points to.
    private func ownedProblems(
        _ relationship: Relationship, of entity: Entity, target: Entity, location: Location, _ problems: inout ProblemList
    ) {
        func add(_ location: Location, _ message: String) { problems.add(location, message) }
        let e = entity.name
        if relationship.owned {
            let mine = "\(e).\(relationship.name)"
            if !relationship.isToMany {
                add(location, "owned applies to a to-many relationship (objects without identity, kept per owner)")
            }
            if relationship.isOrdered {
                add(location, "an owned relationship keeps its order already (position): leave ordered out")
            }
            if relationship.inverse != nil { add(location, "an owned relationship has no inverse") }
            if target.owner != e {
                add(
                    location,
                    target.parent != nil || !target.identity.isEmpty && target.owner == nil
                        ? "owned entity '\(target.name)' must have no identity (nor parent) of its own: its rows are keyed by their owner and position"
                        : "entity '\(target.name)' is owned by '\(target.owner ?? "")' already")
            }
            for other in entities {
                for r in other.relationships where r.target == target.name && !(other.name == e && r.name == relationship.name) {
                    add(
                        location,
                        "owned entity '\(target.name)' is the target of '\(other.name).\(r.name)' too: only its owner points to it (\(mine))"
                    )
                }
            }
        }
    }

    /// `inverse:`: both ends name each other, and can be one join table (or a to-one's column).
    private func inverseProblems(
        _ relationship: Relationship, of entity: Entity, target: Entity, location: Location, _ problems: inout ProblemList
    ) {
        func add(_ location: Location, _ message: String) { problems.add(location, message) }
        let e = entity.name
        if let inverse = relationship.inverse {
            // Spelled as the model was declared: key paths and rules for Swift types, the
            // pipeline file's names and keys for a file.
            let mine = swiftNames?.keyPath(e, relationship.name) ?? "\(e).\(relationship.name)"
            if let other = target.relationships.first(where: { $0.name == inverse }) {
                let theirs = swiftNames?.keyPath(target.name, other.name) ?? "\(target.name).\(other.name)"
                if other.target != e || other.inverse != relationship.name {
                    guard let swiftNames else {
                        add(location, "inverse '\(theirs)' must name '\(mine)' back: give it 'to: \(e), inverse: \(relationship.name)'")
                        return
                    }
                    let (type, back) = (swiftNames.types[e] ?? e, swiftNames.properties[e]?[relationship.name] ?? relationship.name)
                    add(
                        location,
                        other.target != e
                            ? "inverse '\(theirs)' relates to \(swiftNames.types[other.target] ?? other.target), not back to \(type)"
                            : "inverse '\(theirs)' must name '\(mine)' back: give it IngotRule(inverse: \"\(back)\"), or no inverse rule (one side is enough)"
                    )
                } else if target.name == e && other.name == relationship.name {
                    add(location, "relationship '\(mine)' cannot be its own inverse")
                } else if !relationship.isToMany && !other.isToMany {
                    add(location, "inverse '\(mine)' ↔ '\(theirs)': two to-ones cannot be inverses (one side is a to-many)")
                } else if relationship.owned || other.owned {
                    add(location, "inverse '\(mine)' ↔ '\(theirs)': an owned relationship has no inverse")
                } else if relationship.isOrdered || other.isOrdered {
                    add(
                        location,
                        "inverse '\(mine)' ↔ '\(theirs)': ordered relationships cannot be inverses (each side would need its own order)"
                    )
                }
            } else if let swiftNames {
                let candidates = target.relationships.filter { $0.target == e }.map {
                    swiftNames.properties[target.name]?[$0.name] ?? $0.name
                }
                add(
                    location,
                    "\(mine): inverse '\(inverse)' is no relationship of \(swiftNames.types[target.name] ?? target.name)"
                        + (candidates.isEmpty
                            ? " (it has none back to \(swiftNames.types[e] ?? e))"
                            : " (back to \(swiftNames.types[e] ?? e): \(candidates.joined(separator: ", ")))"))
            } else {
                add(location, "inverse '\(inverse)' names no relationship of entity '\(target.name)'")
            }
        }
    }

    /// The names of the tables and indexes the schema creates, each with what it belongs to (for
    /// messages) and where it was declared.
    func schemaNames() -> [(owner: String, name: String, location: Location)] {
        var names: [(String, String, Location)] = []
        for entity in entities {
            names.append(("the table of entity '\(entity.name)'", entity.table, .table(entity: entity.name)))
        }
        for entity in entities {
            if !entity.identity.isEmpty {
                names.append(("the identity index of entity '\(entity.name)'", entity.table + "_identity", .identity(entity: entity.name)))
            }
            for relationship in entity.relationships where relationship.isToMany {
                names.append(
                    (
                        "the join table of '\(entity.name).\(relationship.name)'", "\(entity.table)_\(relationship.name)",
                        .relationship(entity: entity.name, name: relationship.name)
                    ))
            }
        }
        return names
    }

    /// Tables Ingot keeps in every database besides its `_ingot_*` ones: GRDB's record of the
    /// migrations of Ingot's own tables (SQLite).
    static let reservedTables: Set<String> = ["grdb_migrations"]

    /// Why a column may not be called `name` in any backend (a pipeline must not validate for
    /// one backend and break on the other), or `nil` when it may: SQLite's aliases of the rowid
    /// (updating such a column would move rows), PostgreSQL's system columns (`CREATE TABLE`
    /// refuses them), and the columns of Ingot's staging tables.
    /// Why `key` is not a record key path (``JSONKeyPath``'s grammar, starting with a key), if it is not.
    static func keyPathProblem(_ key: String, delimiter: String) -> String? {
        guard !delimiter.isEmpty else { return nil }  // reported as the delimiter's problem
        do {
            let path = try JSONKeyPath(parsing: key, delimiter: delimiter)
            if let first = path.components.first, case .key = first {
            } else {
                return "key path '\(key)' starts with an index: a record's key comes first"
            }
            return nil
        } catch {
            return error.description
        }
    }

    static func reservedColumn(_ name: String) -> String? {
        let lower = name.lowercased()
        switch lower {
        case "rowid", "oid", "_rowid_": return "SQLite's name for a row's key"
        case "xmin", "xmax", "cmin", "cmax", "ctid", "tableoid": return "a PostgreSQL system column"
        case "_present", "_pos": return "a column of Ingot's staging tables"
        default: return lower.hasPrefix("_ingot") ? "names starting with _ingot belong to Ingot" : nil
        }
    }

    /// The most bytes a generated name may have so that every name Ingot derives from it stays
    /// within PostgreSQL's 63 (`NAMEDATALEN` - 1; longer names are cut, and two cut names then
    /// meet or a later run no longer finds its table): a table has staging tables up to
    /// `_ingot_touched_<table>` and its `<table>_identity` constraint; a join table up to
    /// `_ingot_link_<join table>`.
    static func nameLimit(of location: Location) -> Int? {
        switch location {
        case .table: 63 - "_ingot_touched_".utf8.count
        case .identity: 63
        case .relationship: 63 - "_ingot_link_".utf8.count
        default: nil
        }
    }

    /// `_ingot` or `sqlite_` when `name` starts with it, in any case: those names belong to Ingot
    /// and SQLite.
    static func reservedPrefix(of name: String) -> String? {
        let lower = name.lowercased()
        return ["_ingot", "sqlite_"].first { lower.hasPrefix($0) }
    }

    /// `[A-Za-z_][A-Za-z0-9_]*`: names we put into SQL unquoted, and the same in every backend.
    public static func isSQLIdentifier(_ name: String) -> Bool {
        guard let first = name.utf8.first else { return false }
        func letter(_ c: UInt8) -> Bool { (c | 0x20) >= UInt8(ascii: "a") && (c | 0x20) <= UInt8(ascii: "z") || c == UInt8(ascii: "_") }
        return letter(first) && name.utf8.allSatisfy { letter($0) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) }
    }
}

/// A model that breaks a rule, with every problem found.
public struct ModelError: Error, Sendable, CustomStringConvertible {
    package var problems: [EntityModel.Problem]
    /// What is wrong, one message per problem.
    public var messages: [String] { problems.map(\.message) }
    /// The messages, one per line.
    public var description: String { problems.map(\.message).joined(separator: "\n") }
}

extension EntityModel {
    /// Throws a ``ModelError`` listing every broken rule.
    public func validate() throws(ModelError) {
        let problems = problems()
        if !problems.isEmpty { throw ModelError(problems: problems) }
    }
}
