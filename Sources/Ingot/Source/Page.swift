import Foundation
import Logging
import Synchronization

// The page: what a source produces and every later stage carries, with where it came from. The
// lowest layer but the model (docs/architecture.md): sources, decoding, the archive, the stores
// and the pipeline all speak it.

extension Page {
    /// The largest page accepted by default: 64 MiB.
    public static let defaultMaxBytes = 64 << 20
    /// What `max_page_bytes` / `--max-page-bytes` may be: 1 KiB to 1 GiB.
    public static let maxBytesRange = 1024...(1 << 30)
}

/// One raw payload entering the pipeline, numbered in arrival order.
public struct Page: Sendable {
    /// 1, 2, 3, … in the order the source produced the pages; pages are applied in this order.
    public var seq: Int
    /// Where the bytes came from: a file path, a URL or an archive entry.
    public var source: String
    /// The payload as the source read it.
    public var bytes: [UInt8]
    /// The archive holding this payload, and its entry there (set by the archive stage, or by a
    /// replay); rejections name them.
    package var archive: ArchiveLocation?
    /// The HTTP status and safe headers, for a fetched page.
    package var http: HTTPExchange?
    /// Where the source continues after this page (committed with it, for `--resume`).
    public var resumeState: String?
    /// Where the next run starts (`sync_url:`, a resume state's form), when this page says it:
    /// kept with the page's batch.
    package var syncState: String?
    /// Set when the payload passed the run's `max_page_bytes` and was not kept (``bytes`` is then
    /// empty or a prefix): how many bytes were seen. The pipeline rejects such a page.
    public var oversized: Int?
    /// Set when the source could not read the payload (a damaged unit of a joined run): why,
    /// naming the page (its unit's seq). The pipeline rejects such a page and goes on.
    public var unreadable: String?
    /// In a run shared by several jobs (`--join`): the page's unit in the shared run's source
    /// (``seq`` numbers the pages of this job).
    public var unit: UnitRef?
    /// The payload's JSON, when the source already parsed it (pagination reads the body): the
    /// decode lane maps it without parsing it again. A page is parsed once.
    package var parsed: JSONDocument?
    /// How ``bytes`` are compressed (a `.gz` or `.zst` file): the archive keeps them so, the
    /// decode lane inflates them.
    package var compression: Compression?
    /// The pipeline's resource the page belongs to (its index in `resources:`; 0 for a file without).
    package var resource = 0
    /// The resource by name, as an archive entry records it: a replay finds its index by name.
    package var resourceName: String?
    /// In a shared run: a request any job may make — a `for_each` request answered by one page,
    /// enqueued by the fetcher unfetched (its URL), fetched by the job that claims it
    /// (``SharedRequests``). `nil` for a page the fetcher read.
    package var request: String?
    /// In a shared run: a numbered page any job may fetch (docs/scale-out.md, "Requests any job
    /// makes") — its position as a resume state says it (`page:N`, `offset:N`: no URL, so no
    /// secret of the URL is stored), enqueued unfetched (``SharedRequests/defersPages(of:in:resource:)``).
    /// `nil` for a page the fetcher read.
    package var cursor: String?
    /// In a shared run: the pages of a paginated `for_each` request, kept together in its unit
    /// (``bytes`` holds them one after the other), each with its URL and length — or why it was
    /// rejected (a later page answered 404). The job that made the request keeps them so; a job
    /// that takes the unit over, and the run's archive, read them back (``Page/keptPages()``).
    package var requestPages: [RequestPage]?
    /// In a shared run: more pages of this page's unit follow it (a paginated request's pages, in
    /// order); the unit is committed with its last page.
    package var unitContinues = false
    /// In a shared run: a numbered page of the pipeline's source that a job fetched and found
    /// with no record (or no records array), where a single run stops. Whether the source ends
    /// at it is settled against the other jobs' pages (``SharedRun/settleEnd(of:)``).
    package var endsSource = false
    /// In a shared run: the page's unit's seq (a claimed unit's page is numbered by it); else its
    /// own ``seq``.
    package var unitSeq: Int { unit?.seq ?? seq }
    /// Values its records take from the parent record that requested it (`for_each … with:`):
    /// key and JSON text, added to each record where it has no such key.
    package var injected: [InjectedValue] = []
    /// SHA-256 of ``bytes``, set by a run that keeps prints for a refresh (the decode lane
    /// passes it on to the page's print).
    package var digest: [UInt8]?
    /// Set by a refresh on an unchanged page that shares rows with a change: the rows to apply
    /// (a stored footprint, PageFootprint.encoded()); the lane leaves the page's other rows as
    /// they are stored.
    package var appliedRows: [UInt8]?

