import Testing

@testable import Ingot

/// The bytes a joined job sends the run for its end merge, and their fold
/// (Store/PostgreSQL/DeferredRows.swift; docs/scale-out.md, "Writes deferred to the run's end").
struct DeferredRowsTests {
    static let shapes = [(columns: 4, links: 1), (columns: 2, links: 0)]

    static func row(
        _ id: Int64, _ values: [ScalarValue?], units: [Int], set: [IdentityKey]? = nil, setUnit: Int = 0, touched: Int = 0
    ) -> DeferredRow {
        DeferredRow(
            identity: .single(.integer(id)), values: values, units: units, links: [set], linkUnits: [setUnit],
            touched: max(touched, units.max() ?? 0, setUnit))
    }

    /// Every kind of value (and "not given"), composite identities, sets (empty, `nil`, of
    /// composite targets) read back as written.
    @Test func rowsReadBackAsWritten() throws {
        let rows: [(Int, DeferredRow)] = [
            (
                0,
                Self.row(
                    -7, [.integer(-7), .text("Zoë \u{1F436}"), .real(-0.5), nil], units: [0, 3, 4, 0],
                    set: [.single(.integer(1)), .composite([.text("a"), .integer(Int64.min)])], setUnit: 9)
            ),
            (0, Self.row(Int64.max, [.integer(Int64.max), .null, .bool(true), .bool(false)], units: [0, 1, 1, 0], set: [], setUnit: 2)),
            (
                1,
                DeferredRow(
                    identity: .composite([.text(""), .real(.infinity)]), values: [.text(""), .real(.infinity)], units: [0, 0],
                    links: [], linkUnits: [], touched: 1 << 42)
            ),
        ]
        var writer = DeferredRows.Writer()
        for (entity, row) in rows { writer.append(row, entity: entity) }
        #expect(writer.rows == 3)
        var reader = DeferredRows.Reader(writer.bytes, shapes: Self.shapes)
        var read: [(Int, DeferredRow)] = []
        while !reader.atEnd { read.append(try reader.next()) }
        #expect(read.map(\.0) == rows.map(\.0))
        #expect(read.map(\.1) == rows.map(\.1))
    }

    /// Bytes cut anywhere but between two rows are refused with a reason; with any byte changed,
    /// refused or read as some rows — never a trap. Rows of a shape the model does not have are refused.
    @Test func damagedBytesAreRefusedNotTrapped() throws {
        var writer = DeferredRows.Writer()
        writer.append(Self.row(1, [.integer(1), .text("one"), .real(1), .bool(true)], units: [0, 1, 1, 1], set: [.single(.integer(2))], setUnit: 1), entity: 0)
        let firstRowEnds = writer.bytes.count
        writer.append(DeferredRow(identity: .single(.text("x")), values: [.text("x"), nil], units: [0, 0], links: [], linkUnits: [], touched: 1), entity: 1)
        let bytes = writer.bytes
        func read(_ bytes: [UInt8]) -> Bool {
            var reader = DeferredRows.Reader(bytes, shapes: Self.shapes)
            do {
                while !reader.atEnd { _ = try reader.next() }
                return true
            } catch {
                return false
            }
        }
        for cut in 1..<bytes.count { #expect(read(Array(bytes[..<cut])) == (cut == firstRowEnds), "cut at \(cut)") }
        for at in bytes.indices {
            for value: UInt8 in [0, 7, 0x80, 0xFF] {
                var damaged = bytes
                damaged[at] = value
                _ = read(damaged)
            }
        }
        var other = DeferredRows.Reader(bytes, shapes: [(columns: 3, links: 1), (columns: 2, links: 0)])
        #expect(throws: DeferredRows.Damaged.self) { try other.next() }
    }

    /// Per column the value of the largest unit, whichever batch came first; a fill (a value
    /// without a unit) loses to any given value and wins over none; the set of the largest unit,
    /// even an empty one; `touched` the largest.
    @Test func theFoldKeepsEachColumnsLargestUnit() {
        let early = Self.row(1, [.integer(1), .text("early"), .real(1), .bool(false)], units: [0, 2, 2, 0], set: [.single(.integer(5))], setUnit: 2)
        let late = Self.row(1, [.integer(1), .text("late"), nil, nil], units: [0, 7, 0, 0], set: [], setUnit: 7)
        let stub = Self.row(1, [.integer(1), nil, nil, nil], units: [0, 0, 0, 0], touched: 9)
        for order in [[early, late, stub], [stub, late, early], [late, stub, early]] {
            var fold = DeferredRows.Fold(entities: 2)
            for row in order { fold.add(row, entity: 0) }
            #expect(fold.rows[0].count == 1)
            let row = fold.rows[0][0]
            #expect(row.values == [.integer(1), .text("late"), .real(1), .bool(false)], "\(order.map(\.touched))")
            #expect(row.units == [0, 7, 2, 0])
            #expect(row.links == [[]])
            #expect(row.linkUnits == [7])
            #expect(row.touched == 9)
        }
        // A given null wins over an older value.
        var fold = DeferredRows.Fold(entities: 2)
        fold.add(Self.row(2, [.integer(2), .null, nil, nil], units: [0, 5, 0, 0]), entity: 0)
        fold.add(Self.row(2, [.integer(2), .text("old"), nil, nil], units: [0, 4, 0, 0]), entity: 0)
        #expect(fold.rows[0][0].values[1] == .null)
    }

    /// Every job must send an identity's rows to the same part: the hash is fixed, not Swift's
    /// per-process `Hasher`. These figures are FNV-1a's over the encoded values.
    @Test func anIdentitysPartIsTheSameInEveryProcess() {
        let parts = (1...8).map { DeferredRows.part(of: .single(.integer(Int64($0))), parts: 16) }
        #expect(parts == Self.expectedParts)
        #expect(DeferredRows.part(of: .composite([.text("a"), .integer(1)]), parts: 16) == DeferredRows.part(of: .composite([.text("a"), .integer(1)]), parts: 16))
        let spread = Set((1...1_000).map { DeferredRows.part(of: .single(.integer(Int64($0))), parts: 16) })
        #expect(spread.count == 16)
    }

    static let expectedParts = [5, 3, 9, 7, 13, 11, 1, 15]

    /// A joined run's deferred rows in the database, per entity: what its blobs hold, read back
    /// as the merge reads them.
    static func deferredRows(of name: String, _ model: EntityModel, _ connection: PGConnection) throws -> [Int: Int] {
        let layouts = EntityLayout.layouts(of: model)
        let shapes = layouts.map { (columns: $0.columns.count, links: $0.toMany.count) }
        var counts: [Int: Int] = [:]
        for row in try connection.execute("SELECT length, data FROM _ingot_join_rows WHERE name = $1", [name]) {
            let length = try #require(row[0].flatMap { Int($0) })
            let frame = try #require(row[1].flatMap(PGConnection.bytea(fromText:)))
            var reader = DeferredRows.Reader(try Zstd().decompress(frame[...], expectedLength: length, limit: length), shapes: shapes)
            while !reader.atEnd { counts[try reader.next().entity, default: 0] += 1 }
        }
        return counts
    }
}
