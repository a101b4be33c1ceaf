import GRDBSQLite

/// A staged row as its staging table holds it, beside its identity's columns: one blob rather
/// than a column per attribute, written and read back by this store only, within one load.
///
/// The blob: the mask of the columns given (two 8-byte words), the record that gave the row last
/// (``RecordOrigin``, 8 bytes), the to-many sets (a 4-byte length, then the ``StagedSets`` blob,
/// empty when none is given), then the value of each column given, in column order, as
/// ``HeldValues/write(_:at:)`` writes one (a type byte, then 8 bytes or a 4-byte length and
/// the bytes). Numbers little-endian.
///
/// Why: a staging table of a column per attribute cost SQLite a record of every column to build
/// when a batch was staged and to take apart when the fold read it back (people-200k: the folds'
/// `sqlite3_column_*` calls and VDBE steps were a third of their time); one blob is built and
/// read by Ingot in one pass (docs/performance-notes.md, "Staged runs").
enum StagedRow {
    /// The blob's column in a staging table.
    static let column = "\"_ingot_row\""

    /// The length of the blob ``encode(mask:origin:sets:columns:values:start:into:)`` writes.
    static func encodedCount(mask: ColumnMask, sets: Int, columns: Int, values: StorageView, start: Int) -> Int {
        var count = 28 + sets
        for slot in 0..<columns where mask.contains(slot) {
            switch values.values[start + slot] {
            case nil, .null?: count += 1
            case .integer?, .bool?, .real?: count += 9
            case .text(_, let length)?: count += 5 + Int(length)
            }
        }
        return count
    }

    /// Encodes a row of `columns` columns at `out`, which has room for its
    /// ``encodedCount(mask:sets:columns:values:start:)`` bytes: `mask`, `origin`, the `sets`
    /// blob, then the value of each slot in `mask` from `values`, the row's slots starting at
    /// `start`.
    ///
    /// Written in place, not appended to an array: a staged load encodes every row of every
    /// batch, and an array append per field cost more than the bytes it moved (people-20k: 85 M
    /// instructions of the appends, `make instructions`).
    static func encode(
        mask: ColumnMask, origin: Int64, sets: UnsafeRawBufferPointer, columns: Int, values: StorageView, start: Int,
        into out: UnsafeMutableRawPointer
    ) {
        var at = 0
        func put<T: FixedWidthInteger>(_ v: T) {
            out.storeBytes(of: v.littleEndian, toByteOffset: at, as: T.self)
            at += MemoryLayout<T>.size
        }
        func put(_ bytes: UnsafeRawBufferPointer) {
            if let base = bytes.baseAddress, !bytes.isEmpty { (out + at).copyMemory(from: base, byteCount: bytes.count) }
            at += bytes.count
        }
        put(mask.low)
        put(mask.high)
        put(UInt64(bitPattern: origin))
        put(UInt32(truncatingIfNeeded: sets.count))
        put(sets)
        for slot in 0..<columns where mask.contains(slot) {
            switch values.values[start + slot] {
            case nil, .null?: put(UInt8(SQLITE_NULL))
            case .integer(let v)?:
                put(UInt8(SQLITE_INTEGER))
                put(UInt64(bitPattern: v))
            case .bool(let v)?:
                put(UInt8(SQLITE_INTEGER))
                put(UInt64(v ? 1 : 0))
            case .real(let v)?:
                put(UInt8(SQLITE_FLOAT))
                put(v.bitPattern)
            case .text(let text, let count)?:
                put(UInt8(SQLITE_TEXT))
                put(count)
                put(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(values.text)[Int(text)..<Int(text + count)]))
            }
        }
    }

    /// What a staged row gives, read from its blob: its mask and origin, where its sets are, and
    /// where its values begin.
    struct Parts {
        var mask: ColumnMask
        var origin: Int64
        var sets: Range<Int>
        var values: Int
    }

    /// The parts of `bytes`; `nil` when they do not add up (a blob this store did not write).
    static func parts(_ bytes: UnsafeRawBufferPointer) -> Parts? {
        guard bytes.count >= 28 else { return nil }
        let length = Int(LittleEndian.integer(bytes, 24, 4))
        guard length <= bytes.count - 28 else { return nil }
        return Parts(
            mask: ColumnMask(low: LittleEndian.integer(bytes, 0, 8), high: LittleEndian.integer(bytes, 8, 8)),
            origin: Int64(bitPattern: LittleEndian.integer(bytes, 16, 8)), sets: 28..<(28 + length), values: 28 + length)
    }

    /// Where the value at `at` ends; `nil` when it runs past `bytes`.
    static func end(ofValueAt at: Int, in bytes: UnsafeRawBufferPointer) -> Int? {
        guard at < bytes.count else { return nil }
        let end: Int
        switch Int32(bytes[at]) {
        case SQLITE_INTEGER, SQLITE_FLOAT: end = at + 9
        case SQLITE_TEXT, SQLITE_BLOB:
            guard at + 5 <= bytes.count else { return nil }
            end = at + 5 + Int(LittleEndian.integer(bytes, at + 1, 4))
        default: end = at + 1
        }
        return end <= bytes.count ? end : nil
    }

    /// The failure of reading a blob that does not add up (a staging file changed by another
    /// program): the load stops rather than merge what it cannot read.
    static func malformed(_ layout: EntityLayout) -> StoreError {
        StoreError.schema(
            "a staged row of \(layout.table) does not add up (its staging file was changed by another program): remove the staging file and resume, and the load stages its pages again"
        )
    }
}
