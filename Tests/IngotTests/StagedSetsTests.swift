import Testing

@testable import Ingot

/// A staged row's sets as one blob (``StagedSets``), walked set by set, and the plain walk of a
/// set of bare integer identities that the PostgreSQL copy takes (``SeenIntegers``).
struct StagedSetsTests {
    private func blob(_ sets: [(Int, [IdentityKey])]) -> [UInt8] {
        var out: [UInt8] = []
        for (k, targets) in sets { StagedSets.append(k, targets, to: &out) }
        return out
    }

    @Test func setsAreWalkedOneAfterTheOtherWithOrWithoutAClosure() {
        let bytes = blob([
            (0, [.single(.integer(5)), .single(.integer(-6)), .single(.integer(5))]),
            (1, []),
            (2, [.composite([.text("a"), .integer(1)]), .single(.bool(true))]),
        ])
        var walked: [(Int, Range<Int>)] = []
        bytes.withUnsafeBytes { raw in
            StagedSets.sets(in: raw) { k, targets in walked.append((k, targets)) }
            var stepped: [(Int, Range<Int>)] = []
            var at = 0
            while let set = StagedSets.set(in: raw, at: at) {
                stepped.append((set.k, set.targets))
                at = set.targets.upperBound
            }
            #expect(stepped.map(\.0) == [0, 1, 2] && stepped.map(\.1) == walked.map(\.1))
            #expect(StagedSets.holdsSingleIntegers(raw, walked[0].1))
            #expect(StagedSets.holdsSingleIntegers(raw, walked[1].1), "an empty set holds nothing else")
            #expect(!StagedSets.holdsSingleIntegers(raw, walked[2].1))
            let integers = stride(from: walked[0].1.lowerBound, to: walked[0].1.upperBound, by: StagedSets.singleIntegerBytes).map {
                StagedSets.singleInteger(in: raw, at: $0)
            }
            #expect(integers == [5, -6, 5])
            // A blob cut inside a set ends the walk at the sets before it.
            let cut = UnsafeRawBufferPointer(rebasing: raw[0..<(walked[2].1.lowerBound + 3)])
            var sets = 0
            StagedSets.sets(in: cut) { _, _ in sets += 1 }
            #expect(sets == 2)
        }
        #expect(walked.map(\.0) == [0, 1, 2])
    }

    /// Each integer is new once, in a short list and past it (a hash set), and forgotten on
    /// `removeAll`.
    @Test func seenIntegersKeepEachOnce() {
        var seen = SeenIntegers()
        var rng = SeededGenerator(seed: 5)
        let values = (0..<200).map { _ in Int64.random(in: -30...30, using: &rng) }
        var expected: Set<Int64> = []
        for value in values { #expect(seen.insert(value) == expected.insert(value).inserted, "\(value)") }
        seen.removeAll()
        #expect(seen.insert(values[0]) && !seen.insert(values[0]))
        var few = SeenIntegers()
        #expect([3, 1, 3, 2, 1].map { few.insert($0) } == [true, true, false, true, false])
    }
}
