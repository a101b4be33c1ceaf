import ArgumentParser
import Dispatch
import Foundation
import Ingot
import Logging
import Synchronization

/// `ingot`: parsing only; the work is in the Ingot library.
@main
struct IngotCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ingot",
        abstract: "Ingest paginated JSON into SQLite with identity (find-or-create) semantics.",
        discussion: "Every option can also be set by an environment variable (INGOT_DB, INGOT_LOG_FORMAT, …; see the README); the option wins.",
        subcommands: [Run.self, Replay.self, Validate.self, Schema.self, Archive.self, BenchDecode.self, BenchFetch.self])

    /// Parses and runs, with one exit code for every usage problem: 2 (ArgumentParser's own is 64).
    static func main() {
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch {
            let code = exitCode(for: error)
            if code == .validationFailure {
                // The message as ArgumentParser prints it, then Ingot's code for bad usage.
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(Exit.badConfig.rawValue)
            }
            exit(withError: error)
        }
    }
}

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
        guard let text = string(name)?.lowercased() else { return false }
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

/// Exit codes a scheduler can act on (the README has the table): 0 finished, 1 failed
/// (unexpected), 2 bad configuration or usage (permanent), 3 finished but rejects passed a limit
/// (or everything read was rejected), 75 temporary (the source stayed unreachable, or another
/// run holds the database), 130/143 interrupted by SIGINT/SIGTERM.
enum Exit {
    static let failed = ExitCode(1)
    static let badConfig = ExitCode(2)
    static let rejectsOverLimit = ExitCode(3)
    static let temporary = ExitCode(75)

    static func code(for summary: RunSummary, signal: Int32?) -> ExitCode? {
        switch summary.status {
        case .finished: summary.limitExceeded == nil ? nil : rejectsOverLimit
        case .failed:
            switch summary.failureKind {
            case .configuration: badConfig
            case .temporary: temporary
            case .unexpected, nil: failed
            }
        case .interrupted: ExitCode(128 + (signal ?? SIGTERM))
        }
    }
}

func printError(_ message: String) {
    FileHandle.standardError.write(Data((message + "\n").utf8))
}

/// Runs `runner` over `source`, stopping it cleanly on the first SIGINT or SIGTERM (in-flight
/// batches commit, the archive is closed, the summary is logged) and exiting at once on a second.
/// The metrics server, if any, stops when the run is over.
func runHandlingSignals(
    _ config: PipelineConfig, options: RunOptions, logger: Logger, stages: StageOptions, source: any PageSource
) throws {
    let (metrics, server) = try stages.metrics(pipeline: config.name)
    let runner = PipelineRunner(config: config, options: options, logger: logger, metrics: metrics)
    let signals = SignalWatcher(runner: runner)
    let summary = runner.run(source: source)
    server?.stop()
    if let code = Exit.code(for: summary, signal: signals.received) { throw code }
}

/// Turns SIGINT and SIGTERM into `PipelineRunner.stop()`, listening with Dispatch sources on
/// their own queue (the signals themselves are ignored, so they never kill the process mid-write).
final class SignalWatcher {
    private let sources: [any DispatchSourceSignal]
    private let first = FirstSignal()
    private let queue = DispatchQueue(label: "ingot.signals")

    final class FirstSignal: Sendable {
        let value = Mutex<Int32?>(nil)
    }

    init(runner: PipelineRunner) {
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            sources.append(DispatchSource.makeSignalSource(signal: number, queue: queue))
        }
        self.sources = sources
        for (source, number) in zip(sources, [SIGINT, SIGTERM]) {
            source.setEventHandler { [first] in
                let already = first.value.withLock { value -> Bool in
                    defer { if value == nil { value = number } }
                    return value != nil
                }
                if already { _exit(128 + number) }
                runner.stop()
            }
            source.resume()
        }
    }

    /// The first signal received, if any.
    var received: Int32? { first.value.withLock { $0 } }
}