    /// A page numbered `seq` from `source`, carrying where its source continues after it.
    public init(seq: Int, source: String, bytes: [UInt8], resumeState: String? = nil) {
        self.init(seq: seq, source: source, bytes: bytes, archive: nil, resumeState: resumeState)
    }

    /// A page already archived (a replay).
    package init(seq: Int, source: String, bytes: [UInt8], archive: ArchiveLocation?, resumeState: String? = nil) {
        self.seq = seq
        self.source = source
        self.bytes = bytes
        self.archive = archive
        self.resumeState = resumeState
    }

    /// A fetched page with its HTTP side, for the archive.
    package init(seq: Int, source: String, bytes: [UInt8], http: HTTPExchange?, resumeState: String? = nil) {
        self.init(seq: seq, source: source, bytes: bytes, resumeState: resumeState)
        self.http = http
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

/// The order of a shared run's writes: by unit, then, within a unit, by the part of it that gave
/// the write (its pages and their decoded parts, counted in order). Two batches cut from one
/// page share its unit but not its parts, so the later batch's values win, as in a single run
/// (a unit alone left them unordered: an earlier record's values kept, two sets merged, and a
/// deferred run's end merge failing on a duplicate key). docs/scale-out.md, "Later pages win,
/// across jobs".
///
/// A write's *key* packs the unit's seq and the part: `seq << 15 | part`; its *position* in the
/// database adds the join's ordinal above them: `ordinal << 43 | key`, so every write of a later
/// joined run wins over every write of an earlier one, and a position of the earlier format
/// (`ordinal << 32 | seq`) loses to every new one. Bounds: 268,435,455 units a run (a larger seq
/// is refused by the fetcher), 32,767 parts a unit (past it the parts share the last key), and
/// 1,048,575 joins a database (refused when a join would pass it).
package enum UnitOrder {
    /// Bits of a part's number within its unit.
    package static let partBits = 15
    /// The largest part number a key holds.
    package static let lastPart = 1 << partBits - 1
    /// The largest unit seq a key holds.
    package static let lastSeq = 1 << 28 - 1
    /// The largest join ordinal a position holds.
    package static let lastOrdinal: Int64 = 1 << 20 - 1

    /// Part `part` of unit `seq`; 0 for no unit.
    package static func key(seq: Int, part: Int) -> Int {
        guard seq > 0 else { return 0 }
        return Swift.min(seq, lastSeq) << partBits | Swift.min(Swift.max(part, 0), lastPart)
    }

    /// The key of unit `seq`'s last possible part: above every write the unit made.
    package static func lastKey(seq: Int) -> Int { key(seq: seq, part: lastPart) }

    /// The position in the database of a write with key `key` by the join numbered `ordinal`.
    package static func position(ordinal: Int64, key: Int) -> Int64 { Swift.min(ordinal, lastOrdinal) << 43 | Int64(key) }
}

/// One page of a paginated `for_each` request kept in its unit (``Page/requestPages``).
package struct RequestPage: Sendable, Equatable, Codable {
    /// The URL that answered it.
    package var source: String
    /// Its bytes, in the unit's payload after the pages before it.
    package var length: Int
    /// Why the page is rejected (the request was answered 404 there), when it is.
    package var unreadable: String?

    package init(source: String, length: Int, unreadable: String? = nil) {
        self.source = source
        self.length = length
        self.unreadable = unreadable
    }
}

extension Page {
    /// The most pages a request's unit may hold (``requestPages``): a unit row is input, and its
    /// labels must not make a job hand out millions of empty pages.
    package static let maxRequestPages = 100_000

    /// The pages of a request kept in this unit (``requestPages``), in order, each but the last
    /// saying that more of its unit follow; `[self]` when the unit keeps one page. A list that
    /// does not add up to the payload (a row someone wrote) makes one rejected page naming the
    /// unit.
    package func keptPages() -> [Page] {
        guard let parts = requestPages else { return [self] }
        var whole = self
        whole.requestPages = nil
        // Each length within the payload: their sum (at most 100,000 of them) cannot overflow.
        guard !parts.isEmpty, parts.count <= Page.maxRequestPages, parts.allSatisfy({ (0...bytes.count).contains($0.length) }),
            parts.reduce(0, { $0 + $1.length }) == bytes.count
        else {
            whole.bytes = []
            whole.unreadable = "unit \(unitSeq) keeps \(parts.count) pages that do not add up to its \(bytes.count) bytes"
            return [whole]
        }
        var pages: [Page] = []
        var start = 0
        for (k, part) in parts.enumerated() {
            var page = whole
            page.source = part.source
            page.bytes = Array(bytes[start..<start + part.length])
            page.unreadable = part.unreadable
            page.unitContinues = k + 1 < parts.count
            start += part.length
            pages.append(page)
        }
        return pages
    }

    /// `pages`, the answer of one request in order, as its unit keeps them: their bytes one after
    /// the other, each page's URL and length in ``requestPages``; the first page as it is when
    /// there is only one.
    package static func kept(_ pages: [Page]) -> Page? {
        guard var kept = pages.first else { return nil }
        guard pages.count > 1 else { return kept }
        kept.requestPages = pages.map { RequestPage(source: $0.source, length: $0.bytes.count, unreadable: $0.unreadable) }
        kept.bytes = pages.flatMap(\.bytes)
        kept.unreadable = nil
        kept.parsed = nil
        kept.unitContinues = false
        return kept
    }
}

/// A value a for_each child page's records take from their parent record.
package struct InjectedValue: Sendable, Equatable, Codable {
    /// The key the records get.
    package var key: String
    /// Its value, as JSON text.
    package var json: String

    package init(key: String, json: String) {
        self.key = key
        self.json = json
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
    /// What the source reads, without any secret (`files DIR/GLOB`, `http URL`, `archive PATH`):
    /// the jobs of a joined run must read the same source.
    var origin: String { get }
}

extension PageSource {
    /// Sources that never wait have nothing to cancel.
    public func cancel() {}
    /// Sources that log nothing ignore the run's logger.
    public func useLogger(_ logger: Logger) {}
    /// A source that does not say what it reads is named by its type.
    public var origin: String { "\(Self.self)" }

    /// Sources that keep no position cannot resume: `--resume` (and a joined run's fetcher
    /// taking over) fails with a source error.
    public func resume(from state: String) throws {
        throw SourceError(source: "\(Self.self)", message: "this source cannot resume")
    }
}

/// A source that knows its pages before it reads them (a directory): it can list their contents'
/// digests up front, which is what lets a refresh leave unchanged pages out (``RefreshPlan``).
package protocol ListingPageSource: PageSource {
    /// SHA-256 of each page's bytes, in the order ``PageSource/next()`` yields them (an empty
    /// array for a page it would not read: over the size limit).
    func pageDigests() throws -> [[UInt8]]
}

/// Where a payload is archived: the archive file and the entry's sequence number in it.
package struct ArchiveLocation: Sendable, Equatable, CustomStringConvertible {
    /// The archive file.
    package var path: String
    /// The entry's sequence number in it.
    package var entry: Int

    /// Entry `entry` of the archive at `path`.
    package init(path: String, entry: Int) {
        self.path = path
        self.entry = entry
    }

    /// `PATH#ENTRY`.
    package var description: String { "\(path)#\(entry)" }
}

/// The HTTP side of a fetched page, for the archive.
package struct HTTPExchange: Sendable {
    package var status: Int
    /// A safe subset of the response headers (the fetch side's list of archived headers).
    package var headers: [String: String]
    package var fetchedAt: Date
    /// What was asked besides the URL: a POST's method and body, its secrets redacted (archived:
    /// two pages of one URL differ by it); `nil` for a GET.
    package var request: RequestRecord? = nil
}

/// A request's method and body as archived: `{"method": "POST", "body": "{…}"}`, the body's
/// secrets (its parts from the environment) replaced by `REDACTED`.
package struct RequestRecord: Codable, Sendable, Equatable {
    package var method: String
    package var body: String?
}

/// What a source reports while it fetches (the run's metrics implement it).
package protocol FetchObserver: AnyObject, Sendable {
    /// A response arrived after `seconds`.
    func recordFetch(seconds: Double)
    /// A request is retried.
    func recordRetry()
}

/// A source that reports its fetches (latency, retries) to the run's metrics.
package protocol FetchReporting: PageSource {
    /// Gives the source the run's metrics, before the first ``PageSource/next()``.
    func useMetrics(_ metrics: any FetchObserver)
}

/// A source that cannot produce its next page: the run stops (everything before is committed).
public struct SourceError: Error, Sendable, CustomStringConvertible {
    /// The source that failed (a path, a URL, a join).
    public var source: String
    /// What went wrong.
    public var message: String
    /// `SOURCE: MESSAGE`.
    public var description: String { "\(source): \(message)" }
}

/// A flag set once from any queue (a run stopping) and read from others (the source loop, a
/// retry's wait, a transfer's progress callback).
package final class StopFlag: Sendable {
    package let value = Mutex(false)
}
