import Foundation

/// A batch's links, set-based: join-table sets diffed against the stored ones, owned rows past a
/// new set's end deleted, a to-one's inverse written into its target's key columns. Each returns
/// the positions (in the entity's rows) of the stored owners whose links changed, for the run's
/// counts (``WriteResult/unchanged``).
extension PGStore {
    /// Replaces the links of every owner in `rows` that gave relationship `k` — only where they
    /// differ: the stored links the new set lacks (or holds at another position) are deleted, the
    /// new ones inserted, the others left as they are. Returns the positions in `rows` of the
    /// owners whose links changed.
    /// `direct`: the links of owners not stored before this batch (they have none) are copied
    /// straight into the join table, each pair once at its first position (the batch fails with
    /// a unique violation if one is there after all: ``PGStore/writeEntities(of:direct:)``).
    func replaceLinks(_ rows: [ResolvedBatch.Row], _ k: Int, _ toMany: EntityLayout.ToMany, owner: Int, direct: Bool) throws -> Set<Int> {
        var owners: [UInt8] = []
        var links: [UInt8] = []
        var newLinks: [UInt8] = []
        var seen: Set<IdentityKey> = []
        for (position, row) in rows.enumerated() {
            guard let identity = row.identity, let targets = row.links[k] else { continue }
            if direct, row.stored == nil {
                seen.removeAll(keepingCapacity: true)
                for (position, target) in targets.enumerated() where seen.insert(target).inserted {
                    PGStore.appendLinkRow(identity, target, position: toMany.isOrdered ? position : nil, to: &newLinks)
                }
                continue
            }
            // Only a stored owner can have links to drop, and only its changes are counted (a new
            // row is inserted): a first load stages almost none.
            if row.stored != nil { PGStore.appendCopyRow(identity.values + [.integer(Int64(position))], to: &owners) }
            for (position, target) in targets.enumerated() {
                PGStore.appendLinkRow(identity, target, position: toMany.isOrdered ? position : nil, to: &links)
            }
        }
        let join = PGStore.quote(toMany.joinTable)
        let types = PGStore.joinColumns(toMany, owner: owner, model: model)
        if !newLinks.isEmpty {
            try connection.copy("COPY \(join) (\(types.map { PGStore.quote($0.name) }.joined(separator: ", "))) FROM STDIN", data: newLinks)
        }
        guard !owners.isEmpty || !links.isEmpty else { return [] }
        // Named per side: a relationship and its inverse share the join table, not its columns'
        // order (a self-referential pair, `following` ↔ `followers`, names the same columns).
        let side = toMany.isInverse ? "_inverse" : ""
        let ownerStage = try staging(
            "_ingot_own_\(toMany.joinTable)\(side)", Array(types.prefix(toMany.sourceColumns.count)) + [("_row", "bigint")])
        if !owners.isEmpty { try connection.copy("COPY \(ownerStage) FROM STDIN", data: owners) }
        let linkStage = try staging("_ingot_link_\(toMany.joinTable)\(side)", types)
        if !links.isEmpty { try connection.copy("COPY \(linkStage) FROM STDIN", data: links) }
        func match(_ a: String, _ b: String, _ columns: [String]) -> String {
            columns.map { "\(a).\(PGStore.quote($0)) = \(b).\(PGStore.quote($0))" }.joined(separator: " AND ")
        }
        let source = toMany.sourceColumns
        let pair = source + toMany.targetColumns
        let pairList = pair.map(PGStore.quote).joined(separator: ", ")
        // A target given twice keeps its first position, as SQLite's INSERT OR IGNORE does.
        // `NOT IN (SELECT …)` on the staging table: a hashed subplan, whatever the planner
        // guesses of a table it has no statistics for (NOT EXISTS became a nested loop, owners
        // times links per batch: measured 5 s a batch on people-200k).
        let stale =
            toMany.isOrdered
            ? "(\(pair.map { "j.\(PGStore.quote($0))" }.joined(separator: ", ")), j.\"position\") NOT IN (SELECT \(pairList), min(\"position\") FROM \(linkStage) GROUP BY \(pairList))"
            : "(\(pair.map { "j.\(PGStore.quote($0))" }.joined(separator: ", "))) NOT IN (SELECT \(pairList) FROM \(linkStage))"
        // `operations:` without `delete`: links are only added.
        var changed =
            owners.isEmpty || toMany.keepsLinks
            ? []
            : try connection.execute(
                "DELETE FROM \(join) AS j USING \(ownerStage) AS o WHERE \(match("j", "o", source)) AND \(stale) RETURNING o._row")
        if !links.isEmpty {
            let key = pair.map(PGStore.quote).joined(separator: ", ")
            let columns = types.map { PGStore.quote($0.name) }.joined(separator: ", ")
            let order = toMany.isOrdered ? "\(key), \"position\"" : key
            let insert =
                "INSERT INTO \(join) (\(columns)) SELECT DISTINCT ON (\(key)) \(columns) FROM \(linkStage) ORDER BY \(order) ON CONFLICT DO NOTHING"
            if owners.isEmpty {
                // No stored owner (a first load): nothing to report, so no RETURNING to collect.
                try connection.execute(insert)
            } else {
                changed += try connection.execute(
                    """
                    WITH added AS (\(insert) RETURNING \(source.map(PGStore.quote).joined(separator: ", ")))
                    SELECT o._row FROM \(ownerStage) AS o
                    WHERE NOT ((\(source.map { "o.\(PGStore.quote($0))" }.joined(separator: ", "))) NOT IN (SELECT \(source.map(PGStore.quote).joined(separator: ", ")) FROM added))
                    """)
            }
        }
        try connection.execute("TRUNCATE \(ownerStage), \(linkStage)")
        return Set(changed.compactMap { ($0.first ?? nil).flatMap { Int($0) } })
    }

