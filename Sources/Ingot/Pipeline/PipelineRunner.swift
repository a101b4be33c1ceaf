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
/// - The writer alone owns the database; a transaction holds one batch or several, committed
///   when big or old enough (``CommitPolicy``), or — in a joined run — with whole units only.
public final class PipelineRunner: Sendable {
    /// The pipeline it runs.
    public let config: PipelineConfig
    /// How it runs it.
    public let options: RunOptions
    let logger: Logger
    let shared = SharedCounters()
    /// Set by ``stop()`` for the run in progress; the stages read it. Cleared when a run starts
    /// from ``Lifecycle/idle``.
    let stopping = StopFlag()
    private let lifecycle = Mutex(Lifecycle.idle)
    /// The source being read, so that ``stop()`` can cancel its waits.
    let activeSource = SourceBox()
    /// The store being written, so that ``stop()`` can interrupt a statement that does not end.
    private let activeStore = StoreBox()
    /// The logger of the run in progress (with `pipeline` and `run_id`), for ``stop()``'s line.
    private let runLogger = Mutex<Logger?>(nil)
    /// Where the run's metrics go, if anywhere (`--metrics-file`, `--metrics-port`).
    package let metrics: RunMetrics?

    /// A runner of `config` with `options`, logging to `logger`.
    public convenience init(config: PipelineConfig, options: RunOptions = RunOptions(), logger: Logger) {
        self.init(config: config, options: options, logger: logger, metrics: nil)
    }

    /// The same, recording `metrics` (updated at each progress tick and at the end).
    package init(config: PipelineConfig, options: RunOptions = RunOptions(), logger: Logger, metrics: RunMetrics?) {
        self.config = config
        self.options = options
        self.logger = logger
        self.metrics = metrics
    }

    /// The database as logs show it: a URL without its password.
    var shownDatabase: String { StoreLocation.redacted(options.databasePath) }

    /// The largest page this run accepts: the options', else the pipeline's, else 64 MiB.
    public var maxPageBytes: Int { options.maxPageBytes ?? config.maxPageBytes ?? RunOptions.defaultMaxPageBytes }

    /// Counters of the run so far (committed batches only).
    public var counters: RunCounters { shared.value.withLock { $0 } }

    /// Asks the run to stop reading: in-flight pages are still applied and committed. A source
    /// waiting to retry gives up at once.
    ///
    /// A stop that comes before the run starts (a signal during start-up) makes that run end at
    /// once, interrupted; the runner is then ready for another run.
    public func stop() {
        let first = lifecycle.withLock { state in
            switch state {
            case .idle:
                state = .stopRequested
                return true
            case .running:
                state = .stopping
                return true
            case .stopRequested, .stopping:
                return false
            }
        }
        stopping.value.withLock { $0 = true }
        if first {
            var line = runLogger.withLock { $0 } ?? logger
            line[metadataKey: LogKey.pipeline] = "\(config.name)"
            line.notice("run.stopping")
        }
        activeSource.value.withLock { $0 }?.cancel()
        // Batches in flight commit; a database that has not answered a second later never
        // will in time: its statement is interrupted (the transaction rolls back, `--resume`
        // redoes it) and the run ends as interrupted, within 2 s of the signal.
        let store = activeStore
        DispatchQueue.global().asyncAfter(deadline: .now() + PipelineRunner.storeGrace) {
            store.value.withLock { $0 }?.interrupt()
        }
    }

    /// How long a stopped run waits for a statement in flight before it interrupts it.
    static let storeGrace: Double = 1

    /// Where a runner is in its life. One run at a time: a ``run(source:)`` while another runs
    /// is refused (a failed summary saying so); once a run ends the runner is `idle` again and a
    /// next run works.
    enum Lifecycle: Sendable {
        /// No run in progress.
        case idle
        /// ``stop()`` came before the next run started: that run ends at once, interrupted.
        case stopRequested
        case running
        /// The run in progress was asked to stop.
        case stopping
    }

