import GRDBSQLite

/// A statement the writer reuses: an insert or update of one entity writing the columns of
/// `mask` (one per row shape), or the delete / insert of one to-many relationship's links.
struct ShapeKey: Hashable {
    enum Kind: Hashable {
        case update, updateByIdentity
        /// To-many relationship `k` of the entity's layout.
        case deleteLinks(Int), selectLinks(Int)
        /// New rows (of the key's mask), or the links of to-many `k`, read from a ``RowFeed``.
        case insertFed, insertLinksFed(Int)
    }
    var kind: Kind
    var entity: Int
    var mask: ColumnMask
}

/// Writes one resolved batch inside the store's open transaction: rows and links, with a
/// statement per row shape (see ``SQLiteStore/write(_:then:)``).
struct BatchWriter {
    let store: SQLiteStore
    let batch: ResolvedBatch

    init(store: SQLiteStore, batch: ResolvedBatch) {
        self.store = store
        self.batch = batch
    }

    // MARK: - Write

    /// Writes the batch; returns, per entity, the positions of the stored rows found equal to
    /// what the batch gives, and so not written (``WriteResult/unchanged``).
    func write() throws -> [[Int]] {
        var unchanged = [[Int]](repeating: [], count: batch.rows.merged.count)
        for (entity, rows) in batch.rows.merged.enumerated() {
            do {
                unchanged[entity] = try writeRows(of: entity, rows)
                try insertAnonymous(of: entity, rows)
            } catch var error as StoreError {
                error.entity = store.model.entities[entity].name
                throw error
            }
        }
        // A to-one's inverse, once every row (stubs included) is written: the links are the
        // targets' key columns.
        for (entity, rows) in batch.rows.merged.enumerated() where store.layouts[entity].toMany.contains(where: \.isForeignKey) {
            do {
                let changed = try writeForeignKeyLinks(of: entity, rows)
                unchanged[entity].removeAll { changed.contains($0) }
            } catch var error as StoreError {
                error.entity = store.model.entities[entity].name
                throw error
            }
        }
        return unchanged
    }

    /// Writes the rows of `entity` that have an identity: an update (by rowid, or by identity
    /// when an uncommitted batch created it) or a queued insert each, then its links. A stored
    /// row is updated only where a present column differs (`IS NOT`: NULL-safe, and under the
    /// column's affinity, as the value would be stored), its links replaced only when the given
    /// set differs from the stored one; returns the positions of the stored rows left as they were.
    private func writeRows(of entity: Int, _ rows: RowFolder.MergedRows) throws -> [Int] {
        let layout = store.layouts[entity]
        let refs = batch.refs[entity]
        let statements = self  // the closures below only bind and step statements
        // Rows and values are read in place, not copied (a copy retains storage that another
        // thread allocated; measured, such retains once took a tenth of the writer's time).
        return try rows.rows.withUnsafeBufferPointer { all in
            return try rows.storage.withView { values in
                // New rows per shape and links per relationship, many to a statement (RowFeed).
                var inserts = FeedBuffer<ColumnMask> { mask, feed in
                    try statements.write(feed, by: statements.shape(.insertFed, entity, mask))
                }
                var links = FeedBuffer<Int> { k, feed in
                    try statements.write(feed, by: statements.shape(.insertLinksFed(k), entity, ColumnMask()))
                }
                var lastUpdate: (mask: ColumnMask, pending: Bool, statement: RawStatement)?
                var unchanged: [Int] = []
                let owned = statements.ownedDeletes(of: entity)
                // In identity order (see `RowFolder.sortByIdentity`).
                for position in all.indices {
                    let row = all[position]
                    guard let identity = row.identity else { continue }
                    let ref = refs[position]
                    var changed = false
                    var mentioned = false
                    if let ref {
                        var mask = row.mask
                        for slot in layout.identitySlots { mask = mask.removing(slot) }
                        if mask != ColumnMask() {
                            mentioned = true
                            // Rows an uncommitted batch created have no known rowid: by identity.
                            // Without a handle (a row of an uncommitted batch) the row is found by its identity.
                            let pending = ref.handle == nil
                            let statement: RawStatement
                            if let last = lastUpdate, last.mask == mask, last.pending == pending {
                                statement = last.statement
                            } else {
                                statement = try shape(pending ? .updateByIdentity : .update, entity, mask)
                                lastUpdate = (mask, pending, statement)
                            }
                            var index: Int32 = 1
                            for slot in 0..<layout.columns.count where mask.contains(slot) {
                                statement.bind(values, row.valueStart + slot, at: index)
                                index += 1
                            }
                            if let rowid = ref.handle {
                                statement.bind(.integer(rowid), at: index)
                            } else {
                                statement.bind(identity, from: index)
                            }
                            try statement.execute()
                            if statements.lastChanges > 0 { changed = true }
                        }
                    } else {
                        let feed = inserts.feed(for: row.mask)
                        feed.beginRow()
                        for slot in 0..<layout.columns.count where row.mask.contains(slot) {
                            feed.append(values, row.valueStart + slot)
                        }
                        try inserts.added(to: row.mask)
                    }
                    for k in layout.toMany.indices {
                        guard let targets = rows.storage.linkSets[row.linkStart + k] else { continue }
                        mentioned = true
                        if try statements.writeSet(targets, k, of: identity, entity, stored: ref != nil, owned: owned[k], into: &links) {
                            changed = true
                        }
                    }
                    if ref != nil, mentioned, !changed { unchanged.append(position) }
                }
                try inserts.flush()
                try links.flush()
                return unchanged
            }
        }
    }

