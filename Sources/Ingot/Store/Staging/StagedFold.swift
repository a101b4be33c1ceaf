import Dispatch
import Foundation
import GRDBSQLite
import Synchronization

// The folds of a staged load (`StageFile.fold`), on several threads when they can: per entity,
// a fold reads the staging table in identity order then arrival — its sorted runs merged
// (StagedRuns.swift) — and folds each identity's rows into one (`StagedFold`), while the
// backend's writer writes the folded rows, entity after entity (its `FoldedRowWriter`). The
// folded rows go from a fold to the writer in chunks of about a megabyte, a few at most in flight
// (`MergeChannel`). Two folds run at a time, in entity order, each on a read connection of its
// own (`FoldLanes`): the next entity's fold runs ahead while the writer writes the one before.
//
// The folds read the staging file on read connections of their own, once its last staged
// batches are committed. An in-memory SQLite database stages in memory: each entity is folded
// on the staging connection, each folded row written as soon as it is complete.

/// An entity's folded rows, as ``StageFile/fold(settings:interruption:_:)`` hands them over:
/// sent by fold threads, one channel per part of its identities (``FoldPart``) in identity
/// order, or to be folded on the write connection.
enum FoldedRows {
    case channels([MergeChannel])
    case folding(OpaquePointer, FoldSettings)
}

/// The identities one fold of an entity reads: all of them, or those below or from a pivot.
///
/// Why: a table sorted whole by SQLite (``StagedReadPlan/sorted``) gives its fold's first row
/// only once the sort is done: at people-10M, when such tables were sorted, the merge waited on
/// the person table's sort on one core while the writer idled. A big table sorted whole is folded
/// in two parts at once, on the two lanes, split at an identity near its median; an identity's
/// rows all fall in one part, and the writer reads the lower part, then the upper. Tables read by
/// their runs stream from their first row, and are folded whole.
struct FoldPart: @unchecked Sendable {  // the pivot's values are read only, by one fold at a time
    enum Side { case all, below, from }
    let side: Side
    /// The pivot identity's values (sqlite3_value copies, freed by ``free()``), as staged.
    let pivot: [OpaquePointer]

    static let all = FoldPart(side: .all, pivot: [])

    /// The parts `layout`'s staging table is folded in, read on `connection`: two, split at the
    /// median of 63 identities sampled at evenly spaced rows, when it is sorted whole and holds
    /// ``FoldSettings/splitRows`` rows or more; else one. (Split, the second part's sort runs
    /// beside the first's, but the next entity's fold starts later and both parts read the whole
    /// table: people-200k 5 % slower split, people-10M 10 % less merge, when every table was
    /// sorted whole.)
    static func parts(of layout: EntityLayout, on connection: OpaquePointer, settings: FoldSettings) -> [FoldPart] {
        let table = StageFile.quote(StageFile.table(of: layout))
        let identity = layout.identitySlots.map { StageFile.quote(layout.columns[$0].name) }.joined(separator: ", ")
        guard !identity.isEmpty,
            StagedReadPlan(runs: StagedRun.runs(of: StageFile.table(of: layout), on: connection), settings: settings) == .sorted,
            let count = try? RawStatement(connection: connection, sql: "SELECT max(rowid) FROM \(table)")
        else {
            return [.all]
        }
        defer { count.finalize() }
        guard (try? count.step()) == true else { return [.all] }
        let rows = sqlite3_column_int64(count.handle, 0)
        guard rows >= settings.splitRows else { return [.all] }
        let samples = (1...63).map { String(rows * Int64($0) / 64) }.joined(separator: ", ")
        guard
            let median = try? RawStatement(
                connection: connection,
                sql: "SELECT \(identity) FROM \(table) WHERE rowid IN (\(samples)) ORDER BY \(identity) LIMIT 1 OFFSET 31")
        else { return [.all] }
        defer { median.finalize() }
        guard (try? median.step()) == true else { return [.all] }
        let values = layout.identitySlots.indices.compactMap { sqlite3_value_dup(sqlite3_column_value(median.handle, Int32($0))) }
        guard values.count == layout.identitySlots.count else {
            values.forEach(sqlite3_value_free)
            return [.all]
        }
        // The lower part holds its own copies: each part frees its own.
        let lower = values.compactMap { sqlite3_value_dup($0) }
        return [FoldPart(side: .below, pivot: lower), FoldPart(side: .from, pivot: values)]
    }

    /// The condition of this part over `identity` (the identity columns, in order), its pivot
    /// bound from `?1`; `nil` for the whole table.
    func condition(_ identity: String) -> String? {
        let parameters = pivot.indices.map { "?\($0 + 1)" }.joined(separator: ", ")
        switch side {
        case .all: return nil
        case .below: return "(\(identity)) < (\(parameters))"
        case .from: return "(\(identity)) >= (\(parameters))"
        }
    }

