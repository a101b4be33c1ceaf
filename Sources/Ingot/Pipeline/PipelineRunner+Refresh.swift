import Foundation
import Logging

/// Refreshes: a run over a directory of pages keeps a print of each page (its digest and the rows
/// it touched), and the next run into the same database leaves out the pages that cannot change
/// anything (``RefreshPlan``). docs/pipelines.md, "Refreshes", says when.
extension PipelineRunner {
    /// A run that keeps prints: where, under which fingerprint, and the last run's prints (when
    /// they stand and the run may leave pages out).
    struct Refresh {
        let keeper: any PrintKeeping
        let fingerprint: String
        let previous: PreviousPrints?
        /// What lists the pages: the source itself (a directory), or, for a refresh over HTTP,
        /// the source read whole first (``PrefetchedPageSource``: the run reads it instead).
        let listing: (any ListingPageSource)?
    }

    /// Why runs of `config` keep no prints and leave no page out; `nil` when they may. A page can
    /// be left out only where applying a run twice is applying it once: merge writes, rows with
    /// an identity, and no rule that depends on what was stored when a record came.
    package static func refreshObstacle(_ config: PipelineConfig) -> String? {
        if config.text.isEmpty { return "the pipeline has no file to fingerprint" }
        if config.incremental != nil { return "an incremental pipeline reads only what is new" }
        if case .http(let http) = config.source, http.syncURL != nil { return "a sync pipeline reads only what changed" }
        if config.resources.contains(where: { $0.deleteWhen != nil }) {
            return "tombstones (delete_when) delete rows a later page may make again"
        }
        if config.hasSeveralResources { return "a pipeline with several resources" }
        for resource in config.resources where (resource.write ?? config.write) != .merge {
            return "write: \((resource.write ?? config.write).rawValue)"
        }
        for entity in config.model.entities {
            if entity.identity.isEmpty { return "entity \(entity.name) has no identity: each run inserts its rows again" }
            for relationship in entity.relationships {
                if !relationship.insertsTargets || !relationship.updatesTargets {
                    return "\(entity.name).\(relationship.name) has operations: what it writes depends on what is stored"
                }
                if relationship.missing == .ignore {
                    return "\(entity.name).\(relationship.name) has missing: ignore: a link left out may be made by a rerun"
                }
            }
        }
        return nil
    }

    /// The prints' fingerprint: the pipeline file's exact text, and the version of the rules
    /// that make a footprint (a change to either makes the next run read every page).
    static func printFingerprint(_ config: PipelineConfig) -> String {
        "prints-1:sha256:" + SHA256.hex(config.text.utf8)
    }

    /// Each entity's hierarchy root (a child entity's rows are its parent's rows).
    static func hierarchyRoots(_ model: EntityModel) -> [Int] {
        model.entities.indices.map { k in
            var root = k
            var seen: Set<Int> = [k]
            while let name = model.entities[root].parent, let parent = model.index(of: name), seen.insert(parent).inserted {
                root = parent
            }
            return root
        }
    }

    /// The refresh of a run over `source` into `store`, read before the run begins (its start
    /// forgets the prints): `nil` when the run keeps no prints (a source other than a directory or
    /// HTTP, a store that keeps none, a pipeline ``refreshObstacle(_:)`` names).
    func prepareRefresh(source: any PageSource, store: any IngestStore, logger: Logger) -> Refresh? {
        guard let keeper = store as? any PrintKeeping else { return nil }
        // What the pipeline itself rules out first (the dry run names the same reason).
        if let obstacle = PipelineRunner.refreshObstacle(config) {
            logger.debug("refresh.off", metadata: [LogKey.reason: "\(obstacle)"])
            return nil
        }
        guard source is any ListingPageSource || source is HTTPPageSource else {
            logger.debug("refresh.off", metadata: [LogKey.reason: "the source is neither a directory nor HTTP"])
            return nil
        }
        let fingerprint = PipelineRunner.printFingerprint(config)
        var previous: PreviousPrints?
        if !options.fullRefresh {
            do {
                previous = try keeper.previousPrints(pipeline: config.name, fingerprint: fingerprint)
            } catch {
                logger.warning("refresh.unreadable", metadata: [LogKey.error: "\(error)"])
            }
        }
        var listing = source as? any ListingPageSource
        if listing == nil && previous != nil {
            do {
                listing = try PrefetchedPageSource(source, stopping: stopping)
            } catch {
                logger.warning("refresh.unreadable", metadata: [LogKey.error: "\(error)"])
            }
        }
        return Refresh(keeper: keeper, fingerprint: fingerprint, previous: previous, listing: listing)
    }

