/// Writes JSON text: strings quoted and escaped (RFC 8259), for log lines in JSON format, the
/// stores' JSON columns and (Decoding/IdentityKey+JSON.swift) identity values as JSON arrays.
enum JSONText {
    static func quote(_ s: String, into out: inout String) {
        out += "\""
        // Most text needs no escape: appended whole (logs, exports of millions of values).
        if !s.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out += s
            out += "\""
            return
        }
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }

    /// `s` with control characters written as `\uXXXX` escapes (and backslashes doubled): safe to
    /// print on a terminal or in a log line whatever the input held.
    static func escapingControlCharacters(_ s: String) -> String {
        guard s.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F || $0 == "\\" }) else { return s }
        var out = ""
        for scalar in s.unicodeScalars {
            if scalar == "\\" {
                out += "\\\\"
            } else if scalar.value < 0x20 || scalar.value == 0x7F {
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
