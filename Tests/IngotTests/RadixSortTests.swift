import Testing

@testable import Ingot

/// The sort of identities (Decoding/RadixSort.swift): words as a comparison sort orders them, and
/// a permutation of integer keys that is the stable sort's, whether the keys fit a word with
/// their positions or not.
struct RadixSortTests {
    @Test func wordsSortAsAComparisonSortSortsThem() {
        var rng = SeededGenerator(seed: 5)
        for count in [0, 1, 64, 65, 1000, 4099] {
            for bits in [1, 7, 8, 20, 64] {
                let range = bits == 64 ? UInt64.min...UInt64.max : 0...(UInt64(1) << bits)
                var words = (0..<count).map { _ in UInt64.random(in: range, using: &rng) }
                let expected = words.sorted()
                RadixSort.sort(&words)
                #expect(words == expected, "\(count) words of \(bits) bits")
            }
        }
    }

    @Test(arguments: [
        Int64(-1_000_000_000_000)...Int64(-1_000_000_000_000 + 1000),  // narrow, many ties: packed
        Int64(0)...Int64(3),
        Int64.min...Int64.max,  // too wide for a word with positions: pairs
    ])
    func anOrderIsTheStableSortsPermutation(range: ClosedRange<Int64>) {
        var rng = SeededGenerator(seed: 9)
        for count in [0, 1, 2, 65, 5000] {
            let keys = (0..<count).map { _ in Int64.random(in: range, using: &rng) }
            let stable = keys.indices.sorted { keys[$0] != keys[$1] ? keys[$0] < keys[$1] : $0 < $1 }
            #expect(RadixSort.order(of: keys) == stable, "\(count) keys in \(range)")
        }
    }

    @Test func theWidestSpanThatFitsAWordIsPacked() {
        // 2^63 - 1 over one position bit: exactly a word.
        #expect(RadixSort.order(of: [Int64.max, 0]) == [1, 0])
        #expect(RadixSort.order(of: [Int64.max, Int64.min]) == [1, 0])
    }
}
