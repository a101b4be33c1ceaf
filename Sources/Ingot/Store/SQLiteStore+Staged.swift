import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// Staged loading (`ingot run --bulk`): a big load written the way a database loads a dump
/// instead of row by row.
///
/// Find-or-create costs each record a few random page touches (the identity index, the row, the
/// rows it links to, the join table). While the tables fit in the page cache that is cheap; once
/// they are several times bigger, every touch is a read and, at the next commit, a write of a
/// whole page: people-10M ran at a tenth of people-200k's rate per record (docs/benchmarks.md,
/// session 10). A staged load does no lookup and touches no table page while the run lasts:
///
/// 1. each batch's rows, folded as always (one row per identity per batch, later records win
///    key by key), are appended to a staging table per entity (`_ingot_stage_<table>`) with the
///    mask of the columns the records gave and their to-many sets (a compact blob); batches
///    commit with the resume point as usual, so `kill -9` and `--resume` keep their guarantees;
/// 2. when the source is exhausted, each staging table is read back sorted by identity, then by
///    arrival (SQLite's sorter, spilling to temporary files: memory stays bounded), and each
///    identity's rows are merged with the same rules — a column takes the value of the last row
///    that gave it, a to-many the last set given — and written once, in identity order, so every
///    B-tree only grows at its right edge; then the staging tables are emptied. All of it in the
///    run's last transaction: the tables change only when the load commits whole.
/// 3. into tables that hold rows, each merged identity is looked up as it comes — in identity
///    order, so the stored rows are read in one sweep — and a stored row is updated only where a
///    given column differs, its sets replaced only where they differ; a stored row only referred
///    to is left alone.
///
/// What needs a stored row to decide (`insert_only`/`update_only`/`replace`, `missing:
/// reject|ignore`, relationship `operations:`, owned rows, parent entities, inverse
/// relationships, entities without identity) is refused before the run starts.
extension SQLiteStore {
    /// Why `model` cannot be loaded staged; empty when it can.
    static func stagedLoadObstacles(_ model: EntityModel, _ layouts: [EntityLayout]) -> [String] {
        var reasons: [String] = []
        for (entity, layout) in zip(model.entities, layouts) {
            if entity.identityAttributes.isEmpty { reasons.append("entity \(entity.name) has no identity") }
            if entity.parent != nil { reasons.append("entity \(entity.name) has a parent") }
            if model.entities.contains(where: { $0.parent == entity.name }) { reasons.append("entity \(entity.name) is a parent") }
            for relationship in entity.relationships {
                if relationship.missing != .stub { reasons.append("\(entity.name).\(relationship.name) does not stub missing targets") }
                if !relationship.insertsTargets || !relationship.updatesTargets || !relationship.deletesLinks {
                    reasons.append("\(entity.name).\(relationship.name) limits its operations")
                }
            }
            for toMany in layout.toMany {
                let name = "\(entity.name).\(entity.relationships[toMany.relationship].name)"
                if toMany.isOwned { reasons.append("\(name) is owned") }
                if toMany.isInverse || toMany.isForeignKey { reasons.append("\(name) has an inverse") }
                if toMany.keepsLinks { reasons.append("\(name) only adds links") }
            }
            if layout.toMany.count > 255 { reasons.append("entity \(entity.name) has more than 255 to-many relationships") }
        }
        return reasons
    }

    /// The page cache of a staged load, in KiB.
    static let stagedCacheKiB = 8192

    /// The staging table of entity `layout`.
    static func stageTable(_ layout: EntityLayout) -> String { "_ingot_stage_\(layout.table)" }

