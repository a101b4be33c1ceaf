import ArgumentParser
import Dispatch
import Foundation
import Ingot
import Logging
import Synchronization

/// The environment variables that stand in for options (`INGOT_DB` for `--db`, …): read only
/// where the option was not given.
enum Environment {
    static let values = ProcessInfo.processInfo.environment

    static func string(_ name: String) -> String? {
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    static func int(_ name: String) throws -> Int? {
        guard let text = string(name) else { return nil }
        guard let value = Int(text) else { throw ValidationError("\(name)='\(text)' is not an integer") }
        return value
    }

    static func double(_ name: String) throws -> Double? {
        guard let text = string(name) else { return nil }
        guard let value = Double(text), value.isFinite else { throw ValidationError("\(name)='\(text)' is not a number") }
        return value
    }

    static func flag(_ name: String) throws -> Bool {
        try optionalFlag(name) ?? false
    }

    /// A boolean variable, `nil` when it is not set.
    static func optionalFlag(_ name: String) throws -> Bool? {
        guard let text = string(name)?.lowercased() else { return nil }
        switch text {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw ValidationError("\(name)='\(text)' is not a boolean (1/0, true/false, yes/no)")
        }
    }

    static func parsed<T: ExpressibleByArgument>(_ name: String, as: T.Type) throws -> T? {
        guard let text = string(name) else { return nil }
        guard let value = T(argument: text) else { throw ValidationError("\(name)='\(text)' is not a valid value") }
        return value
    }
}

struct LogOptions: ParsableArguments {
    @Option(help: "Log format: logfmt or json (env INGOT_LOG_FORMAT; default logfmt).")
    var logFormat: LogfmtLogHandler.Format?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical (env INGOT_LOG_LEVEL; default info).")
    var logLevel: Logger.Level?

    mutating func validate() throws {
        logFormat = try logFormat ?? Environment.parsed("INGOT_LOG_FORMAT", as: LogfmtLogHandler.Format.self)
        logLevel = try logLevel ?? Environment.parsed("INGOT_LOG_LEVEL", as: Logger.Level.self)
    }

    func makeLogger() -> Logger {
        let format = logFormat ?? .logfmt
        var logger = Logger(label: "ingot") { _ in LogfmtLogHandler(format: format) }
        logger.logLevel = logLevel ?? .info
        return logger
    }
}

extension LogfmtLogHandler.Format: ExpressibleByArgument {}
extension Logger.Level: @retroactive ExpressibleByArgument {}

/// The options `run` and `replay` share: the database and how the stages run.
struct StageOptions: ParsableArguments {
    @Option(help: "The database: a SQLite file path or sqlite:PATH, or a postgresql:// URL (env INGOT_DB; default ingot.db).")
    var db: String?

    @Option(help: "Decode lanes (env INGOT_LANES; default: the number of cores).")
    var lanes: Int?

    @Option(
        help:
            "Records per batch: folded, looked up and saved at once (env INGOT_BATCH_RECORDS; default: the pipeline's batch_records, else 5000)."
    )
    var batchRecords: Int?

    @Option(help: "Page bytes per batch at most, for big records (env INGOT_BATCH_BYTES; default 67108864: 64 MiB).")
    var batchBytes: Int?

    @Option(
        help:
            "Rows and links one record may make; a record past it is rejected as too large (env INGOT_MAX_RECORD_ROWS; default 100000)."
    )
    var maxRecordRows: Int?

    @Option(help: "Records per transaction: batches share one until it holds this many (env INGOT_COMMIT_RECORDS; default 25000).")
    var commitRecords: Int?

    @Option(help: "Seconds a transaction stays open at most (env INGOT_COMMIT_INTERVAL; default 1).")
    var commitInterval: Double?

    @Option(help: "Seconds between progress lines; 0 turns them off (env INGOT_PROGRESS_INTERVAL; default 5).")
    var progressInterval: Double?

