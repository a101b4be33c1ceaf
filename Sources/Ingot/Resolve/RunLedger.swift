/// The rows a run has counted, so that each row counts once per run, whatever the batch size:
/// `inserted` (the run created it, whatever later records did to it), `stubs` (among those, the
/// rows still holding only their identity: a stub a later record of the run fills is no longer
/// one), `updated` (a stored row whose values or links the run changed), `unchanged` (a stored
/// row the run's records mentioned and found equal — and never changed later in the run).
///
/// Batch size does not change these counts, but for a row whose records within one run flip a
/// value and back: folded into one batch they are one write equal to the stored row
/// (`unchanged`); in separate batches, two writes (`updated`).
///
/// Counted after each batch is written, from what the batch's resolver found (stored or not)
/// and what the store reports it left as it was (``WriteResult/unchanged``). Lives
/// as long as the run, on the writer's queue. Integer identities (the common case) are kept in
/// compact sets (``IntegerSet``: about two bits per row for dense ids), others in a dictionary.
struct RunLedger: Sendable {
    /// What the run did to a row it counted.
    enum Mark: UInt8, Sendable {
        /// Inserted or updated by this run: later records change nothing in the counts.
        case written
        /// Inserted by this run holding only its identity: counted among `stubs` until a record fills it.
        case stub
        /// Mentioned and found equal: `unchanged` until the run changes it.
        case unchanged
    }

    private struct Marks: Sendable {
        var written = IntegerSet()
        var unchanged = IntegerSet()
        /// Not always few: every row of an entity whose records give only their identity (a
        /// list of ids, an entity with no other attribute) is one — so compact too (a
        /// `Set<Int64>` cost 13 bytes a row: 210 MB for 16 million such rows).
        var stubs = IntegerSet()
        var other: [IdentityKey: Mark] = [:]

        func mark(_ key: IdentityKey) -> Mark? {
            if case .single(.integer(let v)) = key {
                return written.contains(v) ? .written : unchanged.contains(v) ? .unchanged : stubs.contains(v) ? .stub : nil
            }
            return other[key]
        }

        /// Marks `key`, which was marked `old` (`nil`: not at all).
        mutating func set(_ key: IdentityKey, _ mark: Mark, was old: Mark?) {
            guard case .single(.integer(let v)) = key else {
                other[key] = mark
                return
            }
            switch old {
            case .unchanged?: unchanged.remove(v)
            case .stub?: stubs.remove(v)
            case .written?, nil: break
            }
            switch mark {
            case .written: written.insert(v)
            case .unchanged: unchanged.insert(v)
            case .stub: stubs.insert(v)
            }
        }
    }

    private var marks: [Marks]
    private let layouts: [EntityLayout]

    init(layouts: [EntityLayout]) {
        self.layouts = layouts
        marks = Array(repeating: Marks(), count: layouts.count)
    }

    /// Counts what writing `batch` did into `outcome` (replacing its row counts), and remembers
    /// the rows. `unchanged`: per entity, the positions of the rows the store found equal and
    /// left as they were (`nil`: a store that does not compare — every stored row a record
    /// changes something of counts as updated).
    mutating func count(_ batch: ResolvedBatch, unchanged: [[Int]]?, into outcome: inout BatchOutcome) {
        outcome.entities = Array(repeating: EntityCounts(), count: layouts.count)
        for (entity, rows) in batch.rows.merged.enumerated() {
            let layout = layouts[entity]
            let refs = batch.refs[entity]
            // Ascending positions: walked alongside the rows, no set to hash.
            let equal = (unchanged?[safe: entity] ?? []).sorted()
            var nextEqual = 0
            var identityMask = ColumnMask()
            for slot in layout.identitySlots { identityMask.insert(slot) }
            var counts = EntityCounts()
            // Read in place (a copy of each row would retain its identity's storage).
            rows.rows.withUnsafeBufferPointer { all in
                for position in all.indices {
                    guard let identity = all[position].identity else { continue }
                    let row = all[position]
                    let mentions =
                        row.mask.subtracting(identityMask) != ColumnMask()
                        || layout.toMany.indices.contains { rows.storage.linkSets[row.linkStart + $0] != nil }
                    let stored = !refs.isEmpty && refs[position] != nil
                    guard stored else {
                        counts.inserted += 1
                        if !mentions { counts.stubs += 1 }
                        marks[entity].set(identity, mentions ? .written : .stub, was: nil)
                        continue
                    }
                    guard mentions else { continue }  // only referred to: not a record of this row
                    while nextEqual < equal.count && equal[nextEqual] < position { nextEqual += 1 }
                    let changed = !(nextEqual < equal.count && equal[nextEqual] == position)
                    countStored(entity, identity, changed: changed, into: &counts)
                }
            }
            counts.inserted += rows.anonymous.count
            outcome.entities[entity] = counts
        }
        outcome.inserted = outcome.entities.reduce(0) { $0 + $1.inserted }
        outcome.updated = outcome.entities.reduce(0) { $0 + $1.updated }
        outcome.unchanged = outcome.entities.reduce(0) { $0 + $1.unchanged }
    }

