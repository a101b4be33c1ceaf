import Foundation
import Logging

/// A job's part in a run shared by several jobs (`--join NAME`, docs/scale-out.md): what the
/// runner does differently. The stages are the same; the source is the run's work queue, each
/// unit (a page) is one transaction, and the job that commits last finishes the run.
struct JoinedPart {
    let run: any SharedRun
    let source: SharedRunSource

    var runID: String { run.runID }
}

extension PipelineRunner {
    /// Checks that the pipeline can run joined into `store`, takes the pipeline's run lock shared
    /// with the other jobs, and joins (or creates) the run `name`. Refused before anything is
    /// written: a store that cannot share runs (SQLite), `--resume`. A pipeline whose outcome
    /// depends on page order commits its units in order (``joinOrder(_:)``).
    func join(_ name: String, store: any IngestStore, source: any PageSource, started: Date, plan: LoadPlan) throws -> JoinedPart {
        let answers = SharedRequests.mayEndTheSource(config) ? .units : plan.answerOrder
        if let refusal = Self.joinRefusal(config, options, sharesRuns: store is any SharedRunStore) {
            throw StoreError.unsupported(refusal)
        }
        guard let shared = store as? any SharedRunStore else { throw StoreError.unsupported("--join: \(shownDatabase)") }
        var request = SharedRunRequest(
            name: name, pipeline: config.name, proposedRunID: options.runID ?? PipelineRunner.makeRunID(started), startedAt: started,
            lease: options.lease, lockTimeout: options.lockTimeout, spec: joinSpec(source: source, plan: plan))
        request.commitsInOrder = PipelineRunner.joinOrder(config) != .anyOrder
        request.marksTouchedRows = !config.replacedEntities.isEmpty
        request.recordsPath = config.recordsPath.joined(separator: ".")
        let run = try shared.joinRun(request)
        // Requests known in advance (a for_each answered by one page each, numbered pages) are
        // made by the jobs that claim them, not by the fetcher.
        let resources = source as? ResourcesPageSource
        resources?.defersRequests = true
        if let http = source as? HTTPPageSource, SharedRequests.defersPages(of: http.config, in: config) { http.defersNumberedPages = true }
        // Files are read by the jobs that claim them: the work queue carries their names, not
        // their bytes (docs/scale-out.md, "Pages any job reads").
        let files = source as? DirectoryPageSource
        files?.defersReading = true
        // A wait a server asks of the fetcher's own requests (a first page, next URLs) is asked
        // of every job too, as a job's request's is.
        let pause: @Sendable (Double) -> Void = { seconds in try? run.pauseRequests(for: seconds) }
        (source as? HTTPPageSource)?.onServerDelay = pause
        resources?.onServerDelay = pause
        let requests =
            resources?.requests
            ?? SharedRequests(
                config: config, environment: (source as? HTTPPageSource)?.environment ?? [:], maxPageBytes: maxPageBytes,
                files: files?.shared)
        return JoinedPart(
            run: run,
            source: SharedRunSource(
                run: run, upstream: source, maxPageBytes: maxPageBytes, timers: options.timers, requests: requests, answers: answers,
                turns: options.claimTurns))
    }

    /// Why this job cannot join a run (`--join`), or `nil`: a database several jobs cannot share
    /// (`sharesRuns`: its backend's ``LoadCapabilities/sharesRuns``, or the store given to the
    /// run's kind), or `--resume`. Asked before the store opens, and by `--dry-run`, which prints
    /// the refusal the run would meet.
    package static func joinRefusal(_ config: PipelineConfig, _ options: RunOptions, sharesRuns: Bool) -> String? {
        guard options.join != nil else { return nil }
        if !sharesRuns {
            let shown = StoreLocation.redacted(options.databasePath)
            return "--join needs a database that several jobs can share (PostgreSQL: --db postgresql://…); \(shown) is not one"
        }
        if options.resume { return "--join and --resume cannot be combined: join the run again with the same name to continue it" }
        return nil
    }

    /// Whether the jobs of a joined run of `config` may commit units in any order, or must
    /// commit them in the run's order — and why: a pipeline whose outcome depends on which page
    /// was written first (docs/scale-out.md, "Units committed in order").
    package static func joinOrder(_ config: PipelineConfig) -> JoinOrder {
        let entities = config.model.entities
        var reasons: [String] = []
        let inverse = entities.flatMap { e in e.relationships.filter { $0.inverse != nil }.map { "\(e.name).\($0.name)" } }
        if !inverse.isEmpty {
            reasons.append(
                "a relationship read from both sides takes its links from whichever side came last (inverse: \(inverse.joined(separator: ", ")))"
            )
        }
        let missing = entities.flatMap { entity in
            entity.relationships.filter { $0.missing != .stub }.map { "\(entity.name).\($0.name) (missing: \($0.missing.rawValue))" }
        }
        if !missing.isEmpty {
            reasons.append(
                "whether a target exists when a page is written depends on the pages before it (\(missing.joined(separator: ", ")))")
        }
        if config.resources.contains(where: { $0.deleteWhen != nil }) {
            reasons.append("a tombstone deletes its row where it stands in the feed (delete_when), and a later page may make it again")
        }
        let modes = [config.write] + config.resources.compactMap(\.write)
        if let mode = modes.first(where: { $0 == .insertOnly || $0 == .updateOnly }) {
            reasons.append("write: \(mode.rawValue) skips a record by whether its row is stored when its page is written")
        }
        return reasons.isEmpty ? .anyOrder : .inOrder(reasons: reasons)
    }

