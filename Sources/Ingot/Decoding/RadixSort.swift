/// Sorts 64-bit words ascending a byte at a time, least significant first: one pass counts every
/// byte's digits, then a stable scattering pass per byte the words do not all share. A page's
/// identities (``PageFootprint``) and a staged batch's identity order (`StageOrder`) are a few
/// thousand words of a few significant bytes, which a comparison sort takes several times longer
/// over (docs/performance-notes.md, "Checksums and batch sorts").
enum RadixSort {
    /// Below this many words a comparison sort is the faster.
    static let threshold = 64

    /// Sorts `words` in place.
    static func sort(_ words: UnsafeMutableBufferPointer<UInt64>) {
        let n = words.count
        guard n > threshold, let first = words.first else {
            var words = words
            words.sort()
            return
        }
        var counts = [Int](repeating: 0, count: 8 * 256)
        counts.withUnsafeMutableBufferPointer { counts in
            for word in words {
                for byte in 0..<8 { counts[byte &* 256 &+ Int(truncatingIfNeeded: word >> UInt64(byte &* 8)) & 0xFF] &+= 1 }
            }
            let scratch = UnsafeMutableBufferPointer<UInt64>.allocate(capacity: n)
            defer { scratch.deallocate() }
            var source = words
            var target = scratch
            for byte in 0..<8 {
                let shift = UInt64(byte * 8)
                let digits = UnsafeMutableBufferPointer(rebasing: counts[byte * 256..<(byte + 1) * 256])
                // A byte every word shares leaves the order as it is.
                if digits[Int(truncatingIfNeeded: first >> shift) & 0xFF] == n { continue }
                var total = 0
                for k in digits.indices {
                    let count = digits[k]
                    digits[k] = total
                    total &+= count
                }
                for word in source {
                    let digit = Int(truncatingIfNeeded: word >> shift) & 0xFF
                    target[digits[digit]] = word
                    digits[digit] &+= 1
                }
                swap(&source, &target)
            }
            if source.baseAddress != words.baseAddress {
                _ = words.update(fromContentsOf: source)
            }
        }
    }

    /// Sorts `words` in place.
    static func sort(_ words: inout [UInt64]) {
        words.withUnsafeMutableBufferPointer { sort($0) }
    }

    /// The positions of `keys` in key order, ties in the order given (a stable sort's
    /// permutation). When every key's distance from the least and its position fit one word
    /// together (a batch's identities usually span far less than 2^50), the words are sorted;
    /// otherwise the (key, position) pairs are, by comparison.
    static func order(of keys: [Int64]) -> [Int] {
        guard let least = keys.min(), let most = keys.max() else { return [] }
        let positionBits = UInt64.bitWidth - UInt64(keys.count - 1).leadingZeroBitCount
        let span = UInt64(bitPattern: most) &- UInt64(bitPattern: least)
        guard positionBits < UInt64.bitWidth, span >> (UInt64.bitWidth - positionBits) == 0 else {
            return keys.indices.sorted { keys[$0] != keys[$1] ? keys[$0] < keys[$1] : $0 < $1 }
        }
        var words = keys.enumerated().map { position, key in
            (UInt64(bitPattern: key) &- UInt64(bitPattern: least)) << positionBits | UInt64(position)
        }
        sort(&words)
        let mask = (UInt64(1) << positionBits) &- 1
        return words.map { Int(truncatingIfNeeded: $0 & mask) }
    }
}
