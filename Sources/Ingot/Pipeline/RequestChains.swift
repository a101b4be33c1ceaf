import Dispatch
import Foundation
import Synchronization

/// A `for_each`'s requests that paginate by what each answer says (next URLs, `Link` headers,
/// cursors), `concurrency` of them at once (docs/pipelines.md, "Concurrency"): each request is
/// followed to its end by a source of its own, on a thread of its own, a few pages ahead of the
/// run; ``ResourcesPageSource`` reads them request by request, each request's pages in order — the
/// order one request after the other gives, so later pages still win and resume states are the
/// same. A request's pages cannot be asked for at once (each names the next), so requests are.
///
/// Used from the pipeline's source queue; each request's thread fills its ``Chain`` only.
final class RequestChains: @unchecked Sendable {  // `source(for:)` on the source queue; `cancel()` from any
    /// Makes the source of request `item`, resumed where a run stopped in it (`resume`, or empty).
    typealias Make = (_ item: Int, _ resume: String) throws -> HTTPPageSource

    private let make: Make
    private let count: Int
    private let window: Int
    /// The requests started and not yet read, in order, from the one read next.
    private let started = Mutex<[(item: Int, chain: Chain)]>([])

    /// The requests `0..<count`, up to `window` at once, each made by `make`.
    init(count: Int, window: Int, make: @escaping Make) {
        self.count = count
        self.window = max(1, window)
        self.make = make
    }

    /// Request `item`'s pages, as a source; the requests after it are started meanwhile, up to
    /// the window. Requests started for another place (a resume, a request skipped) are stopped.
    func source(for item: Int, resume: String = "") throws -> any PageSource {
        var chains = started.withLock { started in
            defer { started = [] }
            return started
        }
        if !resume.isEmpty || chains.first?.item != item {
            for (_, chain) in chains { chain.cancel() }
            chains = [(item, Chain(try make(item, resume)))]
        }
        var next = (chains.last?.item ?? item) + 1
        while chains.count < window, next < count {
            chains.append((next, Chain(try make(next, ""))))
            next += 1
        }
        let first = chains.removeFirst()
        started.withLock { $0 = chains }
        return first.chain
    }

    /// Stops every request started: the run is stopping, or the resource is done.
    func cancel() {
        let chains = started.withLock { started in
            defer { started = [] }
            return started
        }
        for (_, chain) in chains { chain.cancel() }
    }

    /// One request's pages, fetched on a thread of its own at most ``Buffer/depth`` pages ahead
    /// of the reader; read as a source (its failure is thrown where the pages stop, as the
    /// request's own source throws it). Its HTTP source is used by that thread alone once made
    /// (its `cancel()` is safe from any thread). A chain its reader lets go of stops its thread.
    final class Chain: PageSource, @unchecked Sendable {  // `next()` from one reader; the rest is the buffer's
        private let buffer = Buffer()
        private let source: HTTPPageSource

        init(_ source: HTTPPageSource) {
            self.source = source
            let buffer = buffer
            Thread.detachNewThread { buffer.fill(from: source) }
        }

        deinit { cancel() }

        func next() throws -> Page? { try buffer.take() }

        func cancel() {
            buffer.stop()
            source.cancel()
        }

        var origin: String { source.origin }
    }

    /// The pages a chain's thread fetched and its reader has not taken yet.
    final class Buffer: Sendable {
        /// Pages fetched ahead of the reader, at most.
        static let depth = 2

        private struct State {
            var pages: [Page] = []
            var ended = false
            var failure: (any Error)?
            var stopped = false
        }
        private let state = Mutex(State())
        /// A page, the end or a failure came (or the chain was stopped).
        private let arrived = DispatchSemaphore(value: 0)
        /// Room for a page ahead. Made empty and signalled: a semaphore disposed of below the
        /// value it was made with traps in libdispatch, and a chain may end with its room taken.
        private let room = DispatchSemaphore(value: 0)

        init() {
            for _ in 0..<Buffer.depth { room.signal() }
        }

        /// The thread's loop: `source`'s pages, as room frees, until its end, a failure or a stop.
        func fill(from source: HTTPPageSource) {
            do {
                while true {
                    room.wait()
                    if state.withLock({ $0.stopped }) { return }
                    guard let page = try source.next() else { break }
                    state.withLock { $0.pages.append(page) }
                    arrived.signal()
                }
                state.withLock { $0.ended = true }
            } catch {
                state.withLock { $0.failure = error }
            }
            arrived.signal()
        }

        /// The next page, waiting for it; `nil` at the end (or once stopped); the request's
        /// failure where its pages stop.
        func take() throws -> Page? {
            while true {
                let taken: Result<Page?, any Error>? = state.withLock { state in
                    if !state.pages.isEmpty { return .success(state.pages.removeFirst()) }
                    if let failure = state.failure { return .failure(failure) }
                    if state.ended || state.stopped { return .success(nil) }
                    return nil
                }
                guard let taken else {
                    arrived.wait()
                    continue
                }
                if case .success(.some) = taken { room.signal() }
                return try taken.get()
            }
        }

        func stop() {
            state.withLock { $0.stopped = true }
            room.signal()
            arrived.signal()
        }
    }
}
