import Foundation
import GRDBSQLite

/// PostgreSQL's binary `COPY` format, for the streaming copy of a staged load (PGStagedCopy): a
/// header, then per row its field count and each field as a length and the bytes the column
/// type's binary input reads (`-1` for NULL), then a trailer.
///
/// Why: the server parses text `COPY` field by field (`strtoll`, `float8in`, the date parser);
/// binary fields it takes as they come. The final rows of people-200k load in 0.57–0.62 s
/// binary against 0.64–0.71 s as text (docs/performance-notes.md).
///
/// Each field is encoded as its column's type reads it, from the value the fold holds: what
/// text `COPY` would have sent the server as the same text is sent here as the same value. A
/// value whose binary form is not certain to be that (a text in an integer column, a date not
/// in Ingot's stored form) is not guessed at: ``Unfit`` is thrown, and the load is copied again
/// in text, where the server decides as it always did (``PGStore/mergeStaged(fills:stored:refused:)``).
enum PGBinaryCopy {
    /// The column types Ingot makes (``PGStore/columnType(_:)``), as their binary forms go.
    enum Kind: Sendable, Equatable {
        case bigint, double, text, boolean, timestamptz, date, jsonb, numeric

        /// The kind of a column of type `type` (as ``PGStore/columnType(_:)`` names it).
        init?(sqlType type: String) {
            switch type {
            case "bigint": self = .bigint
            case "double precision": self = .double
            case "text": self = .text
            case "boolean": self = .boolean
            case "timestamptz": self = .timestamptz
            case "date": self = .date
            case "jsonb": self = .jsonb
            case "numeric": self = .numeric
            default: return nil
            }
        }
    }

    /// A value the binary format cannot carry as its column's type reads it: the copy goes again
    /// in text.
    struct Unfit: Error, CustomStringConvertible {
        var kind: Kind
        var description: String { "a value the binary COPY cannot carry as \(kind)" }
    }

