import Dispatch
import Foundation
import Logging
import Synchronization

/// The pages of a shared run (`--join`), as one job's pipeline reads them: each ``next()`` claims
/// a unit from the run's work queue (``SharedRun``, whatever store keeps it). When nobody fetches
/// and the source is not finished, this job takes the fetcher's role: a thread of its own reads
/// `upstream` (the pipeline's source) and enqueues each page with where the source continues (so
/// that a job taking the role over resumes there). ``next()`` returns `nil` once the source is
/// finished and every unit is done or held by this job; it waits while other jobs hold units
/// (their leases may run out and hand them over). A timer (``RunOptions/timers``) renews this
/// job's leases every third of a lease.
final class SharedRunSource: FetchReporting, @unchecked Sendable {  // `next()` on the source queue; shared state under mutexes
    let run: any SharedRun
    private let upstream: any PageSource
    private let maxPageBytes: Int
    private let cancelled = StopFlag()
    private let logger = Mutex(Logger(label: "ingot"))
    /// Pages enqueued ahead of the jobs at most, before the fetcher waits.
    private let ahead: Int
    private let fetchQueue = DispatchQueue(label: "ingot.join.fetch", qos: .userInitiated)
    private let fetch = Mutex(FetchState.idle)
    /// Set once, at the end of `init`.
    private var renewal: (any RunTimer)?
    /// Called before ``next()`` waits for work: the pipeline hands its open batch to the writer
    /// (other jobs may be waiting for the units in it).
    private let idleHandler = Mutex<(@Sendable () -> Void)?>(nil)

    /// Where this job's fetcher thread is: at most one runs, and a failed one fails the job.
    enum FetchState {
        case idle
        case fetching
        case failed(any Error)
    }

    /// Why a shared run cannot go on, as the source reports it.
    struct RunFailed: Error, CustomStringConvertible {
        var message: String
        var description: String { "the joined run failed: \(message)" }
    }

    /// The requests this job makes for the units it claims (``SharedRequests``), when the
    /// pipeline has any the fetcher leaves to the jobs.
    private let requests: SharedRequests?
    /// Requests this job is making (the source queue only): up to the resource's `concurrency`
    /// at once, a claimed unit each, answers handed out in the plan's order
    /// (``LoadPlan/AnswerOrder``).
    private let window: RequestWindow
    /// The unit this job claimed last (the source queue only).
    private var lastClaimed: Int?
    /// A unit claimed while the window was being filled that is not a request: handed out next.
    private var claimedAhead: [Page] = []
    /// Empty numbered pages this job fetched whose place is not settled yet — the source's end,
    /// or past it (``SharedRun/settleEnd(of:)``) — lowest unit first (the source queue only).
    private var unsettled: [Page] = []
    /// When this job last asked whether the run's requests are paused (the source queue only).
    private var pauseAskedAt = Date.distantPast
    /// Which of the process's jobs claims next (a test's, ``ClaimTurns``); `nil`: any.
    private let turns: (any ClaimTurns)?

    init(
        run: any SharedRun, upstream: any PageSource, maxPageBytes: Int, timers: any RunTimers = DispatchTimers(), ahead: Int = 64,
        requests: SharedRequests? = nil, answers: LoadPlan.AnswerOrder = .asTheyCome, turns: (any ClaimTurns)? = nil
    ) {
        self.run = run
        self.turns = turns
        window = RequestWindow(order: answers)
        self.upstream = upstream
        self.requests = requests
        self.maxPageBytes = maxPageBytes
        self.ahead = max(1, ahead)
        renewal = timers.every(max(0.05, run.lease / 3), on: DispatchQueue(label: "ingot.join.lease")) { [weak self] in
            guard let self else { return }
            do {
                try self.run.renewLeases()
            } catch {
                self.logger.withLock { $0 }.warning("join.lease_failed", metadata: [LogKey.error: "\(error)"])
            }
        }
    }

    /// Sets what ``next()`` calls before it waits.
    func whenIdle(_ handler: @escaping @Sendable () -> Void) {
        idleHandler.withLock { $0 = handler }
    }

    func useLogger(_ logger: Logger) {
        self.logger.withLock { $0 = logger }
        upstream.useLogger(logger)
    }

    func useMetrics(_ metrics: any FetchObserver) { (upstream as? any FetchReporting)?.useMetrics(metrics) }

    func cancel() {
        cancelled.value.withLock { $0 = true }
        upstream.cancel()
    }

    /// Stops renewing leases and waits for the fetcher thread; gives the fetcher's role back if
    /// this job still holds it.
    func close() {
        cancel()
        fetchQueue.sync {}
        renewal?.cancel()
        run.releaseFetcherRole()
        turns?.left(run.job)
    }

