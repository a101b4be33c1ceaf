import GRDBSQLite

/// Rows handed to SQLite in one statement instead of one statement per row:
/// `INSERT INTO t (…) SELECT c0, …, c9 FROM ingot_feed_10(?1)`, `?1` bound to a feed with
/// ``bind(to:at:)``. `ingot_feed_N` is a table-valued function (an eponymous virtual table of N
/// columns and a hidden one, the feed) that reads the feed's rows in order.
///
/// Why: a staged load's merge wrote each new row and each link with a statement of its own, and
/// SQLite, not Ingot, was most of the merge's writer (people-1M: 63 % of its samples). One
/// statement over many rows keeps its cursors open on the table and its indexes, where each
/// statement opened them, sought from the root and closed them again: 1.28M person-shaped rows
/// in identity order took 1.93 s as single inserts and 0.97 s through a virtual table, in C
/// (docs/performance-notes.md).
///
/// A feed is values in ``HeldValues``' format (a type byte, then 8 bytes or a length and the
/// bytes), a row's after another's, in a buffer of its own; the table `ingot_feed_N` reads N a
/// row (a row short of values reads NULL for the rest). It is filled and read on the write
/// connection's queue only, and must outlive every statement it is bound to while that runs.
final class RowFeed {
    private var storage: UnsafeMutableRawPointer
    private var capacity: Int
    private var used = 0
    private var starts: UnsafeMutablePointer<Int>
    private var startCapacity: Int
    /// The rows appended (a row is counted when it begins).
    private(set) var count = 0
    /// The rows a statement bound to this feed reads: all of them, unless narrowed.
    var window: Range<Int>?
    /// The bytes the rows take.
    var byteCount: Int { used }

    init() {
        capacity = 64 * 1024
        storage = .allocate(byteCount: capacity, alignment: 8)
        startCapacity = 1024
        starts = .allocate(capacity: startCapacity)
    }

    deinit {
        storage.deallocate()
        starts.deallocate()
    }

    /// Begins a row: the values appended next are its columns, as many as the statement reads.
    func beginRow() {
        if count == startCapacity {
            let grown = UnsafeMutablePointer<Int>.allocate(capacity: startCapacity * 2)
            grown.moveInitialize(from: starts, count: count)
            starts.deallocate()
            starts = grown
            startCapacity *= 2
        }
        starts[count] = used
        count += 1
    }

    /// Appends value `i` of `values` (NULL when none is held).
    func append(_ i: Int, of values: HeldValues) {
        switch values.type(i) {
        case SQLITE_INTEGER: appendNumber(SQLITE_INTEGER, UInt64(bitPattern: values.integer(i)))
        case SQLITE_FLOAT: appendNumber(SQLITE_FLOAT, values.real(i).bitPattern)
        case let type where type == SQLITE_TEXT || type == SQLITE_BLOB: appendBytes(type, values.bytes(i))
        default: appendNull()
        }
    }

