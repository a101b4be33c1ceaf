import Foundation
import Testing

@testable import Ingot

/// RFC 8259 conformance against JSONTestSuite's test_parsing files (vendored in Tests/Fixtures/JSONTestSuite, MIT).
struct JSONConformanceTests {
    /// JSONTestSuite's test_parsing files, vendored with their licence (MIT).
    static let directory = packageRoot.appendingPathComponent("Tests/Fixtures/JSONTestSuite/test_parsing")

    static func files(_ prefix: String) -> [URL] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { $0.hasPrefix(prefix) && $0.hasSuffix(".json") }.sorted().map { directory.appendingPathComponent($0) }
    }

    @Test func acceptsEveryYFile() throws {
        let files = Self.files("y_")
        #expect(files.count == 95)
        for file in files {
            let bytes = try [UInt8](Data(contentsOf: file))
            #expect(throws: Never.self, "\(file.lastPathComponent)") { _ = try JSONDocument(bytes: bytes) }
        }
    }

    @Test func rejectsEveryNFile() throws {
        let files = Self.files("n_")
        #expect(files.count == 188)
        for file in files {
            let bytes = try [UInt8](Data(contentsOf: file))
            #expect(throws: JSONSyntaxError.self, "\(file.lastPathComponent)") { _ = try JSONDocument(bytes: bytes) }
        }
    }

    @Test func neverCrashesOnAnIFile() throws {
        let files = Self.files("i_")
        #expect(files.count > 30)
        for file in files {
            let bytes = try [UInt8](Data(contentsOf: file))
            if let document = try? JSONDocument(bytes: bytes) {
                // Reading every scalar must not crash either.
                walk(document.root)
            }
        }
    }

    private func walk(_ value: JSONValue) {
        switch value.kind {
        case .array: for v in value.elements { walk(v) }
        case .object: for (k, v) in value.members { _ = k.string; walk(v) }
        case .string: _ = value.string
        case .number: _ = value.int64; _ = value.double
        default: _ = value.bool
        }
    }

    @Test func integersAreExactToInt64() throws {
        let doc = try JSONDocument(bytes: Array("[9223372036854775807,-9223372036854775808,9223372036854775808,0,-0]".utf8))
        let values = Array(doc.root.elements)
        #expect(values[0].int64 == Int64.max)
        #expect(values[1].int64 == Int64.min)
        #expect(values[2].int64 == nil)
        #expect(values[2].double == 9223372036854775808.0)
        #expect(values[3].int64 == 0)
        #expect(values[4].int64 == 0)
    }

    @Test func doublesRoundTrip() throws {
        var generator = SeededGenerator(seed: 20261122)
        // The smallest subnormal and 2^53 + 1 (which rounds to 2^53), spelled so the compiler
        // does not warn about their rounding.
        var samples: [Double] = [
            0.1, 1e-300, 2.2250738585072014e-308, .leastNonzeroMagnitude, 1.7976931348623157e308, 123.45, 0.3, 1e23,
            Double(9_007_199_254_740_993 as Int64),
        ]
        for _ in 0..<2000 {
            samples.append(Double(bitPattern: generator.next() & 0x7FEF_FFFF_FFFF_FFFF))
            samples.append(Double.random(in: -1000...1000, using: &generator))
        }
        for d in samples where d.isFinite {
            let text = "\(d)"
            let doc = try JSONDocument(bytes: Array("[\(text)]".utf8))
            let first = Array(doc.root.elements).first
            let parsed = try #require(first?.double)
            #expect(parsed == d, "\(text) (seed \(generator.seed))")
        }
    }

    @Test func stringsDecodeEscapesAndSurrogates() throws {
        let doc = try JSONDocument(bytes: Array(#"["a\"b\\c\/\n\u00e9\ud83d\ude00", "\ud800x", "Ōtomo"]"#.utf8))
        let values = Array(doc.root.elements)
        #expect(values[0].string == "a\"b\\c/\né😀")
        #expect(values[1].string == "\u{FFFD}x")
        #expect(values[2].string == "Ōtomo")
    }

    /// The string scanner reads eight bytes at a time: a special byte must be found at every
    /// offset of a word, and in the tail shorter than a word.
    @Test func specialBytesAreFoundAtEveryOffsetOfAString() throws {
        for offset in 0..<20 {
            let pad = String(repeating: "x", count: offset)
            let tail = String(repeating: "y", count: 11)
            // Accepted, with the right value.
            for (text, value) in [(#"\""#, "\""), (#"\n"#, "\n"), (#"\u00e9"#, "é"), ("é", "é"), ("中", "中"), ("😀", "😀")] {
                let doc = try JSONDocument(bytes: Array("[\"\(pad)\(text)\(tail)\"]".utf8))
                #expect(Array(doc.root.elements)[0].string == pad + value + tail, "offset \(offset): \(text)")
            }
            // Refused: a control character, an invalid UTF-8 byte, a string cut short.
            for bad: [UInt8] in [[0x01], [0x1F], [0xFF], [0xC3], [0xED, 0xA0, 0x80]] {
                let bytes = Array("[\"\(pad)".utf8) + bad + Array("\(tail)\"]".utf8)
                #expect(throws: JSONSyntaxError.self, "offset \(offset): \(bad)") { _ = try JSONDocument(bytes: bytes) }
            }
            #expect(throws: JSONSyntaxError.self) { _ = try JSONDocument(bytes: Array("[\"\(pad)".utf8)) }
            // The string ends at the first quote, wherever it is.
            let doc = try JSONDocument(bytes: Array("[\"\(pad)\", \"\(tail)\"]".utf8))
            #expect(Array(doc.root.elements).map(\.string) == [pad, tail])
        }
    }

    @Test func syntaxErrorsNameTheirOffset() {
        #expect(throws: JSONSyntaxError(offset: 6, reason: "unexpected character '}', expected a value")) {
            _ = try JSONDocument(bytes: Array(#"{"a": }"#.utf8))
        }
        #expect(throws: JSONSyntaxError(offset: 3, reason: "unexpected character ']', expected a value")) {
            _ = try JSONDocument(bytes: Array("[1,]".utf8))
        }
    }
}
