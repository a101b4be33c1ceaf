import Foundation

/// The to-many sets of a staged row, as one blob: per set given, its relationship's index (one
/// byte), the number of targets (4 bytes), then each target's identity values (a count byte,
/// then per value a type byte and its bytes, little-endian). Written and read back by this
/// store only, within one load.
enum StagedSets {
    static func append(_ k: Int, _ targets: [IdentityKey], to out: inout [UInt8]) {
        out.append(UInt8(truncatingIfNeeded: k))
        LittleEndian.appendInteger(UInt64(targets.count), bytes: 4, to: &out)
        for target in targets {
            let values = target.values
            out.append(UInt8(truncatingIfNeeded: values.count))
            for value in values {
                switch value {
                case .null: out.append(0)
                case .integer(let v):
                    out.append(1)
                    LittleEndian.appendInteger(UInt64(bitPattern: v), bytes: 8, to: &out)
                case .real(let v):
                    out.append(2)
                    LittleEndian.appendInteger(v.bitPattern, bytes: 8, to: &out)
                case .bool(let v): out.append(v ? 4 : 3)
                case .text(let s):
                    out.append(5)
                    let utf8 = Array(s.utf8)
                    LittleEndian.appendInteger(UInt64(utf8.count), bytes: 4, to: &out)
                    out += utf8
                }
            }
        }
    }

    /// Calls `body` with each set in `bytes`: its relationship index and where its targets are.
    /// A truncated blob (never written so) ends the walk.
    static func sets(in bytes: UnsafeRawBufferPointer, _ body: (_ k: Int, _ targets: Range<Int>) throws -> Void) rethrows {
        var at = 0
        while let set = set(in: bytes, at: at) {
            try body(set.k, set.targets)
            at = set.targets.upperBound
        }
    }

    /// Walks the targets of the set at `range`: `value` with each of a target's values (and its
    /// index among them), then `end` once the target is complete.
    static func forEachTarget(
        in bytes: UnsafeRawBufferPointer, _ range: Range<Int>, value: (_ value: ScalarValue, _ index: Int) -> Void,
        end: () throws -> Void
    ) rethrows {
        var at = range.lowerBound
        while at < range.upperBound {
            let n = Int(bytes[at])
            at += 1
            for index in 0..<n {
                let tag = bytes[at]
                at += 1
                switch tag {
                case 1:
                    value(.integer(Int64(bitPattern: LittleEndian.integer(bytes, at, 8))), index)
                    at += 8
                case 2:
                    value(.real(Double(bitPattern: LittleEndian.integer(bytes, at, 8))), index)
                    at += 8
                case 3: value(.bool(false), index)
                case 4: value(.bool(true), index)
                case 5:
                    let length = Int(LittleEndian.integer(bytes, at, 4))
                    at += 4
                    value(.text(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[at..<(at + length)]), as: UTF8.self)), index)
                    at += length
                default: value(.null, index)
                }
            }
            try end()
        }
    }

    /// The set that begins at `at` in `bytes`: its relationship index and where its targets are
    /// (the next set begins at their end); `nil` at the blob's end, or past a truncated set
    /// (never written so). ``sets(in:_:)`` walks them with a closure.
    static func set(in bytes: UnsafeRawBufferPointer, at start: Int) -> (k: Int, targets: Range<Int>)? {
        guard start + 5 <= bytes.count else { return nil }
        let k = Int(bytes[start])
        let count = Int(LittleEndian.integer(bytes, start + 1, 4))
        var at = start + 5
        for _ in 0..<count {
            guard let next = skipTarget(bytes, at) else { return nil }
            at = next
        }
        return (k, (start + 5)..<at)
    }

    /// The bytes of a target that is one integer: its count (1), the integer's tag, 8 bytes.
    static let singleIntegerBytes = 10

    /// Whether every target of the set at `range` is one integer (``singleIntegerBytes``): a
    /// bare integer identity, the common case.
    static func holdsSingleIntegers(_ bytes: UnsafeRawBufferPointer, _ range: Range<Int>) -> Bool {
        guard range.count % singleIntegerBytes == 0, range.upperBound <= bytes.count else { return false }
        var at = range.lowerBound
        while at < range.upperBound {
            guard bytes[at] == 1, bytes[at + 1] == 1 else { return false }
            at += singleIntegerBytes
        }
        return true
    }

    /// The integer of the one-integer target at `at` (``holdsSingleIntegers(_:_:)``).
    static func singleInteger(in bytes: UnsafeRawBufferPointer, at: Int) -> Int64 {
        Int64(bitPattern: LittleEndian.integer(bytes, at + 2, 8))
    }

    /// Where the target at `at` ends; `nil` past the blob's end.
    private static func skipTarget(_ bytes: UnsafeRawBufferPointer, _ start: Int) -> Int? {
        var at = start
        guard at < bytes.count else { return nil }
        let n = Int(bytes[at])
        at += 1
        for _ in 0..<n {
            guard at < bytes.count else { return nil }
            let tag = bytes[at]
            at += 1
            switch tag {
            case 1, 2: at += 8
            case 5:
                guard at + 4 <= bytes.count else { return nil }
                at += 4 + Int(LittleEndian.integer(bytes, at, 4))
            default: break
            }
        }
        return at <= bytes.count ? at : nil
    }

}

/// Integers met once each, as a set's targets are kept once: a short list searched in order
/// while it is short (a person's few dogs), a hash set past that (a record of a million bare
/// identities stays linear).
struct SeenIntegers {
    private var few: [Int64] = []
    private var many: Set<Int64> = []
    private static let shortList = 16

    /// Forgets every integer (keeping the storage).
    mutating func removeAll() {
        few.removeAll(keepingCapacity: true)
        if !many.isEmpty { many.removeAll() }
    }

    /// Whether `value` was not met before; notes it.
    mutating func insert(_ value: Int64) -> Bool {
        guard many.isEmpty else { return many.insert(value).inserted }
        if few.contains(value) { return false }
        few.append(value)
        if few.count > Self.shortList { many = Set(few) }
        return true
    }
}
