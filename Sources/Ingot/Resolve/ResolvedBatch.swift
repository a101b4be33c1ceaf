/// A stored row, as the store that found it refers to it. Opaque above the store: the resolver
/// only knows whether an identity is stored, and hands the reference back with the row when the
/// batch is written. A backend either keeps a handle of its own for the row (SQLite: its rowid)
/// or finds it again by its identity (``found``, as PostgreSQL's set-based writes do).
public struct StoredRef: Hashable, Sendable {
    private enum Kind: Hashable {
        case pending
        case found
        case handle(Int64)
    }

    private let kind: Kind

    /// A stored row the store finds again by its identity.
    public static let found = StoredRef(kind: .found)

    /// A stored row with the store's own handle for it (SQLite: the rowid).
    public static func handle(_ value: Int64) -> StoredRef { StoredRef(kind: .handle(value)) }

    /// A row that a batch saved but did not commit yet: stored by the time the next batch is
    /// written, but unknown to a reader that sees committed rows only. The store finds it by its
    /// identity.
    public static let pending = StoredRef(kind: .pending)

    /// The store's handle for the row, when it made one; `nil`: find the row by its identity.
    public var handle: Int64? {
        if case .handle(let value) = kind { value } else { nil }
    }
}

/// A batch on its way to the writer: its pages, and — when that needed no database writes —
/// their rows already folded and looked up on the assembler's queue (see
/// ``BatchResolver/prepare(_:uncommitted:store:)``).
struct PreparedBatch: Sendable {
    /// The batch's number in the run (1, 2, …), in the order the writer saves them.
    var number = 0
    var pages: [DecodedPage]
    var folded: RowFolder?
    /// Its rows not folded, for a stage (``UnfoldedRows``): then `pages` keep their rows.
    var unfolded: UnfoldedRows? = nil
    /// Per entity, per folded row: its stored row (`nil`: not stored), when looked up already.
    var refs: [[StoredRef?]]? = nil
    /// The pages with their records, when `pages` lost them to folding: kept until the batch is
    /// written, in case the database refuses one of its values (the writer then looks for the
    /// records it refuses).
    var decoded: [DecodedPage]? = nil
    /// Whether the records came in identity order (each record's own row's identity not below
    /// the one before it), as they arrived: the folded rows are in identity order either way.
    /// Read for a run's first batch only (the assembler sets it there).
    var arrivedInIdentityOrder = true
}

/// A batch ready to write: one row per identity per entity, in identity order, each with its
/// stored row or none (then it is inserted), its links, and what writing it will do. Everything
/// a backend needs and nothing it must decide: merge rules, reference policies and rejections
/// were applied by the ``BatchResolver``.
public struct ResolvedBatch: Sendable {
    var number = 0
    /// The batch's pages, without their records (the writer stage counts pages and records).
    var pages: [DecodedPage]
    /// Per entity: the folded rows (present columns in each row's mask, to-many sets given or
    /// `nil`), and rows without identity, always inserted.
    var rows: RowFolder
    /// Per entity, per row of `rows`: the stored row it updates, or `nil` for an insert.
    var refs: [[StoredRef?]]
    /// What writing it does, per entity, and the records the resolver rejected.
    var outcome: BatchOutcome
    /// A batch a stage takes as its records came (``UnfoldedRows``): `rows` is empty, and
    /// `pages` keep their rows, which this indexes.
    var unfolded: UnfoldedRows? = nil
}

extension ResolvedBatch {
    /// One row to write, as a backend outside this module reads it.
    public struct Row: Sendable {
        /// `nil` for an entity without identity (always inserted).
        public var identity: IdentityKey?
        /// The stored row it updates; `nil`: insert it.
        public var stored: StoredRef?
        /// Per column of the entity's ``EntityLayout``: the value to write, or `nil` when the
        /// source did not mention it (an update leaves it as it is; an insert stores NULL).
        public var values: [ScalarValue?]
        /// Per to-many relationship of the layout: the complete new set of targets (in JSON
        /// order), or `nil` to leave the stored links as they are.
        public var links: [[IdentityKey]?]
        /// In a run shared by several jobs (`--join`), per column: the unit (page of the shared
        /// source) whose record gave the value, 0 where none did. Empty otherwise.
        public var valueUnits: ArraySlice<Int> = []
        /// The same per to-many set.
        public var linkUnits: ArraySlice<Int> = []
    }

    /// The rows of `entity` (its index in the model), in identity order, then those without
    /// identity. Built on demand (the SQLite store reads the folded storage in place).
    public func rows(of entity: Int) -> [Row] {
        rows(of: entity, valuesWhere: { _ in true })
    }

    /// The same, with the values of only the rows `materialize` accepts (by their stored row):
    /// the others have empty ``Row/values``, for a store that writes them from the folded
    /// storage itself (``storage(of:)``; making a `String` of every text value is most of what
    /// building rows costs).
    func rows(of entity: Int, valuesWhere materialize: (StoredRef?) -> Bool) -> [Row] {
        let merged = rows.merged[entity]
        let layout = rows.layouts[entity]
        func row(_ r: EntityRow, _ stored: StoredRef?) -> Row {
            var row = Row(
                identity: r.identity, stored: stored,
                values: materialize(stored) ? (0..<layout.columns.count).map { merged.storage.value(r.valueStart + $0) } : [],
                links: (0..<layout.toMany.count).map { merged.storage.linkSets[r.linkStart + $0] })
            if !merged.valueUnits.isEmpty {
                // A row whose last slots no unit set may lie past the end of the arrays (stubs).
                func slice(_ units: [Int], _ start: Int, _ count: Int) -> ArraySlice<Int> {
                    let end = start + count
                    return end <= units.count ? units[start..<end] : ArraySlice(repeatElement(0, count: count))
                }
                row.valueUnits = slice(merged.valueUnits, r.valueStart, layout.columns.count)
                row.linkUnits = slice(merged.linkUnits, r.linkStart, layout.toMany.count)
            }
            return row
        }
        let refs = self.refs[entity]
        return merged.rows.enumerated().map { row($1, refs.isEmpty ? nil : refs[$0]) } + merged.anonymous.map { row($0, nil) }
    }

