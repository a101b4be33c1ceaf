/// Replays an archive: its entries' payloads, in entry order, each checked against its length
/// and CRC-32C. A torn tail ends the replay at the last whole entry (the reader says where).
package final class ArchivePageSource: PageSource, @unchecked Sendable {  // used from the source queue only
    package let reader: ArchiveReader
    private var position = 0

    package init(reader: ArchiveReader) {
        self.reader = reader
    }

    /// Replays the archive at `path`, inflating no entry past `maxPageBytes` (its header's
    /// limit, else the default, when `nil`). Throws when the file is not an archive.
    package convenience init(path: String, maxPageBytes: Int? = nil) throws {
        let reader = try ArchiveReader(path: path)
        reader.decompressionLimit = maxPageBytes ?? reader.header.maxPageBytes ?? Page.defaultMaxBytes
        self.init(reader: reader)
    }

    /// `archive PATH`.

    package var origin: String { "archive \(reader.path)" }

    package func next() throws -> Page? {
        guard position < reader.entries.count else { return nil }
        let entry = reader.entries[position]
        position += 1
        let bytes = try reader.payload(of: entry)
        var page = Page(
            seq: entry.metadata.seq, source: entry.metadata.source, bytes: bytes,
            archive: ArchiveLocation(path: reader.path, entry: entry.metadata.seq), resumeState: "after:\(entry.metadata.seq)")
        page.resourceName = entry.metadata.resource
        page.injected = entry.metadata.injected ?? []
        page.compression = entry.metadata.compression
        return page
    }

    /// Continues with the first entry after `after:SEQ`.
    package func resume(from state: String) throws {
        guard state.hasPrefix("after:"), let last = Int(state.dropFirst(6)) else {
            throw SourceError(source: reader.path, message: "cannot resume from '\(state)'")
        }
        position = reader.entries.firstIndex { $0.metadata.seq > last } ?? reader.entries.count
    }
}
