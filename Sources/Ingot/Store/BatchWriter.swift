import GRDBSQLite

/// The statement of one row shape: an insert or update of one entity writing the columns of `mask`.
struct ShapeKey: Hashable {
    enum Kind: Hashable { case insert, update }
    var kind: Kind
    var entity: Int
    var mask: ColumnMask
}

/// Saves one batch inside the store's open transaction: resolves identities (one query per
/// entity), folds records per identity in order, and writes rows and links.
struct BatchWriter {
    let store: Store
    let pages: [DecodedPage]
    private(set) var outcome = BatchOutcome()

    /// Per entity: identities already stored before this batch.
    private var existing: [Set<IdentityKey>]
    /// Per entity: the batch's rows folded by identity, in first-seen order.
    private var merged: [MergedRows]

    struct MergedRows {
        var index: [IdentityKey: Int] = [:]
        var rows: [EntityRow] = []
        /// Rows of an entity without identity: each is inserted.
        var anonymous: [EntityRow] = []
    }

    init(store: Store, pages: [DecodedPage]) {
        self.store = store
        self.pages = pages
        existing = Array(repeating: [], count: store.layouts.count)
        merged = Array(repeating: MergedRows(), count: store.layouts.count)
    }

    // MARK: - Resolve

    /// Looks up, per entity, which of the batch's identities are already stored: one query each.
    mutating func resolve() throws {
        var identities = [Set<IdentityKey>](repeating: [], count: store.layouts.count)
        for page in pages {
            for record in page.records {
                for row in record.rows {
                    if let identity = row.identity { identities[row.entity].insert(identity) }
                }
                for reference in record.references { identities[reference.target].insert(reference.identity) }
            }
        }
        for (entity, keys) in identities.enumerated() where !keys.isEmpty {
            existing[entity] = try lookup(entity, keys)
        }
    }

    private func lookup(_ entity: Int, _ keys: Set<IdentityKey>) throws -> Set<IdentityKey> {
        let layout = store.layouts[entity]
        let columns = layout.identitySlots.map { Store.quote(layout.columns[$0].name) }
        let table = Store.quote(layout.table)
        let sql: String
        if columns.count == 1 {
            sql = "SELECT \(columns[0]) FROM \(table) WHERE \(columns[0]) IN (SELECT value FROM json_each(?))"
        } else {
            let on = columns.enumerated().map { "\(table).\($1) = json_extract(j.value, '$[\($0)]')" }
            sql = "SELECT \(columns.map { "\(table).\($0)" }.joined(separator: ", ")) FROM json_each(?) AS j JOIN \(table) ON \(on.joined(separator: " AND "))"
        }
        let statement = try store.statement(sql)
        statement.bind(.text(JSONText.array(of: keys)), at: 1)
        var found = Set<IdentityKey>(minimumCapacity: keys.count)
        let count = Int32(columns.count)
        try statement.query { row in
            if count == 1 {
                found.insert(.single(RawStatement.column(row, 0)))
            } else {
                found.insert(.composite((0..<count).map { RawStatement.column(row, $0) }))
            }
        }
        return found
    }

    // MARK: - Fold

    /// Folds the batch's records, in order, into one row per identity. References are checked
    /// against what is stored or created earlier in the batch: `reject` rejects the record,
    /// `ignore` drops the link, `stub` creates a row holding only the identity.
    mutating func fold() {
        var known = existing
        for page in pages {
            for var record in page.records {
                for row in record.rows { if let id = row.identity { known[row.entity].insert(id) } }
                if !record.references.isEmpty {
                    if let missing = record.references.first(where: { $0.policy == .reject && !known[$0.target].contains($0.identity) }) {
                        outcome.rejections.append(RecordRejection(
                            entity: store.model.entities[record.rows[0].entity].name,
                            codingPath: missing.codingPath ?? "",
                            reason: "no '\(store.model.entities[missing.target].name)' with identity \(missing.identity)",
                            source: page.source, recordIndex: record.index, raw: record.raw ?? ""))
                        continue
                    }
                    var dropped: [(row: Int, index: Int, position: Int)] = []
                    for reference in record.references where !known[reference.target].contains(reference.identity) {
                        switch reference.policy {
                        case .stub:
                            merge(stub(reference.target, reference.identity))
                            known[reference.target].insert(reference.identity)
                        case .ignore:
                            switch reference.slot {
                            case .toOne(let k):
                                for slot in store.layouts[record.rows[reference.row].entity].toOne[k].slots {
                                    record.rows[reference.row].columns[slot] = nil
                                }
                            case .toMany(let k, let position):
                                dropped.append((reference.row, k, position))
                            }
                        case .reject:
                            break
                        }
                    }
                    // Remove ignored to-many links, last position first so earlier positions stay valid.
                    for drop in dropped.sorted(by: { $0.position > $1.position }) {
                        record.rows[drop.row].toMany[drop.index]?.remove(at: drop.position)
                    }
                }
                for row in record.rows { merge(row) }
            }
        }
    }

    private func stub(_ entity: Int, _ identity: IdentityKey) -> EntityRow {
        let layout = store.layouts[entity]
        var columns = [SQLValue?](repeating: nil, count: layout.columns.count)
        for (slot, value) in zip(layout.identitySlots, identity.values) { columns[slot] = value }
        return EntityRow(
            entity: entity, identity: identity, columns: columns,
            toMany: [[IdentityKey]?](repeating: nil, count: layout.toMany.count))
    }

