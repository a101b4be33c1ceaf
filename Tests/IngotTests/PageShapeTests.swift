import Foundation
import Testing

@testable import Ingot

/// Pages as exports and APIs ship them (docs/pipelines.md, page shapes): JSON Lines, gzip and zstd files
/// in nested folders (`**`), a byte order mark; each bounded and rejected in part, never whole
/// when only a part is bad; the archive replays them.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct PageShapeTests {
    static let yaml = """
        version: 1
        name: export
        source: {files: {dir: DIR, glob: "GLOB", format: jsonl}}
        root: item
        entities: {item: {identity: id, attributes: {id: integer, name: string}}}
        """

    private func pipeline(_ dir: String, glob: String) -> String {
        Self.yaml.replacingOccurrences(of: "DIR", with: dir).replacingOccurrences(of: "GLOB", with: glob)
    }

    private func run(_ yaml: String, db: String, archive: String? = nil, maxPageBytes: Int? = nil) throws -> RunSummary {
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        options.archiveDirectory = archive
        options.maxPageBytes = maxPageBytes
        return PipelineRunner(
            config: try PipelineConfig.parse(text: yaml, path: "export.yml"), options: options, logger: LogCapture().logger
        )
        .run()
    }

    private func write(_ text: String, to path: String) throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    private func gzip(_ path: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["gzip", "-n", path]
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
    }

    /// One record per line: blank lines skipped (CRLF too), a line that is not JSON and a
    /// record that does not fit are rejected with their line numbers, every other line kept.
    @Test func jsonLinesKeepEveryGoodLine() throws {
        let dir = temporaryDirectory().path
        try write(
            "{\"id\": 1, \"name\": \"one\"}\r\n\n{\"id\": 2, \"name\": \"two\"}\n{\"id\": 3, oops}\n   \n{\"id\": \"four\"}\n{\"id\": 5}",
            to: dir + "/a.jsonl")
        let db = temporaryDirectory().appendingPathComponent("l.db").path
        let summary = try run(pipeline(dir, glob: "*.jsonl"), db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.records == 5 && summary.counters.rejectedRecords == 2 && summary.counters.rejectedPages == 0)
        #expect(try rows(db, "SELECT id, name FROM item ORDER BY id") == [["1", "one"], ["2", "two"], ["5", "NULL"]])
        #expect(
            try rows(db, "SELECT coding_path, record_index, reason_code, raw FROM _ingot_rejects ORDER BY record_index") == [
                ["line 4", "3", "not_json", "{\"id\": 3, oops}"], ["line 6.id", "5", "wrong_type", "{\"id\": \"four\"}"],
            ])
    }

    /// `**` finds files in folders at any depth (and at the top); `.gz` and `.zst` are
    /// decompressed (by the decode lanes; the archive keeps them compressed); files are applied
    /// in path order, so a later export wins.
    @Test func compressedExportsInNestedFoldersLoadInPathOrder() throws {
        let dir = temporaryDirectory().path
        try write("{\"id\": 1, \"name\": \"first\"}\n{\"id\": 2, \"name\": \"b\"}\n", to: dir + "/2024/01/part.jsonl")
        try gzip(dir + "/2024/01/part.jsonl")
        let zst = try Zstd().compress(Array("{\"id\": 1, \"name\": \"second\"}\n{\"id\": 3, \"name\": \"c\"}\n".utf8))
        try FileManager.default.createDirectory(atPath: dir + "/2024/02/deep", withIntermediateDirectories: true)
        try Data(zst).write(to: URL(fileURLWithPath: dir + "/2024/02/deep/part.jsonl.zst"))
        try write("{\"id\": 4, \"name\": \"top\"}\n", to: dir + "/2024/notes.json")  // not matched
        try write("{\"id\": 0, \"name\": \"root\"}\n", to: dir + "/0.jsonl")
        try gzip(dir + "/0.jsonl")
        let source = try DirectoryPageSource(directory: dir, glob: "**/*.jsonl.{gz,zst}")
        #expect(source.files.isEmpty, "fnmatch has no braces: the glob matches nothing")
        let gz = try DirectoryPageSource(directory: dir, glob: "**/*.jsonl.*")
        #expect(gz.files == ["0.jsonl.gz", "2024/01/part.jsonl.gz", "2024/02/deep/part.jsonl.zst"])
        let db = temporaryDirectory().appendingPathComponent("c.db").path
        let archive = temporaryDirectory().path
        let summary = try run(pipeline(dir, glob: "**/*.jsonl.*"), db: db, archive: archive)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.pages == 3 && summary.counters.records == 5)
        let expected = [["0", "root"], ["1", "second"], ["2", "b"], ["3", "c"]]
        #expect(try rows(db, "SELECT id, name FROM item ORDER BY id") == expected)
        // The archive keeps what was read, compressed as it came, and replays the run into the same state.
        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: archive).first)
        let reader = try ArchiveReader(path: archive + "/" + file)
        #expect(reader.entries.map(\.metadata.compression) == [.gzip, .gzip, .zstd])
        let first = try #require(reader.entries.first)
        #expect(try reader.payload(of: first) == Array(try Data(contentsOf: URL(fileURLWithPath: dir + "/0.jsonl.gz"))))
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("replay.db").path
        options.progressInterval = 0
        let replay = PipelineRunner(
            config: try PipelineConfig.parse(text: pipeline(dir, glob: "**/*.jsonl.*"), path: "export.yml"), options: options,
            logger: LogCapture().logger
        ).run(source: try ArchivePageSource(path: archive + "/" + file))
        #expect(replay.status == .finished)
        #expect(try rows(options.databasePath, "SELECT id, name FROM item ORDER BY id") == expected)
    }

    /// `ingot replay` of a `format: jsonl` run's archive reads its pages as JSON Lines, as the run
    /// did, though it reads nothing else of the archived pipeline's source: a plain file of two
    /// lines and a gzip one of one replay to the run's 3 rows (it parsed each page as one JSON
    /// text: 1 row, exit 0).
    @Test func aJSONLinesRunReplaysExactlyFromItsArchive() throws {
        let dir = temporaryDirectory().appendingPathComponent("pages").path
        try write("{\"id\": 1, \"name\": \"a\"}\n{\"id\": 2, \"name\": \"b\"}\n", to: dir + "/p1.jsonl")
        try write("{\"id\": 3, \"name\": \"c\"}\n", to: dir + "/p2.jsonl")
        try gzip(dir + "/p2.jsonl")
        let pipeline = temporaryDirectory().appendingPathComponent("export.yml")
        try Data(self.pipeline(dir, glob: "*.jsonl*").utf8).write(to: pipeline)
        let archives = temporaryDirectory().path
        let db = temporaryDirectory().appendingPathComponent("run.db").path
        let first = try runIngot(["run", pipeline.path, "--db", db, "--archive-dir", archives])
        #expect(first.status == 0, "\(first.stderr)")
        let expected = [["1", "a"], ["2", "b"], ["3", "c"]]
        #expect(try rows(db, "SELECT id, name FROM item ORDER BY id") == expected)
        let archive = try #require(try FileManager.default.contentsOfDirectory(atPath: archives).first)
        let replayed = temporaryDirectory().appendingPathComponent("replay.db").path
        let replay = try runIngot(["replay", archives + "/" + archive, "--db", replayed])
        #expect(replay.status == 0, "\(replay.stderr)")
        #expect(try rows(replayed, "SELECT id, name FROM item ORDER BY id") == expected)
    }

    /// A file that inflates past `max_page_bytes` is a page too large (nothing of it is held);
    /// one that is not gzip is unreadable; the run goes on with the others.
    @Test func aBombAndADamagedFileAreRejectedPages() throws {
        let dir = temporaryDirectory().path
        try write(String(repeating: "{\"id\": 7, \"name\": \"x\"}\n", count: 20_000), to: dir + "/bomb.jsonl")
        try gzip(dir + "/bomb.jsonl")
        #expect(try FileManager.default.attributesOfItem(atPath: dir + "/bomb.jsonl.gz")[.size] as? Int ?? 0 < 4096)
        try Data("not gzip at all".utf8).write(to: URL(fileURLWithPath: dir + "/broken.jsonl.gz"))
        try write("{\"id\": 1, \"name\": \"ok\"}\n", to: dir + "/ok.jsonl")
        try gzip(dir + "/ok.jsonl")
        let db = temporaryDirectory().appendingPathComponent("b.db").path
        let summary = try run(pipeline(dir, glob: "*.gz"), db: db, maxPageBytes: 64 << 10)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedPages == 2)
        #expect(try rows(db, "SELECT id FROM item") == [["1"]])
        #expect(
            try rows(db, "SELECT reason_code FROM _ingot_rejects WHERE record_index IS NULL ORDER BY source") == [
                ["page_too_large"], ["unreadable"],
            ])
    }

    /// A UTF-8 byte order mark at the start of a page is skipped (RFC 8259 §8.1), in JSON and in
    /// JSON Lines; one anywhere else is an error as before.
    @Test func aByteOrderMarkIsSkipped() throws {
        let bom = "\u{FEFF}"
        let (summary, db) = try ingest(itemPipeline("bom", "records: items"), [bom + #"{"items": [{"id": 1, "name": "a"}]}"#])
        #expect(summary.counters.rejectedPages == 0)
        #expect(try rows(db, "SELECT id FROM item") == [["1"]])
        #expect(throws: JSONSyntaxError.self) { try JSONDocument(bytes: Array(("[" + bom + "1]").utf8)) }
        let lines = try JSONDocument(lines: Array((bom + "{\"id\": 1}\n{\"id\": 2}").utf8))
        #expect(lines.root.count == 2 && lines.lines == [1, 2] && lines.lineFailures.isEmpty)
    }

    /// `format: jsonl` reads each line as a record: a `records:` path beside it is refused, as is
    /// a format Ingot does not know.
    @Test func jsonLinesTakesNoRecordsPath() throws {
        func error(_ yaml: String) -> String? {
            configProblems(yaml, path: "e.yml")
        }
        let base = pipeline("/tmp", glob: "*.jsonl")
        #expect(error(base) == nil)
        #expect(error(base + "\nrecords: \".\"") == nil)
        #expect(error(base + "\nrecords: results")?.hasPrefix("e.yml:6:") == true)
        #expect(error(base.replacingOccurrences(of: "format: jsonl", with: "format: csv"))?.contains("format is json") == true)
    }
}
