import Foundation

/// Settings of one run. Every field has a default that suits a 2-core container.
public struct RunOptions: Sendable {
    /// Where the data goes, as `--db` gives it: a SQLite file path (or `sqlite:PATH`), or a
    /// `postgresql://` URL (see ``StoreLocation``). Default `ingot.db`.
    public var databasePath = "ingot.db" {
        didSet { location = Result { () throws(StoreError) in try StoreLocation(databasePath) } }
    }
    /// ``databasePath`` parsed, once: what the run opens, `--dry-run` shows and the incremental
    /// cursor is read from (a text that names no database is the run's error).
    package private(set) var location: Result<StoreLocation, StoreError> = .success(.sqlite(path: "ingot.db"))
    /// Decode lanes (serial queues decoding pages in parallel). Default: the number of cores.
    public var lanes = ProcessInfo.processInfo.activeProcessorCount
    /// Records per batch: the unit the pipeline folds, looks up (one query per entity) and saves
    /// at once. Default: the pipeline's `batch_records`, else 5000.
    public var batchRecords: Int?
    /// Page bytes per batch, at most (a batch ends at `batchRecords` records or this many bytes,
    /// whichever comes first): records of a few megabytes each must not make a batch of
    /// gigabytes. Default 64 MiB.
    public var batchBytes = RunOptions.defaultBatchBytes
    /// Rows and links one record may make, at most (its own row, its nested objects' and owned
    /// children's rows, the elements of its to-many sets): a record past it is rejected
    /// (`too_large`, naming the element where it passed), so that a page holding one record with
    /// a huge array cannot take memory the settings do not bound (docs/concurrency.md,
    /// "Memory"). Default 100,000.
    public var maxRecordRows = RunOptions.defaultMaxRecordRows
    /// Records per transaction: batches share a transaction until it holds this many records.
    /// Default 25,000. Fewer, bigger commits write each hot database page to the WAL once per
    /// commit instead of once per batch; a killed run redoes at most this much on `--resume`.
    public var commitRecords = 25_000
    /// Seconds a transaction stays open at most, even when no further batch comes. Default 1.
    public var commitInterval: Double = 1
    /// The clock of the commit interval, the progress ticks and a shared run's lease renewals:
    /// real time unless a test drives its own.
    package var timers: any RunTimers = DispatchTimers()
    /// In a shared run: which of the process's jobs may claim a unit next (``ClaimTurns``);
    /// `nil` (every run): whichever asks first. A test's, so that each job provably takes units.
    package var claimTurns: (any ClaimTurns)?
    /// Pages read but not yet folded into a batch, at most. Default: `2 × lanes + 2`. With
    /// `batchRecords`, this bounds memory whatever the size of the source.
    public var pagesInFlight: Int?
    /// Raw page bytes read but not yet folded into a batch, at most (one bigger page still goes
    /// through alone). Default 64 MiB. With `pagesInFlight`, `batchBytes` and `maxPageBytes` this
    /// bounds memory whatever the source sends (docs/concurrency.md).
    public var bytesInFlight = 64 << 20
    /// Seconds between progress lines. Default 5; 0 turns them off.
    public var progressInterval: Double = 5
    /// The run's id. Default: the start time and a random suffix.
    public var runID: String?
    /// Rejections logged one by one before the log only counts them (all are stored). Default 20.
    public var loggedRejectionLimit = 20
    /// Rejections stored in `_ingot_rejects` per run, at most (a resumed run counts what it
    /// stored before); past it they are only counted, per reason and entity, and a
    /// `rejects.truncated` warning names the archive that holds every page. Default 10,000.
    public var maxRejectRows = 10_000
    /// Called with the text of every statement the store runs (tests count identity lookups).
    public var statementObserver: (@Sendable (String) -> Void)?
    /// Where the run writes its archive (`<pipeline>-<run id>.ingot`); `nil`: no archive. Default `nil`
    /// (the CLI's default is `./archives`).
    public var archiveDirectory: String?
    /// Continue the last unfinished run of the pipeline in this database (or start a new one when
    /// there is none). Default `false`.
    public var resume = false
    /// zstd level of archived payloads. Default 1.
    public var compressionLevel: Int32 = 1
    /// The largest page accepted, in bytes: a bigger one is a rejected page (not archived, not
    /// decoded; an HTTP transfer is cut off there). Default: the pipeline's `max_page_bytes`,
    /// else 64 MiB. One limit for run and replay: an archive's entries never exceed it.
    public var maxPageBytes: Int?
    /// Seconds to wait for another run holding the database before giving up (a temporary
    /// failure, exit 75). Default 30.
    public var lockTimeout: Double = 30
    /// Rejected records and pages a run may have and still count as a success; `nil`: the
    /// pipeline's `limits`, else no limit. A run over it finishes (what was committed stays) but
    /// says so (exit 3).
    public var maxRejects: Int?
    /// Rejects as a share of what was read (0…1), at most; `nil`: the pipeline's, else no limit.
    public var maxRejectRatio: Double?

