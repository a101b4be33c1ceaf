import Foundation
import Synchronization

extension IngotDatabase {
    /// How an HTTP listing's pages follow one another — the pipeline file's `paginate:`
    /// (docs/pipelines.md, "Pagination").
    public enum Pagination: Sendable, Equatable {
        /// One request.
        case none
        /// RFC 8288 `Link: <…>; rel="next"` (GitHub, Shopify).
        case linkHeader
        /// The next page's URL at this key path of the page (SWAPI's and PokeAPI's `next`).
        case nextURL(at: String)
        /// `?param=start`, `start+1`, … until an empty page.
        case page(param: String, start: Int)
        /// The next cursor at this key path of the page, sent as `param` (Slack's
        /// `response_metadata.next_cursor` as `cursor`); stops on an absent or empty one.
        case cursor(at: String, param: String)
    }

    /// Fetches `url` and the pages after it (`paginate`) with the service's HTTP source — retries
    /// with back-off on 429 and 5xx (honouring `Retry-After`), timeouts, redirects kept to the
    /// URL's origin — and ingests every page as one run, as ``ingest(_:from:at:write:)`` does.
    /// `headers` go with every request (`Authorization`…); their values are never logged. All or
    /// nothing: the run is one transaction (``write(_:)``), so a page that cannot be fetched after
    /// its retries fails the ingest and saves nothing of it.
    ///
    /// ```swift
    /// let report = try await db.ingest([Repo].self, from: URL(string: "https://api.github.com/orgs/apple/repos")!,
    ///                                  paginate: .linkHeader, headers: ["Authorization": "Bearer \(token)"])
    /// ```
    public func ingest<T: IngotEntity>(
        _ type: [T].Type, from url: URL, at: String? = nil, paginate: Pagination = .none, headers: [String: String] = [:],
        write: Write = .merge
    ) async throws -> IngestReport {
        try await self.write { tx in try await tx.ingest(type, from: url, at: at, paginate: paginate, headers: headers, write: write) }
    }

    /// Ingests the pages `pages` yields — each the JSON of one page, records at `at` — as one run,
    /// as ``ingest(_:from:at:write:)`` does: a paginated API read with a client of your own,
    /// a file read in chunks of whole pages. Pages are taken one at a time, as the run is ready
    /// for them. All or nothing: the run is one transaction (``write(_:)``), so an error the
    /// sequence throws, like a failure of the database, saves nothing of it.
    public func ingest<T: IngotEntity, Pages: AsyncSequence>(
        _ type: [T].Type, pages: Pages, at: String? = nil, write: Write = .merge
    ) async throws -> IngestReport where Pages.Element: Sequence<UInt8> {
        try await self.write { tx in try await tx.ingest(type, pages: pages, at: at, write: write) }
    }
}

extension IngotTransaction {
    /// As ``IngotDatabase/ingest(_:from:at:paginate:headers:write:)``, in the transaction.
    public func ingest<T: IngotEntity>(
        _ type: [T].Type, from url: URL, at: String? = nil, paginate: IngotDatabase.Pagination = .none,
        headers: [String: String] = [:], write: IngotDatabase.Write = .merge
    ) async throws -> IngestReport {
        let source = try HTTPSourceConfig(url: url, paginate: paginate, headers: headers)
        let logger = database.logger
        return try await ingest(T.self, at: at, write: write) { config in
            try HTTPPageSource(config: source, framing: config.framing, environment: [:], logger: logger)
        }
    }

    /// As ``IngotDatabase/ingest(_:pages:at:write:)``, in the transaction.
    public func ingest<T: IngotEntity, Pages: AsyncSequence>(
        _ type: [T].Type, pages: Pages, at: String? = nil, write: IngotDatabase.Write = .merge
    ) async throws -> IngestReport where Pages.Element: Sequence<UInt8> {
        let source = AsyncPagesSource(origin: "ingest(\(T.self)) pages")
        async let report = ingest(T.self, at: at, write: write) { _ in source }
        do {
            for try await page in pages {
                guard await source.offer(Array(page)) else { break }
            }
            source.finish(nil)
        } catch {
            source.finish(error)
        }
        return try await report
    }
}

extension HTTPSourceConfig {
    /// The library's request: `url` with `paginate`, `headers` treated as secrets.
    init(url: URL, paginate: IngotDatabase.Pagination, headers: [String: String]) throws {
        func path(_ text: String) throws -> JSONKeyPath {
            do {
                return try JSONKeyPath(parsing: text)
            } catch {
                throw StoreError.unsupported("pagination key path '\(text)': \(error)")
            }
        }
        let pagination: Pagination =
            switch paginate {
            case .none: .none
            case .linkHeader: .linkHeader
            case .nextURL(let at): .nextURL(path: try path(at))
            case .page(let param, let start): .page(param: param, start: start, totalPages: nil)
            case .cursor(let at, let param): .cursor(.path(try path(at)), into: .query(param), stopValues: [])
            }
        self.init(
            url: url.absoluteString,
            headers: headers.sorted { $0.key < $1.key }.map { Header(name: $0.key, value: $0.value, isSecret: true) },
            paginate: pagination)
    }
}

/// The pages of an `AsyncSequence`, handed to the run's source queue one at a time: the
/// caller's task offers a page and waits until the run took it; the run's ``next()`` waits for
/// the next page, the end, or the sequence's error.
final class AsyncPagesSource: PageSource, Sendable {
    private struct State {
        var page: [UInt8]?
        /// The task waiting for its page to be taken.
        var offering: CheckedContinuation<Bool, Never>?
        var end: Result<Void, any Error>?
        /// The run stopped taking pages (it ended or failed).
        var closed = false
        var seq = 0
    }

    private let state = Mutex(State())
    private let ready = DispatchSemaphore(value: 0)
    let origin: String

    init(origin: String) { self.origin = origin }

    /// Hands `page` to the run; `false` when the run takes no more pages.
    func offer(_ page: [UInt8]) async -> Bool {
        await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            let closed = state.withLock { state -> Bool in
                guard !state.closed else { return true }
                state.page = page
                state.offering = continuation
                return false
            }
            if closed { continuation.resume(returning: false) } else { ready.signal() }
        }
    }

    /// The sequence ended (`nil`) or threw `error`.
    func finish(_ error: (any Error)?) {
        state.withLock { $0.end = error.map { .failure($0) } ?? .success(()) }
        ready.signal()
    }

    func next() throws -> Page? {
        while true {
            let step = state.withLock { state -> (page: Page?, taken: CheckedContinuation<Bool, Never>?, end: Result<Void, any Error>?) in
                if let bytes = state.page {
                    state.page = nil
                    state.seq += 1
                    defer { state.offering = nil }
                    return (Page(seq: state.seq, source: "\(origin) #\(state.seq)", bytes: bytes), state.offering, nil)
                }
                return (nil, nil, state.end)
            }
            if let page = step.page {
                step.taken?.resume(returning: true)
                return page
            }
            if let end = step.end {
                try end.get()
                return nil
            }
            ready.wait()
        }
    }

    /// The run takes no more pages: a task offering one is told so.
    func cancel() {
        let waiting = state.withLock { state -> CheckedContinuation<Bool, Never>? in
            state.closed = true
            defer { state.offering = nil }
            return state.offering
        }
        waiting?.resume(returning: false)
        ready.signal()
    }
}
