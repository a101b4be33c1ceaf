import Foundation
import Logging

extension PipelineConfig {
    /// The page source the pipeline file names (`source:`): its files, or HTTP with the
    /// incremental cursor kept by the last run in `database`; `pages` (`--pages DIR`) replaces
    /// either with a directory's `*.json` files. Refused: no source and no `pages`.
    package func makeSource(
        pages: String? = nil, database: StoreLocation?, maxPageBytes: Int,
        environment: [String: String] = ProcessInfo.processInfo.environment, syncFromStart: Bool = false,
        logger: Logger
    ) throws -> any PageSource {
        if hasSeveralResources {
            if pages != nil { throw SourceError(source: path, message: "--pages reads one directory; this pipeline has several resources") }
            return ResourcesPageSource(config: self, environment: environment, maxPageBytes: maxPageBytes, logger: logger)
        }
        switch source {
        case .files(let dir, let glob):
            return try DirectoryPageSource(directory: pages ?? dir, glob: glob, maxPageBytes: maxPageBytes)
        case .none:
            guard let pages else { throw SourceError(source: path, message: "the pipeline has no source; give --pages DIR") }
            return try DirectoryPageSource(directory: pages, glob: "*.json", maxPageBytes: maxPageBytes)
        case .http(let http):
            if let pages {
                return try DirectoryPageSource(directory: pages, glob: "*.json", maxPageBytes: maxPageBytes)
            }
            var query: [(String, String)] = []
            if let incremental, let database,
                let value = try database.keptValue(model: model, pipeline: name, key: "incremental:" + incremental.param)
            {
                query.append((incremental.param, value))
            }
            let source = try HTTPPageSource(
                config: http, framing: framing, environment: environment, query: query, maxPageBytes: maxPageBytes,
                logger: logger)
            if http.syncURL != nil, !syncFromStart, let database,
                let state = try database.keptValue(model: model, pipeline: name, key: PipelineConfig.syncKey)
            {
                try source.startSync(from: state)
            }
            return source
        }
    }

    /// The key a sync pipeline's next URL is kept under (``HTTPSourceConfig/syncURL``).
    package static let syncKey = "sync:next_url"

    /// Whether the source ``makeSource(pages:database:maxPageBytes:environment:logger:)`` makes
    /// fetches (HTTP, several resources) rather than reading local pages: what the load plan is
    /// decided from (``PipelineRunner/loadPlan(_:_:fetching:backend:)``), as `--dry-run` asks it.
    package func fetches(pages: String?) -> Bool {
        guard pages == nil else { return false }
        if hasSeveralResources { return true }
        if case .http = source { return true }
        return false
    }
}

extension PipelineRunner {
    /// Runs the pipeline over the source its file names (``PipelineConfig/makeSource(pages:database:maxPageBytes:environment:logger:)``)
    /// into the database ``RunOptions/databasePath`` names. A source that cannot be made (no
    /// `source:`, a credential missing from the environment) is a failed run that did nothing.
    public func run() -> RunSummary {
        do {
            return run(
                source: try config.makeSource(
                    database: try options.location.get(), maxPageBytes: maxPageBytes, syncFromStart: options.fullRefresh, logger: logger))
        } catch {
            var logger = self.logger
            logger[metadataKey: LogKey.pipeline] = "\(config.name)"
            logger.error("run.failed", metadata: [LogKey.error: "\(error)"])
            var summary = RunSummary(
                runID: "-", pipeline: config.name, status: .failed, counters: RunCounters(), duration: 0, error: "\(error)")
            summary.failureKind = .configuration
            PipelineRunner.logSummary(summary, logger)
            return summary
        }
    }
}
