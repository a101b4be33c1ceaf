import Foundation

/// Reads an archive: its header, its entries' metadata (from the index, or by scanning when the
/// index is missing or torn), and any entry's payload without decompressing the others.
///
/// A torn tail — the writer was killed mid-entry — is not an error: every whole entry before it
/// is read, and ``tornAt`` says where the file stops making sense. Not thread-safe.
public final class ArchiveReader {
    /// One entry's place in the file.
    public struct Entry: Sendable {
        public var metadata: ArchiveEntryMetadata
        /// Offset of the entry's first byte.
        public var offset: Int
        /// Offset and length of its zstd frame.
        public var frameOffset: Int
        public var frameLength: Int
    }

    public let path: String
    public let header: ArchiveHeader
    public private(set) var entries: [Entry] = []
    /// Where the readable part ends, when the file was cut or damaged after it; `nil` for a whole archive.
    public private(set) var tornAt: Int?
    /// Why reading stopped at ``tornAt``.
    public private(set) var tornReason: String?
    /// The entry where reading stopped (the one after the last whole entry), when the problem is
    /// in an entry rather than in the index.
    public private(set) var tornEntry: Int?
    /// Whether the index was present and agreed with the entries.
    public private(set) var hasIndex = false
    /// Largest payload a frame may inflate to. Default 64 MiB.
    public var decompressionLimit = 64 << 20

    private let fd: Int32
    private let size: Int
    private let zstd = Zstd()
    private let headerEnd: Int

    /// Opens `path` and reads its header and entry list.
    public init(path: String) throws(ArchiveError) {
        self.path = path
        fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ArchiveError(path: path, message: "cannot open: \(String(cString: strerror(errno)))") }
        var st = stat()
        fstat(fd, &st)
        size = Int(st.st_size)