    /// Prepares a staged load: the model must allow it, and the staging tables are created — emptied too, unless this run resumes one that staged
    /// rows already (`resuming`).
    func prepareStagedLoad(resuming: Bool) throws {
        let obstacles = SQLiteStore.stagedLoadObstacles(model, layouts)
        if !obstacles.isEmpty {
            throw StoreError.conflict("--bulk cannot load this pipeline: " + obstacles.joined(separator: "; "))
        }
        try dbQueue.inDatabase { db in
            // Sorts spill to temporary files; a small page cache: staging only appends, the merge
            // writes in key order, and SQLite's sorter takes as much memory again as the cache
            // for each sorted run it keeps in memory (40 MiB each: people-1M peaked at 184 MiB).
            try db.execute(sql: "PRAGMA temp_store = FILE; PRAGMA cache_size = -\(SQLiteStore.stagedCacheKiB)")
            for layout in layouts {
                let columns = layout.columns.map { SQLiteStore.quote($0.name) }.joined(separator: ", ")
                let stage = SQLiteStore.quote(SQLiteStore.stageTable(layout))
                try db.execute(
                    sql: "CREATE TABLE IF NOT EXISTS \(stage) (\"_ingot_mask_low\", \"_ingot_mask_high\", \"_ingot_sets\", \(columns))")
                if !resuming { try db.execute(sql: "DELETE FROM \(stage)") }
            }
        }
        staging.store(true, ordering: .releasing)
    }

    /// Turns this load staged when the database file has grown to ``stageAfterBytes`` (and the
    /// pipeline allows it): from the next batch on, batches are staged and merged at the end,
    /// the way `--bulk` loads. Called by the writer between transactions. Whether it did.
    ///
    /// Why: batch by batch, a record costs a few random page touches; cheap while the tables
    /// fit in the page cache, a read and a page written per touch once they are several times
    /// bigger (people-1M 17 s, people-10M 738 s). Staged, the rest of the load costs the same per
    /// record whatever the tables' size, and the rows written so far are read in one sweep.
    package func startStagingIfOutgrown() throws -> Bool {
        guard !isStaging, let limit = stageAfterBytes else { return false }
        let bytes = try dbQueue.inDatabase { db in
            try Int.fetchOne(db, sql: "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()") ?? 0
        }
        guard bytes >= limit else { return false }
        try prepareStagedLoad(resuming: false)
        return true
    }

    /// A stopped run (a signal) interrupts a staged load's merge, which can take minutes: it
    /// rolls back (the staged rows stay; `--bulk --resume` merges again) and the run ends as
    /// interrupted. Anything else SQLite does finishes on its own within the grace period (SQLite
    /// has no server to wait for), so only the merge is interrupted. Safe from any thread
    /// (`sqlite3_interrupt`).
    package func interrupt() {
        guard isMerging.load(ordering: .sequentiallyConsistent), let connection else { return }
        sqlite3_interrupt(connection)
    }

    /// Staging tables holding rows of a staged load that did not finish, when this run is not
    /// one: such a load is resumed with `--bulk --resume`, or its rows would never reach the tables.
    func unfinishedStagedLoad() throws -> [String] {
        try dbQueue.inDatabase { db in
            try layouts.map(SQLiteStore.stageTable).filter { table in
                try db.tableExists(table) && Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM \(SQLiteStore.quote(table)))") == true
            }
        }
    }

    /// Appends a batch's rows to the staging tables (the store's ``write(_:then:)`` in a staged load).
    func stage(_ batch: ResolvedBatch) throws {
        for (entity, rows) in batch.rows.merged.enumerated() where !rows.rows.isEmpty {
            let layout = layouts[entity]
            let names = layout.columns.map { SQLiteStore.quote($0.name) }.joined(separator: ", ")
            let marks = Array(repeating: "?", count: layout.columns.count + 3).joined(separator: ", ")
            let insert = try statement(
                "INSERT INTO \(SQLiteStore.quote(SQLiteStore.stageTable(layout))) (\"_ingot_mask_low\", \"_ingot_mask_high\", \"_ingot_sets\", \(names)) VALUES (\(marks))"
            )
            var sets: [UInt8] = []
            try rows.rows.withUnsafeBufferPointer { all in
                try rows.storage.withView { values in
                    for row in all where row.identity != nil {
                        // The identity is always given (a stub's row too): the merge groups by it.
                        var mask = row.mask
                        for slot in layout.identitySlots { mask.insert(slot) }
                        insert.bind(.integer(Int64(bitPattern: mask.low)), at: 1)
                        insert.bind(.integer(Int64(bitPattern: mask.high)), at: 2)
                        sets.removeAll(keepingCapacity: true)
                        for k in layout.toMany.indices {
                            guard let targets = rows.storage.linkSets[row.linkStart + k] else { continue }
                            StagedSets.append(k, targets, to: &sets)
                        }
                        if sets.isEmpty {
                            sqlite3_bind_null(insert.handle, 3)
                        } else {
                            _ = sets.withUnsafeBytes {
                                sqlite3_bind_blob(insert.handle, 3, $0.baseAddress, Int32($0.count), RawStatement.transient)
                            }
                        }
                        for slot in layout.columns.indices {
                            if mask.contains(slot) {
                                insert.bind(values, row.valueStart + slot, at: Int32(slot + 4))
                            } else {
                                insert.bind(.null, at: Int32(slot + 4))
                            }
                        }
                        try insert.execute()
                    }
                }
            }
        }
    }

    /// Merges the staged rows into the tables, each identity once, in identity order (see the
    /// type's notes), fills `default:` and `const:` columns as inserts do, and empties the
    /// staging tables. Returns, per entity, the rows inserted (and the stubs among them: rows
    /// whose records gave nothing but their identity); calls `stored` with each stored row the
    /// load's records mentioned, and whether merging changed it. Runs in the open transaction.
    package func mergeStaged(
        fills: [[(slot: Int, value: ScalarValue, always: Bool)]], stored: (_ entity: Int, _ identity: IdentityKey, _ changed: Bool) -> Void
    ) throws -> [EntityCounts] {
        isMerging.store(true, ordering: .sequentiallyConsistent)
        defer { isMerging.store(false, ordering: .sequentiallyConsistent) }
        return try dbQueue.writeWithoutTransaction { db in
            if !db.isInsideTransaction { try db.beginTransaction(.immediate) }
            guard let connection else { throw StoreError.schema("the store is closed") }
            var counts: [EntityCounts] = []
            for (entity, layout) in layouts.enumerated() {
                var merger = try StagedMerge(
                    connection: connection, layout: layout, fills: fills.indices.contains(entity) ? fills[entity] : [])
                defer { merger.finalize() }
                counts.append(try merger.run { identity, changed in stored(entity, identity, changed) })
                try db.execute(sql: "DELETE FROM \(SQLiteStore.quote(SQLiteStore.stageTable(layout)))")
            }
            return counts
        }
    }
}

