import Dispatch
import Foundation
import Logging
import Synchronization

/// Fetches a pipeline's pages over HTTP through libcurl: pagination, auth from the environment,
/// retries with exponential backoff and full jitter (connection errors, timeouts, 408, 429,
/// 5xx), `Retry-After`, and prefetching `concurrency` pages at once where the paginator allows
/// it (page, offset).
///
/// Every page carries its *resume state*: where fetching continues after it (`url:…`, `page:N`,
/// `offset:N`, `done`). The writer commits it with the batch, so `--resume` continues exactly
/// after the last committed page.
///
/// Used from the pipeline's source queue only.
package final class HTTPPageSource: FetchReporting, AnswerReusing, @unchecked Sendable {  // used from the source queue only
    package let config: HTTPSourceConfig
    /// Where a page's records sit, as the mapper finds them (``RecordFraming``).
    private let framing: RecordFraming
    /// Credentials, origin policy, retries: what every request obeys.
    private let rules: FetchRules
    private var credentials: Credentials { rules.credentials }
    private var logger: Logger
    private var metrics: (any FetchObserver)?
    /// Every transfer of this source: `concurrency` at once for page and offset pagination.
    private let client: HTTPClient
    /// Where the next page comes from; `nil` when pagination is over.
    private var upcoming: Cursor?
    private var fetched = 0
    private var seenURLs: Set<String> = []
    /// Every cursor followed so far (as ``seenURLs`` for next URLs): a cycle of any length
    /// (A, B, A…) ends in an error, not at `max_pages`. At most `max_pages` of them.
    private var seenCursors: Set<String> = []
    /// Pages ready to deliver, in order (a page, then perhaps the failure it led to).
    private var buffered: [Result<Page, FetchError>] = []
    /// Page fetches under way (in flight or waiting to retry), by tag, and those done but not
    /// yet taken.
    private var fetches: [Int: PageFetch] = [:]
    private var retryAt: [Int: Date] = [:]
    private var done: [Int: Result<Page, FetchError>] = [:]
    private var nextTag = 0
    /// Numbered pages requested ahead of the one delivered next, in order: `concurrency` of them
    /// stay in flight, a new one starting as each is delivered (a sliding window).
    private var ahead: [(cursor: Cursor, tag: Int)] = []
    /// Page and offset pagination: the first position past the source's end, once a page's
    /// total said it (``Cursor/position``).
    private var knownEnd: Int?
    /// An incremental run's query parameters: on the first request of URL paginators (the next
    /// URLs carry them on), on every request of page and offset paginators.
    private let incrementalQuery: [(name: String, value: String)]
    /// Set by ``cancel()`` from another queue: transfers in flight are aborted, a backoff ends.
    private let cancelled = StopFlag()
    /// What the last finished run kept of its answers (``reuseAnswers(_:)``); `nil`: no
    /// conditional requests.
    private var kept: KeptAnswers?
    /// Set for a shared run's fetcher (docs/scale-out.md, "Requests any job makes"): once a page
    /// said where a numbered source ends (its total), the pages up to it come out unfetched, each
    /// naming its position (``Page/cursor``), for the jobs that claim them to fetch; without a
    /// total, every page from the first, until a job finds the end (``SharedRequests/defersPages(of:in:resource:)``).
    package var defersNumberedPages = false
    /// Told the wait a server asked for (`Retry-After` on a 429 or 5xx, capped by the retry
    /// settings, in seconds) before this source waits it: a shared run's job passes it on to the
    /// other jobs (``SharedRun/pauseRequests(for:)``).
    package var onServerDelay: (@Sendable (Double) -> Void)?
    /// Where its credentials and `${VAR}`s were read: the requests a joined job makes for it
    /// (numbered pages, ``SharedRequests``) read the same, not the process's.
    package let environment: [String: String]

    /// - Parameters:
    ///   - framing: where a page's records are (page and offset pagination stop on an empty page).
    ///   - query: extra parameters for the first request (an incremental run's cursor).
    package init(
        config: HTTPSourceConfig, framing: RecordFraming, environment: [String: String] = ProcessInfo.processInfo.environment,
        query: [(String, String)] = [], maxPageBytes: Int = Page.defaultMaxBytes, logger: Logger
    ) throws {
        self.config = config
        self.framing = framing
        self.environment = environment
        self.rules = FetchRules(
            config: config, credentials: try Credentials(config: config, environment: environment),
            policy: OriginPolicy(url: config.url, allowedHosts: config.allowedHosts))
        self.logger = logger
        self.incrementalQuery = query.map { (name: $0.0, value: $0.1) }
        client = HTTPClient()
        client.maxBodyBytes = maxPageBytes
        switch config.paginate {
        case .page(_, let start, _): upcoming = .page(start)
        case .offset: upcoming = .offset(0)
        default: upcoming = .url(config.url)
        }
    }

    /// List mode: the URLs to fetch, one page each (no pagination), `concurrency` at once, in
    /// order. A page's resume state is its URL's index (`item:N`).
    private var listURLs = URLs([])

    /// A source of one page per URL of `urls` (a for_each's requests without pagination of
    /// their own): `config.concurrency` requests in flight, pages delivered in list order. The
    /// URLs must already be allowed by `config`'s origin policy.
    package convenience init(
        config: HTTPSourceConfig, framing: RecordFraming, urls: URLs,
        environment: [String: String] = ProcessInfo.processInfo.environment, maxPageBytes: Int = Page.defaultMaxBytes, logger: Logger
    ) throws {
        try self.init(config: config, framing: framing, environment: environment, maxPageBytes: maxPageBytes, logger: logger)
        listURLs = urls
        upcoming = urls.isEmpty ? nil : .item(0)
    }

    /// Starts where the last finished sync said (its kept ``Page/syncState``), not at the
    /// configured URL. The state is input from the database: a URL the origin rules refuse is
    /// refused here, before any request.
    package func startSync(from state: String) throws {
        guard case .url(let url)? = Cursor(state: state, secrets: config.urlSecrets) else {
            throw FetchError(
                url: credentials.redact(config.url),
                message: "the kept sync state '\(HTTPPageSource.shown(state))' is not a URL; run once with --full-refresh")
        }
        _ = try rules.follow(url, from: config.url, what: "kept sync URL")
        upcoming = .url(url)
        logger.info("sync.resumed", metadata: [LogKey.url: "\(credentials.redact(url))"])
    }

    /// Continues after a committed page: `state` is the resume state that page carried.
    package func resume(from state: String) throws {
        if state == "done" {
            upcoming = nil
            return
        }
        guard let cursor = Cursor(state: state, secrets: config.urlSecrets) else {
            throw FetchError(url: credentials.redact(config.url), message: "cannot resume from state '\(state)'")
        }
        upcoming = cursor
    }

    /// Stops the source: transfers in flight are aborted and a retry's wait ends, within one
    /// turn of the transfer loop (``HTTPClient/wakeup()`` ends its wait at once).
    package func cancel() {
        cancelled.value.withLock { $0 = true }
        client.wakeup()
    }

    /// Logs retries and pagination events through the run's logger from now on.
    package func useLogger(_ logger: Logger) {
        self.logger = logger
    }

    /// Records each response's latency and each retry in the run's metrics from now on.
    package func useMetrics(_ metrics: any FetchObserver) {
        self.metrics = metrics
    }

    /// `http URL PAGINATOR`, the URL with its secrets redacted.

    package var origin: String { "http \(config.shownURL) \(config.paginate)" }

    package func next() throws -> Page? {
        if buffered.isEmpty { try fill() }
        guard !buffered.isEmpty else { return nil }
        return try buffered.removeFirst().get()
    }

    // MARK: - Pagination

    private func fill() throws {
        guard let cursor = upcoming else { return }
        // max_pages caps pagination; a list's URLs are each one request.
        if fetched >= config.maxPages, listURLs.isEmpty {
            logger.warning("fetch.max_pages", metadata: [LogKey.pages: .int(fetched), LogKey.url: "\(credentials.redact(config.url))"])
            upcoming = nil
            return
        }
        switch cursor {
        case .page, .offset:
            fillNumbered(from: cursor)
        case .item(let first):
            fillList(from: first)
        case .url, .body:
            let (url, body) = target(of: cursor)
            var page = try outcome(of: startFetch(request(url, includeQuery: fetched == 0), body: body)).get()
            fetched += 1
            do {
                upcoming = try following(url: url, page: &page)
                page.resumeState = upcoming?.state(hiding: config.urlSecrets) ?? "done"
                page.syncState = try syncState(of: &page, from: url)
                buffered.append(.success(page))
            } catch {
                // The page itself is fine: it is saved, then the run fails on where it points
                // (a resume fetches it again and fails the same way, until the pipeline changes).
                upcoming = nil
                page.resumeState = cursor.state(hiding: config.urlSecrets)
                buffered.append(.success(page))
                buffered.append(.failure(error))
            }
        }
    }

    /// Page and offset pagination: keeps `concurrency` pages in flight ahead of the one
    /// delivered next (never past `max_pages`), delivers them in order, and stops at the first
    /// empty page (the requests already made past it are aborted).
    private func fillNumbered(from cursor: Cursor) {
        // Where the source ends may be said by a page (a total, `has_more`): until the first page
        // of this source (or of this resume) says it, one request at a time; then never one past
        // the end. Without either, an empty page ends it, and up to `concurrency` requests may
        // go past it (their answers are dropped).
        if defersNumberedPages, config.hasMore == nil, ahead.isEmpty, knownEnd != nil || numberedTotal == nil {
            deferNumbered(cursor, end: knownEnd)
            return
        }
        let endIsSaid = numberedTotal != nil || config.hasMore != nil
        let window =
            endIsSaid && (knownEnd == nil || config.hasMore != nil)
            ? 1 : min(max(1, config.concurrency), config.maxPages - fetched)
        var c: Cursor? = ahead.last.map { step($0.cursor) } ?? cursor
        while ahead.count < window, let next = c, knownEnd.map({ next.position < $0 }) ?? true {
            ahead.append((next, startFetch(numberedURL(next))))
            c = step(next)
        }
        guard let (cursor, fetched) = nextAhead() else { return }
        var page = fetched
        let records = recordCount(&page)
        var stop = records == nil || records == 0
        if records == nil {
            logger.warning(
                "fetch.stopped",
                metadata: [
                    LogKey.url: "\(page.source)",
                    LogKey.reason: "the page has no records array at '\(framing.pathText)': pagination stops here",
                ])
        }
        if let total = numberedTotal, let n = number(at: total.path, in: &page) {
            guard let end = HTTPPageSource.end(total: n, isPages: total.isPages, first: total.first) else {
                abandonFetches()
                upcoming = nil
                page.resumeState = cursor.state(hiding: config.urlSecrets)
                let name = total.isPages ? "total_pages" : "total"
                buffered.append(.success(page))
                buffered.append(
                    .failure(
                        FetchError(
                            url: page.source,
                            message: "the page's \(name) at '\(total.path)' is out of range (\(n)): pagination cannot go on from it")))
                return
            }
            knownEnd = end
        }
        // A position past Int's range (a resume state or a page number near it) ends the source.
        let following = step(cursor)
        if let end = knownEnd, following.map({ $0.position >= end }) ?? true { stop = true }
        if following == nil { stop = true }
        if !stop && hasMoreSaysStop(&page) { stop = true }
        upcoming = stop ? nil : following
        page.resumeState = upcoming?.state(hiding: config.urlSecrets) ?? "done"
        // A last page (empty, past the total, or not a page of records at all) still goes
        // through: archived, then counted or rejected.
        buffered.append(.success(page))
        if stop { abandonFetches() }
    }

    /// A shared run's fetcher (``defersNumberedPages``): the page at `cursor`, unfetched, naming
    /// its position; the source ends at `end` once a page said its total, else where a job finds
    /// an empty page (``SharedRun/settleEnd(of:)``) or at `max_pages`.
    private func deferNumbered(_ cursor: Cursor, end: Int?) {
        guard end.map({ cursor.position < $0 }) ?? true else {
            upcoming = nil
            return
        }
        var page = Page(seq: 0, source: credentials.redact(numberedURL(cursor)), bytes: [])
        page.cursor = cursor.state(hiding: config.urlSecrets)
        fetched += 1
        upcoming = step(cursor).flatMap { next in end.map { next.position < $0 } ?? true ? next : nil }
        page.resumeState = upcoming?.state(hiding: config.urlSecrets) ?? "done"
        buffered.append(.success(page))
    }

    /// The one page at `cursor` (a numbered page's resume state, `page:N` or `offset:N`), as the
    /// source fetches it — with its own retries, credentials and origin rules — for a job of a
    /// shared run that claimed it (``Page/cursor``). `nil` for any other state: it is input (the
    /// work queue's), and a `url:` state would send the credentials wherever it points.
    package func fetchPage(at cursor: String) throws -> Page? {
        guard cursor.hasPrefix("page:") || cursor.hasPrefix("offset:"), let position = Cursor(state: cursor, secrets: []) else {
            return nil
        }
        switch (position, config.paginate) {
        case (.page, .page), (.offset, .offset): return try outcome(of: startFetch(numberedURL(position))).get()
        default: return nil
        }
    }

    /// List mode: `concurrency` of the list's URLs in flight ahead of the one delivered next.
    private func fillList(from first: Int) {
        let window = max(1, config.concurrency)
        var next = ahead.last.map { $0.cursor.position + 1 } ?? first
        while ahead.count < window && next < listURLs.count {
            ahead.append((.item(next), startFetch(listURLs[next])))
            next += 1
        }
        guard let (cursor, fetched) = nextAhead() else { return }
        var page = fetched
        page.resumeState = cursor.state(hiding: config.urlSecrets)
        upcoming = cursor.position + 1 < listURLs.count ? .item(cursor.position + 1) : nil
        buffered.append(.success(page))
    }

    /// The first page among those fetched ahead, with its cursor; `nil` when none is ahead (the
    /// source ended) or it failed: the failure is then delivered next, the fetches ahead are
    /// abandoned, and a resume fetches that page again.
    private func nextAhead() -> (cursor: Cursor, page: Page)? {
        guard !ahead.isEmpty else {
            upcoming = nil
            return nil
        }
        let head = ahead.removeFirst()
        switch outcome(of: head.tag) {
        case .failure(let error):
            abandonFetches()
            buffered.append(.failure(error))
            upcoming = head.cursor
            return nil
        case .success(let page):
            fetched += 1
            return (head.cursor, page)
        }
    }

    /// The key path of a numbered paginator's total, and what it counts.
    private var numberedTotal: (path: HTTPSourceConfig.CountSource, isPages: Bool, first: Int)? {
        switch config.paginate {
        case .page(_, let start, let total?): (total, true, start)
        case .offset(_, _, _, let total?): (total, false, 0)
        default: nil
        }
    }

    /// Whether the page's `has_more` flag ends pagination: `false`, or absent unless
    /// `has_more_absent: continue` (a page that is not JSON has no flag).
    private func hasMoreSaysStop(_ page: inout Page) -> Bool {
        guard let hasMore = config.hasMore else { return false }
        guard let document = parsed(&page), let flag = hasMore.path.resolve(in: document.root), !flag.isNull else {
            return !hasMore.continueWhenAbsent
        }
        return flag.bool == false
    }

    /// The cursor after `cursor`; `nil` past Int's range.
    private func step(_ cursor: Cursor) -> Cursor? {
        switch (cursor, config.paginate) {
        case (.page(let n), _):
            let (next, overflow) = n.addingReportingOverflow(1)
            return overflow ? nil : .page(next)
        case (.offset(let n), .offset(_, _, let limit, _)):
            let (next, overflow) = n.addingReportingOverflow(limit)
            return overflow ? nil : .offset(next)
        default: return cursor
        }
    }

    private func numberedURL(_ cursor: Cursor) -> String {
        switch (cursor, config.paginate) {
        case (.page(let n), .page(let param, _, _)):
            request(config.url, setting: [(param, "\(n)")], includeQuery: true)
        case (.offset(let n), .offset(let param, let limitParam, let limit, _)):
            request(config.url, setting: [(param, "\(n)"), (limitParam, "\(limit)")], includeQuery: true)
        default:
            request(config.url, includeQuery: true)
        }
    }

    /// Where to go after `page`, fetched from `url` (URL-based paginators).
    private func following(url: String, page: inout Page) throws(FetchError) -> Cursor? {
        seenURLs.insert(url)
        switch config.paginate {
        case .none, .page, .offset: return nil
        case .linkHeader, .nextURL, .cursor: break
        }
        // Link headers need no body; a paginator that reads the body cannot read one it did not keep.
        if page.oversized != nil && config.paginate != .linkHeader {
            throw FetchError(
                url: credentials.redact(url), message: "the page is over max_page_bytes, so where pagination goes next is unknown")
        }
        if hasMoreSaysStop(&page) { return nil }
        let nextURL: String?
        switch config.paginate {
        case .none, .page, .offset:
            return nil
        case .linkHeader:
            nextURL = page.http?.headers["link"].flatMap(HTTPPageSource.nextLink)
        case .nextURL(let path):
            guard let document = parsed(&page) else {
                throw FetchError(url: credentials.redact(url), message: "the page is not valid JSON, so its next URL is unknown")
            }
            nextURL = path.resolve(in: document.root).flatMap { $0.isNull ? nil : $0.string }
        case .cursor(let source, let target, let stopValues):
            guard let document = parsed(&page) else {
                throw FetchError(url: credentials.redact(url), message: "the page is not valid JSON, so its next cursor is unknown")
            }
            return try nextCursor(in: document, source: source, target: target, stopValues: stopValues, url: url)
        }
        guard let nextURL, !nextURL.isEmpty else { return nil }
        // Relative next links resolve against the page's URL.
        let absolute = try rules.follow(nextURL, from: url, what: "next URL")
        let stripped = rules.strippingSecrets(absolute)
        if seenURLs.contains(stripped) {
            throw FetchError(
                url: credentials.redact(stripped), message: "the next URL repeats a page already fetched: pagination would loop")
        }
        return .url(stripped)
    }

    /// A cursor paginator's next request, read from `document` (the page fetched from `url`), or
    /// `nil` where the list ends (no cursor, an empty one, a stop value, an empty page).
    private func nextCursor(
        in document: JSONDocument, source: HTTPSourceConfig.CursorSource, target: HTTPSourceConfig.CursorTarget, stopValues: [String],
        url: String
    ) throws(FetchError) -> Cursor? {
        let found: JSONValue?
        switch source {
        case .path(let path): found = path.resolve(in: document.root)
        case .lastRecord(let key):
            // The last record of the page (none: an empty page ends the list).
            guard case .success(let records) = framing.records(in: document), let last = records.last(in: document) else {
                return nil
            }
            found = key.resolve(in: last)
        }
        // A body cursor may be any JSON value (Elasticsearch's `search_after` is an array).
        let text = found.flatMap { v in v.string ?? v.numberText ?? ([.array, .object].contains(v.kind) ? v.rawText : nil) }
        guard let v = found, !v.isNull, let cursor = text, !cursor.isEmpty, !stopValues.contains(cursor) else {
            return nil
        }
        guard seenCursors.insert(cursor).inserted else {
            throw FetchError(
                url: credentials.redact(url),
                message: "the cursor '\(HTTPPageSource.shown(cursor))' was already followed: pagination would loop")
        }
        switch target {
        case .query(let param): return .url(request(config.url, setting: [(param, cursor)], includeQuery: false))
        case .body: return .body(v.rawText)
        }
    }

    // MARK: - Requests

    /// `url` with `setting` query values set (replacing same-named ones), the incremental query
    /// when `includeQuery`, and no secret: credentials are added only when sending. The values are
    /// form-encoded; every byte `url` has is kept (``URLText``).
    private func request(_ url: String, setting: [(name: String, value: String)] = [], includeQuery: Bool) -> String {
        URLText.settingQuery(url, setting + (includeQuery ? incrementalQuery : []))
    }

    /// Starts fetching `url` (its first request goes out on the next poll); returns its tag.
    /// The URL the next run starts from, when the page says one (`sync_url:`), as a resume state
    /// holds it (secrets hidden); checked by the origin rules as a next URL is.
    private func syncState(of page: inout Page, from url: String) throws(FetchError) -> String? {
        guard let path = config.syncURL, let document = parsed(&page),
            let next = path.resolve(in: document.root)?.string, !next.isEmpty
        else { return nil }
        let absolute = try rules.follow(next, from: url, what: "sync URL")
        return Cursor.url(rules.strippingSecrets(absolute)).state(hiding: config.urlSecrets)
    }

    /// The URL and body a cursor asks with: a URL cursor's URL (the source's body, when it
    /// POSTs), or the source's URL and its body with a body cursor written in.
    private func target(of cursor: Cursor) -> (url: String, body: String?) {
        switch (cursor, config.paginate) {
        case (.body(let json), .cursor(_, .body(let path), _)):
            return (config.url, config.body.map { HTTPPageSource.setting(json, at: path, in: $0) })
        case (.url(let url), _): return (url, config.body)
        default: return (config.url, config.body)
        }
    }

    private func startFetch(_ url: String, body: String? = nil) -> Int {
        let tag = nextTag
        nextTag += 1
        var fetch = PageFetch(url: url, rules: rules, body: body ?? config.body, validators: kept?.validators(for: url))
        client.start(fetch.request(rules), tag: tag)
        fetches[tag] = fetch
        return tag
    }

    /// Drives every fetch under way — retries, redirects, the pages ahead — until fetch `tag` is
    /// done, and returns its page or failure. A stopping run aborts them all at once.
    private func outcome(of tag: Int) -> Result<Page, FetchError> {
        while true {
            if let result = done.removeValue(forKey: tag) { return result }
            if cancelled.value.withLock({ $0 }) {
                let shown = fetches[tag]?.shown ?? credentials.redact(config.url)
                abandonFetches()
                return .failure(FetchError(url: shown, message: "stopped: the run is stopping"))
            }
            var now = Date()
            for (k, until) in retryAt where until <= now {
                retryAt[k] = nil
                if var fetch = fetches[k] {
                    client.start(fetch.retry(rules, now: now), tag: k)
                    fetches[k] = fetch
                }
            }
            // Wake for the next retry that is due; cancel() wakes the poll at once.
            let nextDue = retryAt.values.min().map { $0.timeIntervalSince(now) } ?? 1
            let ended = client.poll(timeout: min(max(nextDue, 0), 1))
            now = Date()
            for (k, result) in ended {
                guard var fetch = fetches[k] else { continue }
                if let metrics, case .success(let response) = result { metrics.recordFetch(seconds: response.seconds) }
                switch fetch.received(result, rules: rules, logger: logger, now: now) {
                case .send(let request):
                    client.start(request, tag: k)
                    fetches[k] = fetch
                case .wait(let until):
                    metrics?.recordRetry()
                    if let asked = fetch.serverDelay { onServerDelay?(asked) }
                    retryAt[k] = until
                    fetches[k] = fetch
                case .done(let result):
                    fetches[k] = nil
                    if let result = settled(result, of: fetch, tag: k) { done[k] = result }
                }
            }
        }
    }

    /// A fetch's page as the run takes it (docs/pipelines.md, "Conditional requests"): a 304
    /// with the body the last run kept (or, when that body cannot be read back, `nil`: the
    /// request is made again, unconditionally, under the same tag); a fresh answer with a
    /// validator kept for the next run.
    private func settled(_ result: Result<Page, FetchError>, of fetch: PageFetch, tag: Int) -> Result<Page, FetchError>? {
        guard let kept, case .success(var page) = result, let status = page.http?.status else { return result }
        if status == 304, let validators = fetch.validators {
            guard let body = kept.keptBody(for: fetch.url), var http = page.http else {
                var again = PageFetch(url: fetch.url, rules: rules)
                client.start(again.request(rules), tag: tag)
                fetches[tag] = again
                return nil
            }
            page.bytes = body.bytes
            http.headers = body.headers.merging(http.headers) { _, now in now }
            page.http = http
            kept.reused(fetch.url, validators)
            return .success(page)
        }
        // A POST's answer is not kept: one URL asks different things with different bodies.
        if page.oversized == nil, page.http?.request == nil,
            let validators = page.http.flatMap({ KeptAnswers.Validators(headers: $0.headers) })
        {
            kept.received(fetch.url, validators, body: page.bytes, headers: page.http?.headers ?? [:])
        }
        return result
    }

    /// Conditional requests from now on, with what the last finished run kept of its answers;
    /// this source's answers are kept in `answers` for the next run.
    package func reuseAnswers(_ answers: KeptAnswers) { kept = answers }

    /// Drops every fetch under way (aborting its transfer): pagination stopped or failed before
    /// them, or the run is stopping.
    private func abandonFetches() {
        _ = client.abortAll()
        fetches = [:]
        retryAt = [:]
        done = [:]
        ahead = []
    }

    // MARK: - Bodies

    /// The page's JSON, parsed the first time pagination asks and kept with the page
    /// (``Page/parsed``): the decode lane maps it without parsing it again. `nil` when it is not
    /// JSON (the lane rejects it, with the parser's reason) or over the size limit.
    func parsed(_ page: inout Page) -> JSONDocument? {
        if let document = page.parsed { return document }
        guard page.oversized == nil, let document = try? framing.parse(page.bytes) else { return nil }
        page.parsed = document
        return document
    }

    private func number(at source: HTTPSourceConfig.CountSource, in page: inout Page) -> Int? {
        switch source {
        case .body(let path):
            guard let document = parsed(&page), let v = path.resolve(in: document.root) else { return nil }
            return v.int64.map(Int.init)
        case .header(let name):
            return page.http?.headers[name].flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        }
    }

    /// Records in the page (page and offset pagination stop on 0), or `nil` when it is not a page
    /// of records at all (not JSON, over the size limit, or no array at the records path): then
    /// pagination stops too, instead of walking on to `max_pages`. Parsed once: the decode lane
    /// reuses the parse (a joined job's numbered page asks it too, ``Page/endsSource``).
    package func recordCount(_ page: inout Page) -> Int? {
        guard let document = parsed(&page),
            case .success(let records) = framing.records(in: document)
        else { return nil }
        return records.count
    }

}
