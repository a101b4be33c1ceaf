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
/// Requests are started up to ``lookahead`` times `concurrency` ahead of the one read, and make
/// `concurrency` transfers at once between them (a shared count of ``Slots``): a request of three
/// pages being read does not hold the others back, while the ones after it, done or waiting for
/// room, take no slot. The pages the requests after the one being read hold are bounded in bytes
/// too (``aheadBytes``, plus what transfers under way bring): a server's big pages cannot make
/// the lookahead hold gigabytes.
///
/// Used from the pipeline's source queue; each request's thread fills its ``Chain`` only.
final class RequestChains: @unchecked Sendable {  // `source(for:)` on the source queue; `cancel()` from any
    /// Makes the source of request `item`, resumed where a run stopped in it (`resume`, or empty).
    typealias Make = (_ item: Int, _ resume: String) throws -> HTTPPageSource

    /// Requests started ahead, in `concurrency`s.
    static let lookahead = 4
    /// Bytes of pages the requests after the one being read may hold before they wait.
    static let aheadBytes = 32 << 20

    private let make: Make
    /// How many requests there are now (a for_each that reads its own records adds to them as
    /// its pages are read).
    private let count: () -> Int
    private let window: Int
    /// Transfers the requests may make at once (`concurrency`).
    private let slots: Slots
    /// The requests started and not yet read, in order, from the one read next.
    private let started = Mutex<[(item: Int, chain: Chain)]>([])

    /// The requests `0..<count()`, `concurrency` transfers at once, each request made by `make`;
    /// the requests after the one being read hold `aheadBytes` of pages at most before they wait.
    init(count: @escaping () -> Int, concurrency: Int, aheadBytes: Int = RequestChains.aheadBytes, make: @escaping Make) {
        self.count = count
        self.window = max(1, concurrency) * RequestChains.lookahead
        self.slots = Slots(max(1, concurrency), aheadBytes: aheadBytes)
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
            chains = [(item, Chain(try make(item, resume), slots: slots))]
        }
        var next = (chains.last?.item ?? item) + 1
        while chains.count < window, next < count() {
            chains.append((next, Chain(try make(next, ""), slots: slots)))
            next += 1
        }
        let first = chains.removeFirst()
        first.chain.startReading()
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

        init(_ source: HTTPPageSource, slots: Slots) {
            self.source = source
            let buffer = buffer
            Thread.detachNewThread { buffer.fill(from: source, slots: slots) }
        }

        /// This request is the one being read: its pages no longer wait for the bytes ahead.
        func startReading() { buffer.startReading() }

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
            var reading = false
            /// The slots its pages' bytes are counted in, once the thread started.
            var slots: Slots?
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

        /// The thread's loop: `source`'s pages, as room frees and a slot is free, until its end,
        /// a failure or a stop.
        func fill(from source: HTTPPageSource, slots: Slots) {
            let stopped = { self.state.withLock { $0.stopped } }
            let ahead = { !self.state.withLock { $0.reading } }
            state.withLock { $0.slots = slots }
            do {
                while true {
                    room.wait()
                    guard slots.take(ahead: ahead, unless: stopped) else { return }
                    let next = Result { try source.next() }
                    slots.give()
                    guard let page = try next.get() else { break }
                    slots.hold(page.bytes.count)
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
                    if !state.pages.isEmpty {
                        let page = state.pages.removeFirst()
                        state.slots?.release(page.bytes.count)
                        return .success(page)
                    }
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

        func startReading() { state.withLock { $0.reading = true } }

        func stop() {
            let left = state.withLock { state in
                state.stopped = true
                defer { state.pages = [] }
                return (state.slots, state.pages.reduce(0) { $0 + $1.bytes.count })
            }
            left.0?.release(left.1)
            room.signal()
            arrived.signal()
        }
    }

    /// Transfers that may be under way at once, shared by the requests' threads, and the bytes
    /// of the pages they hold.
    final class Slots: Sendable {
        private let free = DispatchSemaphore(value: 0)
        private let held = Mutex(0)
        private let aheadBytes: Int

        /// `count` slots. The semaphore is made empty and signalled: one disposed of below the
        /// value it was made with traps in libdispatch.
        init(_ count: Int, aheadBytes: Int) {
            self.aheadBytes = aheadBytes
            for _ in 0..<count { free.signal() }
        }

        /// Takes a slot, waiting for one — and, for a request `ahead` of the one being read, while
        /// the pages held pass ``aheadBytes`` — `false` (none taken) once `stopped` says so.
        func take(ahead: () -> Bool, unless stopped: () -> Bool) -> Bool {
            while true {
                if stopped() { return false }
                if ahead() && held.withLock({ $0 }) >= aheadBytes {
                    Thread.sleep(forTimeInterval: 0.02)
                    continue
                }
                guard free.wait(timeout: .now() + 0.05) == .success else { continue }
                if stopped() {
                    free.signal()
                    return false
                }
                return true
            }
        }

        /// A page of `bytes` is held; then taken by the reader (``release(_:)``).
        func hold(_ bytes: Int) { held.withLock { $0 += bytes } }
        func release(_ bytes: Int) { held.withLock { $0 -= bytes } }

        /// Gives a slot back.
        func give() { free.signal() }
    }
}

extension ResourcesPageSource {
    /// Whether each page of a request is named by the page before (a next URL, a `Link` header,
    /// a cursor): its pages come one after the other, so its for_each's `concurrency` is of
    /// requests (``RequestChains``).
    static func pagesByAnswer(_ paginate: HTTPSourceConfig.Pagination) -> Bool {
        switch paginate {
        case .nextURL, .linkHeader, .cursor: true
        case .none, .page, .offset: false
        }
    }
}