/// The to-many sets of a staged row, as one blob: per set given, its relationship's index (one
/// byte), the number of targets (4 bytes), then each target's identity values (a count byte,
/// then per value a type byte and its bytes, little-endian). Written and read back by this
/// store only, within one load.
enum StagedSets {
    static func append(_ k: Int, _ targets: [IdentityKey], to out: inout [UInt8]) {
        out.append(UInt8(truncatingIfNeeded: k))
        appendInteger(UInt64(targets.count), bytes: 4, to: &out)
        for target in targets {
            let values = target.values
            out.append(UInt8(truncatingIfNeeded: values.count))
            for value in values {
                switch value {
                case .null: out.append(0)
                case .integer(let v):
                    out.append(1)
                    appendInteger(UInt64(bitPattern: v), bytes: 8, to: &out)
                case .real(let v):
                    out.append(2)
                    appendInteger(v.bitPattern, bytes: 8, to: &out)
                case .bool(let v): out.append(v ? 4 : 3)
                case .text(let s):
                    out.append(5)
                    let utf8 = Array(s.utf8)
                    appendInteger(UInt64(utf8.count), bytes: 4, to: &out)
                    out += utf8
                }
            }
        }
    }

    /// Calls `body` with each set in `bytes`: its relationship index and where its targets are.
    /// A truncated blob (never written so) ends the walk.
    static func sets(in bytes: UnsafeRawBufferPointer, _ body: (_ k: Int, _ targets: Range<Int>) throws -> Void) rethrows {
        var at = 0
        while at + 5 <= bytes.count {
            let k = Int(bytes[at])
            let count = Int(integer(bytes, at + 1, 4))
            at += 5
            let start = at
            for _ in 0..<count {
                guard let next = skipTarget(bytes, at) else { return }
                at = next
            }
            try body(k, start..<at)
        }
    }

