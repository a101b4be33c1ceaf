import CCRC32C

/// CRC-32C (Castagnoli), the checksum of archive entries (docs/archive-format.md): the
/// processor's CRC32 instruction where it has one, a table-driven loop otherwise
/// (Sources/CCRC32C; docs/performance-notes.md, "Checksums and batch sorts").
enum CRC32C {
    /// The CRC-32C of `bytes`.
    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        ingot_crc32c(0, bytes.baseAddress, bytes.count)
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0) }
    }

    /// The table-driven loop alone, whatever the processor: what the tests hold the instruction to.
    static func softwareChecksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        ingot_crc32c_software(0, bytes.baseAddress, bytes.count)
    }

    /// Whether ``checksum(_:)-(UnsafeRawBufferPointer)`` uses the processor's instruction.
    static var isHardware: Bool { ingot_crc32c_is_hardware() != 0 }
}