    /// The to-many sides of to-ones (`planet.residents` ↔ `person.homeworld_id`) given by rows of
    /// `entity`: each given set's targets point at its row, and the targets that pointed at it
    /// and are not in the set no longer do. Returns the positions of the rows whose links changed.
    private func writeForeignKeyLinks(of entity: Int, _ rows: RowFolder.MergedRows) throws -> Set<Int> {
        let layout = store.layouts[entity]
        var changed: Set<Int> = []
        for (k, toMany) in layout.toMany.enumerated() where toMany.isForeignKey {
            let table = SQLiteStore.quote(toMany.joinTable)
            let count = toMany.sourceColumns.count
            let keys = toMany.sourceColumns.map(SQLiteStore.quote)
            let owner = keys.enumerated().map { "\($1) = ?\($0 + 1)" }.joined(separator: " AND ")
            let differs = keys.enumerated().map { "\($1) IS NOT ?\($0 + 1)" }.joined(separator: " OR ")
            let targets: String
            if toMany.targetColumns.count == 1 {
                targets = "\(SQLiteStore.quote(toMany.targetColumns[0])) IN (SELECT value FROM json_each(?\(count + 1)))"
            } else {
                let parts = toMany.targetColumns.indices.map { "json_extract(value, '$[\($0)]')" }.joined(separator: ", ")
                targets =
                    "(\(toMany.targetColumns.map(SQLiteStore.quote).joined(separator: ", "))) IN (SELECT \(parts) FROM json_each(?\(count + 1)))"
            }
            let release = try store.statement(
                "UPDATE \(table) SET \(keys.map { "\($0) = NULL" }.joined(separator: ", ")) WHERE \(owner) AND NOT (\(targets))")
            let point = try store.statement(
                "UPDATE \(table) SET \(keys.enumerated().map { "\($1) = ?\($0 + 1)" }.joined(separator: ", ")) WHERE \(targets) AND (\(differs))"
            )
            for (position, row) in rows.rows.enumerated() {
                guard let identity = row.identity, let given = rows.storage.linkSets[row.linkStart + k] else { continue }
                let list = IdentityLookup.jsonArray(given)
                for statement in [release, point] {
                    let next = statement.bind(identity, from: 1)
                    statement.bind(.text(list), at: next)
                    try statement.execute()
                    if lastChanges > 0 { changed.insert(position) }
                }
            }
        }
        return changed
    }

