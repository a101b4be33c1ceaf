/// Folds a batch's rows into one row per identity, in order: a later row's present columns and
/// to-many sets override earlier ones, absent ones leave them. Pure: no database, any queue.
struct RowFolder: Sendable {
    struct MergedRows: Sendable {
        var index: [IdentityKey: Int] = [:]
        /// One row per identity, in first-seen order.
        var rows: [EntityRow] = []
        /// Rows of an entity without identity: each is inserted.
        var anonymous: [EntityRow] = []
    }

    let layouts: [EntityLayout]
    /// Per entity.
    private(set) var merged: [MergedRows]

    init(layouts: [EntityLayout]) {
        self.layouts = layouts
        merged = Array(repeating: MergedRows(), count: layouts.count)
    }

    /// Folds every record of `pages`; each bare reference adds a stub row (a row with only its
    /// identity, which merges into anything: a no-op when the identity is already in the batch).
    /// Right when every relationship stubs missing targets.
    static func foldingWithStubs(_ pages: [DecodedPage], layouts: [EntityLayout]) -> RowFolder {
        var folder = RowFolder(layouts: layouts)
        folder.reserve(for: pages)
        for page in pages {
            for record in page.records {
                for row in record.rows { folder.merge(row) }
                for reference in record.references where folder.merged[reference.target].index[reference.identity] == nil {
                    folder.merge(folder.stub(reference.target, reference.identity))
                }
            }
        }
        return folder
    }

    /// Reserves room for the rows of `pages` (at most), so the indexes do not grow step by step.
    mutating func reserve(for pages: [DecodedPage]) {
        var counts = [Int](repeating: 0, count: layouts.count)
        for page in pages {
            for record in page.records {
                for row in record.rows { counts[row.entity] += 1 }
            }
        }
        for (entity, count) in counts.enumerated() where count > 0 {
            merged[entity].index.reserveCapacity(count)
            merged[entity].rows.reserveCapacity(count)
        }
    }

    mutating func merge(_ row: EntityRow) {
        guard let identity = row.identity else {
            merged[row.entity].anonymous.append(row)
            return
        }
        if let at = merged[row.entity].index[identity] {
            for (slot, value) in row.columns.enumerated() where value != nil {
                merged[row.entity].rows[at].columns[slot] = value
            }
            for (k, links) in row.toMany.enumerated() where links != nil {
                merged[row.entity].rows[at].toMany[k] = links
            }
        } else {
            merged[row.entity].index[identity] = merged[row.entity].rows.count
            merged[row.entity].rows.append(row)
        }
    }

    /// A row holding only `identity`.
    func stub(_ entity: Int, _ identity: IdentityKey) -> EntityRow {
        let layout = layouts[entity]
        var columns = [SQLValue?](repeating: nil, count: layout.columns.count)
        for (slot, value) in zip(layout.identitySlots, identity.values) { columns[slot] = value }
        return EntityRow(
            entity: entity, identity: identity, columns: columns,
            toMany: [[IdentityKey]?](repeating: nil, count: layout.toMany.count))
    }
}

/// A batch on its way to the writer: its pages, and their rows already folded when that needs
/// no database (see ``Store/prepare(_:)``).
struct PreparedBatch: Sendable {
    /// The batch's number in the run (1, 2, …), in the order the writer saves them.
    var number = 0
    var pages: [DecodedPage]
    var folded: RowFolder?
    /// Per entity, the stored identities and their rowids, when resolved before the writer.
    var existing: [[IdentityKey: Int64]]?
}
