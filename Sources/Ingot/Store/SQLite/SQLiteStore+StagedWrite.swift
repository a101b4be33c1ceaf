import Foundation
import GRDBSQLite

// The write side of a SQLite staged load's merge (Store/Staging/StagedFold.swift has the folds,
// their threads and the channel between them): each folded row written once, inserted or merged
// into its stored row (a folded row's values are held in HeldValues.swift's buffers).

/// The write side of one entity's merge: each identity's folded row (``StagedFold``'s) written
/// once — inserted, or merged into its stored row — with its links, on the write connection.
struct StagedMerge: FoldedRowWriter {
    let layout: EntityLayout
    /// Per column, its `default:` or `const:` fill, if any.
    private let fillBySlot: [(value: ScalarValue, always: Bool)?]
    private let insertLinks: [RawStatement]
    /// New rows are held back and inserted many at a time, each statement reading a ``RowFeed``:
    /// the rows, then per to-many the links of the rows that give it a set.
    private let insertFedRows: RawStatement
    private let insertFedLinks: [RawStatement]
    private let rowFeed: RowFeed
    private let linkFeeds: [RowFeed]
    /// Per to-many, where each held-back row's links begin in its feed.
    private var linkStarts: [[Int]]
    /// Per held-back row, whether it is a stub.
    private var heldBackStubs: [Bool] = []
    /// Per row held back: the record that gave it last (``RecordOrigin``).
    private var heldBackOrigins: [Int64] = []
    /// New rows are inserted once this many are held back (or ``MergedChunk/size`` bytes of them).
    static let feedRows = 4096
    /// The stored row of an identity (its rowid), if any.
    private let find: RawStatement
    /// A stored row updated where a given column differs: per column not of the identity, a
    /// flag (given or not) and a value, then the rowid; `nil` for an entity of identity only.
    private let update: RawStatement?
    /// The columns `update` binds, in order.
    private let updatable: [Int]
    /// Whether the entity's table held rows when the merge began: if not, no identity is looked
    /// up (a first load's merge only appends).
    private let tableHeldRows: Bool
    /// The identities stored when the merge began, when they are integers and few enough
    /// (``storedLimit``): an identity not among them is not looked up. A load that turned
    /// staged merges millions of new rows into tables holding its first few hundred thousand
    /// (people-10M: 14.6 million lookups that find nothing).
    private let storedIdentities: IntegerSet?
    /// The most rows (by the table's highest rowid) whose identities are read into ``storedIdentities``:
    /// two bytes each at most, 8 MiB.
    static let storedLimit: Int64 = 4_000_000
    /// Whether the chunks' rows go to the feeds as they are (``writeEncoded(_:at:)``): the table
    /// was empty when the merge began (no row to look up or merge into) and no column is filled.
    private let writesEncodedRows: Bool
    /// Per identity slot, where its value is in the chunk row being written (reused row after row).
    private var identityRanges: [Range<Int>] = []
    /// Per to-many, an owner's stored links (targets, then position when ordered), and their delete.
    private let selectLinks: [RawStatement]
    private let deleteLinks: [RawStatement]
    /// Per to-many, the identity values of one target (the bound parameters after the owner's).
    private let targetWidths: [Int]
    /// The current identity's folded row: the columns given, their values, the sets given.
    var values: HeldValues
    var given = ColumnMask()
    var sets: HeldValues
    var origin: Int64 = 0
    /// The rows inserted, and the stubs among them.
    private(set) var counts = EntityCounts()
    /// The rows the database refused (a trigger or constraint added to the table), with its
    /// message and the record that gave the row last (``RecordOrigin``): left out, with their
    /// links; SQLite undid the refused statement alone.
    private(set) var refusals: [(identity: IdentityKey, reason: String, origin: Int64)] = []

