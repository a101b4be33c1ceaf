import Foundation
import GRDBSQLite

/// The rows of many sorted runs merged as ``RunMerge`` merges them — identity order, an
/// identity's rows in the order they were staged — each run read a slice at a time into a buffer
/// of its own, by one statement stepped over the run's next rows and reset: no cursor holds a
/// page between two slices.
///
/// Why: a cursor a run pins a page a run, and people-10M's staging tables hold 2,400 runs each
/// (37.5 MiB of 16 KiB pages a fold, where its cache is 4 MiB): read by cursors its merge took
/// 75 s, sorted whole by SQLite 37 s, of which the writer waited on the sorts a third; read a
/// slice at a time, the writer starts on the first row (docs/performance-notes.md, "Many runs
/// read a slice at a time").
struct BufferedRunMerge: StagedRead {
    /// The bytes of every run's slice together (a slice holds one row at least). A slice reads
    /// its run's page from the file again (people-10M: 2,400 runs, about 7 KiB a slice, a 16 KiB
    /// page read about twice).
    static let budget = 16 << 20

    /// A run's slice: its rows as ``append(_:)`` encodes them — the identity's values as
    /// ``HeldValues/write(_:at:)`` writes them, then the staged blob's length (4 bytes) and bytes.
    private struct Slice {
        /// The rowid the run's next slice starts at, and its last.
        var next: Int64
        let last: Int64
        var bytes: UnsafeMutableRawPointer?
        var capacity = 0
        var count = 0
        /// The current row: where its identity ends (its blob's length follows) and where it ends.
        var identityEnd = 0
        var rowStart = 0
        var rowEnd = 0
        var ended = false

        /// The current row's identity, its values as ``HeldValues/write(_:at:)`` writes them.
        var identity: UnsafeRawBufferPointer {
            UnsafeRawBufferPointer(start: bytes.map { $0 + rowStart }, count: identityEnd - rowStart)
        }
    }

    private let statement: RawStatement
    /// The read transaction the merge began, when its connection had none: one for every
    /// slice, where each slice's statement would take the file's lock and check its cache anew.
    private let transaction: OpaquePointer?
    private let identityCount: Int
    /// The parameters the runs' rowids are bound to.
    private let firstParameter: Int32
    private let sliceBytes: Int
    private var slices: [Slice]
    /// Per run, its current row's identity when that is one integer (the usual identity): the
    /// comparisons read these, a few kilobytes, not the slices.
    private var integers: [Int64]
    private var isInteger: [Bool]
    private var heap = RunHeap()
    private var started = false

    /// Reads `runs` through `select`: a statement of `rowid`, the identity's `identityCount`
    /// columns and the staged blob, `WHERE rowid BETWEEN ?first AND ?first+1 … ORDER BY rowid`
    /// (parameters before `first` bound by the caller, once). Each run's slice holds about
    /// `budget / runs.count` bytes.
    init(
        select: RawStatement, on connection: OpaquePointer, identityCount: Int, firstParameter: Int32, runs: [StagedRun],
        budget: Int = budget
    ) {
        statement = select
        transaction =
            sqlite3_get_autocommit(connection) != 0 && sqlite3_exec(connection, "BEGIN", nil, nil, nil) == SQLITE_OK ? connection : nil
        self.identityCount = identityCount
        self.firstParameter = firstParameter
        sliceBytes = max(1, budget / max(1, runs.count))
        slices = runs.map { Slice(next: $0.first, last: $0.last) }
        integers = Array(repeating: 0, count: runs.count)
        isInteger = Array(repeating: false, count: runs.count)
    }

    var row: UnsafeRawBufferPointer {
        let slice = slices[heap.top ?? 0]
        let bytes = UnsafeRawBufferPointer(start: slice.bytes, count: slice.count)
        let length = Int(LittleEndian.integer(bytes, slice.identityEnd, 4))
        return UnsafeRawBufferPointer(rebasing: bytes[(slice.identityEnd + 4)..<(slice.identityEnd + 4 + length)])
    }

    /// The current row's identity, its values as ``HeldValues/write(_:at:)`` writes them.
    var identity: UnsafeRawBufferPointer { slices[heap.top ?? 0].identity }

    func hasIdentity(of values: HeldValues, at slots: [Int]) -> Bool {
        if let top = heap.top, isInteger[top], slots.count == 1 {
            return values.type(slots[0]) == SQLITE_INTEGER && values.integer(slots[0]) == integers[top]
        }
        let identity = identity
        var at = 0
        for slot in slots {
            guard at < identity.count, values.equals(slot, encoded: identity, at: at) else { return false }
            at = StagedRow.end(ofValueAt: at, in: identity) ?? identity.count
        }
        return true
    }

