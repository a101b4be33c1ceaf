import Dispatch
import Foundation
import Logging
import Synchronization

/// The phases of one run, in order (``PipelineRunner/run(source:store:)``): open the store under
/// its load plan, take this job's part (the run lock, a shared run, a resume), announce it, begin
/// recording, run the stages, finish. Each phase that can fail before the run began returns the
/// error; the runner turns it into a failed (or interrupted) summary.
extension PipelineRunner {
    /// The store a run writes into (holding the pipeline's run lock until it is closed), with
    /// the plan it was opened under.
    struct OpenedStore {
        let store: any IngestStore
        let plan: LoadPlan
    }

    /// This job's part of the run: its pages, and the run it continues or shares.
    struct RunPart {
        var source: any PageSource
        var joined: JoinedPart?
        var resumed: UnfinishedRun?
    }

    /// What every phase after the start shares.
    struct RunContext {
        let runID: String
        let started: Date
        let logger: Logger
        let store: any IngestStore
        let part: RunPart
        let refresh: Refresh?
        /// What the last finished run kept of its HTTP answers, and this run's (conditional requests).
        let answers: KeptAnswers?
        /// The load plan the store was opened with.
        let plan: LoadPlan
        let flow = PageFlow()
    }

    /// Opens the store the options name under the run's load plan (a store given by the caller is
    /// checked against the model instead), waiting for another run holding the database.
    func openStore(given: (any IngestStore)?, source: any PageSource) throws -> OpenedStore {
        if let given {
            // Entities and columns travel by position: a store opened for another model would
            // write one entity's values into another's columns.
            guard given.layouts == EntityLayout.layouts(of: config.model) else {
                throw StoreError.conflict(
                    "the store given to the run was opened for another model than pipeline \(config.name)'s: its entity layouts differ")
            }
            return OpenedStore(store: given, plan: LoadPlan(mode: .given, capabilities: LoadPlan.batchByBatch.capabilities))
        }
        let location = try options.location.get()
        let run = RunPlan.make(config, options, fetching: source is any FetchReporting, backend: location.backend)
        // Refused before the database is opened (a SQLite file is not even made).
        if let refusal = run.joinRefusal { throw StoreError.unsupported(refusal) }
        let plan = run.load
        if case .refused(let reasons) = plan.mode {
            throw StoreError.conflict("--bulk cannot run this pipeline: \(reasons.joined(separator: "; "))")
        }
        // One run of the pipeline at a time (a joined job shares it with the run's other jobs):
        // the store waits for another run to finish, up to lockTimeout.
        let store = try location.open(
            model: config.model,
            options: StoreOpening(
                lockingRunsOf: config.name, joining: options.join != nil, lockTimeout: options.lockTimeout,
                statementObserver: options.statementObserver, plan: plan, resuming: options.resume, stopped: stopping))
        return OpenedStore(store: store, plan: plan)
    }

    /// Joins the shared run as `plan` says (its work queue becomes the source; its requests'
    /// answers handed out in the plan's order), then finds the run to resume and moves the
    /// source to where it continues.
    func takePart(store: any IngestStore, source: any PageSource, started: Date, plan: LoadPlan) throws -> RunPart {
        var part = RunPart(source: source)
        if let name = options.join {
            // A joined job reads the run's work queue instead (PipelineRunner+Join.swift).
            let joined = try join(name, store: store, source: source, started: started, plan: plan)
            part.joined = joined
            part.source = joined.source
            activeSource.value.withLock { $0 = joined.source }
        }
        if options.resume {
            part.resumed = try store.unfinishedRun(pipeline: config.name)
            if let state = part.resumed?.resumeState { try part.source.resume(from: state) }
        }
        return part
    }

    /// Logs the joined job's part; a summary when the shared run was over before it joined.
    func announce(_ joined: JoinedPart, _ context: RunContext) -> RunSummary? {
        let logger = context.logger
        logger.info(joined.run.created ? "join.created" : "join.joined", metadata: ["join": "\(joined.run.name)"])
        if let reason = joined.run.revived {
            logger.warning(
                "join.revived",
                metadata: ["join": "\(joined.run.name)", LogKey.reason: "the run had failed (\(reason)); this job takes it up again"])
        }
        guard joined.run.alreadyFinished else { return nil }
        // A job restarted after the run ended (or started late): nothing is left to do.
        joined.source.close()
        try? context.store.close()
        logger.notice("join.finished", metadata: [LogKey.reason: "the run was finished before this job joined it"])
        var s = RunSummary(
            runID: context.runID, pipeline: config.name, status: .finished, counters: RunCounters(),
            duration: Date().timeIntervalSince(context.started))
        s.load = context.plan.code
        PipelineRunner.logSummary(s, logger)
        return s
    }

