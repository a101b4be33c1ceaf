import Foundation

/// What one ``IngestStore/write(_:then:)`` did, handed to its `then` (inside the write's
/// transaction) — or a staged load's merge (``IngestStore/mergeStaged(fills:stored:refused:)``:
/// per entity the rows inserted and the stubs among them, and its retries).
public struct WriteResult: Sendable {
    /// Per entity (by index), what the write did when the store counted it itself; `nil`: as the
    /// batch's resolver counted (from its lookups). Several jobs writing one run (PostgreSQL,
    /// `--join`) may create the same row at once: only the database knows which job inserted it.
    public var counts: [EntityCounts]?
    /// Per entity (by index), the positions in the batch's rows (``ResolvedBatch/rows(of:)``) of
    /// the stored rows the write found equal to what the batch gives — every present column and
    /// every given link set — and so did not write. `nil`: the store does not compare (each
    /// stored row a record mentions counts as updated). The run counts rows from it
    /// (``RunLedger``): `updated` versus `unchanged`.
    public var unchanged: [[Int]]?
    /// How many times the batch was written again because the database broke a deadlock between
    /// jobs sharing a run (each time in a new transaction); 0 for one writer.
    public var retries: Int
    /// A staged load's merge: how it read each entity's staged rows (`person: 300 runs,
    /// buffered`), for its log line; empty otherwise.
    package var reads: [String] = []

    /// A write that counted nothing itself and compared nothing: what a store that does not
    /// compare returns.
    public init(counts: [EntityCounts]? = nil, unchanged: [[Int]]? = nil, retries: Int = 0) {
        self.counts = counts
        self.unchanged = unchanged
        self.retries = retries
    }
}
