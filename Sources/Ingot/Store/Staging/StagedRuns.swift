import Foundation
import GRDBSQLite

// A staged load's rows are staged in sorted runs: each batch's rows of an entity are appended in
// identity order (``StageOrder``), and the run's rowids are noted in `_ingot_stage_runs`. A fold
// then reads the runs side by side and merges them (``RunMerge``) instead of having SQLite sort
// the whole staging table: the merge's writer starts on its first row at once.
//
// Why: a staged merge began with both cores sorting the staging tables (people-200k: 0.45 s of
// a 1.4 s merge, the writer idle) — SQLite's sorter moves whole records through its runs; each
// batch is sorted as it is staged instead (a few thousand rows, beside the decode lanes), and the
// merge of the runs reads each row once, in order (docs/performance-notes.md, "Staged runs").

/// The order of a staged load's identities, for sorting a batch's rows and merging the runs:
/// SQLite's classes (NULL, then numbers, then text, then blobs), numbers by value, text and blobs
/// byte by byte then by length. Values SQLite sorts as equal but `HeldValues.equals` does not
/// group (an integer and a real of one value) are ordered integer first, so that one identity's
/// rows are always adjacent.
enum StageOrder {
    /// -1, 0 or 1 as `a` sorts before, with or after `b`.
    typealias Result = Int

    /// The class and value of a stored value, as SQLite keeps it (a boolean is an integer).
    private enum Key {
        case null
        case integer(Int64)
        case real(Double)
        case text(UnsafeRawBufferPointer)
        case blob(UnsafeRawBufferPointer)

        var rank: Int {
            switch self {
            case .null: 0
            case .integer, .real: 1
            case .text: 2
            case .blob: 3
            }
        }
    }

    private static func compare(_ a: Key, _ b: Key) -> Result {
        if a.rank != b.rank { return a.rank < b.rank ? -1 : 1 }
        switch (a, b) {
        case (.integer(let x), .integer(let y)): return x < y ? -1 : (x == y ? 0 : 1)
        case (.real(let x), .real(let y)): return order(x, y)
        case (.integer(let x), .real(let y)):
            let c = order(Double(x), y)
            return c != 0 ? c : -1
        case (.real(let x), .integer(let y)):
            let c = order(x, Double(y))
            return c != 0 ? c : 1
        case (.text(let x), .text(let y)), (.blob(let x), .blob(let y)): return bytes(x, y)
        default: return 0
        }
    }

    /// Reals by value; NaN (never stored: SQLite stores it as NULL) sorts last.
    private static func order(_ x: Double, _ y: Double) -> Result {
        if x < y { return -1 }
        if x > y { return 1 }
        if x == y { return 0 }
        return x.isNaN ? (y.isNaN ? 0 : 1) : -1
    }

    private static func bytes(_ x: UnsafeRawBufferPointer, _ y: UnsafeRawBufferPointer) -> Result {
        let common = min(x.count, y.count)
        if common > 0, let a = x.baseAddress, let b = y.baseAddress {
            let c = memcmp(a, b, common)
            if c != 0 { return c < 0 ? -1 : 1 }
        }
        return x.count == y.count ? 0 : (x.count < y.count ? -1 : 1)
    }

