import GRDBSQLite

/// What writes a staged load's folded rows, one identity at a time: the merge into SQLite's
/// tables (``StagedMerge``) or the copy into PostgreSQL's (PGStore+Staged.swift). The folded row
/// is held in ``values``, ``given`` and ``sets`` when ``flush(stored:)`` is called.
protocol FoldedRowWriter {
    var layout: EntityLayout { get }
    var values: HeldValues { get set }
    var given: ColumnMask { get set }
    var sets: HeldValues { get set }
    /// The record that gave the held row last (``RecordOrigin``; 0: unknown): what a refusal names.
    var origin: Int64 { get set }
    /// Writes the held row, then forgets it (or holds it back with others, to be written at
    /// the latest by ``flushHeldBack()``).
    mutating func flush(stored: (_ identity: IdentityKey, _ changed: Bool) -> Void) throws
    /// Writes the rows ``flush(stored:)`` held back; called once every row was flushed.
    mutating func flushHeldBack() throws
    /// Writes the folded row at `at` in a chunk (``MergedChunk``) from its bytes as they are and
    /// moves `at` past it — `true` — or reads nothing and returns `false`: the row is then held
    /// (``values``, ``given``, ``sets``) and flushed.
    mutating func writeEncoded(_ chunk: UnsafeRawBufferPointer, at: inout Int) throws -> Bool
}

extension FoldedRowWriter {
    /// Whether the held row gives nothing but its identity: a stub.
    var holdsStub: Bool {
        var nonIdentity = given
        for slot in layout.identitySlots { nonIdentity = nonIdentity.removing(slot) }
        return nonIdentity == ColumnMask() && !sets.holdsAny
    }

    /// Writes every folded row of `rows` (``StageFile/fold(settings:interruption:_:)``).
    mutating func write(_ rows: FoldedRows, stored: (_ identity: IdentityKey, _ changed: Bool) -> Void) throws {
        switch rows {
        case .channels(let channels): for channel in channels { try write(from: channel, stored: stored) }
        case .folding(let connection, let settings): try run(foldingOn: connection, settings: settings, stored: stored)
        }
        try flushHeldBack()
    }

    mutating func flushHeldBack() throws {}

    mutating func writeEncoded(_ chunk: UnsafeRawBufferPointer, at: inout Int) throws -> Bool { false }

    /// Folds and writes on the write connection, each folded row written as it completes.
    mutating func run(
        foldingOn connection: OpaquePointer, settings: FoldSettings, stored: (_ identity: IdentityKey, _ changed: Bool) -> Void
    ) throws {
        switch try StagedReading.open(layout, part: .all, on: connection, settings: settings) {
        case .cursors(let read): try run(read, stored: stored)
        case .buffered(let read): try run(read, stored: stored)
        }
    }

    private mutating func run(_ read: some StagedRead, stored: (_ identity: IdentityKey, _ changed: Bool) -> Void) throws {
        var fold = StagedFold(layout: layout, read: read)
        defer { fold.finalize() }
        try fold.run { folded in
            take(folded)
            try flush(stored: stored)
        }
    }

    /// Writes the folded rows `channel` brings, until the fold's end; throws the fold's failure.
    mutating func write(from channel: MergeChannel, stored: (_ identity: IdentityKey, _ changed: Bool) -> Void) throws {
        while true {
            switch channel.receive() {
            case .chunk(let chunk):
                try chunk.bytes.withUnsafeBytes { bytes in
                    var at = 0
                    for _ in 0..<chunk.rows where try !writeEncoded(bytes, at: &at) {
                        load(from: bytes, at: &at)
                        try flush(stored: stored)
                    }
                }
            case .end:
                return
            case .failed(let error):
                throw error
            }
        }
    }

    /// Holds the fold's current row as the row to write.
    private mutating func take<Read: StagedRead>(_ fold: StagedFold<Read>) {
        given = fold.given
        origin = fold.origin
        for slot in layout.columns.indices { values.copy(slot, from: fold.values) }
        for k in layout.toMany.indices { sets.copy(k, from: fold.sets) }
    }

    /// Holds the row at `at` in a chunk as the row to write; moves `at` past it.
    private mutating func load(from chunk: UnsafeRawBufferPointer, at: inout Int) {
        given = ColumnMask(low: LittleEndian.integer(chunk, at, 8), high: LittleEndian.integer(chunk, at + 8, 8))
        origin = Int64(bitPattern: LittleEndian.integer(chunk, at + 16, 8))
        at += 24
        for slot in layout.columns.indices { values.load(slot, from: chunk, at: &at) }
        for k in layout.toMany.indices { sets.load(k, from: chunk, at: &at) }
    }
}
