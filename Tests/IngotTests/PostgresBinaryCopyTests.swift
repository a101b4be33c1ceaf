import Foundation
import GRDBSQLite
import Testing

@testable import Ingot

/// The binary `COPY` of a staged PostgreSQL load (PGBinaryCopy.swift): every value reaches the
/// server as the text `COPY` would have given it, and a value whose binary form is not certain
/// goes in text.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct PostgresBinaryCopyTests {
    /// One column of each type Ingot makes, and the values sent to each: the same rows copied in
    /// binary and in text read back the same, value for value.
    @Test func theBinaryCopyReadsBackAsTheTextCopy() throws {
        let connection = try PGConnection(url: try PostgresServer.freshDatabase())
        let columns: [(type: String, values: [ScalarValue])] = [
            ("bigint", [.integer(.min), .integer(.max), .integer(0), .integer(-1), .null]),
            (
                "double precision",
                [
                    .real(0.1), .real(-0.0), .real(1e308), .real(.leastNonzeroMagnitude), .real(-2.5), .integer(7),
                    .integer(9_007_199_254_740_993),
                    .real(.infinity), .real(-.infinity), .real(.nan),
                ]
            ),
            ("text", [.text(""), .text("é \t tab \\ and\nnew\rline"), .integer(-42), .real(2.5), .bool(true), .bool(false), .text("😀")]),
            ("boolean", [.bool(true), .bool(false), .integer(0), .integer(1)]),
            (
                "timestamptz",
                [
                    .text("2000-01-01T00:00:00Z"), .text("1970-01-01T00:00:00Z"), .text("0001-01-01T00:00:00Z"),
                    .text("9999-12-31T23:59:59.999999Z"), .text("2026-01-14T09:09:02.5Z"), .text("2024-02-29T12:00:00.000001Z"),
                    .text("1999-12-31T23:59:59.99Z"), .text("2026-01-14"), .text("1600-03-01T00:00:01Z"),
                ]
            ),
            ("date", [.text("2024-02-29"), .text("0001-01-01"), .text("9999-12-31"), .text("1999-12-31"), .text("2000-03-01")]),
            ("jsonb", [.text(#"{"a": [1, 2.5, null], "b": "é"}"#), .integer(5), .real(2.5), .text(#""s""#), .text("[]")]),
        ]
        for (type, values) in columns {
            let kind = try #require(PGBinaryCopy.Kind(sqlType: type))
            for table in ["b", "t"] {
                _ = try connection.execute("DROP TABLE IF EXISTS \(table); CREATE TABLE \(table) (n bigint, v \(type))")
            }
            var binary = PGBinaryCopy.header
            var text: [UInt8] = []
            for (n, value) in values.enumerated() {
                PGBinaryCopy.appendRowStart(fields: 2, to: &binary)
                try PGBinaryCopy.append(.integer(Int64(n)), .bigint, to: &binary)
                try PGBinaryCopy.append(value, kind, to: &binary)
                PGStore.appendCopyRow([.integer(Int64(n)), value], to: &text)
            }
            binary += PGBinaryCopy.trailer
            try connection.copy("COPY b FROM STDIN (FORMAT binary)", data: binary)
            try connection.copy("COPY t FROM STDIN", data: text)
            let read = "SELECT n, v::text FROM %@ ORDER BY n"
            let got = try connection.execute(read.replacingOccurrences(of: "%@", with: "b"))
            #expect(got.count == values.count)
            #expect(got == (try connection.execute(read.replacingOccurrences(of: "%@", with: "t"))), "\(type)")
        }
    }

    /// What the binary format cannot carry as its column's type reads it — a value of another
    /// kind, a date not in Ingot's stored form or not a real day — is unfit, not guessed at.
    @Test(arguments: [
        (ScalarValue.text("5"), PGBinaryCopy.Kind.bigint), (.real(1.5), .bigint), (.real(1), .boolean), (.text("true"), .boolean),
        (.integer(5), .boolean),
        (.text("2.5"), .double), (.integer(5), .date), (.bool(true), .timestamptz), (.text("2026-1-14"), .date),
        (.text("2023-02-29"), .date), (.text("0000-01-01"), .date), (.text("2026-01-14T10:00:00Z"), .date),
        (.text("2026-01-14T24:00:00Z"), .timestamptz), (.text("2026-01-14T10:60:00Z"), .timestamptz),
        (.text("2026-01-14T10:00:00+01:00"), .timestamptz), (.text("2026-01-14T10:00:00.1234567Z"), .timestamptz),
        (.text("2026-01-14T10:00:00.Z"), .timestamptz), (.text("2026-01-14 10:00:00Z"), .timestamptz),
        (.text("2026-01-14T10:00:00"), .timestamptz), (.text("2026-04-31"), .timestamptz),
    ])
    func whatTheBinaryFormatCannotCarryIsUnfit(value: ScalarValue, kind: PGBinaryCopy.Kind) {
        var out: [UInt8] = []
        #expect(throws: PGBinaryCopy.Unfit.self) { try PGBinaryCopy.append(value, kind, to: &out) }
    }

    @Test func storedDatesAreTheirInstants() {
        func micros(_ text: String) -> Int64? { Array(text.utf8).withUnsafeBytes { PGBinaryCopy.microseconds($0) } }
        #expect(micros("2000-01-01T00:00:00Z") == 0)
        #expect(micros("1970-01-01T00:00:00Z") == -946_684_800_000_000)
        #expect(micros("2000-01-02T00:00:01.5Z") == 86_401_500_000)
        #expect(micros("2000-01-02") == 86_400_000_000)
        #expect(micros("1999-12-31T23:59:59.000001Z") == -999_999)
    }

    /// Rewrites the staged rows of identity `id` in `layout`'s staging table of `file`, column
    /// `column` given as `text` (the row's ``StagedRow`` blob decoded and encoded again); returns
    /// the rows changed.
    static func restage(_ file: OpaquePointer, _ layout: EntityLayout, id: Int64, column: String, text: String) throws -> Int {
        let table = "\"\(StageFile.table(of: layout))\""
        let slot = try #require(layout.columns.firstIndex { $0.name == column })
        let select = try RawStatement(connection: file, sql: "SELECT rowid, \(StagedRow.column) FROM \(table) WHERE id = \(id)")
        defer { select.finalize() }
        var rows: [(rowid: Int64, blob: [UInt8])] = []
        try select.query { row in
            let bytes = UnsafeRawBufferPointer(start: sqlite3_column_blob(row, 1), count: Int(sqlite3_column_bytes(row, 1)))
            rows.append((sqlite3_column_int64(row, 0), Array(bytes)))
        }
        for row in rows {
            let blob = try row.blob.withUnsafeBytes { bytes -> [UInt8] in
                let parts = try #require(StagedRow.parts(bytes))
                var values = HeldValues(count: layout.columns.count)
                defer { values.deallocate() }
                var at = parts.values
                var out = Array(row.blob[0..<parts.values])
                for k in layout.columns.indices where parts.mask.contains(k) {
                    values.load(k, from: bytes, at: &at)
                    if k == slot {
                        out.append(UInt8(SQLITE_TEXT))
                        LittleEndian.appendInteger(UInt64(text.utf8.count), bytes: 4, to: &out)
                        out += Array(text.utf8)
                    } else {
                        values.append(k, to: &out)
                    }
                }
                return out
            }
            let update = try RawStatement(connection: file, sql: "UPDATE \(table) SET \(StagedRow.column) = ?1 WHERE rowid = ?2")
            defer { update.finalize() }
            blob.withUnsafeBytes { _ = sqlite3_bind_blob(update.handle, 1, $0.baseAddress, Int32($0.count), RawStatement.transient) }
            sqlite3_bind_int64(update.handle, 2, row.rowid)
            try update.execute()
        }
        return rows.count
    }

    /// A staged load whose staging file holds a value binary `COPY` cannot carry (here written
    /// into the file by hand: a text where the fold expects a number) abandons its binary copy
    /// and copies again in text, where the server decides as it always did: text it reads as a
    /// number is stored; text it refuses costs its row, rejected as `unstorable`.
    @Test(arguments: [("2.5", true), ("high", false)])
    func aValueTheBinaryCopyCannotCarryGoesInText(score: String, readable: Bool) throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let pages = [bulkPage(#"{"id": 20, "name": "Zed", "dogs": [21]}"#)] + bulkPages
        let files = try directory(pages)
        let first = try ingot(config, FailingAfter(try DirectoryPageSource(directory: files, glob: "page-*.json"), pages: 2), url)
        #expect(first.status == .failed)
        let connection = try PGConnection(url: url)
        let staging = try #require(
            try connection.execute("SELECT value FROM _ingot_state WHERE pipeline = '' AND key LIKE 'staged_load:%'").first?[0] ?? nil)
        // The staged rows are in the job's stage file, the path PostgreSQL names (StageFile).
        var file: OpaquePointer?
        #expect(sqlite3_open_v2(staging, &file, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK)
        let person = try #require(EntityLayout.layouts(of: config.model).first { $0.table == "person" })
        #expect(try Self.restage(try #require(file), person, id: 3, column: "score", text: score) == 1)
        sqlite3_close(file)
        let resumed = try ingot(config, try DirectoryPageSource(directory: files, glob: "page-*.json"), url, resume: true)
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        if readable {
            #expect(try connection.execute("SELECT score FROM person WHERE id = 3") == [["2.5"]])
            #expect(resumed.counters.rejectedRecords == 0)
        } else {
            #expect(try connection.execute("SELECT count(*) FROM person WHERE id = 3") == [["0"]])
            #expect(try connection.execute("SELECT count(*) FROM person_dogs WHERE person_id = 3") == [["0"]])
            let rejects = try connection.execute("SELECT entity, reason_code, reason FROM _ingot_rejects")
            #expect(rejects.count == 1 && rejects.first?[1] == "unstorable", "\(rejects)")
            #expect(rejects.first?[2]?.contains("double precision") == true, "\(rejects)")
        }
        // Every other row is the staged load's.
        #expect(try connection.execute("SELECT count(*) FROM person WHERE id <> 3") == [["5"]])
        #expect(try connection.execute("SELECT dog_id FROM person_dogs WHERE person_id = 20") == [["21"]])
    }

    /// `--bulk` into `url`, a batch a record.
    private func ingot(_ config: PipelineConfig, _ source: any PageSource, _ url: String, resume: Bool = false) throws -> RunSummary {
        var options = RunOptions()
        options.databasePath = url
        options.loading = .staged
        options.batchRecords = 1
        options.commitRecords = 1
        options.resume = resume
        options.progressInterval = 0
        return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
    }
}