    /// Counts a stored row that records of this run mentioned (`changed`: writing them changed
    /// it) into `counts`: for a batch (``count(_:unchanged:into:)``) and for a staged load's merge,
    /// where a row this run wrote before it turned staged stays counted as it was.
    mutating func countStored(_ entity: Int, _ identity: IdentityKey, changed: Bool, into counts: inout EntityCounts) {
        let mark = marks[entity].mark(identity)
        switch mark {
        case .written?:
            return
        case .stub?:
            // A stub this run created, filled by a later batch: inserted, no longer a stub.
            counts.stubs -= 1
            marks[entity].set(identity, .written, was: mark)
        case .unchanged?:
            guard changed else { return }
            counts.unchanged -= 1
            counts.updated += 1
            marks[entity].set(identity, .written, was: mark)
        case nil:
            counts.updated += changed ? 1 : 0
            counts.unchanged += changed ? 0 : 1
            marks[entity].set(identity, changed ? .written : .unchanged, was: nil)
        }
    }
}

/// A set of 64-bit integers that costs about a bit per member when they are dense (ids 1…n)
/// and two bytes when they are sparse: members grouped by their upper 48 bits, each group a
/// sorted array of its lower 16 bits up to 4,096 members, then a 65,536-bit map (8 KiB) — the
/// layout of roaring bitmaps.
struct IntegerSet: Sendable {
    private enum Chunk: Sendable {
        case sparse([UInt16])
        case dense([UInt64])

        // Each mutation takes its array out of the enum first (`self` set to an empty case),
        // so that the array is uniquely referenced and changed in place, not copied.

        mutating func insert(_ low: UInt16) {
            switch self {
            case .sparse(var members):
                self = .sparse([])
                let (found, at) = IntegerSet.search(members, low)
                if !found { members.insert(low, at: at) }
                if members.count > IntegerSet.sparseLimit {
                    var words = [UInt64](repeating: 0, count: 1024)
                    for m in members { words[Int(m >> 6)] |= 1 << UInt64(m & 63) }
                    self = .dense(words)
                } else {
                    self = .sparse(members)
                }
            case .dense(var words):
                self = .sparse([])
                words[Int(low >> 6)] |= 1 << UInt64(low & 63)
                self = .dense(words)
            }
        }

        /// Removes `low` (an empty chunk stays, to be reused).
        mutating func remove(_ low: UInt16) {
            switch self {
            case .sparse(var members):
                self = .sparse([])
                let (found, at) = IntegerSet.search(members, low)
                if found { members.remove(at: at) }
                self = .sparse(members)
            case .dense(var words):
                self = .sparse([])
                words[Int(low >> 6)] &= ~(1 << UInt64(low & 63))
                self = .dense(words)
            }
        }
    }

    private static let sparseLimit = 4096
    /// The chunks, and where each group's is; consecutive ids fall in the group looked at last,
    /// found without hashing.
    private var chunks: [Chunk] = []
    private var positions: [Int64: Int] = [:]
    private var last: (high: Int64, position: Int)?

    private mutating func position(of high: Int64, creating: Bool) -> Int? {
        if let last, last.high == high { return last.position }
        guard let position = positions[high] ?? (creating ? newChunk(high) : nil) else { return nil }
        last = (high, position)
        return position
    }

    private mutating func newChunk(_ high: Int64) -> Int {
        chunks.append(.sparse([]))
        positions[high] = chunks.count - 1
        return chunks.count - 1
    }

    func contains(_ value: Int64) -> Bool {
        let high = value >> 16
        let found: Int?
        if let last, last.high == high { found = last.position } else { found = positions[high] }
        guard let position = found else { return false }
        let low = UInt16(truncatingIfNeeded: value)
        switch chunks[position] {
        case .sparse(let members): return IntegerSet.search(members, low).found
        case .dense(let words): return words[Int(low >> 6)] & (1 << UInt64(low & 63)) != 0
        }
    }

    mutating func insert(_ value: Int64) {
        guard let position = position(of: value >> 16, creating: true) else { return }
        chunks[position].insert(UInt16(truncatingIfNeeded: value))
    }

    mutating func remove(_ value: Int64) {
        guard let position = position(of: value >> 16, creating: false) else { return }
        chunks[position].remove(UInt16(truncatingIfNeeded: value))
    }

    /// Binary search: whether `value` is in `members` (sorted), and where it is or would go.
    private static func search(_ members: [UInt16], _ value: UInt16) -> (found: Bool, at: Int) {
        var low = 0
        var high = members.count
        while low < high {
            let middle = (low + high) / 2
            if members[middle] < value { low = middle + 1 } else { high = middle }
        }
        return (low < members.count && members[low] == value, low)
    }
}
