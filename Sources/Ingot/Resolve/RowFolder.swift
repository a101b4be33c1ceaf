/// Folds a batch's rows into one row per identity, in order: a later row's present columns and
/// to-many sets override earlier ones, absent ones leave them. Pure: no database, any queue.
struct RowFolder: Sendable {
    struct MergedRows: Sendable {
        var index: [IdentityKey: Int] = [:]
        /// One row per identity, in first-seen order; their values are in `storage`.
        var rows: [EntityRow] = []
        /// Rows of an entity without identity: each is inserted.
        var anonymous: [EntityRow] = []
        var storage = RowStorage()
        /// In a run shared by several jobs, per value slot and per to-many slot of `storage`: the
        /// unit (page of the shared source) whose record gave it, 0 where none did. Empty otherwise.
        var valueUnits: [Int] = []
        var linkUnits: [Int] = []
        /// Per row of `rows`: the record that gave it last (``RecordOrigin``), 0 where unknown —
        /// what a rejection by a staged load's merge names.
        var origins: [Int64] = []

        /// Removes the row of `identity`, keeping the others' order. Whether there was one.
        mutating func remove(_ identity: IdentityKey) -> Bool {
            guard let at = index.removeValue(forKey: identity) else { return false }
            rows.remove(at: at)
            if origins.indices.contains(at) { origins.remove(at: at) }
            for k in at..<rows.count {
                if let moved = rows[k].identity { index[moved] = k }
            }
            return true
        }

        /// The stored row of each row (`nil`: not stored), from the identities `found` stored.
        func refs(_ found: [IdentityKey: StoredRef]) -> [StoredRef?] {
            var refs = [StoredRef?](repeating: nil, count: rows.count)
            for (key, ref) in found {
                if let position = index[key] { refs[position] = ref }
            }
            return refs
        }
    }

    let layouts: [EntityLayout]
    /// Per entity, its parent (`parent:`): a child's stub stubs the parent's row too, so that
    /// the two rows of a child always go together.
    let parents: [Int?]
    /// Per entity.
    private(set) var merged: [MergedRows]
    /// The (entity, to-many) sides with an inverse that some folded row gave a set on: only
    /// those are reconciled when the other side's set comes.
    private var givenSides: Set<[Int]>
    /// Per entity, what merging a row reads of its layout (read once: a layout is a struct of
    /// arrays, and copying it per row retains them all).
    private let shapes: [Shape]

    /// A class, immutable: merging a row reads its entity's shape, and a struct of five arrays
    /// was copied for every row (five retains and releases; people-20k: 12 M instructions).
    final class Shape: Sendable {
        let columns: Int
        let links: Int
        /// The to-manys whose `operations:` lack `delete`: a later set adds to the earlier one.
        let keptLinks: [Int]
        /// The owned to-manys (`owned: true`) and their target entities: a later set replaces the
        /// earlier one whole, its rows past the new set's end dropped.
        let ownedLinks: [(k: Int, target: Int)]
        /// The to-manys with an inverse sharing their join table (`inverse:`), and that inverse
        /// (its entity and to-many index): a set given on one side changes the other side's.
        let inverseLinks: [(k: Int, entity: Int, inverse: Int)]
        /// The to-many sides of a to-one (`planet.residents` ↔ `person.homeworld`): the to-one's
        /// entity and its key slot there (single-column keys).
        let foreignKeyLinks: [(k: Int, entity: Int, slot: Int)]
        /// The to-ones that a to-many of their target reads from the other side: their key slot,
        /// and that entity and to-many.
        let foreignKeyOwners: [(slot: Int, entity: Int, k: Int)]

        init(
            columns: Int, links: Int, keptLinks: [Int], ownedLinks: [(k: Int, target: Int)],
            inverseLinks: [(k: Int, entity: Int, inverse: Int)], foreignKeyLinks: [(k: Int, entity: Int, slot: Int)],
            foreignKeyOwners: [(slot: Int, entity: Int, k: Int)]
        ) {
            self.columns = columns
            self.links = links
            self.keptLinks = keptLinks
            self.ownedLinks = ownedLinks
            self.inverseLinks = inverseLinks
            self.foreignKeyLinks = foreignKeyLinks
            self.foreignKeyOwners = foreignKeyOwners
        }
    }

