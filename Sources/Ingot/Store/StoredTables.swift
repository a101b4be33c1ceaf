import Foundation

/// The tables a database already holds, as its backend read them: what the schema-conflict
/// check compares with the pipeline's layouts. The check is the same for every backend
/// (``conflicts(with:columnType:)``); a backend only reads its catalog into this.
struct StoredTables: Sendable {
    /// One stored table.
    struct Table: Sendable {
        /// Its columns: name → type, spelled as the backend's ``conflicts(with:columnType:)``
        /// `columnType` spells the type it would create.
        var columns: [String: String]
        /// The columns of its identity (the `TABLE_identity` index or constraint), `nil` when it has none.
        var identity: [String]?
        /// Whether an identity can still be added to it (SQLite: a unique index, while the table
        /// is empty; PostgreSQL: a constraint Ingot never adds to an existing table).
        var acceptsIdentity: Bool
    }

    /// The stored tables by name.
    var tables: [String: Table]
    /// Whether the backend compares names (of tables, columns) without case (SQLite).
    var caseInsensitive: Bool

    private func key(_ name: String) -> String { caseInsensitive ? name.lowercased() : name }

    /// The stored table named `name`.
    func table(_ name: String) -> Table? {
        tables[key(name)]
    }

    /// How the stored tables disagree with `model`: a column stored with another type, an
    /// identity on other columns (or none where a table holds rows), a join table of another
    /// shape. Columns the pipeline adds are not conflicts (they are added); columns it no longer
    /// reads are left alone. `columnType` is the backend's column type for an attribute type.
    func conflicts(with model: EntityModel, columnType: (AttributeType) -> String) -> [String] {
        var conflicts: [String] = []
        func same(_ a: String, _ b: String) -> Bool {
            a.trimmingCharacters(in: .whitespaces).uppercased() == b.trimmingCharacters(in: .whitespaces).uppercased()
        }
        for layout in EntityLayout.layouts(of: model) {
            guard let stored = table(layout.table) else { continue }
            for column in layout.columns {
                if let type = stored.columns[key(column.name)], !same(type, columnType(column.type)) {
                    conflicts.append(
                        "table '\(layout.table)', column '\(column.name)': stored as \(type.isEmpty ? "(no type)" : type), the pipeline wants \(columnType(column.type))"
                    )
                }
            }
            let wanted = layout.identitySlots.map { key(layout.columns[$0].name) }
            if let identity = stored.identity?.map(key), identity != wanted {
                conflicts.append(
                    "table '\(layout.table)': its identity is (\(identity.joined(separator: ", "))), the pipeline's is (\(wanted.isEmpty ? "none" : wanted.joined(separator: ", ")))"
                )
            } else if stored.identity == nil, !wanted.isEmpty, !stored.acceptsIdentity {
                conflicts.append(
                    "table '\(layout.table)': it has no identity (it holds rows without one), the pipeline's is (\(wanted.joined(separator: ", ")))"
                )
            }
            for toMany in layout.toMany where toMany.hasJoinTable {
                guard let join = table(toMany.joinTable) else { continue }
                let columns = Set(join.columns.keys.map(key))
                var expected = Set((toMany.sourceColumns + toMany.targetColumns).map(key))
                if toMany.isOrdered { expected.insert("position") }
                if columns != expected {
                    conflicts.append(
                        "join table '\(toMany.joinTable)': its columns are (\(columns.sorted().joined(separator: ", "))), the pipeline's are (\(expected.sorted().joined(separator: ", ")))"
                    )
                }
            }
            // A relationship that changed between to-one and to-many: its links would be lost.
            let entity = model.entities[layout.entity]
            for toMany in layout.toMany where toMany.hasJoinTable && !toMany.isInverse && table(toMany.joinTable) == nil {
                let relationship = entity.relationships[toMany.relationship]
                guard let target = model[relationship.target] else { continue }
                let columns = relationship.foreignKeyColumns(target: target)
                if columns.allSatisfy({ stored.columns[key($0)] != nil }) {
                    conflicts.append(
                        "table '\(layout.table)', relationship '\(relationship.name)': stored as a to-one (column \(columns.map { "'\($0)'" }.joined(separator: ", "))), the pipeline wants a to-many (join table '\(toMany.joinTable)')"
                    )
                }
            }
            for toOne in layout.toOne {
                let relationship = entity.relationships[toOne.relationship]
                let joinTable = "\(layout.table)_\(relationship.name)"
                let columns = toOne.slots.map { layout.columns[$0].name }
                if table(joinTable) != nil, columns.contains(where: { stored.columns[key($0)] == nil }) {
                    conflicts.append(
                        "table '\(layout.table)', relationship '\(relationship.name)': stored as a to-many (join table '\(joinTable)'), the pipeline wants a to-one (column \(columns.map { "'\($0)'" }.joined(separator: ", ")))"
                    )
                }
            }
        }
        return conflicts
    }
}
