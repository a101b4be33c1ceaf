import Foundation
import Testing

@testable import Ingot

/// The archive format: round trip, corruption found by `verify`, torn tails read up to the cut.
struct ArchiveTests {
    private static let header = ArchiveHeader(
        formatVersion: ArchiveFormat.version, runID: "r1", pipelineName: "people", pipelineText: "version: 1\n", pipelinePath: "p.yml",
        createdAt: "2026-11-22T00:00:00Z")

    private static let payloads: [[UInt8]] = (1...3).map { k in
        Array(#"{"results": [\#((0..<k * 3).map { #"{"id": \#($0), "name": "n\#($0)"}"# }.joined(separator: ","))]}"#.utf8)
    }

    /// Writes the three payloads; returns the path and each entry's byte range.
    private func writeArchive() throws -> (path: String, bytes: [UInt8]) {
        let path = temporaryDirectory().appendingPathComponent("a.ingot").path
        let writer = try ArchiveWriter(path: path, header: Self.header)
        for (k, payload) in Self.payloads.enumerated() {
            try writer.append(payload, seq: k + 1, source: "https://example.org/p/\(k + 1)", httpStatus: 200)
        }
        try writer.close()
        return (path, try [UInt8](Data(contentsOf: URL(fileURLWithPath: path))))
    }

    private func copy(_ bytes: [UInt8]) throws -> String {
        let path = temporaryDirectory().appendingPathComponent("c.ingot").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Entries' and runs' timestamps are composed by hand (`Date.runTimestamp`): each is what
    /// `ISO8601DateFormatter` writes, milliseconds rounded half up, over a spread of instants
    /// (a fixed-seed sequence, exact half milliseconds, leap days, before 1970).
    @Test func timestampsAreWhatISO8601DateFormatterWrites() {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var instants: [Double] = [0, -0.5, 1.0625, 1.9999, 951_782_400.123, 1_709_164_799.9995, 4_102_444_800.001, -86_400.25]
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<2000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            instants.append(Double(state >> 24) / Double(1 << 40) * 4_000_000_000 - 1_000_000_000)
        }
        for instant in instants {
            let date = Date(timeIntervalSince1970: instant)
            #expect(date.runTimestamp == formatter.string(from: date), "\(instant)")
        }
    }

    @Test func roundTrip() throws {
        let (path, _) = try writeArchive()
        let reader = try ArchiveReader(path: path)
        #expect(reader.header == Self.header)
        #expect(reader.hasIndex)
        #expect(reader.tornAt == nil)
        #expect(reader.entries.map(\.metadata.seq) == [1, 2, 3])
        #expect(reader.entries.map(\.metadata.httpStatus) == [200, 200, 200])
        for (k, entry) in reader.entries.enumerated() {
            #expect(try reader.payload(of: entry) == Self.payloads[k])
        }
        try reader.verify()
    }

    @Test func flippingAnyByteFailsVerifyNamingTheEntry() throws {
        let (path, bytes) = try writeArchive()
        let reader = try ArchiveReader(path: path)
        let starts = reader.entries.map(\.offset)
        let indexStart = reader.entries[2].frameOffset + reader.entries[2].frameLength
        for position in 0..<bytes.count {
            var damaged = bytes
            damaged[position] ^= 0x20
            let copyPath = try copy(damaged)
            var failure: ArchiveError?
            do {
                try ArchiveReader(path: copyPath).verify()
            } catch {
                failure = error
            }
            let error = try #require(failure, "flipping byte \(position) went unnoticed")
            if position < starts[0] {
                #expect(error.seq == nil, "header byte \(position): \(error)")
            } else if position < indexStart {
                let entry = starts.lastIndex { $0 <= position }.map { $0 + 1 }
                #expect(error.seq == entry, "byte \(position) is in entry \(entry ?? 0): \(error)")
            } else {
                #expect(error.seq == nil && error.message.contains("index"), "index byte \(position): \(error)")
            }
        }
    }

    @Test func truncatedAtAnyByteReadsEveryWholeEntryBeforeTheCut() throws {
        let (path, bytes) = try writeArchive()
        let ends = try ArchiveReader(path: path).entries.map { $0.frameOffset + $0.frameLength }
        let headerEnd = try ArchiveReader(path: path).entries[0].offset
        for cut in 0..<bytes.count {
            let copyPath = try copy(Array(bytes[..<cut]))
            if cut < headerEnd {
                #expect(throws: ArchiveError.self) { _ = try ArchiveReader(path: copyPath) }
                continue
            }
            let reader = try ArchiveReader(path: copyPath)
            let whole = ends.filter { $0 <= cut }.count
            #expect(reader.entries.count == whole, "cut at \(cut)")
            #expect(reader.tornAt != nil, "cut at \(cut) must be reported")
            for (k, entry) in reader.entries.enumerated() {
                #expect(try reader.payload(of: entry) == Self.payloads[k])
            }
        }
    }

    @Test func decompressionIsBounded() throws {
        let (path, _) = try writeArchive()
        let reader = try ArchiveReader(path: path)
        reader.decompressionLimit = 10
        #expect {
            _ = try reader.payload(of: reader.entries[0])
        } throws: { error in
            (error as? ArchiveError)?.message.contains("over the limit of 10") == true
        }
    }

    @Test func runArchivesEveryPageAndReplayReachesTheSameState() throws {
        let yaml = itemPipeline("t", "records: results")
        let dir = temporaryDirectory()
        let config = try PipelineConfig.parse(text: yaml, path: "t.yml")
        var options = RunOptions()
        options.databasePath = dir.appendingPathComponent("run.db").path
        options.archiveDirectory = dir.appendingPathComponent("archives").path
        options.progressInterval = 0
        let pages = Self.payloads.map { String(decoding: $0, as: UTF8.self) } + [#"{"results": [{"id": "bad"}]}"#, "not json"]
        let run = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(pages))
        let archive = try #require(run.archive)
        let reader = try ArchiveReader(path: archive)
        #expect(reader.entries.count == 5)
        #expect(reader.header.pipelineText == yaml)
        #expect(try reader.payload(of: reader.entries[4]) == Array("not json".utf8))

        // Replay with the archived pipeline into a fresh database.
        let replayed = try PipelineConfig.parse(text: reader.header.pipelineText, path: archive)
        options.databasePath = dir.appendingPathComponent("replay.db").path
        options.archiveDirectory = nil
        let replay = PipelineRunner(config: replayed, options: options, logger: LogCapture().logger)
            .run(source: ArchivePageSource(reader: reader))
        #expect(replay.counters.rejectedRecords == run.counters.rejectedRecords)
        #expect(replay.counters.rejectedPages == 1)
        let query = "SELECT id, name FROM item ORDER BY id"
        #expect(try rows(options.databasePath, query) == rows(dir.appendingPathComponent("run.db").path, query))
        #expect(
            try rows(options.databasePath, "SELECT archive, archive_entry, source FROM _ingot_rejects ORDER BY archive_entry")
                == [[archive, "4", "page-4.json"], [archive, "5", "page-5.json"]])

        // Re-map old payloads with a new mapping: a new column, filled from the archive.
        let remap = try PipelineConfig.parse(
            text: yaml.replacingOccurrences(
                of: "{id: integer, name: string}", with: "{id: integer, name: string, label: {type: string, key: name}}"),
            path: "t2.yml")
        _ = PipelineRunner(config: remap, options: options, logger: LogCapture().logger).run(source: ArchivePageSource(reader: reader))
        #expect(try rows(options.databasePath, "SELECT count(*) FROM item WHERE label = name") == [["9"]])
    }
}
