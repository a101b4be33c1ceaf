/// Writes JSON text: strings quoted and escaped (RFC 8259), for log lines in JSON format, the
/// stores' JSON columns and (Decoding/IdentityKey+JSON.swift) identity values as JSON arrays.
package enum JSONText {
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

    /// Whether `scalar` is a control character a terminal may act on: C0, DEL or C1 (U+0080 to
    /// U+009F, which UTF-8 terminals can read as 8-bit controls: U+009B is CSI).
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// `s` with control characters (C0, DEL, C1) written as `\uXXXX` escapes (and backslashes
    /// doubled): safe to print on a terminal or in a log line whatever the input held.
    package static func escapingControlCharacters(_ s: String) -> String {
        escaping(s, keeping: [], doublingBackslashes: true)
    }

    /// `s` (JSON text: a rejected record or page) with its control characters written as
    /// `\uXXXX` but line feeds and tabs, its backslashes as they are: what `ingot rejects --raw`
    /// prints, so that stored page bytes (ESC, BEL, `ESC[2J`) never reach a terminal as such.
    package static func escapingTerminalControls(_ s: String) -> String {
        escaping(s, keeping: ["\n", "\t"], doublingBackslashes: false)
    }

    private static func escaping(_ s: String, keeping: Set<Unicode.Scalar>, doublingBackslashes: Bool) -> String {
        guard s.unicodeScalars.contains(where: { (isControl($0) && !keeping.contains($0)) || (doublingBackslashes && $0 == "\\") }) else {
            return s
        }
        var out = ""
        for scalar in s.unicodeScalars {
            if doublingBackslashes && scalar == "\\" {
                out += "\\\\"
            } else if isControl(scalar) && !keeping.contains(scalar) {
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
