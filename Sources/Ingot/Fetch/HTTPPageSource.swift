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
public final class HTTPPageSource: PageSource, @unchecked Sendable {  // used from the source queue only
    public let config: HTTPSourceConfig
    private let recordsPath: [String]
    private let credentials: Credentials
    /// Where URLs from responses may lead, and which requests carry credentials.
    private let policy: OriginPolicy
    private var logger: Logger
    private var clients: [HTTPClient]
    /// Where the next page comes from; `nil` when pagination is over.
    private var upcoming: Cursor?
    private var fetched = 0
    private var seenURLs: Set<String> = []
    private var lastCursor: String?
    /// Prefetched pages, in order (page and offset pagination).
    private var buffered: [Result<Page, FetchError>] = []
    /// Extra query parameters on the first request (incremental runs).
    private let firstQuery: [URLQueryItem]
    /// Set by ``cancel()`` from another queue: a backoff in progress ends early.
    private let cancelled = StopFlag()

    enum Cursor: Equatable {
        case url(String)
        case page(Int)
        case offset(Int)

        var state: String {
            switch self {
            case .url(let u): "url:" + u
            case .page(let n): "page:\(n)"
            case .offset(let n): "offset:\(n)"
            }
        }

        init?(state: String) {
            if state.hasPrefix("url:") {
                self = .url(String(state.dropFirst(4)))
            } else if state.hasPrefix("page:"), let n = Int(state.dropFirst(5)) {
                self = .page(n)
            } else if state.hasPrefix("offset:"), let n = Int(state.dropFirst(7)) {
                self = .offset(n)
            } else {
                return nil
            }
        }
    }

    /// - Parameters:
    ///   - recordsPath: where a page's records are (page and offset pagination stop on an empty page).
    ///   - query: extra parameters for the first request (an incremental run's cursor).
    public init(
        config: HTTPSourceConfig, recordsPath: [String], environment: [String: String] = ProcessInfo.processInfo.environment,
        query: [(String, String)] = [], maxPageBytes: Int = RunOptions.defaultMaxPageBytes, logger: Logger
    ) throws {
        self.config = config
        self.recordsPath = recordsPath
        self.credentials = try Credentials(config: config, environment: environment)
        self.policy = OriginPolicy(url: config.url, allowedHosts: config.allowedHosts)
        self.logger = logger
        self.firstQuery = query.map { URLQueryItem(name: $0.0, value: $0.1) }
        let cancelled = self.cancelled
        clients = (0..<max(1, config.concurrency)).map { _ in
            let client = HTTPClient()
            client.maxBodyBytes = maxPageBytes
            // A stopping run aborts transfers in flight instead of waiting for them.
            client.shouldAbort = { cancelled.value.withLock { $0 } }
            return client
        }
        switch config.paginate {
        case .page(_, let start): upcoming = .page(start)
        case .offset: upcoming = .offset(0)
        default: upcoming = .url(config.url)
        }
    }

    /// Continues after a committed page: `state` is the resume state that page carried.
    public func resume(from state: String) throws {
        if state == "done" {
            upcoming = nil
            return
        }
        guard let cursor = Cursor(state: state) else {
            throw FetchError(url: credentials.redact(config.url), message: "cannot resume from state '\(state)'")
        }
        upcoming = cursor
    }

    public func cancel() {
        cancelled.value.withLock { $0 = true }
    }

    /// Logs retries and pagination events through the run's logger from now on.
    public func useLogger(_ logger: Logger) {
        self.logger = logger
    }

    public func next() throws -> Page? {
        if buffered.isEmpty { try fill() }
        guard !buffered.isEmpty else { return nil }
        return try buffered.removeFirst().get()
    }

    // MARK: - Pagination

    private func fill() throws {
        guard let cursor = upcoming else { return }
        guard fetched < config.maxPages else {
            logger.warning("fetch.max_pages", metadata: [LogKey.pages: .int(fetched), LogKey.url: "\(credentials.redact(config.url))"])
            upcoming = nil
            return
        }
        switch cursor {
        case .page, .offset:
            try fillNumbered(from: cursor)
        case .url(let url):
            var page = try fetch(url: request(url), client: clients[0])
            fetched += 1
            do {
                upcoming = try following(url: url, page: page)
                page.resumeState = upcoming?.state ?? "done"
                buffered.append(.success(page))
            } catch {
                // The page itself is fine: it is saved, then the run fails on where it points
                // (a resume fetches it again and fails the same way, until the pipeline changes).
                upcoming = nil
                page.resumeState = Cursor.url(url).state
                buffered.append(.success(page))
                buffered.append(.failure(error))
            }
        }
    }