    /// The to-many side of a to-one (`planet.residents` ↔ `person.homeworld_id`) given by `rows`:
    /// each set's targets point at its owner, the targets that pointed at it and are not in the
    /// set no longer do. Returns the positions in `rows` of the owners whose links changed.
    func writeForeignKeyLinks(_ rows: [ResolvedBatch.Row], _ k: Int, _ toMany: EntityLayout.ToMany, owner: Int) throws -> Set<Int> {
        var owners: [UInt8] = []
        var links: [UInt8] = []
        for (position, row) in rows.enumerated() {
            guard let identity = row.identity, let targets = row.links[k] else { continue }
            PGStore.appendCopyRow(identity.values + [.integer(Int64(position))], to: &owners)
            for target in targets { PGStore.appendCopyRow(identity.values + target.values + [.integer(Int64(position))], to: &links) }
        }
        guard !owners.isEmpty else { return [] }
        let ownerTypes = model.entities[owner].identityAttributes.enumerated().map { ("o\($0)", PGStore.columnType($1.type)) }
        let targetTypes = model.entities[toMany.target].identityAttributes.enumerated().map { ("t\($0)", PGStore.columnType($1.type)) }
        let ownerStage = try staging(
            "_ingot_fkown_\(toMany.joinTable)_\(toMany.sourceColumns.joined(separator: "_"))", ownerTypes + [("_row", "bigint")])
        let linkStage = try staging(
            "_ingot_fklink_\(toMany.joinTable)_\(toMany.sourceColumns.joined(separator: "_"))",
            ownerTypes + targetTypes + [("_row", "bigint")])
        try connection.copy("COPY \(ownerStage) FROM STDIN", data: owners)
        if !links.isEmpty { try connection.copy("COPY \(linkStage) FROM STDIN", data: links) }
        let table = PGStore.quote(toMany.joinTable)
        let keys = toMany.sourceColumns.map(PGStore.quote)
        let pointsAt = { (alias: String) in keys.enumerated().map { "t.\($1) = \(alias).o\($0)" }.joined(separator: " AND ") }
        let isTarget = toMany.targetColumns.enumerated().map { "t.\(PGStore.quote($1)) = l.t\($0)" }.joined(separator: " AND ")
        // `NOT IN (SELECT …)` on the staging table: a hashed subplan (see replaceLinks).
        let pairs = ownerTypes.indices.map { "o.o\($0)" } + toMany.targetColumns.map { "t.\(PGStore.quote($0))" }
        let staged = ownerTypes.indices.map { "o\($0)" } + targetTypes.indices.map { "t\($0)" }
        var changed = try connection.execute(
            """
            UPDATE \(table) AS t SET \(keys.map { "\($0) = NULL" }.joined(separator: ", ")) FROM \(ownerStage) AS o
            WHERE \(pointsAt("o")) AND (\(pairs.joined(separator: ", "))) NOT IN (SELECT \(staged.joined(separator: ", ")) FROM \(linkStage))
            RETURNING o._row
            """)
        changed += try connection.execute(
            """
            UPDATE \(table) AS t SET \(keys.enumerated().map { "\($1) = l.o\($0)" }.joined(separator: ", ")) FROM \(linkStage) AS l
            WHERE \(isTarget) AND (\(keys.enumerated().map { "t.\($1) IS DISTINCT FROM l.o\($0)" }.joined(separator: " OR "))) RETURNING l._row
            """)
        try connection.execute("TRUNCATE \(ownerStage), \(linkStage)")
        return Set(changed.compactMap { ($0.first ?? nil).flatMap { Int($0) } })
    }

    /// For every stored owner in `rows` that gave owned relationship `k`: deletes its owned rows
    /// past the new set's end, and what they own in turn (the others are rows of their own, written
    /// with their entity). Returns the positions in `rows` of the owners that lost some.
    func deleteOwned(_ rows: [ResolvedBatch.Row], _ k: Int, _ toMany: EntityLayout.ToMany, owner: Int) throws -> Set<Int> {
        var owners: [UInt8] = []
        for (position, row) in rows.enumerated() {
            guard row.stored != nil, let identity = row.identity, let targets = row.links[k] else { continue }
            PGStore.appendCopyRow(identity.values + [.integer(Int64(targets.count)), .integer(Int64(position))], to: &owners)
        }
        guard !owners.isEmpty else { return [] }
        let types = PGStore.joinColumns(toMany, owner: owner, model: model)
        let stage = try staging("_ingot_owned_\(toMany.joinTable)", types + [("_count", "bigint"), ("_row", "bigint")])
        try connection.copy("COPY \(stage) FROM STDIN", data: owners)
        let table = PGStore.quote(toMany.joinTable)
        let match = toMany.sourceColumns.map { "\(table).\(PGStore.quote($0)) = o.\(PGStore.quote($0))" }.joined(separator: " AND ")
        let position = "\(table).\(PGStore.quote(layouts[toMany.target].ownedPositionColumn))"
        let condition = "EXISTS (SELECT 1 FROM \(stage) AS o WHERE \(match) AND \(position) >= o._count)"
        let deletes = OwnedRows.deletes(of: toMany.target, where: condition, layouts: layouts, quote: PGStore.quote)
        for sql in deletes.dropLast() { try connection.execute(sql) }
        let changed = try connection.execute(
            "DELETE FROM \(table) USING \(stage) AS o WHERE \(match) AND \(position) >= o._count RETURNING o._row")
        try connection.execute("TRUNCATE \(stage)")
        return Set(changed.compactMap { ($0.first ?? nil).flatMap { Int($0) } })
    }
}