    init(layouts: [EntityLayout], parents: [Int?] = []) {
        self.layouts = layouts
        self.parents = parents
        merged = Array(repeating: MergedRows(), count: layouts.count)
        shapes = layouts.map { layout in
            Shape(
                columns: layout.columns.count, links: layout.toMany.count,
                keptLinks: layout.toMany.indices.filter { layout.toMany[$0].keepsLinks },
                ownedLinks: layout.toMany.indices.filter { layout.toMany[$0].isOwned }.map { ($0, layout.toMany[$0].target) },
                inverseLinks: layout.toMany.indices.compactMap { k in
                    let toMany = layout.toMany[k]
                    guard toMany.hasJoinTable, layouts.indices.contains(toMany.target) else { return nil }
                    let other = layouts[toMany.target].toMany
                    guard
                        let inverse = other.indices.first(where: { j in
                            other[j].joinTable == toMany.joinTable && other[j].target == layout.entity
                                && (toMany.target != layout.entity || j != k)
                        })
                    else { return nil }
                    return (k, toMany.target, inverse)
                },
                foreignKeyLinks: layout.toMany.indices.compactMap { k in
                    let toMany = layout.toMany[k]
                    guard toMany.isForeignKey, toMany.sourceColumns.count == 1, layouts.indices.contains(toMany.target),
                        let slot = layouts[toMany.target].columns.firstIndex(where: { $0.name == toMany.sourceColumns[0] })
                    else { return nil }
                    return (k, toMany.target, slot)
                },
                foreignKeyOwners: layouts.indices.flatMap { other in
                    layouts[other].toMany.indices.compactMap { k -> (slot: Int, entity: Int, k: Int)? in
                        let toMany = layouts[other].toMany[k]
                        guard toMany.isForeignKey, toMany.target == layout.entity, toMany.sourceColumns.count == 1,
                            let slot = layout.columns.firstIndex(where: { $0.name == toMany.sourceColumns[0] })
                        else { return nil }
                        return (slot, other, k)
                    }
                })
        }
        givenSides = Set()
    }

    /// Folds every record of `pages`; each bare reference adds a stub row (a row with only its
    /// identity, which merges into anything: a no-op when the identity is already in the batch).
    /// Right when every relationship stubs missing targets.
    static func foldingWithStubs(_ pages: [DecodedPage], layouts: [EntityLayout], parents: [Int?] = []) -> RowFolder {
        var folder = RowFolder(layouts: layouts, parents: parents)
        folder.reserve(for: pages)
        for page in pages {
            let unit = page.unitKey
            for record in page.records {
                let origin = RecordOrigin.code(seq: page.seq, record: record.index)
                for r in record.rows { folder.merge(page.rows[r], from: page.storage, unit: unit, origin: origin) }
                for reference in record.references where folder.merged[reference.target].index[reference.identity] == nil {
                    folder.addStub(reference.target, reference.identity, origin: origin)
                }
            }
        }
        return folder
    }

    /// Reserves room for the rows of `pages` (at most), so that nothing grows step by step.
    mutating func reserve(for pages: [DecodedPage]) {
        var counts = [Int](repeating: 0, count: layouts.count)
        for page in pages {
            for row in page.rows { counts[row.entity] += 1 }
        }
        for (entity, count) in counts.enumerated() where count > 0 {
            merged[entity].index.reserveCapacity(count)
            merged[entity].rows.reserveCapacity(count)
            merged[entity].origins.reserveCapacity(count)
            merged[entity].storage.values.reserveCapacity(count * layouts[entity].columns.count)
            merged[entity].storage.linkSets.reserveCapacity(count * layouts[entity].toMany.count)
        }
    }