    /// Page and offset pagination: fetch up to `concurrency` pages at once, deliver them in order,
    /// stop at the first empty page.
    private func fillNumbered(from cursor: Cursor) throws {
        let window = min(clients.count, config.maxPages - fetched)
        var cursors: [Cursor] = []
        var c = cursor
        for _ in 0..<window {
            cursors.append(c)
            c = step(c)
        }
        let box = ResultBox(count: cursors.count)
        let urls = cursors.map { numberedURL($0) }
        DispatchQueue.concurrentPerform(iterations: cursors.count) { k in
            let result: Result<Page, FetchError>
            do {
                result = .success(try fetch(url: urls[k], client: clients[k]))
            } catch let error as FetchError {
                result = .failure(error)
            } catch {
                result = .failure(FetchError(url: credentials.redact(urls[k]), message: "\(error)"))
            }
            box.set(k, result)
        }
        for (k, result) in box.results.enumerated() {
            guard let result else { continue }
            switch result {
            case .failure:
                buffered.append(result)
                upcoming = cursors[k]  // a failed page is fetched again on resume
                return
            case .success(var page):
                fetched += 1
                let records = recordCount(page)
                var stop = records == nil || records == 0
                if records == nil {
                    logger.warning("fetch.stopped", metadata: [
                        LogKey.url: "\(page.source)",
                        LogKey.reason: "the page has no records array at '\(recordsPath.isEmpty ? "." : recordsPath.joined(separator: "."))': pagination stops here",
                    ])
                }
                if case .offset(let offset) = cursors[k], case .offset(_, _, let limit, let totalPath?) = config.paginate,
                    let total = number(at: totalPath, in: page.bytes), offset + limit >= total
                {
                    stop = true
                }
                upcoming = stop ? nil : step(cursors[k])
                page.resumeState = upcoming?.state ?? "done"
                // A last page (empty, past the total, or not a page of records at all) still goes
                // through: archived, then counted or rejected.
                buffered.append(.success(page))
                if stop { return }
            }
        }
    }

    private func step(_ cursor: Cursor) -> Cursor {
        switch (cursor, config.paginate) {
        case (.page(let n), _): .page(n + 1)
        case (.offset(let n), .offset(_, _, let limit, _)): .offset(n + limit)
        default: cursor
        }
    }

    private func numberedURL(_ cursor: Cursor) -> String {
        switch (cursor, config.paginate) {
        case (.page(let n), .page(let param, _)):
            return request(config.url, setting: [URLQueryItem(name: param, value: "\(n)")])
        case (.offset(let n), .offset(let param, let limitParam, let limit, _)):
            return request(config.url, setting: [
                URLQueryItem(name: param, value: "\(n)"), URLQueryItem(name: limitParam, value: "\(limit)"),
            ])
        default:
            return request(config.url)
        }
    }