    @Option(
        help:
            "The largest page accepted, in bytes; a bigger one is rejected (env INGOT_MAX_PAGE_BYTES; default: the pipeline's max_page_bytes, else 67108864)."
    )
    var maxPageBytes: Int?

    @Option(help: "Raw page bytes read but not yet batched, at most (env INGOT_BYTES_IN_FLIGHT; default 67108864).")
    var bytesInFlight: Int?

    @Option(help: "Seconds to wait for another run holding the database, then exit 75 (env INGOT_LOCK_TIMEOUT; default 30).")
    var lockTimeout: Double?

    @Option(
        help: "Rejected records and pages allowed; past it a finished run exits 3 (env INGOT_MAX_REJECTS; default: the pipeline's limits).")
    var maxRejects: Int?

    @Option(help: "Rejects as a share of what was read (0-1) allowed; past it exit 3 (env INGOT_MAX_REJECT_RATIO).")
    var maxRejectRatio: Double?

    @Option(
        help:
            "Rejections stored in _ingot_rejects per run, at most; past it they are only counted (env INGOT_MAX_REJECT_ROWS; default 10000)."
    )
    var maxRejectRows: Int?

    @Option(
        help:
            "Write Prometheus metrics to this file (atomically) at each progress tick and at exit, for node_exporter's textfile collector (env INGOT_METRICS_FILE)."
    )
    var metricsFile: String?

    @Option(
        help:
            "Serve /metrics and /healthz on this port while the run lasts; 0: any free port, logged in run.started (env INGOT_METRICS_PORT)."
    )
    var metricsPort: Int?

    @Option(
        help:
            "Serve /metrics and /healthz on HOST:PORT (default host 127.0.0.1; 0.0.0.0 in a container whose scraper comes from outside) (env INGOT_METRICS_LISTEN)."
    )
    var metricsListen: String?

    @Flag(
        inversion: .prefixedNo, exclusivity: .chooseLast,
        help: ArgumentHelp(
            "Stage the whole load (--bulk), or never (--no-bulk); by default a first load from local pages in no identity order into empty tables is staged from its first batch (SQLite or PostgreSQL), and a SQLite load turns staged once its database outgrows the page cache; a PostgreSQL load stages only into empty tables; joined jobs (--join) exchange their rows through the run's parts and write them once every unit is done, from local pages by default and from any source with --bulk (env INGOT_BULK=1|0).",
            discussion:
                "Staged: batches go to staging tables, merged into the tables in identity order at the end, stored rows read in one sweep: the cost per record does not grow with the tables, and the tables change when the load commits."
        )
    )
    var bulk: Bool?

    @Option(
        help:
            "The database size (MiB) at which a SQLite load in no identity order turns staged; default 4, 40 from a source that fetches (env INGOT_BULK_AFTER_MIB)."
    )
    var bulkAfterMib: Int?

    @Flag(
        help: ArgumentHelp(
            "Read and apply every page, even those unchanged since the last run into this database (env INGOT_FULL_REFRESH=1).",
            discussion:
                "By default a run over a directory of pages leaves out the pages that are byte for byte the last run's and whose rows no changed page touches: the database ends as a full rerun leaves it."
        )
    )
    var fullRefresh = false

    /// The host the metrics server binds (`--metrics-listen`'s, else loopback).
    private var metricsHost = "127.0.0.1"

    /// The longest wait or interval any option takes: a day.
    static let maxSeconds: Double = 86_400

    /// The database path in force.
    var database: String { db ?? "ingot.db" }

    mutating func validate() throws {
        try readEnvironment()
        try checkMetrics()
        try checkBounds()
    }

