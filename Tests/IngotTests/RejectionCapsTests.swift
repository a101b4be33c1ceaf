import Testing

@testable import Ingot

/// How many rejections are stored and logged (``RejectionCaps``), decided alone: every
/// rejection is counted elsewhere; these say which are kept as rows and which as log lines.
struct RejectionCapsTests {
    static func rejections(_ n: Int) -> [RecordRejection] {
        (0..<n).map {
            RecordRejection(
                entity: "person", codingPath: "[\($0)]", reason: "wrong type", source: "p", recordIndex: $0, raw: "{}", code: .wrongType)
        }
    }

    @Test func rowsAreStoredUpToTheCapAndTheTruncationIsSaidOnce() {
        var caps = RejectionCaps(maxRows: 5, logLimit: 100, alreadyStored: 2)
        let first = caps.storable(Self.rejections(2))
        #expect(first.rows.count == 2 && !first.firstTruncation)
        caps.stored(2)
        let second = caps.storable(Self.rejections(3))
        #expect(second.rows.map(\.codingPath) == ["[0]"] && second.firstTruncation, "room for one more")
        #expect(caps.storable(Self.rejections(3)).firstTruncation == false, "said once")
        caps.stored(3)
        #expect(caps.storedRows == 5 && caps.storable(Self.rejections(1)).rows.isEmpty)
    }

    @Test func aResumedRunCountsWhatItStoredBefore() {
        #expect(RejectionCaps(maxRows: 10, logLimit: 1, alreadyStored: 25).storedRows == 10)
        #expect(RejectionCaps(maxRows: -1, logLimit: 1).maxRows == 0)
    }

    @Test func linesAreLoggedUpToTheLimitAndTheLimitIsSaidWhenReached() {
        var caps = RejectionCaps(maxRows: 100, logLimit: 3)
        let first = caps.loggable(Self.rejections(2))
        #expect(first.lines.count == 2 && !first.limitReached)
        let second = caps.loggable(Self.rejections(2))
        #expect(second.lines.count == 1 && second.limitReached, "the third line reaches the limit")
        let third = caps.loggable(Self.rejections(2))
        #expect(third.lines.isEmpty && !third.limitReached, "said once")
        var none = RejectionCaps(maxRows: 1, logLimit: 0)
        #expect(none.loggable(Self.rejections(1)) == (lines: [], limitReached: false))
    }
}
