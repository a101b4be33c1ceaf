/// Little-endian integers in byte buffers: the values of ``HeldValues``' format and of a staged
/// row (StagedRow.swift) are read and written with these.
enum LittleEndian {
    /// The little-endian integer of `count` bytes at `at` (bytes past the end read as 0).
    ///
    /// Inlined: the merge's folds read several a staged row, and the call was 16 % of a fold's
    /// samples at people-10M; the bytes past the end are read out of line.
    @inline(__always)
    static func integer(_ bytes: UnsafeRawBufferPointer, _ at: Int, _ count: Int) -> UInt64 {
        if count == 8, at >= 0, at + 8 <= bytes.count {
            return UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self))
        }
        if count == 4, at >= 0, at + 4 <= bytes.count {
            return UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: at, as: UInt32.self)))
        }
        return truncatedInteger(bytes, at, count)
    }

    @inline(never)
    private static func truncatedInteger(_ bytes: UnsafeRawBufferPointer, _ at: Int, _ count: Int) -> UInt64 {
        var v: UInt64 = 0
        for i in 0..<count where at + i < bytes.count { v |= UInt64(bytes[at + i]) << UInt64(8 * i) }
        return v
    }

    /// Appends the low `bytes` bytes of `v`, little-endian.
    static func appendInteger(_ v: UInt64, bytes: Int, to out: inout [UInt8]) {
        // From a typed buffer: `Array.append(contentsOf:)` copies it in one move.
        withUnsafeBytes(of: v.littleEndian) { raw in
            let all = raw.bindMemory(to: UInt8.self)
            out.append(contentsOf: UnsafeBufferPointer(rebasing: all[0..<min(bytes, all.count)]))
        }
    }
}
