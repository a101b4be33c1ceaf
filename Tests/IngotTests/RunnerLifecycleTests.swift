import Dispatch
import Foundation
import Testing

@testable import Ingot

/// A runner's life (typed lifecycles): one run at a time, a second run after the
/// first works, a stop that comes before the run starts interrupts that run only.
struct RunnerLifecycleTests {
    static let yaml = itemPipeline("life")

    func runner(_ db: String) throws -> PipelineRunner {
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        return PipelineRunner(
            config: try PipelineConfig.parse(text: Self.yaml, path: "life.yml"), options: options, logger: LogCapture().logger)
    }

    /// Every run id has the same shape: the start time and eight hex digits, leading zeros kept
    /// (a suffix below 0x10000000 made seven).
    @Test func runIDsHaveOneLength() {
        let date = Date(timeIntervalSince1970: 1_795_000_000)
        #expect(PipelineRunner.makeRunID(date, suffix: 0x0abc) == "20261118T110640Z-00000abc")
        #expect(PipelineRunner.makeRunID(date, suffix: 0xffff_ffff) == "20261118T110640Z-ffffffff")
        #expect(PipelineRunner.makeRunID(date).count == 25)
    }

    @Test func aSecondRunAfterTheFirstWorks() throws {
        let db = temporaryDirectory().appendingPathComponent("l.db").path
        let runner = try runner(db)
        let first = runner.run(source: MemoryPageSource(["[{\"id\":1,\"name\":\"a\"}]"]))
        let second = runner.run(source: MemoryPageSource(["[{\"id\":1,\"name\":\"b\"},{\"id\":2}]"]))
        #expect(first.status == .finished && second.status == .finished)
        #expect(second.counters.inserted == 1 && second.counters.updated == 1)
        #expect(try rows(db, "SELECT id, name FROM item ORDER BY id") == [["1", "b"], ["2", "NULL"]])
    }

    @Test func aStopBeforeTheRunInterruptsThatRunOnly() throws {
        let db = temporaryDirectory().appendingPathComponent("l.db").path
        let runner = try runner(db)
        runner.stop()
        let stopped = runner.run(source: MemoryPageSource(["[{\"id\":1}]"]))
        #expect(stopped.status == .interrupted)
        let next = runner.run(source: MemoryPageSource(["[{\"id\":1}]"]))
        #expect(next.status == .finished, "the runner is ready again: \(next.error ?? "")")
        #expect(next.counters.inserted == 1)
    }

    /// A run started while another runs on the same runner is refused at once, and the first
    /// one is not disturbed. No timing: the first run's source holds its second page until the
    /// test lets it go.
    @Test(.hangGuard) func aRunWhileAnotherRunsIsRefused() throws {
        let db = temporaryDirectory().appendingPathComponent("l.db").path
        let runner = try runner(db)
        let source = HeldSource(["[{\"id\":1}]", "[{\"id\":2}]"])
        let done = DispatchSemaphore(value: 0)
        let first = SummaryBox()
        Thread.detachNewThread {
            first.value = runner.run(source: source)
            done.signal()
        }
        source.reached.wait()  // the first run is reading its second page
        let refused = runner.run(source: MemoryPageSource(["[{\"id\":3}]"]))
        #expect(refused.status == .failed && refused.failureKind == .configuration)
        #expect(refused.error?.contains("already running") == true)
        source.release.signal()
        done.wait()
        #expect(first.value?.status == .finished)
        #expect(try rows(db, "SELECT id FROM item ORDER BY id") == [["1"], ["2"]])
    }
}

/// Pages from memory; before its second page it signals `reached` and waits for `release`.
private final class HeldSource: PageSource, @unchecked Sendable {  // used from the source queue only
    let reached = DispatchSemaphore(value: 0)
    let release = DispatchSemaphore(value: 0)
    private let pages: MemoryPageSource
    private var served = 0
    init(_ pages: [String]) { self.pages = MemoryPageSource(pages) }
    func next() throws -> Page? {
        if served == 1 {
            reached.signal()
            release.wait()
        }
        served += 1
        return try pages.next()
    }
}

/// A summary handed from the run's thread to the test's (read after `done` was signalled).
private final class SummaryBox: @unchecked Sendable {  // written once before `done.signal()`, read after `done.wait()`
    var value: RunSummary?
}