/// Loads a pipeline, printing `file:line:column: message` and exiting 2 when it is invalid.
func loadPipeline(_ path: String) throws -> PipelineConfig {
    do {
        return try PipelineConfig.load(path: path)
    } catch {
        FileHandle.standardError.write(Data("\(error)\n".utf8))
        throw Exit.badConfig
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
    @Option(help: "The SQLite database file (env INGOT_DB; default ingot.db).")
    var db: String?

    @Option(help: "Decode lanes (env INGOT_LANES; default: the number of cores).")
    var lanes: Int?

    @Option(help: "Records per batch: folded, looked up and saved at once (env INGOT_BATCH_RECORDS; default: the pipeline's batch_records, else 5000).")
    var batchRecords: Int?

    @Option(help: "Page bytes per batch at most, for big records (env INGOT_BATCH_BYTES; default 67108864: 64 MiB).")
    var batchBytes: Int?

    @Option(help: "Records per transaction: batches share one until it holds this many (env INGOT_COMMIT_RECORDS; default 25000).")
    var commitRecords: Int?

    @Option(help: "Seconds a transaction stays open at most (env INGOT_COMMIT_INTERVAL; default 1).")
    var commitInterval: Double?

    @Option(help: "Seconds between progress lines; 0 turns them off (env INGOT_PROGRESS_INTERVAL; default 5).")
    var progressInterval: Double?

    @Option(help: "The largest page accepted, in bytes; a bigger one is rejected (env INGOT_MAX_PAGE_BYTES; default: the pipeline's max_page_bytes, else 67108864).")
    var maxPageBytes: Int?

    @Option(help: "Raw page bytes read but not yet batched, at most (env INGOT_BYTES_IN_FLIGHT; default 67108864).")
    var bytesInFlight: Int?

    @Option(help: "Seconds to wait for another run holding the database, then exit 75 (env INGOT_LOCK_TIMEOUT; default 30).")
    var lockTimeout: Double?

    @Option(help: "Rejected records and pages allowed; past it a finished run exits 3 (env INGOT_MAX_REJECTS; default: the pipeline's limits).")
    var maxRejects: Int?

    @Option(help: "Rejects as a share of what was read (0-1) allowed; past it exit 3 (env INGOT_MAX_REJECT_RATIO).")
    var maxRejectRatio: Double?

    @Option(help: "Write Prometheus metrics to this file (atomically) at each progress tick and at exit, for node_exporter's textfile collector (env INGOT_METRICS_FILE).")
    var metricsFile: String?

    @Option(help: "Serve /metrics and /healthz on this port while the run lasts (env INGOT_METRICS_PORT).")
    var metricsPort: Int?

    /// The database path in force.
    var database: String { db ?? "ingot.db" }

    mutating func validate() throws {
        db = db ?? Environment.string("INGOT_DB")
        lanes = try lanes ?? Environment.int("INGOT_LANES")
        batchRecords = try batchRecords ?? Environment.int("INGOT_BATCH_RECORDS")
        batchBytes = try batchBytes ?? Environment.int("INGOT_BATCH_BYTES")
        commitRecords = try commitRecords ?? Environment.int("INGOT_COMMIT_RECORDS")
        commitInterval = try commitInterval ?? Environment.double("INGOT_COMMIT_INTERVAL")
        progressInterval = try progressInterval ?? Environment.double("INGOT_PROGRESS_INTERVAL")
        maxPageBytes = try maxPageBytes ?? Environment.int("INGOT_MAX_PAGE_BYTES")
        bytesInFlight = try bytesInFlight ?? Environment.int("INGOT_BYTES_IN_FLIGHT")
        lockTimeout = try lockTimeout ?? Environment.double("INGOT_LOCK_TIMEOUT")
        maxRejects = try maxRejects ?? Environment.int("INGOT_MAX_REJECTS")
        maxRejectRatio = try maxRejectRatio ?? Environment.double("INGOT_MAX_REJECT_RATIO")
        metricsFile = metricsFile ?? Environment.string("INGOT_METRICS_FILE")
        metricsPort = try metricsPort ?? Environment.int("INGOT_METRICS_PORT")
        if let metricsPort, !(1...65535).contains(metricsPort) { throw ValidationError("--metrics-port must be between 1 and 65535") }
        if let metricsFile, metricsFile.isEmpty { throw ValidationError("--metrics-file cannot be empty") }
        if let lockTimeout, !(lockTimeout >= 0) { throw ValidationError("--lock-timeout cannot be negative") }
        if let maxRejects, maxRejects < 0 { throw ValidationError("--max-rejects cannot be negative") }
        if let maxRejectRatio, !(0...1).contains(maxRejectRatio) { throw ValidationError("--max-reject-ratio must be between 0 and 1") }
        if let lanes, lanes < 1 || lanes > 256 { throw ValidationError("--lanes must be between 1 and 256") }
        if let batchRecords, batchRecords < 1 { throw ValidationError("--batch-records must be at least 1") }
        if let batchBytes, batchBytes < 1 { throw ValidationError("--batch-bytes must be at least 1") }
        if let commitRecords, commitRecords < 1 { throw ValidationError("--commit-records must be at least 1") }
        if let commitInterval, !(commitInterval > 0) { throw ValidationError("--commit-interval must be positive") }
        if let progressInterval, progressInterval < 0 { throw ValidationError("--progress-interval cannot be negative") }
        if let maxPageBytes, !RunOptions.maxPageBytesRange.contains(maxPageBytes) {
            throw ValidationError("--max-page-bytes must be between \(RunOptions.maxPageBytesRange.lowerBound) and \(RunOptions.maxPageBytesRange.upperBound)")
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
            return (metrics, try MetricsServer(port: metricsPort, metrics: metrics))
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
        if let commitInterval { options.commitInterval = commitInterval }
        options.progressInterval = progressInterval ?? 5
        options.maxPageBytes = maxPageBytes
        if let bytesInFlight { options.bytesInFlight = bytesInFlight }
        if let lockTimeout { options.lockTimeout = lockTimeout }
        options.maxRejects = maxRejects
        options.maxRejectRatio = maxRejectRatio
        return options
    }
}

struct Validate: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Check a pipeline file; print its problems as file:line:column.")

    @Argument(help: "The pipeline file.")
    var pipeline: String

    func run() throws {
        let config = try loadPipeline(pipeline)
        print("\(pipeline): ok (pipeline \(config.name), \(config.model.entities.count) entities, root \(config.root))")
    }
}

struct Schema: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the SQL schema a pipeline creates.")

    @Argument(help: "The pipeline file.")
    var pipeline: String

    func run() throws {
        let config = try loadPipeline(pipeline)
        for statement in Store.schema(of: config.model) { print(statement + ";") }
    }
}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run a pipeline into a SQLite database.")

    @Argument(help: "The pipeline file (env INGOT_PIPELINE).")
    var pipeline: String?

    @Option(help: "Read pages from the files of this directory matching the pipeline's files.glob, in name order (env INGOT_PAGES).")
    var pages: String?

    @OptionGroup var stages: StageOptions

    @Option(help: "Where the run writes its archive of raw payloads (env INGOT_ARCHIVE_DIR; default archives).")
    var archiveDir: String?

    @Flag(help: "Do not archive the payloads (env INGOT_NO_ARCHIVE=1).")
    var noArchive = false

    @Flag(help: "Continue the pipeline's last unfinished run in this database, or start one (env INGOT_RESUME=1).")
    var resume = false

    @Flag(help: "Validate, plan the schema and print the plan; fetch nothing, write nothing.")
    var dryRun = false

    @OptionGroup var log: LogOptions

    mutating func validate() throws {
        pipeline = pipeline ?? Environment.string("INGOT_PIPELINE")
        guard pipeline != nil else { throw ValidationError("missing the pipeline file (an argument, or INGOT_PIPELINE)") }
        pages = pages ?? Environment.string("INGOT_PAGES")
        archiveDir = archiveDir ?? Environment.string("INGOT_ARCHIVE_DIR")
        noArchive = try noArchive || Environment.flag("INGOT_NO_ARCHIVE")
        resume = try resume || Environment.flag("INGOT_RESUME")
    }

    func run() throws {
        let pipeline = self.pipeline ?? ""
        let config = try loadPipeline(pipeline)
        if dryRun { return try printPlan(config) }
        let logger = log.makeLogger()
        let source: any PageSource
        do {
            source = try makeSource(config, logger: logger)
        } catch {
            printError("\(error)")
            throw Exit.badConfig
        }
        var options = stages.runOptions
        options.archiveDirectory = noArchive ? nil : archiveDir ?? "archives"
        options.resume = resume
        try runHandlingSignals(config, options: options, logger: logger, stages: stages, source: source)
    }

    /// `--dry-run`: what the run would read, where it would write, and the schema statements it
    /// would apply. Nothing is fetched, no file is created. Exit 2 when the database would refuse
    /// the run.
    private func printPlan(_ config: PipelineConfig) throws {
        let options = stages.runOptions
        let maxPageBytes = stages.maxPageBytes ?? config.maxPageBytes ?? RunOptions.defaultMaxPageBytes
        print("pipeline \(config.name) (\(pipeline ?? "")): root \(config.root), write \(config.write.rawValue), \(config.model.entities.count) entities")
        func files(_ dir: String, _ glob: String) {
            let count = (try? DirectoryPageSource(directory: dir, glob: glob).files.count).map(String.init) ?? "unreadable"
            print("source: files \(dir)/\(glob) (\(count) files)")
        }
        switch (pages, config.source) {
        case (let dir?, .files(_, let glob)): files(dir, glob)
        case (let dir?, _): files(dir, "*.json")
        case (nil, .files(let dir, let glob)): files(dir, glob)
        case (nil, .http(let http)):
            print("source: http \(ArchiveReader.printable(http.url)), \(http.paginate), concurrency \(http.concurrency), max_pages \(http.maxPages)"
                + (http.allowedHosts.isEmpty ? "" : ", allowed_hosts \(http.allowedHosts.joined(separator: ","))"))
        case (nil, .none):
            print("source: none (give --pages DIR)")
        }
        print("archive: \(noArchive ? "off" : (archiveDir ?? "archives") + "/")")
        print("limits: max_page_bytes \(maxPageBytes), bytes_in_flight \(options.bytesInFlight), batch_records \(options.batchRecords ?? config.batchRecords ?? 5000), lanes \(options.lanes)")
        let plan = try Store.plan(model: config.model, databasePath: options.databasePath)
        print("database: \(options.databasePath) (\(plan.exists ? "exists" : "new"))")
        if !plan.conflicts.isEmpty {
            print("refused: the database's tables disagree with the pipeline:")
            for conflict in plan.conflicts { print("  " + conflict) }
            throw Exit.badConfig
        }
        print("schema: \(plan.statements.count) statement\(plan.statements.count == 1 ? "" : "s") to apply")
        for statement in plan.statements { print("  " + statement + ";") }
        print("dry run: nothing was fetched or written")
    }

    /// The pipeline's source: `--pages DIR`, its files, or HTTP (with the incremental cursor kept
    /// from the last run).
    private func makeSource(_ config: PipelineConfig, logger: Logger) throws -> any PageSource {
        let pipeline = self.pipeline ?? ""
        let limit = stages.maxPageBytes ?? config.maxPageBytes ?? RunOptions.defaultMaxPageBytes
        switch config.source {
        case .files(let dir, let glob):
            return try DirectoryPageSource(directory: pages ?? dir, glob: glob, maxPageBytes: limit)
        case .none:
            guard let pages else { throw ValidationError("\(pipeline): the pipeline has no source; give --pages DIR") }
            return try DirectoryPageSource(directory: pages, glob: "*.json", maxPageBytes: limit)
        case .http(let http):
            if let pages {
                return try DirectoryPageSource(directory: pages, glob: "*.json", maxPageBytes: limit)
            }
            var query: [(String, String)] = []
            if let incremental = config.incremental,
                let value = try Store.state(databasePath: stages.database, model: config.model, pipeline: config.name, key: "incremental:" + incremental.param)
            {
                query.append((incremental.param, value))
            }
            return try HTTPPageSource(config: http, recordsPath: config.recordsPath, query: query, maxPageBytes: limit, logger: logger)
        }
    }
}

