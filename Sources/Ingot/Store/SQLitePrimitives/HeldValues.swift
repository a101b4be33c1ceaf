import Foundation
import GRDBSQLite

/// Column values copied out of a result row, each into a buffer of its own that is reused row
/// after row (no allocation once it is big enough; copying each value with `sqlite3_value_dup`
/// cost a `malloc` and a `free` per value), and bound back `SQLITE_STATIC` from there.
struct HeldValues {
    /// Per value: its SQLite type, 0 when none is held.
    private var types: [Int32]
    private var integers: [Int64]
    private var reals: [Double]
    private var buffers: [UnsafeMutableRawPointer?]
    private var capacities: [Int]
    private var counts: [Int]

    init(count: Int) {
        types = Array(repeating: 0, count: count)
        integers = Array(repeating: 0, count: count)
        reals = Array(repeating: 0, count: count)
        buffers = Array(repeating: nil, count: count)
        capacities = Array(repeating: 0, count: count)
        counts = Array(repeating: 0, count: count)
    }

    var holdsAny: Bool { types.contains { $0 != 0 } }

    func holds(_ i: Int) -> Bool { types[i] != 0 }

    /// Holds column `column` of `statement`'s current row as value `i`.
    mutating func hold(_ i: Int, from statement: OpaquePointer, column: Int32) {
        let type = sqlite3_column_type(statement, column)
        types[i] = type
        switch type {
        case SQLITE_INTEGER: integers[i] = sqlite3_column_int64(statement, column)
        case SQLITE_FLOAT: reals[i] = sqlite3_column_double(statement, column)
        case SQLITE_TEXT, SQLITE_BLOB:
            // The text's bytes (UTF-8, as stored) or the blob's; asked for in that order, as SQLite wants.
            let source =
                type == SQLITE_TEXT ? UnsafeRawPointer(sqlite3_column_text(statement, column)) : sqlite3_column_blob(statement, column)
            store(i, UnsafeRawBufferPointer(start: source, count: Int(sqlite3_column_bytes(statement, column))))
        default: break
        }
    }

    /// Holds `bytes` as value `i`, a blob.
    mutating func holdBlob(_ i: Int, _ bytes: UnsafeRawBufferPointer) {
        types[i] = SQLITE_BLOB
        store(i, bytes)
    }

    /// Binds value `i` (NULL when none is held) as parameter `index` of `statement`.
    func bind(_ i: Int, to statement: OpaquePointer, at index: Int32) {
        switch types[i] {
        case SQLITE_INTEGER: sqlite3_bind_int64(statement, index, integers[i])
        case SQLITE_FLOAT: sqlite3_bind_double(statement, index, reals[i])
        case SQLITE_TEXT:
            if let buffer = buffers[i], counts[i] > 0 {
                sqlite3_bind_text(statement, index, buffer.assumingMemoryBound(to: CChar.self), Int32(counts[i]), RawStatement.static)
            } else {
                sqlite3_bind_text(statement, index, "", 0, RawStatement.static)
            }
        case SQLITE_BLOB: sqlite3_bind_blob(statement, index, buffers[i], Int32(counts[i]), RawStatement.static)
        default: sqlite3_bind_null(statement, index)
        }
    }

    /// Whether value `i` is held and equals column `column` of `statement`'s current row.
    func equals(_ i: Int, _ statement: OpaquePointer, column: Int32) -> Bool {
        let type = sqlite3_column_type(statement, column)
        guard types[i] != 0, type == types[i] else { return false }
        switch type {
        case SQLITE_INTEGER: return sqlite3_column_int64(statement, column) == integers[i]
        case SQLITE_FLOAT: return sqlite3_column_double(statement, column) == reals[i]
        case SQLITE_TEXT, SQLITE_BLOB:
            let source =
                type == SQLITE_TEXT ? UnsafeRawPointer(sqlite3_column_text(statement, column)) : sqlite3_column_blob(statement, column)
            let count = Int(sqlite3_column_bytes(statement, column))
            guard count == counts[i] else { return false }
            guard count > 0, let source, let buffer = buffers[i] else { return true }
            return memcmp(source, buffer, count) == 0
        default: return true
        }
    }

    /// Whether value `i` is held and equals the value ``write(_:at:)`` wrote at `at` in `bytes`.
    func equals(_ i: Int, encoded bytes: UnsafeRawBufferPointer, at: Int) -> Bool {
        let type = Int32(bytes[at])
        guard types[i] != 0, type == types[i] else { return false }
        switch type {
        case SQLITE_INTEGER: return Int64(bitPattern: LittleEndian.integer(bytes, at + 1, 8)) == integers[i]
        case SQLITE_FLOAT: return Double(bitPattern: LittleEndian.integer(bytes, at + 1, 8)) == reals[i]
        case SQLITE_TEXT, SQLITE_BLOB:
            let count = Int(LittleEndian.integer(bytes, at + 1, 4))
            guard count == counts[i] else { return false }
            guard count > 0, let base = bytes.baseAddress, let buffer = buffers[i] else { return true }
            return memcmp(base + at + 5, buffer, count) == 0
        default: return true
        }
    }