    /// Per owned relationship of `entity`, the statements that delete an owner's owned rows at a
    /// position of `?N+1` or more (the owner's identity in `?1…?N`), deepest first.
    private func ownedDeletes(of entity: Int) -> [Int: [String]] {
        var deletes: [Int: [String]] = [:]
        for (k, toMany) in store.layouts[entity].toMany.enumerated() where toMany.isOwned {
            let count = toMany.sourceColumns.count
            let condition =
                toMany.sourceColumns.enumerated().map { "\(SQLiteStore.quote($1)) = ?\($0 + 1)" }.joined(separator: " AND ")
                + " AND \(SQLiteStore.quote(store.layouts[toMany.target].ownedPositionColumn)) >= ?\(count + 1)"
            deletes[k] = OwnedRows.deletes(of: toMany.target, where: condition, layouts: store.layouts, quote: SQLiteStore.quote)
        }
        return deletes
    }

    /// Deletes the rows `identity` owns through owned relationship `k` at a position of `from` or
    /// more, and what they own in turn, by `statements` (``ownedDeletes(of:)``). Whether any went.
    private func deleteOwned(of identity: IdentityKey, by statements: [String], from: Int) throws -> Bool {
        var deleted = false
        for sql in statements {
            let statement = try store.statement(sql)
            let next = statement.bind(identity, from: 1)
            statement.bind(.integer(Int64(from)), at: next)
            try statement.execute()
            deleted = lastChanges > 0  // the last statement deletes the owned rows themselves
        }
        return deleted
    }

    /// Those of `targets` that `identity` is not linked to through to-many `k` yet.
    private func linksNotStored(_ identity: IdentityKey, _ entity: Int, _ k: Int, _ targets: [IdentityKey]) throws -> [IdentityKey] {
        let stored = try storedLinks(of: identity, entity, k)
        return targets.filter { stored[$0.values.map(BatchWriter.asStored)] == nil }
    }

    /// The stored links of `identity` through to-many `k`: each target's values (as SQLite
    /// returns them) and its position (0 for an unordered relationship).
    private func storedLinks(of identity: IdentityKey, _ entity: Int, _ k: Int) throws -> [[ScalarValue]: Int64] {
        let toMany = store.layouts[entity].toMany[k]
        let width = Int32(toMany.targetColumns.count)
        let select = try shape(.selectLinks(k), entity, ColumnMask())
        select.bind(identity, from: 1)
        var stored: [[ScalarValue]: Int64] = [:]
        try select.query { row in
            stored[(0..<width).map { RawStatement.column(row, $0) }] = toMany.isOrdered ? sqlite3_column_int64(row, width) : 0
        }
        return stored
    }

    /// A value as SQLite stores and returns it: booleans are 0 and 1.
    private static func asStored(_ value: ScalarValue) -> ScalarValue {
        if case .bool(let b) = value { return .integer(b ? 1 : 0) }
        return value
    }

    /// Rows changed by the statement that ran last on the write connection.
    private var lastChanges: Int32 {
        store.connection.map { sqlite3_changes($0) } ?? 1
    }

    /// Whether the stored links of `identity` through to-many `k` are the set `targets` gives:
    /// each target once, at the position of its first occurrence for an ordered relationship —
    /// as ``replaceLinks(of:_:_:_:stored:into:)`` would store them.
    private func storedLinksEqual(_ identity: IdentityKey, _ entity: Int, _ k: Int, _ targets: [IdentityKey]) throws -> Bool {
        let ordered = store.layouts[entity].toMany[k].isOrdered
        var wanted: [[ScalarValue]: Int64] = [:]
        for (position, target) in targets.enumerated() {
            let key = target.values.map(BatchWriter.asStored)
            if wanted[key] == nil { wanted[key] = ordered ? Int64(position) : 0 }
        }
        let select = try shape(.selectLinks(k), entity, ColumnMask())
        select.bind(identity, from: 1)
        return try BatchWriter.storedLinks(
            of: select, equal: wanted, targetWidth: Int32(store.layouts[entity].toMany[k].targetColumns.count), ordered: ordered)
    }

    /// Whether the links `select` (bound to one owner) reads — each target's values, then its
    /// position when `ordered` — are the links of `wanted` (target values: position, 0 when not
    /// ordered). Streamed, stopping at the first difference (most sets of a refresh are equal; no
    /// dictionary of the stored links is built for them). The batch path and the staged merge both.
    static func storedLinks(
        of select: RawStatement, equal wanted: [[ScalarValue]: Int64], targetWidth width: Int32, ordered: Bool
    ) throws -> Bool {
        var equal = true
        var count = 0
        try select.query { row in
            count += 1
            guard equal else { return }
            let position = ordered ? sqlite3_column_int64(row, width) : 0
            if wanted[(0..<width).map { RawStatement.column(row, $0) }] != position { equal = false }
        }
        return equal && count == wanted.count
    }

