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
            for toMany in other.toMany where !toMany.isInverse {
                if other.entity == entity { unlinked.append(KeyColumns(table: toMany.joinTable, columns: toMany.sourceColumns)) }
                if toMany.target == entity { unlinked.append(KeyColumns(table: toMany.joinTable, columns: toMany.targetColumns)) }
            }
        }
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
