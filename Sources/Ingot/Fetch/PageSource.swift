import Foundation
import Synchronization
import Logging

/// One raw payload entering the pipeline, numbered in arrival order.
public struct Page: Sendable {
    /// 1, 2, 3, … in the order the source produced the pages; pages are applied in this order.
    public var seq: Int
    /// Where the bytes came from: a file path, a URL or an archive entry.
    public var source: String
    public var bytes: [UInt8]
    /// The archive holding this payload, and its entry there (set by the archive stage, or by a
    /// replay); rejections name them.
    public var archive: ArchiveLocation?
    /// The HTTP status and safe headers, for a fetched page.
    public var http: HTTPExchange?
    /// Where the source continues after this page (committed with it, for `--resume`).
    public var resumeState: String?
    /// Set when the payload passed the run's `max_page_bytes` and was not kept (``bytes`` is then
    /// empty or a prefix): how many bytes were seen. The pipeline rejects such a page.
    public var oversized: Int?
    /// Set when the source could not read the payload (a damaged unit of a joined run): why,
    /// naming the page (its unit's seq). The pipeline rejects such a page and goes on.
    public var unreadable: String?
    /// In a run shared by several jobs (`--join`): the page's unit in the shared run's source
    /// (``seq`` numbers the pages of this job).
    public var unit: UnitRef?

    public init(
        seq: Int, source: String, bytes: [UInt8], archive: ArchiveLocation? = nil, http: HTTPExchange? = nil,
        resumeState: String? = nil
    ) {
        self.seq = seq
        self.source = source
        self.bytes = bytes
        self.archive = archive
        self.http = http
        self.resumeState = resumeState
    }
}

/// A page of a run shared by several jobs, as one job claimed it: its number in the shared
/// source, and which claim of it this is (a unit whose lease ran out is claimed again; only the
/// latest claim may commit it).
public struct UnitRef: Sendable, Hashable {
    /// 1, 2, 3, … in the shared source's order: later units win.
    public var seq: Int
    /// How many times the unit was claimed, this claim included.
    public var claim: Int

    /// The `claim`-th claim of unit `seq`.
    public init(seq: Int, claim: Int) {
        self.seq = seq
        self.claim = claim
    }
}

/// Produces a run's pages in order. Called from the pipeline's source queue only.
public protocol PageSource: AnyObject, Sendable {
    /// The next page, or `nil` when the source is exhausted.
    func next() throws -> Page?
    /// Continues after a committed page, given the ``Page/resumeState`` it carried.
    func resume(from state: String) throws
    /// Asks a source that may be waiting (a retry's backoff) to give up promptly. Safe from any
    /// queue; the run is stopping.
    func cancel()
    /// Gives the source the run's logger (it carries `pipeline` and `run_id`), before the first
    /// ``next()``: every line of a run names its run.
    func useLogger(_ logger: Logger)
    /// Gives the source the run's metrics (fetch latency, retries), before the first ``next()``.
    func useMetrics(_ metrics: RunMetrics)
    /// What the source reads, without any secret (`files DIR/GLOB`, `http URL`, `archive PATH`):
    /// the jobs of a joined run must read the same source.
    var origin: String { get }
}

extension PageSource {
    public func cancel() {}
    /// Sources that log nothing ignore the run's logger.
    public func useLogger(_ logger: Logger) {}
    /// Sources that do not fetch record no metrics.
    public func useMetrics(_ metrics: RunMetrics) {}
    /// A source that does not say what it reads is named by its type.
    public var origin: String { "\(Self.self)" }

    /// Sources that keep no position cannot resume: `--resume` (and a joined run's fetcher
    /// taking over) fails with a source error.
    public func resume(from state: String) throws {
        throw SourceError(source: "\(Self.self)", message: "this source cannot resume")
    }
}

/// The files of a directory whose names match a glob, read whole, in name order.
public final class DirectoryPageSource: PageSource, @unchecked Sendable {  // used from the source queue only
    public let directory: String
    public let glob: String
    public let files: [String]
    /// Files bigger than this are not read: they become oversized pages (rejected by the run).
    public let maxPageBytes: Int
    private var position = 0

    /// Lists the matching files; throws when the directory cannot be read. Files over
    /// `maxPageBytes` are not read: they come as oversized pages.
    public init(directory: String, glob: String, maxPageBytes: Int = RunOptions.defaultMaxPageBytes) throws {
        self.directory = directory
        self.glob = glob
        self.maxPageBytes = maxPageBytes
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            throw SourceError(source: directory, message: "cannot list the directory: \(error.localizedDescription)")
        }
        files = names.filter { fnmatch(glob, $0, 0) == 0 }.sorted()
    }

    public var origin: String { "files \((directory as NSString).standardizingPath)/\(glob)" }

    public func next() throws -> Page? {
        guard position < files.count else { return nil }
        let path = (directory as NSString).appendingPathComponent(files[position])
        position += 1
        let resumeState = "after:" + files[position - 1]
        let (bytes, oversized) = try DirectoryPageSource.read(path, limit: maxPageBytes)
        var page = Page(seq: position, source: path, bytes: bytes, resumeState: resumeState)
        page.oversized = oversized
        return page
    }

    /// Reads `path` up to `limit` bytes. A bigger file (by its size, or by what it yields: a file
    /// that grows, a pipe) is not kept: its bytes are dropped and `oversized` says how many were
    /// seen, so a huge file never has to fit in memory to be refused.
    static func read(_ path: String, limit: Int) throws -> (bytes: [UInt8], oversized: Int?) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw SourceError(source: path, message: "cannot read the file: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var st = stat()
        if fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, Int(st.st_size) > limit {
            return ([], Int(st.st_size))
        }
        var bytes: [UInt8] = []
        if (st.st_mode & S_IFMT) == S_IFREG { bytes.reserveCapacity(Int(st.st_size)) }
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw SourceError(source: path, message: "cannot read the file: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            if bytes.count + n > limit { return ([], bytes.count + n) }
            bytes.append(contentsOf: chunk[0..<n])
        }
        return (bytes, nil)
    }

    /// Continues with the first file named after `after:NAME`.
    public func resume(from state: String) throws {
        guard state.hasPrefix("after:") else { throw SourceError(source: directory, message: "cannot resume from '\(state)'") }
        let last = String(state.dropFirst(6))
        position = files.firstIndex { $0 > last } ?? files.count
    }
}

/// A source that cannot produce its next page: the run stops (everything before is committed).
public struct SourceError: Error, Sendable, CustomStringConvertible {
    public var source: String
    public var message: String
    public var description: String { "\(source): \(message)" }
}

/// A flag set once from any queue (a run stopping) and read from others (the source loop, a
/// retry's wait, a transfer's progress callback).
final class StopFlag: Sendable {
    let value = Mutex(false)
}