    /// The bytes of value `i` (a blob or text); empty when none are held.
    /// Value `i`'s SQLite type (`SQLITE_INTEGER`, …), 0 when none is held; its number.
    func type(_ i: Int) -> Int32 { types[i] }
    func integer(_ i: Int) -> Int64 { integers[i] }
    func real(_ i: Int) -> Double { reals[i] }

    func bytes(_ i: Int) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: buffers[i], count: types[i] == 0 ? 0 : counts[i])
    }

    /// Value `i` as a ``ScalarValue`` (`bool`: an integer read back as a boolean).
    func scalar(_ i: Int, bool: Bool) -> ScalarValue {
        switch types[i] {
        case SQLITE_INTEGER: bool ? .bool(integers[i] != 0) : .integer(integers[i])
        case SQLITE_FLOAT: .real(reals[i])
        case SQLITE_TEXT, SQLITE_BLOB: .text(String(decoding: bytes(i), as: UTF8.self))
        default: .null
        }
    }

    /// Holds `other`'s value `i` as value `i` (a copy of its bytes).
    mutating func copy(_ i: Int, from other: HeldValues) {
        types[i] = other.types[i]
        integers[i] = other.integers[i]
        reals[i] = other.reals[i]
        if other.types[i] == SQLITE_TEXT || other.types[i] == SQLITE_BLOB {
            store(i, other.bytes(i))
        }
    }

    /// The bytes ``write(_:at:)`` writes for value `i`.
    func encodedCount(_ i: Int) -> Int {
        switch types[i] {
        case SQLITE_INTEGER, SQLITE_FLOAT: 9
        case SQLITE_TEXT, SQLITE_BLOB: 5 + counts[i]
        default: 1
        }
    }

    /// Writes value `i` at `out` for a chunk of folded rows, which has room for its
    /// ``encodedCount(_:)`` bytes: its type (a byte), then 8 bytes for a number, or a 4-byte
    /// length and the bytes for text and blobs. Returns the bytes written.
    func write(_ i: Int, at out: UnsafeMutableRawPointer) -> Int {
        out.storeBytes(of: UInt8(truncatingIfNeeded: types[i]), as: UInt8.self)
        switch types[i] {
        case SQLITE_INTEGER:
            out.storeBytes(of: UInt64(bitPattern: integers[i]).littleEndian, toByteOffset: 1, as: UInt64.self)
            return 9
        case SQLITE_FLOAT:
            out.storeBytes(of: reals[i].bitPattern.littleEndian, toByteOffset: 1, as: UInt64.self)
            return 9
        case SQLITE_TEXT, SQLITE_BLOB:
            let held = self.bytes(i)
            out.storeBytes(of: UInt32(truncatingIfNeeded: held.count).littleEndian, toByteOffset: 1, as: UInt32.self)
            if let base = held.baseAddress, !held.isEmpty { (out + 5).copyMemory(from: base, byteCount: held.count) }
            return 5 + held.count
        default: return 1
        }
    }

    /// Appends value `i` to `out` as ``write(_:at:)`` writes it.
    func append(_ i: Int, to out: inout [UInt8]) {
        let start = out.count
        out.append(contentsOf: repeatElement(0, count: encodedCount(i)))
        out.withUnsafeMutableBytes { bytes in
            guard let base = bytes.baseAddress else { return }
            _ = write(i, at: base + start)
        }
    }

    /// Holds the value ``write(_:at:)`` wrote at `at` in `chunk` as value `i`; moves `at` past it.
    mutating func load(_ i: Int, from chunk: UnsafeRawBufferPointer, at: inout Int) {
        let type = Int32(chunk[at])
        at += 1
        types[i] = type
        switch type {
        case SQLITE_INTEGER:
            integers[i] = Int64(bitPattern: LittleEndian.integer(chunk, at, 8))
            at += 8
        case SQLITE_FLOAT:
            reals[i] = Double(bitPattern: LittleEndian.integer(chunk, at, 8))
            at += 8
        case SQLITE_TEXT, SQLITE_BLOB:
            let count = Int(LittleEndian.integer(chunk, at, 4))
            at += 4
            store(i, UnsafeRawBufferPointer(rebasing: chunk[at..<(at + count)]))
            at += count
        default: break
        }
    }

    /// Copies `source` into value `i`'s buffer (grown when too small).
    private mutating func store(_ i: Int, _ source: UnsafeRawBufferPointer) {
        if source.count > capacities[i] {
            buffers[i]?.deallocate()
            capacities[i] = max(source.count, 64)
            buffers[i] = UnsafeMutableRawPointer.allocate(byteCount: capacities[i], alignment: 8)
        }
        if let base = source.baseAddress, source.count > 0, let buffer = buffers[i] {
            buffer.copyMemory(from: base, byteCount: source.count)
        }
        counts[i] = source.count
    }

    /// Forgets every value (the buffers stay, for the next row).
    mutating func clear() {
        for i in types.indices { types[i] = 0 }
    }

    func deallocate() {
        for buffer in buffers { buffer?.deallocate() }
    }

}