    /// Walks the targets of the set at `range`: `value` with each of a target's values (and its
    /// index among them), then `end` once the target is complete.
    static func forEachTarget(
        in bytes: UnsafeRawBufferPointer, _ range: Range<Int>, value: (_ value: ScalarValue, _ index: Int) -> Void,
        end: () throws -> Void
    ) rethrows {
        var at = range.lowerBound
        while at < range.upperBound {
            let n = Int(bytes[at])
            at += 1
            for index in 0..<n {
                let tag = bytes[at]
                at += 1
                switch tag {
                case 1:
                    value(.integer(Int64(bitPattern: integer(bytes, at, 8))), index)
                    at += 8
                case 2:
                    value(.real(Double(bitPattern: integer(bytes, at, 8))), index)
                    at += 8
                case 3: value(.bool(false), index)
                case 4: value(.bool(true), index)
                case 5:
                    let length = Int(integer(bytes, at, 4))
                    at += 4
                    value(.text(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[at..<(at + length)]), as: UTF8.self)), index)
                    at += length
                default: value(.null, index)
                }
            }
            try end()
        }
    }

    /// Where the target at `at` ends; `nil` past the blob's end.
    private static func skipTarget(_ bytes: UnsafeRawBufferPointer, _ start: Int) -> Int? {
        var at = start
        guard at < bytes.count else { return nil }
        let n = Int(bytes[at])
        at += 1
        for _ in 0..<n {
            guard at < bytes.count else { return nil }
            let tag = bytes[at]
            at += 1
            switch tag {
            case 1, 2: at += 8
            case 5:
                guard at + 4 <= bytes.count else { return nil }
                at += 4 + Int(integer(bytes, at, 4))
            default: break
            }
        }
        return at <= bytes.count ? at : nil
    }

    private static func integer(_ bytes: UnsafeRawBufferPointer, _ at: Int, _ count: Int) -> UInt64 {
        var v: UInt64 = 0
        for i in 0..<count where at + i < bytes.count { v |= UInt64(bytes[at + i]) << UInt64(8 * i) }
        return v
    }

    private static func appendInteger(_ v: UInt64, bytes: Int, to out: inout [UInt8]) {
        for i in 0..<bytes { out.append(UInt8(truncatingIfNeeded: v >> UInt64(8 * i))) }
    }
}

/// One entity's merge of a staged load: reads the staging table sorted by identity then arrival,
/// keeps for each column the last value given (a copy of SQLite's value, bound as it was read)
/// and for each to-many the last set given, and writes each identity's row and links once.
private struct StagedMerge {
    let layout: EntityLayout
    let fills: [(slot: Int, value: ScalarValue, always: Bool)]
    private let read: RawStatement
    private let insertRow: RawStatement
    private let insertLinks: [RawStatement]
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
    /// Per to-many, an owner's stored links (targets, then position when ordered), and their delete.
    private let selectLinks: [RawStatement]
    private let deleteLinks: [RawStatement]
    /// Per to-many, the identity values of one target (the bound parameters after the owner's).
    private let targetWidths: [Int]
    /// The current identity's merged state.
    private var values: HeldValues
    private var given = ColumnMask()
    private var sets: HeldValues
    private var counts = EntityCounts()
    private var hasGroup = false

    init(connection: OpaquePointer, layout: EntityLayout, fills: [(slot: Int, value: ScalarValue, always: Bool)]) throws {
        self.layout = layout
        self.fills = fills
        let columns = layout.columns.map { SQLiteStore.quote($0.name) }
        let identity = layout.identitySlots.map { columns[$0] }.joined(separator: ", ")
        func prepare(_ sql: String) throws -> RawStatement { try RawStatement(connection: connection, sql: sql) }
        read = try prepare(
            "SELECT \"_ingot_mask_low\", \"_ingot_mask_high\", \"_ingot_sets\", \(columns.joined(separator: ", ")) FROM \(SQLiteStore.quote(SQLiteStore.stageTable(layout))) ORDER BY \(identity), rowid"
        )
        insertRow = try prepare(
            "INSERT INTO \(SQLiteStore.quote(layout.table)) (\(columns.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: columns.count).joined(separator: ", ")))"
        )
        insertLinks = try layout.toMany.map { toMany in
            var names = (toMany.sourceColumns + toMany.targetColumns).map(SQLiteStore.quote)
            if toMany.isOrdered { names.append("\"position\"") }
            return try prepare(
                "INSERT OR IGNORE INTO \(SQLiteStore.quote(toMany.joinTable)) (\(names.joined(separator: ", "))) VALUES (\(Array(repeating: "?", count: names.count).joined(separator: ", ")))"
            )
        }
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
        read.finalize()
        insertRow.finalize()
        find.finalize()
        update?.finalize()
        for statement in insertLinks + selectLinks + deleteLinks { statement.finalize() }
    }