    init(connection: OpaquePointer, layout: EntityLayout, fills: [(slot: Int, value: ScalarValue, always: Bool)]) throws {
        self.layout = layout
        fillBySlot = layout.columns.indices.map { slot in fills.first { $0.slot == slot }.map { ($0.value, $0.always) } }
        let columns = layout.columns.map { SQLiteStore.quote($0.name) }
        func prepare(_ sql: String) throws -> RawStatement { try RawStatement(connection: connection, sql: sql) }
        let insertInto = "INSERT INTO \(SQLiteStore.quote(layout.table)) (\(columns.joined(separator: ", ")))"
        insertFedRows = try prepare("\(insertInto) \(RowFeed.select(arity: columns.count))")
        rowFeed = RowFeed()
        let linkNames = layout.toMany.map { toMany in
            (toMany.sourceColumns + toMany.targetColumns).map(SQLiteStore.quote) + (toMany.isOrdered ? ["\"position\""] : [])
        }
        insertLinks = try layout.toMany.indices.map { k in
            try prepare(
                "INSERT OR IGNORE INTO \(SQLiteStore.quote(layout.toMany[k].joinTable)) (\(linkNames[k].joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: linkNames[k].count).joined(separator: ", ")))"
            )
        }
        insertFedLinks = try layout.toMany.indices.map { k in
            try prepare(
                "INSERT OR IGNORE INTO \(SQLiteStore.quote(layout.toMany[k].joinTable)) (\(linkNames[k].joined(separator: ", "))) \(RowFeed.select(arity: linkNames[k].count))"
            )
        }
        linkFeeds = linkNames.map { _ in RowFeed() }
        linkStarts = linkNames.map { _ in [] }
        targetWidths = layout.toMany.map(\.targetColumns.count)
        values = HeldValues(count: layout.columns.count)
        sets = HeldValues(count: layout.toMany.count)
        let table = SQLiteStore.quote(layout.table)
        let byIdentity = layout.identitySlots.enumerated().map { "\(columns[$1]) = ?\($0 + 1)" }.joined(separator: " AND ")
        find = try prepare("SELECT rowid FROM \(table) WHERE \(byIdentity)")
        let any = try prepare("SELECT EXISTS (SELECT 1 FROM \(table))")
        defer { any.finalize() }
        var held = false
        try any.query { row in held = sqlite3_column_int64(row, 0) != 0 }
        tableHeldRows = held
        storedIdentities = held ? try StagedMerge.identities(of: layout, connection: connection) : nil
        writesEncodedRows = !held && fillBySlot.allSatisfy { $0 == nil }
        updatable = layout.columns.indices.filter { !layout.identitySlots.contains($0) }
        if updatable.isEmpty {
            update = nil
        } else {
            // `IS NOT` compares under the column's affinity, as the value would be stored: an equal
            // row is not written (no page dirtied), and `sqlite3_changes` says whether it was.
            let set = updatable.enumerated().map { j, slot in
                "\(columns[slot]) = CASE WHEN ?\(2 * j + 1) THEN ?\(2 * j + 2) ELSE \(columns[slot]) END"
            }
            let differs = updatable.enumerated().map { j, slot in "(?\(2 * j + 1) AND \(columns[slot]) IS NOT ?\(2 * j + 2))" }
            update = try prepare(
                "UPDATE \(table) SET \(set.joined(separator: ", ")) WHERE rowid = ?\(2 * updatable.count + 1) AND (\(differs.joined(separator: " OR ")))"
            )
        }
        selectLinks = try layout.toMany.map { toMany in
            let owner = toMany.sourceColumns.enumerated().map { "\(SQLiteStore.quote($1)) = ?\($0 + 1)" }.joined(separator: " AND ")
            let targets = toMany.targetColumns.map(SQLiteStore.quote) + (toMany.isOrdered ? ["\"position\""] : [])
            return try prepare("SELECT \(targets.joined(separator: ", ")) FROM \(SQLiteStore.quote(toMany.joinTable)) WHERE \(owner)")
        }
        deleteLinks = try layout.toMany.map { toMany in
            let owner = toMany.sourceColumns.enumerated().map { "\(SQLiteStore.quote($1)) = ?\($0 + 1)" }.joined(separator: " AND ")
            return try prepare("DELETE FROM \(SQLiteStore.quote(toMany.joinTable)) WHERE \(owner)")
        }
    }

    mutating func finalize() {
        clear()
        values.deallocate()
        sets.deallocate()
        insertFedRows.finalize()
        find.finalize()
        update?.finalize()
        for statement in insertLinks + insertFedLinks + selectLinks + deleteLinks { statement.finalize() }
    }

    /// Writes the current identity's row and links, then forgets them: a new row inserted, a
    /// stored one updated where its records differ from it (and its sets replaced where they
    /// differ), a stored row only referred to left alone.
    mutating func flush(stored report: (_ identity: IdentityKey, _ changed: Bool) -> Void) throws {
        let isStub = holdsStub
        if let rowid = try stored() {
            if !isStub {
                do {
                    report(identity(), try merge(into: rowid))
                } catch {
                    guard let refused = error as? RowRefused else { throw error }
                    refusals.append((identity(), refused.reason, origin))
                }
            }
            clear()
            return
        }
        heldBackStubs.append(isStub)
        heldBackOrigins.append(origin)
        for k in linkFeeds.indices { linkStarts[k].append(linkFeeds[k].count) }
        feed()
        clear()
        if rowFeed.count >= StagedMerge.feedRows || rowFeed.byteCount >= MergedChunk.size { try flushHeldBack() }
    }