    /// The folded rows of `entity` and their storage, in the order of ``rows(of:)``: its rows
    /// with identity, then those without.
    func storage(of entity: Int) -> (rows: [EntityRow], storage: RowStorage) {
        let merged = rows.merged[entity]
        return (merged.rows + merged.anonymous, merged.storage)
    }

    /// How many entities the batch has rows for (the model's count).
    public var entityCount: Int { rows.merged.count }
}

/// What saving one batch does.
struct BatchOutcome: Sendable {
    var inserted = 0
    var updated = 0
    var unchanged = 0
    /// Records `write: insert_only` or `update_only` skipped.
    var skipped = 0
    /// Rows the batch's tombstones deleted (`delete_when:`), cascades included.
    var deleted = 0
    /// Per entity (by index in the model): inserted, updated, unchanged, stubs (rejections are counted by the writer stage).
    var entities: [EntityCounts] = []
    /// Records rejected by the resolver (a bare reference to a missing row with `missing: reject`).
    var rejections: [RecordRejection] = []

    /// Adds what another write did (a part of a batch written on its own).
    mutating func add(_ other: BatchOutcome) {
        inserted += other.inserted
        updated += other.updated
        unchanged += other.unchanged
        skipped += other.skipped
        deleted += other.deleted
        if entities.count < other.entities.count {
            entities += Array(repeating: EntityCounts(), count: other.entities.count - entities.count)
        }
        for (k, counts) in other.entities.enumerated() { entities[k] = entities[k] + counts }
        rejections += other.rejections
    }

    /// Takes the store's own counts of rows inserted, updated and stubs created, per entity
    /// (``WriteResult/counts``).
    mutating func recount(_ counts: [EntityCounts]) {
        for (entity, written) in counts.enumerated() where entities.indices.contains(entity) {
            entities[entity].inserted = written.inserted
            entities[entity].updated = written.updated
            entities[entity].stubs = written.stubs
        }
        inserted = entities.reduce(0) { $0 + $1.inserted }
        updated = entities.reduce(0) { $0 + $1.updated }
    }
}

/// The identities of the batches handed to the writer and not committed yet, per batch number
/// and entity. A reader of committed rows does not see those rows, so
/// ``BatchResolver/prepare(_:uncommitted:store:)`` counts them as stored.
///
/// Held for as long as a transaction stays open, so compact: integer identities (the common
/// case) in an ``IntegerSet`` (a few bits to two bytes each), others in a set. A dictionary per
/// batch cost about 100 bytes per identity, which bounded how big a transaction could grow.
struct UncommittedIdentities: Sendable {
    private struct Keys: Sendable {
        var integers = IntegerSet()
        var others: Set<IdentityKey> = []

        init(_ keys: some Sequence<IdentityKey>) {
            for key in keys {
                if case .single(.integer(let v)) = key { integers.insert(v) } else { others.insert(key) }
            }
        }

        func contains(_ key: IdentityKey) -> Bool {
            if case .single(.integer(let v)) = key { return integers.contains(v) }
            return others.contains(key)
        }
    }

    private var batches: [(number: Int, entities: [Keys])] = []

    /// Remembers the identities of batch `number`, per entity.
    mutating func append(_ number: Int, _ identities: [some Collection<IdentityKey>]) {
        batches.append((number, identities.map { Keys($0) }))
    }

    /// Forgets the batches up to `number`: they are committed, so a reader sees them.
    mutating func dropCommitted(through number: Int) {
        batches.removeAll { $0.number <= number }
    }

    func contains(_ key: IdentityKey, entity: Int) -> Bool {
        batches.contains { $0.entities[entity].contains(key) }
    }
}

/// What a run did to one entity's rows.
public struct EntityCounts: Sendable, Equatable {
    /// Rows created.
    public var inserted = 0
    /// Stored rows a record changed (columns or links), each counted once per run.
    public var updated = 0
    /// Stored rows the run's records mentioned and found equal (not written), each counted once
    /// per run and not at all once the run changed them.
    public var unchanged = 0
    /// Rows created holding only their identity (a reference to a row not seen yet, `missing: stub`).
    public var stubs = 0
    /// Records of this entity rejected (not pages: those count for the run as a whole).
    public var rejected = 0
    /// Stubs still unfilled when the run ended: rows of this entity (any run's) holding nothing
    /// but their identity. `nil` for entities no relationship stubs, or before the end.
    public var unfilled: Int?

    /// Counts as given (tests and resumed runs).
    public init(inserted: Int = 0, updated: Int = 0, unchanged: Int = 0, stubs: Int = 0, rejected: Int = 0, unfilled: Int? = nil) {
        self.inserted = inserted
        self.updated = updated
        self.unchanged = unchanged
        self.stubs = stubs
        self.rejected = rejected
        self.unfilled = unfilled
    }

    static func + (a: Self, b: Self) -> Self {
        EntityCounts(
            inserted: a.inserted + b.inserted, updated: a.updated + b.updated, unchanged: a.unchanged + b.unchanged,
            stubs: a.stubs + b.stubs,
            rejected: a.rejected + b.rejected, unfilled: b.unfilled ?? a.unfilled)
    }
}
