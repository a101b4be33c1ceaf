import Foundation

/// Loads the relationships a fetch asks for (`including:`), two queries each whatever the number
/// of rows: the links of every fetched owner (a join table's rows, or the targets' key columns),
/// then the targets by identity. Depth one (the targets' own relationships are not loaded).
struct RelationshipLoader {
    let model: EntityModel
    let layouts: [EntityLayout]
    let reader: any RowReader
    /// Each entity's row shape (``RowDecoder/Shape``), by index.
    let shapes: [RowDecoder.Shape]

    init(model: EntityModel, layouts: [EntityLayout], reader: any RowReader) {
        self.model = model
        self.layouts = layouts
        self.reader = reader
        shapes = model.entities.indices.map { RowDecoder.Shape(entity: model.entities[$0], layout: layouts[$0]) }
    }

    /// Per owner row (in `rows`' order), what relationship `r` of `entity` holds. Keys may be
    /// composite: rows are read by a key's first column and matched on all of it.
    func load(_ r: Int, of entity: Int, owners rows: [[ScalarValue]]) throws -> [RowDecoder.Loaded] {
        let layout = layouts[entity]
        let name = model.entities[entity].relationships[r].name
        if let toOne = layout.toOne.first(where: { $0.relationship == r }) {
            let keys = rows.map { row in toOne.slots.map { row[$0] } }
            let targets = try self.targets(toOne.target, identities: keys)
            return keys.map { key in .one(key.contains(.null) ? nil : targets[key]) }
        }
        guard let toMany = layout.toMany.first(where: { $0.relationship == r }) else {
            throw IngotQueryError(message: "'\(name)' is not a relationship of \(model.entities[entity].name)")
        }
        guard !layout.identitySlots.isEmpty, !toMany.sourceColumns.isEmpty else {
            throw IngotQueryError(message: "'\(name)': \(model.entities[entity].name) has no identity to find its targets by")
        }
        let owners = rows.map { row in layout.identitySlots.map { row[$0] } }
        let firsts = Array(Set(owners.map { $0[0] }.filter { $0 != .null }))
        let targetLayout = layouts[toMany.target]
        if toMany.isOwned || toMany.isForeignKey {
            // Rows of the target's table whose key columns hold the owner's key: owned children
            // (with their position), or the targets of a to-one's inverse (`planet.residents` ↔
            // `person.homeworld_id`).
            let slots = toMany.sourceColumns.compactMap { column in targetLayout.columns.firstIndex { $0.name == column } }
            guard slots.count == toMany.sourceColumns.count, slots.count == layout.identitySlots.count else { return [] }
            var query = RowQuery(targetLayout)
            if toMany.isOwned { query.tiebreak = toMany.sourceColumns + [targetLayout.ownedPositionColumn] }
            var byOwner: [[ScalarValue]: [RowDecoder]] = [:]
            for row in try select(query, where: toMany.sourceColumns[0], among: firsts) {
                byOwner[slots.map { row[$0] }, default: []].append(decoder(toMany.target, row))
            }
            return owners.map { .many(byOwner[$0] ?? []) }
        }
        // A join table: (owner key, target key[, position]), read in the set's order.
        let ownerTypes = layout.identitySlots.map { layout.columns[$0].type }
        let targetTypes = targetLayout.identitySlots.map { targetLayout.columns[$0].type }
        guard toMany.sourceColumns.count == ownerTypes.count, toMany.targetColumns.count == targetTypes.count else { return [] }
        var columns =
            zip(toMany.sourceColumns, ownerTypes).map { EntityLayout.Column(name: $0, type: $1) }
            + zip(toMany.targetColumns, targetTypes).map { EntityLayout.Column(name: $0, type: $1) }
        if toMany.isOrdered { columns.append(EntityLayout.Column(name: "position", type: .integer)) }
        let links = RowQuery(
            table: toMany.joinTable, columns: columns,
            tiebreak: toMany.sourceColumns + (toMany.isOrdered ? ["position"] : toMany.targetColumns))
        let (n, m) = (ownerTypes.count, targetTypes.count)
        var linked: [[ScalarValue]: [[ScalarValue]]] = [:]
        for link in try select(links, where: toMany.sourceColumns[0], among: firsts) {
            linked[Array(link[0..<n]), default: []].append(Array(link[n..<n + m]))
        }
        let targets = try self.targets(toMany.target, identities: Array(linked.values.joined()))
        return owners.map { owner in .many((linked[owner] ?? []).compactMap { targets[$0] }) }
    }

    /// The rows of `entity` with these identities, as stored (a child's parent rows).
    func rows(of entity: Int, identities: [[ScalarValue]]) throws -> [[ScalarValue]: [ScalarValue]] {
        try targets(entity, identities: identities).mapValues(\.row)
    }

    /// The rows of `entity` with these identities (each one value per identity column), by
    /// identity.
    private func targets(_ entity: Int, identities: [[ScalarValue]]) throws -> [[ScalarValue]: RowDecoder] {
        let layout = layouts[entity]
        guard !layout.identitySlots.isEmpty else { return [:] }
        let firsts = Array(Set(identities.filter { !$0.contains(.null) && !$0.isEmpty }.map { $0[0] }))
        guard !firsts.isEmpty else { return [:] }
        var out: [[ScalarValue]: RowDecoder] = [:]
        for row in try select(RowQuery(layout), where: layout.columns[layout.identitySlots[0]].name, among: firsts) {
            out[layout.identitySlots.map { row[$0] }] = decoder(entity, row)
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
            rows += try reader.select(part)
            start += 4_096
        }
        return rows
    }

    private func decoder(_ entity: Int, _ row: [ScalarValue]) -> RowDecoder {
        RowDecoder(shape: shapes[entity], row: row)
    }

}
