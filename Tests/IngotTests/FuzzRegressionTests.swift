import Foundation
import Testing

@testable import Ingot

/// `make fuzz`'s small version: every seed and every input a fuzzer ever crashed on
/// (Tests/Fixtures/fuzz-seeds/, Tests/Fixtures/fuzz/) goes through its harness again. Each must
/// return normally; a trap fails the whole test process.
@Suite(.tags(.sweep), .beyondUnit, .waitsOffThePool)
struct FuzzRegressionTests {
    @Test(arguments: FuzzTargets.names)
    func everyKeptInputRunsThroughItsHarness(target: String) throws {
        var inputs = 0
        for folder in ["Tests/Fixtures/fuzz-seeds/\(target)", "Tests/Fixtures/fuzz/\(target)"] {
            let dir = packageRoot.appendingPathComponent(folder)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
            for name in names.sorted() where !name.hasPrefix(".") {
                let bytes = try [UInt8](Data(contentsOf: dir.appendingPathComponent(name)))
                #expect(FuzzTargets.run(target, bytes))
                inputs += 1
            }
        }
        #expect(inputs > 0, "no seed for \(target)")
    }

    @Test func harnessesRejectWhatTheyShould() throws {
        // The seeds exercise the paths they were written for.
        let seed = try [UInt8](Data(contentsOf: packageRoot.appendingPathComponent("Tests/Fixtures/fuzz-seeds/page/every-type.json")))
        let plan = try #require(FuzzTargets.pageModel)
        var mapper = RecordMapper(plan: MappingPlan(model: plan.model, root: plan.root, framing: plan.framing))
        let page = mapper.map(bytes: seed, seq: 1, source: "seed")
        // `3` is a record given as its bare identity (a stub); `null` is no record.
        #expect(page.records.count == 2, "\(page.rejections.map(\.description))")
        #expect(page.rejections.map(\.codingPath) == ["results[1].unix", "results[2].id", "results[3].id", "results[5]"])
    }
}
