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
    private let logger: Logger
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
    private let cancelled = Mutex(false)

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
        query: [(String, String)] = [], logger: Logger
    ) throws {
        self.config = config
        self.recordsPath = recordsPath
        self.credentials = try Credentials(config: config, environment: environment)
        self.logger = logger
        self.firstQuery = query.map { URLQueryItem(name: $0.0, value: $0.1) }
        clients = (0..<max(1, config.concurrency)).map { _ in HTTPClient() }
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
        cancelled.withLock { $0 = true }
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
            logger.warning("fetch.max_pages", metadata: [LogKey.pages: "\(fetched)", LogKey.url: "\(credentials.redact(config.url))"])
            upcoming = nil
            return
        }
        switch cursor {
        case .page, .offset:
            try fillNumbered(from: cursor)
        case .url(let url):
            let page = try fetch(url: request(url), client: clients[0])
            fetched += 1
            var result = page
            upcoming = try following(url: url, page: page)
            result.resumeState = upcoming?.state ?? "done"
            buffered.append(.success(result))
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
                let records = recordCount(page.bytes)
                var stop = records == 0
                if case .offset(let offset) = cursors[k], case .offset(_, _, let limit, let totalPath?) = config.paginate,
                    let total = number(at: totalPath, in: page.bytes), offset + limit >= total
                {
                    stop = true
                }
                upcoming = stop ? nil : step(cursors[k])
                page.resumeState = upcoming?.state ?? "done"
                if records == 0 {
                    // An empty page ends pagination; it still goes through (archived, then counted).
                    buffered.append(.success(page))
                    return
                }
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
    private func following(url: String, page: Page) throws -> Cursor? {
        seenURLs.insert(url)
        let nextURL: String?
        switch config.paginate {
        case .none, .page, .offset:
            return nil
        case .linkHeader:
            nextURL = page.http?.headers["link"].flatMap(HTTPPageSource.nextLink)
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
        let absolute = URL(string: nextURL, relativeTo: URL(string: url))?.absoluteString ?? nextURL
        let stripped = strippingSecrets(absolute)
        if seenURLs.contains(stripped) {
            throw FetchError(url: credentials.redact(stripped), message: "the next URL repeats a page already fetched: pagination would loop")
        }
        return .url(stripped)
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
                let response = try client.get(withSecrets(url), headers: credentials.headers, timeout: config.timeout)
                if (200..<300).contains(response.status) {
                    var headers: [String: String] = [:]
                    for (name, value) in response.headers where Credentials.archivedHeaders.contains(name) { headers[name] = value }
                    return Page(
                        seq: 0, source: shown, bytes: response.body,
                        http: HTTPExchange(status: response.status, headers: headers, fetchedAt: started))
                }
                guard response.status == 408 || response.status == 429 || response.status >= 500 else {
                    throw FetchError(url: shown, status: response.status, message: HTTPPageSource.preview(response.body))
                }
                reason = "HTTP \(response.status)"
                delay = backoff(attempt)
                if let after = response.header("retry-after").flatMap(HTTPPageSource.retryAfter) {
                    delay = min(after, Double(retry.maxDelayMs) / 1000)
                }
                if attempt >= retry.attempts {
                    throw FetchError(url: shown, status: response.status, message: "gave up after \(attempt) attempts")
                }
            } catch let error as TransportError {
                reason = error.message
                delay = backoff(attempt)
                if !error.isRetryable {
                    throw FetchError(url: shown, message: error.message)
                }
                if attempt >= retry.attempts {
                    throw FetchError(url: shown, message: "\(error.message) (gave up after \(attempt) attempts)")
                }
            } catch let error as FetchError {
                throw error
            } catch {
                throw FetchError(url: shown, message: "\(error)")
            }
            logger.warning("fetch.retry", metadata: [
                LogKey.url: "\(shown)", LogKey.reason: "\(reason)", "attempt": "\(attempt)",
                "delay_s": "\(LogKey.seconds(delay))",
            ])
            try pause(delay, url: shown)
        }
    }

    /// Sleeps `seconds` in short steps, giving up as soon as the run is stopping.
    private func pause(_ seconds: Double, url: String) throws(FetchError) {
        let until = Date().addingTimeInterval(seconds)
        while Date() < until {
            if cancelled.withLock({ $0 }) { throw FetchError(url: url, message: "stopped while waiting to retry") }
            Thread.sleep(forTimeInterval: min(0.05, max(0, until.timeIntervalSinceNow)))
        }
    }

    /// Full jitter: a random delay up to `base × 2^(attempt-1)`, capped.
    private func backoff(_ attempt: Int) -> Double {
        let cap = min(Double(config.retry.maxDelayMs), Double(config.retry.baseDelayMs) * pow(2, Double(attempt - 1)))
        return Double.random(in: 0...max(cap, 0)) / 1000
    }

    /// `Retry-After` as seconds: a number of seconds or an HTTP date.
    static func retryAfter(_ value: String) -> Double? {
        if let seconds = Double(value.trimmingCharacters(in: .whitespaces)) { return max(0, seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return max(0, date.timeIntervalSinceNow)
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

    /// Records in the page (page/offset stop on 0); a page that is not JSON counts as non-empty.
    private func recordCount(_ bytes: [UInt8]) -> Int {
        guard let document = try? JSONDocument(bytes: bytes) else { return 1 }
        var current = document.root
        for key in recordsPath {
            guard let next = current[key] else { return 0 }
            current = next
        }
        return current.kind == .array ? current.count : 1
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
