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
        let most = CommitPolicy.maxRetainedBytes
        #expect(policy.saved(records: 2, retainedBytes: most - 1, now: 30) == .wait(timer: nil))
        #expect(policy.saved(records: 3, retainedBytes: most, now: 30) == .commit, "the bytes it keeps for a redo")
        #expect(policy.saved(records: 4, retainedBytes: 0, now: 30) == .wait(timer: nil))
    }

    @Test func theRedoLogCountsTheBytesItKeepsUntilItsTransactionEnds() {
        var log = RedoLog()
        let decoded = DecodedPage(seq: 1, source: "p", bytes: 10, records: [], rejections: [], pageRejected: false, recordCount: 0)
        log.keep(PreparedBatch(pages: [decoded, decoded]), nil)
        #expect(log.bytes == 20)
        let redo = log.takeForRedo()
        #expect(redo.count == 1 && log.bytes == 0 && log.refusedInTransaction)
        log.keepRedone(redo[0])
        #expect(log.bytes == 20, "a write redone is kept again, with its bytes")
        log.transactionEnded()
        #expect(log.bytes == 0 && log.writes.isEmpty && !log.refusedInTransaction)
    }

    @Test func aSharedRunsJobCommitsAtTheEndOfEachUnitWhateverItsSize() {
        var policy = CommitPolicy(records: 10, interval: 1, scope: .eachUnit)
        #expect(policy.saved(records: 500, retainedBytes: CommitPolicy.maxRetainedBytes, now: 99) == .wait(timer: nil), "a unit in parts")
        #expect(policy.saved(records: 1, now: 0, endsUnit: true) == .commit)
    }

    @Test func aBigFirstBatchCommitsAtOnceWithoutATimer() {
        var policy = CommitPolicy(records: 0, interval: 30)
        #expect(policy.records == 1, "at least one record a transaction")
        #expect(policy.saved(records: 5, now: 0) == .commit)
        policy.ended()
        #expect(!policy.isOpen(0) && !policy.isOpen(1))
    }
}

/// Where the writer stage is (``WriterPhase``): the first failure is the one kept, and the end
/// says how the stage ended.
struct WriterPhaseTests {
    struct Failure: Error, Equatable { let n: Int }

    @Test func theFirstFailureIsKeptAndTheEndSaysHowItEnded() {
        var phase = WriterPhase.writing
        #expect(phase.isWriting && phase.failure == nil)
        let first = phase.fail(Failure(n: 1))
        let second = phase.fail(Failure(n: 2))
        #expect(first, "the first failure stops the source")
        #expect(!second, "a later one is only logged")
        #expect(!phase.isWriting && (phase.failure as? Failure) == Failure(n: 1))
        phase.end(exhausted: true)
        #expect(phase.hasEnded && !phase.isInterrupted && (phase.failure as? Failure) == Failure(n: 1), "a failed run ends failed")

        var stopped = WriterPhase.writing
        stopped.end(exhausted: false)
        #expect(stopped.isInterrupted && stopped.failure == nil)
        var done = WriterPhase.writing
        done.end(exhausted: true)
        #expect(done.hasEnded && !done.isInterrupted && done.failure == nil)
    }
}
