import Foundation
import GRDB

/// Page prints for refreshes (``PrintKeeping``), in `_ingot_print_runs` and `_ingot_page_prints`.
extension SQLiteStore: PrintKeeping {
    /// Forgets the prints: a run begins or resumes (called in the statement's transaction).
    static func forgetPrints(in db: Database) throws {
        try db.execute(sql: "DELETE FROM _ingot_print_runs")
    }

    func previousPrints(pipeline: String, fingerprint: String) throws -> PreviousPrints? {
        guard
            let runID = try dbQueue.read({ db in
                try String.fetchOne(
                    db, sql: "SELECT run_id FROM _ingot_print_runs WHERE pipeline = ? AND fingerprint = ?",
                    arguments: [pipeline, fingerprint])
            })
        else { return nil }
        // Read in one pass, each footprint checked and let go; read again by page (a connection
        // of the plan's own: the source queue asks while the writer writes).
        var prints: [PagePrint?] = []
        try dbQueue.read { db in
            let rows = try Row.fetchCursor(
                db, sql: "SELECT seq, digest, records, clean, footprint FROM _ingot_page_prints WHERE run_id = ? ORDER BY seq",
                arguments: [runID])
            while let row = try rows.next() {
                prints.append(
                    PagePrint(
                        stored: row[0], digest: (row[1] as Data?).map { [UInt8]($0) }, records: row[2], clean: row[3],
                        footprint: (row[4] as Data?).map { [UInt8]($0) }))
            }
        }
        var configuration = Configuration()
        configuration.readonly = true
        let reader = try DatabaseQueue(path: dbQueue.path, configuration: configuration)
        return PreviousPrints(runID: runID, rows: prints) { seq in
            guard
                let data = try reader.read({ db in
                    try Data.fetchOne(
                        db, sql: "SELECT footprint FROM _ingot_page_prints WHERE run_id = ? AND seq = ?", arguments: [runID, seq])
                })
            else { throw PageFootprint.Malformed() }
            return [UInt8](data)
        }
    }

    func savePrints(_ prints: PrintSpool, runID: String, pipeline: String, fingerprint: String) throws -> Bool {
        try writeTransaction { db in
            try db.execute(sql: "DELETE FROM _ingot_page_prints")
            try SQLiteStore.forgetPrints(in: db)
            // Kept only when no other run began or ended while this one ran.
            try db.execute(
                sql: """
                    INSERT INTO _ingot_print_runs (run_id, pipeline, fingerprint)
                      SELECT ?, ?, ? WHERE NOT EXISTS (
                        SELECT 1 FROM _ingot_runs other, _ingot_runs this WHERE this.run_id = ? AND other.run_id <> this.run_id
                          AND (other.started_at >= this.started_at OR other.finished_at > this.started_at))
                    """,
                arguments: [runID, pipeline, fingerprint, runID])
            guard db.changesCount == 1 else { return false }
            let insert = try db.makeStatement(
                sql: "INSERT INTO _ingot_page_prints (run_id, seq, digest, records, clean, footprint) VALUES (?, ?, ?, ?, ?, ?)")
            try prints.readBack { print in
                try insert.execute(arguments: [
                    runID, print.seq, Data(print.digest), print.records, print.clean, Data(print.footprint),
                ])
            }
            return true
        }
    }
}