    /// Merges `row`, whose values are in `source`: a new identity is copied in; a known one
    /// takes the row's present columns and to-many sets (later wins, key by key). In a joined
    /// run, `unit` is the key of the row's part of its unit (``UnitOrder``: parts come in
    /// increasing keys), and each slot remembers the key that set it last. `origin` is the record's (``RecordOrigin``).
    mutating func merge(_ row: EntityRow, from source: RowStorage, unit: Int = 0, origin: Int64 = 0) {
        let shape = shapes[row.entity]
        let columnCount = shape.columns
        let linkCount = shape.links
        let target: EntityRow
        if let identity = row.identity {
            if let at = merged[row.entity].index[identity] {
                var existing = merged[row.entity].rows[at]
                // `operations:` without `delete`: a later set adds to the earlier one.
                var kept: [(Int, [IdentityKey])] = []
                for k in shape.keptLinks {
                    if let earlier = merged[row.entity].storage.linkSets[existing.linkStart + k], source.linkSets[row.linkStart + k] != nil
                    {
                        kept.append((k, earlier))
                    }
                }
                merged[row.entity].storage.overwrite(&existing, with: row, from: source, columns: columnCount, links: linkCount)
                for (k, earlier) in kept {
                    let later = merged[row.entity].storage.linkSets[existing.linkStart + k] ?? []
                    merged[row.entity].storage.linkSets[existing.linkStart + k] = earlier + later.filter { !earlier.contains($0) }
                }
                merged[row.entity].rows[at].mask = existing.mask
                if origin != 0 { merged[row.entity].origins[at] = origin }
                target = existing
            } else {
                var copy = merged[row.entity].storage.appendRow(
                    entity: row.entity, columns: columnCount, links: linkCount, identity: identity)
                merged[row.entity].storage.overwrite(&copy, with: row, from: source, columns: columnCount, links: linkCount)
                merged[row.entity].index[identity] = merged[row.entity].rows.count
                merged[row.entity].rows.append(copy)
                merged[row.entity].origins.append(origin)
                target = copy
            }
        } else {
            var copy = merged[row.entity].storage.appendRow(entity: row.entity, columns: columnCount, links: linkCount)
            merged[row.entity].storage.overwrite(&copy, with: row, from: source, columns: columnCount, links: linkCount)
            merged[row.entity].anonymous.append(copy)
            target = copy
        }
        if unit > 0 { stamp(target, with: row, from: source, unit: unit) }
        if let identity = row.identity { relate(row, identity, shape, from: source) }
    }

    /// What the sets `row` gives do to the batch's other rows: an owned set replaces the earlier
    /// one whole (the rows an earlier record of the batch gave past the new set's end go; the
    /// store drops the stored ones), and each side of an inverse pair or of a to-one and its
    /// to-many inverse is made to agree with the other.
    private mutating func relate(_ row: EntityRow, _ identity: IdentityKey, _ shape: Shape, from source: RowStorage) {
        for owned in shape.ownedLinks {
            guard let set = source.linkSets[row.linkStart + owned.k] else { continue }
            dropOwned(of: identity, in: owned.target, from: set.count)
        }
        // A set given on one side of an inverse pair replaces this row's links on that side:
        // the other side's sets folded before it say the same of each link it makes or drops,
        // so that the store, writing both sides, ends as the records in order would.
        for pair in shape.inverseLinks {
            guard let set = source.linkSets[row.linkStart + pair.k] else { continue }
            givenSides.insert([row.entity, pair.k])
            if givenSides.contains([pair.entity, pair.inverse]) {
                reconcile(identity, set, in: pair.entity, side: pair.inverse)
            }
        }
        // A to-one and its to-many inverse, the same way: a `residents` set makes the folded
        // `homeworld` keys agree, a `homeworld` key the folded `residents` sets.
        for pair in shape.foreignKeyLinks {
            guard let set = source.linkSets[row.linkStart + pair.k], case .single(let key) = identity else { continue }
            givenSides.insert([row.entity, pair.k])
            let members = Set(set)
            for position in merged[pair.entity].rows.indices {
                let other = merged[pair.entity].rows[position]
                guard let otherKey = other.identity, other.mask.contains(pair.slot) else { continue }
                let slot = other.valueStart + pair.slot
                if members.contains(otherKey) {
                    merged[pair.entity].storage.set(slot, key)
                } else if merged[pair.entity].storage.value(slot) == key {
                    merged[pair.entity].storage.set(slot, .null)
                }
            }
        }
        for owner in shape.foreignKeyOwners where row.mask.contains(owner.slot) && givenSides.contains([owner.entity, owner.k]) {
            let key = source.value(row.valueStart + owner.slot)
            for position in merged[owner.entity].rows.indices {
                let other = merged[owner.entity].rows[position]
                guard case .single(let otherKey)? = other.identity,
                    let theirs = merged[owner.entity].storage.linkSets[other.linkStart + owner.k]
                else { continue }
                let linked = key == otherKey
                let listed = theirs.contains(identity)
                if linked && !listed {
                    merged[owner.entity].storage.linkSets[other.linkStart + owner.k] = theirs + [identity]
                } else if !linked && listed {
                    merged[owner.entity].storage.linkSets[other.linkStart + owner.k] = theirs.filter { $0 != identity }
                }
            }
        }
    }