    /// Inserts the rows held back and their links, a statement for the rows and one per
    /// to-many. Should the database refuse one of the rows (a trigger or a constraint added to
    /// the table), SQLite undoes that statement, and the rows are inserted one by one, so that
    /// only the refused row is left out (with its links), as before rows were held back.
    mutating func flushHeldBack() throws {
        let rows = rowFeed.count
        guard rows > 0 else { return }
        defer {
            rowFeed.removeAll()
            for feed in linkFeeds { feed.removeAll() }
            for k in linkStarts.indices { linkStarts[k].removeAll(keepingCapacity: true) }
            heldBackStubs.removeAll(keepingCapacity: true)
            heldBackOrigins.removeAll(keepingCapacity: true)
        }
        rowFeed.bind(to: insertFedRows.handle, at: 1)
        guard try refusal(of: insertFedRows) == nil else { return try insertHeldBackOneByOne() }
        counts.inserted += rows
        counts.stubs += heldBackStubs.reduce(0) { $0 + ($1 ? 1 : 0) }
        for k in linkFeeds.indices where linkFeeds[k].count > 0 {
            linkFeeds[k].bind(to: insertFedLinks[k].handle, at: 1)
            try insertFedLinks[k].execute()
        }
    }

    /// Inserts the held-back rows one at a time, each with its links: a row the database
    /// refuses is left out, with its links.
    private mutating func insertHeldBackOneByOne() throws {
        for row in 0..<rowFeed.count {
            rowFeed.window = row..<(row + 1)
            rowFeed.bind(to: insertFedRows.handle, at: 1)
            if let reason = try refusal(of: insertFedRows) {
                let key = layout.identitySlots.map { slot in
                    rowFeed.value(row: row, column: slot, bool: layout.columns[slot].type == .bool)
                }
                refusals.append((key.count == 1 ? .single(key[0]) : .composite(key), reason, heldBackOrigins[row]))
                continue
            }
            counts.inserted += 1
            if heldBackStubs[row] { counts.stubs += 1 }
            for k in linkFeeds.indices {
                let end = row + 1 < linkStarts[k].count ? linkStarts[k][row + 1] : linkFeeds[k].count
                guard linkStarts[k][row] < end else { continue }
                linkFeeds[k].window = linkStarts[k][row]..<end
                linkFeeds[k].bind(to: insertFedLinks[k].handle, at: 1)
                try insertFedLinks[k].execute()
            }
        }
    }

    /// Holds back the new row at `at` in a chunk without holding its values: its columns are
    /// already in the row feed's format (``MergedChunk``), copied in one piece, and its links fed
    /// from its sets' bytes. Why: holding each value (``FoldedRowWriter``'s `load`) then feeding it
    /// copied every value twice on the merge's writer, the thread that bounds it; people-200k's
    /// writer spent a third of its merge outside SQLite (docs/performance-notes.md, "The deferred
    /// index's sort, the merge's writer and its memory").
    mutating func writeEncoded(_ chunk: UnsafeRawBufferPointer, at: inout Int) throws -> Bool {
        guard writesEncodedRows else { return false }
        if identityRanges.count != layout.identitySlots.count { identityRanges = layout.identitySlots.map { _ in 0..<0 } }
        var nonIdentity = ColumnMask(low: LittleEndian.integer(chunk, at, 8), high: LittleEndian.integer(chunk, at + 8, 8))
        let origin = Int64(bitPattern: LittleEndian.integer(chunk, at + 16, 8))
        var end = at + 24
        let columns = end
        var identity = 0
        for slot in layout.columns.indices {
            guard let next = StagedRow.end(ofValueAt: end, in: chunk) else { throw StagedRow.malformed(layout) }
            if identity < identityRanges.count, layout.identitySlots[identity] == slot {
                identityRanges[identity] = end..<next
                identity += 1
            }
            end = next
        }
        rowFeed.beginRow()
        rowFeed.appendEncoded(UnsafeRawBufferPointer(rebasing: chunk[columns..<end]))
        for k in linkFeeds.indices { linkStarts[k].append(linkFeeds[k].count) }
        var holdsSet = false
        for k in layout.toMany.indices {
            guard let next = StagedRow.end(ofValueAt: end, in: chunk) else { throw StagedRow.malformed(layout) }
            if Int32(chunk[end]) == SQLITE_BLOB {
                holdsSet = true
                let ranges = identityRanges
                feedLinks(k, UnsafeRawBufferPointer(rebasing: chunk[(end + 5)..<next])) { feed in
                    for range in ranges { feed.appendEncoded(UnsafeRawBufferPointer(rebasing: chunk[range])) }
                }
            }
            end = next
        }
        at = end
        for slot in layout.identitySlots { nonIdentity = nonIdentity.removing(slot) }
        heldBackStubs.append(nonIdentity == ColumnMask() && !holdsSet)
        heldBackOrigins.append(origin)
        if rowFeed.count >= StagedMerge.feedRows || rowFeed.byteCount >= MergedChunk.size { try flushHeldBack() }
        return true
    }

