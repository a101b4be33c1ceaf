import ArgumentParser
import Dispatch
import Foundation
import Ingot
import Logging
import Synchronization

/// Exit codes a scheduler can act on (docs/operations.md has the table): 0 finished, 1 failed
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
    StandardStream.standardError(message + "\n")
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
        StandardStream.standardError("\(error)\n")
        throw Exit.badConfig
    }
}

/// Opens the archive at `path`, printing why and exiting 1 when it cannot be read.
func openArchive(_ path: String) throws -> ArchiveReader {
    do {
        return try ArchiveReader(path: path)
    } catch {
        printError("\(error)")
        throw Exit.failed
    }
}