    /// Appends value `slot` of `storage` (NULL when none is given).
    func append(_ storage: StorageView, _ slot: Int) {
        switch storage.values[slot] {
        case nil, .null?: appendNull()
        case .integer(let v)?: appendNumber(SQLITE_INTEGER, UInt64(bitPattern: v))
        case .bool(let v)?: appendNumber(SQLITE_INTEGER, v ? 1 : 0)
        case .real(let v)?: appendNumber(SQLITE_FLOAT, v.bitPattern)
        case .text(let start, let count)?:
            appendBytes(
                SQLITE_TEXT, UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(storage.text)[Int(start)..<Int(start + count)]))
        }
    }

    /// Appends values already in the feed's format (``HeldValues/write(_:at:)``'s), as they are.
    func appendEncoded(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        reserve(bytes.count)
        (storage + used).copyMemory(from: base, byteCount: bytes.count)
        used += bytes.count
    }

    /// Appends `bytes` as a blob.
    func appendBlob(_ bytes: UnsafeRawBufferPointer) { appendBytes(SQLITE_BLOB, bytes) }

    /// The bytes of row `row` (its first `arity` values, in the feed's format), valid until the
    /// feed is appended to or freed.
    func row(_ row: Int, arity: Int) -> UnsafeRawBufferPointer {
        guard row < count else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        let start = starts[row]
        return UnsafeRawBufferPointer(
            start: storage + start, count: Self.end(of: arity, in: UnsafeRawPointer(storage), from: start, used: used) - start)
    }

    /// Where `values` values written from `start` in `base` end (never past `used`).
    static func end(of values: Int, in base: UnsafeRawPointer, from start: Int, used: Int) -> Int {
        var at = start
        for _ in 0..<values where at < used { at = valueEnd(base, at) }
        return min(at, used)
    }

    /// Where the value written at `at` in `base` ends.
    static func valueEnd(_ base: UnsafeRawPointer, _ at: Int) -> Int {
        switch Int32(base.load(fromByteOffset: at, as: UInt8.self)) {
        case SQLITE_INTEGER, SQLITE_FLOAT: at + 9
        case SQLITE_TEXT, SQLITE_BLOB: at + 5 + Int(UInt32(littleEndian: base.loadUnaligned(fromByteOffset: at + 1, as: UInt32.self)))
        default: at + 1
        }
    }

    /// Appends a blob of `count` bytes that `write` stores in place, at a pointer with room for
    /// exactly `count` bytes (valid only during the call).
    func appendBlob(count: Int, _ write: (UnsafeMutableRawPointer) -> Void) {
        reserve(5 + count)
        storage.storeBytes(of: UInt8(truncatingIfNeeded: SQLITE_BLOB), toByteOffset: used, as: UInt8.self)
        storage.storeBytes(of: UInt32(count).littleEndian, toByteOffset: used + 1, as: UInt32.self)
        write(storage + used + 5)
        used += 5 + count
    }

    /// Appends `value` as SQLite stores it (a boolean as 0 or 1).
    func append(_ value: ScalarValue) {
        switch value {
        case .null: appendNull()
        case .integer(let v): appendNumber(SQLITE_INTEGER, UInt64(bitPattern: v))
        case .bool(let v): appendNumber(SQLITE_INTEGER, v ? 1 : 0)
        case .real(let v): appendNumber(SQLITE_FLOAT, v.bitPattern)
        case .text(var s): s.withUTF8 { appendBytes(SQLITE_TEXT, UnsafeRawBufferPointer($0)) }
        }
    }

    /// Puts the rows in `order`, positions of the rows as they were appended: a statement reads
    /// row `order[0]` first. `false` (nothing changed) unless `order` is a permutation of them.
    func reorder(_ order: [Int]) -> Bool {
        guard order.count == count else { return false }
        let old = UnsafeMutablePointer<Int>.allocate(capacity: max(count, 1))
        defer { old.deallocate() }
        old.initialize(from: starts, count: count)
        var seen = [Bool](repeating: false, count: count)
        for (k, position) in order.enumerated() {
            guard seen.indices.contains(position), !seen[position] else {
                starts.update(from: old, count: count)
                return false
            }
            seen[position] = true
            starts[k] = old[position]
        }
        return true
    }

    /// Forgets every row (the buffers stay).
    func removeAll() {
        used = 0
        count = 0
        window = nil
    }

    /// Value `column` of row `row`, as ``append(_:)-(ScalarValue)`` took it (`bool`: an integer
    /// read back as a boolean).
    func value(row: Int, column: Int, bool: Bool) -> ScalarValue {
        let rows = FeedRows(base: UnsafeRawPointer(storage), used: used, starts: UnsafePointer(starts), count: count)
        guard row < count else { return .null }
        var at = starts[row]
        for _ in 0..<column where at < used { at = rows.end(of: at) }
        guard at < used else { return .null }
        switch Int32(storage.load(fromByteOffset: at, as: UInt8.self)) {
        case SQLITE_INTEGER:
            let v = Int64(bitPattern: UInt64(littleEndian: storage.loadUnaligned(fromByteOffset: at + 1, as: UInt64.self)))
            return bool ? .bool(v != 0) : .integer(v)
        case SQLITE_FLOAT:
            return .real(Double(bitPattern: UInt64(littleEndian: storage.loadUnaligned(fromByteOffset: at + 1, as: UInt64.self))))
        case SQLITE_TEXT, SQLITE_BLOB:
            let length = Int(UInt32(littleEndian: storage.loadUnaligned(fromByteOffset: at + 1, as: UInt32.self)))
            return .text(String(decoding: UnsafeRawBufferPointer(start: storage + at + 5, count: length), as: UTF8.self))
        default: return .null
        }
    }

    /// Binds this feed as parameter `index` of `statement`, which reads it through `ingot_feed_N`.
    func bind(to statement: OpaquePointer, at index: Int32) {
        sqlite3_bind_pointer(statement, index, Unmanaged.passUnretained(self).toOpaque(), RowFeed.pointerType, nil)
    }

    private func appendNull() {
        reserve(1)
        storage.storeBytes(of: 0, toByteOffset: used, as: UInt8.self)
        used += 1
    }

    private func appendNumber(_ type: Int32, _ bits: UInt64) {
        reserve(9)
        storage.storeBytes(of: UInt8(truncatingIfNeeded: type), toByteOffset: used, as: UInt8.self)
        storage.storeBytes(of: bits.littleEndian, toByteOffset: used + 1, as: UInt64.self)
        used += 9
    }

    private func appendBytes(_ type: Int32, _ bytes: UnsafeRawBufferPointer) {
        reserve(5 + bytes.count)
        storage.storeBytes(of: UInt8(truncatingIfNeeded: type), toByteOffset: used, as: UInt8.self)
        storage.storeBytes(of: UInt32(bytes.count).littleEndian, toByteOffset: used + 1, as: UInt32.self)
        if let base = bytes.baseAddress, !bytes.isEmpty { (storage + used + 5).copyMemory(from: base, byteCount: bytes.count) }
        used += 5 + bytes.count
    }

    private func reserve(_ more: Int) {
        guard used + more > capacity else { return }
        var grown = capacity * 2
        while grown < used + more { grown *= 2 }
        let bigger = UnsafeMutableRawPointer.allocate(byteCount: grown, alignment: 8)
        bigger.copyMemory(from: storage, byteCount: used)
        storage.deallocate()
        storage = bigger
        capacity = grown
    }

    // MARK: Reading, for the virtual table

    /// What a cursor reads: the values, where each row starts, how many rows. Valid until the
    /// feed is appended to or freed, which it is not while a statement it is bound to runs.
    fileprivate var rows: FeedRows {
        let rows = window.map { $0.clamped(to: 0..<count) } ?? 0..<count
        return FeedRows(base: UnsafeRawPointer(storage), used: used, starts: UnsafePointer(starts + rows.lowerBound), count: rows.count)
    }

    // MARK: The virtual table

    /// Registers `ingot_feed_N` on `connection` for each arity N in `arities`.
    static func register(on connection: OpaquePointer, arities: Set<Int>) throws(StoreError) {
        for arity in arities.sorted() where arity > 0 {
            let code = sqlite3_create_module_v2(connection, "ingot_feed_\(arity)", module, UnsafeMutableRawPointer(bitPattern: arity), nil)
            guard code == SQLITE_OK else {
                throw StoreError.sqlite(
                    code: code, message: String(cString: sqlite3_errmsg(connection)), sql: "create module ingot_feed_\(arity)")
            }
        }
    }

    /// The SQL that reads a feed of `arity` values a row: `SELECT c0, …, FROM ingot_feed_N(?1)`.
    static func select(arity: Int) -> String {
        "SELECT \((0..<arity).map { "c\($0)" }.joined(separator: ", ")) FROM ingot_feed_\(arity)(?1)"
    }

    /// The pointer type `sqlite3_bind_pointer` and `sqlite3_value_pointer` compare: a C string
    /// that lives as long as the process (SQLite keeps the pointer, not a copy).
    /// Written once, then only read.
    nonisolated(unsafe) private static let pointerType: UnsafePointer<CChar> = {
        let name = Array("ingot_feed".utf8CString)
        let pointer = UnsafeMutablePointer<CChar>.allocate(capacity: name.count)
        pointer.initialize(from: name, count: name.count)
        return UnsafePointer(pointer)
    }()

    /// The module: written once here, then only read by SQLite.
    nonisolated(unsafe) private static let module: UnsafeMutablePointer<sqlite3_module> = {
        var m = sqlite3_module()
        m.xConnect = { connection, aux, _, _, table, _ in
            let arity = Int(bitPattern: aux)
            let columns = (0..<arity).map { "c\($0)" } + ["feed HIDDEN"]
            let code = sqlite3_declare_vtab(connection, "CREATE TABLE x(\(columns.joined(separator: ", ")))")
            guard code == SQLITE_OK, let table else { return code }
            let vtab = FeedTable.allocate(arity: arity)
            table.pointee = vtab
            return SQLITE_OK
        }
        m.xDisconnect = { vtab in
            FeedTable.deallocate(vtab)
            return SQLITE_OK
        }
        m.xBestIndex = { vtab, info in
            guard let vtab, let info else { return SQLITE_ERROR }
            let hidden = Int32(FeedTable.arity(vtab))
            for i in 0..<Int(info.pointee.nConstraint) {
                let constraint = info.pointee.aConstraint[i]
                if constraint.iColumn == hidden, constraint.op == UInt8(SQLITE_INDEX_CONSTRAINT_EQ), constraint.usable != 0 {
                    info.pointee.aConstraintUsage[i].argvIndex = 1
                    info.pointee.aConstraintUsage[i].omit = 1
                    info.pointee.estimatedCost = 1
                    return SQLITE_OK
                }
            }
            // Without its feed the table cannot be read.
            return SQLITE_CONSTRAINT
        }
        m.xOpen = { vtab, cursor in
            guard let vtab, let cursor else { return SQLITE_ERROR }
            cursor.pointee = FeedCursor.allocate(arity: FeedTable.arity(vtab))
            return SQLITE_OK
        }
        m.xClose = { cursor in
            FeedCursor.deallocate(cursor)
            return SQLITE_OK
        }
        m.xFilter = { cursor, _, _, argc, argv in
            guard let cursor else { return SQLITE_ERROR }
            let state = FeedCursor.state(cursor)
            var rows: FeedRows?
            if argc == 1, let argv, let pointer = sqlite3_value_pointer(argv[0], RowFeed.pointerType) {
                rows = Unmanaged<RowFeed>.fromOpaque(pointer).takeUnretainedValue().rows
            }
            state.pointee.rows = rows
            state.pointee.row = 0
            state.pointee.locate()
            return SQLITE_OK
        }
        m.xNext = { cursor in
            guard let cursor else { return SQLITE_ERROR }
            let state = FeedCursor.state(cursor)
            state.pointee.row += 1
            state.pointee.locate()
            return SQLITE_OK
        }
        m.xEof = { cursor in
            guard let cursor else { return 1 }
            let state = FeedCursor.state(cursor)
            return state.pointee.row < (state.pointee.rows?.count ?? 0) ? 0 : 1
        }
        m.xColumn = { cursor, context, column in
            guard let cursor else { return SQLITE_ERROR }
            let state = FeedCursor.state(cursor)
            guard let rows = state.pointee.rows, column >= 0, Int(column) < state.pointee.arity else {
                sqlite3_result_null(context)
                return SQLITE_OK
            }
            rows.result(at: state.pointee.offsets[Int(column)], context)
            return SQLITE_OK
        }
        m.xRowid = { cursor, rowid in
            guard let cursor, let rowid else { return SQLITE_ERROR }
            rowid.pointee = Int64(FeedCursor.state(cursor).pointee.row)
            return SQLITE_OK
        }
        let pointer = UnsafeMutablePointer<sqlite3_module>.allocate(capacity: 1)
        pointer.initialize(to: m)
        return pointer
    }()
}

