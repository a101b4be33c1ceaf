import ArgumentParser
import Foundation
import Ingot
import Logging

/// `ingot`: parsing only; the work is in the Ingot library.
@main
struct IngotCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ingot",
        abstract: "Ingest paginated JSON into SQLite with identity (find-or-create) semantics.",
        subcommands: [Run.self, Validate.self, Schema.self, BenchDecode.self])
}

/// Exit codes: 0 finished (rejections counted), 1 failed, 2 bad config or usage.
enum Exit {
    static let failed = ExitCode(1)
    static let badConfig = ExitCode(2)
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
    @Option(help: "Log format: logfmt or json.")
    var logFormat: LogfmtLogHandler.Format = .logfmt

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    func makeLogger() -> Logger {
        var logger = Logger(label: "ingot") { _ in LogfmtLogHandler(format: logFormat) }
        logger.logLevel = logLevel
        return logger
    }
}

extension LogfmtLogHandler.Format: ExpressibleByArgument {}
extension Logger.Level: @retroactive ExpressibleByArgument {}

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

    @Argument(help: "The pipeline file.")
    var pipeline: String

    @Option(help: "The SQLite database file.")
    var db = "ingot.db"

    @Option(help: "Read pages from the files of this directory matching the pipeline's files.glob, in name order.")
    var pages: String?

    @Option(help: "Decode lanes (default: the number of cores).")
    var lanes: Int?

    @Option(help: "Records per transaction (default: the pipeline's batch_records, else 5000).")
    var batchRecords: Int?

    @Option(help: "Seconds between progress lines; 0 turns them off.")
    var progressInterval: Double = 5

    @OptionGroup var log: LogOptions

    func validate() throws {
        if let lanes, lanes < 1 || lanes > 256 { throw ValidationError("--lanes must be between 1 and 256") }
        if let batchRecords, batchRecords < 1 { throw ValidationError("--batch-records must be at least 1") }
        if progressInterval < 0 { throw ValidationError("--progress-interval cannot be negative") }
    }

    func run() throws {
        let config = try loadPipeline(pipeline)
        let logger = log.makeLogger()
        var glob = "*.json"
        var directory: String
        switch config.source {
        case .files(let dir, let g):
            directory = dir
            glob = g
        case .none:
            guard let pages else {
                FileHandle.standardError.write(Data("\(pipeline): the pipeline has no source; give --pages DIR\n".utf8))
                throw Exit.badConfig
            }
            directory = pages
        }
        if let pages { directory = pages }

        let source: DirectoryPageSource
        do {
            source = try DirectoryPageSource(directory: directory, glob: glob)
        } catch {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            throw Exit.badConfig
        }
        var options = RunOptions()
        options.databasePath = db
        if let lanes { options.lanes = lanes }
        options.batchRecords = batchRecords
        options.progressInterval = progressInterval
        let summary = PipelineRunner(config: config, options: options, logger: logger).run(source: source)
        if summary.status != .finished { throw Exit.failed }
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