    /// Opens the archive and records the run's start (or its resumption) in the store; logs
    /// `run.started` with the load plan.
    func beginRecording(_ context: RunContext) throws -> ArchiveStage? {
        let part = context.part
        // A joined run's pages are archived by the job that finishes it (PipelineRunner+Join.swift).
        let archive = part.joined == nil ? try makeArchive(runID: context.runID, started: context.started) : nil
        if let resumed = part.resumed {
            try context.store.beginRun(.resumed(id: resumed.runID, archive: archive?.path))
            context.logger.info(
                "run.resumed", metadata: [LogKey.seq: .int(resumed.lastSeq), "resume_state": "\(resumed.resumeState ?? "start")"])
        } else if part.joined == nil {
            try context.store.beginRun(
                .new(id: context.runID, pipeline: config.name, startedAt: context.started, archive: archive?.path))
        }
        var metadata: Logger.Metadata = [
            LogKey.database: "\(shownDatabase)", LogKey.lanes: .int(max(1, options.lanes)),
            LogKey.batchRecords: .int(options.shownBatchRecords(of: config)),
            LogKey.commitRecords: .int(options.commitRecords), "load": "\(context.plan.code)",
        ]
        if let bytes = context.plan.stageAfterBytes { metadata["stage_after_bytes"] = .int(bytes) }
        if let archive { metadata[LogKey.archive] = "\(archive.path)" }
        if let joined = part.joined { metadata["lease"] = .seconds(joined.run.lease) }
        if let port = metrics?.servingPort { metadata["metrics_port"] = .int(port) }
        context.logger.info("run.started", metadata: metadata)
        return archive
    }

    /// The stages, joined and run until the writer ends: source, archive, decode lanes,
    /// assembler, writer. Returns the writer, which holds the outcome.
    func runStages(_ context: RunContext, archive: ArchiveStage?) -> WriterStage {
        let (part, logger, refresh) = (context.part, context.logger, context.refresh)
        let plan = makePlan(refresh, logger: logger)
        let lanes = max(1, options.lanes)
        let budget = PageBudget(maxPages: options.pagesInFlight ?? lanes * 2 + 2, maxBytes: options.bytesInFlight)
        let done = DispatchSemaphore(value: 0)
        let firstSeq = (part.resumed?.lastSeq ?? 0) + 1
        let writer = WriterStage(
            store: context.store, config: config, runID: context.runID, options: options, logger: logger, shared: shared,
            initialCounters: part.resumed?.counters ?? RunCounters(), resumed: part.resumed != nil, metrics: metrics,
            archivePath: archive?.path, keepsPrints: refresh != nil, defersBatches: context.plan.defersJoinedBatches,
            stopSource: { [activeSource] in activeSource.value.withLock { $0 }?.cancel() }, finished: { done.signal() })
        let assembler = BatchAssembler(
            writer: writer,
            batchLimits: options.batchRecords(of: config),
            byteLimit: options.batchBytes, firstSeq: firstSeq, interval: options.commitInterval, timers: options.timers,
            pageConsumed: { budget.release($0) })
        assembler.refresh = plan
        part.joined?.source.whenIdle { assembler.queue.async { assembler.flush() } }
        let decode = makeDecodeLanes(
            count: lanes, assembler: assembler, logger: logger, flow: context.flow, keepsPrints: refresh != nil,
            // A plan needs every changed page's rows, prints kept or not.
            printsOff: plan == nil ? writer.printsOff : StopFlag())
        let progress = startProgress(logger: logger, started: context.started, flow: context.flow, archive: archive)
        startSource(
            part.source, firstSeq: firstSeq, budget: budget, flow: context.flow, archive: archive, writer: writer, assembler: assembler,
            keepsPrints: refresh != nil, refresh: plan, decode: decode)
        done.wait()
        if let progress {
            // A tick already running finishes before the summary (its line, its metrics file):
            // cancelling stops further ticks, and the sync waits out the one on the queue.
            progress.timer.cancel()
            progress.queue.sync {}
        }
        archive?.queue.sync { archive?.close() }
        return writer
    }