    /// Inserts the rows of `entity` that have no identity (each is a new row).
    private func insertAnonymous(of entity: Int, _ rows: RowFolder.MergedRows) throws {
        guard !rows.anonymous.isEmpty else { return }
        let statements = self
        let columns = store.layouts[entity].columns.count
        try rows.anonymous.withUnsafeBufferPointer { all in
            try rows.storage.withView { values in
                var inserts = FeedBuffer<ColumnMask> { mask, feed in
                    try statements.write(feed, by: statements.shape(.insertFed, entity, mask))
                }
                for row in all {
                    let feed = inserts.feed(for: row.mask)
                    feed.beginRow()
                    for slot in 0..<columns where row.mask.contains(slot) { feed.append(values, row.valueStart + slot) }
                    try inserts.added(to: row.mask)
                }
                try inserts.flush()
            }
        }
    }

    /// Writes the set `targets` a row gives to-many `k` of `entity` (a row `stored` already, or
    /// new): an owned set's rows past its end deleted (by `owned`, ``ownedDeletes(of:)``), a set
    /// without `delete` added to, any other replaced where it differs; a to-one's inverse is
    /// written last (``writeForeignKeyLinks(of:_:)``). Whether anything changed.
    private func writeSet(
        _ targets: [IdentityKey], _ k: Int, of identity: IdentityKey, _ entity: Int, stored: Bool, owned: [String]?,
        into links: inout FeedBuffer<Int>
    ) throws -> Bool {
        let toMany = store.layouts[entity].toMany[k]
        if toMany.isForeignKey { return false }
        if toMany.isOwned {
            // The owned rows are rows of their own table; those past the new set's end go.
            return try stored && deleteOwned(of: identity, by: owned ?? [], from: targets.count)
        }
        if toMany.keepsLinks {
            // `operations:` without `delete`: only the links not stored yet are added.
            let missing = stored ? try linksNotStored(identity, entity, k, targets) : targets
            if missing.isEmpty { return false }
            try replaceLinks(of: identity, entity, k, missing, stored: false, into: &links)
            return true
        }
        if stored, try storedLinksEqual(identity, entity, k, targets) { return false }
        try replaceLinks(of: identity, entity, k, targets, stored: stored, into: &links)
        return true
    }

    /// Deletes a stored row's links (when it was stored) and queues its new ones. A row's old
    /// links are deleted before its new ones are queued, and no other row's delete touches them,
    /// so queueing keeps the result exact.
    private func replaceLinks(
        of identity: IdentityKey, _ entity: Int, _ k: Int, _ targets: [IdentityKey], stored: Bool,
        into buffer: inout FeedBuffer<Int>
    ) throws {
        if stored {
            let delete = try shape(.deleteLinks(k), entity, ColumnMask())
            delete.bind(identity, from: 1)
            try delete.execute()
        }
        let ordered = store.layouts[entity].toMany[k].isOrdered
        let feed = buffer.feed(for: k)
        for (position, target) in targets.enumerated() {
            feed.beginRow()
            for value in identity.values { feed.append(value) }
            for value in target.values { feed.append(value) }
            if ordered { feed.append(.integer(Int64(position))) }
            try buffer.added(to: k)
        }
    }

    /// Runs `statement` (an ``ShapeKey/Kind/insertFed`` or ``ShapeKey/Kind/insertLinksFed(_:)``) over `feed`'s rows.
    private func write(_ feed: RowFeed, by statement: RawStatement) throws {
        feed.bind(to: statement.handle, at: 1)
        try statement.execute()
    }

    /// Rows grouped by key, each group in a ``RowFeed`` that one statement writes once it holds
    /// ``limit`` rows (the rest on `flush`, in the order the keys came).
    private struct FeedBuffer<Key: Hashable> {
        static var limit: Int { 2048 }
        let write: (Key, RowFeed) throws -> Void
        private var feeds: [Key: RowFeed] = [:]
        private var keys: [Key] = []