    /// Each option not given on the command line, from its `INGOT_*` variable.
    private mutating func readEnvironment() throws {
        db = db ?? Environment.string("INGOT_DB")
        lanes = try lanes ?? Environment.int("INGOT_LANES")
        batchRecords = try batchRecords ?? Environment.int("INGOT_BATCH_RECORDS")
        batchBytes = try batchBytes ?? Environment.int("INGOT_BATCH_BYTES")
        commitRecords = try commitRecords ?? Environment.int("INGOT_COMMIT_RECORDS")
        maxRecordRows = try maxRecordRows ?? Environment.int("INGOT_MAX_RECORD_ROWS")
        commitInterval = try commitInterval ?? Environment.double("INGOT_COMMIT_INTERVAL")
        progressInterval = try progressInterval ?? Environment.double("INGOT_PROGRESS_INTERVAL")
        maxPageBytes = try maxPageBytes ?? Environment.int("INGOT_MAX_PAGE_BYTES")
        bytesInFlight = try bytesInFlight ?? Environment.int("INGOT_BYTES_IN_FLIGHT")
        lockTimeout = try lockTimeout ?? Environment.double("INGOT_LOCK_TIMEOUT")
        maxRejects = try maxRejects ?? Environment.int("INGOT_MAX_REJECTS")
        maxRejectRatio = try maxRejectRatio ?? Environment.double("INGOT_MAX_REJECT_RATIO")
        maxRejectRows = try maxRejectRows ?? Environment.int("INGOT_MAX_REJECT_ROWS")
        metricsFile = metricsFile ?? Environment.string("INGOT_METRICS_FILE")
        metricsPort = try metricsPort ?? Environment.int("INGOT_METRICS_PORT")
        metricsListen = metricsListen ?? Environment.string("INGOT_METRICS_LISTEN")
        bulk = try bulk ?? Environment.optionalFlag("INGOT_BULK")
        fullRefresh = try fullRefresh || Environment.flag("INGOT_FULL_REFRESH")
        bulkAfterMib = try bulkAfterMib ?? Environment.int("INGOT_BULK_AFTER_MIB")
        if let mib = bulkAfterMib, mib < 0 || mib > 1 << 30 {
            throw ValidationError("--bulk-after-mib must be between 0 and \(1 << 30), not \(mib)")
        }
    }

    /// `--metrics-listen` (HOST:PORT) agrees with `--metrics-port`; both are in range.
    private mutating func checkMetrics() throws {
        if let listen = metricsListen {
            guard let colon = listen.lastIndex(of: ":"), let port = Int(listen[listen.index(after: colon)...]),
                !listen[..<colon].isEmpty
            else {
                throw ValidationError(
                    "--metrics-listen (or INGOT_METRICS_LISTEN) must be HOST:PORT, such as 127.0.0.1:9464 or 0.0.0.0:9464")
            }
            if metricsPort != nil && metricsPort != port {
                throw ValidationError("--metrics-listen and --metrics-port name different ports")
            }
            metricsHost = String(listen[..<colon])
            metricsPort = port
        }
        if let metricsPort, !(0...65535).contains(metricsPort) {
            throw ValidationError("--metrics-port must be between 0 (any free port) and 65535")
        }
        if let metricsFile, metricsFile.isEmpty { throw ValidationError("--metrics-file cannot be empty") }
    }

