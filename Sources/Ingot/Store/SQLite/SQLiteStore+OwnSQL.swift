import Foundation
import GRDBSQLite

/// A statement of the caller's own (`IngotDatabase.query`), read-only in every database: on a
/// handle of its own for each statement, which reads only (`query_only`), whose authorizer allows
/// nothing but reads (no DML, no DDL — TEMP objects neither —, no ATTACH, no transaction, no
/// pragma but those that read), one statement at a time. A read-only open alone is not enough: a
/// shared in-memory database ignores it, and a read-only handle still creates TEMP views that
/// every later read on it would see. docs/library.md, "SQL of your own".
enum OwnSQL {
    /// The pragmas a statement may name: each reads, with or without its argument (an argument
    /// of these names a table or an index, never a value to set).
    static let readingPragmas: Set<String> = [
        "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo", "foreign_key_list",
        "foreign_key_check", "database_list", "collation_list", "function_list", "module_list", "pragma_list",
        "compile_options", "integrity_check", "quick_check", "page_count", "page_size", "freelist_count", "data_version",
        "encoding",
    ]

    /// The schema's own tables.
    static let schemaTables: Set<String> = ["sqlite_master", "sqlite_temp_master", "sqlite_schema", "sqlite_temp_schema"]

    /// What the authorizer refused first, for the error.
    final class Refusal {
        var what: String?
    }

