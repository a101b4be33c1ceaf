/// A batch's rows as a staged load stages them: not folded per identity — the merge folds every
/// identity's staged rows across all batches, so a fold per batch did the same work twice — but
/// per entity in identity order, rows of one identity in the order their records came, with a
/// stub (a row of the identity alone) for each identity the batch only refers to.
///
/// Why: folding each staged batch per identity (``RowFolder``: a hash of every identity, a copy
/// of every row into the folder's storage) was about 9 % of a staged first load's CPU, in its
/// stage phase where both cores are busy; the merge's result is the same either way (its fold
/// takes the rows of one identity in staged order: docs/performance-notes.md, "Staged batches
/// unfolded").
///
/// Only for identities that are one integer, the usual kind, sorted by ``RadixSort``; a batch
/// with any other identity is folded as before (``make(_:layouts:)`` returns `nil`). Built on the
/// assembler's queue; read by ``StageFile`` on the writer's, with the batch's pages it indexes.
struct UnfoldedRows: Sendable {
    struct Entity: Sendable {
        /// Its rows in the order their records came: the page (in the batch), the row (in the
        /// page's `rows`) and the record that gave it (``RecordOrigin``).
        var pages: [Int32] = []
        var rows: [Int32] = []
        var origins: [Int64] = []
        /// The identities the batch refers to and gives no row for, once each, with the first
        /// record that referred to it.
        var stubs: [Int64] = []
        var stubOrigins: [Int64] = []
        /// Positions into the rows then the stubs (`rows.count + k`: stub `k`), in identity
        /// order, ties in the order the records came.
        var order: [Int] = []

        var count: Int { rows.count + stubs.count }
    }

    /// Per entity.
    var entities: [Entity]

    /// The unfolded rows of `pages`; `nil` when some row or reference of an entity the batch
    /// stages has an identity that is not one integer (that batch is folded instead).
    static func make(_ pages: [DecodedPage], layouts: [EntityLayout]) -> UnfoldedRows? {
        var entities = [Entity](repeating: Entity(), count: layouts.count)
        var keys = [[Int64]](repeating: [], count: layouts.count)
        var referred = [[(key: Int64, origin: Int64)]](repeating: [], count: layouts.count)
        // Per entity, its identity's one slot (read once: copying a layout per row retains its arrays).
        let slots = layouts.map { $0.identitySlots.count == 1 ? $0.identitySlots.first : nil }
        for (p, page) in pages.enumerated() {
            guard page.rows.count <= Int(Int32.max), p <= Int(Int32.max) else { return nil }
            // Read in place: a copy of each row would retain its identity's storage.
            let ok = page.rows.withUnsafeBufferPointer { rows in
                page.storage.withView { values -> Bool in
                    for record in page.records {
                        let origin = RecordOrigin.code(seq: page.seq, record: record.index)
                        for r in record.rows where rows[r].identity != nil {
                            let entity = rows[r].entity
                            guard let slot = slots[entity], case .integer(let key)? = values.values[rows[r].valueStart + slot] else {
                                return false
                            }
                            entities[entity].pages.append(Int32(p))
                            entities[entity].rows.append(Int32(r))
                            entities[entity].origins.append(origin)
                            keys[entity].append(key)
                        }
                        for reference in record.references {
                            guard case .single(.integer(let key)) = reference.identity, layouts.indices.contains(reference.target)
                            else { return false }
                            referred[reference.target].append((key, origin))
                        }
                    }
                    return true
                }
            }
            guard ok else { return nil }
        }
        for entity in entities.indices {
            entities[entity].order = order(of: &entities[entity], keys: keys[entity], referred: referred[entity])
        }
        return UnfoldedRows(entities: entities)
    }

    /// The identity order of `entity`'s rows (`keys`, in arrival order) and of the identities
    /// `referred` to that no row gives, which become its stubs (once each).
    private static func order(of entity: inout Entity, keys: [Int64], referred: [(key: Int64, origin: Int64)]) -> [Int] {
        let rowCount = keys.count
        let all = referred.isEmpty ? keys : keys + referred.map(\.key)
        let sorted = RadixSort.order(of: all)
        guard !referred.isEmpty else { return sorted }
        // A reference to an identity that has a row, or an earlier reference, adds nothing: the
        // stub would fold into it.
        var order: [Int] = []
        order.reserveCapacity(sorted.count)
        var start = 0
        while start < sorted.count {
            var end = start + 1
            while end < sorted.count && all[sorted[end]] == all[sorted[start]] { end += 1 }
            if sorted[start] < rowCount {
                for k in start..<end where sorted[k] < rowCount { order.append(sorted[k]) }
            } else {
                // Only references: the first (ties keep their order) becomes the stub.
                let first = referred[sorted[start] - rowCount]
                order.append(rowCount + entity.stubs.count)
                entity.stubs.append(first.key)
                entity.stubOrigins.append(first.origin)
            }
            start = end
        }
        return order
    }
}
