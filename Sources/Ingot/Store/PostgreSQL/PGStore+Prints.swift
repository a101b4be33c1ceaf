import Foundation

/// Page prints for refreshes (``PrintKeeping``), in `_ingot_print_runs` and `_ingot_page_prints`.
extension PGStore: PrintKeeping {
    /// Forgets the prints: a run begins, resumes or is revived (in that statement's transaction).
    static func forgetPrints(on connection: PGConnection) throws {
        try connection.execute("DELETE FROM _ingot_print_runs")
    }

    func previousPrints(pipeline: String, fingerprint: String) throws -> PreviousPrints? {
        guard
            let runID = try connection.execute(
                "SELECT run_id FROM _ingot_print_runs WHERE pipeline = $1 AND fingerprint = $2", [pipeline, fingerprint]
            ).first?[0]
        else { return nil }
        // Each footprint checked here, read again by page on a connection of the plan's own.
        let rows = try connection.execute(
            "SELECT seq, digest, records, clean, footprint FROM _ingot_page_prints WHERE run_id = $1 ORDER BY seq", [runID])
        let prints = rows.map { row in
            PagePrint(
                stored: row[0].flatMap { Int($0) } ?? 0, digest: row[1].flatMap(PGConnection.bytea(fromText:)),
                records: row[2].flatMap { Int($0) }, clean: row[3].map { $0 == "t" },
                footprint: row[4].flatMap(PGConnection.bytea(fromText:))
            )
        }
        let reader = PrintReader(connection: try PGConnection(url: url, role: .tool))
        return PreviousPrints(runID: runID, rows: prints) { seq in
            try reader.footprint(runID: runID, seq: seq)
        }
    }

    func savePrints(_ prints: PrintSpool, runID: String, pipeline: String, fingerprint: String) throws -> Bool {
        try connection.transaction {
            try connection.execute("DELETE FROM _ingot_page_prints")
            try PGStore.forgetPrints(on: connection)
            // Kept only when no other run (another pipeline's, a joined one) is running, or began
            // or ended while this one ran: it may have written rows the prints do not know of.
            let kept = try connection.changes(
                """
                INSERT INTO _ingot_print_runs (run_id, pipeline, fingerprint)
                  SELECT $1, $2, $3 WHERE NOT EXISTS (
                    SELECT 1 FROM _ingot_runs other, _ingot_runs this WHERE this.run_id = $1 AND other.run_id <> this.run_id
                      AND (other.status = 'running' OR other.started_at >= this.started_at OR other.finished_at > this.started_at))
                """, [runID, pipeline, fingerprint])
            guard kept == 1 else { return false }
            // Streamed from the spool in pieces of a megabyte or so.
            let sql = "COPY _ingot_page_prints (run_id, seq, digest, records, clean, footprint) FROM STDIN"
            try connection.beginCopy(sql)
            var data: [UInt8] = []
            try prints.readBack { print in
                let values: [ScalarValue] = [
                    .text(runID), .integer(Int64(print.seq)), .text(PGConnection.byteaText(print.digest)),
                    .integer(Int64(print.records)), .bool(print.clean), .text(PGConnection.byteaText(print.footprint)),
                ]
                PGStore.appendCopyRow(values, to: &data)
                if data.count >= 1 << 20 {
                    try connection.putCopyData(data, sql: sql)
                    data.removeAll(keepingCapacity: true)
                }
            }
            if !data.isEmpty { try connection.putCopyData(data, sql: sql) }
            try connection.endCopy(sql)
            return true
        }
    }
}

/// The plan's own connection, reading stored footprints by page from the source queue (one
/// caller at a time: the source queue's loop).
private final class PrintReader: @unchecked Sendable {  // called from the source queue only
    private let connection: PGConnection

    init(connection: PGConnection) {
        self.connection = connection
    }

    func footprint(runID: String, seq: Int) throws -> [UInt8] {
        guard
            let text = try connection.execute(
                "SELECT footprint FROM _ingot_page_prints WHERE run_id = $1 AND seq = $2", [runID, String(seq)]
            ).first?[0],
            let bytes = PGConnection.bytea(fromText: text)
        else { throw PageFootprint.Malformed() }
        return bytes
    }
}