    /// Where to go after `page`, fetched from `url` (URL-based paginators).
    private func following(url: String, page: Page) throws(FetchError) -> Cursor? {
        seenURLs.insert(url)
        let nextURL: String?
        switch config.paginate {
        case .none, .page, .offset:
            return nil
        case .linkHeader:
            nextURL = page.http?.headers["link"].flatMap(HTTPPageSource.nextLink)
        case .nextURL where page.oversized != nil, .cursor where page.oversized != nil:
            throw FetchError(url: credentials.redact(url), message: "the page is over max_page_bytes, so where pagination goes next is unknown")
        case .nextURL(let path):
            guard let document = try? JSONDocument(bytes: page.bytes) else {
                throw FetchError(url: credentials.redact(url), message: "the page is not valid JSON, so its next URL is unknown")
            }
            nextURL = value(at: path, in: document).flatMap { $0.string }
        case .cursor(let path, let param):
            guard let document = try? JSONDocument(bytes: page.bytes) else {
                throw FetchError(url: credentials.redact(url), message: "the page is not valid JSON, so its next cursor is unknown")
            }
            guard let v = value(at: path, in: document), let cursor = v.string ?? v.numberText, !cursor.isEmpty else {
                return nil
            }
            if cursor == lastCursor {
                throw FetchError(url: credentials.redact(url), message: "the cursor did not change ('\(cursor)'): pagination would loop")
            }
            lastCursor = cursor
            return .url(request(config.url, setting: [URLQueryItem(name: param, value: cursor)], includeFirst: false))
        }
        guard let nextURL, !nextURL.isEmpty else { return nil }
        // Relative next links resolve against the page's URL.
        let absolute = try follow(nextURL, from: url, what: "next URL")
        let stripped = strippingSecrets(absolute)
        if seenURLs.contains(stripped) {
            throw FetchError(url: credentials.redact(stripped), message: "the next URL repeats a page already fetched: pagination would loop")
        }
        return .url(stripped)
    }

    /// Longest URL taken from a response.
    static let maxURLLength = 8192

    /// `target` (a URL taken from a response, perhaps relative) resolved against `base`, if the
    /// origin policy lets Ingot go there; else a ``FetchError`` naming the rule.
    private func follow(_ target: String, from base: String, what: String) throws(FetchError) -> String {
        guard target.utf8.count <= HTTPPageSource.maxURLLength else {
            throw FetchError(url: credentials.redact(base), message: "refused: the \(what) is longer than \(HTTPPageSource.maxURLLength) bytes")
        }
        guard let absolute = URL(string: target, relativeTo: URL(string: base))?.absoluteString else {
            throw FetchError(url: credentials.redact(base), message: "refused: the \(what) '\(HTTPPageSource.shown(credentials.redact(target)))' is not a URL")
        }
        if let refusal = policy.check(absolute) {
            throw FetchError(url: HTTPPageSource.shown(credentials.redact(absolute)), message: "refused \(what) (from \(credentials.redact(base))): \(refusal)")
        }
        return absolute
    }

    /// A URL as shown in messages: at most 300 characters, control characters escaped.
    static func shown(_ url: String) -> String {
        let cut = url.count > 300 ? String(url.prefix(300)) + "…" : url
        return JSONText.escapingControlCharacters(cut)
    }

    /// `<url>; rel="next"` from an RFC 8288 Link header.
    static func nextLink(_ header: String) -> String? {
        for part in header.split(separator: ",") {
            let pieces = part.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let target = pieces.first, target.hasPrefix("<"), target.hasSuffix(">") else { continue }
            let isNext = pieces.dropFirst().contains { p in
                let lower = p.lowercased().replacingOccurrences(of: " ", with: "")
                return lower == "rel=\"next\"" || lower == "rel=next" || (lower.hasPrefix("rel=\"") && lower.dropFirst(5).dropLast().split(separator: " ").contains("next"))
            }
            if isNext { return String(target.dropFirst().dropLast()) }
        }
        return nil
    }

    // MARK: - Requests

    /// `url` with `setting` query items set (replacing same-named ones), the first request's
    /// extra items, and no secret: credentials are added only when sending.
    private func request(_ url: String, setting: [URLQueryItem] = [], includeFirst: Bool = true) -> String {
        guard var components = URLComponents(string: url) else { return url }
        var items = components.queryItems ?? []
        let extra = setting + (includeFirst && fetched == 0 ? firstQuery : [])
        for item in extra {
            items.removeAll { $0.name == item.name }
            items.append(item)
        }
        components.queryItems = items.isEmpty ? nil : items
        return components.string ?? url
    }

    private func strippingSecrets(_ url: String) -> String {
        guard let key = credentials.query, var components = URLComponents(string: url) else { return url }
        components.queryItems = components.queryItems?.filter { $0.name != key.name }
        if components.queryItems?.isEmpty == true { components.queryItems = nil }
        return components.string ?? url
    }

