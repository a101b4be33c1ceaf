import Foundation

/// `write: replace` at a run's end (the root rows the run did not touch, and what referred to
/// them) and the stubs no record filled, in PostgreSQL.
extension PGStore {
    func delete(_ rows: RowsToDelete, of entity: Int, sparing: [Int: Set<IdentityKey>]) throws -> Int {
        try begin()
        // The stored prints describe the rows as the last run left them (PrintKeeping).
        try PGStore.forgetPrints(on: connection)
        let layout = layouts[entity]
        let identity = layout.identitySlots.map { layout.columns[$0] }
        let names = identity.map { PGStore.quote($0.name) }
        let listed: Set<IdentityKey>
        let scope: (column: String, values: [ScalarValue])?
        switch rows {
        case .untouched(let keeping, let within): (listed, scope) = (keeping, within)
        case .listed(let identities): (listed, scope) = (identities, nil)
        }
        let kept = try staging("_ingot_touched_\(layout.table)", identity.map { ($0.name, PGStore.columnType($0.type)) })
        var data: [UInt8] = []
        for key in listed { PGStore.appendCopyRow(key.values, to: &data) }
        try connection.execute("TRUNCATE \(kept)")
        if !data.isEmpty { try connection.copy("COPY \(kept) FROM STDIN", data: data) }
        let match = names.map { "k.\($0) = t.\($0)" }.joined(separator: " AND ")
        if case .listed = rows {
            return try delete(entity: entity, where: "EXISTS (SELECT 1 FROM \(kept) AS k WHERE \(match))", sparing: .keys(sparing))
        }
        var within = ""
        if let scope {
            // Within the scope the run saw.
            within = try withinScope(of: entity, column: scope.column) { seen, _ in
                var values: [UInt8] = []
                for value in scope.values { PGStore.appendCopyRow([value], to: &values) }
                if !values.isEmpty { try connection.copy("COPY \(seen) FROM STDIN", data: values) }
            }
        }
        return try delete(entity: entity, where: "NOT EXISTS (SELECT 1 FROM \(kept) AS k WHERE \(match))" + within, sparing: .keys(sparing))
    }

    /// A condition on `entity`'s rows (alias `t`): its `column` holds one of the values `fill`
    /// puts into the table it is given (named, and typed as the column's type, a one-column
    /// staging table emptied first). No condition when the entity has no such column.
    func withinScope(of entity: Int, column name: String, fill: (_ table: String, _ type: String) throws -> Void) throws -> String {
        let layout = layouts[entity]
        guard let column = layout.columns.first(where: { $0.name == name }) else { return "" }
        let type = PGStore.columnType(column.type)
        let seen = try staging("_ingot_scope_\(layout.table)", [(column.name, type)])
        try connection.execute("TRUNCATE \(seen)")
        try fill(seen, type)
        let c = PGStore.quote(column.name)
        return " AND EXISTS (SELECT 1 FROM \(seen) AS s WHERE s.\(c) = t.\(c))"
    }

    /// The rows a cascade spares: the ones the run wrote (a cascade never deletes what this run stored).
    enum SparedRows {
        /// By identity, per entity: a run's own batches kept them (``delete(_:of:sparing:)``).
        case keys([Int: Set<IdentityKey>])
        /// The rows a unit of a joined run touched: `_ingot_pos`'s touched slot at or past the
        /// run's first position.
        case touchedSince(position: Int64)
    }

    /// Deletes the rows of `entity` (alias `t`) that `condition` holds for, in the open
    /// transaction — and, through `delete: cascade` relationships, the rows they link to, until
    /// no set grows — nullifying the references to every deleted row and removing the join rows
    /// naming it.
    func delete(entity: Int, where condition: String, sparing: SparedRows) throws -> Int {
        try begin()
        let spared = try sparedTables(sparing)
        let first = try goneTable(entity)
        let names = identityColumns(entity).map { PGStore.quote($0.name) }
        try connection.execute(
            "INSERT INTO \(first) SELECT \(names.map { "t.\($0)" }.joined(separator: ", ")) FROM \(PGStore.quote(layouts[entity].table)) AS t WHERE \(condition)"
        )
        let sets = try growCascade(from: [entity: first], sparing: sparing, spared: spared)
        var deleted = 0
        for (deleting, gone) in sets.sorted(by: { $0.key < $1.key }) { deleted += try deleteRows(of: deleting, listedIn: gone) }
        return deleted
    }

    private func identityColumns(_ e: Int) -> [EntityLayout.Column] { layouts[e].identitySlots.map { layouts[e].columns[$0] } }

    /// An empty staging table for the identities of `e`'s rows to delete.
    private func goneTable(_ e: Int) throws -> String {
        let table = try staging("_ingot_gone_\(layouts[e].table)", identityColumns(e).map { ($0.name, PGStore.columnType($0.type)) })
        try connection.execute("TRUNCATE \(table)")
        return table
    }

    /// The rows the run wrote, which no cascade deletes, per entity: a table of their keys.
    private func sparedTables(_ sparing: SparedRows) throws -> [Int: String] {
        var spared: [Int: String] = [:]
        let sparedKeys: [Int: Set<IdentityKey>] = if case .keys(let keys) = sparing { keys } else { [:] }
        for (e, keys) in sparedKeys where !keys.isEmpty {
            let table = try staging(
                "_ingot_spared_\(layouts[e].table)", identityColumns(e).map { ($0.name, PGStore.columnType($0.type)) })
            try connection.execute("TRUNCATE \(table)")
            var data: [UInt8] = []
            for key in keys { PGStore.appendCopyRow(key.values, to: &data) }
            try connection.copy("COPY \(table) FROM STDIN", data: data)
            spared[e] = table
        }
        return spared
    }