    /// The summary of a run refused because this runner is running another: nothing was done.
    private func refused(_ started: Date) -> RunSummary {
        let message = "this runner is already running pipeline \(config.name): one run at a time per runner (make another runner)"
        var logger = self.logger
        logger[metadataKey: LogKey.pipeline] = "\(config.name)"
        logger.error("run.refused", metadata: [LogKey.reason: "\(message)"])
        var summary = RunSummary(
            runID: "-", pipeline: config.name, status: .failed, counters: RunCounters(), duration: Date().timeIntervalSince(started),
            error: message)
        summary.failureKind = .configuration
        return summary
    }

    /// Runs the pipeline over `source` to the end (or until ``stop()``) into the database
    /// ``RunOptions/databasePath`` names (see ``StoreLocation``), and returns its summary. Blocks
    /// the caller.
    public func run(source: any PageSource) -> RunSummary {
        run(source: source, store: nil)
    }

    /// Runs the pipeline over `source` into `store`, a backend of the caller's (opened with the
    /// pipeline's model; the run closes it). No run lock is taken: the store is the caller's.
    public func run(source: any PageSource, store: any IngestStore) -> RunSummary {
        run(source: source, store: .some(store))
    }

    private func run(source: any PageSource, store given: (any IngestStore)?) -> RunSummary {
        let started = Date()
        guard beginRun() else { return refused(started) }
        defer { lifecycle.withLock { $0 = .idle } }
        activeSource.value.withLock { $0 = source }
        defer { activeSource.value.withLock { $0 = nil } }
        let opened: OpenedStore
        do {
            opened = try openStore(given: given, source: source)
        } catch {
            return failedToStart(error, started: started)
        }
        let store = opened.store
        logOpened(store)
        activeStore.value.withLock { $0 = store }
        defer { activeStore.value.withLock { $0 = nil } }
        var part: RunPart
        do {
            part = try takePart(store: store, source: source, started: started, plan: opened.plan)
        } catch {
            try? store.close()
            return failedToStart(error, started: started)
        }
        let runID = part.joined?.runID ?? part.resumed?.runID ?? options.runID ?? PipelineRunner.makeRunID(started)
        var logger = self.logger
        logger[metadataKey: LogKey.pipeline] = "\(config.name)"
        logger[metadataKey: LogKey.runID] = "\(runID)"
        if let joined = part.joined { logger[metadataKey: "job"] = "\(joined.run.job)" }
        // A refresh (PipelineRunner+Refresh.swift): the last run's prints, read before this run's
        // start forgets them. A joined or resumed run sees only part of the pages: it keeps none.
        // Conditional requests: the last finished run's answers, before the refresh's listing
        // fetches anything (a joined job keeps none: it makes part of the requests).
        let answers = part.joined == nil ? reuseAnswers(source: part.source, store: store, logger: logger) : nil
        let refresh = part.joined == nil && part.resumed == nil ? prepareRefresh(source: part.source, store: store, logger: logger) : nil
        // A refresh over HTTP reads its source whole first, to list it (PrefetchedPageSource).
        if let prefetched = refresh?.listing as? PrefetchedPageSource {
            part.source = prefetched
            activeSource.value.withLock { $0 = prefetched }
        }
        let context = RunContext(
            runID: runID, started: started, logger: logger, store: store, part: part, refresh: refresh, answers: answers,
            plan: opened.plan)
        if let joined = part.joined, let over = announce(joined, context) { return over }
        part.source.useLogger(logger)
        if let metrics { (part.source as? any FetchReporting)?.useMetrics(metrics) }
        runLogger.withLock { $0 = logger }
        defer { runLogger.withLock { $0 = nil } }
        let archive: ArchiveStage?
        do {
            archive = try beginRecording(context)
        } catch {
            part.joined?.source.close()
            try? store.close()
            logger.error("run.failed", metadata: [LogKey.error: "\(error)", LogKey.database: "\(shownDatabase)"])
            return summary(context, .failed, RunCounters(), error)
        }
        let writer = runStages(context, archive: archive)
        return finish(context, writer: writer, archive: archive)
    }

