import Logging

/// What the writer stage does with a run's rejections beyond counting them: which are stored
/// (``RejectionCaps``, `--max-reject-rows`) and which logged a line each, and the warnings that
/// say when either stops. Confined to the writer's queue, as the stage is.
struct RunRejections {
    private var caps: RejectionCaps
    /// The run's archive, named by the `rejects.truncated` warning.
    private let archivePath: String?
    private let logger: Logger

    init(caps: RejectionCaps, archivePath: String?, logger: Logger) {
        self.caps = caps
        self.archivePath = archivePath
        self.logger = logger
    }

    /// The rejections of a batch that still fit under `--max-reject-rows`; the first time some do
    /// not, a `rejects.truncated` warning (once per process: the counts keep every one).
    mutating func storable(_ rejections: [RecordRejection]) -> [RecordRejection] {
        let (rows, firstTruncation) = caps.storable(rejections)
        if firstTruncation {
            var metadata: Logger.Metadata = [
                "max_reject_rows": .int(caps.maxRows),
                LogKey.reason:
                    "further rejections are counted per reason and entity, not stored in _ingot_rejects; the archive holds every page",
            ]
            if let archivePath { metadata[LogKey.archive] = "\(archivePath)" }
            logger.warning("rejects.truncated", metadata: metadata)
        }
        return rows
    }

    /// `count` rejections were stored (up to the cap).
    mutating func stored(_ count: Int) { caps.stored(count) }

    /// Logs each of `rejections` a line, up to the run's limit; says once that the rest are not.
    mutating func log(_ rejections: [RecordRejection]) {
        let (lines, limitReached) = caps.loggable(rejections)
        for r in lines {
            var metadata: Logger.Metadata = [
                LogKey.entity: "\(r.entity)", LogKey.codingPath: "\(r.codingPath)", LogKey.reason: "\(r.reason)",
                LogKey.source: "\(r.source)",
            ]
            if let archive = r.archive { metadata[LogKey.archive] = "\(archive)" }
            if let index = r.recordIndex {
                metadata[LogKey.recordIndex] = .int(index)
                logger.warning("record.rejected", metadata: metadata)
            } else {
                metadata[LogKey.bytes] = .int(r.rawLength)
                logger.warning("page.rejected", metadata: metadata)
            }
        }
        if limitReached {
            logger.warning(
                "record.rejected.more",
                metadata: [
                    LogKey.reason: "further rejections are counted and stored in _ingot_rejects (up to --max-reject-rows), not logged"
                ])
        }
    }
}
