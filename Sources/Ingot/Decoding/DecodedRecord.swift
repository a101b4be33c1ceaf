import Dispatch
import Foundation

/// A value as the mapper produces it and every backend stores it: what a column holds after
/// conversion, independent of any database. Each backend picks its column types and binds these
/// as it needs (SQLite stores a boolean as 0 or 1). Dates travel as canonical ISO-8601 text in
/// UTC (`yyyy-MM-ddTHH:mm:ss.SSSZ`, or `yyyy-MM-dd` for a date-only format): lossless, and read
/// as a date by any database.
public enum ScalarValue: Hashable, Sendable, CustomStringConvertible {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case bool(Bool)

    /// Hashes the payload only (equal values of different cases never occur as one identity's
    /// values, and a collision would only cost a comparison): identities are hashed for every
    /// row folded, looked up and written. Text is hashed by its UTF-8 bytes, as it is compared.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0 as UInt8)
        case .integer(let v): hasher.combine(v)
        case .real(let v): hasher.combine(v)
        case .text(let v):
            hasher.combine(v.utf8.count)
            if v.utf8.withContiguousStorageIfAvailable({ hasher.combine(bytes: UnsafeRawBufferPointer($0)) }) == nil {
                for byte in v.utf8 { hasher.combine(byte) }
            }
        case .bool(let v): hasher.combine(v)
        }
    }

    /// Equal when of the same case and payload. Text compares by its UTF-8 bytes, as SQLite and PostgreSQL compare it (their default
    /// collations, "C" in Ingot's columns): "café" in NFC and in NFD are two identities, two rows,
    /// in a batch as across batches, so the tables do not depend on where batches end. Swift's
    /// own `String ==` (canonical equivalence) would fold them in a batch and not across batches.
    public static func == (a: ScalarValue, b: ScalarValue) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.integer(let x), .integer(let y)): x == y
        case (.real(let x), .real(let y)): x == y
        case (.text(let x), .text(let y)): ScalarValue.sameBytes(x, y)
        case (.bool(let x), .bool(let y)): x == y
        default: false
        }
    }

    /// Whether two strings have the same UTF-8 bytes.
    static func sameBytes(_ x: String, _ y: String) -> Bool {
        guard x.utf8.count == y.utf8.count else { return false }
        let fast = x.utf8.withContiguousStorageIfAvailable { a in
            y.utf8.withContiguousStorageIfAvailable { b in
                guard let pa = a.baseAddress, let pb = b.baseAddress else { return a.count == b.count }
                return memcmp(pa, pb, a.count) == 0
            }
        }
        return (fast ?? nil) ?? x.utf8.elementsEqual(y.utf8)
    }

    /// As shown in messages.
    public var description: String {
        switch self {
        case .null: "NULL"
        case .integer(let v): String(v)
        case .real(let v): String(v)
        case .text(let v): v
        case .bool(let v): String(v)
        }
    }
}

/// The identity of a row: one value, or one per key of a composite identity.
public enum IdentityKey: Hashable, Sendable, CustomStringConvertible {
    case single(ScalarValue)
    case composite([ScalarValue])

    /// Hashes the values, as ``==`` compares them.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .single(let v): v.hash(into: &hasher)
        case .composite(let vs): for v in vs { v.hash(into: &hasher) }
        }
    }

    /// The identity's values, one per identity attribute.
    public var values: [ScalarValue] {
        switch self {
        case .single(let v): [v]
        case .composite(let vs): vs
        }
    }

    /// As shown in messages.
    public var description: String {
        switch self {
        case .single(let v): v.description
        case .composite(let vs): "(" + vs.map(\.description).joined(separator: ", ") + ")"
        }
    }
}

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

/// Why a record or a page was rejected, as a code: what the counts per reason are keyed by.
package enum RejectReason: String, Sendable, CaseIterable {
    /// The record has no identity, or a null one (or a reference to null).
    case missingIdentity = "missing_identity"
    /// A value of another JSON type than the attribute's.
    case wrongType = "wrong_type"
    /// A number or a date outside what is stored.
    case outOfRange = "out_of_range"
    /// A string that is not a date in the attribute's format.
    case notADate = "not_a_date"
    /// An object, array or reference of the wrong shape.
    case wrongShape = "wrong_shape"
    /// A bare reference to a row that does not exist, with `missing: reject`.
    case missingReference = "missing_reference"
    /// A record of an identity no row has, with `write: {mode: update_only, unknown: reject}`.
    case unknownIdentity = "unknown_identity"
    /// A page that is not JSON.
    case notJSON = "not_json"
    /// A page with no array of records at `records`.
    case noRecords = "no_records"
    /// A page over `max_page_bytes`.
    case pageTooLarge = "page_too_large"
    /// A page its source could not read (a damaged unit of a joined run).
    case unreadable
    /// A page whose text values pass 4 GiB.
    case tooLarge = "too_large"
    /// A value no database stores alike: text holding `\u0000` or a lone surrogate escape, or a
    /// value the database itself refused (its message is the reason).
    case unstorable
    /// The entity's Swift hook (``IngotEntity/prepare``) threw; its error is the reason.
    case prepareFailed = "prepare_failed"
    /// A record of a child entity whose identity another child of the same parent holds (a
    /// vehicle numbered as a stored starship): one identity, one kind (OneKindRule).
    case wrongKind = "wrong_kind"
}

