import Foundation
import Testing

@testable import Ingot

/// The archive's checksum: the processor's instruction and the table agree on every length and
/// alignment, and both give the published CRC-32C check values.
struct CRC32CTests {
    @Test func theCheckValuesOfTheCastagnoliPolynomial() {
        // RFC 3720, B.4, and the catalogue's check value for "123456789".
        let cases: [([UInt8], UInt32)] = [
            (Array("123456789".utf8), 0xE306_9283),
            ([UInt8](repeating: 0, count: 32), 0x8A91_36AA),
            ([UInt8](repeating: 0xFF, count: 32), 0x62A8_AB43),
            ((0..<32).map { UInt8($0) }, 0x46DD_794E),
            ([], 0),
        ]
        for (bytes, expected) in cases {
            #expect(CRC32C.checksum(bytes) == expected)
            #expect(bytes.withUnsafeBytes { CRC32C.softwareChecksum($0) } == expected)
        }
    }

    @Test func theInstructionAndTheTableAgreeAtEveryLengthAndOffset() {
        // Deterministic bytes (a linear congruential sequence), every start 0..<8 and length 0..<300.
        var state: UInt32 = 12345
        let bytes = (0..<320).map { _ -> UInt8 in
            state = state &* 1_103_515_245 &+ 12345
            return UInt8(truncatingIfNeeded: state >> 16)
        }
        bytes.withUnsafeBytes { all in
            for start in 0..<8 {
                for count in 0..<300 {
                    let slice = UnsafeRawBufferPointer(rebasing: all[start..<start + count])
                    #expect(CRC32C.checksum(slice) == CRC32C.softwareChecksum(slice), "start \(start), count \(count)")
                }
            }
        }
    }

    #if arch(x86_64)
        @Test func theInstructionIsUsedWhereTheProcessorHasIt() throws {
            let cpuinfo = try String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8)
            #expect(CRC32C.isHardware == cpuinfo.contains(" sse4_2"))
        }
    #endif
}