struct Replay: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the pipeline stages again over an archive, offline.",
        discussion: "Maps the archived payloads with the archived pipeline, or with --pipeline to re-map old payloads with a new mapping.")

    @Argument(help: "The archive file.")
    var archive: String

    @Option(help: "Map with this pipeline file instead of the archived one.")
    var pipeline: String?

    @OptionGroup var stages: StageOptions

    @OptionGroup var log: LogOptions

    func run() throws {
        let logger = log.makeLogger()
        let reader: ArchiveReader
        do {
            reader = try ArchiveReader(path: archive)
        } catch {
            printError("\(error)")
            throw Exit.failed
        }
        warnIfTorn(reader, logger)
        let config: PipelineConfig
        if let pipeline {
            config = try loadPipeline(pipeline)
        } else {
            do {
                config = try PipelineConfig.parse(text: reader.header.pipelineText, path: "\(archive) (pipeline \(reader.header.pipelinePath))")
            } catch {
                printError("\(error)")
                throw Exit.badConfig
            }
        }
        // What the run accepted, the replay reads: its entries are at most the run's max_page_bytes.
        var options = stages.runOptions
        options.maxPageBytes = stages.maxPageBytes ?? reader.header.maxPageBytes ?? config.maxPageBytes
        reader.decompressionLimit = options.maxPageBytes ?? RunOptions.defaultMaxPageBytes
        try runHandlingSignals(config, options: options, logger: logger, stages: stages, source: ArchivePageSource(reader: reader))
    }
}

