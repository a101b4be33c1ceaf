import Dispatch
import Foundation

/// One upsert produced by the mapper: a record or a nested object of one entity, with only the
/// columns its JSON mentioned.
///
/// Its values are not held by the row but by the page (or the folded batch) it belongs to, in
/// flat arrays: one allocation per page instead of two per row, and no per-row arrays to copy,
/// retain and free on the way to the writer. See ``RowStorage``.
struct EntityRow: Sendable {
    var entity: Int
    /// `nil` for an entity without identity (the row is always inserted).
    var identity: IdentityKey?
    /// Where its column slots start in the storage's `values`: one slot per ``EntityLayout``
    /// column, `nil` when the source did not mention it (the stored value stays), `.null` when
    /// it said null.
    var valueStart: Int
    /// The slots it holds a value for (`.null` included): the columns its statement writes.
    var mask = ColumnMask()
    /// Where its to-many sets start in the storage's `linkSets`: one per to-many relationship of
    /// the layout, `nil` when absent (links stay), else the complete new set of target
    /// identities in JSON order (`[]` clears).
    var linkStart: Int
}

/// A column value as a ``RowStorage`` keeps it: like ``ScalarValue``, but text is a range of the
/// storage's `text` bytes. A plain value (no reference to count), 16 bytes with its `Optional`.
/// 32-bit offsets are enough: the mapper rejects a record that would take its page's text past
/// 4 GiB, and a batch holds either one page or at most ``RunOptions/batchBytes`` (64 MiB by
/// default) of pages and text.
enum StoredValue: Sendable, Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(start: UInt32, count: UInt32)
    case bool(Bool)
}

/// The flat arrays behind a set of ``EntityRow``s: their column values, the UTF-8 bytes of their
/// text values, and their to-many sets. One allocation per page (or per entity of a folded
/// batch) instead of two arrays per row and a `String` per text value; and the writer binds text
/// straight from `text`.
struct RowStorage: Sendable {
    var values: [StoredValue?] = []
    var text: [UInt8] = []
    var linkSets: [[IdentityKey]?] = []

    /// Room for a row of `layout`, every slot `nil`; returns the row.
    mutating func appendRow(entity: Int, layout: EntityLayout, identity: IdentityKey? = nil) -> EntityRow {
        appendRow(entity: entity, columns: layout.columns.count, links: layout.toMany.count, identity: identity)
    }

    /// The same for an entity of `columns` columns and `links` to-many sets.
    mutating func appendRow(entity: Int, columns: Int, links: Int, identity: IdentityKey? = nil) -> EntityRow {
        let row = EntityRow(entity: entity, identity: identity, valueStart: values.count, linkStart: linkSets.count)
        values.append(contentsOf: repeatElement(nil, count: columns))
        linkSets.append(contentsOf: repeatElement(nil, count: links))
        return row
    }

    /// Sets slot `index` to `value` (its text copied into `text`).
    mutating func set(_ index: Int, _ value: ScalarValue) {
        switch value {
        case .null: values[index] = .null
        case .integer(let v): values[index] = .integer(v)
        case .real(let v): values[index] = .real(v)
        case .bool(let v): values[index] = .bool(v)
        case .text(var s): s.withUTF8 { setText(index, $0) }
        }
    }

    /// Sets slot `index` to the text whose UTF-8 bytes are `bytes`.
    mutating func setText(_ index: Int, _ bytes: UnsafeBufferPointer<UInt8>) {
        let start = text.count
        text.append(contentsOf: bytes)
        values[index] = .text(start: UInt32(truncatingIfNeeded: start), count: UInt32(truncatingIfNeeded: bytes.count))
    }

    /// Copies slot `from` of `source` into slot `index`.
    mutating func copy(_ index: Int, from source: RowStorage, _ from: Int) {
        guard case .text(let start, let count) = source.values[from] else {
            values[index] = source.values[from]
            return
        }
        source.text.withUnsafeBufferPointer { bytes in
            setText(index, UnsafeBufferPointer(rebasing: bytes[Int(start)..<Int(start) + Int(count)]))
        }
    }