    /// The plan that leaves pages out, from the source's listing and the last run's prints;
    /// logs `refresh.planned`. `nil` when there are no prints to compare with.
    func makePlan(_ refresh: Refresh?, logger: Logger) -> RefreshPlan? {
        guard let refresh, let previous = refresh.previous, let listing = refresh.listing else { return nil }
        let listed: [[UInt8]]
        do {
            listed = try listing.pageDigests()
        } catch {
            // The run reads the pages anyway, and fails on the one it cannot read.
            logger.warning("refresh.unreadable", metadata: [LogKey.error: "\(error)"])
            return nil
        }
        // A page is applied whole or not at all where one row's write reaches rows its record does
        // not name: owned children (replaced with their owner), and inverse relationships (a set
        // replaced on one side unlinks rows on the other).
        let owns = EntityLayout.layouts(of: config.model).contains { layout in
            layout.toMany.contains { $0.isOwned || $0.isInverse || $0.isForeignKey }
                || config.model.entities[layout.entity].relationships.contains { $0.inverse != nil }
        }
        let plan: RefreshPlan
        do {
            plan = try RefreshPlan(
                previous: previous, listed: listed, roots: PipelineRunner.hierarchyRoots(config.model), appliesInPart: !owns)
        } catch {
            logger.warning("refresh.unreadable", metadata: [LogKey.error: "\(error)"])
            return nil
        }
        logger.info(
            "refresh.planned",
            metadata: [
                "last_run": "\(previous.runID)", "pages_same": .int(plan.samePages), "pages_changed": .int(plan.changedPages),
            ])
        return plan
    }

    /// After a finished run: keeps its pages' prints for the next run (a failure to keep them
    /// only makes the next run read every page).
    func keepPrints(_ refresh: Refresh?, writer: WriterStage, runID: String, logger: Logger) {
        guard let refresh else { return }
        guard let prints = writer.prints.spool else {
            logger.notice("refresh.not_kept", metadata: [LogKey.reason: "\(writer.prints.dropped ?? "the run kept no prints")"])
            return
        }
        do {
            if !(try refresh.keeper.savePrints(prints, runID: runID, pipeline: config.name, fingerprint: refresh.fingerprint)) {
                logger.notice(
                    "refresh.not_kept",
                    metadata: [LogKey.reason: "another run began or ended while this one ran: the next run reads every page"])
            }
        } catch {
            logger.warning("refresh.not_kept", metadata: [LogKey.error: "\(error)"])
        }
    }
}

extension PipelineRunner {
    /// Conditional requests (docs/pipelines.md, "Conditional requests"): what the last finished
    /// run of the pipeline kept of its HTTP answers, given to `source` before its first request;
    /// `nil` when the source does not fetch or the store keeps no answers. A kept answer that
    /// cannot be read only means asking again, unconditionally; `--full-refresh` asks nothing
    /// conditionally (and keeps this run's answers for the next).
    func reuseAnswers(source: any PageSource, store: any IngestStore, logger: Logger) -> KeptAnswers? {
        guard let reusing = source as? any AnswerReusing, let keeper = store as? any AnswerKeeping else { return nil }
        do {
            let answers = options.fullRefresh ? KeptAnswers(previous: [:]) { _ in nil } : try keeper.keptAnswers(pipeline: config.name)
            reusing.reuseAnswers(answers)
            return answers
        } catch {
            logger.warning("http.answers_unreadable", metadata: [LogKey.error: "\(error)"])
            return nil
        }
    }

    /// After a finished run: keeps its answers for the next run's conditional requests (a failure
    /// only makes the next run ask unconditionally).
    func keepAnswers(_ answers: KeptAnswers?, store: any IngestStore, logger: Logger) {
        guard let answers, let keeper = store as? any AnswerKeeping else { return }
        do {
            try keeper.keepAnswers(answers, pipeline: config.name)
        } catch {
            logger.warning("http.answers_not_kept", metadata: [LogKey.error: "\(error)"])
        }
    }
}

extension DecodedPage {
    /// A page a refresh leaves out: no records, the last run's rows and record count.
    static func leftOut(_ page: Page, print: PagePrint) -> DecodedPage {
        var decoded = DecodedPage(
            seq: page.seq, source: page.source, bytes: 0, pageBytes: page.bytes.count, records: [], rejections: [],
            pageRejected: false, recordCount: print.records)
        decoded.leftOut = true
        // Kept encoded (a few bytes a row) until the writer counts its rows.
        decoded.encodedFootprint = print.footprint
        decoded.digest = print.digest
        decoded.resumeState = page.resumeState
        decoded.archive = page.archive
        return decoded
    }
}
