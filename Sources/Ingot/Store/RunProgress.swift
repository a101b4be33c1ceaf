import Foundation

/// A run that stopped before the end of its source.
public struct UnfinishedRun: Sendable {
    /// Its id: a resumed run keeps it.
    public var runID: String
    /// Its counters as last committed.
    public var counters: RunCounters
    /// The last page committed.
    public var lastSeq: Int
    /// Where its source continues; `nil` when no batch was committed.
    public var resumeState: String?

    /// An unfinished run as a store read it.
    public init(runID: String, counters: RunCounters, lastSeq: Int, resumeState: String?) {
        self.runID = runID
        self.counters = counters
        self.lastSeq = lastSeq
        self.resumeState = resumeState
    }
}

/// What a batch's transaction records about its run, with its rows: a commit always describes
/// its last batch, so `--resume` continues exactly after it.
public struct RunProgress: Sendable {
    /// The run the batch belongs to.
    public var runID: String
    /// The run's counters including this batch.
    public var counters: RunCounters
    /// The last whole page the batch completes (`nil`: it ends inside a page).
    public var lastSeq: Int?
    /// Where the source continues after that page.
    public var resumeState: String?
    /// The batch's rejections, stored in `_ingot_rejects`.
    public var rejections: [RecordRejection]
    /// Values kept across runs (the incremental cursor), by pipeline and key.
    public var kept: [(pipeline: String, key: String, value: String)] = []
    /// A joined run's batch: per replaced entity with a `scope:` (by index), the values its
    /// records gave the scope column. A store keeps them with the units until the run's end,
    /// where `write: replace` deletes within every value any job's units gave.
    public var scopeValues: [Int: Set<ScalarValue>] = [:]
}

extension Date {
    /// The instant as the stores' run bookkeeping and the archive's entries write it: ISO-8601
    /// in UTC, milliseconds (rounded half up), as `ISO8601DateFormatter` with
    /// `[.withInternetDateTime, .withFractionalSeconds]` writes it — composed here, since that
    /// formatter, made anew for each archived page, was 2 % of a staged load's CPU before its
    /// merge (people-200k; `ArchiveTests`' timestamp test).
    var runTimestamp: String {
        let milliseconds = (timeIntervalSince1970 * 1000).rounded()
        guard milliseconds.magnitude < 1e15 else { return "0000-01-01T00:00:00.000Z" }
        let total = Int64(milliseconds)
        var seconds = time_t(total >= 0 ? total / 1000 : (total - 999) / 1000)
        let millis = Int(total - Int64(seconds) * 1000)
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return "0000-01-01T00:00:00.000Z" }
        func digits(_ value: Int32, _ count: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, count - text.count)) + text
        }
        return digits(parts.tm_year + 1900, 4) + "-" + digits(parts.tm_mon + 1, 2) + "-" + digits(parts.tm_mday, 2) + "T"
            + digits(parts.tm_hour, 2) + ":" + digits(parts.tm_min, 2) + ":" + digits(parts.tm_sec, 2) + "."
            + digits(Int32(millis), 3) + "Z"
    }
}