    /// Every number within its range.
    private func checkBounds() throws {
        // Every number is bounded before use: a timeout past Int32 milliseconds trapped in SQLite's
        // busy handler (SIGILL), and nobody means a wait longer than a day.
        if let lockTimeout, !(0...Self.maxSeconds).contains(lockTimeout) {
            throw ValidationError("--lock-timeout (or INGOT_LOCK_TIMEOUT) must be between 0 and \(Int(Self.maxSeconds)) seconds")
        }
        if let commitInterval, commitInterval > Self.maxSeconds {
            throw ValidationError("--commit-interval (or INGOT_COMMIT_INTERVAL) must be at most \(Int(Self.maxSeconds)) seconds")
        }
        if let progressInterval, progressInterval > Self.maxSeconds {
            throw ValidationError("--progress-interval (or INGOT_PROGRESS_INTERVAL) must be at most \(Int(Self.maxSeconds)) seconds")
        }
        if let batchBytes, batchBytes > 1 << 40 { throw ValidationError("--batch-bytes (or INGOT_BATCH_BYTES) must be at most 1 TiB") }
        if let bytesInFlight, bytesInFlight > 1 << 40 {
            throw ValidationError("--bytes-in-flight (or INGOT_BYTES_IN_FLIGHT) must be at most 1 TiB")
        }
        if let maxRejects, maxRejects < 0 { throw ValidationError("--max-rejects cannot be negative") }
        if let maxRejectRows, maxRejectRows < 0 { throw ValidationError("--max-reject-rows (or INGOT_MAX_REJECT_ROWS) cannot be negative") }
        if let maxRejectRatio, !(0...1).contains(maxRejectRatio) { throw ValidationError("--max-reject-ratio must be between 0 and 1") }
        if let lanes, lanes < 1 || lanes > 256 { throw ValidationError("--lanes must be between 1 and 256") }
        if let batchRecords, batchRecords < 1 { throw ValidationError("--batch-records must be at least 1") }
        if let batchBytes, batchBytes < 1 { throw ValidationError("--batch-bytes must be at least 1") }
        if let commitRecords, commitRecords < 1 { throw ValidationError("--commit-records must be at least 1") }
        if let maxRecordRows, maxRecordRows < 1 { throw ValidationError("--max-record-rows (or INGOT_MAX_RECORD_ROWS) must be at least 1") }
        if let commitInterval, !(commitInterval > 0) { throw ValidationError("--commit-interval must be positive") }
        if let progressInterval, progressInterval < 0 { throw ValidationError("--progress-interval cannot be negative") }
        if let maxPageBytes, !RunOptions.maxPageBytesRange.contains(maxPageBytes) {
            throw ValidationError(
                "--max-page-bytes must be between \(RunOptions.maxPageBytesRange.lowerBound) and \(RunOptions.maxPageBytesRange.upperBound)"
            )
        }
        if let bytesInFlight, bytesInFlight < 1 { throw ValidationError("--bytes-in-flight must be at least 1") }
    }

    /// The run's metrics and their server, when `--metrics-file` or `--metrics-port` asks for
    /// them. A port that cannot be listened on is a usage error (exit 2).
    func metrics(pipeline: String) throws -> (RunMetrics?, MetricsServer?) {
        guard metricsFile != nil || metricsPort != nil else { return (nil, nil) }
        let metrics = RunMetrics(pipeline: pipeline, fileURL: metricsFile.map { URL(fileURLWithPath: $0) })
        guard let metricsPort else { return (metrics, nil) }
        do {
            let server = try MetricsServer(port: metricsPort, host: metricsHost, metrics: metrics)
            metrics.servingPort = server.port
            return (metrics, server)
        } catch {
            printError("\(error)")
            throw Exit.badConfig
        }
    }

    var runOptions: RunOptions {
        var options = RunOptions()
        options.databasePath = database
        if let lanes { options.lanes = lanes }
        options.batchRecords = batchRecords
        if let batchBytes { options.batchBytes = batchBytes }
        if let commitRecords { options.commitRecords = commitRecords }
        if let maxRecordRows { options.maxRecordRows = maxRecordRows }
        if let commitInterval { options.commitInterval = commitInterval }
        options.progressInterval = progressInterval ?? 5
        options.maxPageBytes = maxPageBytes
        if let bytesInFlight { options.bytesInFlight = bytesInFlight }
        if let lockTimeout { options.lockTimeout = lockTimeout }
        options.maxRejects = maxRejects
        options.maxRejectRatio = maxRejectRatio
        if let maxRejectRows { options.maxRejectRows = maxRejectRows }
        switch bulk {
        case true?: options.loading = .staged
        case false?: options.loading = .batchByBatch
        case nil: options.loading = .automatic(afterBytes: bulkAfterMib.map { $0 << 20 })
        }
        options.fullRefresh = fullRefresh
        return options
    }
}