    /// What decides a joined run's result, as a job runs it: the pipeline file's text (its
    /// `${VAR}` unexpanded: only `source:` has any), the source it reads (secrets redacted), and
    /// every option that changes what is stored or accepted: the pages and records taken
    /// (`--max-page-bytes`, `--max-record-rows`), the resources read (`--resource`), the rejects
    /// kept and the bounds that fail the run (`--max-reject-rows`, `--max-rejects`,
    /// `--max-reject-ratio`, as given or as the file says), and whether the jobs exchange their
    /// rows to write them at the run's end or write them with positions at each commit (the
    /// plan: `--no-bulk` beside jobs that exchange would write rows the run's end then writes
    /// again, older). A job whose spec differs from the run's (a rolling update of the pipeline's
    /// ConfigMap, another `--max-record-rows`) is refused, exit 2, naming what differs: it would
    /// write the tables half one way, half the other. Options that change only how fast the same
    /// rows are written (lanes, batch and commit sizes) are not part of it. Secret values (a
    /// token, a tenant in a URL's path) are not either: no digest of a secret is stored in a
    /// database other jobs and people read.
    func joinSpec(source: any PageSource, plan: LoadPlan) -> [String: String] {
        [
            "rows": plan.defersJoinedBatches ? "exchanged, written when every unit is done" : "written at each commit",
            "pipeline": "sha256:" + SHA256.hex(config.text.utf8), "source": source.origin, "max_page_bytes": "\(maxPageBytes)",
            "max_record_rows": "\(options.maxRecordRows)",
            "resources": config.resources.map { $0.root == nil && $0.rootChoice == nil ? $0.name + " (read)" : $0.name }
                .joined(separator: ", "),
            "max_reject_rows": "\(options.maxRejectRows)",
            "max_rejects": (options.maxRejects ?? config.maxRejects).map(String.init) ?? "none",
            "max_reject_ratio": (options.maxRejectRatio ?? config.maxRejectRatio).map { "\($0)" } ?? "none",
        ]
    }

    /// Ends this job's part: records its status; when every unit is done, finishes the run (and
    /// logs `join.finished` with the run's counters, every job's summed). The job that finishes
    /// the run writes its archive (every page, in source order, into this job's archive
    /// directory) from the work queue, before the payloads are dropped.
    ///
    /// Returns what this job wrote ending the run (the parts of the run's exchanged rows it
    /// wrote, logged `join.merged`), to be counted as its own.
    func endJoinedPart(
        _ part: JoinedPart, status: RunStatus, counters: RunCounters, started: Date, logger: Logger
    ) throws -> RunCounters {
        part.source.close()
        var archivePath: String?
        var archiveWriter: ArchiveWriter?
        var entry = 0
        let archive: ((Page) throws -> [Page])? =
            options.archiveDirectory == nil
            ? nil
            : { [self] stored in
                // A unit's pages get increasing entry numbers: its own seq, or the next free one
                // after a unit of several pages (a paginated request's). Each page archived is
                // returned with its entry: the run's rejections name it.
                var archived: [Page] = []
                for var page in try part.source.archived(stored) where page.oversized == nil && page.unreadable == nil {
                    if archiveWriter == nil {
                        archiveWriter = try makeArchiveWriter(runID: part.runID, started: started)
                        archivePath = archiveWriter?.path
                    }
                    entry = max(entry + 1, page.seq)
                    try archiveWriter?.append(
                        page.bytes, seq: entry, source: page.source, resource: page.resourceName, injected: page.injected,
                        compression: page.compression)
                    page.bytes = []
                    page.archive = archivePath.map { ArchiveLocation(path: $0, entry: entry) }
                    archived.append(page)
                }
                return archived
            }
        let end = try part.run.endJob(
            status: status, counters: counters, replacing: config.replacedEntities, scopes: config.replaceScopes,
            maxPageBytes: maxPageBytes, archive: archive)
        try archiveWriter?.close()
        if let reason = end.replaceSkipped { logger.warning("replace.skipped", metadata: [LogKey.reason: "\(reason)"]) }
        if let seconds = end.mergeSeconds {
            var metadata: Logger.Metadata = [
                LogKey.inserted: .int(end.merged.inserted), LogKey.updated: .int(end.merged.updated),
                LogKey.duration: "\(String(format: "%.3f", seconds))",
            ]
            // Rows the server refused when the parts were written: each rejected as its record.
            if end.merged.rejectedRecords > 0 { metadata[LogKey.rejectedRecords] = .int(end.merged.rejectedRecords) }
            logger.notice("join.merged", metadata: metadata)
        }
        guard let total = end.finished else { return end.merged }
        var metadata: Logger.Metadata = [
            LogKey.pages: .int(total.pages), LogKey.records: .int(total.records), LogKey.inserted: .int(total.inserted),
            LogKey.updated: .int(total.updated), LogKey.rejectedRecords: .int(total.rejectedRecords),
            LogKey.rejectedPages: .int(total.rejectedPages),
        ]
        if total.deleted > 0 { metadata[LogKey.deleted] = .int(total.deleted) }
        if let archivePath { metadata[LogKey.archive] = "\(archivePath)" }
        logger.notice("join.finished", metadata: metadata)
        return end.merged
    }
}

/// In which order the jobs of a joined run commit its units (``PipelineRunner/joinOrder(_:)``).
package enum JoinOrder: Sendable, Equatable, CustomStringConvertible {
    /// Any: each unit's writes carry its position, and later pages win whatever job wrote first.
    case anyOrder
    /// The run's order, one unit after the other, for `reasons`: as exact as one job, as fast.
    case inOrder(reasons: [String])

    package var description: String {
        switch self {
        case .anyOrder: "units committed in any order, by the jobs side by side"
        case .inOrder(let reasons): "units committed in the run's order, one after the other: " + reasons.joined(separator: "; ")
        }
    }
}
