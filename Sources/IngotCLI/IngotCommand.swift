import ArgumentParser
import Dispatch
import Foundation
import Ingot
import Logging
import Synchronization

#if canImport(Glibc)
    /// glibc's `mallopt` (malloc.h is not in Swift's Glibc module).
    @_silgen_name("mallopt") private func glibcMallopt(_ parameter: Int32, _ value: Int32) -> Int32
    /// `M_ARENA_MAX` in malloc.h.
    private let glibcArenaMax: Int32 = -8
#endif

/// `ingot`: parsing only; the work is in the Ingot library.
///
/// Every command names itself (`commandName:`): a name left to ArgumentParser is derived from
/// `String(describing:)` of the command's type, a runtime lookup through every protocol
/// conformance of the binary, at each start of every job (16 M instructions of a people-20k run's
/// 1,870 M under callgrind).
@main
struct IngotCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ingot",
        abstract: "Ingest paginated JSON into SQLite with identity (find-or-create) semantics.",
        discussion:
            "Every option can also be set by an environment variable (INGOT_DB, INGOT_LOG_FORMAT, …; see docs/operations.md); the option wins.",
        subcommands: [
            Run.self, Init.self, Replay.self, Validate.self, Schema.self, Export.self, Runs.self, Rejects.self, Archive.self,
            BenchDecode.self, BenchFetch.self,
        ])

    /// Parses and runs, with one exit code for every usage problem: 2 (ArgumentParser's own is 64).
    static func main() {
        #if canImport(Glibc)
            // Two malloc arenas unless the environment says otherwise (as the image does): with
            // glibc's default (8 per core) memory freed on one stage's thread stays in that
            // thread's arena — people-1M peaked at 188–197 MiB instead of 145–151 (paired, time
            // within the noise). Before the first thread; `MALLOC_ARENA_MAX` set wins.
            if getenv("MALLOC_ARENA_MAX") == nil { _ = glibcMallopt(glibcArenaMax, 2) }
        #endif
        // A closed pipe on stdout or stderr is an EPIPE that StandardStream counts, not a signal
        // that kills the run mid-transaction.
        signal(SIGPIPE, SIG_IGN)
        // Started with stdin, stdout or stderr closed (`2>&-`): /dev/null takes the number, so
        // that no file Ingot opens (the archive, a staging file) gets it and receives log lines.
        for fd: Int32 in 0...2 where fcntl(fd, F_GETFD) == -1 {
            _ = open("/dev/null", O_RDWR)
        }
        do {
            var command = try parseAsRoot()
            try command.run()
        } catch {
            let code = exitCode(for: error)
            if code == .validationFailure {
                // The message as ArgumentParser prints it, then Ingot's code for bad usage.
                StandardStream.standardError(fullMessage(for: error) + "\n")
                Foundation.exit(Exit.badConfig.rawValue)
            }
            exit(withError: error)
        }
    }
}

struct Validate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "validate", abstract: "Check a pipeline file; print its problems as file:line:column.")

    @Argument(help: "The pipeline file.")
    var pipeline: String

    func run() throws {
        let config = try loadPipeline(pipeline)
        print("\(pipeline): ok (pipeline \(config.name), \(config.model.entities.count) entities, \(config.shownRoot))")
    }
}

