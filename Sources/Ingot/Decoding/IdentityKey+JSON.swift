import Foundation

extension JSONText {
    /// Identities as a JSON array (a composite one as an array in it), for the SQLite store's
    /// `json_each` lookups.
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

    /// A value as JSON (a non-finite double as null).
    static func append(_ value: ScalarValue, to out: inout String) {
        switch value {
        case .null: out += "null"
        case .integer(let v): out += String(v)
        case .real(let v): out += v.isFinite ? "\(v)" : "null"
        case .text(let s): quote(s, into: &out)
        case .bool(let v): out += v ? "true" : "false"
        }
    }
}
