import GRDBSQLite

/// A prepared `sqlite3_stmt`, bound and stepped through the raw C API on the hot path (measured
/// here 1.8× faster than going through GRDB's statement arguments).
///
/// Owned by the connection's user (the SQLite store, a stage file) and used only on its queue;
/// finalized by `finalize()`.
final class RawStatement {
    let sql: String
    /// A `let`: read on every bind and step, where a `var` of a class costs a run-time exclusivity check.
    let handle: OpaquePointer
    private let connection: OpaquePointer
    private var isFinalized = false

    /// SQLite's `SQLITE_TRANSIENT` (it copies the bytes) and `SQLITE_STATIC` (they stay put until
    /// the statement has run).
    static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
    static let `static` = unsafeBitCast(0, to: sqlite3_destructor_type.self)

    /// Text parameters given as ``ScalarValue`` (identities of links, bookkeeping) are copied here
    /// and bound `SQLITE_STATIC`, so SQLite does not allocate a copy of each (measured:
    /// `sqlite3_bind_text` with `SQLITE_TRANSIENT` was 7 % of a run's instructions, before row
    /// values were bound from their storage). The bytes stay put until the statement has run;
    /// `execute` and `query` empty the arena, and every parameter is bound again before the next
    /// step. Text that does not fit is bound `SQLITE_TRANSIENT`. Allocated on first use (most
    /// statements never bind such text), behind a pointer, so that no stored property of this
    /// class is written on the hot path (that would cost an exclusivity check).
    private struct Arena {
        var base: UnsafeMutablePointer<UInt8>?
        var used = 0
    }
    private let arena: UnsafeMutablePointer<Arena>
    private static let arenaCapacity = 8 * 1024

    init(connection: OpaquePointer, sql: String) throws(StoreError) {
        self.sql = sql
        self.connection = connection
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard code == SQLITE_OK, let statement else {
            throw StoreError.sqlite(code: code, message: String(cString: sqlite3_errmsg(connection)), sql: sql)
        }
        handle = statement
        arena = .allocate(capacity: 1)
        arena.initialize(to: Arena())
    }

    deinit {
        arena.pointee.base?.deallocate()
        arena.deallocate()
    }

    /// Finalizes the statement; it must not be used after this.
    func finalize() {
        guard !isFinalized else { return }
        isFinalized = true
        sqlite3_finalize(handle)
    }

    @inline(__always)
    func bind(_ value: ScalarValue, at index: Int32) {
        switch value {
        case .null:
            sqlite3_bind_null(handle, index)
        case .integer(let v):
            sqlite3_bind_int64(handle, index, v)
        case .bool(let v):
            sqlite3_bind_int64(handle, index, v ? 1 : 0)
        case .real(let v):
            sqlite3_bind_double(handle, index, v)
        case .text(var s):
            s.withUTF8 { utf8 in
                let used = arena.pointee.used
                if utf8.count <= RawStatement.arenaCapacity - used {
                    let base =
                        arena.pointee.base
                        ?? {
                            let base = UnsafeMutablePointer<UInt8>.allocate(capacity: RawStatement.arenaCapacity)
                            arena.pointee.base = base
                            return base
                        }()
                    let start = base + used
                    if let source = utf8.baseAddress { start.update(from: source, count: utf8.count) }
                    arena.pointee.used = used + utf8.count
                    _ = sqlite3_bind_text(handle, index, start, Int32(utf8.count), RawStatement.static)
                } else if let source = utf8.baseAddress {
                    _ = sqlite3_bind_text(handle, index, source, Int32(utf8.count), RawStatement.transient)
                }
            }
        }
    }

    /// Binds slot `slot` of `storage` (`nil`, not mentioned, binds NULL). Text is bound
    /// `SQLITE_STATIC` straight from the storage's bytes, which stay put while the writer runs.
    @inline(__always)
    func bind(_ storage: StorageView, _ slot: Int, at index: Int32) {
        switch storage.values[slot] {
        case nil, .null?:
            sqlite3_bind_null(handle, index)
        case .integer(let v)?:
            sqlite3_bind_int64(handle, index, v)
        case .bool(let v)?:
            sqlite3_bind_int64(handle, index, v ? 1 : 0)
        case .real(let v)?:
            sqlite3_bind_double(handle, index, v)
        case .text(let start, let count)?:
            if let base = storage.text.baseAddress {
                _ = sqlite3_bind_text(handle, index, base + Int(start), Int32(count), RawStatement.static)
            } else {
                _ = sqlite3_bind_text(handle, index, "", 0, RawStatement.transient)
            }
        }
    }

    /// Binds the values of `identity` from parameter `index` on; returns the next parameter.
    @inline(__always) @discardableResult
    func bind(_ identity: IdentityKey, from index: Int32) -> Int32 {
        switch identity {
        case .single(let value):
            bind(value, at: index)
            return index + 1
        case .composite(let values):
            for (k, value) in values.enumerated() { bind(value, at: index + Int32(k)) }
            return index + Int32(values.count)
        }
    }

    /// Runs a statement that returns no rows, then resets it for the next use.
    func execute() throws(StoreError) {
        let code = sqlite3_step(handle)
        sqlite3_reset(handle)
        arena.pointee.used = 0
        guard code == SQLITE_DONE else { throw error(code) }
    }

    /// Steps a query by hand: `true` at a row (read it through ``handle``), `false` when done.
    func step() throws(StoreError) -> Bool {
        let code = sqlite3_step(handle)
        if code == SQLITE_ROW { return true }
        sqlite3_reset(handle)
        arena.pointee.used = 0
        guard code == SQLITE_DONE else { throw error(code) }
        return false
    }

    /// Runs a query and calls `row` for each result row, then resets it.
    func query(_ row: (OpaquePointer) -> Void) throws(StoreError) {
        defer {
            sqlite3_reset(handle)
            arena.pointee.used = 0
        }
        while true {
            let code = sqlite3_step(handle)
            if code == SQLITE_DONE { return }
            guard code == SQLITE_ROW else { throw error(code) }
            row(handle)
        }
    }

    /// Column `index` of the current row as a value.
    static func column(_ statement: OpaquePointer, _ index: Int32) -> ScalarValue {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, index))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, index))
        case SQLITE_NULL: return .null
        default:
            guard let text = sqlite3_column_text(statement, index) else { return .null }
            return .text(String(cString: text))
        }
    }

    private func error(_ code: Int32) -> StoreError {
        .sqlite(code: code, message: String(cString: sqlite3_errmsg(connection)), sql: sql)
    }
}
