import Foundation

/// Reads an archive: its header, its entries' metadata (from the index, or by scanning when the
/// index is missing or torn), and any entry's payload without decompressing the others.
///
/// A torn tail — the writer was killed mid-entry — is not an error: every whole entry before it
/// is read, and ``tornAt`` says where the file stops making sense. Not thread-safe.
package final class ArchiveReader {
    /// One entry's place in the file.
    package struct Entry: Sendable {
        package var metadata: ArchiveEntryMetadata
        /// Offset of the entry's first byte.
        package var offset: Int
        /// Offset and length of its zstd frame.
        package var frameOffset: Int
        package var frameLength: Int
    }

    package let path: String
    /// The archive's header (its `max_page_bytes` cleared when out of range: see ``headerDamage``).
    package private(set) var header: ArchiveHeader
    package private(set) var entries: [Entry] = []
    /// Where the readable part ends, when the file was cut or damaged after it; `nil` for a whole archive.
    package private(set) var tornAt: Int?
    /// Why reading stopped at ``tornAt``.
    package private(set) var tornReason: String?
    /// The entry where reading stopped (the one after the last whole entry), when the problem is
    /// in an entry rather than in the index.
    package private(set) var tornEntry: Int?
    /// Whether the index was present and agreed with the entries.
    package private(set) var hasIndex = false
    /// Largest payload a frame may inflate to. Default 64 MiB.
    package var decompressionLimit = 64 << 20
    /// Why the header cannot be trusted although its checksum matches (a number out of range);
    /// ``verify()`` throws it. `nil` for a sound header.
    package private(set) var headerDamage: String?

    private let fd: Int32
    private let size: Int
    private let zstd = Zstd()
    private let headerEnd: Int

    /// Opens `path` and reads its header and entry list.
    package init(path: String) throws(ArchiveError) {
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
            throw ArchiveError(
                path: path, offset: 0, message: prefix.count < 16 ? "the archive is cut inside its header" : "not an Ingot archive")
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
        guard ArchiveFormat.readableVersions.contains(header.formatVersion) else {
            _ = Foundation.close(fd)
            throw ArchiveError(
                path: path,
                message:
                    "archive format \(header.formatVersion) is not supported (this Ingot reads \(ArchiveFormat.readableVersions.map(String.init).joined(separator: " and ")))"
            )
        }
        scan()
        // The header's max_page_bytes is a number like any other read from the file: positive and
        // at most 1 GiB, or the header is damaged (verify says so; a replay refuses it).
        if let limit = header.maxPageBytes {
            if (1...ArchiveFormat.maxPayload).contains(limit) {
                decompressionLimit = limit
            } else {
                header.maxPageBytes = nil
                headerDamage = "the header claims max_page_bytes \(limit), outside 1...\(ArchiveFormat.maxPayload)"
            }
        }
    }

    deinit {
        _ = Foundation.close(fd)
    }

    // MARK: - Entries

    /// The payload of `entry`, checked against its length and CRC-32C.
    package func payload(of entry: Entry) throws(ArchiveError) -> [UInt8] {
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
            throw ArchiveError(
                path: path, seq: entry.metadata.seq, offset: entry.frameOffset, message: "the payload's checksum does not match")
        }
        return bytes
    }

    /// The entry with sequence number `seq`.
    package func entry(seq: Int) -> Entry? {
        entries.first { $0.metadata.seq == seq }
    }

    /// Checks every entry (metadata, frame, payload checksum) and the index; throws at the first problem.
    package func verify() throws(ArchiveError) {
        if let headerDamage { throw ArchiveError(path: path, offset: 16, message: headerDamage) }
        for entry in entries { _ = try payload(of: entry) }
        if let tornAt {
            throw ArchiveError(path: path, seq: tornEntry, offset: tornAt, message: tornReason ?? "the archive is damaged")
        }
    }

    // MARK: - Internals

    /// Reads the entries by walking the file from the header; then checks the index against them.
    /// Every number read is checked before it is used: offsets inside the file, lengths
    /// non-negative and within their limits, the entry count bounded by what was found.
    private func scan() {
        // Where the trailer says the index starts, if the trailer is whole.
        let trailer =
            size >= headerEnd + ArchiveFormat.trailer
            ? ArchiveReader.pread(fd, size - ArchiveFormat.trailer, ArchiveFormat.trailer) : []
        let claimedIndex =
            trailer.count == ArchiveFormat.trailer && Array(trailer[8...]) == ArchiveFormat.endMagic
            ? Int(exactly: trailer.u64(at: 0)) : nil
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
            let metaOffset = offset + ArchiveFormat.entryPrefix
            guard metaLength <= ArchiveFormat.maxMetadata, let frameLength = Int(exactly: prefix.u64(at: 12)),
                frameLength <= size - metaOffset - metaLength
            else { return torn(offset, "the archive is cut inside an entry", found) }
            let json = ArchiveReader.pread(fd, metaOffset, metaLength)
            guard CRC32C.checksum(json) == metaCRC,
                let metadata = try? JSONDecoder().decode(ArchiveEntryMetadata.self, from: Data(json))
            else { return torn(offset, "an entry's metadata checksum does not match", found) }
            if let problem = ArchiveReader.problem(with: metadata, after: found.last?.metadata.seq) {
                return torn(offset, "an entry's metadata is invalid: \(problem)", found)
            }
            found.append(Entry(metadata: metadata, offset: offset, frameOffset: metaOffset + metaLength, frameLength: frameLength))
            offset = metaOffset + metaLength + frameLength
        }
        entries = found
        guard let indexStart else {
            // Whole entries and nothing after them: the writer stopped before writing the index.
            tornAt = offset
            tornReason = "the archive has no index (the run did not close it)"
            return
        }
        // The index must list exactly the entries found: read only the bytes such an index takes.
        let count = found.count
        let expected = 8 + 8 * count + 4 + ArchiveFormat.trailer
        let tail = ArchiveReader.pread(fd, indexStart, min(size - indexStart, expected + 1))
        guard tail.count == expected, Int(tail.u32(at: 4)) == count,
            tail.u64(at: 12 + 8 * count) == UInt64(indexStart),
            Array(tail[(expected - 8)...]) == ArchiveFormat.endMagic,
            indexChecksumMatches(tail, count: count),
            (0..<count).allSatisfy({ tail.u64(at: 8 + 8 * $0) == UInt64(found[$0].offset) })
        else {
            tornAt = indexStart
            tornReason = tail.count < expected ? "the archive is cut inside its index" : "the index does not match the entries"
            return
        }
        hasIndex = true
    }

    /// Version 1 checksums the count and offsets; version 2 also the trailer's index start.
    private func indexChecksumMatches(_ tail: [UInt8], count: Int) -> Bool {
        let stored = tail.u32(at: 8 + 8 * count)
        var covered = Array(tail[4..<(8 + 8 * count)])
        if header.formatVersion >= 2 { covered += tail[(12 + 8 * count)..<(20 + 8 * count)] }
        return CRC32C.checksum(covered) == stored
    }

    /// What is wrong with an entry's (checksummed) metadata, if anything: a writer never
    /// produces these, but a hostile file can.
    static func problem(with m: ArchiveEntryMetadata, after previous: Int?) -> String? {
        if m.rawLength < 0 || m.rawLength > ArchiveFormat.maxPayload { return "raw_length \(m.rawLength) is out of range" }
        if m.seq < 1 || m.seq > ArchiveFormat.maxSeq { return "seq \(m.seq) is out of range" }
        if let previous, m.seq <= previous { return "seq \(m.seq) does not follow \(previous)" }
        if let status = m.httpStatus, !(0...999).contains(status) { return "http_status \(status) is out of range" }
        return nil
    }

    /// `s` as printed by `archive ls`: control characters escaped (the text comes from the file).
    package static func printable(_ s: String) -> String { JSONText.escapingControlCharacters(s) }

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