    /// Slot `index` as a ``ScalarValue`` (`nil` when the source did not mention it).
    func value(_ index: Int) -> ScalarValue? {
        switch values[index] {
        case nil: nil
        case .null?: .null
        case .integer(let v)?: .integer(v)
        case .real(let v)?: .real(v)
        case .bool(let v)?: .bool(v)
        case .text(let start, let count)?:
            .text(String(decoding: text[Int(start)..<Int(start) + Int(count)], as: UTF8.self))
        }
    }

    /// Calls `body` with the values and text bytes in place (for binding them without copies).
    func withView<R>(_ body: (StorageView) throws -> R) rethrows -> R {
        try values.withUnsafeBufferPointer { values in
            try text.withUnsafeBufferPointer { text in try body(StorageView(values: values, text: text)) }
        }
    }

    /// Forgets everything past the given counts (a rejected record's rows).
    mutating func truncate(values valueCount: Int, text textCount: Int, linkSets linkCount: Int) {
        values.removeSubrange(valueCount...)
        text.removeSubrange(textCount...)
        linkSets.removeSubrange(linkCount...)
    }
}

/// A ``RowStorage``'s values and text in place; valid only inside ``RowStorage/withView(_:)``.
struct StorageView {
    let values: UnsafeBufferPointer<StoredValue?>
    let text: UnsafeBufferPointer<UInt8>
}

/// A relationship given as a bare identity: the writer checks that the target exists and applies
/// the relationship's ``MissingTargetPolicy``.
struct Reference: Sendable {
    enum Slot: Sendable {
        /// A to-one relationship, by its index in the layout's `toOne`.
        case toOne(Int)
        /// Element `position` of to-many relationship `index` in the layout's `toMany`.
        case toMany(index: Int, position: Int)
    }
    var target: Int
    var identity: IdentityKey
    var policy: MissingTargetPolicy
    /// The row (in the page's `rows`) holding the link.
    var row: Int
    var slot: Slot
    /// Set only for `.reject`: where the reference was, for the rejection.
    var codingPath: String?
}

/// One record of a page, mapped: its own row first, then the rows of its nested objects, in
/// document order; then the bare references it makes.
struct DecodedRecord: Sendable {
    var index: Int
    /// Its rows in the page's `rows`.
    var rows: Range<Int>
    var references: [Reference]
    /// Nested objects reached through a relationship whose `operations:` leave out `insert` or
    /// `update`: their row, the rows mapped within them (`rows`), the row and slot that link to
    /// them; the resolver keeps, masks or drops them once it knows what is stored.
    var guarded: [Guarded] = []

    struct Guarded: Sendable {
        var rows: Range<Int>
        var parent: Int
        var slot: Reference.Slot
        var inserts: Bool
        var updates: Bool
    }
    /// The record's JSON text (at most ``RecordRejection/rawLimit`` bytes of it), kept only while
    /// a reference or a root rule might still reject it (policy `reject`, ``MappingPlan/keepsRecords``).
    var raw: String?
    /// Where the record is (`results[3]`, `line 4`), kept with ``raw`` for a root rule's rejection.
    var path: String?
    /// The byte length of the record's whole text.
    var rawLength = 0
}

