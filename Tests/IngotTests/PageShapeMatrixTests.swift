import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Ingot

/// Every page shape in every mode (docs/pipelines.md, "Page shapes"): the same records as JSON
/// pages, single objects or JSON Lines, each plain, gzip, zstd or behind a byte order mark; run,
/// replayed from the run's archive (the archived pipeline, its source unread, as `ingot replay`
/// reads it), resumed after a failure, rerun (a refresh) — into SQLite and into PostgreSQL — and
/// shared by two joined jobs (in memory and in PostgreSQL). Every cell ends with the tables of
/// one plain run of JSON pages.
/// A shape or a mode added later gets its cell here.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct PageShapeMatrixTests {
    enum Shape: String, CaseIterable { case page, object, jsonl }
    enum Encoding: String, CaseIterable { case plain, gzip, zstd, bom }

    /// Twelve records in three batches of four, the later ones changing earlier ones (so order
    /// matters): ids 1–8, names by version.
    static let records: [String] = (0..<12).map { k in
        let id = k < 8 ? k + 1 : k - 7
        return #"{"id": \#(id), "name": "v\#(k / 4)-\#(id)", "tags": ["t\#(k % 3)"]}"#
    }

    static func yaml(_ dir: String, _ shape: Shape) -> String {
        let format = shape == .jsonl ? ", format: jsonl" : ""
        return """
            version: 1
            name: shapes
            source: {files: {dir: \(dir), glob: "p-*"\(format)}}
            records: \(shape == .page ? "results" : "\".\"")
            root: item
            entities:
              item:
                identity: id
                attributes: {id: integer, name: string, tags: json}
            """
    }

    /// The records as files of `shape` in `encoding`, in `dir`.
    static func write(_ shape: Shape, _ encoding: Encoding, to dir: String) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        var files: [(name: String, text: String)] = []
        switch shape {
        case .page:
            for k in 0..<3 {
                files.append(("p-\(k).json", #"{"results": ["# + records[(k * 4)..<(k * 4 + 4)].joined(separator: ", ") + "]}"))
            }
        case .object:
            for (k, record) in records.enumerated() { files.append((String(format: "p-%02d.json", k), record)) }
        case .jsonl:
            for k in 0..<3 { files.append(("p-\(k).jsonl", records[(k * 4)..<(k * 4 + 4)].joined(separator: "\n") + "\n")) }
        }
        for (name, text) in files {
            var bytes = Array(text.utf8)
            var file = name
            switch encoding {
            case .plain: break
            case .bom: bytes = [0xEF, 0xBB, 0xBF] + bytes
            case .zstd:
                bytes = try Zstd().compress(bytes)
                file += ".zst"
            case .gzip:
                bytes = try gzip(bytes, in: dir)
                file += ".gz"
            }
            try Data(bytes).write(to: URL(fileURLWithPath: dir + "/" + file))
        }
    }

    /// `bytes` gzipped by the system's gzip (Ingot only inflates).
    static func gzip(_ bytes: [UInt8], in dir: String) throws -> [UInt8] {
        let path = dir + "/.gzip-\(UUID().uuidString)"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["gzip", "-n", path]
        try process.run()
        process.waitUntilExit()
        defer { try? FileManager.default.removeItem(atPath: path + ".gz") }
        return Array(try Data(contentsOf: URL(fileURLWithPath: path + ".gz")))
    }

    /// The reference: one plain run of JSON pages into SQLite.
    static let reference: Result<(db: String, model: EntityModel), any Error> = Result {
        let dir = temporaryDirectory().appendingPathComponent("reference").path
        try write(.page, .plain, to: dir)
        let config = try PipelineConfig.parse(text: yaml(dir, .page), path: "shapes.yml")
        let db = temporaryDirectory().appendingPathComponent("reference.db").path
        let summary = run(config, db: db, source: try DirectoryPageSource(directory: dir, glob: "p-*"))
        guard summary.status == .finished, summary.counters.records == 12 else {
            throw SourceError(source: dir, message: "the reference run: \(summary.error ?? "\(summary.counters)")")
        }
        return (db, config.model)
    }

    static func run(_ config: PipelineConfig, db: String, source: any PageSource, archive: String? = nil, resume: Bool = false)
        -> RunSummary
    {
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        options.batchRecords = 4
        options.archiveDirectory = archive
        options.resume = resume
        return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
    }

    /// A directory source that fails after `pages` pages (a fetch that gave up): the run fails
    /// having committed them.
    final class FailingAfter: PageSource, @unchecked Sendable {  // used from the source queue only
        let inner: DirectoryPageSource
        var left: Int
        init(_ inner: DirectoryPageSource, pages: Int) {
            self.inner = inner
            self.left = pages
        }
        func next() throws -> Page? {
            guard left > 0 else { throw SourceError(source: "test", message: "the source failed") }
            left -= 1
            return try inner.next()
        }
    }

    @Test(arguments: Shape.allCases, Encoding.allCases)
    func everyModeEndsAsOnePlainRun(shape: Shape, encoding: Encoding) throws {
        let (referenceDB, model) = try Self.reference.get()
        let expected = try StoreSeamTests.sqliteDump(referenceDB, model)
        let dir = temporaryDirectory().appendingPathComponent("\(shape)-\(encoding)").path
        try Self.write(shape, encoding, to: dir)
        let config = try PipelineConfig.parse(text: Self.yaml(dir, shape), path: "shapes.yml")
        func source() throws -> DirectoryPageSource { try DirectoryPageSource(directory: dir, glob: "p-*") }
        let cell = "\(shape) \(encoding)"

        // Run, with its archive.
        let db = temporaryDirectory().appendingPathComponent("run.db").path
        let archive = temporaryDirectory().path
        let first = Self.run(config, db: db, source: try source(), archive: archive)
        #expect(first.status == .finished && first.counters.records == 12 && first.counters.rejectedRecords == 0, "\(cell): \(first)")
        #expect(try StoreSeamTests.sqliteDump(db, model) == expected, "\(cell): run")

        // Replay: the archived pipeline, its source not read (as `ingot replay` parses it).
        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: archive).first)
        let reader = try ArchiveReader(path: archive + "/" + file)
        let archived = try PipelineConfig.parse(text: reader.header.pipelineText, path: "archived", readsSource: false)
        let replayDB = temporaryDirectory().appendingPathComponent("replay.db").path
        let replay = Self.run(archived, db: replayDB, source: ArchivePageSource(reader: reader))
        #expect(replay.status == .finished && replay.counters.records == 12, "\(cell): replay \(replay)")
        #expect(try StoreSeamTests.sqliteDump(replayDB, model) == expected, "\(cell): replay")

        // Rerun (a refresh): the same tables, nothing written.
        let rerun = Self.run(config, db: db, source: try source())
        #expect(rerun.status == .finished && rerun.counters.inserted == 0 && rerun.counters.updated == 0, "\(cell): rerun \(rerun)")
        #expect(try StoreSeamTests.sqliteDump(db, model) == expected, "\(cell): rerun")

        // Resume after a failure one page in.
        let resumeDB = temporaryDirectory().appendingPathComponent("resume.db").path
        let failed = Self.run(config, db: resumeDB, source: FailingAfter(try source(), pages: 1))
        #expect(failed.status == .failed, "\(cell): the first part fails")
        let resumed = Self.run(config, db: resumeDB, source: try source(), resume: true)
        #expect(resumed.status == .finished, "\(cell): resume \(resumed)")
        #expect(try StoreSeamTests.sqliteDump(resumeDB, model) == expected, "\(cell): resume")

        // The same modes into PostgreSQL: run, rerun, replay, resume.
        let postgresExpected = try PostgresTests.sqliteDump(referenceDB, model)
        let url = try PostgresServer.freshDatabase()
        #expect(Self.run(config, db: url, source: try source()).status == .finished, "\(cell): PostgreSQL run")
        #expect(try PostgresTests.postgresDump(url, model) == postgresExpected, "\(cell): PostgreSQL run")
        let pgRerun = Self.run(config, db: url, source: try source())
        #expect(pgRerun.counters.inserted == 0 && pgRerun.counters.updated == 0, "\(cell): PostgreSQL rerun \(pgRerun)")
        #expect(try PostgresTests.postgresDump(url, model) == postgresExpected, "\(cell): PostgreSQL rerun")
        let replayURL = try PostgresServer.freshDatabase()
        #expect(Self.run(archived, db: replayURL, source: ArchivePageSource(reader: reader)).status == .finished)
        #expect(try PostgresTests.postgresDump(replayURL, model) == postgresExpected, "\(cell): PostgreSQL replay")
        let resumeURL = try PostgresServer.freshDatabase()
        #expect(Self.run(config, db: resumeURL, source: FailingAfter(try source(), pages: 1)).status == .failed)
        #expect(Self.run(config, db: resumeURL, source: try source(), resume: true).status == .finished, "\(cell): PostgreSQL resume")
        #expect(try PostgresTests.postgresDump(resumeURL, model) == postgresExpected, "\(cell): PostgreSQL resume")

        // Two joined jobs, in memory and in PostgreSQL.
        for backend in JoinBackend.allCases {
            let database = try JoinDatabase(backend, model: model)
            let all = try JoinTests.runJoined(config, database, name: "shapes", jobs: 2, batchRecords: 4, source: source)
            #expect(all.allSatisfy { $0.status == .finished }, "\(cell): join \(backend) \(all.compactMap(\.error))")
            JoinTests.expectShared(all)
            #expect(try database.dump() == (try database.sqlite(referenceDB)), "\(cell): join \(backend)")
        }
    }
}