func warnIfTorn(_ reader: ArchiveReader, _ logger: Logger) {
    if let torn = reader.tornAt {
        logger.warning("archive.torn", metadata: [
            LogKey.archive: "\(reader.path)", LogKey.offset: .int(torn), LogKey.reason: "\(reader.tornReason ?? "")",
            "entries": .int(reader.entries.count),
        ])
    }
}

struct Archive: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Inspect run archives.", subcommands: [List.self, Cat.self, Verify.self])

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "One line per entry.")

        @Argument(help: "The archive file.")
        var archive: String

        func run() throws {
            let reader: ArchiveReader
            do {
                reader = try ArchiveReader(path: archive)
            } catch {
                printError("\(error)")
                throw Exit.failed
            }
            // Everything printed comes from the file: control characters are escaped.
            let h = reader.header
            func safe(_ s: String) -> String { ArchiveReader.printable(s) }
            print("# run \(safe(h.runID)) pipeline \(safe(h.pipelineName)) created \(safe(h.createdAt)) entries \(reader.entries.count)")
            for entry in reader.entries {
                let m = entry.metadata
                let compressed = entry.frameLength
                print("\(m.seq)\t\(safe(m.fetchedAt))\t\(m.httpStatus.map(String.init) ?? "-")\t\(m.rawLength)\t\(compressed)\t\(String(m.crc32c, radix: 16))\t\(safe(m.source))")
            }
            if let torn = reader.tornAt {
                printError("warning: \(archive): \(reader.tornReason ?? "damaged") at byte \(torn); \(reader.entries.count) whole entries before it")
            }
        }
    }

    struct Cat: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Write an entry's raw payload to standard output.")

        @Argument(help: "The archive file.")
        var archive: String

        @Argument(help: "The entry's sequence number.")
        var seq: Int

        func run() throws {
            do {
                let reader = try ArchiveReader(path: archive)
                guard let entry = reader.entry(seq: seq) else {
                    printError("\(archive): no entry \(seq)")
                    throw Exit.failed
                }
                FileHandle.standardOutput.write(Data(try reader.payload(of: entry)))
            } catch let error as ArchiveError {
                printError("\(error)")
                throw Exit.failed
            }
        }
    }

    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Check every entry's checksum; exit 1 at the first mismatch.")

        @Argument(help: "The archive file.")
        var archive: String

        func run() throws {
            do {
                let reader = try ArchiveReader(path: archive)
                try reader.verify()
                print("\(archive): ok, \(reader.entries.count) entries")
            } catch {
                printError("\(error)")
                throw Exit.failed
            }
        }
    }
}

