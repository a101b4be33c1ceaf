import Foundation
import Testing

@testable import Ingot

/// `type: decimal` (docs/pipelines.md, "Types"): exact decimal numbers — Shopify's prices are
/// strings (`"price": "199.00"`, https://shopify.dev/docs/api/admin-rest/latest/resources/product-variant)
/// — kept in one canonical text, TEXT in SQLite and `numeric` in PostgreSQL, whichever way the
/// load writes.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct DecimalTests {
    @Test func theCanonicalTextIsExactAndOnePerValue() {
        let cases: [(String, String?)] = [
            ("199.00", "199"), ("199", "199"), ("1.99e2", "199"), ("+007.50", "7.5"), ("-0.00", "0"), ("0", "0"),
            (".5", "0.5"), ("5.", "5"), ("0.000100", "0.0001"), ("1E-3", "0.001"), ("-12.3400e1", "-123.4"),
            ("123456789012345678901234567890.000000000000000000001", "123456789012345678901234567890.000000000000000000001"),
            ("", nil), ("-", nil), ("1.2.3", nil), ("1e", nil), ("12abc", nil), (" 1", nil), ("1e9999999", nil), ("NaN", nil),
        ]
        for (text, canonical) in cases { #expect(DecimalText.canonical(text) == canonical, "\(text)") }
    }

    /// Up to ``DecimalText/maxDigits`` (1,000) digits as the canonical text writes them, the
    /// point's position not counted as digits: 1,000 integer digits are kept, 1,001 refused.
    @Test func aThousandDigitsAreKept() {
        let thousand = "9" + String(repeating: "0", count: 999)
        #expect(DecimalText.canonical(thousand) == thousand)
        #expect(DecimalText.canonical(thousand + ".00") == thousand)
        #expect(DecimalText.canonical("9e999") == thousand)
        #expect(DecimalText.canonical(thousand + "0") == nil)
        let digits = "1" + String(repeating: "2", count: 600) + "." + String(repeating: "3", count: 399)
        #expect(DecimalText.canonical(digits) == digits)
        let small = "0." + String(repeating: "0", count: 997) + "7"
        #expect(DecimalText.canonical(small) == small)
        #expect(DecimalText.canonical("7e-998") == small)
        #expect(DecimalText.canonical("7e-999")?.utf8.count == 1001, "1,000 digits and the point")
        #expect(DecimalText.canonical("7e-1000") == nil)
    }

    /// `numeric_recv`'s binary form, as the staged copy sends it: base-10000 digits, the first's
    /// weight, the sign, the display scale.
    @Test func theBinaryCopyEncodesNumeric() {
        func numeric(_ text: String) -> [UInt8]? { Array(text.utf8).withUnsafeBytes { PGBinaryCopy.numeric($0) } }
        #expect(numeric("1299.5") == [0, 2, 0, 0, 0, 0, 0, 1, 0x05, 0x13, 0x13, 0x88])
        #expect(numeric("0.25") == [0, 1, 0xFF, 0xFF, 0, 0, 0, 2, 0x09, 0xC4])
        #expect(numeric("-10000") == [0, 1, 0, 1, 0x40, 0, 0, 0, 0, 1])
        #expect(numeric("0") == [0, 0, 0, 0, 0, 0, 0, 0])
        #expect(numeric("1.2.3") == nil && numeric("abc") == nil && numeric("1.") == nil)
    }

    static let shopify = """
        version: 1
        name: shopify
        records: variants
        root: variant
        entities:
          variant:
            identity: id
            attributes: {id: integer, title: string, price: decimal, compare_at_price: decimal, weight: decimal}
        """

    static let pages = [
        #"{"variants": [{"id": 1, "title": "S", "price": "199.00", "compare_at_price": null, "weight": 0.250},"#
            + #" {"id": 2, "title": "M", "price": "1299.5", "compare_at_price": "1499.90", "weight": 1e1},"#
            + #" {"id": 3, "title": "L", "price": 123456789012345678901.0000000001, "compare_at_price": "0.10", "weight": "-0"}]}"#,
        #"{"variants": [{"id": 4, "title": "XL", "price": "about 20", "weight": 1}]}"#,
    ]

    static let expected = [
        ["1", "199", "NULL", "0.25"], ["2", "1299.5", "1499.9", "10"], ["3", "123456789012345678901.0000000001", "0.1", "0"],
    ]

    /// Into SQLite: canonical text, a text that is no number rejected (naming it), equal values
    /// equal text.
    @Test func sqliteKeepsTheCanonicalText() throws {
        let (summary, db) = try ingest(Self.shopify, Self.pages)
        #expect(summary.counters.rejectedRecords == 1)
        #expect(try rows(db, "SELECT id, price, compare_at_price, weight FROM variant ORDER BY id") == Self.expected)
        #expect(try rows(db, "SELECT reason FROM _ingot_rejects").first?.first?.contains("decimal") == true)
        #expect(try rows(db, "SELECT count(*) FROM variant WHERE price = '199'") == [["1"]])
    }

    /// Into PostgreSQL's `numeric`, batch by batch and staged (the binary `COPY` encodes
    /// `numeric` itself): the same values, compared as numbers by the server.
    @Test(arguments: [false, true])
    func postgresStoresNumeric(bulk: Bool) throws {
        let url = try PostgresServer.freshDatabase()
        let (summary, _) = try ingest(Self.shopify, Self.pages, db: url, bulk: bulk)
        #expect(summary.counters.rejectedRecords == 1, "\(summary.error ?? "")")
        let connection = try PGConnection(url: url)
        #expect(
            try connection.execute(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'variant'::regclass AND attname = 'price'")
                == [["numeric"]])
        #expect(
            try connection.execute("SELECT id::text, price::text, compare_at_price::text, weight::text FROM variant ORDER BY id").map {
                $0.map { $0 ?? "NULL" }
            } == Self.expected)
        #expect(try connection.execute("SELECT count(*) FROM variant WHERE price > 1000 AND price = 1299.50") == [["1"]])
    }
}
