import Foundation

/// Pages a joined run's fetcher read and has not enqueued yet: one thread reads the source and
/// ``put(_:)``s each page, waiting while ``capacity`` are held; the other ``take()``s every page
/// there is at once and enqueues them as one step. So the work queue grows by as many pages as
/// the source gave while the last group was being enqueued: a source that reads faster than one
/// statement a page (local files, a fan-out's requests) is enqueued in groups, one that reads
/// slower page by page, neither waiting for the other (docs/scale-out.md, "Units and the work
/// queue").
final class PageHandoff: @unchecked Sendable {  // `pages`, `end` and `closed` under `condition`
    /// How the reading ended.
    enum End {
        /// The source has no page after the ones handed over.
        case sourceEnded
        /// Reading failed after the pages handed over.
        case failed(any Error)
    }

    let capacity: Int
    private let condition = NSCondition()
    private var pages: [Page] = []
    private var end: End?
    private var closed = false

    init(capacity: Int) { self.capacity = max(1, capacity) }

    /// Hands `page` over, waiting while `capacity` pages are held; `false` once the taker
    /// ``close()``d (the page is dropped: the reader stops).
    func put(_ page: Page) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while pages.count >= capacity && !closed { condition.wait() }
        guard !closed else { return false }
        pages.append(page)
        condition.broadcast()
        return true
    }

    /// The reader is done: no page follows.
    func finish(_ end: End) {
        condition.lock()
        self.end = end
        condition.broadcast()
        condition.unlock()
    }

    /// Every page held (at least one), or none and how the reading ended once every page was
    /// taken; waits for one or the other.
    func take() -> (pages: [Page], end: End?) {
        condition.lock()
        defer { condition.unlock() }
        while pages.isEmpty && end == nil { condition.wait() }
        guard !pages.isEmpty else { return ([], end) }
        defer {
            pages = []
            condition.broadcast()
        }
        return (pages, nil)
    }

    /// The taker stops: a waiting or later ``put(_:)`` returns `false`.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }
}
