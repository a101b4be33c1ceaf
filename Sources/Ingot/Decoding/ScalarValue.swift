import Foundation

/// A value as the mapper produces it and every backend stores it: what a column holds after
/// conversion, independent of any database. Each backend picks its column types and binds these
/// as it needs (SQLite stores a boolean as 0 or 1). Dates travel as canonical ISO-8601 text in
/// UTC (`yyyy-MM-ddTHH:mm:ss.SSSZ`, or `yyyy-MM-dd` for a date-only format): lossless, and read
/// as a date by any database.
public enum ScalarValue: Hashable, Sendable, CustomStringConvertible {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case bool(Bool)

    /// Hashes the payload only (equal values of different cases never occur as one identity's
    /// values, and a collision would only cost a comparison): identities are hashed for every
    /// row folded, looked up and written. Text is hashed by its UTF-8 bytes, as it is compared.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0 as UInt8)
        case .integer(let v): hasher.combine(v)
        case .real(let v): hasher.combine(v)
        case .text(let v):
            hasher.combine(v.utf8.count)
            if v.utf8.withContiguousStorageIfAvailable({ hasher.combine(bytes: UnsafeRawBufferPointer($0)) }) == nil {
                for byte in v.utf8 { hasher.combine(byte) }
            }
        case .bool(let v): hasher.combine(v)
        }
    }

    /// Equal when of the same case and payload. Text compares by its UTF-8 bytes, as SQLite and PostgreSQL compare it (their default
    /// collations, "C" in Ingot's columns): "café" in NFC and in NFD are two identities, two rows,
    /// in a batch as across batches, so the tables do not depend on where batches end. Swift's
    /// own `String ==` (canonical equivalence) would fold them in a batch and not across batches.
    public static func == (a: ScalarValue, b: ScalarValue) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.integer(let x), .integer(let y)): x == y
        case (.real(let x), .real(let y)): x == y
        case (.text(let x), .text(let y)): ScalarValue.sameBytes(x, y)
        case (.bool(let x), .bool(let y)): x == y
        default: false
        }
    }

    /// Whether two strings have the same UTF-8 bytes.
    static func sameBytes(_ x: String, _ y: String) -> Bool {
        guard x.utf8.count == y.utf8.count else { return false }
        let fast = x.utf8.withContiguousStorageIfAvailable { a in
            y.utf8.withContiguousStorageIfAvailable { b in
                guard let pa = a.baseAddress, let pb = b.baseAddress else { return a.count == b.count }
                return memcmp(pa, pb, a.count) == 0
            }
        }
        return (fast ?? nil) ?? x.utf8.elementsEqual(y.utf8)
    }

    /// As shown in messages.
    public var description: String {
        switch self {
        case .null: "NULL"
        case .integer(let v): String(v)
        case .real(let v): String(v)
        case .text(let v): v
        case .bool(let v): String(v)
        }
    }
}