    /// What opening `store` did that a reader of the log should know: a schema migrated, a
    /// staged load declined.
    private func logOpened(_ store: any IngestStore) {
        if !store.migration.isEmpty {
            logger.notice(
                "schema.migrated",
                metadata: ["statements": .int(store.migration.count), "added": "\(PipelineRunner.added(by: store.migration))"])
        }
        if case .declined(let reason) = store.loadState { logger.notice("bulk.declined", metadata: [LogKey.reason: "\(reason)"]) }
    }

    /// Moves the runner's life to running (or stopping, when a stop came first); `false` when a
    /// run is already going.
    private func beginRun() -> Bool {
        lifecycle.withLock { state in
            switch state {
            case .idle:
                state = .running
                stopping.value.withLock { $0 = false }
                return true
            case .stopRequested:
                state = .stopping
                return true
            case .running, .stopping:
                return false
            }
        }
    }

    /// Whether a finished run's rejects passed a limit (the options', else the pipeline's), or,
    /// with no limit set, whether it rejected everything it read; logs why.
    func rejectLimitExceeded(_ c: RunCounters, logger: Logger) -> String? {
        let rejects = c.rejectedRecords + c.rejectedPages
        let read = c.records + c.rejectedPages
        if c.pages == 0 {
            // A joined job may find every page taken by the others: that is not an empty source.
            if options.join == nil { logger.warning("run.empty", metadata: [LogKey.reason: "the source yielded no page"]) }
            return nil
        }
        var exceeded: String?
        let maxRejects = options.maxRejects ?? config.maxRejects
        let maxRatio = options.maxRejectRatio ?? config.maxRejectRatio
        if let maxRejects, rejects > maxRejects {
            exceeded = "\(rejects) rejects, over max_rejects \(maxRejects)"
        } else if let maxRatio, read > 0, Double(rejects) / Double(read) > maxRatio {
            exceeded = "\(rejects) of \(read) rejected, over max_reject_ratio \(maxRatio)"
        } else if maxRejects == nil, maxRatio == nil, rejects > 0, c.records - c.rejectedRecords == 0 {
            exceeded = "every page or record read was rejected (\(rejects) rejects): the run saw nothing usable"
        }
        if let exceeded { logger.error("run.rejects_over_limit", metadata: [LogKey.reason: "\(exceeded)"]) }
        return exceeded
    }

    func makeArchive(runID: String, started: Date) throws -> ArchiveStage? {
        let stage = try makeArchiveWriter(runID: runID, started: started).map(ArchiveStage.init)
        if config.hasSeveralResources { stage?.resourceNames = config.resources.map(\.name) }
        return stage
    }

