import Foundation

/// The archive file format, version 2 (docs/archive-format.md). All integers little-endian.
///
/// ```
/// "INGOTARC" u32 headerLength u32 headerCRC headerJSON
/// entry*:  "INGE" u32 metaLength u32 metaCRC u64 frameLength metaJSON zstdFrame
/// footer:  "INGI" u32 count u64 offset×count u32 indexCRC u64 indexStart "INGOTEND"
/// ```
///
/// Version 2 differs from version 1 only in what `indexCRC` covers: `count`, the offsets and
/// `indexStart` (version 1 left `indexStart` out). Both are read.
enum ArchiveFormat {
    static let version = 2
    static let readableVersions: ClosedRange<Int> = 1...2
    /// Largest payload an entry may declare (a page's offsets are 32-bit; `max_page_bytes` is at most 1 GiB).
    static let maxPayload = 1 << 30
    /// Largest sequence number an entry may carry.
    static let maxSeq = 1 << 40
    static let fileMagic = Array("INGOTARC".utf8)
    static let entryMagic = Array("INGE".utf8)
    static let indexMagic = Array("INGI".utf8)
    static let endMagic = Array("INGOTEND".utf8)
    /// Bytes of an entry before its metadata.
    static let entryPrefix = 4 + 4 + 4 + 8
    /// `u64 indexStart` and the end magic.
    static let trailer = 16
    /// Largest metadata or header JSON we read.
    static let maxMetadata = 16 << 20
}

/// What an archive says about itself: the run that wrote it and its pipeline, word for word.
package struct ArchiveHeader: Codable, Sendable, Equatable {
    package var formatVersion: Int
    package var runID: String
    package var pipelineName: String
    /// The pipeline file's exact text, so a replay maps payloads as the run did.
    package var pipelineText: String
    package var pipelinePath: String
    package var createdAt: String
    /// The run's `max_page_bytes`: no entry is larger, and a replay reads entries up to it.
    package var maxPageBytes: Int?

    /// The header of a run's archive (``ArchiveWriter`` writes its own format version).
    package init(
        formatVersion: Int, runID: String, pipelineName: String, pipelineText: String, pipelinePath: String, createdAt: String,
        maxPageBytes: Int? = nil
    ) {
        self.formatVersion = formatVersion
        self.runID = runID
        self.pipelineName = pipelineName
        self.pipelineText = pipelineText
        self.pipelinePath = pipelinePath
        self.createdAt = createdAt
        self.maxPageBytes = maxPageBytes
    }

    enum CodingKeys: String, CodingKey {
        case formatVersion = "format_version", runID = "run_id", pipelineName = "pipeline_name"
        case pipelineText = "pipeline_text", pipelinePath = "pipeline_path", createdAt = "created_at"
        case maxPageBytes = "max_page_bytes"
    }
}

/// One archived payload's metadata.
package struct ArchiveEntryMetadata: Codable, Sendable, Equatable {
    package var seq: Int
    /// The URL or file the payload came from.
    package var source: String
    package var fetchedAt: String
    package var httpStatus: Int?
    /// A safe subset of the response headers (never credentials).
    package var headers: [String: String]?
    package var rawLength: Int
    /// CRC-32C of the raw payload.
    package var crc32c: UInt32
    /// The pipeline's resource the page belongs to (pipelines with `resources:` only).
    package var resource: String?
    /// The values its records took from their parent record (`for_each … with:`).
    package var injected: [InjectedValue]?
    /// How the payload is compressed, as it came (a `.gz` or `.zst` file): a replay inflates it as the run did.
    package var compression: Compression?
    /// What was asked besides the URL: a POST's method and body (its secrets redacted).
    package var request: RequestRecord?

    enum CodingKeys: String, CodingKey {
        case seq, source, fetchedAt = "fetched_at", httpStatus = "http_status", headers
        case rawLength = "raw_length", crc32c, resource, injected, compression, request
    }
}

/// An archive that cannot be written or read, naming the file and, where there is one, the entry.
package struct ArchiveError: Error, Sendable, CustomStringConvertible {
    package var path: String
    /// The entry's sequence number, or `nil` for the file as a whole.
    package var seq: Int?
    package var offset: Int?
    package var message: String

    package var description: String {
        var place = path
        if let seq { place += " entry \(seq)" }
        if let offset { place += " (byte \(offset))" }
        return "\(place): \(message)"
    }
}

extension UInt32 {
    var littleEndianBytes: [UInt8] { withUnsafeBytes(of: littleEndian) { Array($0) } }
}

extension UInt64 {
    var littleEndianBytes: [UInt8] { withUnsafeBytes(of: littleEndian) { Array($0) } }
}

extension Array where Element == UInt8 {
    func u32(at offset: Int) -> UInt32 {
        withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) }
    }

    func u64(at offset: Int) -> UInt64 {
        withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: UInt64.self)) }
    }
}