/// A feed table: SQLite's `sqlite3_vtab`, then its arity, in one allocation.
private enum FeedTable {
    static let arityOffset = roundUp(MemoryLayout<sqlite3_vtab>.stride, MemoryLayout<Int>.alignment)

    static func allocate(arity: Int) -> UnsafeMutablePointer<sqlite3_vtab> {
        let raw = UnsafeMutableRawPointer.allocate(byteCount: arityOffset + MemoryLayout<Int>.size, alignment: 16)
        let vtab = raw.bindMemory(to: sqlite3_vtab.self, capacity: 1)
        vtab.initialize(to: sqlite3_vtab())
        (raw + arityOffset).bindMemory(to: Int.self, capacity: 1).initialize(to: arity)
        return vtab
    }

    static func arity(_ vtab: UnsafeMutablePointer<sqlite3_vtab>) -> Int {
        UnsafeMutableRawPointer(vtab).load(fromByteOffset: arityOffset, as: Int.self)
    }

    static func deallocate(_ vtab: UnsafeMutablePointer<sqlite3_vtab>?) {
        guard let vtab else { return }
        UnsafeMutableRawPointer(vtab).deallocate()
    }
}

/// A cursor over a feed: SQLite's `sqlite3_vtab_cursor`, then ``State``, in one allocation.
private enum FeedCursor {
    struct State {
        var rows: FeedRows?
        var row = 0
        /// Where each value of the current row starts.
        let offsets: UnsafeMutablePointer<Int>
        let arity: Int