    /// The rows of `sql` (its columns' names and each row's values) in the database at `path`.
    static func rows(path: String, sql: String, arguments: [ScalarValue]) throws -> (columns: [String], rows: [[ScalarValue]]) {
        var handle: OpaquePointer?
        let flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX
        guard sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close(handle)
            throw StoreError.schema("could not open \(path) to read: \(message)")
        }
        defer { sqlite3_close(handle) }
        sqlite3_busy_timeout(handle, 5000)
        guard sqlite3_exec(handle, "PRAGMA query_only = ON", nil, nil, nil) == SQLITE_OK else {
            throw StoreError.schema("could not make the handle read-only: \(String(cString: sqlite3_errmsg(handle)))")
        }
        let refusal = Refusal()
        let box = Unmanaged.passRetained(refusal)
        defer { box.release() }
        sqlite3_set_authorizer(handle, OwnSQL.authorize, box.toOpaque())
        var statement: OpaquePointer?
        var tail: UnsafePointer<CChar>?
        let prepared = sql.withCString { text in
            let code = sqlite3_prepare_v2(handle, text, -1, &statement, &tail)
            let rest = tail.map { String(cString: $0) } ?? ""
            return (code, rest)
        }
        defer { sqlite3_finalize(statement) }
        guard prepared.0 == SQLITE_OK, let statement else {
            if let what = refusal.what { throw refused(what) }
            throw StoreError.unsupported("IngotDatabase.query: \(String(cString: sqlite3_errmsg(handle)))")
        }
        guard prepared.1.allSatisfy({ $0.isWhitespace || $0 == ";" }) else {
            throw StoreError.unsupported("IngotDatabase.query runs one statement at a time; the SQL holds more after the first")
        }
        guard sqlite3_stmt_readonly(statement) != 0 else { throw refused("a statement that writes") }
        try bind(arguments, to: statement, handle)
        let columns = (0..<sqlite3_column_count(statement)).map { String(cString: sqlite3_column_name(statement, $0)) }
        var rows: [[ScalarValue]] = []
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { break }
            guard code == SQLITE_ROW else {
                throw StoreError.unsupported("IngotDatabase.query: \(String(cString: sqlite3_errmsg(handle)))")
            }
            rows.append((0..<Int32(columns.count)).map { RawStatement.column(statement, $0) })
        }
        return (columns, rows)
    }

    private static func refused(_ what: String) -> StoreError {
        StoreError.unsupported("IngotDatabase.query reads only: \(what) is refused")
    }

    /// Reads are allowed; anything else is refused and named.
    private static let authorize:
        @convention(c) (
            UnsafeMutableRawPointer?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?, UnsafePointer<CChar>?
        ) -> Int32 = { context, action, first, _, _, _ in
            switch action {
            case SQLITE_SELECT, SQLITE_READ, SQLITE_FUNCTION, SQLITE_RECURSIVE:
                return SQLITE_OK
            case SQLITE_INSERT, SQLITE_UPDATE, SQLITE_DELETE:
                // Asked for on the schema's tables along with what a statement does to the schema
                // (a table-valued pragma asks for it too): the DDL itself is asked for, and
                // refused, on its own; the schema tables cannot be written by a statement anyway.
                if let table = first, OwnSQL.schemaTables.contains(String(cString: table).lowercased()) { return SQLITE_OK }
                OwnSQL.note(OwnSQL.actionName(action), context)
                return SQLITE_DENY
            case SQLITE_PRAGMA:
                let name = first.map { String(cString: $0).lowercased() } ?? ""
                if OwnSQL.readingPragmas.contains(name) { return SQLITE_OK }
                OwnSQL.note("PRAGMA \(name)", context)
                return SQLITE_DENY
            default:
                OwnSQL.note(OwnSQL.actionName(action), context)
                return SQLITE_DENY
            }
        }

    private static func note(_ what: String, _ context: UnsafeMutableRawPointer?) {
        guard let context else { return }
        let refusal = Unmanaged<Refusal>.fromOpaque(context).takeUnretainedValue()
        if refusal.what == nil { refusal.what = what }
    }

    /// An authorizer action as the SQL that asks for it.
    static func actionName(_ action: Int32) -> String {
        switch action {
        case SQLITE_INSERT: "INSERT"
        case SQLITE_UPDATE: "UPDATE"
        case SQLITE_DELETE: "DELETE"
        case SQLITE_ATTACH: "ATTACH"
        case SQLITE_DETACH: "DETACH"
        case SQLITE_TRANSACTION: "a transaction statement"
        case SQLITE_SAVEPOINT: "SAVEPOINT"
        case SQLITE_CREATE_TEMP_VIEW, SQLITE_CREATE_TEMP_TABLE, SQLITE_CREATE_TEMP_INDEX, SQLITE_CREATE_TEMP_TRIGGER: "CREATE TEMP"
        case SQLITE_CREATE_VIEW, SQLITE_CREATE_TABLE, SQLITE_CREATE_INDEX, SQLITE_CREATE_TRIGGER, SQLITE_CREATE_VTABLE: "CREATE"
        case SQLITE_DROP_VIEW, SQLITE_DROP_TABLE, SQLITE_DROP_INDEX, SQLITE_DROP_TRIGGER, SQLITE_DROP_TEMP_VIEW,
            SQLITE_DROP_TEMP_TABLE, SQLITE_DROP_TEMP_INDEX, SQLITE_DROP_TEMP_TRIGGER, SQLITE_DROP_VTABLE:
            "DROP"
        case SQLITE_ALTER_TABLE: "ALTER TABLE"
        case SQLITE_REINDEX: "REINDEX"
        case SQLITE_ANALYZE: "ANALYZE"
        default: "action \(action)"
        }
    }

    private static func bind(_ arguments: [ScalarValue], to statement: OpaquePointer, _ handle: OpaquePointer) throws {
        for (k, argument) in arguments.enumerated() {
            let index = Int32(k + 1)
            let code: Int32
            switch argument {
            case .null: code = sqlite3_bind_null(statement, index)
            case .integer(let v): code = sqlite3_bind_int64(statement, index, v)
            case .real(let v): code = sqlite3_bind_double(statement, index, v)
            case .bool(let v): code = sqlite3_bind_int64(statement, index, v ? 1 : 0)
            case .text(let s): code = sqlite3_bind_text(statement, index, s, -1, RawStatement.transient)
            }
            guard code == SQLITE_OK else {
                throw StoreError.unsupported("IngotDatabase.query: argument \(index): \(String(cString: sqlite3_errmsg(handle)))")
            }
        }
    }
}