    mutating func step() throws -> Bool {
        if !started {
            started = true
            var any = false
            for index in slices.indices where try advance(index) {
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
        for slice in slices { slice.bytes?.deallocate() }
        statement.finalize()
        if let transaction { sqlite3_exec(transaction, "COMMIT", nil, nil, nil) }
    }

    /// Moves run `index` to its next row, reading its next slice when its buffer is done; `false`
    /// at the run's end.
    private mutating func advance(_ index: Int) throws -> Bool {
        if slices[index].rowEnd >= slices[index].count {
            try refill(index)
            guard slices[index].count > 0 else { return false }
        }
        slices[index].rowStart = slices[index].rowEnd
        let bytes = UnsafeRawBufferPointer(start: slices[index].bytes, count: slices[index].count)
        var at = slices[index].rowStart
        if identityCount == 1, Int32(bytes[at]) == SQLITE_INTEGER {
            integers[index] = Int64(bitPattern: LittleEndian.integer(bytes, at + 1, 8))
            isInteger[index] = true
            at += 9
        } else {
            isInteger[index] = false
            for _ in 0..<identityCount { at = StagedRow.end(ofValueAt: at, in: bytes) ?? bytes.count }
        }
        slices[index].identityEnd = at
        slices[index].rowEnd = at + 4 + Int(LittleEndian.integer(bytes, at, 4))
        return true
    }

    /// Reads run `index`'s next slice into its buffer (empty at the run's end), then resets the
    /// statement: its cursor lets go of the page.
    private mutating func refill(_ index: Int) throws {
        slices[index].count = 0
        slices[index].rowEnd = 0
        guard !slices[index].ended else { return }
        let handle = statement.handle
        sqlite3_bind_int64(handle, firstParameter, slices[index].next)
        sqlite3_bind_int64(handle, firstParameter + 1, slices[index].last)
        while slices[index].count < sliceBytes {
            guard try statement.step() else {
                slices[index].ended = true
                return
            }
            slices[index].next = sqlite3_column_int64(handle, 0) + 1
            append(index)
        }
        sqlite3_reset(handle)
    }

    /// Appends the statement's current row to run `index`'s slice.
    private mutating func append(_ index: Int) {
        let handle = statement.handle
        let blobColumn = Int32(identityCount + 1)
        var count = 4 + Int(sqlite3_column_bytes(handle, blobColumn))
        for column in Int32(1)..<Int32(identityCount + 1) {
            switch sqlite3_column_type(handle, column) {
            case SQLITE_INTEGER, SQLITE_FLOAT: count += 9
            case SQLITE_TEXT, SQLITE_BLOB: count += 5 + Int(sqlite3_column_bytes(handle, column))
            default: count += 1
            }
        }
        reserve(index, count)
        guard let base = slices[index].bytes else { return }
        var out = base + slices[index].count
        func put(_ bytes: UnsafeRawPointer?, _ count: Int) {
            out.storeBytes(of: UInt32(truncatingIfNeeded: count).littleEndian, as: UInt32.self)
            if let bytes, count > 0 { (out + 4).copyMemory(from: bytes, byteCount: count) }
            out += 4 + count
        }
        for column in Int32(1)..<Int32(identityCount + 1) {
            let type = sqlite3_column_type(handle, column)
            out.storeBytes(of: UInt8(truncatingIfNeeded: type), as: UInt8.self)
            out += 1
            switch type {
            case SQLITE_INTEGER:
                out.storeBytes(of: UInt64(bitPattern: sqlite3_column_int64(handle, column)).littleEndian, as: UInt64.self)
                out += 8
            case SQLITE_FLOAT:
                out.storeBytes(of: sqlite3_column_double(handle, column).bitPattern.littleEndian, as: UInt64.self)
                out += 8
            case SQLITE_TEXT:
                // The text's bytes asked for before their count, as SQLite wants.
                let text = UnsafeRawPointer(sqlite3_column_text(handle, column))
                put(text, Int(sqlite3_column_bytes(handle, column)))
            case SQLITE_BLOB:
                let blob = sqlite3_column_blob(handle, column)
                put(blob, Int(sqlite3_column_bytes(handle, column)))
            default: break
            }
        }
        let blob = sqlite3_column_blob(handle, blobColumn)
        put(blob, Int(sqlite3_column_bytes(handle, blobColumn)))
        slices[index].count += count
    }

    /// Makes room for `count` more bytes in run `index`'s slice.
    private mutating func reserve(_ index: Int, _ count: Int) {
        let needed = slices[index].count + count
        guard needed > slices[index].capacity else { return }
        let capacity = max(needed, sliceBytes + sliceBytes / 4, 2 * slices[index].capacity)
        let bytes = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
        if let old = slices[index].bytes {
            bytes.copyMemory(from: old, byteCount: slices[index].count)
            old.deallocate()
        }
        slices[index].bytes = bytes
        slices[index].capacity = capacity
    }

    /// Runs `body` with the order of the runs' current rows, the slices borrowed once for the
    /// whole change (as ``RunMerge`` does).
    private mutating func ordered<R>(_ body: (inout RunHeap, (Int, Int) -> Bool) -> R) -> R {
        let identityCount = identityCount
        return integers.withUnsafeBufferPointer { integers in
            isInteger.withUnsafeBufferPointer { isInteger in
                slices.withUnsafeBufferPointer { slices in
                    body(&heap) { a, b in
                        let c: StageOrder.Result
                        if isInteger[a] && isInteger[b] {
                            c = integers[a] < integers[b] ? -1 : (integers[a] == integers[b] ? 0 : 1)
                        } else {
                            c = StageOrder.compare(encoded: slices[a].identity, slices[b].identity, count: identityCount)
                        }
                        return c != 0 ? c < 0 : a < b
                    }
                }
            }
        }
    }
}
