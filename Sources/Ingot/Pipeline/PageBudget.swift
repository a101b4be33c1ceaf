import Foundation

/// How many pages, and how many of their bytes, may be read but not yet folded into a batch.
///
/// The source takes a slot before reading a page (``acquireSlot()``), then charges the page's
/// bytes (``charge(_:)``), which waits while the pages in flight already hold `maxBytes`; the
/// assembler gives both back when it folds the page (``release(_:)``). A page bigger than the
/// whole budget still goes through, alone: a run never deadlocks on one big page.
///
/// So raw page bytes in flight stay under `maxBytes + maxPageBytes` (one page read and waiting
/// for room), whatever the source sends; docs/concurrency.md turns that into a memory bound.
final class PageBudget: @unchecked Sendable {  // `pages` and `bytes` are read and written only under `condition`
    let maxPages: Int
    let maxBytes: Int
    private let condition = NSCondition()
    private var pages = 0
    private var bytes = 0

    init(maxPages: Int, maxBytes: Int) {
        self.maxPages = max(1, maxPages)
        self.maxBytes = max(1, maxBytes)
    }

    /// Waits until fewer than `maxPages` pages are in flight, and takes a slot.
    func acquireSlot() {
        condition.lock()
        defer { condition.unlock() }
        while pages >= maxPages { condition.wait() }
        pages += 1
    }

    /// Charges a read page's bytes to its slot: waits while other pages hold the byte budget.
    func charge(_ count: Int) {
        condition.lock()
        defer { condition.unlock() }
        while bytes > 0 && bytes + count > maxBytes { condition.wait() }
        bytes += count
    }

    /// Gives back a slot and the bytes charged to it (0 for a slot whose page was never read).
    func release(_ count: Int) {
        condition.lock()
        pages -= 1
        bytes -= count
        condition.broadcast()
        condition.unlock()
    }

    /// Pages and bytes in flight now.
    var inFlight: (pages: Int, bytes: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (pages, bytes)
    }
}
