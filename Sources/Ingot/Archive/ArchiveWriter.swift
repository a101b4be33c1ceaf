import Foundation

/// Appends payloads to a new archive file, one zstd frame per entry, and writes the index on
/// `close()`. A process killed mid-write leaves a torn tail that readers detect and skip.
///
/// Not thread-safe: the pipeline owns it on its archive queue.
package final class ArchiveWriter {
    package let path: String
    private let fd: Int32
    private let zstd: Zstd
    private var offsets: [UInt64] = []
    private var position: UInt64 = 0
    private var closed = false

    /// Creates the archive at `path` (which must not exist) and writes its header.
    package init(path: String, header: ArchiveHeader, compressionLevel: Int32 = 3) throws(ArchiveError) {
        self.path = path
        zstd = Zstd(level: compressionLevel)
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw ArchiveError(path: path, message: "cannot create the archive: \(String(cString: strerror(errno)))")
        }
        // The writer writes its own format version, whatever the caller filled in.
        var header = header
        header.formatVersion = ArchiveFormat.version
        let json: [UInt8]
        do {
            json = Array(try JSONEncoder.archive.encode(header))
        } catch {
            throw ArchiveError(path: path, message: "cannot encode the header: \(error)")
        }
        guard json.count <= ArchiveFormat.maxMetadata else {
            throw ArchiveError(
                path: path, message: "the archive header (the pipeline file's text) is larger than \(ArchiveFormat.maxMetadata) bytes")
        }
        try write(ArchiveFormat.fileMagic + UInt32(json.count).littleEndianBytes + CRC32C.checksum(json).littleEndianBytes + json)
    }

    deinit {
        if !closed { _ = Foundation.close(fd) }
    }

    /// Appends one payload; returns its metadata as written.
    @discardableResult
    package func append(
        _ bytes: [UInt8], seq: Int, source: String, fetchedAt: Date = Date(), httpStatus: Int? = nil,
        headers: [String: String]? = nil, resource: String? = nil, injected: [InjectedValue] = [], compression: Compression? = nil,
        request: RequestRecord? = nil
    ) throws(ArchiveError) -> ArchiveEntryMetadata {
        let metadata = ArchiveEntryMetadata(
            seq: seq, source: source, fetchedAt: fetchedAt.runTimestamp, httpStatus: httpStatus,
            headers: headers, rawLength: bytes.count, crc32c: CRC32C.checksum(bytes), resource: resource,
            injected: injected.isEmpty ? nil : injected, compression: compression, request: request)
        let json: [UInt8]
        let frame: [UInt8]
        do {
            json = Array(try JSONEncoder.archive.encode(metadata))
            frame = try zstd.compress(bytes)
        } catch {
            throw ArchiveError(path: path, seq: seq, message: "cannot encode the entry: \(error)")
        }
        // What a reader refuses is never written: the run would archive what it cannot replay.
        guard json.count <= ArchiveFormat.maxMetadata, bytes.count <= ArchiveFormat.maxPayload else {
            throw ArchiveError(path: path, seq: seq, message: "the entry is larger than an archive entry may be")
        }
        var record = ArchiveFormat.entryMagic
        record.reserveCapacity(ArchiveFormat.entryPrefix + json.count + frame.count)
        record += UInt32(json.count).littleEndianBytes
        record += CRC32C.checksum(json).littleEndianBytes
        record += UInt64(frame.count).littleEndianBytes
        record += json
        record += frame
        offsets.append(position)
        try write(record)
        return metadata
    }

    /// Writes the index and closes the file. Entries stay readable without it.
    package func close() throws(ArchiveError) {
        guard !closed else { return }
        closed = true
        var index = ArchiveFormat.indexMagic + UInt32(offsets.count).littleEndianBytes
        for offset in offsets { index += offset.littleEndianBytes }
        let start = position
        // Version 2: the checksum covers the count, the offsets and the index start.
        let crc = CRC32C.checksum(Array(index[4...]) + start.littleEndianBytes)
        index += crc.littleEndianBytes + start.littleEndianBytes + ArchiveFormat.endMagic
        try write(index)
        fsync(fd)
        _ = Foundation.close(fd)
    }

    /// Bytes written so far.
    package var size: UInt64 { position }

    private func write(_ bytes: [UInt8]) throws(ArchiveError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { raw -> Int in
                guard let base = raw.baseAddress else { return 0 }
                return Foundation.write(fd, base + done, raw.count - done)
            }
            if n < 0 {
                if errno == EINTR { continue }
                throw ArchiveError(path: path, offset: Int(position), message: "write failed: \(String(cString: strerror(errno)))")
            }
            done += n
        }
        position += UInt64(bytes.count)
    }

}

extension JSONEncoder {
    /// Sorted keys: archive metadata is byte-for-byte reproducible.
    static var archive: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}