    /// Records how the run ended (or ends this job's part of a shared run), keeps a finished
    /// run's page prints, closes the store; the summary.
    func finish(_ context: RunContext, writer: WriterStage, archive: ArchiveStage?) -> RunSummary {
        var counters = writer.counters
        counters.notModifiedPages = context.answers?.notModified ?? 0
        var failure: (any Error)? = writer.failure
        if failure == nil, let archiveFailure = archive?.queue.sync(execute: { archive?.failure }) {
            failure = archiveFailure
        }
        let status: RunStatus = failure != nil ? .failed : writer.interrupted ? .interrupted : .finished
        if failure == nil, let unfilled = try? context.store.unfilledStubs() {
            for (entity, count) in unfilled {
                counters.entities[config.model.entities[entity].name, default: EntityCounts()].unfilled = count
            }
        }
        do {
            if let joined = context.part.joined {
                counters.add(
                    try endJoinedPart(
                        joined, status: failure != nil ? .failed : status, counters: counters, started: context.started,
                        logger: context.logger))
            } else {
                try context.store.finishRun(id: context.runID, status: status, counters: counters, finishedAt: Date())
                if status == .finished && failure == nil {
                    keepPrints(context.refresh, writer: writer, runID: context.runID, logger: context.logger)
                    keepAnswers(context.answers, store: context.store, logger: context.logger)
                }
            }
            try context.store.close()
        } catch {
            failure = failure ?? error
            counters = writer.counters
        }
        guard let failure else { return summary(context, status, counters, nil, archive: archive, loaded: writer.loaded) }
        if stopping.value.withLock({ $0 }) {
            // Stopped while the database did not answer: interrupted, not failed.
            context.logger.warning("run.interrupted_store", metadata: [LogKey.error: "\(failure)"])
            return summary(context, .interrupted, counters, nil, archive: archive, loaded: writer.loaded)
        }
        context.logger.error("run.failed", metadata: [LogKey.error: "\(failure)"])
        return summary(context, .failed, counters, failure, archive: archive, loaded: writer.loaded)
    }

    /// The run's summary, logged, with the metrics' last update.
    func summary(
        _ context: RunContext, _ status: RunStatus, _ counters: RunCounters, _ error: (any Error)?, archive: ArchiveStage? = nil,
        loaded: LoadOutcome? = nil
    ) -> RunSummary {
        var s = RunSummary(
            runID: context.runID, pipeline: config.name, status: status, counters: counters,
            duration: Date().timeIntervalSince(context.started), error: error.map { "\($0)" }, archive: archive?.path)
        s.failureKind = error.map(RunSummary.FailureKind.init)
        s.load = context.plan.code
        s.loaded = loaded.map { "\($0)" }
        s.loadOutcome = loaded
        if status == .finished { s.limitExceeded = rejectLimitExceeded(counters, logger: context.logger) }
        if let metrics {
            if status == .finished && s.limitExceeded == nil { metrics.succeeded() }
            updateMetrics(metrics, counters, flow: context.flow, archive: archive, started: context.started, logger: context.logger)
        }
        PipelineRunner.logSummary(s, context.logger)
        return s
    }

    /// A run that failed before it began: logged, summarised (interrupted when a stop came while
    /// it was connecting), and said in the metrics file (its last success time kept).
    func failedToStart(_ error: any Error, started: Date) -> RunSummary {
        var logger = self.logger
        logger[metadataKey: LogKey.pipeline] = "\(config.name)"
        logger.error("run.failed", metadata: [LogKey.error: "\(error)", LogKey.database: "\(shownDatabase)"])
        let stopped = stopping.value.withLock { $0 }
        var failed = RunSummary(
            runID: "-", pipeline: config.name, status: stopped ? .interrupted : .failed, counters: RunCounters(),
            duration: Date().timeIntervalSince(started), error: "\(error)")
        failed.failureKind = stopped ? nil : RunSummary.FailureKind(error)
        var snapshot = RunMetrics.Snapshot(counters: RunCounters())
        snapshot.elapsed = failed.duration
        if let problem = metrics?.update(snapshot) {
            logger.warning("metrics.failed", metadata: [LogKey.reason: "\(problem)"])
        }
        PipelineRunner.logSummary(failed, logger)
        return failed
    }
}
