import Foundation
import Testing

@testable import Ingot

/// Numbers in an archive's header are validated like every other number read from a file.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct ArchiveHeaderTests {
    @Test(arguments: [1 << 40, 0, -5, (1 << 30) + 1])
    func aHeaderClaimingAnImpossibleMaxPageBytesIsDamage(claim: Int) throws {
        let path = temporaryDirectory().appendingPathComponent("bomb.ingot").path
        let header = ArchiveHeader(
            formatVersion: ArchiveFormat.version, runID: "r", pipelineName: "p", pipelineText: "version: 1\n", pipelinePath: "p.yml",
            createdAt: "2026-11-23T00:00:00Z", maxPageBytes: claim)
        let writer = try ArchiveWriter(path: path, header: header)
        // 80 MiB of spaces compress to a few kilobytes: inflated only up to the default 64 MiB.
        try writer.append([UInt8](repeating: 0x20, count: 80 << 20), seq: 1, source: "bomb", httpStatus: 200)
        try writer.close()
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? 0 < 64 << 10)
        let reader = try ArchiveReader(path: path)
        #expect(reader.headerDamage?.contains("max_page_bytes") == true)
        #expect(reader.header.maxPageBytes == nil)
        #expect(reader.decompressionLimit == 64 << 20)
        #expect(throws: ArchiveError.self) { try reader.verify() }
        #expect(throws: ArchiveError.self) { _ = try reader.payload(of: reader.entries[0]) }
        let cli = try runIngot(["archive", "verify", path])
        #expect(cli.status == 1 && cli.stderr.contains("max_page_bytes"), "\(cli.stderr)")
    }
}
