/// The relations a model's tables hold, as foreign keys: each to-one's columns, an owned row's
/// owner, a child entity's row to its parent's, and both sides of each join table, each to its
/// target's identity. SQLite declares
/// them in its tables (not enforced on Ingot's connection); PostgreSQL declares none by default
/// — there a constraint is checked at every link written (people-200k's first load 45 % slower,
/// docs/performance-notes.md) — and `ingot schema --foreign-keys` prints them for users who want them
/// anyway (docs/stores.md, "Foreign keys").
package struct ForeignKey: Sendable, Equatable {
    package var table: String
    package var columns: [String]
    package var target: String
    package var targetColumns: [String]

    /// Every relation of `model`'s tables, in table order.
    package static func of(_ model: EntityModel) -> [ForeignKey] {
        let layouts = EntityLayout.layouts(of: model)
        var keys: [ForeignKey] = []
        func key(_ table: String, _ columns: [String], to entity: Int) -> ForeignKey {
            let target = model.entities[entity]
            return ForeignKey(table: table, columns: columns, target: target.table, targetColumns: target.identity)
        }
        for layout in layouts {
            let identity = layout.identitySlots.map { layout.columns[$0].name }
            for toOne in layout.toOne where !model.entities[toOne.target].identity.isEmpty {
                keys.append(key(layout.table, toOne.slots.map { layout.columns[$0].name }, to: toOne.target))
            }
            if let name = model.entities[layout.entity].owner, let owner = model.index(of: name) {
                keys.append(key(layout.table, Array(identity.dropLast()), to: owner))
            }
            // A child entity's row extends its parent's (the same identity, in the parent's table).
            if let name = model.entities[layout.entity].parent, let parent = model.index(of: name), parent != layout.entity {
                keys.append(key(layout.table, identity, to: parent))
            }
            for toMany in layout.toMany where toMany.hasJoinTable && !toMany.isInverse {
                keys.append(key(toMany.joinTable, toMany.sourceColumns, to: layout.entity))
                keys.append(key(toMany.joinTable, toMany.targetColumns, to: toMany.target))
            }
        }
        return keys
    }
}

extension ForeignKey {
    /// PostgreSQL's statements that declare `model`'s relations (`ingot schema --foreign-keys`):
    /// deferred to each commit, as SQLite's are, and `NOT VALID` (rows already stored are not
    /// checked when the statement runs; `VALIDATE CONSTRAINT` checks them later, without
    /// blocking writes). Once declared, every link a run writes is checked at its commit.
    package static func postgresStatements(of model: EntityModel) -> [String] {
        func quote(_ name: String) -> String { "\"" + name + "\"" }  // names are SQL identifiers (validation)
        var counts: [String: Int] = [:]
        return of(model).map { key in
            counts[key.table, default: 0] += 1
            let name = "\(key.table)_fk\(counts[key.table] ?? 1)"
            return
                "ALTER TABLE \(quote(key.table)) ADD CONSTRAINT \(quote(name)) FOREIGN KEY (\(key.columns.map(quote).joined(separator: ", "))) "
                + "REFERENCES \(quote(key.target)) (\(key.targetColumns.map(quote).joined(separator: ", "))) DEFERRABLE INITIALLY DEFERRED NOT VALID"
        }
    }
}

extension ForeignKeyIndex {
    /// `CREATE INDEX IF NOT EXISTS "name" ON "table"("columns")`, as SQLite and PostgreSQL both take it:
    /// a schema makes it, and a staged load that dropped it for its merge or copy makes it again.
    package var createStatement: String {
        func quote(_ identifier: String) -> String { "\"\(identifier)\"" }
        return "CREATE INDEX IF NOT EXISTS \(quote(name)) ON \(quote(table))(\(columns.map(quote).joined(separator: ", ")))"
    }
}