    /// Appends the held row (its fills applied) to the row feed, and its links to the link feeds.
    private func feed() {
        rowFeed.beginRow()
        for slot in layout.columns.indices {
            if let fill = fillBySlot[slot], fill.always || !values.holds(slot) {
                rowFeed.append(fill.value)
            } else {
                rowFeed.append(slot, of: values)
            }
        }
        // The closure captures these locals, not `self`: a closure that reads a stored property
        // copies the whole merge (a retain per reference it holds) for every row.
        let values = values
        let identitySlots = layout.identitySlots
        for k in layout.toMany.indices where sets.holds(k) {
            feedLinks(k, sets.bytes(k)) { feed in
                for slot in identitySlots { feed.append(slot, of: values) }
            }
        }
    }

    /// Appends to-many `k`'s links given in `bytes` (a row's sets, ``StagedSets``) to its link
    /// feed: per target a feed row of the owner's identity (`owner` appends it), the target's
    /// values, and its position when the to-many is ordered.
    private func feedLinks(_ k: Int, _ bytes: UnsafeRawBufferPointer, owner: (RowFeed) -> Void) {
        let feed = linkFeeds[k]
        let width = targetWidths[k]
        let ordered = layout.toMany[k].isOrdered
        StagedSets.sets(in: bytes) { setK, range in
            guard setK == k else { return }
            var position: Int64 = 0
            var given = 0
            StagedSets.forEachTarget(
                in: bytes, range,
                value: { value, _ in
                    if given == 0 {
                        feed.beginRow()
                        owner(feed)
                    }
                    if given < width { feed.append(value) }
                    given += 1
                },
                end: {
                    // A row has the feed's arity whatever the target gave.
                    if given == 0 {
                        feed.beginRow()
                        owner(feed)
                    }
                    for _ in min(given, width)..<width { feed.append(.null) }
                    if ordered { feed.append(.integer(position)) }
                    position += 1
                    given = 0
                })
        }
    }

    /// Runs `statement`; the database's message when it refused the row (a trigger or
    /// constraint: SQLite undid the statement alone), `nil` when it ran.
    private func refusal(of statement: RawStatement) throws -> String? {
        do {
            try statement.execute()
            return nil
        } catch {
            guard let reason = StoreError.refusedValue(error) else { throw error }
            return reason
        }
    }

    /// The rowid of the current identity's stored row, if it has one (none in a table that was
    /// empty when the merge began: each identity is merged once).
    private func stored() throws -> Int64? {
        guard tableHeldRows else { return nil }
        if let storedIdentities, case .integer(let id) = values.scalar(layout.identitySlots[0], bool: false), !storedIdentities.contains(id)
        {
            return nil
        }
        for (index, slot) in layout.identitySlots.enumerated() { values.bind(slot, to: find.handle, at: Int32(index + 1)) }
        var rowid: Int64?
        try find.query { row in rowid = sqlite3_column_int64(row, 0) }
        return rowid
    }

    /// The identities of the rows in `layout`'s table, when it has one integer identity column
    /// and at most ``storedLimit`` rows, all of them integers; `nil` otherwise.
    private static func identities(of layout: EntityLayout, connection: OpaquePointer) throws -> IntegerSet? {
        guard layout.identitySlots.count == 1, layout.columns[layout.identitySlots[0]].type == .integer else { return nil }
        let table = SQLiteStore.quote(layout.table)
        let highest = try RawStatement(connection: connection, sql: "SELECT max(rowid) FROM \(table)")
        defer { highest.finalize() }
        var rows: Int64 = .max
        try highest.query { row in rows = sqlite3_column_int64(row, 0) }
        guard rows <= storedLimit else { return nil }
        let column = SQLiteStore.quote(layout.columns[layout.identitySlots[0]].name)
        let select = try RawStatement(connection: connection, sql: "SELECT \(column) FROM \(table)")
        defer { select.finalize() }
        var set = IntegerSet()
        var integers = true
        try select.query { row in
            if sqlite3_column_type(row, 0) == SQLITE_INTEGER { set.insert(sqlite3_column_int64(row, 0)) } else { integers = false }
        }
        return integers ? set : nil
    }

