/// The search for the writes a database refuses among many (docs/reliability.md, "Values a
/// database refuses"): the whole range is tried; a range refused whole is halved, each half
/// tried the same way, down to single elements, which are left out with the database's
/// message. About 2 log2(n) attempts for one refused element among n — a price paid only on
/// this slow path, after a fast write of the whole range failed.
///
/// Used for a batch's records (the writer stage) and for the rows of a staged copy
/// (`PGStagedCopy`): one halving, whatever is halved.
enum RefusalSearch {
    /// Tries `range` with `attempt`, which writes the elements of a range under its own
    /// savepoint and returns the database's refusal (the range undone), or `nil` once written;
    /// any other failure it throws, and the search stops. Each element refused alone goes to
    /// `refused` with the message.
    static func run(
        _ range: Range<Int>, attempt: (Range<Int>) throws -> String?, refused: (_ element: Int, _ message: String) throws -> Void
    ) throws {
        guard !range.isEmpty, let message = try attempt(range) else { return }
        guard range.count > 1 else { return try refused(range.lowerBound, message) }
        let middle = range.lowerBound + range.count / 2
        try run(range.lowerBound..<middle, attempt: attempt, refused: refused)
        try run(middle..<range.upperBound, attempt: attempt, refused: refused)
    }
}