/// A record (or a whole page) that could not be saved, and why. A value, not a thrown error:
/// rejections are counted and stored in `_ingot_rejects`; the run goes on.
public struct RecordRejection: Sendable, Equatable, CustomStringConvertible {
    /// The entity the record was mapped as.
    public var entity: String
    /// Where in the page the problem is, like `results[3].dogs[1].id`.
    public var codingPath: String
    /// Why, in words (the database's message for a value it refused).
    public var reason: String
    /// The file, URL or archive entry the page came from.
    public var source: String
    /// The record's index in the page's records; `nil` when the whole page was rejected.
    public var recordIndex: Int?
    /// The record's JSON text (the page's text for a rejected page), at most ``rawLimit`` bytes of
    /// it: the archive entry holds the whole.
    public var raw: String
    /// The byte length of the whole text ``raw`` is a prefix of.
    public var rawLength: Int
    /// Why, as a code to count by.
    package var code: RejectReason
    /// The archive entry the page is stored in, when it was archived.
    package var archive: ArchiveLocation?

    /// Why, as a code to count by (`_ingot_runs.reject_counts`, the summary's `rejects.<code>`):
    /// `missing_identity`, `wrong_type`, `out_of_range`, `not_a_date`, `wrong_shape`,
    /// `missing_reference`, `not_json`, `no_records`, `page_too_large`, `unreadable`,
    /// `too_large`, `unstorable`.
    public var reasonCode: String { code.rawValue }
    /// The archive file holding the page, when it was archived.
    public var archivePath: String? { archive?.path }
    /// The page's entry in that archive.
    public var archiveEntry: Int? { archive?.entry }

    /// A rejection as a database stored it (`_ingot_rejects`); a code it does not know reads as
    /// `unreadable`.
    package static func stored(
        entity: String, codingPath: String, reason: String, source: String, recordIndex: Int?, raw: String, rawLength: Int?,
        code: String?, archive: String?, entry: Int?
    ) -> RecordRejection {
        RecordRejection(
            entity: entity, codingPath: codingPath, reason: reason, source: source, recordIndex: recordIndex, raw: raw,
            rawLength: rawLength, archive: archive.flatMap { path in entry.map { ArchiveLocation(path: path, entry: $0) } },
            code: code.flatMap(RejectReason.init(rawValue:)) ?? .unreadable)
    }

    /// The most of a rejected text stored with its rejection: bad input must not grow the
    /// database by its own size.
    public static let rawLimit = 16 << 10

    package init(
        entity: String, codingPath: String, reason: String, source: String, recordIndex: Int?, raw: String,
        rawLength: Int? = nil, archive: ArchiveLocation? = nil, code: RejectReason
    ) {
        self.code = code
        self.entity = RecordRejection.storable(entity)
        self.codingPath = RecordRejection.storable(codingPath)
        self.reason = RecordRejection.storable(reason)
        self.source = RecordRejection.storable(source)
        self.recordIndex = recordIndex
        let utf8 = raw.utf8
        self.rawLength = rawLength ?? utf8.count
        self.raw = RecordRejection.storable(
            utf8.count <= RecordRejection.rawLimit ? raw : RecordRejection.prefix(Array(utf8.prefix(RecordRejection.rawLimit))[...]))
        self.archive = archive
    }

    /// `text` with each NUL character written as the six characters `\u0000`: a rejection is
    /// stored in every backend (PostgreSQL's text cannot hold U+0000), whatever bytes the page
    /// held; the archive keeps the exact bytes.
    static func storable(_ text: String) -> String {
        guard text.utf8.contains(0) else { return text }
        return text.replacingOccurrences(of: "\u{0}", with: "\\u0000")
    }

    /// At most ``rawLimit`` bytes of `bytes` as text, never ending inside a UTF-8 sequence.
    static func prefix(_ bytes: ArraySlice<UInt8>) -> String {
        var cut = bytes.prefix(rawLimit)
        if cut.count < bytes.count {
            while let last = cut.last, last & 0xC0 == 0x80 { cut = cut.dropLast() }
            if let last = cut.last, last & 0x80 != 0 { cut = cut.dropLast() }  // the lead byte of the cut sequence
        }
        return String(decoding: cut, as: UTF8.self)
    }

    /// As shown in messages.
    public var description: String {
        "\(entity) at \(codingPath): \(reason) (\(source)\(recordIndex.map { ", record \($0)" } ?? ""))"
    }
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
    /// Where the source continues after this page (committed with the batch, for `--resume`).
    var resumeState: String?
    /// The highest value at the pipeline's incremental cursor path among the page's accepted records.
    var incrementalMax: String?
    /// The page's unit in a run shared by several jobs (``Page/unit``).
    var unit: UnitRef?
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