        // Header.
        let prefix = ArchiveReader.pread(fd, 0, 16)
        guard prefix.count == 16, Array(prefix[0..<8]) == ArchiveFormat.fileMagic else {
            _ = Foundation.close(fd)
            throw ArchiveError(path: path, offset: 0, message: prefix.count < 16 ? "the archive is cut inside its header" : "not an Ingot archive")
        }
        let headerLength = Int(prefix.u32(at: 8))
        let headerCRC = prefix.u32(at: 12)
        guard headerLength <= ArchiveFormat.maxMetadata, 16 + headerLength <= size else {
            _ = Foundation.close(fd)
            throw ArchiveError(path: path, offset: 8, message: "the archive is cut inside its header")
        }
        let json = ArchiveReader.pread(fd, 16, headerLength)
        guard CRC32C.checksum(json) == headerCRC else {
            _ = Foundation.close(fd)
            throw ArchiveError(path: path, offset: 16, message: "the header's checksum does not match")
        }
        do {
            header = try JSONDecoder().decode(ArchiveHeader.self, from: Data(json))
        } catch {
            _ = Foundation.close(fd)
            throw ArchiveError(path: path, offset: 16, message: "the header is not readable: \(error)")
        }
        headerEnd = 16 + headerLength
        guard header.formatVersion == ArchiveFormat.version else {
            _ = Foundation.close(fd)
            throw ArchiveError(path: path, message: "archive format \(header.formatVersion) is not supported (this Ingot reads \(ArchiveFormat.version))")
        }
        scan()
    }

    deinit {
        _ = Foundation.close(fd)
    }

    // MARK: - Entries

    /// The payload of `entry`, checked against its length and CRC-32C.
    public func payload(of entry: Entry) throws(ArchiveError) -> [UInt8] {
        let frame = ArchiveReader.pread(fd, entry.frameOffset, entry.frameLength)
        guard frame.count == entry.frameLength else {
            throw ArchiveError(path: path, seq: entry.metadata.seq, offset: entry.frameOffset, message: "the entry is cut")
        }
        let bytes: [UInt8]
        do {
            bytes = try zstd.decompress(frame[...], expectedLength: entry.metadata.rawLength, limit: decompressionLimit)
        } catch {
            throw ArchiveError(path: path, seq: entry.metadata.seq, offset: entry.frameOffset, message: "\(error)")
        }
        guard CRC32C.checksum(bytes) == entry.metadata.crc32c else {
            throw ArchiveError(path: path, seq: entry.metadata.seq, offset: entry.frameOffset, message: "the payload's checksum does not match")
        }
        return bytes
    }

    /// The entry with sequence number `seq`.
    public func entry(seq: Int) -> Entry? {
        entries.first { $0.metadata.seq == seq }
    }

    /// Checks every entry (metadata, frame, payload checksum) and the index; throws at the first problem.
    public func verify() throws(ArchiveError) {
        for entry in entries { _ = try payload(of: entry) }
        if let tornAt {
            throw ArchiveError(path: path, seq: tornEntry, offset: tornAt, message: tornReason ?? "the archive is damaged")
        }
    }

    // MARK: - Internals

    /// Reads the entries by walking the file from the header; then checks the index against them.
    private func scan() {
        // Where the trailer says the index starts, if the trailer is whole.
        let trailer = ArchiveReader.pread(fd, size - ArchiveFormat.trailer, ArchiveFormat.trailer)
        let claimedIndex = size - ArchiveFormat.trailer >= headerEnd && trailer.count == ArchiveFormat.trailer
            && Array(trailer[8...]) == ArchiveFormat.endMagic ? Int(trailer.u64(at: 0)) : nil
        var offset = headerEnd
        var found: [Entry] = []
        var indexStart: Int?
        while offset < size {
            let prefix = ArchiveReader.pread(fd, offset, ArchiveFormat.entryPrefix)
            if prefix.count >= 4 && Array(prefix[0..<4]) == ArchiveFormat.indexMagic {
                indexStart = offset
                break
            }
            guard prefix.count == ArchiveFormat.entryPrefix else { return torn(offset, "the archive is cut inside an entry header", found) }
            guard Array(prefix[0..<4]) == ArchiveFormat.entryMagic else {
                if offset == claimedIndex {
                    entries = found
                    tornAt = offset
                    tornReason = "the index is damaged"
                    return
                }
                return torn(offset, "no entry starts here", found)
            }
            let metaLength = Int(prefix.u32(at: 4))
            let metaCRC = prefix.u32(at: 8)
            let frameLength = prefix.u64(at: 12)
            let metaOffset = offset + ArchiveFormat.entryPrefix
            guard metaLength <= ArchiveFormat.maxMetadata, frameLength <= UInt64(size),
                metaOffset + metaLength + Int(frameLength) <= size
            else { return torn(offset, "the archive is cut inside an entry", found) }
            let json = ArchiveReader.pread(fd, metaOffset, metaLength)
            guard CRC32C.checksum(json) == metaCRC,
                let metadata = try? JSONDecoder().decode(ArchiveEntryMetadata.self, from: Data(json))
            else { return torn(offset, "an entry's metadata checksum does not match", found) }
            found.append(Entry(
                metadata: metadata, offset: offset, frameOffset: metaOffset + metaLength, frameLength: Int(frameLength)))
            offset = metaOffset + metaLength + Int(frameLength)
        }
        entries = found
        guard let indexStart else {
            // Whole entries and nothing after them: the writer stopped before writing the index.
            tornAt = offset
            tornReason = "the archive has no index (the run did not close it)"
            return
        }
        let tail = ArchiveReader.pread(fd, indexStart, size - indexStart)
        let count = tail.count >= 8 ? Int(tail.u32(at: 4)) : -1
        let expected = 8 + 8 * max(count, 0) + 4 + ArchiveFormat.trailer
        guard count == found.count, tail.count == expected,
            CRC32C.checksum(Array(tail[4..<(8 + 8 * count)])) == tail.u32(at: 8 + 8 * count),
            Int(tail.u64(at: 12 + 8 * count)) == indexStart,
            Array(tail[(expected - 8)...]) == ArchiveFormat.endMagic,
            (0..<count).allSatisfy({ Int(tail.u64(at: 8 + 8 * $0)) == found[$0].offset })
        else {
            tornAt = indexStart
            tornReason = tail.count < expected ? "the archive is cut inside its index" : "the index does not match the entries"
            return
        }
        hasIndex = true
    }

    private func torn(_ offset: Int, _ reason: String, _ found: [Entry]) {
        entries = found
        tornAt = offset
        tornReason = reason
        tornEntry = (found.last?.metadata.seq ?? 0) + 1
    }

    static func pread(_ fd: Int32, _ offset: Int, _ count: Int) -> [UInt8] {
        guard count > 0 else { return [] }
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            var done = 0
            guard let base = buffer.baseAddress else {
                initialized = 0
                return
            }
            while done < count {
                let n = Foundation.pread(fd, base + done, count - done, off_t(offset + done))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                done += n
            }
            initialized = done
        }
    }
}
