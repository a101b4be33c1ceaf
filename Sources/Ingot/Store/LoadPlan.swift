import Foundation

/// How a run is asked to write its batches (`--bulk`, `--no-bulk`, `--bulk-after-mib`);
/// ``LoadPlan`` decides what runs.
public enum Loading: Sendable, Equatable {
    /// Batch by batch, going on staged where that costs less (the default): once the database
    /// holds `afterBytes` (`nil`: by the source, ``LoadPlan/defaultAfterBytes(fetching:)``), or
    /// from the first batch of a first load in no identity order into empty tables.
    case automatic(afterBytes: Int? = nil)
    /// Staged from the start (`--bulk`): batches are staged, then merged in identity order when
    /// the source is exhausted (docs/stores.md, "Staged loads").
    case staged
    /// Batch by batch throughout (`--no-bulk`): every batch visible at its commit.
    case batchByBatch
}

/// What a backend can do with a load (``StoreBackend/loadCapabilities``): the plan is decided
/// from these, never from which backend it is.
package struct LoadCapabilities: Sendable, Equatable {
    /// A running load turns staged once the database holds a number of bytes (SQLite: its file).
    package var turnsStagedBySize: Bool
    /// A staged load copies into empty tables only; into tables that hold rows it goes batch by
    /// batch (PostgreSQL's copy of the folded rows).
    package var stagesOnlyIntoEmptyTables: Bool
    /// Several jobs can share a run (`--join`), exchanging their rows through the run's parts.
    package var sharesRuns: Bool

    package init(turnsStagedBySize: Bool, stagesOnlyIntoEmptyTables: Bool, sharesRuns: Bool) {
        self.turnsStagedBySize = turnsStagedBySize
        self.stagesOnlyIntoEmptyTables = stagesOnlyIntoEmptyTables
        self.sharesRuns = sharesRuns
    }
}