struct Schema: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schema",
        abstract: "Print the SQL schema a pipeline creates, or the migration it would apply to an existing database.")

    @Argument(help: "The pipeline file.")
    var pipeline: String

    @Option(
        help:
            "A database (a SQLite path or a postgresql:// URL; env INGOT_DB): its backend's DDL, or, when it exists, only what a run would add to it (nothing is written)."
    )
    var db: String?

    @Flag(
        help:
            "PostgreSQL: print the statements that declare the pipeline's relations as foreign keys (Ingot declares none there: each would be checked at every link written; docs/stores.md). SQLite declares them in its tables."
    )
    var foreignKeys = false

    func run() throws {
        let config = try loadPipeline(pipeline)
        if foreignKeys {
            for statement in ForeignKey.postgresStatements(of: config.model) { print(statement + ";") }
            return
        }
        do {
            guard let given = db ?? Environment.string("INGOT_DB") else {
                for statement in try StoreLocation("ingot.db").schema(of: config.model) { print(statement + ";") }
                return
            }
            let location = try StoreLocation(given)
            let plan: (exists: Bool, conflicts: [String], statements: [String])
            do {
                plan = try location.plan(model: config.model)
            } catch {
                // A server database not created yet (or not reachable): its backend's whole DDL.
                printError("\(location): \(error); the whole schema follows")
                for statement in try location.schema(of: config.model) { print(statement + ";") }
                return
            }
            guard plan.exists else {
                for statement in try location.schema(of: config.model) { print(statement + ";") }
                return
            }
            if !plan.conflicts.isEmpty {
                printError(
                    "the database's tables disagree with the pipeline; a run would write nothing:\n  "
                        + plan.conflicts.joined(separator: "\n  "))
                throw Exit.badConfig
            }
            print(plan.statements.isEmpty ? "-- \(location): up to date with the pipeline" : "-- \(location): a run would apply")
            for statement in plan.statements { print(statement + ";") }
        } catch let exit as ExitCode {
            throw exit
        } catch {
            printError("\(error)")
            throw Exit.badConfig
        }
    }
}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "run", abstract: "Run a pipeline into a database (SQLite; see --db).")

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

    @Option(
        name: .customLong("resource"),
        help:
            "Run only this resource of a pipeline with resources: (repeat for several; the resources a for_each reads are read, not stored)."
    )
    var resources: [String] = []

    @Option(help: "Share the run of this name with every job started with it (PostgreSQL only; env INGOT_JOIN). See docs/scale-out.md.")
    var join: String?

    @Option(
        help: "Seconds a joined job's claim on a unit lasts; a killed job's units are taken over after it (env INGOT_LEASE; default 30).")
    var lease: Double?

    @OptionGroup var log: LogOptions

    mutating func validate() throws {
        pipeline = pipeline ?? Environment.string("INGOT_PIPELINE")
        guard pipeline != nil else { throw ValidationError("missing the pipeline file (an argument, or INGOT_PIPELINE)") }
        pages = pages ?? Environment.string("INGOT_PAGES")
        archiveDir = archiveDir ?? Environment.string("INGOT_ARCHIVE_DIR")
        noArchive = try noArchive || Environment.flag("INGOT_NO_ARCHIVE")
        resume = try resume || Environment.flag("INGOT_RESUME")
        join = join ?? Environment.string("INGOT_JOIN")
        lease = try lease ?? Environment.double("INGOT_LEASE")
        if let lease, !(lease >= 0.3 && lease <= 3600) { throw ValidationError("--lease must be between 0.3 and 3600 seconds") }
        if let join {
            if join.isEmpty || join.utf8.count > 200 { throw ValidationError("--join needs a name of 1 to 200 bytes") }
            if resume {
                throw ValidationError("--join and --resume cannot be combined: join the run again with the same name to continue it")
            }
        }
    }

    func run() throws {
        let pipeline = self.pipeline ?? ""
        var config = try loadPipeline(pipeline)
        if !resources.isEmpty {
            do {
                config = try config.selectingResources(resources)
            } catch {
                printError("\(error)")
                throw Exit.badConfig
            }
        }
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
        options.join = join
        if let lease { options.lease = lease }
        try runHandlingSignals(config, options: options, logger: logger, stages: stages, source: source)
    }

    /// `--dry-run`: what the run would read, where it would write, and the schema statements it
    /// would apply. Nothing is fetched, no file is created. Exit 2 when the database would refuse
    /// the run.
    private func printPlan(_ config: PipelineConfig) throws {
        var options = stages.runOptions
        options.join = join
        let maxPageBytes = stages.maxPageBytes ?? config.maxPageBytes ?? RunOptions.defaultMaxPageBytes
        print(
            "pipeline \(config.name) (\(pipeline ?? "")): \(config.shownRoot), write \(config.write.rawValue), \(config.model.entities.count) entities"
        )
        func files(_ dir: String, _ glob: String) {
            let count = (try? DirectoryPageSource(directory: dir, glob: glob).files.count).map(String.init) ?? "unreadable"
            print("source: files \(dir)/\(glob) (\(count) files)")
        }
        if config.hasSeveralResources {
            for resource in config.resources {
                let role = resource.rootChoice?.description ?? resource.root.map { "root \($0)" } ?? "read only, drives a for_each"
                if let forEach = resource.forEach {
                    print(
                        "resource \(resource.name) (\(role)): for_each record of \(forEach.resource), \(forEach.isURL ? "url" : "path") \(forEach.template), \(forEach.http.paginate)"
                    )
                } else if case .http(let http) = resource.source {
                    print("resource \(resource.name) (\(role)): http \(ArchiveReader.printable(http.shownURL)), \(http.paginate)")
                } else if case .files(let dir, let glob) = resource.source {
                    print("resource \(resource.name) (\(role)): files \(dir)/\(glob)")
                }
            }
        } else {
            printSource(config, files: files)
        }
        if let location = try? options.location.get() {
            // The run's plan, as the run decides it (RunPlan): a refused join exits 2 here too.
            let plan = RunPlan.make(config, options, fetching: config.fetches(pages: pages), backend: location.backend)
            for line in plan.lines { print(line) }
            if plan.joinRefusal != nil { throw Exit.badConfig }
        }
        try printRest(config, options: options, maxPageBytes: maxPageBytes)
    }

    private func printSource(_ config: PipelineConfig, files: (String, String) -> Void) {
        switch (pages, config.source) {
        case (let dir?, .files(_, let glob)): files(dir, glob)
        case (let dir?, _): files(dir, "*.json")
        case (nil, .files(let dir, let glob)): files(dir, glob)
        case (nil, .http(let http)):
            print(
                "source: http \(ArchiveReader.printable(http.shownURL)), \(http.paginate), concurrency \(http.concurrency), max_pages \(http.maxPages)"
                    + (http.allowedHosts.isEmpty ? "" : ", allowed_hosts \(http.allowedHosts.joined(separator: ","))"))
        case (nil, .none):
            print("source: none (give --pages DIR)")
        }
    }

    private func printRest(_ config: PipelineConfig, options: RunOptions, maxPageBytes: Int) throws {
        print("archive: \(noArchive ? "off" : (archiveDir ?? "archives") + "/")")
        print(
            "limits: max_page_bytes \(maxPageBytes), bytes_in_flight \(options.bytesInFlight), batch_records \(options.shownBatchRecords(of: config)), lanes \(options.lanes)"
        )
        let location: StoreLocation
        do {
            location = try options.location.get()
        } catch {
            printError("\(error)")
            throw Exit.badConfig
        }
        let plan = try location.plan(model: config.model)
        print("database: \(location) (\(plan.exists ? "exists" : "new"))")
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
        do {
            return try config.makeSource(
                pages: pages, database: try stages.runOptions.location.get(),
                maxPageBytes: stages.maxPageBytes ?? config.maxPageBytes ?? RunOptions.defaultMaxPageBytes, logger: logger)
        } catch let error as SourceError where config.source == .none {
            throw ValidationError("\(pipeline ?? ""): \(error.message)")
        }
    }
}