    /// The current identity, as the mapper makes it (SQLite gives booleans back as integers).
    private func identity() -> IdentityKey {
        let values = layout.identitySlots.map { slot in self.values.scalar(slot, bool: layout.columns[slot].type == .bool) }
        return values.count == 1 ? .single(values[0]) : .composite(values)
    }

    /// Updates stored row `rowid` with the given columns (and `const:` ones) where they differ,
    /// replaces each given set that differs from the stored links; whether anything changed.
    private func merge(into rowid: Int64) throws -> Bool {
        var changed = false
        if let update {
            for (j, slot) in updatable.enumerated() {
                let flag = Int32(2 * j + 1)
                if let fill = fillBySlot[slot], fill.always {
                    sqlite3_bind_int(update.handle, flag, 1)
                    update.bind(fill.value, at: flag + 1)
                } else if values.holds(slot) {
                    sqlite3_bind_int(update.handle, flag, 1)
                    values.bind(slot, to: update.handle, at: flag + 1)
                } else {
                    sqlite3_bind_int(update.handle, flag, 0)
                    sqlite3_bind_null(update.handle, flag + 1)
                }
            }
            update.bind(.integer(rowid), at: Int32(2 * updatable.count + 1))
            // Undone alone (the statement); the row's sets are left as they are too.
            if let reason = try refusal(of: update) { throw RowRefused(reason: reason) }
            if let connection = sqlite3_db_handle(update.handle), sqlite3_changes(connection) > 0 { changed = true }
        }
        for k in 0..<layout.toMany.count where sets.holds(k) {
            guard try !storedSetEquals(k) else { continue }
            for (index, slot) in layout.identitySlots.enumerated() {
                values.bind(slot, to: deleteLinks[k].handle, at: Int32(index + 1))
            }
            try deleteLinks[k].execute()
            try insertSet(k)
            changed = true
        }
        return changed
    }

    /// Whether the stored links of the current identity through to-many `k` are the held set:
    /// each target once, at the position of its first occurrence when ordered (as `insertSet`
    /// stores it).
    private func storedSetEquals(_ k: Int) throws -> Bool {
        let bytes = sets.bytes(k)
        let ordered = layout.toMany[k].isOrdered
        var wanted: [[ScalarValue]: Int64] = [:]
        var target: [ScalarValue] = []
        var position: Int64 = 0
        StagedSets.sets(in: bytes) { setK, range in
            guard setK == k else { return }
            // SQLite stores booleans as 0 and 1: compared as it reads them back.
            StagedSets.forEachTarget(
                in: bytes, range,
                value: { value, _ in
                    if case .bool(let b) = value { target.append(.integer(b ? 1 : 0)) } else { target.append(value) }
                },
                end: {
                    if wanted[target] == nil { wanted[target] = ordered ? position : 0 }
                    target.removeAll(keepingCapacity: true)
                    position += 1
                })
        }
        let select = selectLinks[k]
        for (index, slot) in layout.identitySlots.enumerated() { values.bind(slot, to: select.handle, at: Int32(index + 1)) }
        return try BatchWriter.storedLinks(of: select, equal: wanted, targetWidth: Int32(targetWidths[k]), ordered: ordered)
    }

    /// Inserts the held set of to-many `k` as the current identity's links.
    private func insertSet(_ k: Int) throws {
        let bytes = sets.bytes(k)
        let statement = insertLinks[k]
        let owner = Int32(layout.identitySlots.count)
        let targetWidth = targetWidths[k]
        for (index, slot) in layout.identitySlots.enumerated() { values.bind(slot, to: statement.handle, at: Int32(index + 1)) }
        try StagedSets.sets(in: bytes) { setK, range in
            guard setK == k else { return }
            // Each target's values are bound as they are read; a complete target is written.
            var position: Int64 = 0
            try StagedSets.forEachTarget(
                in: bytes, range, value: { value, index in statement.bind(value, at: owner + Int32(index) + 1) },
                end: {
                    if layout.toMany[k].isOrdered { statement.bind(.integer(position), at: owner + Int32(targetWidth) + 1) }
                    try statement.execute()
                    position += 1
                })
        }
    }

    private mutating func clear() {
        values.clear()
        sets.clear()
        given = ColumnMask()
    }
}

/// The database refused a merged row's own statement (its insert or update), which it undid:
/// the row is left out. A refused link fails the merge (the row's other statements stand).
private struct RowRefused: Error {
    let reason: String
}
