/// Exact decimal numbers (`type: decimal`) in their canonical text: an optional `-`, the integer
/// digits without leading zeros (`0` when none), then — when the value has a fraction — `.` and
/// its digits without trailing zeros; no exponent. Equal values have equal text (`"199.00"`,
/// `199`, `1.99e2` are all `199`), so SQLite's TEXT column compares them for equality as the
/// numbers are; PostgreSQL's `numeric` reads the same text.
enum DecimalText {
    /// Digits a value may take in its canonical text (a `1e100000` is refused, not expanded).
    static let maxDigits = 1000

    /// `text` — a JSON number's digits or a string: `[+-]digits[.digits][e[+-]digits]`, with at
    /// least one digit — in canonical form, or `nil` when it is not a decimal number (or takes
    /// more than ``maxDigits`` digits).
    static func canonical(_ text: some StringProtocol) -> String? {
        let bytes = Array(text.utf8)
        var i = 0
        var negative = false
        if i < bytes.count, bytes[i] == UInt8(ascii: "-") || bytes[i] == UInt8(ascii: "+") {
            negative = bytes[i] == UInt8(ascii: "-")
            i += 1
        }
        var digits: [UInt8] = []
        var pointAt: Int?
        while i < bytes.count {
            let b = bytes[i]
            if b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") {
                digits.append(b)
            } else if b == UInt8(ascii: "."), pointAt == nil {
                pointAt = digits.count
            } else {
                break
            }
            i += 1
        }
        guard !digits.isEmpty else { return nil }
        var exponent = 0
        if i < bytes.count {
            guard bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") else { return nil }
            i += 1
            var sign = 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "-") || bytes[i] == UInt8(ascii: "+") {
                sign = bytes[i] == UInt8(ascii: "-") ? -1 : 1
                i += 1
            }
            let start = i
            while i < bytes.count, bytes[i] >= UInt8(ascii: "0"), bytes[i] <= UInt8(ascii: "9"), i - start < 7 {
                exponent = exponent * 10 + Int(bytes[i] - UInt8(ascii: "0"))
                i += 1
            }
            guard i > start, i == bytes.count else { return nil }
            exponent *= sign
        }
        // The value is 0.D × 10^point, D the digits without leading or trailing zeros.
        var point = (pointAt ?? digits.count) + exponent
        let first = digits.firstIndex { $0 != UInt8(ascii: "0") } ?? digits.count
        point -= first
        guard let last = digits.lastIndex(where: { $0 != UInt8(ascii: "0") }), first <= last else { return "0" }
        let significant = digits[first...last]
        // The digits its canonical text writes: a leading `0` and the zeros after the point, or
        // the integer digits (zeros to the point included), or all significant digits.
        let written = point <= 0 ? 1 - point + significant.count : Swift.max(point, significant.count)
        guard written <= maxDigits else { return nil }
        let zero = UInt8(ascii: "0")
        var out: [UInt8] = negative ? [UInt8(ascii: "-")] : []
        if point <= 0 {
            out += [zero, UInt8(ascii: ".")] + Array(repeating: zero, count: -point) + significant
        } else if point >= significant.count {
            out += significant + Array(repeating: zero, count: point - significant.count)
        } else {
            out += significant.prefix(point) + [UInt8(ascii: ".")] + significant.dropFirst(point)
        }
        return String(decoding: out, as: UTF8.self)
    }
}