        init(write: @escaping (Key, RowFeed) throws -> Void) {
            self.write = write
        }

        /// The feed of `key`'s rows, to append a row to (then call ``added(to:)``).
        mutating func feed(for key: Key) -> RowFeed {
            if let feed = feeds[key] { return feed }
            let feed = RowFeed()
            feeds[key] = feed
            keys.append(key)
            return feed
        }

        /// A row was appended to `key`'s feed: written with the others once there are enough.
        mutating func added(to key: Key) throws {
            guard let feed = feeds[key], feed.count >= FeedBuffer.limit else { return }
            try write(key, feed)
            feed.removeAll()
        }

        mutating func flush() throws {
            for key in keys {
                guard let feed = feeds[key], feed.count > 0 else { continue }
                try write(key, feed)
                feed.removeAll()
            }
        }
    }

    /// The cached statement of `kind` for `entity` (writing `mask`'s columns for inserts and updates).
    private func shape(_ kind: ShapeKey.Kind, _ entity: Int, _ mask: ColumnMask) throws -> RawStatement {
        let key = ShapeKey(kind: kind, entity: entity, mask: mask)
        if let statement = store.shapeStatements[key] { return statement }
        let layout = store.layouts[entity]
        let table = SQLiteStore.quote(layout.table)
        let columns = layout.columns.indices.filter { mask.contains($0) }.map { SQLiteStore.quote(layout.columns[$0].name) }
        let sql: String
        switch kind {
        case .update, .updateByIdentity:
            // Numbered parameters: each value is bound once, for the SET and for the comparison
            // that leaves a row whose present values are all equal unwritten.
            let set = columns.enumerated().map { "\($1) = ?\($0 + 1)" }.joined(separator: ", ")
            let differs = columns.enumerated().map { "\($1) IS NOT ?\($0 + 1)" }.joined(separator: " OR ")
            let found: String
            if case .update = kind {
                // By rowid: the lookup found it, so the identity index is not searched again.
                found = "rowid = ?\(columns.count + 1)"
            } else {
                found = layout.identitySlots.enumerated().map {
                    "\(SQLiteStore.quote(layout.columns[$1].name)) = ?\(columns.count + 1 + $0)"
                }
                .joined(separator: " AND ")
            }
            sql = "UPDATE \(table) SET \(set) WHERE \(found) AND (\(differs))"
        case .deleteLinks(let k):
            let toMany = layout.toMany[k]
            let condition = toMany.sourceColumns.map { "\(SQLiteStore.quote($0)) = ?" }.joined(separator: " AND ")
            sql = "DELETE FROM \(SQLiteStore.quote(toMany.joinTable)) WHERE \(condition)"
        case .selectLinks(let k):
            let toMany = layout.toMany[k]
            let condition = toMany.sourceColumns.map { "\(SQLiteStore.quote($0)) = ?" }.joined(separator: " AND ")
            let read = toMany.targetColumns.map(SQLiteStore.quote) + (toMany.isOrdered ? ["\"position\""] : [])
            sql = "SELECT \(read.joined(separator: ", ")) FROM \(SQLiteStore.quote(toMany.joinTable)) WHERE \(condition)"
        case .insertFed:
            // A row of no column (never one with an identity) reads NULL into the first.
            let into = columns.isEmpty ? [SQLiteStore.quote(layout.columns.first?.name ?? "rowid")] : columns
            sql = "INSERT INTO \(table) (\(into.joined(separator: ", "))) \(RowFeed.select(arity: into.count))"
        case .insertLinksFed(let k):
            let toMany = layout.toMany[k]
            var linkColumns = (toMany.sourceColumns + toMany.targetColumns).map(SQLiteStore.quote)
            if toMany.isOrdered { linkColumns.append("\"position\"") }
            sql =
                "INSERT OR IGNORE INTO \(SQLiteStore.quote(toMany.joinTable)) (\(linkColumns.joined(separator: ", "))) \(RowFeed.select(arity: linkColumns.count))"
        }
        guard let connection = store.connection else { throw StoreError.schema("the store is closed") }
        let statement = try RawStatement(connection: connection, sql: sql)
        store.shapeStatements[key] = statement
        return statement
    }
}