    /// Makes the sets folded on side `side` of `entity` agree with `owner`'s new set on the other
    /// side, `set`: a row `owner` links to lists `owner`, one it does not link to does not.
    private mutating func reconcile(_ owner: IdentityKey, _ set: [IdentityKey], in entity: Int, side: Int) {
        let members = Set(set)
        for position in merged[entity].rows.indices {
            let row = merged[entity].rows[position]
            guard let other = row.identity, let theirs = merged[entity].storage.linkSets[row.linkStart + side] else { continue }
            let linked = members.contains(other)
            let listed = theirs.contains(owner)
            if linked && !listed {
                merged[entity].storage.linkSets[row.linkStart + side] = theirs + [owner]
            } else if !linked && listed {
                merged[entity].storage.linkSets[row.linkStart + side] = theirs.filter { $0 != owner }
            }
        }
    }

    /// Drops the folded rows `owner` owns in `entity` at `position` or more (owned rows are
    /// keyed by their owner's identity and their position, from 0), and what they own in turn.
    private mutating func dropOwned(of owner: IdentityKey, in entity: Int, from position: Int) {
        var position = position
        while merged[entity].remove(.composite(owner.values + [.integer(Int64(position))])) {
            let child = IdentityKey.composite(owner.values + [.integer(Int64(position))])
            for owned in shapes[entity].ownedLinks { dropOwned(of: child, in: owned.target, from: 0) }
            position += 1
        }
    }

    /// Records `unit` as the source of the slots `row` set in `target`.
    private mutating func stamp(_ target: EntityRow, with row: EntityRow, from source: RowStorage, unit: Int) {
        let shape = shapes[row.entity]
        let e = row.entity
        let values = merged[e].storage.values.count
        if merged[e].valueUnits.count < values {
            merged[e].valueUnits.append(contentsOf: repeatElement(0, count: values - merged[e].valueUnits.count))
        }
        let links = merged[e].storage.linkSets.count
        if merged[e].linkUnits.count < links {
            merged[e].linkUnits.append(contentsOf: repeatElement(0, count: links - merged[e].linkUnits.count))
        }
        for slot in 0..<shape.columns where row.mask.contains(slot) { merged[e].valueUnits[target.valueStart + slot] = unit }
        for k in 0..<shape.links where source.linkSets[row.linkStart + k] != nil {
            merged[e].linkUnits[target.linkStart + k] = unit
        }
    }

    /// Puts each entity's rows in identity order, the order the writer writes them in (it walks
    /// the B-trees forwards instead of jumping around them). Done where the batch is folded, so
    /// the writer does not sort.
    mutating func sortByIdentity() {
        for entity in merged.indices where merged[entity].rows.count > 1 {
            let order = merged[entity].rows.withUnsafeBufferPointer(RowFolder.identityOrder)
            guard order.indices.contains(where: { order[$0] != $0 }) else { continue }
            merged[entity].rows = order.map { merged[entity].rows[$0] }
            merged[entity].origins = order.map { merged[entity].origins[$0] }
            for (position, row) in merged[entity].rows.enumerated() {
                if let identity = row.identity { merged[entity].index[identity] = position }
            }
        }
    }

    /// The positions of `rows` in identity order (rows without identity last).
    static func identityOrder(_ rows: UnsafeBufferPointer<EntityRow>) -> [Int] {
        // The common case, one integer identity: sorted by it alone.
        var integers: [Int64] = []
        integers.reserveCapacity(rows.count)
        for row in rows {
            guard case .single(.integer(let id))? = row.identity else { break }
            integers.append(id)
        }
        if integers.count == rows.count { return RadixSort.order(of: integers) }
        return rows.indices.sorted { IdentityKey.precedes(rows[$0].identity, rows[$1].identity) }
    }

