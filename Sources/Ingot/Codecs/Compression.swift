import Foundation

/// How a page's bytes are compressed when they come (a `.gz` or `.zst` file): kept so in the
/// archive, inflated by the decode lane, bounded by `max_page_bytes` after decompression.
package enum Compression: String, Sendable, Codable, Equatable {
    case gzip
    case zstd

    /// The compression a file's name says (`.gz`, `.zst`), or `nil`.
    package static func of(path: String) -> Compression? {
        if path.hasSuffix(".gz") { return .gzip }
        if path.hasSuffix(".zst") { return .zstd }
        return nil
    }

    /// `bytes` decompressed, up to `limit` bytes: past it, nothing is kept and `oversized` says
    /// how many bytes were seen (a bomb never has to fit in memory to be refused). Throws when
    /// the bytes are not a stream of this compression.
    package func decompress(_ bytes: [UInt8], limit: Int) throws -> (bytes: [UInt8], oversized: Int?) {
        switch self {
        case .gzip: try Gzip.inflate(bytes, limit: limit)
        case .zstd: try Zstd().decompressStream(bytes, limit: limit)
        }
    }
}
