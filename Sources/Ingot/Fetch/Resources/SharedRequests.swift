import Foundation
import Logging

/// The requests of a shared run that any job makes (docs/scale-out.md, "Requests any job
/// makes"): a `for_each` request (a paginated one with all its pages), and a numbered page
/// (`page`, `offset`: the pipeline's own from the first, a resource's once it said its total),
/// are enqueued by the fetcher unfetched — a unit holding the request's URL (``Page/request``)
/// or the page's position (``Page/cursor``) — and the job that claims it fetches it, with the
/// source's own HTTP settings (headers, credentials, retries, timeouts, the origin rules) and
/// up to its `concurrency` of them at once. A fan-out of detail requests, or a long numbered
/// list, then gets faster with every job, where one fetcher made them all before.
///
/// Immutable: the jobs' fetches run on threads of their own.
package final class SharedRequests: Sendable {
    private let resources: [ResourceConfig]
    /// The pipeline's own source, when it has no resources.
    private let source: SourceConfig
    private let framing: RecordFraming
    private let environment: [String: String]
    private let maxPageBytes: Int
    /// The directory the pipeline's files are read from, when its source is one (``FileUnit``).
    private let files: SharedFiles?

    init(config: PipelineConfig, environment: [String: String], maxPageBytes: Int, files: SharedFiles? = nil) {
        resources = config.resources
        source = config.source
        framing = config.framing
        self.environment = environment
        self.maxPageBytes = maxPageBytes
        self.files = files
    }

    /// Whether the fetcher leaves `resource`'s requests to the jobs: a `for_each`'s (a paginated
    /// request is one unit, its pages followed by the job that makes it) whose records make no
    /// requests. A for_each that another for_each reads (Hacker News's stories, whose comments
    /// are requested by their ids), or that reads its own records (`depth:`), is fetched by the
    /// fetcher, which collects the next requests from its pages as a single run does; the
    /// requests of the last level are the jobs'.
    package static func defers(_ resource: ResourceConfig, of resources: [ResourceConfig]) -> Bool {
        guard let forEach = resource.forEach, !forEach.recurses else { return false }
        return !resources.haveReader(of: resource.name)
    }

    /// Whether the fetcher leaves a numbered source's pages to the jobs
    /// (``HTTPPageSource/defersNumberedPages``): when no `has_more` decides page by page, no
    /// incremental cursor is sent with each request, and no `for_each` reads its records (the
    /// fetcher collects those requests from the pages it reads itself). The pipeline's own
    /// source defers them all, the first included, with or without a total (a job that finds a
    /// page empty settles the end: ``SharedRun/settleEnd(of:)``); a resource's, those past its
    /// first page once it said its total (an empty page ends only its resource, and the
    /// fetcher must know where to go on to the next).
    package static func defersPages(of http: HTTPSourceConfig, in config: PipelineConfig, resource: String? = nil) -> Bool {
        guard http.hasMore == nil, config.incremental == nil else { return false }
        if let resource, config.resources.haveReader(of: resource) { return false }
        switch http.paginate {
        case .page(_, _, let total), .offset(_, _, _, let total): return resource == nil || total != nil
        default: return false
        }
    }

    /// Whether a page the jobs fetch may end the source (``Page/endsSource``): the pipeline's
    /// own numbered pages are deferred. A job then hands out its answers in unit order
    /// (``LoadPlan/AnswerOrder/units``), so that its own earlier pages are settled first.
    package static func mayEndTheSource(_ config: PipelineConfig) -> Bool {
        guard !config.hasSeveralResources, case .http(let http) = config.source else { return false }
        return defersPages(of: http, in: config)
    }

    /// What the jobs of a shared run of `config` fetch themselves, as `--dry-run --join` says it:
    /// `the requests of NAME` (a for_each; `(each with its pages)` when they paginate), `the
    /// numbered pages of NAME after the first`.
    package static func madeByJobs(_ config: PipelineConfig) -> [String] {
        guard config.hasSeveralResources else {
            guard case .http(let http) = config.source, defersPages(of: http, in: config) else { return [] }
            // With a total, the fetcher reads the first page itself: it says the total.
            switch http.paginate {
            case .page(_, _, _?), .offset(_, _, _, _?): return ["the numbered pages after the first"]
            default: return ["the numbered pages"]
            }
        }
        return config.resources.compactMap { resource in
            if let forEach = resource.forEach {
                guard defers(resource, of: config.resources) else { return nil }
                return "the requests of \(resource.name)" + (forEach.http.paginate == .none ? "" : " (each with its pages)")
            }
            guard resource.forEach == nil, case .http(let http) = resource.source,
                defersPages(of: http, in: config, resource: resource.name)
            else { return nil }
            return "the numbered pages of \(resource.name) after the first"
        }
    }

    /// The for_each resources of `config` whose requests the fetcher of a shared run makes
    /// itself, as `--dry-run --join` says it (``defers(_:of:)``): `the requests of NAME`.
    package static func madeByFetcher(_ config: PipelineConfig) -> [String] {
        config.resources.filter { $0.forEach != nil && !defers($0, of: config.resources) }.map { "the requests of \($0.name)" }
    }

    /// How many requests of `page`'s source a job makes at once (its `concurrency`).
    func concurrency(of page: Page) -> Int {
        max(1, http(of: page)?.http.concurrency ?? 1)
    }

    /// Whether `page` is a request still to be made (a job that took the unit over may find it
    /// fetched already).
    static func isPending(_ page: Page) -> Bool {
        (page.request != nil || page.cursor != nil) && page.bytes.isEmpty && page.unreadable == nil && page.oversized == nil
            && !isFile(page)
    }

    /// Whether `page` is a unit naming a file of the source, still to be read (``FileUnit``).
    static func isFile(_ page: Page) -> Bool {
        page.cursor.map { $0.hasPrefix("file:") } ?? false && page.bytes.isEmpty && page.unreadable == nil && page.oversized == nil
    }

    /// `page`, a unit naming a file of its source's directory — its resource's, or the
    /// pipeline's — read from this job's (``SharedFiles/read(_:unit:)``); a cursor that does not
    /// name one is a rejected page.
    func read(_ page: Page) throws -> Page {
        var page = page
        guard let cursor = page.cursor, let unit = FileUnit(cursor: cursor), let files = files(of: page) else {
            page.unreadable = "unit \(page.unitSeq) names '\(page.cursor ?? "")', not a file of its source"
            return page
        }
        return try files.read(page, unit: unit)
    }

    /// The directory `page`'s files come from: its resource's `files:` source, or the pipeline's
    /// own (with `--pages DIR`, the job's).
    private func files(of page: Page) -> SharedFiles? {
        guard let name = page.resourceName else { return files }
        guard case .files(let dir, let glob)? = resources.first(where: { $0.name == name })?.source else { return nil }
        return SharedFiles(directory: dir, glob: glob, maxPageBytes: maxPageBytes)
    }

    /// The HTTP settings and framing `page`'s request is made with: its for_each's, or its
    /// resource's (the pipeline's own source without resources) for a numbered page.
    private func http(of page: Page) -> (http: HTTPSourceConfig, framing: RecordFraming, forEach: ResourceConfig.ForEach?)? {
        guard let name = page.resourceName else {
            guard page.cursor != nil, case .http(let http) = source else { return nil }
            return (http, framing, nil)
        }
        guard let resource = resources.first(where: { $0.name == name }) else { return nil }
        if let forEach = resource.forEach { return page.cursor == nil ? (forEach.http, resource.framing, forEach) : nil }
        guard page.cursor != nil, case .http(let http) = resource.source else { return nil }
        return (http, resource.framing, nil)
    }

    /// `page` with its request's answer: the payload, its URL as the source and the HTTP
    /// exchange — a paginated request's pages in order, followed to its end by this job, one at a
    /// time (the job's window of requests is its `concurrency`), as a single run reads them. A
    /// request answered 404 or 410 is a rejected page naming it, as a single run's (`not_found:
    /// fail` makes it fail the job); any other failure, once the retries ran out, fails the job,
    /// and the unit goes back to the queue. Pages that pass `maxPageBytes` together are one
    /// rejected page (the unit keeps them together). A wait the server asks for (`Retry-After`)
    /// is told to `serverDelay` before the request waits it.
    func fetch(_ page: Page, logger: Logger, serverDelay: (@Sendable (Double) -> Void)? = nil) throws -> [Page] {
        if let cursor = page.cursor { return [try fetchNumbered(page, at: cursor, logger: logger, serverDelay: serverDelay)] }
        guard let url = page.request, let resource = resources.first(where: { $0.name == page.resourceName }),
            let forEach = resource.forEach
        else { return [page] }
        var answered = page
        // The URL comes from the work queue, which is input: it must pass the for_each's origin
        // rules as the fetcher's requests do (no job sends the resource's credentials elsewhere).
        let policy = OriginPolicy(url: forEach.http.url, allowedHosts: forEach.http.allowedHosts)
        if let refusal = policy.refusal(ofRequest: url) {
            answered.unreadable = "the request \(HTTPPageSource.shown(url)) of unit \(page.unitSeq) was refused: \(refusal)"
            return [answered]
        }
        var http = forEach.http
        http.url = url
        http.concurrency = 1
        var pages: [Page] = []
        var bytes = 0
        do {
            let source = try HTTPPageSource(
                config: http, framing: resource.framing, environment: environment, maxPageBytes: maxPageBytes, logger: logger)
            source.onServerDelay = serverDelay
            while let fetched = try source.next() {
                var next = page
                next.take(fetched)
                pages.append(next)
                bytes += fetched.bytes.count
                if bytes > maxPageBytes || pages.count > Page.maxRequestPages {
                    answered.unreadable =
                        "the \(pages.count) pages of \(HTTPPageSource.shown(url)) pass max_page_bytes (\(maxPageBytes)) together "
                        + "(\(bytes) bytes): a joined job keeps a request's pages in its unit; raise --max-page-bytes"
                    return [answered]
                }
            }
        } catch let error as FetchError where error.meansNotFound && !forEach.notFoundFails {
            // Its pages before stay, as a single run's do.
            var missing = page
            missing.source = error.url
            missing.unreadable = SharedRequests.skipped(error, of: resource, logger: logger)
            pages.append(missing)
        }
        guard !pages.isEmpty else {
            answered.unreadable = "\(HTTPPageSource.shown(url)) gave no page"
            return [answered]
        }
        return pages
    }

    /// `page`, a numbered page of its source, fetched at `cursor` (``HTTPPageSource/fetchPage(at:)``):
    /// a position that is not one of its source's is an unreadable page naming it (the work
    /// queue is input); a failure, once the retries ran out, fails the job as in a single run.
    private func fetchNumbered(
        _ page: Page, at cursor: String, logger: Logger, serverDelay: (@Sendable (Double) -> Void)?
    ) throws -> Page {
        var answered = page
        guard let (http, framing, _) = http(of: page) else {
            answered.unreadable = "unit \(page.unitSeq) names page \(cursor) of a source without numbered pages"
            return answered
        }
        let source = try HTTPPageSource(
            config: http, framing: framing, environment: environment, maxPageBytes: maxPageBytes, logger: logger)
        source.onServerDelay = serverDelay
        guard let fetched = try source.fetchPage(at: cursor) else {
            answered.unreadable = "unit \(page.unitSeq) names '\(cursor)', not a numbered page of its source"
            return answered
        }
        answered.take(fetched)
        // A resource's last page ends only that resource: the fetcher goes on to the next.
        if page.resourceName == nil { answered.endsSource = (source.recordCount(&answered) ?? 0) == 0 }
        return answered
    }

    /// A request of `resource` answered 404 or 410 (its record was deleted after the list was
    /// read), logged as `for_each.skipped`: why its page is rejected.
    static func skipped(_ error: FetchError, of resource: ResourceConfig, logger: Logger) -> String {
        let status = error.status ?? 404
        // A 2xx answer whose body said not found names the reason it gave (error_when).
        let answer = error.isNotFound ? "HTTP \(status), \(error.message)" : "HTTP \(status)"
        logger.warning(
            "for_each.skipped",
            metadata: [
                "resource": "\(resource.name)", LogKey.url: "\(error.url)", "status": .int(status),
                LogKey.reason:
                    "the request was answered \(answer): its record was deleted after the list was read? (not_found: fail makes it fatal)",
            ])
        return
            "\(error.url) was answered \(answer): the \(resource.name) request of for_each \(resource.forEach?.resource ?? "") was skipped"
    }
}

extension Page {
    /// Takes `fetched`'s answer — its payload, source, HTTP exchange, parse, size and
    /// compression — keeping this page's place in the run (seq, unit, resource, labels).
    fileprivate mutating func take(_ fetched: Page) {
        bytes = fetched.bytes
        source = fetched.source
        http = fetched.http
        parsed = fetched.parsed
        oversized = fetched.oversized
        compression = fetched.compression
    }
}
