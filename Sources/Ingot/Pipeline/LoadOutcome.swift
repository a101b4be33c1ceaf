import Logging

/// What a run's load plan turned into, as its summary says it (`loaded=` in `run.summary`,
/// ``RunSummary/loaded``): the plan (``LoadPlan``) says how the run may write; this says how it
/// did — batch by batch throughout, staged from the first batch or after so many records, merged
/// or not, staging declined and why, or (a joined job) its rows exchanged between the jobs.
///
/// Kept by the writer stage from the store's ``LoadState`` each time it may have moved.
package struct LoadOutcome: Sendable, Equatable, CustomStringConvertible {
    /// Records saved when the load first turned staged (0: from the first batch); `nil`: never.
    private(set) var stagedAfter: Int?
    /// Rows the merges wrote into the tables, when a merge ran.
    private(set) var mergedRows: Int?
    /// Why the store declined to stage, when it did.
    private(set) var declined: String?
    /// A joined job whose rows went to the run's parts, written when every unit was done
    /// (docs/scale-out.md, "Rows exchanged between jobs").
    var exchanged = false

    /// Notes the store's load state after `records` records were saved.
    mutating func note(_ state: LoadState, records: Int) {
        switch state {
        case .staging:
            if stagedAfter == nil { stagedAfter = records }
        case .declined(let reason):
            declined = reason
        case .batchByBatch:
            break
        }
    }

    /// Notes a merge of `rows` rows into the tables.
    mutating func merged(rows: Int) {
        mergedRows = (mergedRows ?? 0) + rows
    }

    /// As the log says it (`run.summary`'s `loaded=` and the fields beside it, docs/logging.md):
    /// values, where ``description`` says it in words (``RunSummary/loaded``).
    package var logFields: Logger.Metadata {
        if exchanged { return ["loaded": "exchanged"] }
        guard let stagedAfter else {
            guard let declined else { return ["loaded": "batch_by_batch"] }
            return ["loaded": "batch_by_batch.declined", "staging_declined": "\(declined)"]
        }
        var fields: Logger.Metadata = ["loaded": stagedAfter == 0 ? "staged.first_batch" : "staged.after_records"]
        if stagedAfter > 0 { fields["staged_after_records"] = .int(stagedAfter) }
        if let mergedRows { fields["merged_rows"] = .int(mergedRows) }
        return fields
    }

    package var description: String {
        if exchanged { return "exchanged between the jobs, written part by part once every unit was done" }
        guard let stagedAfter else {
            return declined.map { "batch by batch (staging declined: \($0))" } ?? "batch by batch"
        }
        return (stagedAfter == 0 ? "staged from the first batch" : "batch by batch, then staged after \(stagedAfter) records")
            + (mergedRows.map { ", \($0) rows merged" } ?? ", not merged")
    }
}
