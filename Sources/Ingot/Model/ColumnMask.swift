/// A set of column slots of an ``EntityLayout`` (at most 128): which columns a row holds a value
/// for, and so which columns its insert or update statement writes.
struct ColumnMask: Hashable, Sendable {
    /// The most columns (attributes and to-one key columns) an entity may have.
    static let capacity = 128

    var low: UInt64 = 0
    var high: UInt64 = 0

    @inline(__always) mutating func insert(_ slot: Int) {
        if slot < 64 { low |= 1 << UInt64(slot) } else { high |= 1 << UInt64(slot - 64) }
    }

    @inline(__always) mutating func formUnion(_ other: ColumnMask) {
        low |= other.low
        high |= other.high
    }

    @inline(__always) func contains(_ slot: Int) -> Bool {
        slot < 64 ? low & (1 << UInt64(slot)) != 0 : high & (1 << UInt64(slot - 64)) != 0
    }

    func removing(_ slot: Int) -> ColumnMask {
        var copy = self
        if slot < 64 { copy.low &= ~(1 << UInt64(slot)) } else { copy.high &= ~(1 << UInt64(slot - 64)) }
        return copy
    }

    /// The slots of this mask that are not in `other`.
    @inline(__always) func subtracting(_ other: ColumnMask) -> ColumnMask {
        ColumnMask(low: low & ~other.low, high: high & ~other.high)
    }
}