    func free() { pivot.forEach(sqlite3_value_free) }
}

/// A read connection on the staging file, lent to the merge's fold threads: used by one fold at a
/// time (lane `k % 2` runs fold `k` after fold `k - 2` has ended), from when the merge starts
/// them until it has waited for them all, then closed.
struct ReadConnection: @unchecked Sendable {  // one thread at a time, as above
    let handle: OpaquePointer
}

/// The folds of every entity — each in one part or two (``FoldPart``) — two at a time in entity
/// order on two read connections, each sending its folded rows to its own channel.
final class FoldLanes: Sendable {
    /// Per fold, in order: its entity and channel.
    private let folds: [(entity: Int, channel: MergeChannel)]
    /// Signalled when fold `k` has ended (a signal taken is given back, so that ``wait()`` can
    /// wait for every fold).
    private let ended: [DispatchSemaphore]

    init(layouts: [EntityLayout], parts: [[FoldPart]], connections: [ReadConnection], settings: FoldSettings) {
        let tasks = layouts.indices.flatMap { entity in parts[entity].map { (entity: entity, part: $0) } }
        folds = tasks.map { (entity: $0.entity, channel: MergeChannel()) }
        ended = tasks.map { _ in DispatchSemaphore(value: 0) }
        for (k, task) in tasks.enumerated() {
            let connection = connections[k % connections.count]
            let channel = folds[k].channel
            let previous = k >= connections.count ? ended[k - connections.count] : nil
            let ended = self.ended[k]
            let layout = layouts[task.entity]
            let part = task.part
            Thread.detachNewThread {
                defer {
                    part.free()
                    ended.signal()
                }
                if let previous {
                    previous.wait()
                    previous.signal()
                }
                guard !channel.isCancelled else { return }
                StagedReading.fold(layout, part, on: connection, settings: settings, into: channel)
            }
        }
    }

    /// The channels of `entity`'s folds, in identity order.
    func channels(of entity: Int) -> [MergeChannel] {
        folds.filter { $0.entity == entity }.map(\.channel)
    }

    func cancel() {
        for fold in folds { fold.channel.cancel() }
    }

    /// Waits until every fold has ended.
    func wait() {
        for semaphore in ended {
            semaphore.wait()
            semaphore.signal()
        }
    }
}

/// Opens a staging table for its fold (``StagedRead``), as its ``StagedReadPlan`` says, and runs
/// the folds of the merge's lanes.
enum StagedReading {
    /// A staging table open for its fold: each case a type of its own, so that the folds over
    /// it are specialized (an existential's generic fold looked up metadata every row).
    enum Opened {
        case cursors(RunMerge)
        case buffered(BufferedRunMerge)
    }

    /// `layout`'s staging table on `connection`, the identities of `part`, in identity order then
    /// arrival.
    static func open(_ layout: EntityLayout, part: FoldPart, on connection: OpaquePointer, settings: FoldSettings) throws
        -> Opened
    {
        let identity = layout.identitySlots.map { StageFile.quote(layout.columns[$0].name) }.joined(separator: ", ")
        let table = StageFile.table(of: layout)
        let columns = StageFile.stagedColumns(of: layout).joined(separator: ", ")
        let condition = part.condition(identity)
        let runs = StagedRun.runs(of: table, on: connection)
        let plan = StagedReadPlan(runs: runs, settings: settings)
        let first = part.pivot.count + 1
        let range = "rowid BETWEEN ?\(first) AND ?\(first + 1)\(condition.map { " AND \($0)" } ?? "")"
        func prepare(_ sql: String) throws -> RawStatement {
            let statement = try RawStatement(connection: connection, sql: sql)
            for (i, value) in part.pivot.enumerated() { sqlite3_bind_value(statement.handle, Int32(i + 1), value) }
            return statement
        }
        switch plan {
        case .cursors:
            var statements: [RawStatement] = []
            do {
                for run in runs ?? [] {
                    let statement = try prepare("SELECT \(columns) FROM \(StageFile.quote(table)) WHERE \(range) ORDER BY rowid")
                    statements.append(statement)
                    sqlite3_bind_int64(statement.handle, Int32(first), run.first)
                    sqlite3_bind_int64(statement.handle, Int32(first + 1), run.last)
                }
            } catch {
                for statement in statements { statement.finalize() }
                throw error
            }
            return .cursors(RunMerge(statements: statements, identity: layout.identitySlots.indices.map { Int32($0) }))
        case .buffered:
            let select = try prepare("SELECT rowid, \(columns) FROM \(StageFile.quote(table)) WHERE \(range) ORDER BY rowid")
            return .buffered(
                BufferedRunMerge(
                    select: select, on: connection, identityCount: layout.identitySlots.count, firstParameter: Int32(first),
                    runs: runs ?? []))
        case .sorted:
            let select = try prepare(
                "SELECT \(columns) FROM \(StageFile.quote(table))\(condition.map { " WHERE \($0)" } ?? "") ORDER BY \(identity), rowid")
            return .cursors(RunMerge(statements: [select], identity: layout.identitySlots.indices.map { Int32($0) }))
        }
    }