/// How this run writes its batches, decided once before the store opens (``decide(_:)``): the
/// runner hands it to the store, `--dry-run` prints its ``description``, and `run.started` logs
/// it, so what a dry run says is what a run does (`LoadPlanTests`).
package struct LoadPlan: Sendable, Equatable, CustomStringConvertible {
    package enum Mode: Sendable, Equatable {
        /// `--bulk` on a pipeline a staged load cannot run: refused before anything is written.
        case refused([String])
        /// Staged from the start (`--bulk`).
        case staged
        /// Batch by batch, going on staged once the database holds `afterBytes` (where the backend
        /// turns by size), or from the first batch of a first load in no identity order into
        /// empty tables (`fromFirstBatch`).
        case automatic(afterBytes: Int, fromFirstBatch: Bool)
        /// Batch by batch throughout: asked (`--no-bulk`), or what keeps the load from staging.
        case batchByBatch(obstacles: [String])
        /// A job of a shared run (`--join`), writing as ``JoinedLoad`` says.
        case joined(JoinedLoad)
        /// The store given to the run, as its caller opened it.
        case given
    }

    /// How a job of a shared run writes its batches (docs/scale-out.md, "Writes deferred to the
    /// run's end").
    package enum JoinedLoad: Sendable, Equatable {
        /// Every batch written into the entities' tables with positions at its commit.
        case positions
        /// Exchanged, by default from local pages (a directory, an archive): every batch's rows
        /// go to the run's parts, written once every unit is done, part by part by the jobs
        /// (docs/scale-out.md, "Rows exchanged between jobs").
        case deferred
        /// Exchanged as asked (`--bulk`), from any source — pages that jobs fetch included.
        case deferredAsked

        /// Its rows exchanged (either way but ``positions``).
        var defers: Bool { self != .positions }
    }

    /// The fewest records of a first batch the writer offers the store to stage the load from
    /// (``stagesFirstBatch(records:inIdentityOrder:)``).
    package static let fewestFirstBatchRecords = 1000

    /// Whether the writer offers the store to stage the load from a first batch of `records`
    /// (``IngestStore/turnStaged(at:)``, ``StagingMoment/firstBatch``; the store decides whether it
    /// may, ``stagesFromFirstBatch``: a first load into empty tables): one of
    /// ``fewestFirstBatchRecords`` or more that came in no identity order — a small load's rows
    /// show up at each commit, and a load in identity order writes each batch straight in.
    package static func stagesFirstBatch(records: Int, inIdentityOrder: Bool) -> Bool {
        records >= fewestFirstBatchRecords && !inIdentityOrder
    }

    package var mode: Mode
    package var capabilities: LoadCapabilities

    /// What the plan is decided from.
    package struct Inputs: Sendable {
        package var loading: Loading
        /// The run is a job of a shared run (`--join`).
        package var joined: Bool
        /// The source fetches (HTTP, several resources) rather than reading local pages.
        package var fetching: Bool
        /// What decides per stored row (write modes other than merge): no staged load.
        package var writeObstacles: [String]
        /// What the model does that a staged load cannot (``StoreBackend/stagedLoadObstacles(_:)``).
        package var modelObstacles: [String]
        package var capabilities: LoadCapabilities

        package init(
            loading: Loading, joined: Bool, fetching: Bool, writeObstacles: [String], modelObstacles: [String],
            capabilities: LoadCapabilities
        ) {
            self.loading = loading
            self.joined = joined
            self.fetching = fetching
            self.writeObstacles = writeObstacles
            self.modelObstacles = modelObstacles
            self.capabilities = capabilities
        }
    }

    /// Batch by batch, as asked: what a store opened without a plan does (the library's).
    package static let batchByBatch = LoadPlan(
        mode: .batchByBatch(obstacles: []),
        capabilities: LoadCapabilities(turnsStagedBySize: false, stagesOnlyIntoEmptyTables: false, sharesRuns: false))

    package init(mode: Mode, capabilities: LoadCapabilities) {
        self.mode = mode
        self.capabilities = capabilities
    }

    /// Where a load turns staged by default: at 4 MiB from a source that reads local pages (a
    /// directory, an archive), at 40 MiB (the page cache's size) from one that fetches. Staged, a
    /// load costs less per record than batch by batch from a few megabytes on (people-200k 1.08
    /// against 1.33 s, 26 MiB less; docs/performance-notes.md), but its merge comes after the last page:
    /// a source slower than the writer (an API answering in 100 ms) hides the writes batch by
    /// batch behind its waits, and keeps each commit visible while it lasts.
    package static func defaultAfterBytes(fetching: Bool) -> Int { fetching ? 40 << 20 : 4 << 20 }

    /// The one decision.
    package static func decide(_ inputs: Inputs) -> LoadPlan {
        let obstacles = inputs.writeObstacles + inputs.modelObstacles
        let mode: Mode
        switch inputs.loading {
        case .staged where inputs.joined:
            mode = obstacles.isEmpty ? .joined(inputs.capabilities.sharesRuns ? .deferredAsked : .positions) : .refused(obstacles)
        case .staged:
            mode = obstacles.isEmpty ? .staged : .refused(obstacles)
        case .batchByBatch:
            // A joined job's batches go with positions: its store is a joined job's all the same.
            mode = inputs.joined ? .joined(.positions) : .batchByBatch(obstacles: [])
        case .automatic(let afterBytes):
            let fromFirstBatch = afterBytes == nil && !inputs.fetching && obstacles.isEmpty
            if inputs.joined {
                mode = .joined(fromFirstBatch && inputs.capabilities.sharesRuns ? .deferred : .positions)
            } else if !obstacles.isEmpty {
                mode = .batchByBatch(obstacles: obstacles)
            } else {
                mode = .automatic(
                    afterBytes: afterBytes ?? defaultAfterBytes(fetching: inputs.fetching), fromFirstBatch: fromFirstBatch)
            }
        }
        return LoadPlan(mode: mode, capabilities: inputs.capabilities)
    }

    /// A load staged from the start.
    package var stagesAtOpen: Bool { mode == .staged }

    /// The database size at which a running load turns staged; `nil`: never by size.
    package var stageAfterBytes: Int? {
        if case .automatic(let bytes, _) = mode, capabilities.turnsStagedBySize { return bytes }
        return nil
    }

    /// In which order a joined job hands out the answers of the requests it makes: in the order
    /// of its claims for a joined job asked to defer (`--bulk`), as long as its claims are in a
    /// row — its batches then hold consecutive units, which an exchanging job's batches must (a
    /// batch is cut where another job's unit lies between two of its own, BatchAssembler), so a
    /// lone job's batches stay whole — else as they come, so that a slow request holds no other.
    package var answerOrder: AnswerOrder {
        mode == .joined(.deferredAsked) ? .claimed : .asTheyCome
    }

    /// In which order a joined job hands out its requests' answers (``answerOrder``).
    package enum AnswerOrder: Sendable, Equatable {
        /// Each answer as soon as it came.
        case asTheyCome
        /// In the order of the requests' units while the job claims them in a row: a slow
        /// request holds the answers after it, as a single run's requests are read in order.
        case claimed
        /// In the order of the units, whatever the claims: a numbered page may end the source,
        /// and the job's own earlier pages must be settled before it (``SharedRun/settleEnd(of:)``).
        case units
    }

    /// A load into empty tables may stage from its first batch (``IngestStore/turnStaged(at:)``).
    package var stagesFromFirstBatch: Bool {
        switch mode {
        case .automatic(_, let first): first
        default: false
        }
    }

    /// A job of a run several jobs share (`--join`): its store opens the work queue's tables too.
    package var isJoined: Bool {
        if case .joined = mode { true } else { false }
    }

    /// A joined job's rows are exchanged between the jobs, written when every unit is done,
    /// instead of into the entities' tables with positions at each commit.
    package var defersJoinedBatches: Bool {
        if case .joined(let load) = mode { load.defers } else { false }
    }

    /// A staged load of an earlier attempt may go on staged when the run resumes it.
    package var mayStage: Bool {
        switch mode {
        case .staged, .automatic: true
        case .joined, .refused, .batchByBatch, .given: false
        }
    }

    /// As the logs say it (`run.started`'s and `run.summary`'s `load=`, docs/logging.md): a
    /// constant per kind of plan, which `--dry-run` prints beside its ``description``.
    package var code: String {
        switch mode {
        case .refused: "refused"
        case .staged: "staged"
        case .batchByBatch(let obstacles): obstacles.isEmpty ? "batch_by_batch" : "batch_by_batch.obstacles"
        case .automatic(_, let first) where capabilities.turnsStagedBySize: first ? "automatic.by_size_or_first_batch" : "automatic.by_size"
        case .automatic(_, let first): first ? "automatic.first_batch" : "automatic.never_staged"
        case .joined(.deferred): "joined.deferred"
        case .joined(.deferredAsked): "joined.deferred_asked"
        case .joined(.positions): "joined.positions"
        case .given: "given"
        }
    }

    /// As `--dry-run` prints it (after `load: `, with its ``code``).
    package var description: String {
        let emptyOnly = capabilities.stagesOnlyIntoEmptyTables
        switch mode {
        case .refused(let reasons): return "--bulk refused: \(reasons.joined(separator: "; "))"
        case .staged:
            return emptyOnly
                ? "staged (--bulk): staged and folded in a temporary SQLite file, the folded rows copied in at the end (into empty tables; tables that hold rows load batch by batch)"
                : "staged (--bulk): batches go to staging tables, merged in identity order at the end"
        case .batchByBatch(let obstacles) where obstacles.isEmpty: return "batch by batch (--no-bulk)"
        case .batchByBatch(let obstacles):
            return emptyOnly
                ? "batch by batch (--bulk: staged, into empty tables)"
                : "batch by batch (it cannot turn staged: \(obstacles.joined(separator: "; ")))"
        case .automatic(let bytes, let first) where capabilities.turnsStagedBySize:
            return "batch by batch, staged once the database holds \(bytes >> 20) MiB"
                + (first ? ", or from the first batch of a first load in no identity order" : "") + " (--no-bulk: never)"
        case .automatic(_, let first):
            return first
                ? "staged from the first batch of a first load in no identity order into empty tables (folded in a temporary SQLite file, copied in at the end); else batch by batch (--no-bulk: never staged)"
                : "batch by batch (--bulk: staged, into empty tables)"
        case .joined(.deferred):
            return
                "exchanged: each job's batches go to the run's parts (split by identity), and once every unit is done the jobs write the parts side by side, each folded and copied in as a single staged load (--no-bulk: batch by batch with positions)"
        case .joined(.deferredAsked):
            return
                "exchanged (--bulk): each job's batches go to the run's parts (split by identity), and once every unit is done the jobs write the parts side by side, each folded and copied in as a single staged load"
        case .joined(.positions):
            return "batch by batch"
        case .given: return "as the store given to the run was opened"
        }
    }
}
