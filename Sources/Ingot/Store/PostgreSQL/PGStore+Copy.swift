import Foundation

/// Values in PostgreSQL's text formats: COPY rows (fields tab-separated, `\N` for NULL, text
/// escaped), written straight into a byte buffer, and array literals for `$n::type[]`.
extension PGStore {
    /// `values` as one row of COPY's text format.
    static func appendCopyRow(_ values: [ScalarValue], to out: inout [UInt8]) {
        for (k, value) in values.enumerated() {
            if k > 0 { out.append(UInt8(ascii: "\t")) }
            appendCopyValue(value, to: &out)
        }
        out.append(UInt8(ascii: "\n"))
    }

    /// A row's values (`nil`: NULL) as the first fields of a COPY row, without its end.
    static func appendCopyFields(_ values: [ScalarValue?], to out: inout [UInt8]) {
        for (k, value) in values.enumerated() {
            if k > 0 { out.append(UInt8(ascii: "\t")) }
            appendCopyValue(value ?? .null, to: &out)
        }
    }

    /// The values of `row` (its first `columns` slots in `storage`) as the first fields of a COPY
    /// row, without its end: text copied from the storage's bytes, no `String` made.
    static func appendCopyFields(_ storage: RowStorage, _ row: EntityRow, columns: Int, to out: inout [UInt8]) {
        storage.text.withUnsafeBufferPointer { text in
            for k in 0..<columns {
                if k > 0 { out.append(UInt8(ascii: "\t")) }
                switch storage.values[row.valueStart + k] {
                case nil, .null?:
                    out.append(UInt8(ascii: "\\"))
                    out.append(UInt8(ascii: "N"))
                case .integer(let v)?: appendDecimal(v, to: &out)
                case .real(let v)?: out += Array(String(v).utf8)
                case .bool(let v)?: out.append(v ? UInt8(ascii: "t") : UInt8(ascii: "f"))
                case .text(let start, let count)?:
                    PGConnection.appendCopyText(UnsafeBufferPointer(rebasing: text[Int(start)..<Int(start) + Int(count)]), to: &out)
                }
            }
        }
    }

    /// `key`'s values as COPY fields (a tab before each but the row's first), no array made.
    static func appendCopyFields(_ key: IdentityKey, first: Bool, to out: inout [UInt8]) {
        switch key {
        case .single(let v):
            if !first { out.append(UInt8(ascii: "\t")) }
            appendCopyValue(v, to: &out)
        case .composite(let vs):
            for (k, v) in vs.enumerated() {
                if !first || k > 0 { out.append(UInt8(ascii: "\t")) }
                appendCopyValue(v, to: &out)
            }
        }
    }

    /// A link as a COPY row: its owner's key, its target's, then `position` when given.
    static func appendLinkRow(_ owner: IdentityKey, _ target: IdentityKey, position: Int?, to out: inout [UInt8]) {
        appendCopyFields(owner, first: true, to: &out)
        appendCopyFields(target, first: false, to: &out)
        if let position {
            out.append(UInt8(ascii: "\t"))
            appendDecimal(Int64(position), to: &out)
        }
        out.append(UInt8(ascii: "\n"))
    }

    /// One field of COPY's text format.
    static func appendCopyValue(_ value: ScalarValue, to out: inout [UInt8]) {
        switch value {
        case .null:
            out.append(UInt8(ascii: "\\"))
            out.append(UInt8(ascii: "N"))
        case .integer(let v): appendDecimal(v, to: &out)
        case .real(let v): out += Array(String(v).utf8)
        case .bool(let v): out.append(v ? UInt8(ascii: "t") : UInt8(ascii: "f"))
        case .text(let s): PGConnection.appendCopyText(s.utf8, to: &out)
        }
    }

    /// `value`'s decimal digits (and sign), without making a `String`.
    static func appendDecimal(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        guard magnitude >= 10 else { return out.append(UInt8(ascii: "0") + UInt8(magnitude)) }
        var digits: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)  // 20 digits at most, written backwards
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            while magnitude > 0 {
                buffer[31 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            }
            out.append(contentsOf: buffer[(32 - count)...])
        }
    }

    /// `values` as a PostgreSQL array literal (`{1,2}`, `{"a","b\"c"}`), for `$n::type[]`.
    static func arrayLiteral(_ values: [ScalarValue]) -> String {
        var out = "{"
        for (k, value) in values.enumerated() {
            if k > 0 { out += "," }
            switch value {
            case .null: out += "NULL"
            case .integer(let v): out += String(v)
            case .real(let v): out += String(v)
            case .bool(let v): out += v ? "t" : "f"
            case .text(let s):
                out += "\""
                for ch in s.unicodeScalars {
                    if ch == "\"" || ch == "\\" { out += "\\" }
                    out.unicodeScalars.append(ch)
                }
                out += "\""
            }
        }
        return out + "}"
    }
}
