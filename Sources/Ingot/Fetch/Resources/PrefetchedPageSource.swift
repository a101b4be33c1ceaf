import Foundation
import Logging
import Synchronization

/// A source read to its end before the run applies any page — its pages spooled to a file of the
/// job's own in the temporary directory (removed when the source is freed) — so that it can list
/// them up front (``ListingPageSource``): what a refresh over HTTP needs to leave unchanged pages
/// out (PipelineRunner+Refresh.swift). Only a refresh wraps its source so; a first load streams.
///
/// Each spooled page: its metadata as one JSON line, then its bytes. Used from the source queue
/// only (``pageDigests()`` first, then ``next()``).
final class PrefetchedPageSource: ListingPageSource, @unchecked Sendable {  // the source queue only
    private let inner: any PageSource
    private let stopping: StopFlag
    let path: String
    private var file: UnsafeMutablePointer<FILE>?
    private var count = 0
    private var read = 0
    private var prefetched = false
    /// Why the source stopped before its end, if it did: thrown once the pages read before it
    /// are handed on (they are applied, as a streaming run would have applied them).
    private var failure: (any Error)?

    /// What a spooled page keeps besides its bytes.
    private struct Header: Codable {
        var source: String
        var length: Int
        var resumeState: String?
        var oversized: Int?
        var unreadable: String?
        var compression: Compression?
        var resource: Int
        var resourceName: String?
        var status: Int?
        var headers: [String: String]?
        var fetchedAt: Date?
        var archivePath: String?
        var archiveEntry: Int?
        var request: RequestRecord?
    }

    /// Wraps `inner`; `stopping` ends the prefetch early (the run was asked to stop).
    init(_ inner: any PageSource, stopping: StopFlag) throws {
        self.inner = inner
        self.stopping = stopping
        path = FileManager.default.temporaryDirectory.appendingPathComponent("ingot-pages-\(UUID().uuidString).bin").path
        guard let file = fopen(path, "w+") else {
            throw SourceError(source: inner.origin, message: "cannot create the page spool \(path): \(String(cString: strerror(errno)))")
        }
        self.file = file
    }

    deinit {
        if let file { fclose(file) }
        unlink(path)
    }

    var origin: String { inner.origin }
    func cancel() { inner.cancel() }
    func useLogger(_ logger: Logger) { inner.useLogger(logger) }

    /// Reads the whole source into the spool, digesting each page.
    func pageDigests() throws -> [[UInt8]] {
        guard !prefetched, let file else { throw SourceError(source: inner.origin, message: "the pages were listed already") }
        prefetched = true
        var digests: [[UInt8]] = []
        defer {
            fflush(file)
            rewind(file)
        }
        while !stopping.value.withLock({ $0 }) {
            let next: Page?
            do {
                next = try inner.next()
            } catch {
                failure = error
                throw error
            }
            guard let page = next else { break }
            let header = Header(
                source: page.source, length: page.bytes.count, resumeState: page.resumeState, oversized: page.oversized,
                unreadable: page.unreadable, compression: page.compression, resource: page.resource, resourceName: page.resourceName,
                status: page.http?.status, headers: page.http?.headers, fetchedAt: page.http?.fetchedAt, archivePath: page.archive?.path,
                archiveEntry: page.archive?.entry, request: page.http?.request)
            let line = try JSONEncoder().encode(header) + Data("\n".utf8)
            let written =
                line.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, file) } == line.count
                && page.bytes.withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, file) } == page.bytes.count
            guard written else {
                let error = SourceError(
                    source: inner.origin, message: "cannot write the page spool \(path): \(String(cString: strerror(errno)))")
                failure = error
                throw error
            }
            digests.append(page.oversized == nil ? page.bytes.withUnsafeBytes { SHA256.digest($0) } : [])
            count += 1
        }
        return digests
    }

    func next() throws -> Page? {
        if !prefetched { _ = try pageDigests() }
        guard read < count, let file else {
            if let failure {
                self.failure = nil
                throw failure
            }
            return nil
        }
        read += 1
        var line: [UInt8] = []
        while true {
            let c = getc(file)
            guard c != EOF else { throw SourceError(source: path, message: "the page spool is cut short") }
            if c == 0x0A { break }
            line.append(UInt8(c))
        }
        let header = try JSONDecoder().decode(Header.self, from: Data(line))
        var bytes = [UInt8](repeating: 0, count: header.length)
        guard header.length == 0 || bytes.withUnsafeMutableBytes({ fread($0.baseAddress, 1, header.length, file) }) == header.length
        else { throw SourceError(source: path, message: "the page spool is cut short") }
        var page = Page(seq: read, source: header.source, bytes: bytes, resumeState: header.resumeState)
        page.oversized = header.oversized
        page.unreadable = header.unreadable
        page.compression = header.compression
        page.resource = header.resource
        page.resourceName = header.resourceName
        if let status = header.status {
            page.http = HTTPExchange(
                status: status, headers: header.headers ?? [:], fetchedAt: header.fetchedAt ?? Date(), request: header.request)
        }
        if let archivePath = header.archivePath, let entry = header.archiveEntry {
            page.archive = ArchiveLocation(path: archivePath, entry: entry)
        }
        return page
    }
}