    /// The signature, no flags, no header extension.
    static let header: [UInt8] = Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00] + [0, 0, 0, 0] + [0, 0, 0, 0]
    /// The end of the rows: a field count of -1.
    static let trailer: [UInt8] = [0xFF, 0xFF]

    /// Starts a row of `fields` fields.
    static func appendRowStart(fields: Int, to out: inout [UInt8]) {
        appendBigEndian(UInt16(truncatingIfNeeded: fields), to: &out)
    }

    static func appendNull(to out: inout [UInt8]) {
        appendBigEndian(UInt32(bitPattern: -1), to: &out)
    }

    /// Held value `i` (a fold's, as SQLite typed it) as a field of `kind`.
    static func append(_ i: Int, _ kind: Kind, from values: HeldValues, to out: inout [UInt8]) throws(Unfit) {
        switch values.type(i) {
        case SQLITE_INTEGER: try append(integer: values.integer(i), kind, to: &out)
        case SQLITE_FLOAT: try append(real: values.real(i), kind, to: &out)
        case SQLITE_TEXT, SQLITE_BLOB: try append(text: values.bytes(i), kind, to: &out)
        default: appendNull(to: &out)
        }
    }

    /// `value` as a field of `kind`.
    static func append(_ value: ScalarValue, _ kind: Kind, to out: inout [UInt8]) throws(Unfit) {
        switch value {
        case .null: appendNull(to: &out)
        case .integer(let v): try append(integer: v, kind, to: &out)
        case .real(let v): try append(real: v, kind, to: &out)
        case .bool(let v):
            // Text COPY sends `t`/`f`.
            switch kind {
            case .boolean: appendField([v ? 1 : 0], to: &out)
            case .text: appendField([v ? UInt8(ascii: "t") : UInt8(ascii: "f")], to: &out)
            default: throw Unfit(kind: kind)
            }
        case .text(let s):
            var s = s
            let unfit = s.withUTF8 { bytes -> Unfit? in
                do throws(Unfit) {
                    try append(text: UnsafeRawBufferPointer(bytes), kind, to: &out)
                    return nil
                } catch {
                    return error
                }
            }
            if let unfit { throw unfit }
        }
    }

    /// An integer: the column's own number, false/true for a boolean's 0/1, its digits in
    /// text and JSON (as text `COPY` sends them), the nearest double (as the server reads its
    /// digits: both round to nearest).
    private static func append(integer v: Int64, _ kind: Kind, to out: inout [UInt8]) throws(Unfit) {
        switch kind {
        case .bigint:
            appendBigEndian(UInt32(8), to: &out)
            appendBigEndian(UInt64(bitPattern: v), to: &out)
        case .double:
            appendBigEndian(UInt32(8), to: &out)
            appendBigEndian(Double(v).bitPattern, to: &out)
        case .boolean:
            // The fold holds a boolean as 0 or 1, which text `COPY` sends as `f`/`t`.
            guard v == 0 || v == 1 else { throw Unfit(kind: kind) }
            appendField([UInt8(v)], to: &out)
        case .text, .jsonb:
            var digits: [UInt8] = kind == .jsonb ? [1] : []
            PGStore.appendDecimal(v, to: &digits)
            appendField(digits, to: &out)
        case .timestamptz, .date, .numeric: throw Unfit(kind: kind)
        }
    }

    /// A double: its bits in a double column, its shortest digits (what text `COPY` sends) in
    /// text and JSON; anything else is not certain.
    private static func append(real v: Double, _ kind: Kind, to out: inout [UInt8]) throws(Unfit) {
        switch kind {
        case .double:
            appendBigEndian(UInt32(8), to: &out)
            appendBigEndian(v.bitPattern, to: &out)
        case .text: appendField(Array(String(v).utf8), to: &out)
        case .jsonb: appendField([1] + Array(String(v).utf8), to: &out)
        case .bigint, .boolean, .timestamptz, .date, .numeric: throw Unfit(kind: kind)
        }
    }

    /// Text: its bytes in text (the server checks their encoding as for text `COPY`), with the
    /// version byte in JSON; a date in Ingot's stored form (DateConverter) as the instant or day
    /// it names; in a number or boolean column, not certain.
    private static func append(text bytes: UnsafeRawBufferPointer, _ kind: Kind, to out: inout [UInt8]) throws(Unfit) {
        switch kind {
        case .text:
            appendBigEndian(UInt32(truncatingIfNeeded: bytes.count), to: &out)
            out.append(contentsOf: bytes)
        case .jsonb:
            appendBigEndian(UInt32(truncatingIfNeeded: bytes.count + 1), to: &out)
            out.append(1)
            out.append(contentsOf: bytes)
        case .timestamptz:
            guard let micros = microseconds(bytes) else { throw Unfit(kind: kind) }
            appendBigEndian(UInt32(8), to: &out)
            appendBigEndian(UInt64(bitPattern: micros), to: &out)
        case .date:
            guard bytes.count == 10, let days = day(bytes) else { throw Unfit(kind: kind) }
            appendBigEndian(UInt32(4), to: &out)
            appendBigEndian(UInt32(bitPattern: Int32(days)), to: &out)
        case .numeric:
            guard let field = numeric(bytes) else { throw Unfit(kind: kind) }
            appendBigEndian(UInt32(truncatingIfNeeded: field.count), to: &out)
            out.append(contentsOf: field)
        case .bigint, .double, .boolean: throw Unfit(kind: kind)
        }
    }

    /// A decimal's canonical text (DecimalText: `-`, digits, `.`, digits) as `numeric_recv`
    /// reads it: the count of base-10000 digits, the weight of the first, the sign, the display
    /// scale (the fraction's digits), then the digits, none of them leading or trailing zeros.
    /// `nil` for text not in that form.
    static func numeric(_ bytes: UnsafeRawBufferPointer) -> [UInt8]? {
        var text = Array(bytes)[...]
        let negative = text.first == UInt8(ascii: "-")
        if negative { text = text.dropFirst() }
        let point = text.firstIndex(of: UInt8(ascii: "."))
        let integer = text[..<(point ?? text.endIndex)]
        let fraction = point.map { text[($0 + 1)...] } ?? []
        let isDigit = { (b: UInt8) in b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }
        guard !integer.isEmpty, integer.allSatisfy(isDigit), fraction.allSatisfy(isDigit), point == nil || !fraction.isEmpty,
            fraction.count <= 16383
        else { return nil }
        let zero = UInt8(ascii: "0")
        let whole = integer.allSatisfy { $0 == zero } ? [] : Array(integer)
        let left = Array(repeating: zero, count: (4 - whole.count % 4) % 4) + whole
        let right = Array(fraction) + Array(repeating: zero, count: (4 - fraction.count % 4) % 4)
        let all = left + right
        var groups = stride(from: 0, to: all.count, by: 4).map { k in
            all[k..<k + 4].reduce(Int16(0)) { $0 * 10 + Int16($1 - zero) }
        }
        var weight = left.count / 4 - 1
        while groups.first == 0 {
            groups.removeFirst()
            weight -= 1
        }
        while groups.last == 0 { groups.removeLast() }
        if groups.isEmpty { weight = 0 }
        var out: [UInt8] = []
        appendBigEndian(UInt16(truncatingIfNeeded: groups.count), to: &out)
        appendBigEndian(UInt16(bitPattern: Int16(truncatingIfNeeded: weight)), to: &out)
        appendBigEndian(UInt16(negative && !groups.isEmpty ? 0x4000 : 0), to: &out)
        appendBigEndian(UInt16(truncatingIfNeeded: fraction.count), to: &out)
        for group in groups { appendBigEndian(UInt16(bitPattern: group), to: &out) }
        return out
    }

    /// A one-dimensional `bigint[]` of `values` (`nil`: NULL), as `array_recv` reads it.
    static func appendBigintArray(_ values: [Int64?], to out: inout [UInt8]) {
        let nulls = values.filter { $0 == nil }.count
        appendBigEndian(UInt32(20 + values.count * 4 + (values.count - nulls) * 8), to: &out)
        appendBigEndian(UInt32(1), to: &out)  // dimensions
        appendBigEndian(UInt32(nulls > 0 ? 1 : 0), to: &out)  // has NULLs
        appendBigEndian(UInt32(20), to: &out)  // element type: int8
        appendBigEndian(UInt32(truncatingIfNeeded: values.count), to: &out)
        appendBigEndian(UInt32(1), to: &out)  // lower bound
        for value in values {
            if let value {
                appendBigEndian(UInt32(8), to: &out)
                appendBigEndian(UInt64(bitPattern: value), to: &out)
            } else {
                appendNull(to: &out)
            }
        }
    }

    // MARK: Dates

    /// Days from 2000-01-01 (PostgreSQL's epoch) to `YYYY-MM-DD` (the text's first ten bytes),
    /// a real day of years 0001–9999; `nil` otherwise.
    static func day(_ text: UnsafeRawBufferPointer) -> Int? {
        guard text.count >= 10, text[4] == UInt8(ascii: "-"), text[7] == UInt8(ascii: "-"),
            let year = digits(text, 0, 4), let month = digits(text, 5, 2), let day = digits(text, 8, 2),
            year >= 1, (1...12).contains(month), day >= 1, day <= DateConverter.daysIn(month: month, of: year)
        else { return nil }
        return DateConverter.days(year, month, day) - DateConverter.days(2000, 1, 1)
    }

    /// Microseconds from 2000-01-01T00:00:00Z to a date in Ingot's stored form:
    /// `YYYY-MM-DDTHH:MM:SS[.f…]Z` (up to six fraction digits), or `YYYY-MM-DD` (its midnight, UTC:
    /// the session's time zone, as the server reads it in text); `nil` for any other text.
    static func microseconds(_ text: UnsafeRawBufferPointer) -> Int64? {
        guard let days = day(text) else { return nil }
        if text.count == 10 { return Int64(days) * 86_400_000_000 }
        guard text.count >= 20, text[10] == UInt8(ascii: "T"), text[13] == UInt8(ascii: ":"), text[16] == UInt8(ascii: ":"),
            text[text.count - 1] == UInt8(ascii: "Z"),
            let hour = digits(text, 11, 2), let minute = digits(text, 14, 2), let second = digits(text, 17, 2),
            hour < 24, minute < 60, second < 60
        else { return nil }
        var fraction = 0
        if text.count > 20 {
            // `.` and one to six digits before the `Z`.
            let count = text.count - 21
            guard text[19] == UInt8(ascii: "."), (1...6).contains(count), let f = digits(text, 20, count) else { return nil }
            fraction = f
            for _ in count..<6 { fraction *= 10 }
        }
        let seconds = Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
        return seconds * 1_000_000 + Int64(fraction)
    }

    /// The decimal number in `count` digits at `at`; `nil` when one is not a digit.
    private static func digits(_ text: UnsafeRawBufferPointer, _ at: Int, _ count: Int) -> Int? {
        var n = 0
        for k in at..<at + count {
            let d = Int(text[k]) - 48
            guard (0...9).contains(d) else { return nil }
            n = n * 10 + d
        }
        return n
    }

    // MARK: Bytes

    /// Appends a field of `bytes` as they are (a `bytea`, or any type's binary form).
    static func appendField(_ bytes: [UInt8], to out: inout [UInt8]) {
        appendBigEndian(UInt32(truncatingIfNeeded: bytes.count), to: &out)
        out += bytes
    }

    private static func appendBigEndian<T: FixedWidthInteger>(_ value: T, to out: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { out.append(contentsOf: $0) }
    }
}