    /// Merges every staged identity; `stored` is called with each stored row the records
    /// mentioned, and whether it changed. Returns the rows inserted.
    mutating func run(stored: (_ identity: IdentityKey, _ changed: Bool) -> Void) throws -> EntityCounts {
        let read = self.read.handle
        while try self.read.step() {
            if hasGroup && !sameIdentity() { try flush(stored: stored) }
            hasGroup = true
            let mask = ColumnMask(
                low: UInt64(bitPattern: sqlite3_column_int64(read, 0)), high: UInt64(bitPattern: sqlite3_column_int64(read, 1)))
            for slot in layout.columns.indices where mask.contains(slot) {
                values.hold(slot, from: read, column: Int32(slot + 3))
            }
            given.formUnion(mask)
            if sqlite3_column_type(read, 2) == SQLITE_BLOB, let blob = sqlite3_column_blob(read, 2) {
                let bytes = UnsafeRawBufferPointer(start: blob, count: Int(sqlite3_column_bytes(read, 2)))
                // The blob is kept whole for each set it gives (the last set given wins).
                var setsGiven: [Int] = []
                StagedSets.sets(in: bytes) { k, _ in if k < layout.toMany.count { setsGiven.append(k) } }
                for k in setsGiven { sets.hold(k, from: read, column: 2) }
            }
        }
        if hasGroup { try flush(stored: stored) }
        return counts
    }

    /// Whether the current row has the current group's identity.
    private func sameIdentity() -> Bool {
        layout.identitySlots.allSatisfy { values.equals($0, read.handle, column: Int32($0 + 3)) }
    }

    /// Writes the current identity's row and links, then forgets them: a new row inserted, a
    /// stored one updated where its records differ from it (and its sets replaced where they
    /// differ), a stored row only referred to left alone.
    private mutating func flush(stored report: (_ identity: IdentityKey, _ changed: Bool) -> Void) throws {
        var nonIdentity = given
        for slot in layout.identitySlots { nonIdentity = nonIdentity.removing(slot) }
        let isStub = nonIdentity == ColumnMask() && !sets.holdsAny
        if let rowid = try stored() {
            if !isStub { report(identity(), try merge(into: rowid)) }
            clear()
            return
        }
        for slot in layout.columns.indices {
            let index = Int32(slot + 1)
            if let fill = fills.first(where: { $0.slot == slot }), fill.always || !values.holds(slot) {
                insertRow.bind(fill.value, at: index)
            } else {
                values.bind(slot, to: insertRow.handle, at: index)
            }
        }
        try insertRow.execute()
        counts.inserted += 1
        if isStub { counts.stubs += 1 }
        for k in 0..<layout.toMany.count where sets.holds(k) { try insertSet(k) }
        clear()
    }

    /// The rowid of the current identity's stored row, if it has one (none in a table that was
    /// empty when the merge began: each identity is merged once).
    private func stored() throws -> Int64? {
        guard tableHeldRows else { return nil }
        for (index, slot) in layout.identitySlots.enumerated() { values.bind(slot, to: find.handle, at: Int32(index + 1)) }
        var rowid: Int64?
        try find.query { row in rowid = sqlite3_column_int64(row, 0) }
        return rowid
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
                if let fill = fills.first(where: { $0.slot == slot }), fill.always {
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
            try update.execute()
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
        let width = Int32(targetWidths[k])
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
        hasGroup = false
    }
}

/// Column values copied out of a result row, each into a buffer of its own that is reused row
/// after row (no allocation once it is big enough; copying each value with `sqlite3_value_dup`
/// cost a `malloc` and a `free` per value), and bound back `SQLITE_STATIC` from there.
private struct HeldValues {
    /// Per value: its SQLite type, 0 when none is held.
    private var types: [Int32]
    private var integers: [Int64]
    private var reals: [Double]
    private var buffers: [UnsafeMutableRawPointer?]
    private var capacities: [Int]
    private var counts: [Int]

    init(count: Int) {
        types = Array(repeating: 0, count: count)
        integers = Array(repeating: 0, count: count)
        reals = Array(repeating: 0, count: count)
        buffers = Array(repeating: nil, count: count)
        capacities = Array(repeating: 0, count: count)
        counts = Array(repeating: 0, count: count)
    }

