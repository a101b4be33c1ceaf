import Dispatch
import Foundation
import Logging
import Synchronization

/// Runs a pipeline: source → decode lanes → reorder → writer, on Dispatch queues joined by a
/// bounded number of pages in flight.
///
/// ```
/// source queue ──page──▶ decode lane k (serial queue, own DecodingContext) ──decoded page──▶ writer queue
///      ▲                                                                                       │
///      └──────────── a slot is given back when the writer folds the page into a batch ─────────┘
/// ```
///
/// - The source reads a page only when fewer than `pagesInFlight` pages are waiting: a slow
///   writer slows the source, and memory is bounded by `pagesInFlight` pages plus one batch.
/// - Lanes decode in parallel; the writer reorders by `seq` and applies pages strictly in order.
/// - The writer alone owns the database; each batch is one transaction.
public final class PipelineRunner: Sendable {
    public let config: PipelineConfig
    public let options: RunOptions
    let logger: Logger
    private let shared = SharedCounters()
    private let stopping = StopFlag()

    public init(config: PipelineConfig, options: RunOptions = RunOptions(), logger: Logger) {
        self.config = config
        self.options = options
        self.logger = logger
    }

    /// Counters of the run so far (committed batches only).
    public var counters: RunCounters { shared.value.withLock { $0 } }

    /// Asks the run to stop reading: in-flight pages are still applied and committed.
    public func stop() {
        stopping.value.withLock { $0 = true }
    }

    /// Runs the pipeline over `source` to the end and returns its summary. Blocks the caller.
    public func run(source: any PageSource) -> RunSummary {
        let started = Date()
        let runID = options.runID ?? PipelineRunner.makeRunID(started)
        var logger = self.logger
        logger[metadataKey: LogKey.pipeline] = "\(config.name)"
        logger[metadataKey: LogKey.runID] = "\(runID)"

        func summary(_ status: RunSummary.Status, _ counters: RunCounters, _ error: String?) -> RunSummary {
            let s = RunSummary(
                runID: runID, pipeline: config.name, status: status, counters: counters,
                duration: Date().timeIntervalSince(started), error: error)
            PipelineRunner.logSummary(s, logger)
            return s
        }

        let store: Store
        do {
            store = try Store(path: options.databasePath, model: config.model, options: options.store)
            try store.beginRun(id: runID, pipeline: config.name, startedAt: started)
            if config.write == .replace, let root = config.model.index(of: config.root) {
                try store.beginReplace(entity: root)
            }
        } catch {
            logger.error("run.failed", metadata: [LogKey.error: "\(error)", LogKey.database: "\(options.databasePath)"])
            return summary(.failed, RunCounters(), "\(error)")
        }
        logger.info("run.started", metadata: [
            LogKey.database: "\(options.databasePath)", LogKey.lanes: "\(max(1, options.lanes))",
            LogKey.batchRecords: "\(options.batchRecords ?? config.batchRecords ?? RunOptions.defaultBatchRecords)",
        ])

        let lanes = max(1, options.lanes)
        let inFlight = DispatchSemaphore(value: max(1, options.pagesInFlight ?? lanes * 2 + 2))
        let done = DispatchSemaphore(value: 0)
        let writer = WriterStage(
            store: store, config: config, runID: runID, options: options, logger: logger, shared: shared,
            finished: { done.signal() })
        let assembler = BatchAssembler(
            writer: writer, batchLimit: options.batchRecords ?? config.batchRecords ?? RunOptions.defaultBatchRecords,
            pageConsumed: { inFlight.signal() })

        let plan = MappingPlan(model: config.model, root: config.root, recordsPath: config.recordsPath)
        let laneQueues = (0..<lanes).map { k in
            let queue = DispatchQueue(label: "ingot.decode.\(k + 1)", qos: .userInitiated)
            DecodingContext.bind(DecodingContext(name: "decode.\(k + 1)", plan: plan), to: queue)
            return queue
        }

        let progress = startProgress(logger: logger, started: started)
        let sourceQueue = DispatchQueue(label: "ingot.source", qos: .userInitiated)
        sourceQueue.async { [stopping] in
            var seq = 0
            var sourceError: (any Error)?
            do {
                while !stopping.value.withLock({ $0 }) && !writer.hasFailed {
                    inFlight.wait()
                    guard var page = try source.next() else {
                        inFlight.signal()
                        break
                    }
                    seq += 1
                    page.seq = seq
                    let lane = laneQueues[(seq - 1) % lanes]
                    lane.async { [page] in
                        guard let context = DecodingContext.current, var mapper = context.mapper else {
                            preconditionFailure("decode lane \(lane.label) has no DecodingContext")
                        }
                        let decoded = mapper.map(bytes: page.bytes, seq: page.seq, source: page.source)
                        context.mapper = mapper
                        assembler.queue.async { assembler.receive(decoded) }
                    }
                }
            } catch {
                sourceError = error
            }
            assembler.queue.async { [seq, sourceError] in assembler.sourceFinished(total: seq, error: sourceError) }
        }
        done.wait()
        progress?.cancel()

        let counters = writer.counters
        do {
            if let failure = writer.failure {
                try? store.finishRun(id: runID, status: "failed", counters: counters, finishedAt: Date())
                try? store.close()
                logger.error("run.failed", metadata: [LogKey.error: "\(failure)"])
                return summary(.failed, counters, "\(failure)")
            }
            try store.finishRun(id: runID, status: "finished", counters: counters, finishedAt: Date())
            try store.close()
            return summary(.finished, counters, nil)
        } catch {
            logger.error("run.failed", metadata: [LogKey.error: "\(error)"])
            return summary(.failed, counters, "\(error)")
        }
    }