    private static func key(_ value: StoredValue?, _ view: StorageView) -> Key {
        switch value {
        case nil, .null?: .null
        case .integer(let v)?: .integer(v)
        case .bool(let v)?: .integer(v ? 1 : 0)
        case .real(let v)?: .real(v)
        case .text(let start, let count)?:
            .text(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(view.text)[Int(start)..<Int(start + count)]))
        }
    }

    private static func key(_ statement: OpaquePointer, _ column: Int32) -> Key {
        switch sqlite3_column_type(statement, column) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, column))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, column))
        case SQLITE_TEXT:
            let text = UnsafeRawPointer(sqlite3_column_text(statement, column))
            return .text(UnsafeRawBufferPointer(start: text, count: Int(sqlite3_column_bytes(statement, column))))
        case SQLITE_BLOB:
            let blob = sqlite3_column_blob(statement, column)
            return .blob(UnsafeRawBufferPointer(start: blob, count: Int(sqlite3_column_bytes(statement, column))))
        default: return .null
        }
    }

    /// The value ``HeldValues/write(_:at:)`` wrote at `at` in `bytes` (written by this store, in
    /// memory); moves `at` past it.
    private static func key(encoded bytes: UnsafeRawBufferPointer, at: inout Int) -> Key {
        let type = Int32(bytes[at])
        at += 1
        switch type {
        case SQLITE_INTEGER:
            defer { at += 8 }
            return .integer(Int64(bitPattern: LittleEndian.integer(bytes, at, 8)))
        case SQLITE_FLOAT:
            defer { at += 8 }
            return .real(Double(bitPattern: LittleEndian.integer(bytes, at, 8)))
        case SQLITE_TEXT, SQLITE_BLOB:
            let count = Int(LittleEndian.integer(bytes, at, 4))
            let value = UnsafeRawBufferPointer(rebasing: bytes[(at + 4)..<(at + 4 + count)])
            at += 4 + count
            return type == SQLITE_TEXT ? .text(value) : .blob(value)
        default: return .null
        }
    }

    /// Compares two identities of `count` values each, as ``HeldValues/write(_:at:)`` writes
    /// them one after the other.
    static func compare(encoded a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer, count: Int) -> Result {
        var x = 0
        var y = 0
        for _ in 0..<count {
            let c = compare(key(encoded: a, at: &x), key(encoded: b, at: &y))
            if c != 0 { return c }
        }
        return 0
    }

    /// Compares the identities of two rows of a batch's storage (their values at `slots`).
    static func compare(_ a: Int, _ b: Int, slots: [Int], in view: StorageView) -> Result {
        for slot in slots {
            let c = compare(key(view.values[a + slot], view), key(view.values[b + slot], view))
            if c != 0 { return c }
        }
        return 0
    }

    /// Compares the identities of the current rows of two statements (their `columns`).
    static func compare(_ a: OpaquePointer, _ b: OpaquePointer, columns: [Int32]) -> Result {
        for column in columns {
            let c = compare(key(a, column), key(b, column))
            if c != 0 { return c }
        }
        return 0
    }

    /// The positions of `rows` that have an identity, in identity order (rows of one identity in
    /// the order given).
    static func sorted(_ rows: UnsafeBufferPointer<EntityRow>, slots: [Int], in view: StorageView) -> [Int] {
        var positions = rows.indices.filter { rows[$0].identity != nil }
        if slots.count == 1, let slot = slots.first,
            positions.allSatisfy({ if case .integer? = view.values[rows[$0].valueStart + slot] { true } else { false } })
        {
            // The usual identity, one integer: sorted by it alone.
            let keys = positions.map { position -> Int64 in
                guard case .integer(let v)? = view.values[rows[position].valueStart + slot] else { return 0 }
                return v
            }
            return RadixSort.order(of: keys).map { positions[$0] }
        }
        positions.sort { x, y in
            let c = compare(rows[x].valueStart, rows[y].valueStart, slots: slots, in: view)
            return c != 0 ? c < 0 : x < y
        }
        return positions
    }
}

/// The sorted runs of an entity's staging table: per batch staged, the rowids its rows took.
struct StagedRun: Equatable {
    var first: Int64
    var last: Int64

    /// The table that lists them, in the staging file.
    static let table = "_ingot_stage_runs"
    /// Its columns, as `StageFile` makes them and checks them when it opens a file.
    static let columns = [("stage", "TEXT"), ("first", "INTEGER"), ("last", "INTEGER")]

    /// The runs of `stageTable` on `connection`, in the order they were staged; `nil` when they
    /// cannot be read.
    static func runs(of stageTable: String, on connection: OpaquePointer) -> [StagedRun]? {
        guard
            let select = try? RawStatement(
                connection: connection, sql: "SELECT first, last FROM \(table) WHERE stage = ?1 ORDER BY first")
        else { return nil }
        defer { select.finalize() }
        select.bind(.text(stageTable), at: 1)
        var runs: [StagedRun] = []
        do {
            try select.query { row in runs.append(StagedRun(first: sqlite3_column_int64(row, 0), last: sqlite3_column_int64(row, 1))) }
        } catch {
            return nil
        }
        return runs
    }
}