    /// How `layout`'s staging table on `connection` is read by its folds (``open(_:part:on:settings:)``
    /// decides the same).
    static func plan(of layout: EntityLayout, on connection: OpaquePointer, settings: FoldSettings) -> StagedReadPlan {
        StagedReadPlan(runs: StagedRun.runs(of: StageFile.table(of: layout), on: connection), settings: settings)
    }

    /// Folds `layout`'s staging table on `connection` into `channel`, in chunks, then sends the
    /// end — or the failure; stops when the writer cancels.
    static func fold(
        _ layout: EntityLayout, _ part: FoldPart, on connection: ReadConnection, settings: FoldSettings, into channel: MergeChannel
    ) {
        do {
            switch try open(layout, part: part, on: connection.handle, settings: settings) {
            case .cursors(let read): try fold(read, layout, chunkBytes: settings.chunkBytes, into: channel)
            case .buffered(let read): try fold(read, layout, chunkBytes: settings.chunkBytes, into: channel)
            }
        } catch is MergeCancelled {
            return
        } catch let error as StoreError {
            _ = channel.send(.failed(error))
        } catch {
            _ = channel.send(.failed(StoreError.schema("the staged merge's fold failed: \(error)")))
        }
    }

    private static func fold(
        _ read: some StagedRead, _ layout: EntityLayout, chunkBytes: Int, into channel: MergeChannel
    ) throws {
        var fold = StagedFold(layout: layout, read: read)
        defer { fold.finalize() }
        var chunk = MergedChunk.reserved()
        try fold.run { folded in
            chunk.append(folded)
            if chunk.bytes.count >= chunkBytes {
                guard channel.send(.chunk(chunk)) else { throw MergeCancelled() }
                chunk = MergedChunk.reserved()
            }
        }
        if chunk.rows > 0, !channel.send(.chunk(chunk)) { return }
        _ = channel.send(.end)
    }
}

/// The read side of one entity's merge: the staging table read in identity order then arrival
/// (``StagedRead``), each identity's rows folded into one — for each column the last value given
/// (a given `null` included), for each to-many the last set given — and handed on (`emit`).
struct StagedFold<Read: StagedRead> {
    let layout: EntityLayout
    private var read: Read
    /// The current identity's folded row.
    private(set) var values: HeldValues
    private(set) var given = ColumnMask()
    private(set) var sets: HeldValues
    /// The record that gave the current identity's rows last (``RecordOrigin``; 0: unknown).
    private(set) var origin: Int64 = 0
    private var hasGroup = false

    init(layout: EntityLayout, read: Read) {
        self.layout = layout
        self.read = read
        values = HeldValues(count: layout.columns.count)
        sets = HeldValues(count: layout.toMany.count)
    }

    func finalize() {
        values.deallocate()
        sets.deallocate()
        read.finalize()
    }

    /// Folds every staged identity, calling `emit` with each folded row (read through
    /// ``values``, ``given`` and ``sets``) before the next begins.
    mutating func run(emit: (borrowing StagedFold) throws -> Void) throws {
        while try read.step() {
            if hasGroup && !read.hasIdentity(of: values, at: layout.identitySlots) {
                try emit(self)
                clear()
            }
            hasGroup = true
            try take(read.row)
        }
        if hasGroup {
            try emit(self)
            clear()
        }
    }

    /// Folds the current row's ``StagedRow`` into the current identity's: the values it gives
    /// over those held, its sets over those held, its origin when it knows one.
    private mutating func take(_ bytes: UnsafeRawBufferPointer) throws {
        guard let parts = StagedRow.parts(bytes) else { throw StagedRow.malformed(layout) }
        var at = parts.values
        for slot in layout.columns.indices where parts.mask.contains(slot) {
            guard StagedRow.end(ofValueAt: at, in: bytes) != nil else { throw StagedRow.malformed(layout) }
            values.load(slot, from: bytes, at: &at)
        }
        given.formUnion(parts.mask)
        if parts.origin != 0 { origin = parts.origin }
        if !parts.sets.isEmpty {
            let given = UnsafeRawBufferPointer(rebasing: bytes[parts.sets])
            // The sets are kept whole for each set they give (the last set given wins).
            var setsGiven: [Int] = []
            StagedSets.sets(in: given) { k, _ in if k < layout.toMany.count { setsGiven.append(k) } }
            for k in setsGiven { sets.holdBlob(k, given) }
        }
    }