struct BenchDecode: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench-decode", abstract: "Time JSON parsing and record mapping alone, on one thread.", shouldDisplay: false)

    @Argument(help: "The pipeline file.")
    var pipeline: String

    @Option(help: "The pages directory.")
    var pages: String

    func run() throws {
        let config = try loadPipeline(pipeline)
        var glob = "*.json"
        if case .files(_, let g) = config.source { glob = g }
        let r = try DecodeBenchmark.measure(config: config, source: DirectoryPageSource(directory: pages, glob: glob))
        let mb = Double(r.bytes) / 1e6
        print(String(format: "parse: %.1f MB/s (%.3f s)  parse+map: %.1f MB/s, %.0f records/s (%.3f s)",
            mb / r.parseSeconds, r.parseSeconds, mb / r.mapSeconds, Double(r.records) / r.mapSeconds, r.mapSeconds))
    }
}

struct BenchFetch: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench-fetch", abstract: "Fetch every page of an HTTP pipeline and discard it (fetch speed alone).",
        shouldDisplay: false)

    @Argument(help: "The pipeline file (an http source).")
    var pipeline: String

    func run() throws {
        let config = try loadPipeline(pipeline)
        guard case .http(let http) = config.source else { throw ValidationError("\(pipeline) has no http source") }
        let source = try HTTPPageSource(config: http, recordsPath: config.recordsPath, logger: Logger(label: "bench"))
        let clock = ContinuousClock()
        let start = clock.now
        var pages = 0
        var bytes = 0
        while let page = try source.next() {
            pages += 1
            bytes += page.bytes.count
        }
        let elapsed = clock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        print(String(format: "fetch: %d pages, %.1f MB in %.3f s: %.0f pages/s, %.1f MB/s",
            pages, Double(bytes) / 1e6, seconds, Double(pages) / seconds, Double(bytes) / 1e6 / seconds))
    }
}