    /// How the run is asked to write its batches: batch by batch, going on staged where that
    /// costs less (the default), staged from the start (`--bulk`: batches are staged, then merged
    /// into the tables in identity order when the source is exhausted, so the cost per record
    /// does not grow with the tables), or batch by batch throughout (`--no-bulk`). What runs is
    /// the run's ``LoadPlan`` (`--dry-run` prints it).
    public var loading = Loading.automatic()
    /// Read and apply every page (`--full-refresh`), even those a refresh would leave out as
    /// unchanged since the last run (docs/pipelines.md, "Refreshes"). The run still keeps its
    /// pages' prints for the next one. Default `false`.
    public var fullRefresh = false
    /// The most bytes of page prints a run spools until it ends (a run past it keeps none, and
    /// the next one reads every page): 1 GiB, about 130,000 pages of a thousand records.
    package var maxPrintBytes = 1 << 30
    /// Work on the run of this name together with the other jobs given the same name (a
    /// PostgreSQL database only; docs/scale-out.md). `nil`: the run is this job's alone.
    public var join: String?
    /// Seconds a joined job's claim on a unit lasts without renewal: a killed job's units are
    /// taken over this long after it stopped renewing (every third of it). Default 30.
    public var lease: Double = 30

    /// The defaults (docs/operations.md lists them).
    public init() {}

    static let defaultBatchRecords = 5000
    static let defaultMaxRecordRows = MappingPlan.defaultMaxRecordRows

    /// Records per batch for each resource of `config` — the option, else the resource's or the
    /// pipeline's `batch_records`, else 5000: the one place a run's batch size is decided.
    package func batchRecords(of config: PipelineConfig) -> [Int] {
        config.batchRecordsPerResource(override: batchRecords, fallback: RunOptions.defaultBatchRecords)
    }

    /// The batch size `run.started` and `--dry-run` show: the first resource's (``batchRecords(of:)``).
    package func shownBatchRecords(of config: PipelineConfig) -> Int {
        batchRecords(of: config).first ?? RunOptions.defaultBatchRecords
    }
    /// The default `max_page_bytes`: 64 MiB.
    public static let defaultMaxPageBytes = Page.defaultMaxBytes
    /// `max_page_bytes` accepted from a file or the command line (a page's offsets are 32-bit).
    public static let maxPageBytesRange = Page.maxBytesRange
    static let defaultBatchBytes = 64 << 20
}

/// How a run ended, with its counters: the last line a run logs.
public struct RunSummary: Sendable {
    /// Why a run failed, as a scheduler needs to know it (exit 2, 75 or 1).
    public enum FailureKind: String, Sendable {
        /// The pipeline or the database disagree with it: retrying changes nothing.
        case configuration
        /// The source stayed unreachable, or another run holds the database: retry later.
        case temporary
        /// Anything else.
        case unexpected

        /// The kind of `error`, as a run fails on it.
        public init(_ error: any Error) {
            switch error {
            case let fetch as FetchError: self = fetch.isConfiguration ? .configuration : fetch.isTemporary ? .temporary : .unexpected
            case let lock as RunLockError: self = lock.isHeld ? .temporary : .unexpected
            case let store as StoreError where store.kind == .conflict || store.kind == .unsupported: self = .configuration
            case let store as StoreError where store.kind == .unreachable: self = .temporary
            // Another program held the database past --lock-timeout, as another run would.
            case let error where StoreError.isLocked(error): self = .temporary
            case is ConfigError: self = .configuration
            default: self = .unexpected
            }
        }
    }

    /// The run's id (`-` when it never started).
    public var runID: String
    /// The pipeline's name.
    public var pipeline: String
    /// How the run ended.
    public var status: RunStatus
    /// For a failed run: whether the cause is the configuration (permanent), something that may
    /// pass (temporary), or unexpected.
    public var failureKind: FailureKind?
    /// For a finished run: the reject limit it passed, or why it saw nothing usable.
    public var limitExceeded: String?
    /// What it did (committed batches only).
    public var counters: RunCounters
    /// Seconds from start to end.
    public var duration: Double
    /// Why the run failed.
    public var error: String?
    /// The archive the run wrote.
    public var archive: String?
    /// How the run was planned to write its batches: its load plan's code (`load=` in
    /// `run.started` and `run.summary`, printed by `--dry-run` beside the plan; docs/logging.md);
    /// `nil` when it never opened a store.
    public var load: String?
    /// What that plan turned into: batch by batch throughout, staged from the first batch or
    /// after so many records, merged or not, or staging declined and why (`loaded=` in
    /// `run.summary`); `nil` when no batch was written.
    public var loaded: String?
    /// The same, as values (``LoadOutcome/logFields``: `loaded=staged.first_batch merged_rows=…`).
    package var loadOutcome: LoadOutcome?
}
