import Dispatch
import Foundation
import Synchronization

/// Appends every page to the run's archive before it is decoded, on its own serial queue, so
/// that compression overlaps decoding and anything decoded can be replayed.
///
/// The writer and `failure` are confined to `queue`; `hasFailed` is safe from any queue.
final class ArchiveStage: @unchecked Sendable {  // confined to `queue`
    let queue = DispatchQueue(label: "ingot.archive", qos: .userInitiated)
    private let writer: ArchiveWriter
    private let failed = Mutex(false)
    private let written = Mutex(0)
    private(set) var failure: ArchiveError?

    var path: String { writer.path }

    /// The pipeline's resource names, when it has several: each entry records its page's.
    var resourceNames: [String]?

    init(writer: ArchiveWriter) {
        self.writer = writer
    }

    /// Whether appending failed (the source then stops). Safe from any queue.
    var hasFailed: Bool { failed.withLock { $0 } }

    /// Bytes written to the archive so far (compressed). Safe from any queue.
    var bytesWritten: Int { written.withLock { $0 } }

    /// Archives `page` and returns it with its archive location, or `nil` when it could not be
    /// archived (the run then fails: nothing is decoded that was not archived first).
    func append(_ page: Page) -> Page? {
        dispatchPrecondition(condition: .onQueue(queue))
        guard failure == nil else { return nil }
        do {
            try writer.append(
                page.bytes, seq: page.seq, source: page.source, fetchedAt: page.http?.fetchedAt ?? Date(),
                httpStatus: page.http?.status, headers: page.http?.headers, resource: resourceNames?[page.resource],
                injected: page.injected, compression: page.compression, request: page.http?.request)
            written.withLock { $0 = Int(writer.size) }
            var archived = page
            archived.archive = ArchiveLocation(path: writer.path, entry: page.seq)
            return archived
        } catch {
            failure = error
            failed.withLock { $0 = true }
            return nil
        }
    }

    /// Writes the index and closes the file.
    func close() {
        dispatchPrecondition(condition: .onQueue(queue))
        do {
            try writer.close()
        } catch {
            if failure == nil { failure = error }
        }
    }
}