/// What a fold reads a staging table through: its rows in identity order, an identity's rows in
/// the order they were staged — its runs merged by a cursor each (``RunMerge``) or a slice at a
/// time (``BufferedRunMerge``), or the table sorted whole by SQLite.
protocol StagedRead {
    /// Moves to the next row; `false` at the end.
    mutating func step() throws -> Bool
    /// Whether the current row's identity is the one `values` holds at `slots` (the identity's
    /// slots, in order).
    func hasIdentity(of values: HeldValues, at slots: [Int]) -> Bool
    /// The current row's staged blob (``StagedRow``).
    var row: UnsafeRawBufferPointer { get }
    func finalize()
}

/// How a fold reads an entity's staging table: a small value, decided from the runs the stage
/// noted, that tests check and that prints as it reads ("2400 runs, buffered").
enum StagedReadPlan: Equatable, CustomStringConvertible {
    /// A cursor a run, side by side (``RunMerge``).
    case cursors(runs: Int)
    /// Each run read a slice at a time into a buffer of its own (``BufferedRunMerge``).
    case buffered(runs: Int)
    /// The table sorted whole by SQLite: no runs noted, or the settings say so.
    case sorted

    init(runs: [StagedRun]?, settings: FoldSettings) {
        guard settings.readsRuns, let runs, !runs.isEmpty else {
            self = .sorted
            return
        }
        self = runs.count <= settings.cursorRuns ? .cursors(runs: runs.count) : .buffered(runs: runs.count)
    }

    var description: String {
        switch self {
        case .cursors(let runs): "\(runs) runs, a cursor each"
        case .buffered(let runs): "\(runs) runs, buffered"
        case .sorted: "sorted whole"
        }
    }
}

/// How a staged load's folds read their staging tables (``StagedReadPlan``) and when one is
/// folded in two parts (``FoldPart``).
package struct FoldSettings: Sendable, Equatable {
    /// Tables staged in this many runs or fewer are read by a cursor a run; more, through buffers.
    /// Each cursor pins a page of the fold's connection (16 KiB): 256 fit its cache, people-10M's
    /// 2,400 do not (docs/performance-notes.md, "Many runs read a slice at a time").
    package var cursorRuns = 256
    /// `false`: every table is sorted whole, as one staged without noted runs is (for tests).
    package var readsRuns = true
    /// A table sorted whole with this many rows or more is folded in two parts at once.
    package var splitRows: Int64 = 2_000_000
    /// A fold hands its rows to the writer in chunks of about this many bytes (``MergedChunk/size``;
    /// smaller in tests, so that a small load fills the chunks in flight).
    package var chunkBytes = MergedChunk.size

    package init() {}
}

/// A binary heap of runs, the run whose current row is least on top (ties: the run staged
/// first). The order is lent for each change by the merge that owns the runs' rows.
struct RunHeap {
    private var entries: [Int] = []

    var top: Int? { entries.first }

    mutating func insert(_ run: Int, _ less: (Int, Int) -> Bool) {
        entries.append(run)
        entries.withUnsafeMutableBufferPointer { heap in
            var child = heap.count - 1
            while child > 0 {
                let parent = (child - 1) / 2
                guard less(heap[child], heap[parent]) else { return }
                heap.swapAt(child, parent)
                child = parent
            }
        }
    }

    /// Restores the order once the top run moved to its next row (`advanced`) or ended; `false`
    /// when no run is left.
    mutating func update(topAdvanced advanced: Bool, _ less: (Int, Int) -> Bool) -> Bool {
        guard !entries.isEmpty else { return false }
        if !advanced {
            entries.swapAt(0, entries.count - 1)
            entries.removeLast()
        }
        entries.withUnsafeMutableBufferPointer { heap in
            var parent = 0
            while true {
                let left = 2 * parent + 1
                guard left < heap.count else { return }
                var least = left
                if left + 1 < heap.count, less(heap[left + 1], heap[left]) { least = left + 1 }
                guard less(heap[least], heap[parent]) else { return }
                heap.swapAt(least, parent)
                parent = least
            }
        }
        return !entries.isEmpty
    }
}

