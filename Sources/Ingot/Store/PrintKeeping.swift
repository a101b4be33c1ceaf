import Foundation

/// A store that keeps a finished run's page prints, so that the next run of the same pipeline
/// over the same pages can leave out what cannot change (``RefreshPlan``). SQLite and PostgreSQL
/// keep them in `_ingot_print_runs` (the one run whose prints stand, with its pipeline file's
/// fingerprint) and `_ingot_page_prints` (a row per page: digest, records, clean, footprint).
///
/// Prints describe the database only until something else writes it: every run that begins or
/// resumes — any pipeline, any job — forgets them (``forgetPrints(in:)``, in the statement that
/// records the run), and prints are kept only for a run no other run overlapped.
protocol PrintKeeping {
    /// The prints of the last run of `pipeline`, if they still stand and were made with the same
    /// pipeline file (`fingerprint`); `nil` otherwise, or when a stored print cannot be read.
    func previousPrints(pipeline: String, fingerprint: String) throws -> PreviousPrints?
    /// Keeps `prints` for the finished run `runID`, replacing any others — unless another run
    /// began, or ended, while it ran. Whether they were kept.
    func savePrints(_ prints: [PagePrint], runID: String, pipeline: String, fingerprint: String) throws -> Bool
}

extension PagePrint {
    /// A print as a store reads it back: `nil` when any field is not what ``PrintKeeping`` wrote.
    init?(seq: Int, digest: [UInt8]?, records: Int?, clean: Bool?, footprint: [UInt8]?) {
        guard let digest, digest.count == 32, let records, records >= 0, let clean, let footprint,
            (try? PageFootprint(decoding: footprint)) != nil
        else { return nil }
        self.init(seq: seq, digest: digest, records: records, clean: clean, footprint: footprint)
    }
}

extension PreviousPrints {
    /// The prints of run `runID` as stored, in `seq` order: `nil` unless they are pages 1…n, each
    /// readable (a damaged print makes the run read every page).
    init?(runID: String, rows: [PagePrint?]) {
        var prints: [PagePrint] = []
        for (k, row) in rows.enumerated() {
            guard let row, row.seq == k + 1 else { return nil }
            prints.append(row)
        }
        self.init(runID: runID, prints: prints)
    }
}