    /// A new archive file for run `runID` in ``RunOptions/archiveDirectory`` (`nil`: no archive).
    func makeArchiveWriter(runID: String, started: Date) throws -> ArchiveWriter? {
        guard let directory = options.archiveDirectory else { return nil }
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        } catch {
            throw ArchiveError(path: directory, message: "cannot create the archive directory: \(error.localizedDescription)")
        }
        var path = (directory as NSString).appendingPathComponent("\(config.name)-\(runID).ingot")
        var part = 2
        while FileManager.default.fileExists(atPath: path) {
            // A resumed run archives its pages into a file of their own.
            path = (directory as NSString).appendingPathComponent("\(config.name)-\(runID)-\(part).ingot")
            part += 1
        }
        let header = ArchiveHeader(
            formatVersion: ArchiveFormat.version, runID: runID, pipelineName: config.name, pipelineText: config.text,
            pipelinePath: config.path, createdAt: started.runTimestamp, maxPageBytes: maxPageBytes)
        return try ArchiveWriter(path: path, header: header, compressionLevel: options.compressionLevel)
    }

    // MARK: - Progress and summary

    /// Progress lines and metrics updates every `progressInterval` seconds (metrics every 5 s
    /// when progress lines are off).
    func startProgress(
        logger: Logger, started: Date, flow: PageFlow, archive: ArchiveStage?
    ) -> (timer: any RunTimer, queue: DispatchQueue)? {
        guard options.progressInterval > 0 || metrics != nil else { return nil }
        let queue = DispatchQueue(label: "ingot.progress")
        let interval = options.progressInterval > 0 ? options.progressInterval : 5
        let logs = options.progressInterval > 0
        let timer = options.timers.every(interval, on: queue) { [shared, metrics] in
            let c = shared.value.withLock { $0 }
            if let metrics { self.updateMetrics(metrics, c, flow: flow, archive: archive, started: started, logger: logger) }
            guard logs else { return }
            let elapsed = Date().timeIntervalSince(started)
            let (read, decoded) = flow.counts.withLock { ($0.read, $0.decoded) }
            logger.info(
                "run.progress",
                metadata: [
                    "pages_read": .int(read), "pages_decoded": .int(decoded),
                    LogKey.pages: .int(c.pages), LogKey.records: .int(c.records),
                    LogKey.recordsPerSecond: .int(Int(Double(c.records) / max(elapsed, 0.001))),
                    LogKey.rejectedRecords: .int(c.rejectedRecords), LogKey.rejectedPages: .int(c.rejectedPages),
                    LogKey.elapsed: .seconds(elapsed),
                ])
        }
        return (timer, queue)
    }

    func updateMetrics(
        _ metrics: RunMetrics, _ counters: RunCounters, flow: PageFlow, archive: ArchiveStage?, started: Date, logger: Logger
    ) {
        var snapshot = RunMetrics.Snapshot(counters: counters)
        (snapshot.pagesRead, snapshot.bytesRead) = flow.counts.withLock { ($0.read, $0.bytesRead) }
        snapshot.bytesArchived = archive?.bytesWritten
        snapshot.elapsed = Date().timeIntervalSince(started)
        if let problem = metrics.update(snapshot) {
            logger.warning("metrics.failed", metadata: [LogKey.reason: "\(problem)"])
        }
    }

    /// What DDL statements add, shortly: `person.nickname` (a column), `film_characters` (a
    /// table), `index person_films_film_id`.
    static func added(by statements: [String]) -> String {
        statements.map { sql in
            let words = sql.split(separator: " ").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\"(;")) }
            if sql.hasPrefix("ALTER TABLE"), let table = words[safe: 2],
                let column = words.firstIndex(of: "COLUMN").flatMap({ words[safe: $0 + 1] })
            {
                return table + "." + (column == "IF" ? words[safe: (words.firstIndex(of: "EXISTS") ?? 0) + 1] ?? "" : column)
            }
            if sql.hasPrefix("ALTER TABLE"), words[safe: 4] == "CONSTRAINT", let name = words[safe: 5] { return "constraint " + name }
            if sql.hasPrefix("CREATE TABLE") { return words.drop { $0 != "EXISTS" }.dropFirst().first ?? "" }
            if sql.hasPrefix("CREATE TRIGGER") { return "trigger " + (words.drop { $0 != "EXISTS" }.dropFirst().first ?? "") }
            if sql.hasPrefix("CREATE OR REPLACE FUNCTION") { return "trigger " + (words[safe: 4] ?? "") }
            return "index " + (words.drop { $0 != "EXISTS" }.dropFirst().first ?? "")
        }.joined(separator: ",")
    }

    static func logSummary(_ s: RunSummary, _ logger: Logger) {
        let c = s.counters
        var metadata: Logger.Metadata = [
            LogKey.status: "\(s.status.rawValue)", LogKey.pages: .int(c.pages), LogKey.records: .int(c.records),
            LogKey.inserted: .int(c.inserted), LogKey.updated: .int(c.updated), "unchanged": .int(c.unchanged),
            LogKey.rejectedRecords: .int(c.rejectedRecords), LogKey.rejectedPages: .int(c.rejectedPages),
            LogKey.bytes: .int(c.bytes), LogKey.recordsPerSecond: .int(Int(Double(c.records) / max(s.duration, 0.001))),
            LogKey.duration: .seconds(s.duration),
        ]
        if c.deleted > 0 { metadata[LogKey.deleted] = .int(c.deleted) }
        if c.unchangedPages > 0 { metadata["pages_unchanged"] = .int(c.unchangedPages) }
        if c.notModifiedPages > 0 { metadata["pages_not_modified"] = .int(c.notModifiedPages) }
        if c.skippedRecords > 0 { metadata["skipped_records"] = .int(c.skippedRecords) }
        for (name, pages) in c.resourcePages { metadata["resource.\(name).pages"] = .int(pages) }
        for (attribute, n) in c.invalidValues { metadata["invalid.\(attribute)"] = .int(n) }
        for (name, records) in c.resourceRecords { metadata["resource.\(name).records"] = .int(records) }
        for (name, e) in c.entities {
            metadata["\(name).inserted"] = .int(e.inserted)
            metadata["\(name).updated"] = .int(e.updated)
            metadata["\(name).unchanged"] = .int(e.unchanged)
            metadata["\(name).stubs"] = .int(e.stubs)
            metadata["\(name).rejected"] = .int(e.rejected)
            if let unfilled = e.unfilled { metadata["\(name).stubs_unfilled"] = .int(unfilled) }
        }
        for (code, count) in c.rejectsByReason { metadata["rejects.\(code)"] = .int(count) }
        if let archive = s.archive { metadata[LogKey.archive] = "\(archive)" }
        if let load = s.load { metadata["load"] = "\(load)" }
        metadata.merge(s.loadOutcome?.logFields ?? [:]) { _, outcome in outcome }
        if let error = s.error { metadata[LogKey.error] = "\(error)" }
        if let kind = s.failureKind { metadata["failure"] = "\(kind.rawValue)" }
        if let limit = s.limitExceeded { metadata["limit_exceeded"] = "\(limit)" }
        // Log lines stderr refused (a full disk, a dead pipe), counted once the stream took lines again.
        if StandardStream.droppedLines > 0 { metadata["log_dropped"] = .int(StandardStream.droppedLines) }
        logger.log(level: s.status == .failed ? .error : .info, "run.summary", metadata: metadata)
    }

    /// `20261123T004001Z-5e6fccb9`: the start time and eight hex digits (leading zeros kept, so
    /// that every run id has the same length).
    static func makeRunID(_ date: Date, suffix: UInt32 = UInt32.random(in: 0...UInt32.max)) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "UTC")
        f.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        let hex = String(suffix, radix: 16)
        return f.string(from: date) + "-" + String(repeating: "0", count: 8 - hex.count) + hex
    }
}

/// Pages read by the source and decoded by the lanes so far, for progress lines (committed
/// pages are in the run's counters).
final class PageFlow: Sendable {
    let counts = Mutex<(read: Int, decoded: Int, bytesRead: Int)>((0, 0, 0))
}

/// Why the source stopped.
enum SourceEnd: Sendable {
    /// It had no more pages: the run saw the whole source.
    case exhausted
    /// ``PipelineRunner/stop()`` was called (a signal): what was read is saved, the run is incomplete.
    case interrupted
    /// It failed: what was read is saved, then the run fails.
    case failed(any Error)
}

/// The run's source, reachable from ``PipelineRunner/stop()`` on any queue.
final class SourceBox: Sendable {
    let value = Mutex<(any PageSource)?>(nil)
}

/// The store of the run in progress, for ``PipelineRunner/stop()``.
final class StoreBox: Sendable {
    let value = Mutex<(any IngestStore)?>(nil)
}
