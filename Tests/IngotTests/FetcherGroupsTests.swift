import Foundation
import Testing

@testable import Ingot

/// What keeps a joined run's queue cheap for the server: statements prepared at their second
/// run (``StatementCache``), and the fetcher's pages enqueued a group at a time
/// (``PageHandoff``, ``SharedRun/enqueue(_:from:)``).
struct FetcherGroupsTests {
    @Test func aStatementIsPreparedAtItsSecondRunAndAtMostLimitAre() {
        var cache = StatementCache(limit: 2, seenLimit: 8)
        #expect(cache.lookUp("a") == .runUnprepared)
        #expect(cache.lookUp("a") == .prepare("ingot_1"))
        cache.prepared("a", as: "ingot_1")
        #expect(cache.lookUp("a") == .prepared("ingot_1"))
        #expect(cache.lookUp("b") == .runUnprepared)
        // Not confirmed (the server refused it): asked again, a new name.
        #expect(cache.lookUp("b") == .prepare("ingot_2"))
        #expect(cache.lookUp("b") == .runUnprepared)
        #expect(cache.lookUp("b") == .prepare("ingot_3"))
        cache.prepared("b", as: "ingot_3")
        // Full: a third statement runs unprepared however often it runs.
        for _ in 0..<3 { #expect(cache.lookUp("c") == .runUnprepared) }
        // A forgotten statement is prepared again under a name never given before.
        cache.forget("a")
        #expect(cache.count == 1)
        #expect(cache.lookUp("a") == .runUnprepared)
        #expect(cache.lookUp("a") == .prepare("ingot_4"))
    }

    @Test func textsSeenOnceAreForgottenPastTheirLimit() {
        var cache = StatementCache(limit: 8, seenLimit: 2)
        #expect(cache.lookUp("a") == .runUnprepared)
        #expect(cache.lookUp("b") == .runUnprepared)
        // The third text seen once clears the two before it.
        #expect(cache.lookUp("c") == .runUnprepared)
        #expect(cache.lookUp("a") == .runUnprepared)
        #expect(cache.lookUp("c") == .prepare("ingot_1"))
    }

    @Test func theEnqueuerTakesEveryPageHeldThenTheEnd() {
        let handoff = PageHandoff(capacity: 3)
        for k in 1...3 { #expect(handoff.put(Page(seq: 0, source: "p\(k)", bytes: []))) }
        handoff.finish(.sourceEnded)
        let first = handoff.take()
        #expect(first.pages.map(\.source) == ["p1", "p2", "p3"] && first.end == nil)
        let second = handoff.take()
        guard case .sourceEnded = second.end else {
            Issue.record("expected the source's end, got \(second)")
            return
        }
        #expect(second.pages.isEmpty)
    }

    @Test func aReaderStopsOnceTheEnqueuerCloses() {
        let handoff = PageHandoff(capacity: 1)
        #expect(handoff.put(Page(seq: 0, source: "p1", bytes: [])))
        handoff.close()
        // Full and closed: the put returns at once, dropping its page.
        #expect(!handoff.put(Page(seq: 0, source: "p2", bytes: [])))
    }

    @Test func aReadersFailureFollowsThePagesBeforeIt() {
        struct Broken: Error {}
        let handoff = PageHandoff(capacity: 4)
        #expect(handoff.put(Page(seq: 0, source: "p1", bytes: [])))
        handoff.finish(.failed(Broken()))
        #expect(handoff.take().pages.map(\.source) == ["p1"])
        guard case .failed(let error) = handoff.take().end else {
            Issue.record("expected the failure")
            return
        }
        #expect(error is Broken)
    }
}