    private mutating func clear() {
        values.clear()
        sets.clear()
        given = ColumnMask()
        origin = 0
        hasGroup = false
    }
}

/// Folded rows on their way from the fold thread to the writer: per row the columns given (two
/// 8-byte words), its origin (an 8-byte word), each column's value (``HeldValues/write(_:at:)``),
/// then each to-many's set (a byte: held or not, then the held blob as a value).
struct MergedChunk: Sendable {
    var bytes: [UInt8] = []
    var rows = 0

    /// A chunk is handed on once it holds this many bytes.
    static let size = 1 << 20
    /// Room for the row that takes a chunk past ``size``: grown by doubling, a chunk held 2 MiB
    /// for its 1 MiB, and the sixteen in flight of two folds 32 MiB.
    static let slack = 64 << 10

    /// An empty chunk with room for ``size`` bytes and a row more (most rows).
    static func reserved() -> MergedChunk {
        var chunk = MergedChunk()
        chunk.bytes.reserveCapacity(size + slack)
        return chunk
    }

    mutating func append<Read: StagedRead>(_ fold: StagedFold<Read>) {
        // The row's bytes counted first, the chunk grown once, and the row written in place: an
        // array append per field cost more than the bytes it moved.
        let columns = fold.layout.columns.count
        let links = fold.layout.toMany.count
        var count = 24
        for slot in 0..<columns { count += fold.values.encodedCount(slot) }
        for k in 0..<links { count += fold.sets.encodedCount(k) }
        let start = bytes.count
        bytes.append(contentsOf: repeatElement(0, count: count))
        bytes.withUnsafeMutableBytes { chunk in
            guard let base = chunk.baseAddress else { return }
            let out = base + start
            out.storeBytes(of: fold.given.low.littleEndian, as: UInt64.self)
            out.storeBytes(of: fold.given.high.littleEndian, toByteOffset: 8, as: UInt64.self)
            out.storeBytes(of: UInt64(bitPattern: fold.origin).littleEndian, toByteOffset: 16, as: UInt64.self)
            var at = 24
            for slot in 0..<columns { at += fold.values.write(slot, at: out + at) }
            for k in 0..<links { at += fold.sets.write(k, at: out + at) }
        }
        rows += 1
    }
}

/// Chunks from the fold thread to the writer, ``room`` at most waiting. Either side stops the
/// other: the fold sends its failure or the end; the writer cancels when it fails.
final class MergeChannel: Sendable {
    enum Item: Sendable {
        case chunk(MergedChunk)
        case end
        case failed(any Error & Sendable)
    }

    private let items = Mutex<(queue: [Item], cancelled: Bool)>(([], false))
    private let ready = DispatchSemaphore(value: 0)
    /// Made at 0 and signalled ``room`` times: libdispatch traps when a semaphore is freed below
    /// the value it was made with, which a channel cancelled with chunks in flight would be.
    private let free = DispatchSemaphore(value: 0)

    /// The chunks waiting at most (about a megabyte each). Eight, not two: the next entity's fold
    /// runs ahead while the writer writes the one before, and with two chunks of room it stopped
    /// at once and ended after the writer had — people-200k's dog rows (6 MB) were folded while the
    /// writer waited (docs/performance-notes.md, "Staged runs"). Two folds at a time: 16 MB at most.
    static let room = 8

    init() {
        for _ in 0..<MergeChannel.room { free.signal() }
    }

    /// Waits for room and sends `item`; `false` once the writer cancelled (nothing sent).
    func send(_ item: Item) -> Bool {
        free.wait()
        let sent = items.withLock { state in
            guard !state.cancelled else { return false }
            state.queue.append(item)
            return true
        }
        if sent { ready.signal() } else { free.signal() }
        return sent
    }

    /// The next item, waiting for it.
    func receive() -> Item {
        ready.wait()
        let item = items.withLock { $0.queue.removeFirst() }
        free.signal()
        return item
    }

    var isCancelled: Bool { items.withLock { $0.cancelled } }

    /// The writer stops: the fold's next send fails (and one waiting for room wakes up).
    func cancel() {
        items.withLock { $0.cancelled = true }
        free.signal()
    }
}

/// The fold stopped because the writer cancelled.
struct MergeCancelled: Error {}
