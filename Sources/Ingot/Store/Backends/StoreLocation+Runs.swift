import Foundation

/// One run as a database records it (`_ingot_runs`): what `ingot runs` lists.
package struct RunRecord: Sendable, Equatable {
    /// The run's id.
    package var runID: String
    /// The pipeline it ran (`swift.<entity>` for the Swift library's ingests).
    package var pipeline: String
    /// `running`, `finished`, `failed` or `interrupted` (a run killed outright stays `running`
    /// until `--resume` takes it up).
    package var status: String
    /// When it started and ended, ISO 8601 in UTC (`nil`: not ended).
    package var startedAt: String
    /// When it ended.
    package var finishedAt: String?
    /// Its archive file, when it kept one.
    package var archive: String?
    /// Its counters: pages, records, per entity, rejects by reason.
    package var counters: RunCounters
}

extension StoreLocation {
    /// The runs recorded here, oldest first; `pipeline` keeps one pipeline's. None in a
    /// database Ingot never wrote.
    package func runs(pipeline: String? = nil) throws -> [RunRecord] {
        let instant = AttributeType.date(.iso8601(timeZone: "UTC"))
        let columns: [EntityLayout.Column] = [
            .init(name: "run_id", type: .string), .init(name: "pipeline", type: .string), .init(name: "status", type: .string),
            .init(name: "started_at", type: instant), .init(name: "finished_at", type: instant), .init(name: "archive", type: .string),
            .init(name: "pages", type: .integer), .init(name: "records", type: .integer), .init(name: "inserted", type: .integer),
            .init(name: "updated", type: .integer), .init(name: "deleted", type: .integer),
            .init(name: "rejected_records", type: .integer), .init(name: "rejected_pages", type: .integer),
            .init(name: "entity_counts", type: .string), .init(name: "reject_counts", type: .string),
        ]
        var query = RowQuery(table: "_ingot_runs", columns: columns, tiebreak: ["run_id"])
        query.order = [RowQuery.Order(column: "started_at", descending: false, isText: false)]
        if let pipeline { query.filter = .compare(.column("pipeline"), .equal, .value(.text(pipeline))) }
        guard let rows = try selectIfIngot(query) else { return [] }
        return rows.map { row in
            func text(_ k: Int) -> String? { if case .text(let s) = row[k] { s } else { nil } }
            func int(_ k: Int) -> Int { if case .integer(let v) = row[k] { Int(v) } else { 0 } }
            var counters = RunCounters()
            (counters.pages, counters.records, counters.inserted, counters.updated, counters.deleted) = (
                int(6), int(7), int(8), int(9), int(10)
            )
            (counters.rejectedRecords, counters.rejectedPages) = (int(11), int(12))
            counters.readEntities(fromJSON: text(13))
            counters.rejectsByReason = RunCounters.rejects(fromJSON: text(14))
            return RunRecord(
                runID: text(0) ?? "", pipeline: text(1) ?? "", status: text(2) ?? "", startedAt: text(3) ?? "", finishedAt: text(4),
                archive: text(5), counters: counters)
        }
    }

    /// The rejections recorded here, in the order they were stored: of run `runID` (all runs
    /// when `nil`), of reason code `reason`, at most `limit`; each with its run's id.
    package func rejections(runID: String?, reason: String? = nil, limit: Int? = nil) throws -> [(runID: String, RecordRejection)] {
        guard let rows = try selectIfIngot(StoreLocation.rejectionsQuery(runID: runID, reason: reason, limit: limit)) else { return [] }
        return StoreLocation.rejections(rows)
    }

    /// Run `runID`'s rejections read through `reader` (a held transaction's, which sees its own
    /// runs before they commit).
    package static func rejections(runID: String, on reader: any RowReader) throws -> [RecordRejection] {
        rejections(try reader.select(rejectionsQuery(runID: runID, reason: nil, limit: nil))).map(\.1)
    }

    private static func rejectionsQuery(runID: String?, reason: String?, limit: Int?) -> RowQuery {
        let columns: [EntityLayout.Column] = [
            .init(name: "run_id", type: .string), .init(name: "entity", type: .string), .init(name: "coding_path", type: .string),
            .init(name: "reason", type: .string), .init(name: "source", type: .string), .init(name: "record_index", type: .integer),
            .init(name: "raw", type: .string), .init(name: "raw_length", type: .integer), .init(name: "reason_code", type: .string),
            .init(name: "archive", type: .string), .init(name: "archive_entry", type: .integer),
        ]
        var query = RowQuery(table: "_ingot_rejects", columns: columns)
        var conditions: [RowExpression] = []
        if let runID { conditions.append(.compare(.column("run_id"), .equal, .value(.text(runID)))) }
        if let reason { conditions.append(.compare(.column("reason_code"), .equal, .value(.text(reason)))) }
        query.filter = conditions.reduce(nil) { (all: RowExpression?, next) in all.map { .and($0, next) } ?? next }
        query.limit = limit
        query.storageOrder = true
        return query
    }

    private static func rejections(_ rows: [[ScalarValue]]) -> [(runID: String, RecordRejection)] {
        rows.map { row in
            func text(_ k: Int) -> String? { if case .text(let s) = row[k] { s } else { nil } }
            func int(_ k: Int) -> Int? { if case .integer(let v) = row[k] { Int(v) } else { nil } }
            return (
                text(0) ?? "",
                RecordRejection.stored(
                    entity: text(1) ?? "", codingPath: text(2) ?? "", reason: text(3) ?? "", source: text(4) ?? "", recordIndex: int(5),
                    raw: text(6) ?? "", rawLength: int(7), code: text(8), archive: text(9), entry: int(10))
            )
        }
    }

    /// `query`'s rows; `nil` when the database has no such table (Ingot never ran there).
    private func selectIfIngot(_ query: RowQuery) throws -> [[ScalarValue]]? {
        if case .sqlite(let path) = self, !StageFile.isInMemory(path), !FileManager.default.fileExists(atPath: path) { return nil }
        do {
            return try select(query)
        } catch {
            let text = "\(error)"
            if text.contains("no such table") || text.contains("does not exist") { return nil }
            throw error
        }
    }
}