    private func withSecrets(_ url: String) -> String {
        guard let key = credentials.query, var components = URLComponents(string: url) else { return url }
        var items = components.queryItems ?? []
        items.removeAll { $0.name == key.name }
        items.append(URLQueryItem(name: key.name, value: key.value))
        components.queryItems = items
        return components.string ?? url
    }

    /// GETs `url` with retries; the page's source is the redacted URL.
    private func fetch(url: String, client: HTTPClient) throws(FetchError) -> Page {
        let shown = credentials.redact(url)
        let retry = config.retry
        var attempt = 0
        while true {
            attempt += 1
            let started = Date()
            var delay: Double
            var reason: String
            do {
                let response = try get(url, client: client)
                if response.overflowed && (200..<300).contains(response.status) {
                    var page = Page(
                        seq: 0, source: shown, bytes: [],
                        http: HTTPExchange(status: response.status, headers: [:], fetchedAt: started))
                    page.oversized = response.receivedBytes
                    return page
                }
                if (200..<300).contains(response.status) {
                    var headers: [String: String] = [:]
                    for (name, value) in response.headers where Credentials.archivedHeaders.contains(name) { headers[name] = value }
                    return Page(
                        seq: 0, source: shown, bytes: response.body,
                        http: HTTPExchange(status: response.status, headers: headers, fetchedAt: started))
                }
                guard response.status == 408 || response.status == 429 || response.status >= 500 else {
                    throw FetchError(url: shown, status: response.status, message: credentials.scrub(HTTPPageSource.preview(response.body)))
                }
                reason = "HTTP \(response.status)"
                delay = backoff(attempt)
                if let after = response.header("retry-after").flatMap({ HTTPPageSource.retryAfter($0) }) {
                    delay = min(after, Double(retry.maxDelayMs) / 1000)
                }
                if attempt >= retry.attempts {
                    throw FetchError(url: shown, status: response.status, message: "gave up after \(attempt) attempts", isTemporary: true)
                }
            } catch let error as TransportError {
                reason = credentials.scrub(error.message)
                delay = backoff(attempt)
                if !error.isRetryable {
                    throw FetchError(url: shown, message: reason)
                }
                if attempt >= retry.attempts {
                    throw FetchError(url: shown, message: "\(reason) (gave up after \(attempt) attempts)", isTemporary: true)
                }
            } catch let error as FetchError {
                throw error
            } catch {
                throw FetchError(url: shown, message: credentials.scrub("\(error)"))
            }
            logger.warning("fetch.retry", metadata: [
                LogKey.url: "\(shown)", LogKey.reason: "\(reason)", "attempt": .int(attempt),
                "delay_s": .seconds(delay),
            ])
            try pause(delay, url: shown)
        }
    }

    /// Redirects followed per request, at most.
    static let maxRedirects = 10

    /// One GET of `url`, following redirects by hand: each target is checked against the origin
    /// policy, and credentials go only to hops that may receive them and only while the chain has
    /// not changed origin (libcurl drops `Authorization` on such a hop, but not custom headers or
    /// query keys, so Ingot does it for all of them).
    private func get(_ url: String, client: HTTPClient) throws -> HTTPResponse {
        var current = url
        var trusted = policy.mayReceiveCredentials(url)
        let start = OriginPolicy.Origin(url)
        for _ in 0...HTTPPageSource.maxRedirects {
            let target = trusted ? withSecrets(current) : current
            let headers = trusted ? credentials.headers : []
            let response = try client.get(target, headers: headers, timeout: config.timeout)
            guard [301, 302, 303, 307, 308].contains(response.status), let location = response.header("location") else {
                return response
            }
            let next = try follow(location, from: current, what: "redirect")
            if OriginPolicy.Origin(next) != start || !policy.mayReceiveCredentials(next) { trusted = false }
            current = strippingSecrets(next)
        }
        throw FetchError(url: credentials.redact(url), message: "more than \(HTTPPageSource.maxRedirects) redirects")
    }

    /// Sleeps `seconds` in short steps, giving up as soon as the run is stopping.
    private func pause(_ seconds: Double, url: String) throws(FetchError) {
        let until = Date().addingTimeInterval(seconds)
        while Date() < until {
            if cancelled.value.withLock({ $0 }) { throw FetchError(url: url, message: "stopped while waiting to retry") }
            Thread.sleep(forTimeInterval: min(0.05, max(0, until.timeIntervalSinceNow)))
        }
    }

