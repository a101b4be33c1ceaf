/// How many of a run's rejections are stored and logged: every rejection is counted (per reason
/// and entity, in the run's counters); the first `--max-reject-rows` are stored in
/// `_ingot_rejects` (a resumed run's earlier ones included), the first `loggedRejectionLimit`
/// logged one line each. A value the writer stage asks, tested alone (`RejectionCapsTests`).
struct RejectionCaps: Equatable {
    /// Rejections stored at most (`--max-reject-rows`).
    let maxRows: Int
    /// Rejections logged at most, a line each.
    let logLimit: Int
    /// Rejections stored so far.
    private(set) var storedRows: Int
    /// Rejections logged so far.
    private(set) var logged = 0
    /// Whether some rejection was left unstored already (its warning is said once).
    private(set) var truncated = false

    init(maxRows: Int, logLimit: Int, alreadyStored: Int = 0) {
        self.maxRows = max(0, maxRows)
        self.logLimit = max(0, logLimit)
        storedRows = min(max(0, alreadyStored), self.maxRows)
    }

    /// The rejections of a batch that still fit under ``maxRows``; `firstTruncation`: some did
    /// not, for the first time in the run (say so once). Nothing is counted stored until
    /// ``stored(_:)``: a batch written again asks again.
    mutating func storable(_ rejections: [RecordRejection]) -> (rows: [RecordRejection], firstTruncation: Bool) {
        let room = maxRows - storedRows
        guard rejections.count > room else { return (rejections, false) }
        let first = !truncated
        truncated = true
        return (Array(rejections.prefix(max(0, room))), first)
    }

    /// `count` rejections were stored (up to the cap).
    mutating func stored(_ count: Int) { storedRows = min(maxRows, storedRows + count) }

    /// The rejections to log a line each, and whether the last of them reached ``logLimit`` (say
    /// once that the rest are not logged).
    mutating func loggable(_ rejections: [RecordRejection]) -> (lines: ArraySlice<RecordRejection>, limitReached: Bool) {
        let lines = rejections.prefix(max(0, logLimit - logged))
        logged += lines.count
        return (lines, !lines.isEmpty && logged == logLimit)
    }
}