    /// Adds a row holding only `identity` unless the identity is in the batch already.
    /// Sets `columns` of `entity`'s rows: those marked `always` in every row, the others in rows
    /// being inserted (`inserting(position)`, anonymous rows always) that do not have them.
    mutating func fill(_ entity: Int, _ columns: [(slot: Int, value: ScalarValue, always: Bool)], inserting: (Int) -> Bool) {
        for position in merged[entity].rows.indices {
            let row = merged[entity].rows[position]
            let isInsert = inserting(position)
            for column in columns where column.always || (isInsert && !row.mask.contains(column.slot)) {
                merged[entity].storage.set(row.valueStart + column.slot, column.value)
                merged[entity].rows[position].mask.insert(column.slot)
            }
        }
        for position in merged[entity].anonymous.indices {
            let row = merged[entity].anonymous[position]
            for column in columns where column.always || !row.mask.contains(column.slot) {
                merged[entity].storage.set(row.valueStart + column.slot, column.value)
                merged[entity].anonymous[position].mask.insert(column.slot)
            }
        }
    }

    mutating func addStub(_ entity: Int, _ identity: IdentityKey, origin: Int64 = 0) {
        if let parent = parents[safe: entity] ?? nil { addStub(parent, identity, origin: origin) }
        guard merged[entity].index[identity] == nil else { return }
        let layout = layouts[entity]
        var row = merged[entity].storage.appendRow(entity: entity, layout: layout, identity: identity)
        for (slot, value) in zip(layout.identitySlots, identity.values) {
            merged[entity].storage.set(row.valueStart + slot, value)
            row.mask.insert(slot)
        }
        merged[entity].index[identity] = merged[entity].rows.count
        merged[entity].rows.append(row)
        merged[entity].origins.append(origin)
    }
}

extension RowStorage {
    /// Copies the present columns and to-many sets of `row` (in `source`) over those of `target`
    /// (in this storage).
    mutating func overwrite(_ target: inout EntityRow, with row: EntityRow, from source: RowStorage, columns: Int, links: Int) {
        for slot in 0..<columns where row.mask.contains(slot) {
            copy(target.valueStart + slot, from: source, row.valueStart + slot)
        }
        target.mask.formUnion(row.mask)
        for k in 0..<links {
            if let set = source.linkSets[row.linkStart + k] { linkSets[target.linkStart + k] = set }
        }
    }
}

extension IdentityKey {
    /// An order on identities (integers, then reals, then text; composites component-wise), for
    /// writing rows in index order.
    static func precedes(_ a: IdentityKey?, _ b: IdentityKey?) -> Bool {
        switch (a, b) {
        case (.single(let x)?, .single(let y)?): return ScalarValue.precedes(x, y)
        case (.composite(let xs)?, .composite(let ys)?):
            for (x, y) in zip(xs, ys) where x != y { return ScalarValue.precedes(x, y) }
            return false
        default: return false
        }
    }
}

extension ScalarValue {
    static func precedes(_ a: ScalarValue, _ b: ScalarValue) -> Bool {
        switch (a, b) {
        case (.integer(let x), .integer(let y)): x < y
        case (.real(let x), .real(let y)): x < y
        case (.text(let x), .text(let y)): x < y
        case (.bool(let x), .bool(let y)): !x && y
        default: a.rank < b.rank
        }
    }

    private var rank: Int {
        switch self {
        case .null: 0
        case .integer: 1
        case .real: 2
        case .text: 3
        case .bool: 4
        }
    }
}

/// Which record of the run a row came from — its page's seq and its index in the page — packed
/// in one integer (seq in the high 32 bits; 0: unknown), as a staged load keeps it beside each
/// staged row: a row the database refuses in the staged load's merge is rejected naming the
/// record that gave it last, its page and coding path, as a refusal batch by batch does.
enum RecordOrigin {
    /// The origin of record `record` of page `seq`.
    static func code(seq: Int, record: Int) -> Int64 {
        guard (1...Int(Int32.max)).contains(seq), (0...Int(UInt32.max)).contains(record) else { return 0 }
        return Int64(seq) << 32 | Int64(record)
    }

    /// The page and record of `code`; `nil` for 0 (unknown).
    static func decode(_ code: Int64) -> (seq: Int, index: Int)? {
        guard code > 0 else { return nil }
        return (Int(code >> 32), Int(code & 0xFFFF_FFFF))
    }
}
