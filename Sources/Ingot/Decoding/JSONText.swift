/// Writes JSON text: strings quoted and escaped (RFC 8259), identity values as JSON arrays for the
/// store's `json_each` lookups, and log lines in JSON format.
enum JSONText {
    static func array(of keys: some Collection<IdentityKey>) -> String {
        var out = "["
        out.reserveCapacity(keys.count * 8)
        var first = true
        for key in keys {
            if !first { out += "," }
            first = false
            switch key {
            case .single(let v): append(v, to: &out)
            case .composite(let vs):
                out += "["
                for (k, v) in vs.enumerated() {
                    if k > 0 { out += "," }
                    append(v, to: &out)
                }
                out += "]"
            }
        }
        return out + "]"
    }

    static func append(_ value: ScalarValue, to out: inout String) {
        switch value {
        case .null: out += "null"
        case .integer(let v): out += String(v)
        case .real(let v): out += v.isFinite ? "\(v)" : "null"
        case .text(let s): quote(s, into: &out)
        case .bool(let v): out += v ? "true" : "false"
        }
    }

    static func quote(_ s: String, into out: inout String) {
        out += "\""
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