    // MARK: - Progress and summary

    private func startProgress(logger: Logger, started: Date) -> (any DispatchSourceTimer)? {
        guard options.progressInterval > 0 else { return nil }
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "ingot.progress"))
        let interval = options.progressInterval
        timer.schedule(deadline: .now() + interval, repeating: interval)
        timer.setEventHandler { [shared] in
            let c = shared.value.withLock { $0 }
            let elapsed = Date().timeIntervalSince(started)
            logger.info("run.progress", metadata: [
                LogKey.pages: "\(c.pages)", LogKey.records: "\(c.records)",
                LogKey.recordsPerSecond: "\(Int(Double(c.records) / max(elapsed, 0.001)))",
                LogKey.rejectedRecords: "\(c.rejectedRecords)", LogKey.rejectedPages: "\(c.rejectedPages)",
                LogKey.elapsed: "\(LogKey.seconds(elapsed))",
            ])
        }
        timer.resume()
        return timer
    }

    static func logSummary(_ s: RunSummary, _ logger: Logger) {
        let c = s.counters
        var metadata: Logger.Metadata = [
            LogKey.status: "\(s.status.rawValue)", LogKey.pages: "\(c.pages)", LogKey.records: "\(c.records)",
            LogKey.inserted: "\(c.inserted)", LogKey.updated: "\(c.updated)",
            LogKey.rejectedRecords: "\(c.rejectedRecords)", LogKey.rejectedPages: "\(c.rejectedPages)",
            LogKey.bytes: "\(c.bytes)", LogKey.recordsPerSecond: "\(Int(Double(c.records) / max(s.duration, 0.001)))",
            LogKey.duration: "\(LogKey.seconds(s.duration))",
        ]
        if c.deleted > 0 { metadata[LogKey.deleted] = "\(c.deleted)" }
        if let error = s.error { metadata[LogKey.error] = "\(error)" }
        logger.log(level: s.status == .finished ? .info : .error, "run.summary", metadata: metadata)
    }

    static func makeRunID(_ date: Date) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        return f.string(from: date) + "-" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
    }
}

/// Set once to stop the source; read by the source queue.
final class StopFlag: Sendable {
    let value = Mutex(false)
}
