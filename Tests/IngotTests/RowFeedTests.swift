import Foundation
import GRDBSQLite
import Testing

@testable import Ingot

/// ``RowFeed``: rows handed to SQLite in one statement through the `ingot_feed_N` virtual table.
struct RowFeedTests {
    /// An in-memory connection with the feeds of 3 and 4 columns, and a table to insert into.
    private func connection() throws -> Connection {
        var handle: OpaquePointer?
        guard sqlite3_open_v2(":memory:", &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil) == SQLITE_OK, let handle else {
            throw StoreError.schema("no connection")
        }
        sqlite3_exec(handle, "CREATE TABLE t (a, b, c)", nil, nil, nil)
        try RowFeed.register(on: handle, arities: [3, 4])
        return Connection(handle: handle)
    }

    private final class Connection {
        let handle: OpaquePointer
        init(handle: OpaquePointer) { self.handle = handle }
        deinit { sqlite3_close_v2(handle) }

        /// Each row of `sql`, each column as text (`NULL` for NULL).
        func rows(_ sql: String) throws -> [[String]] {
            let select = try RawStatement(connection: handle, sql: sql)
            defer { select.finalize() }
            var rows: [[String]] = []
            try select.query { row in
                rows.append(
                    (0..<sqlite3_column_count(row)).map { column in
                        sqlite3_column_text(row, column).map { String(cString: $0) } ?? "NULL"
                    })
            }
            return rows
        }
    }

    /// Every kind of value goes in as given: integers at both ends, reals, text with bytes that
    /// need care (a NUL, multi-byte UTF-8, an empty string), blobs, NULL and booleans (0 and 1).
    @Test func everyValueArrivesAsGiven() throws {
        let connection = try connection()
        let handle = connection.handle
        let feed = RowFeed()
        let rows: [[ScalarValue]] = [
            [.integer(.min), .integer(.max), .integer(0)],
            [.real(-0.5), .real(1e300), .null],
            [.text("a\u{0}b"), .text("ñandú 🐕"), .text("")],
            [.bool(true), .bool(false), .text(String(repeating: "x", count: 100_000))],
        ]
        for row in rows {
            feed.beginRow()
            for value in row { feed.append(value) }
        }
        feed.beginRow()
        feed.append(.integer(7))
        [UInt8]([0, 1, 255]).withUnsafeBytes { feed.appendBlob($0) }
        feed.append(.null)
        let insert = try RawStatement(connection: handle, sql: "INSERT INTO t (a, b, c) \(RowFeed.select(arity: 3))")
        defer { insert.finalize() }
        feed.bind(to: insert.handle, at: 1)
        try insert.execute()
        let stored = try connection.rows(
            "SELECT typeof(a), quote(a), typeof(b), quote(b), typeof(c), CASE WHEN length(c) > 100 THEN length(c) ELSE quote(c) END FROM t ORDER BY rowid"
        )
        #expect(
            stored == [
                ["integer", "-9223372036854775808", "integer", "9223372036854775807", "integer", "0"],
                ["real", "-0.5", "real", "1.0e+300", "null", "NULL"],
                ["text", "'a'", "text", "'ñandú 🐕'", "text", "''"],
                ["integer", "1", "integer", "0", "text", "100000"],
                ["integer", "7", "blob", "X'0001FF'", "null", "NULL"],
            ])
        #expect(try connection.rows("SELECT hex(a), length(a) FROM t WHERE rowid = 3") == [["610062", "1"]])
        #expect(feed.value(row: 2, column: 1, bool: false) == .text("ñandú 🐕"))
        #expect(feed.value(row: 3, column: 0, bool: true) == .bool(true))
        #expect(feed.value(row: 9, column: 0, bool: false) == .null)
    }

    /// A window reads only its rows; emptied, a feed reads nothing; a row short of values reads
    /// NULL for the rest rather than the next row's bytes.
    @Test func windowsAndShortRows() throws {
        let connection = try connection()
        let handle = connection.handle
        let feed = RowFeed()
        for i in 0..<10 {
            feed.beginRow()
            for j in 0..<3 { feed.append(.integer(Int64(10 * i + j))) }
        }
        let insert = try RawStatement(connection: handle, sql: "INSERT INTO t (a, b, c) \(RowFeed.select(arity: 3))")
        defer { insert.finalize() }
        feed.window = 3..<5
        feed.bind(to: insert.handle, at: 1)
        try insert.execute()
        feed.removeAll()
        feed.bind(to: insert.handle, at: 1)
        try insert.execute()
        feed.beginRow()
        feed.append(.integer(1))
        feed.bind(to: insert.handle, at: 1)
        try insert.execute()
        #expect(
            try connection.rows("SELECT a, b, c FROM t ORDER BY rowid") == [
                ["30", "31", "32"], ["40", "41", "42"], ["1", "NULL", "NULL"],
            ])
    }

    /// Without a feed bound, or with another kind of pointer, the table reads no row; without
    /// its argument it cannot be planned.
    @Test func aStatementWithoutItsFeedReadsNothing() throws {
        let connection = try connection()
        let handle = connection.handle
        let insert = try RawStatement(connection: handle, sql: "INSERT INTO t (a, b, c) \(RowFeed.select(arity: 3))")
        defer { insert.finalize() }
        try insert.execute()
        sqlite3_bind_int64(insert.handle, 1, 42)
        try insert.execute()
        #expect(try connection.rows("SELECT count(*) FROM t") == [["0"]])
        #expect(throws: StoreError.self) { _ = try RawStatement(connection: handle, sql: "SELECT c0 FROM ingot_feed_4") }
    }
}