struct Replay: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
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
        let reader = try openArchive(archive)
        warnIfTorn(reader, logger)
        let config: PipelineConfig
        if let pipeline {
            config = try loadPipeline(pipeline)
        } else {
            do {
                config = try PipelineConfig.parse(
                    text: reader.header.pipelineText, path: "\(archive) (pipeline \(reader.header.pipelinePath))", readsSource: false)
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
        logger.warning(
            "archive.torn",
            metadata: [
                LogKey.archive: "\(reader.path)", LogKey.offset: .int(torn), LogKey.reason: "\(reader.tornReason ?? "")",
                "entries": .int(reader.entries.count),
            ])
    }
}

struct Archive: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "archive", abstract: "Inspect run archives.", subcommands: [List.self, Cat.self, Verify.self])

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "One line per entry.")

        @Argument(help: "The archive file.")
        var archive: String

        func run() throws {
            let reader = try openArchive(archive)
            // Everything printed comes from the file: control characters are escaped.
            let h = reader.header
            func safe(_ s: String) -> String { ArchiveReader.printable(s) }
            print("# run \(safe(h.runID)) pipeline \(safe(h.pipelineName)) created \(safe(h.createdAt)) entries \(reader.entries.count)")
            for entry in reader.entries {
                let m = entry.metadata
                let compressed = entry.frameLength
                print(
                    "\(m.seq)\t\(safe(m.fetchedAt))\t\(m.httpStatus.map(String.init) ?? "-")\t\(m.rawLength)\t\(compressed)\t\(String(m.crc32c, radix: 16))\t\(safe(m.source))"
                )
            }
            if let torn = reader.tornAt {
                printError(
                    "warning: \(archive): \(reader.tornReason ?? "damaged") at byte \(torn); \(reader.entries.count) whole entries before it"
                )
            }
        }
    }

    struct Cat: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "cat", abstract: "Write an entry's raw payload to standard output.")

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
                StandardStream.write(try reader.payload(of: entry), to: 1)
            } catch let error as ArchiveError {
                printError("\(error)")
                throw Exit.failed
            }
        }
    }

    struct Verify: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "verify", abstract: "Check every entry's checksum; exit 1 at the first mismatch.")

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
        print(
            String(
                format: "parse: %.1f MB/s (%.3f s)  parse+map: %.1f MB/s, %.0f records/s (%.3f s)",
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
        let source = try HTTPPageSource(config: http, framing: config.framing, logger: Logger(label: "bench"))
        let clock = ContinuousClock()
        let start = clock.now
        var pages = 0
        var bytes = 0
        while let page = try source.next() {
            pages += 1
            bytes += page.bytes.count
        }
        let elapsed = clock.now - start
        let seconds = elapsed.inSeconds
        print(
            String(
                format: "fetch: %d pages, %.1f MB in %.3f s: %.0f pages/s, %.1f MB/s",
                pages, Double(bytes) / 1e6, seconds, Double(pages) / seconds, Double(bytes) / 1e6 / seconds))
    }
}
