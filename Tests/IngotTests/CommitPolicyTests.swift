import Testing

@testable import Ingot

/// When the writer commits (``CommitPolicy``), decided from the records saved, the clock and the
/// bytes kept for a redo — no writer, no store, no wall time.
struct CommitPolicyTests {
    @Test func aTransactionCommitsAtItsRecordsItsAgeOrItsRetainedBytes() {
        var policy = CommitPolicy(records: 100, interval: 1)
        // The first batch opens the transaction and asks for a timer for it.
        #expect(policy.saved(records: 40, now: 10) == .wait(timer: 0))
        #expect(policy.isOpen(0))
        #expect(policy.saved(records: 80, now: 10.5) == .wait(timer: nil), "one timer a transaction")
        #expect(policy.saved(records: 100, now: 10.6) == .commit, "its records")
        policy.ended()
        #expect(!policy.isOpen(0), "a timer of a committed transaction does nothing")
        #expect(policy.saved(records: 1, now: 20) == .wait(timer: 1))
        #expect(policy.saved(records: 2, now: 21) == .commit, "its age")
        policy.ended()
        #expect(policy.saved(records: 1, now: 30) == .wait(timer: 2))
        policy.retain(CommitPolicy.maxRetainedBytes - 1)
        #expect(policy.saved(records: 2, now: 30) == .wait(timer: nil))
        policy.retain(1)
        #expect(policy.saved(records: 3, now: 30) == .commit, "the bytes it keeps for a redo")
        policy.releaseRetained()
        #expect(policy.saved(records: 4, now: 30) == .wait(timer: nil))
    }

    @Test func aBigFirstBatchCommitsAtOnceWithoutATimer() {
        var policy = CommitPolicy(records: 0, interval: 30)
        #expect(policy.records == 1, "at least one record a transaction")
        #expect(policy.saved(records: 5, now: 0) == .commit)
        policy.ended()
        #expect(!policy.isOpen(0) && !policy.isOpen(1))
    }
}