    /// Grows the sets of rows to delete through `delete: cascade` relationships until none
    /// grows, sparing what `sparing` spares; per entity, the table listing them.
    private func growCascade(from start: [Int: String], sparing: SparedRows, spared: [Int: String]) throws -> [Int: String] {
        var sets = start
        let edges = CascadeEdge.edges(model, layouts)
        var grew = !edges.isEmpty
        while grew {
            grew = false
            for edge in edges {
                guard let from = sets[edge.from], identityColumns(edge.to).count == edge.targetColumns.count else { continue }
                let into: String
                if let existing = sets[edge.to] {
                    into = existing
                } else {
                    into = try goneTable(edge.to)
                    sets[edge.to] = into
                }
                let picked = edge.targetColumns.map { "s.\(PGStore.quote($0))" }
                let owners = zip(edge.ownerColumns, identityColumns(edge.from)).map {
                    "s.\(PGStore.quote($0)) = f.\(PGStore.quote($1.name))"
                }
                let known = zip(edge.targetColumns, identityColumns(edge.to)).map { "s.\(PGStore.quote($0)) = g.\(PGStore.quote($1.name))" }
                let sparedRows: String
                switch sparing {
                case .keys:
                    sparedRows =
                        spared[edge.to].map { table in
                            " AND NOT EXISTS (SELECT 1 FROM \(table) AS g WHERE \(known.joined(separator: " AND ")))"
                        } ?? ""
                case .touchedSince(let position):
                    let touched = "g.\(PGStore.positionColumn)[\(PositionSlots(layouts[edge.to]).touched)]"
                    sparedRows =
                        " AND NOT EXISTS (SELECT 1 FROM \(PGStore.quote(layouts[edge.to].table)) AS g WHERE \(known.joined(separator: " AND ")) AND coalesce(\(touched), 0) >= \(position))"
                }
                let added = try connection.changes(
                    """
                    INSERT INTO \(into) SELECT DISTINCT \(picked.joined(separator: ", ")) FROM \(PGStore.quote(edge.table)) AS s
                    WHERE EXISTS (SELECT 1 FROM \(from) AS f WHERE \(owners.joined(separator: " AND ")))
                      AND \(picked.map { "\($0) IS NOT NULL" }.joined(separator: " AND "))
                      AND NOT EXISTS (SELECT 1 FROM \(into) AS g WHERE \(known.joined(separator: " AND ")))\(sparedRows)
                    """)
                if added > 0 { grew = true }
            }
        }
        return sets
    }

    /// Deletes the rows of `deleting` listed in table `gone`, nullifies the references to them,
    /// and removes what they own and the join rows naming them. Returns the rows deleted.
    private func deleteRows(of deleting: Int, listedIn gone: String) throws -> Int {
        let names = identityColumns(deleting).map { PGStore.quote($0.name) }
        func matching(_ columns: [String], _ alias: String) -> String {
            zip(columns, names).map { "\(alias).\(PGStore.quote($0)) = g.\($1)" }.joined(separator: " AND ")
        }
        let deleted = try connection.changes(
            "DELETE FROM \(PGStore.quote(layouts[deleting].table)) AS t USING \(gone) AS g WHERE \(matching(identityColumns(deleting).map(\.name), "t"))"
        )
        let plan = NullifyPlan(deleting: deleting, layouts: layouts)
        for reference in plan.nulled {
            let set = reference.columns.map { "\(PGStore.quote($0)) = NULL" }.joined(separator: ", ")
            try connection.execute(
                "UPDATE \(PGStore.quote(reference.table)) AS o SET \(set) FROM \(gone) AS g WHERE \(matching(reference.columns, "o"))")
        }
        // What the deleted rows' owned rows own in turn, deepest first (the owned rows
        // themselves are their relationship's join rows, below).
        for toMany in layouts[deleting].toMany where toMany.isOwned {
            let owners = toMany.sourceColumns.map(PGStore.quote).joined(separator: ", ")
            let condition = "(\(owners)) IN (SELECT \(names.joined(separator: ", ")) FROM \(gone))"
            for sql in OwnedRows.deletes(of: toMany.target, where: condition, layouts: layouts, quote: PGStore.quote).dropLast() {
                try connection.execute(sql)
            }
        }
        for reference in plan.unlinked {
            try connection.execute(
                "DELETE FROM \(PGStore.quote(reference.table)) AS j USING \(gone) AS g WHERE \(matching(reference.columns, "j"))")
        }
        return deleted
    }

    func unfilledStubs() throws -> [Int: Int] {
        var result: [Int: Int] = [:]
        for (entity, columns) in model.stubbedEntities(layouts: layouts) {
            let empty = columns.map { "\(PGStore.quote($0)) IS NULL" }.joined(separator: " AND ")
            let rows = try connection.execute("SELECT count(*) FROM \(PGStore.quote(layouts[entity].table)) WHERE \(empty)")
            result[entity] = rows.first?[0].flatMap { Int($0) } ?? 0
        }
        return result
    }
}