    private mutating func merge(_ row: EntityRow) {
        guard let identity = row.identity else {
            merged[row.entity].anonymous.append(row)
            return
        }
        if let at = merged[row.entity].index[identity] {
            for (slot, value) in row.columns.enumerated() where value != nil {
                merged[row.entity].rows[at].columns[slot] = value
            }
            for (k, links) in row.toMany.enumerated() where links != nil {
                merged[row.entity].rows[at].toMany[k] = links
            }
        } else {
            merged[row.entity].index[identity] = merged[row.entity].rows.count
            merged[row.entity].rows.append(row)
        }
    }

    // MARK: - Write

    mutating func write() throws {
        for (entity, rows) in merged.enumerated() {
            let layout = store.layouts[entity]
            let identitySlots = layout.identitySlots
            for row in rows.rows {
                guard let identity = row.identity else { continue }
                let stored = existing[entity].contains(identity)
                var mask = ColumnMask()
                for (slot, value) in row.columns.enumerated() where value != nil { mask.insert(slot) }
                if stored {
                    for slot in identitySlots where mask.contains(slot) { mask = mask.removing(slot) }
                    let changesLinks = row.toMany.contains { $0 != nil }
                    if mask != ColumnMask() {
                        let statement = try shape(.update, entity, mask)
                        var index: Int32 = 1
                        for (slot, value) in row.columns.enumerated() where mask.contains(slot) {
                            statement.bind(value ?? .null, at: index)
                            index += 1
                        }
                        for value in identity.values {
                            statement.bind(value, at: index)
                            index += 1
                        }
                        try statement.execute()
                    }
                    if mask != ColumnMask() || changesLinks { outcome.updated += 1 }
                } else {
                    try insert(row, entity, mask)
                    outcome.inserted += 1
                }
                for (k, links) in row.toMany.enumerated() {
                    guard let links else { continue }
                    try replaceLinks(of: identity, layout.toMany[k], links, stored: stored)
                }
                if store.replaceEntity == entity { try store.touch(identity) }
            }
            for row in rows.anonymous {
                var mask = ColumnMask()
                for (slot, value) in row.columns.enumerated() where value != nil { mask.insert(slot) }
                try insert(row, entity, mask)
                outcome.inserted += 1
            }
        }
    }

    private func insert(_ row: EntityRow, _ entity: Int, _ mask: ColumnMask) throws {
        let statement = try shape(.insert, entity, mask)
        var index: Int32 = 1
        for (slot, value) in row.columns.enumerated() where mask.contains(slot) {
            statement.bind(value ?? .null, at: index)
            index += 1
        }
        try statement.execute()
    }

    private func replaceLinks(
        of identity: IdentityKey, _ toMany: EntityLayout.ToMany, _ links: [IdentityKey], stored: Bool
    ) throws {
        let table = Store.quote(toMany.joinTable)
        let source = toMany.sourceColumns.map(Store.quote)
        let values = identity.values
        if stored {
            let condition = source.map { "\($0) = ?" }.joined(separator: " AND ")
            let delete = try store.statement("DELETE FROM \(table) WHERE \(condition)")
            for (k, value) in values.enumerated() { delete.bind(value, at: Int32(k + 1)) }
            try delete.execute()
        }
        guard !links.isEmpty else { return }
        var columns = source + toMany.targetColumns.map(Store.quote)
        if toMany.isOrdered { columns.append("\"position\"") }
        let placeholders = Array(repeating: "?", count: columns.count).joined(separator: ", ")
        let insert = try store.statement(
            "INSERT OR IGNORE INTO \(table) (\(columns.joined(separator: ", "))) VALUES (\(placeholders))")
        for (value, k) in zip(values, 0...) { insert.bind(value, at: Int32(k + 1)) }
        for (position, target) in links.enumerated() {
            var index = Int32(values.count + 1)
            for value in target.values {
                insert.bind(value, at: index)
                index += 1
            }
            if toMany.isOrdered { insert.bind(.integer(Int64(position)), at: index) }
            try insert.execute()
        }
    }

    /// The cached statement writing `mask`'s columns of `entity`.
    private func shape(_ kind: ShapeKey.Kind, _ entity: Int, _ mask: ColumnMask) throws -> RawStatement {
        let key = ShapeKey(kind: kind, entity: entity, mask: mask)
        if let statement = store.shapeStatements[key] { return statement }
        let layout = store.layouts[entity]
        let table = Store.quote(layout.table)
        let columns = layout.columns.indices.filter { mask.contains($0) }.map { Store.quote(layout.columns[$0].name) }
        let sql: String
        switch kind {
        case .insert:
            let placeholders = Array(repeating: "?", count: columns.count).joined(separator: ", ")
            sql = "INSERT INTO \(table) (\(columns.joined(separator: ", "))) VALUES (\(placeholders))"
        case .update:
            let identity = layout.identitySlots.map { "\(Store.quote(layout.columns[$0].name)) = ?" }
            sql = "UPDATE \(table) SET \(columns.map { "\($0) = ?" }.joined(separator: ", ")) WHERE \(identity.joined(separator: " AND "))"
        }
        guard let connection = store.connection else { throw StoreError.schema("the store is closed") }
        let statement = try RawStatement(connection: connection, sql: sql)
        store.shapeStatements[key] = statement
        return statement
    }
}

extension ColumnMask {
    func removing(_ slot: Int) -> ColumnMask {
        var copy = self
        if slot < 64 { copy.low &= ~(1 << UInt64(slot)) } else { copy.high &= ~(1 << UInt64(slot - 64)) }
        return copy
    }
}
