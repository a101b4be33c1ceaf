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
    /// Keeps the spooled `prints` for the finished run `runID`, replacing any others — unless
    /// another run began, or ended, while it ran. Whether they were kept.
    func savePrints(_ prints: PrintSpool, runID: String, pipeline: String, fingerprint: String) throws -> Bool
}

extension PagePrint {
    /// A print as a store reads it back: `nil` when any field is not what ``PrintKeeping`` wrote.
    /// Its footprint is checked and let go (``PreviousPrints/footprint`` reads it again when a
    /// page needs it): a run of millions of records does not hold them all.
    init?(stored seq: Int, digest: [UInt8]?, records: Int?, clean: Bool?, footprint: [UInt8]?) {
        guard let digest, digest.count == 32, let records, records >= 0, let clean, let footprint,
            (try? PageFootprint(decoding: footprint)) != nil
        else { return nil }
        self.init(seq: seq, digest: digest, records: records, clean: clean, footprint: [])
    }
}

extension PreviousPrints {
    /// The prints of run `runID` as stored, in `seq` order: `nil` unless they are pages 1…n, each
    /// readable (a damaged print makes the run read every page).
    init?(runID: String, rows: [PagePrint?], footprint: @escaping @Sendable (Int) throws -> [UInt8]) {
        var prints: [PagePrint] = []
        for (k, row) in rows.enumerated() {
            guard let row, row.seq == k + 1 else { return nil }
            prints.append(row)
        }
        self.init(runID: runID, prints: prints, footprint: footprint)
    }
}

/// A run's page prints, spooled to a file of the job's own (the temporary directory, removed when
/// the spool is freed) as the writer saves pages, and read back in order when the run keeps them:
/// a run of ten million records holds none of them in memory.
///
/// Each print: `seq`, the digest's length and bytes, `records`, `clean` (a byte), the
/// footprint's length and bytes — varints (``Varint``). Used by one queue at a time (the writer's,
/// then the runner's once the writer is done).
final class PrintSpool: @unchecked Sendable {  // the writer's queue, then the runner's after it
    let path: String
    private var file: UnsafeMutablePointer<FILE>?
    /// Prints spooled, and their bytes.
    private(set) var count = 0
    private(set) var bytes = 0

    /// A new, empty spool; throws when the temporary directory cannot take it.
    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("ingot-prints-\(UUID().uuidString).bin").path
        guard let file = fopen(path, "w+") else {
            throw SpoolError(message: "cannot create the prints spool \(path): \(String(cString: strerror(errno)))")
        }
        self.file = file
    }

    deinit {
        if let file { fclose(file) }
        unlink(path)
    }

    /// Appends a print; throws when the file cannot take it.
    func append(_ print: PagePrint) throws {
        var record: [UInt8] = []
        record.reserveCapacity(print.footprint.count + 48)
        Varint.append(UInt64(print.seq), to: &record)
        Varint.append(UInt64(print.digest.count), to: &record)
        record += print.digest
        Varint.append(UInt64(print.records), to: &record)
        record.append(print.clean ? 1 : 0)
        Varint.append(UInt64(print.footprint.count), to: &record)
        record += print.footprint
        guard let file, record.withUnsafeBytes({ fwrite($0.baseAddress, 1, $0.count, file) }) == record.count else {
            throw SpoolError(message: "cannot write the prints spool \(path): \(String(cString: strerror(errno)))")
        }
        count += 1
        bytes += record.count
    }

    /// Reads every print back, in order.
    func readBack(_ body: (PagePrint) throws -> Void) throws {
        guard let file else { return }
        fflush(file)
        rewind(file)
        defer { fseek(file, 0, SEEK_END) }
        func varint() throws -> Int {
            var result: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let c = getc(file)
                guard c != EOF, shift < 64 else { throw SpoolError(message: "the prints spool \(path) is cut short") }
                result |= UInt64(c & 0x7F) << shift
                if c < 0x80 { return Int(truncatingIfNeeded: result) }
                shift += 7
            }
        }
        func read(_ n: Int) throws -> [UInt8] {
            guard n >= 0 else { throw SpoolError(message: "the prints spool \(path) is damaged") }
            var out = [UInt8](repeating: 0, count: n)
            guard n == 0 || out.withUnsafeMutableBytes({ fread($0.baseAddress, 1, n, file) }) == n else {
                throw SpoolError(message: "the prints spool \(path) is cut short")
            }
            return out
        }
        for _ in 0..<count {
            let seq = try varint()
            let digest = try read(try varint())
            let records = try varint()
            let clean = try read(1) == [1]
            let footprint = try read(try varint())
            try body(PagePrint(seq: seq, digest: digest, records: records, clean: clean, footprint: footprint))
        }
    }
}

/// The prints spool's file failed: the run keeps no prints (the next run reads every page).
struct SpoolError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