/// A page after decoding: its records, ready for the writer, and what was rejected.
///
/// A big page may come in several parts (``RecordMapper/map(bytes:seq:source:partRecords:emit:)``),
/// all with its `seq`, in order; only the last one completes the page.
struct DecodedPage: Sendable {
    var seq: Int
    var source: String
    /// The raw bytes this part stands for (the span of its records; the whole page when it is
    /// the only part): what a batch's byte limit counts.
    var bytes: Int
    /// The part's number within its page, from 0.
    var part = 0
    /// Whether this part completes its page (the page is then counted, and its resume state
    /// may be committed).
    var isLastPart = true
    /// The whole page's raw size, on its last part; 0 on the others.
    var pageBytes = 0
    /// Records skipped, not rejected: of a kind `root: {by: …, other: skip}` names no entity for.
    var skipped = 0
    /// The pipeline's resource the page belongs to (``Page/resource``).
    var resource = 0
    /// `on_invalid: null`: values stored as NULL because they could not be converted, per
    /// `entity.attribute`.
    var invalidValues: [String: Int] = [:]
    /// The decode lane's gate this part holds a permit of, given back once the part is folded
    /// (a lane never runs more than a few parts ahead of the assembler).
    var laneGate: DispatchSemaphore?
    var records: [DecodedRecord]
    /// The rows of every accepted record, and their values.
    var rows: [EntityRow] = []
    var storage = RowStorage()
    var rejections: [RecordRejection]
    /// The page itself was rejected (not JSON, or no record array).
    var pageRejected: Bool
    /// Records seen in the page, accepted or not.
    var recordCount: Int
    /// The rows and links its accepted records make (``RecordMapper/charge()``): with the
    /// records, what bounds a part and a batch.
    var cost = 0
    /// Where the source continues after this page (committed with the batch, for `--resume`).
    var resumeState: String?
    /// Where the next run starts (``Page/syncState``), kept with the batch.
    var syncState: String?
    /// The highest value at the pipeline's incremental cursor path among the page's accepted records.
    var incrementalMax: String?
    /// The rows its tombstones delete (`delete_when:`), in record order: a part that holds one
    /// ends with it, and so does its batch (its deletions then follow every write before them).
    var deletions: [Tombstone] = []
    /// `records: {paths: …}`: where each array's records start (``RecordFraming/Records/segments``),
    /// so that a record the database refuses is named in its own array (`users[1]`).
    var recordSegments: [(path: String, start: Int)] = []
    /// The page's unit in a run shared by several jobs (``Page/unit``).
    var unit: UnitRef?
    /// This part's number within its unit, counting the unit's pages' parts in order (set by
    /// the batch assembler, which sees them in order): with the unit, what orders its writes.
    var unitPart = 0
    /// The order of this part's writes in a shared run (``UnitOrder``); 0 outside one.
    var unitKey: Int { unit.map { UnitOrder.key(seq: $0.seq, part: unitPart) } ?? 0 }
    /// More pages of its unit follow (``Page/unitContinues``).
    var unitContinues = false
    /// This part ends its unit (the last part of the unit's last page): a shared run's
    /// transaction commits here.
    var endsUnit: Bool { isLastPart && !unitContinues }
    /// The archive entry holding the page, when it was archived (a rejection found later names it).
    var archive: ArchiveLocation?
    /// SHA-256 of the page's bytes as read (on every part), when the run keeps prints for a
    /// refresh (``Page/digest``).
    var digest: [UInt8]?
    /// The rows this part touched, when the run keeps prints for a refresh; for a page a refresh
    /// left out, the rows the last run's page touched.
    var footprint: PageFootprint?
    /// ``footprint`` as a print keeps it, for a page in one part (made on the lane, or the last
    /// run's for a page left out): the writer stores it as it is.
    var encodedFootprint: [UInt8]?
    /// A refresh left the page out (byte for byte the last run's, none of its rows touched by a
    /// change): it holds no records; its rows count as unchanged and ``recordCount`` as read.
    var leftOut = false
    /// Rows of an unchanged page applied in part (``Page/appliedRows``) that the lane left as
    /// stored: each counts as unchanged.
    var unchangedRows: PageFootprint?

    /// Leaves every row not in `only` as it is stored: its columns and link sets unwritten (the
    /// row stays, named by its identity), and the references it makes dropped. Returns the rows
    /// left that the page holds a record of.
    mutating func apply(only: PageFootprint, layouts: [EntityLayout], footprint: PageFootprint) -> PageFootprint {
        var left = Set<Int>()
        for k in rows.indices {
            guard let identity = rows[k].identity, layouts.indices.contains(rows[k].entity),
                !only.contains(identity, entity: rows[k].entity)
            else { continue }
            let layout = layouts[rows[k].entity]
            var identityMask = ColumnMask()
            for slot in layout.identitySlots where rows[k].mask.contains(slot) { identityMask.insert(slot) }
            rows[k].mask = identityMask
            for link in layout.toMany.indices where storage.linkSets.indices.contains(rows[k].linkStart + link) {
                storage.linkSets[rows[k].linkStart + link] = nil
            }
            left.insert(k)
        }
        if !left.isEmpty {
            for r in records.indices { records[r].references.removeAll { left.contains($0.row) } }
        }
        return footprint.mentioned(subtracting: only)
    }
}

/// A record that says its row is gone (`delete_when:`): the entity and identity of the row it
/// deletes, and where it stood in its page.
struct Tombstone: Sendable, Equatable {
    var entity: Int
    var identity: IdentityKey
    var recordIndex: Int
}
