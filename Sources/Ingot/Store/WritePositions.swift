/// What a write of a shared run (`--join`) says of each part of a row (docs/scale-out.md, "Later
/// pages win, across jobs"): per column and per to-many set, the position (``UnitOrder``) of the
/// unit part whose record gave it — `nil` where the write gives nothing — and the row's `@`, its
/// latest mention (a stub's: its batch's last part). A stored slot takes the write's value only
/// where the write is not older (``wins(_:over:)``); the row's `@` becomes the larger.
///
/// One rule for every store that shares runs: PostgreSQL applies it in SQL over these positions
/// (`_ingot_pos`, PGStore+Join.swift), a store that keeps rows in memory by ``apply(over:)``
/// (the tests' memory store), over the same values in the same order (``Slots``).
package struct WritePositions: Sendable, Equatable {
    /// Per column (identity columns: `nil`, never written over).
    package var columns: [Int64?]
    /// Per to-many relationship.
    package var sets: [Int64?]
    /// The row's `@`.
    package var touched: Int64

    /// The positions of a write of `row` (of `layout`'s entity) by the join numbered `ordinal`;
    /// `fallback`: the key its batch's last part has, where the row gives nothing.
    package init(_ row: ResolvedBatch.Row, _ layout: EntityLayout, ordinal: Int64, fallback: Int) {
        var latest = 0
        func position(_ unit: Int) -> Int64? {
            latest = max(latest, unit)
            return unit > 0 ? UnitOrder.position(ordinal: ordinal, key: unit) : nil
        }
        columns = layout.columns.indices.map { slot in
            position(row.valueUnits.isEmpty || layout.identitySlots.contains(slot) ? 0 : row.valueUnits[row.valueUnits.startIndex + slot])
        }
        sets = layout.toMany.indices.map { k in position(row.linkUnits.isEmpty ? 0 : row.linkUnits[row.linkUnits.startIndex + k]) }
        touched = UnitOrder.position(ordinal: ordinal, key: latest > 0 ? latest : fallback)
    }

    package init(columns: [Int64?], sets: [Int64?], touched: Int64) {
        (self.columns, self.sets, self.touched) = (columns, sets, touched)
    }

    /// Every slot in `_ingot_pos` order: the columns, the sets, then `@`.
    package var slots: [Int64?] { columns + sets + [touched] }

    /// Whether the write gives anything but its identity (a column or a set): a row that gives
    /// nothing is a stub.
    package var gives: Bool { columns.contains { $0 != nil } || sets.contains { $0 != nil } }

    /// Whether a write at `position` replaces a stored slot at `stored` (`nil`: written by a
    /// single run, or never): the later unit wins, and a single run's value loses to every unit.
    package static func wins(_ position: Int64?, over stored: Int64?) -> Bool {
        guard let position else { return false }
        return position >= (stored ?? 0)
    }
}

extension WritePositions {
    /// Where a row's positions are in the array a store keeps beside it (`_ingot_pos`, counted
    /// from 0 here): one per column, one per to-many set, then `@`.
    package struct Slots: Sendable {
        package let columns: Int
        package let sets: Int

        package init(_ layout: EntityLayout) {
            columns = layout.columns.count
            sets = layout.toMany.count
        }

        /// To-many set `k`'s.
        package func set(_ k: Int) -> Int { columns + k }
        /// The row's `@`.
        package var touched: Int { columns + sets }
        package var count: Int { columns + sets + 1 }
        /// A row no shared run wrote: every slot 0, which every unit's write overtakes.
        package var unwritten: [Int64] { Array(repeating: 0, count: count) }
    }

    /// What the write takes over a stored row whose positions are `stored` (``Slots``' order):
    /// the columns and the to-many sets whose stored position it does not lose to
    /// (``wins(_:over:)``), now at the write's positions; the row's `@` becomes the larger.
    package func apply(over stored: inout [Int64]) -> (columns: [Int], sets: [Int]) {
        var taken: (columns: [Int], sets: [Int]) = ([], [])
        for (slot, position) in columns.enumerated() where Self.wins(position, over: stored[slot]) {
            taken.columns.append(slot)
            stored[slot] = position ?? 0
        }
        for (k, position) in sets.enumerated() where Self.wins(position, over: stored[columns.count + k]) {
            taken.sets.append(k)
            stored[columns.count + k] = position ?? 0
        }
        let touchedSlot = columns.count + sets.count
        stored[touchedSlot] = max(stored[touchedSlot], touched)
        return taken
    }
}