    private var isCancelled: Bool { cancelled.value.withLock { $0 } }

    func next() throws -> Page? {
        if !claimedAhead.isEmpty { return try handOut(claimedAhead.removeFirst()) }
        if let requests, window.inFlight > 0 { return try nextAnswer(with: requests) }
        var idle = 0.002
        while true {
            if isCancelled { throw SourceError(source: "join \(run.name)", message: "stopped") }
            if case .failed(let error) = fetch.withLock({ $0 }) { throw error }
            if let page = try settledEnd() { return page }
            if let page = try claimNoting() {
                guard let requests, SharedRequests.isPending(page) else { return try handOut(page) }
                window.size = requests.concurrency(of: page)
                try waitOutPause()
                launch(page, with: requests)
                return try nextAnswer(with: requests)
            }
            switch try run.state() {
            case .finished: return nil
            case .failed(let message): throw RunFailed(message: message)
            case .running(let endSeq, let fetching, let openElsewhere, _):
                if endSeq != nil && openElsewhere == 0 && unsettled.isEmpty { return nil }
                if endSeq == nil && !fetching, case .idle = fetch.withLock({ $0 }), let role = try run.takeFetcherRole() {
                    startFetching(from: role.nextSeq, state: role.resumeState)
                    idle = 0.002
                    continue
                }
            }
            // Pages still being decoded reach the batch later: ask at every wait.
            idleHandler.withLock { $0 }?()
            run.waitForWork(upTo: idle)
            idle = min(idle * 2, run.longestWait)
        }
    }

    /// `page` as the pipeline reads it: a unit keeping a paginated request's pages hands out the
    /// first (the others next, in order: ``Page/keptPages()``); a unit naming a file has it read,
    /// on the source's thread, as a single run reads its files (``FileUnit``; the payload stays
    /// out of the work queue).
    private func handOut(_ page: Page) throws -> Page {
        if page.requestPages != nil {
            let pages = page.keptPages()
            claimedAhead.insert(contentsOf: pages.dropFirst(), at: 0)
            return pages[0]
        }
        guard let requests, SharedRequests.isFile(page) else { return page }
        return try requests.read(page)
    }

    /// The unit's pages as they are archived: a request's pages kept in it, or a file it names
    /// read again (``FileUnit``).
    func archived(_ unit: Page) throws -> [Page] {
        if unit.requestPages != nil { return unit.keptPages() }
        guard let requests, SharedRequests.isFile(unit) else { return [unit] }
        return [try requests.read(unit)]
    }

    /// Claims a unit, noting a takeover; `nil` when none is open (or it is another job's turn,
    /// ``ClaimTurns``).
    private func claimNoting() throws -> Page? {
        // While an empty page waits for the units before it, only those: the units after it are
        // likely past the end.
        let before = unsettled.first?.unitSeq
        guard turns?.mayClaim(run.job) ?? true, let (page, takenFrom) = try run.claim(maxPageBytes: maxPageBytes, before: before)
        else { return nil }
        turns?.claimed(run.job)
        // Claim order keeps this job's units in a row only while its claims are in a row: once
        // another job took a unit between two of them, answers are handed out as they come.
        if let last = lastClaimed, page.seq != last + 1 { window.answerAsTheyCome() }
        lastClaimed = page.seq
        let logger = self.logger.withLock { $0 }
        if let takenFrom {
            logger.notice("unit.taken_over", metadata: [LogKey.seq: .int(page.seq), "from_job": "\(takenFrom)"])
        } else if logger.logLevel <= .debug {
            logger.debug("unit.claimed", metadata: [LogKey.seq: .int(page.seq)])
        }
        return page
    }

    /// Keeps the window full — claims units while fewer than its size are being fetched,
    /// starting each request (a unit that is not one is kept for the next call) — then waits for
    /// an answer, keeps it in its unit (for the archive, and for a job that takes it over) and
    /// returns it: a paginated request's first page, its others handed out next, in order. An
    /// empty numbered page waits for its place to be settled (``settledEnd()``), the next page
    /// handed out meanwhile; `nil` when the source is done. A failed request fails the job;
    /// the units it held go back to the queue.
    private func nextAnswer(with requests: SharedRequests) throws -> Page? {
        while claimedAhead.isEmpty, window.inFlight < window.size, let more = try claimNoting() {
            if SharedRequests.isPending(more) {
                try waitOutPause()
                launch(more, with: requests)
            } else {
                claimedAhead.append(more)
            }
        }
        let pages = try window.take { [self] in
            guard isCancelled else { return }
            // A stopping job does not wait for a request in flight (its threads end on their own).
            throw SourceError(source: "join \(run.name)", message: "stopped")
        }
        // Settled before the answer is kept: a job that takes the unit over after a failure
        // fetches it again and settles it itself.
        if pages.count == 1, pages[0].endsSource {
            unsettled.append(pages[0])
            unsettled.sort { $0.unitSeq < $1.unitSeq }
            return try settledEnd() ?? next()
        }
        return try kept(pages)
    }