        /// Finds where the current row's values start (nothing past the last row).
        mutating func locate() {
            guard let rows, row < rows.count else { return }
            var at = rows.starts[row]
            for column in 0..<arity {
                // A row short of values (never appended so) reads NULL past the feed's end.
                offsets[column] = at < rows.used ? at : -1
                if at < rows.used { at = rows.end(of: at) }
            }
        }
    }

    static let stateOffset = roundUp(MemoryLayout<sqlite3_vtab_cursor>.stride, MemoryLayout<State>.alignment)

    static func allocate(arity: Int) -> UnsafeMutablePointer<sqlite3_vtab_cursor> {
        let raw = UnsafeMutableRawPointer.allocate(byteCount: stateOffset + MemoryLayout<State>.size, alignment: 16)
        let cursor = raw.bindMemory(to: sqlite3_vtab_cursor.self, capacity: 1)
        cursor.initialize(to: sqlite3_vtab_cursor())
        let offsets = UnsafeMutablePointer<Int>.allocate(capacity: max(arity, 1))
        offsets.initialize(repeating: 0, count: max(arity, 1))
        (raw + stateOffset).bindMemory(to: State.self, capacity: 1).initialize(to: State(offsets: offsets, arity: arity))
        return cursor
    }

    static func state(_ cursor: UnsafeMutablePointer<sqlite3_vtab_cursor>) -> UnsafeMutablePointer<State> {
        (UnsafeMutableRawPointer(cursor) + stateOffset).assumingMemoryBound(to: State.self)
    }

