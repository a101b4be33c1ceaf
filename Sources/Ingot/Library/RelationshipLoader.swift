import Foundation

/// Loads the relationships a fetch asks for (`including:`), two queries each whatever the number
/// of rows: the links of every fetched owner (a join table's rows, or the targets' key columns),
/// then the targets by identity. Single-key identities; depth one (the targets' own relationships
/// are not loaded).
struct RelationshipLoader {
    let model: EntityModel
    let layouts: [EntityLayout]
    let location: StoreLocation
    /// Each entity's row shape (``RowDecoder/Shape``), by index.
    let shapes: [RowDecoder.Shape]

    init(model: EntityModel, layouts: [EntityLayout], location: StoreLocation) {
        self.model = model
        self.layouts = layouts
        self.location = location
        shapes = model.entities.indices.map { RowDecoder.Shape(entity: model.entities[$0], layout: layouts[$0]) }
    }

    /// Per owner row (in `rows`' order), what relationship `r` of `entity` holds.
    func load(_ r: Int, of entity: Int, owners rows: [[ScalarValue]]) throws -> [RowDecoder.Loaded] {
        let layout = layouts[entity]
        let name = model.entities[entity].relationships[r].name
        if let toOne = layout.toOne.first(where: { $0.relationship == r }) {
            guard toOne.slots.count == 1 else { throw composite(name) }
            let keys = rows.map { $0[toOne.slots.lowerBound] }
            let targets = try self.targets(toOne.target, identities: keys)
            return keys.map { .one($0 == .null ? nil : targets[$0]) }
        }
        guard let toMany = layout.toMany.first(where: { $0.relationship == r }) else {
            throw IngotQueryError(message: "'\(name)' is not a relationship of \(model.entities[entity].name)")
        }
        let targetLayout = layouts[toMany.target]
        if toMany.isOwned {
            // Owned children: rows of their own table keyed by the owner (a composite key for an
            // owned entity's own children) and their position. Read by the key's first column,
            // grouped by all of it.
            let ownerKeys = rows.map { row in layout.identitySlots.map { row[$0] } }
            let slots = toMany.sourceColumns.compactMap { column in targetLayout.columns.firstIndex { $0.name == column } }
            guard !toMany.sourceColumns.isEmpty, slots.count == toMany.sourceColumns.count,
                ownerKeys.allSatisfy({ $0.count == slots.count })
            else { throw composite(name) }
            var query = RowQuery(targetLayout)
            query.tiebreak = toMany.sourceColumns + ["position"]
            var byOwner: [[ScalarValue]: [RowDecoder]] = [:]
            let first = Array(Set(ownerKeys.map { $0[0] }.filter { $0 != .null }))
            for row in try select(query, where: toMany.sourceColumns[0], among: first) {
                byOwner[slots.map { row[$0] }, default: []].append(decoder(toMany.target, row))
            }
            return ownerKeys.map { .many(byOwner[$0] ?? []) }
        }
        guard layout.identitySlots.count == 1 else { throw composite(model.entities[entity].name) }
        let owners = rows.map { $0[layout.identitySlots[0]] }
        let ownerType = layout.columns[layout.identitySlots[0]].type
        let wanted = Array(Set(owners.filter { $0 != .null }))
        guard targetLayout.identitySlots.count == 1, toMany.sourceColumns.count == 1 else { throw composite(name) }
        var linked: [ScalarValue: [ScalarValue]] = [:]
        if toMany.isForeignKey {
            // The targets' key column points at the owner (`planet.residents` ↔ `person.homeworld_id`).
            let key = toMany.sourceColumns[0]
            guard let slot = targetLayout.columns.firstIndex(where: { $0.name == key }) else { return [] }
            let found = try select(RowQuery(targetLayout), where: key, among: wanted)
            var byOwner: [ScalarValue: [RowDecoder]] = [:]
            for row in found {
                byOwner[row[slot], default: []].append(decoder(toMany.target, row))
            }
            return owners.map { .many(byOwner[$0] ?? []) }
        }
        // A join table: (owner, target[, position]), read in the set's order.
        let targetType = targetLayout.columns[targetLayout.identitySlots[0]].type
        var columns = [
            EntityLayout.Column(name: toMany.sourceColumns[0], type: ownerType),
            EntityLayout.Column(name: toMany.targetColumns[0], type: targetType),
        ]
        if toMany.isOrdered { columns.append(EntityLayout.Column(name: "position", type: .integer)) }
        var links = RowQuery(table: toMany.joinTable, columns: columns, tiebreak: [columns[0].name, columns[1].name])
        if toMany.isOrdered { links.tiebreak = [columns[0].name, "position"] }
        for link in try select(links, where: columns[0].name, among: wanted) { linked[link[0], default: []].append(link[1]) }
        let targets = try self.targets(toMany.target, identities: Array(linked.values.joined()))
        return owners.map { owner in .many((linked[owner] ?? []).compactMap { targets[$0] }) }
    }

    /// The rows of `entity` with these identities, by identity.
    private func targets(_ entity: Int, identities: [ScalarValue]) throws -> [ScalarValue: RowDecoder] {
        let layout = layouts[entity]
        guard layout.identitySlots.count == 1 else { throw composite(model.entities[entity].name) }
        let wanted = Array(Set(identities.filter { $0 != .null }))
        guard !wanted.isEmpty else { return [:] }
        var out: [ScalarValue: RowDecoder] = [:]
        for row in try select(RowQuery(layout), where: layout.columns[layout.identitySlots[0]].name, among: wanted) {
            out[row[layout.identitySlots[0]]] = decoder(entity, row)
        }
        return out
    }

    /// `query`'s rows whose `column` is one of `values`, a few thousand values a statement
    /// (both databases bound the parameters of one).
    private func select(_ query: RowQuery, where column: String, among values: [ScalarValue]) throws -> [[ScalarValue]] {
        var rows: [[ScalarValue]] = []
        var start = 0
        while start < values.count {
            var part = query
            part.filter = .among(.column(column), Array(values[start..<min(values.count, start + 4_096)]))
            rows += try location.select(part)
            start += 4_096
        }
        return rows
    }

    private func decoder(_ entity: Int, _ row: [ScalarValue]) -> RowDecoder {
        RowDecoder(shape: shapes[entity], row: row)
    }

    private func composite(_ name: String) -> IngotQueryError {
        IngotQueryError(message: "relationships of entities with a composite identity ('\(name)') cannot be loaded yet")
    }
}