    /// Full jitter: a random delay up to `base × 2^(attempt-1)`, capped.
    private func backoff(_ attempt: Int) -> Double {
        let cap = min(Double(config.retry.maxDelayMs), Double(config.retry.baseDelayMs) * pow(2, Double(attempt - 1)))
        return Double.random(in: 0...max(cap, 0)) / 1000
    }

    /// `Retry-After` as seconds: a number of seconds, or an HTTP date (IMF-fixdate,
    /// `Sun, 06 Nov 1994 08:49:37 GMT`) as seconds from `now`; `nil` for anything else (the
    /// computed backoff applies). Parsed byte by byte: a header is hostile input, and Foundation's
    /// `DateFormatter` trapped on one the fuzzer made (Tests/Fixtures/fuzz/pagination/).
    static func retryAfter(_ value: String, now: Date = Date()) -> Double? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") || $0 == UInt8(ascii: ".") }),
            let seconds = Double(text), seconds.isFinite
        {
            return max(0, seconds)
        }
        let b = Array(text.utf8)
        guard b.count == 29, b[3] == UInt8(ascii: ","), b[4] == 32, b[7] == 32, b[11] == 32, b[16] == 32, b[19] == UInt8(ascii: ":"),
            b[22] == UInt8(ascii: ":"), b[25] == 32, Array(b[26...]) == Array("GMT".utf8)
        else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var v = 0
            for k in range {
                let d = b[k] &- UInt8(ascii: "0")
                guard d < 10 else { return nil }
                v = v * 10 + Int(d)
            }
            return v
        }
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"].map { Array($0.utf8) }
        guard let day = number(5..<7), let monthIndex = months.firstIndex(of: Array(b[8..<11])), let year = number(12..<16),
            let hour = number(17..<19), let minute = number(20..<22), let second = number(23..<25),
            (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        let days = DateConverter.days(year, monthIndex + 1, day)
        let instant = Double(days * 86400 + hour * 3600 + minute * 60 + second)
        return max(0, instant - now.timeIntervalSince1970)
    }

    static func preview(_ body: [UInt8]) -> String {
        let text = String(decoding: body.prefix(200), as: UTF8.self)
        return text.isEmpty ? "request refused" : text
    }

    // MARK: - Bodies

    private func value(at path: [String], in document: JSONDocument) -> JSONValue? {
        var current = document.root
        for key in path {
            guard let next = current[key] else { return nil }
            current = next
        }
        return current.isNull ? nil : current
    }

    private func number(at path: [String], in bytes: [UInt8]) -> Int? {
        guard let document = try? JSONDocument(bytes: bytes), let v = value(at: path, in: document) else { return nil }
        return v.int64.map(Int.init)
    }

    /// Records in the page (page and offset pagination stop on 0), or `nil` when it is not a page
    /// of records at all (not JSON, over the size limit, or no array at the records path): then
    /// pagination stops too, instead of walking on to `max_pages`.
    private func recordCount(_ page: Page) -> Int? {
        guard page.oversized == nil, let document = try? JSONDocument(bytes: page.bytes) else { return nil }
        var current = document.root
        for key in recordsPath {
            guard let next = current[key] else { return nil }
            current = next
        }
        return current.kind == .array ? current.count : nil
    }
}

/// The HTTP side of a fetched page, for the archive.
public struct HTTPExchange: Sendable {
    public var status: Int
    /// A safe subset of the response headers (``Credentials/archivedHeaders``).
    public var headers: [String: String]
    public var fetchedAt: Date
}

/// Results of one window of concurrent requests, each slot written by one request.
private final class ResultBox: @unchecked Sendable {  // every access under `lock`
    private let lock = NSLock()
    private var slots: [Result<Page, FetchError>?]

    init(count: Int) {
        slots = Array(repeating: nil, count: count)
    }

    func set(_ k: Int, _ result: Result<Page, FetchError>) {
        lock.lock()
        slots[k] = result
        lock.unlock()
    }

    var results: [Result<Page, FetchError>?] {
        lock.lock()
        defer { lock.unlock() }
        return slots
    }
}
