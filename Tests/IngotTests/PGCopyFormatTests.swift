import Testing

@testable import Ingot

/// COPY's text format and `bytea`'s hex form, written and read without `String` round trips.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct PGCopyFormatTests {
    @Test(arguments: [Int64.min, Int64.min + 1, -1_000_000_007, -10, -9, -1, 0, 1, 9, 10, 99, 100, 4_294_967_296, Int64.max])
    func decimalsAreWhatStringWrites(value: Int64) {
        var out: [UInt8] = [UInt8(ascii: "x")]
        PGStore.appendDecimal(value, to: &out)
        #expect(String(decoding: out, as: UTF8.self) == "x" + String(value))
    }

    @Test func fieldsEscapeOnlyWhatCOPYNeeds() {
        var out: [UInt8] = []
        PGStore.appendCopyFields([.text("plain é"), nil, .text("tab\there\\ and\nnew\rline"), .integer(-5), .bool(true)], to: &out)
        #expect(String(decoding: out, as: UTF8.self) == "plain é\t\\N\ttab\\there\\\\ and\\nnew\\rline\t-5\tt")
    }

    @Test func byteaHexReadsBackAndRefusesWhatIsNotHex() {
        let bytes: [UInt8] = (0...255).map(UInt8.init)
        #expect(PGConnection.bytea(fromText: PGConnection.byteaText(bytes)) == bytes)
        #expect(PGConnection.bytea(fromText: "\\xABcd") == [0xAB, 0xCD])
        #expect(PGConnection.bytea(fromText: "\\x") == [])
        #expect(PGConnection.bytea(fromText: "\\xag") == nil)
        #expect(PGConnection.bytea(fromText: "\\xabc") == nil)
        #expect(PGConnection.bytea(fromText: "abcd") == nil)
    }
}