    var holdsAny: Bool { types.contains { $0 != 0 } }

    func holds(_ i: Int) -> Bool { types[i] != 0 }

    /// Holds column `column` of `statement`'s current row as value `i`.
    mutating func hold(_ i: Int, from statement: OpaquePointer, column: Int32) {
        let type = sqlite3_column_type(statement, column)
        types[i] = type
        switch type {
        case SQLITE_INTEGER: integers[i] = sqlite3_column_int64(statement, column)
        case SQLITE_FLOAT: reals[i] = sqlite3_column_double(statement, column)
        case SQLITE_TEXT, SQLITE_BLOB:
            // The text's bytes (UTF-8, as stored) or the blob's; asked for in that order, as SQLite wants.
            let source =
                type == SQLITE_TEXT ? UnsafeRawPointer(sqlite3_column_text(statement, column)) : sqlite3_column_blob(statement, column)
            let count = Int(sqlite3_column_bytes(statement, column))
            if count > capacities[i] {
                buffers[i]?.deallocate()
                capacities[i] = max(count, 64)
                buffers[i] = UnsafeMutableRawPointer.allocate(byteCount: capacities[i], alignment: 8)
            }
            if count > 0, let source, let buffer = buffers[i] { buffer.copyMemory(from: source, byteCount: count) }
            counts[i] = count
        default: break
        }
    }

    /// Binds value `i` (NULL when none is held) as parameter `index` of `statement`.
    func bind(_ i: Int, to statement: OpaquePointer, at index: Int32) {
        switch types[i] {
        case SQLITE_INTEGER: sqlite3_bind_int64(statement, index, integers[i])
        case SQLITE_FLOAT: sqlite3_bind_double(statement, index, reals[i])
        case SQLITE_TEXT:
            if let buffer = buffers[i], counts[i] > 0 {
                sqlite3_bind_text(statement, index, buffer.assumingMemoryBound(to: CChar.self), Int32(counts[i]), RawStatement.static)
            } else {
                sqlite3_bind_text(statement, index, "", 0, RawStatement.static)
            }
        case SQLITE_BLOB: sqlite3_bind_blob(statement, index, buffers[i], Int32(counts[i]), RawStatement.static)
        default: sqlite3_bind_null(statement, index)
        }
    }

    /// Whether value `i` is held and equals column `column` of `statement`'s current row.
    func equals(_ i: Int, _ statement: OpaquePointer, column: Int32) -> Bool {
        let type = sqlite3_column_type(statement, column)
        guard types[i] != 0, type == types[i] else { return false }
        switch type {
        case SQLITE_INTEGER: return sqlite3_column_int64(statement, column) == integers[i]
        case SQLITE_FLOAT: return sqlite3_column_double(statement, column) == reals[i]
        case SQLITE_TEXT, SQLITE_BLOB:
            let source =
                type == SQLITE_TEXT ? UnsafeRawPointer(sqlite3_column_text(statement, column)) : sqlite3_column_blob(statement, column)
            let count = Int(sqlite3_column_bytes(statement, column))
            guard count == counts[i] else { return false }
            guard count > 0, let source, let buffer = buffers[i] else { return true }
            return memcmp(source, buffer, count) == 0
        default: return true
        }
    }

    /// The bytes of value `i` (a blob or text); empty when none are held.
    func bytes(_ i: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: buffers[i], count: types[i] == 0 ? 0 : counts[i])
    }

    /// Value `i` as a ``ScalarValue`` (`bool`: an integer read back as a boolean).
    func scalar(_ i: Int, bool: Bool) -> ScalarValue {
        switch types[i] {
        case SQLITE_INTEGER: bool ? .bool(integers[i] != 0) : .integer(integers[i])
        case SQLITE_FLOAT: .real(reals[i])
        case SQLITE_TEXT, SQLITE_BLOB: .text(String(decoding: bytes(i), as: UTF8.self))
        default: .null
        }
    }

    /// Forgets every value (the buffers stay, for the next row).
    mutating func clear() {
        for i in types.indices { types[i] = 0 }
    }

    func deallocate() {
        for buffer in buffers { buffer?.deallocate() }
    }

}
