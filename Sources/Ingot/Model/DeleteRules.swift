/// What deleting rows of an entity (`write: replace`) must undo elsewhere, decided once for every
/// backend from the layouts: Core Data's *nullify* rule. A backend only executes it, in its
/// dialect.
struct NullifyPlan: Sendable, Equatable {
    /// Key columns of a table that point at the deleted rows: set to NULL.
    struct KeyColumns: Sendable, Equatable {
        var table: String
        var columns: [String]
    }

    /// To-one references to the entity.
    var nulled: [KeyColumns] = []
    /// Join tables naming the entity, on the owner's side or the target's: their rows naming a
    /// deleted row are deleted.
    var unlinked: [KeyColumns] = []

    /// The plan for deleting rows of `entity`.
    init(deleting entity: Int, layouts: [EntityLayout]) {
        for other in layouts {
            for toOne in other.toOne where toOne.target == entity {
                nulled.append(KeyColumns(table: other.table, columns: toOne.slots.map { other.columns[$0].name }))
            }
            // An inverse pair's join table is named by both sides: once is enough.
            // A to-one's inverse is that to-one's column, nullified above.
            for toMany in other.toMany where !toMany.isInverse && !toMany.isForeignKey {
                if other.entity == entity { unlinked.append(KeyColumns(table: toMany.joinTable, columns: toMany.sourceColumns)) }
                // An owned row (its table the owned relationship's) goes with its owner, above.
                if toMany.target == entity && !toMany.isOwned {
                    unlinked.append(KeyColumns(table: toMany.joinTable, columns: toMany.targetColumns))
                }
            }
        }
    }
}

/// `delete: cascade`: where the rows a deleted row's relationship links it to are found, so that
/// they are deleted too. The targets of the rows of `from` in a set are `SELECT targetColumns
/// FROM table WHERE (ownerColumns) IN (that set)`: for a to-one, the entity's own table and its
/// key columns; for a to-many, its join table's two sides.
struct CascadeEdge: Sendable, Equatable {
    var from: Int
    var to: Int
    var table: String
    var ownerColumns: [String]
    var targetColumns: [String]

    /// Every cascading relationship of the model's layouts.
    static func edges(_ model: EntityModel, _ layouts: [EntityLayout]) -> [CascadeEdge] {
        var edges: [CascadeEdge] = []
        for layout in layouts {
            let entity = model.entities[layout.entity]
            let identity = layout.identitySlots.map { layout.columns[$0].name }
            for toOne in layout.toOne where entity.relationships[toOne.relationship].cascadesDeletes {
                edges.append(
                    CascadeEdge(
                        from: layout.entity, to: toOne.target, table: layout.table, ownerColumns: identity,
                        targetColumns: toOne.slots.map { layout.columns[$0].name }))
            }
            for toMany in layout.toMany where !toMany.isOwned && entity.relationships[toMany.relationship].cascadesDeletes {
                edges.append(
                    CascadeEdge(
                        from: layout.entity, to: toMany.target, table: toMany.joinTable, ownerColumns: toMany.sourceColumns,
                        targetColumns: toMany.targetColumns))
            }
        }
        return edges
    }
}

extension EntityModel {
    /// The entities some relationship stubs (`missing: stub`), in model order, each with the
    /// columns a stub leaves empty (all but its identity): a row with all of them NULL is a stub
    /// no record filled yet. Entities whose only columns are their identity are left out.
    func stubbedEntities(layouts: [EntityLayout]) -> [(entity: Int, emptyColumns: [String])] {
        let targets = Set(
            entities.flatMap { entity in entity.relationships.filter { $0.missing == .stub }.compactMap { index(of: $0.target) } })
        return targets.sorted().compactMap { entity in
            let layout = layouts[entity]
            let others = layout.columns.indices.filter { !layout.identitySlots.contains($0) }.map { layout.columns[$0].name }
            return others.isEmpty ? nil : (entity, others)
        }
    }
}

/// The statements that delete owned rows (``EntityLayout/ToMany/isOwned``) and what they own in
/// turn, for every backend: the rows of an owned entity that `condition` selects, their own
/// owned rows before them (deepest first), matched on the owner's identity columns.
enum OwnedRows {
    /// `DELETE` statements, deepest first, the last deleting the rows of `entity` where
    /// `condition` (on its table, unqualified columns) holds.
    static func deletes(of entity: Int, where condition: String, layouts: [EntityLayout], quote: (String) -> String) -> [String] {
        let layout = layouts[entity]
        let table = quote(layout.table)
        let identity = layout.identitySlots.map { quote(layout.columns[$0].name) }.joined(separator: ", ")
        var statements: [String] = []
        for toMany in layout.toMany where toMany.isOwned {
            let owners = toMany.sourceColumns.map(quote).joined(separator: ", ")
            statements += deletes(
                of: toMany.target, where: "(\(owners)) IN (SELECT \(identity) FROM \(table) WHERE \(condition))", layouts: layouts,
                quote: quote)
        }
        return statements + ["DELETE FROM \(table) WHERE \(condition)"]
    }
}