    /// `pages`, a request's answer, kept in its unit (for the archive, and for a job that takes
    /// it over): the first is returned, the others handed out next, in order.
    private func kept(_ pages: [Page]) throws -> Page {
        guard let kept = Page.kept(pages) else { throw SourceError(source: "join \(run.name)", message: "a request gave no page") }
        _ = try run.keepFetched(kept)
        var handed = pages
        for k in handed.indices { handed[k].unitContinues = k + 1 < handed.count }
        claimedAhead.insert(contentsOf: handed.dropFirst(), at: 0)
        return handed[0]
    }

    /// The lowest empty page this job holds, once it is settled as the source's end: handed out,
    /// counted and archived as a single run's last page. A page past an earlier end is let go
    /// (neither counted nor archived). `nil` while the units before the lowest are still open
    /// and other jobs' (settled once they are done or this job takes them over: the caller
    /// claims and waits meanwhile, handing its open batch over as for any wait).
    private func settledEnd() throws -> Page? {
        while let page = unsettled.first, let unit = page.unit {
            switch try run.settleEnd(of: unit) {
            case .ends:
                unsettled.removeFirst()
                logger.withLock { $0 }.info("join.source_end", metadata: [LogKey.seq: .int(unit.seq), LogKey.url: "\(page.source)"])
                return try kept([page])
            case .pastTheEnd:
                unsettled.removeFirst()
                logger.withLock { $0 }.debug("unit.past_the_end", metadata: [LogKey.seq: .int(unit.seq)])
            case .earlierUnitsOpen:
                return nil
            }
        }
        return nil
    }

    /// Makes `page`'s request on a thread of its own; its answer goes to the window. A wait its
    /// server asks for (`Retry-After`) is asked of every job of the run (``SharedRun/pauseRequests(for:)``).
    private func launch(_ page: Page, with requests: SharedRequests) {
        let ticket = window.started(unit: page.unitSeq)
        let logger = self.logger.withLock { $0 }
        let window = self.window
        let run = self.run
        Thread.detachNewThread {
            let answer = Result { try requests.fetch(page, logger: logger) { seconds in try? run.pauseRequests(for: seconds) } }
            window.answer(answer, ticket: ticket)
        }
    }

    /// Waits while the run's jobs are asked to start no request — a server answered one of them
    /// `Retry-After` (docs/scale-out.md, "Requests any job makes") — asking the run at most once a
    /// second; a stopping job stops waiting.
    private func waitOutPause() throws {
        guard Date().timeIntervalSince(pauseAskedAt) >= 1 else { return }
        pauseAskedAt = Date()
        let left = try run.requestPause()
        guard left > 0 else { return }
        logger.withLock { $0 }.notice(
            "join.paused", metadata: [LogKey.reason: "a server asked for Retry-After", "delay_s": .seconds(left)])
        let until = Date().addingTimeInterval(left)
        while Date() < until {
            if isCancelled { throw SourceError(source: "join \(run.name)", message: "stopped") }
            Thread.sleep(forTimeInterval: min(0.05, max(0, until.timeIntervalSinceNow)))
        }
    }

    // MARK: - The fetcher

    private func startFetching(from first: Int, state: String?) {
        fetch.withLock { $0 = .fetching }
        let logger = self.logger.withLock { $0 }
        logger.info("join.fetching", metadata: [LogKey.seq: .int(first), "resume_state": "\(state ?? "start")"])
        fetchQueue.async { [self] in
            do {
                let ended = try fetchAll(from: first, state: state)
                if let ended { logger.info("join.fetched", metadata: [LogKey.pages: .int(ended - 1)]) }
                fetch.withLock { $0 = .idle }
            } catch {
                if isCancelled {
                    fetch.withLock { $0 = .idle }
                    return
                }
                logger.error("join.fetch_failed", metadata: [LogKey.error: "\(error)"])
                run.recordFetchFailure("\(error)")
                fetch.withLock { $0 = .failed(error) }
            }
        }
    }

