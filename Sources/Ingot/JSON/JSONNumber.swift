/// Conversions of JSON number text (already validated by ``JSONParser``) to machine numbers.
///
/// Integers are exact up to the limits of `Int64`. Doubles take Clinger's fast path (at most 15
/// significant digits and a power of ten up to 22, where one IEEE multiplication or division is
/// correctly rounded) and fall back to the standard library's correctly rounded, locale-free
/// conversion otherwise, so every double round-trips.
enum JSONNumber {
    /// The integer at `p[start..<start+length]`, or `nil` when it overflows `Int64`.
    @inline(__always)
    static func int64(_ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ length: Int) -> Int64? {
        var i = start
        let end = start + length
        let negative = p[i] == UInt8(ascii: "-")
        if negative { i += 1 }
        var value: Int64 = 0
        if end - i < 19 {
            // Cannot overflow.
            while i < end {
                value = value &* 10 &+ Int64(p[i] &- UInt8(ascii: "0"))
                i += 1
            }
            return negative ? -value : value
        }
        while i < end {
            let digit = Int64(p[i] &- UInt8(ascii: "0"))
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (s, o2) = negative ? m.subtractingReportingOverflow(digit) : m.addingReportingOverflow(digit)
            if o1 || o2 { return nil }
            value = s
            i += 1
        }
        return value
    }

    private static let powersOfTen: [Double] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ]

    /// The nearest double to the number at `p[start..<start+length]` (±infinity past the range).
    static func double(_ p: UnsafeBufferPointer<UInt8>, _ start: Int, _ length: Int) -> Double {
        var i = start
        let end = start + length
        let negative = p[i] == UInt8(ascii: "-")
        if negative { i += 1 }
        var mantissa: UInt64 = 0
        var digits = 0
        var exponent = 0
        var exact = true
        while i < end, p[i] &- UInt8(ascii: "0") < 10 {
            if mantissa == 0 && p[i] == UInt8(ascii: "0") {
                // leading zero: no significant digit
            } else if digits < 19 {
                mantissa = mantissa * 10 + UInt64(p[i] - UInt8(ascii: "0"))
                digits += 1
            } else {
                exact = false
            }
            i += 1
        }
        if i < end, p[i] == UInt8(ascii: ".") {
            i += 1
            while i < end, p[i] &- UInt8(ascii: "0") < 10 {
                if mantissa == 0 && p[i] == UInt8(ascii: "0") {
                    exponent -= 1
                } else if digits < 19 {
                    mantissa = mantissa * 10 + UInt64(p[i] - UInt8(ascii: "0"))
                    digits += 1
                    exponent -= 1
                } else {
                    exact = false
                }
                i += 1
            }
        }
        if i < end, p[i] | 0x20 == UInt8(ascii: "e") {
            i += 1
            var expNegative = false
            if p[i] == UInt8(ascii: "+") || p[i] == UInt8(ascii: "-") {
                expNegative = p[i] == UInt8(ascii: "-")
                i += 1
            }
            var e = 0
            while i < end {
                if e < 100_000 { e = e * 10 + Int(p[i] - UInt8(ascii: "0")) }
                i += 1
            }
            exponent += expNegative ? -e : e
        }
        if exact && mantissa < (1 << 53) && exponent >= -22 && exponent <= 22 {
            var d = Double(mantissa)
            d = exponent < 0 ? d / powersOfTen[-exponent] : d * powersOfTen[exponent]
            return negative ? -d : d
        }
        if mantissa == 0 && exact { return negative ? -0.0 : 0.0 }
        let text = String(decoding: UnsafeBufferPointer(rebasing: p[start..<end]), as: UTF8.self)
        return Double(text) ?? (negative ? -.infinity : .infinity)
    }
}