/// The rows of several sorted runs, merged into one identity order (rows of one identity in the
/// order they were staged): a heap of the runs' statements, each at its current row, the least
/// on top. The fold reads the current row from ``current``.
///
/// Each statement holds a cursor on its run, and a cursor pins a page: beyond
/// ``FoldSettings/cursorRuns`` runs a table is read by ``BufferedRunMerge`` instead.
struct RunMerge: StagedRead {
    private let statements: [RawStatement]
    private let handles: [OpaquePointer]
    private let identity: [Int32]
    /// Per statement, its current row's identity when that is one integer (the usual identity),
    /// read once per row rather than at each comparison.
    private var integers: [Int64]
    private var isInteger: [Bool]
    private var heap = RunHeap()
    private var started = false

    /// `statements` read one run each, in the order they were staged, unstepped; `identity` are
    /// the identity's columns in their rows, its staged blob the column after them.
    init(statements: [RawStatement], identity: [Int32]) {
        self.statements = statements
        self.handles = statements.map(\.handle)
        self.identity = identity
        integers = Array(repeating: 0, count: statements.count)
        isInteger = Array(repeating: false, count: statements.count)
    }

    /// The statement whose current row is the merge's current row (valid after ``step()`` returned
    /// `true`).
    var current: OpaquePointer { handles[heap.top ?? 0] }

    var row: UnsafeRawBufferPointer {
        let column = Int32(identity.count)
        return UnsafeRawBufferPointer(start: sqlite3_column_blob(current, column), count: Int(sqlite3_column_bytes(current, column)))
    }

    func hasIdentity(of values: HeldValues, at slots: [Int]) -> Bool {
        let current = current
        for (column, slot) in slots.enumerated() where !values.equals(slot, current, column: identity[column]) { return false }
        return true
    }

    /// Moves to the next row of the merge; `false` at the end.
    mutating func step() throws -> Bool {
        if !started {
            started = true
            var any = false
            for index in statements.indices where try advance(index) {
                ordered { heap, less in heap.insert(index, less) }
                any = true
            }
            return any
        }
        guard let top = heap.top else { return false }
        let advanced = try advance(top)
        return ordered { heap, less in heap.update(topAdvanced: advanced, less) }
    }

    func finalize() {
        for statement in statements { statement.finalize() }
    }

    /// Steps statement `index`, noting its identity when it is one integer; `false` at its run's end.
    private mutating func advance(_ index: Int) throws -> Bool {
        guard try statements[index].step() else { return false }
        if identity.count == 1, sqlite3_column_type(handles[index], identity[0]) == SQLITE_INTEGER {
            integers[index] = sqlite3_column_int64(handles[index], identity[0])
            isInteger[index] = true
        } else {
            isInteger[index] = false
        }
        return true
    }

    /// Runs `body` with the order of the runs' current rows: each array borrowed once for the
    /// whole change, where a comparison through `self` retained and checked three arrays every
    /// time (the merge's fold compares about log2(runs) times a row).
    private mutating func ordered<R>(_ body: (inout RunHeap, (Int, Int) -> Bool) -> R) -> R {
        let identity = identity
        return integers.withUnsafeBufferPointer { integers in
            isInteger.withUnsafeBufferPointer { isInteger in
                handles.withUnsafeBufferPointer { handles in
                    body(&heap) { a, b in
                        let c =
                            isInteger[a] && isInteger[b]
                            ? (integers[a] < integers[b] ? -1 : (integers[a] == integers[b] ? 0 : 1))
                            : StageOrder.compare(handles[a], handles[b], columns: identity)
                        return c != 0 ? c < 0 : a < b
                    }
                }
            }
        }
    }
}