    /// Reads the source from `state`, enqueuing pages from `first`; returns the end seq when the
    /// source ended, `nil` when the role was lost or the job stops. A thread of its own reads
    /// the source while this one enqueues what it read, a group at a time (``PageHandoff``);
    /// the reader has stopped when this returns.
    private func fetchAll(from first: Int, state: String?) throws -> Int? {
        if let state { try upstream.resume(from: state) }
        let handoff = PageHandoff(capacity: Self.enqueueGroup)
        let reading = DispatchGroup()
        DispatchQueue(label: "ingot.join.read", qos: .userInitiated).async(group: reading) { [self] in
            do {
                while !isCancelled, let page = try upstream.next() {
                    guard handoff.put(page) else { return }
                }
                handoff.finish(.sourceEnded)
            } catch {
                handoff.finish(.failed(error))
            }
        }
        defer {
            handoff.close()
            reading.wait()
        }
        var seq = first
        var checked = first - ahead
        while !isCancelled {
            // Every quarter of `ahead` pages, wait while the jobs are that far behind.
            if seq - checked >= ahead / 4 {
                var idle = 0.002
                while !isCancelled {
                    guard case .running(let end, _, _, let pending) = try run.state() else { return nil }
                    if let end { return end }
                    if pending < ahead { break }
                    Thread.sleep(forTimeInterval: idle)
                    idle = min(idle * 2, 0.05)
                }
                checked = seq
            }
            let (pages, end) = handoff.take()
            switch end {
            case .failed(let error): throw error
            case .sourceEnded: return try run.endSource(at: seq) ? seq : endFoundByAJob()
            case nil: break
            }
            guard seq + pages.count - 1 <= UnitOrder.lastSeq else {
                throw StoreError.unsupported(
                    "a joined run holds at most \(UnitOrder.lastSeq) units (docs/scale-out.md): split the source, or run it alone")
            }
            guard try run.enqueue(pages, from: seq) else {
                if let end = try endFoundByAJob() { return end }
                logger.withLock { $0 }.warning("join.fetch_lost", metadata: [LogKey.seq: .int(seq)])
                return nil
            }
            seq += pages.count
        }
        return nil
    }

    /// Where a job that found a numbered page empty ended the source (``SharedRun/settleEnd(of:)``),
    /// which also took the fetcher's role back: `nil` when no job did.
    private func endFoundByAJob() throws -> Int? {
        guard case .running(let end?, _, _, _) = try run.state() else { return nil }
        return end
    }

    /// Pages enqueued in one step at most: what the reader may get ahead of the enqueuer.
    static let enqueueGroup = 16
}

/// A joined job's requests in flight (``SharedRunSource``): how many are being made, and their
/// answers, handed out as they came or in the order of their units (``LoadPlan/AnswerOrder``).
final class RequestWindow: Sendable {
    private struct State {
        var size = 1
        /// The units whose requests are in flight, answered or not, until taken.
        var flying: [Int] = []
        var answers: [(unit: Int, result: Result<[Page], any Error>)] = []
        var order: LoadPlan.AnswerOrder
    }
    private let state: Mutex<State>
    private let arrived = DispatchSemaphore(value: 0)

    init(order: LoadPlan.AnswerOrder = .asTheyCome) { state = Mutex(State(order: order)) }

    /// From now on, each answer as soon as it came (the answers taken so far stay taken), unless
    /// the answers keep their units' order whatever the claims (``LoadPlan/AnswerOrder/units``).
    func answerAsTheyCome() { state.withLock { if $0.order == .claimed { $0.order = .asTheyCome } } }

    /// How many requests at once (the resource's `concurrency`).
    var size: Int {
        get { state.withLock { $0.size } }
        set { state.withLock { $0.size = max(1, newValue) } }
    }

    /// Requests started and not yet taken.
    var inFlight: Int { state.withLock { $0.flying.count } }

    /// A request started for `unit`: its answer is told with the same number.
    func started(unit: Int) -> Int {
        state.withLock { $0.flying.append(unit) }
        return unit
    }

    /// Unit `ticket`'s answer came.
    func answer(_ result: Result<[Page], any Error>, ticket: Int) {
        state.withLock { $0.answers.append((ticket, result)) }
        arrived.signal()
    }

    /// The next answer — the first that came, or the earliest unit's in flight — waiting for it
    /// (calling `check` every 50 ms meanwhile: it throws to stop waiting); its pages, or the
    /// request's error.
    func take(checking check: () throws -> Void) throws -> [Page] {
        while true {
            let taken = state.withLock { state -> Result<[Page], any Error>? in
                let wanted = state.order == .asTheyCome ? nil : state.flying.min()
                guard let index = state.answers.firstIndex(where: { wanted == nil || $0.unit == wanted }) else { return nil }
                let answer = state.answers.remove(at: index)
                if let k = state.flying.firstIndex(of: answer.unit) { state.flying.remove(at: k) }
                return answer.result
            }
            if let taken { return try taken.get() }
            // A signal may stand for an answer taken already: the loop looks again.
            if arrived.wait(timeout: .now() + 0.05) == .timedOut { try check() }
        }
    }
}