    static func deallocate(_ cursor: UnsafeMutablePointer<sqlite3_vtab_cursor>?) {
        guard let cursor else { return }
        let state = state(cursor)
        state.pointee.offsets.deallocate()
        state.deinitialize(count: 1)
        UnsafeMutableRawPointer(cursor).deallocate()
    }
}

/// A feed's rows as a cursor reads them (``RowFeed/rows``).
private struct FeedRows {
    let base: UnsafeRawPointer
    /// The bytes written: a value is never read past them.
    let used: Int
    let starts: UnsafePointer<Int>
    let count: Int

    /// Where the value at `at` ends.
    func end(of at: Int) -> Int { RowFeed.valueEnd(base, at) }

    /// Gives the value at `at` as the result of `context` (its bytes stay put while the statement runs).
    func result(at: Int, _ context: OpaquePointer?) {
        guard at >= 0 else { return sqlite3_result_null(context) }
        let type = Int32(base.load(fromByteOffset: at, as: UInt8.self))
        switch type {
        case SQLITE_INTEGER:
            sqlite3_result_int64(
                context, Int64(bitPattern: UInt64(littleEndian: base.loadUnaligned(fromByteOffset: at + 1, as: UInt64.self))))
        case SQLITE_FLOAT:
            sqlite3_result_double(
                context, Double(bitPattern: UInt64(littleEndian: base.loadUnaligned(fromByteOffset: at + 1, as: UInt64.self))))
        case SQLITE_TEXT, SQLITE_BLOB:
            let length = Int32(UInt32(littleEndian: base.loadUnaligned(fromByteOffset: at + 1, as: UInt32.self)))
            let bytes = base + at + 5
            if type == SQLITE_TEXT {
                sqlite3_result_text(context, bytes.assumingMemoryBound(to: CChar.self), length, RawStatement.static)
            } else {
                sqlite3_result_blob(context, bytes, length, RawStatement.static)
            }
        default: sqlite3_result_null(context)
        }
    }
}

private func roundUp(_ n: Int, _ alignment: Int) -> Int { (n + alignment - 1) / alignment * alignment }
