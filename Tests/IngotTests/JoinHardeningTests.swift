import Foundation
import Synchronization
import Testing

@testable import Ingot

/// `--join` only joins the same work, survives an outage, and treats its queue's rows as input.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct JoinHardeningTests {
    /// One job of `yaml` joined under `name`, reading `source`.
    func job(
        _ yaml: String, _ database: JoinDatabase, name: String, source: any PageSource, maxPageBytes: Int? = nil,
        logs: LogCapture = LogCapture()
    ) throws -> RunSummary {
        var options = JoinTests.options(database, join: name)
        options.maxPageBytes = maxPageBytes
        return database.run(
            PipelineRunner(config: try PipelineConfig.parse(text: yaml, path: "join.yml"), options: options, logger: logs.logger), source)
    }

    /// A database for `JoinTests.yaml`'s jobs.
    func database(_ backend: JoinBackend) throws -> JoinDatabase {
        try JoinDatabase(backend, model: try PipelineConfig.parse(text: JoinTests.yaml, path: "join.yml").model)
    }

    /// FIPS 180-4's examples, and a length that needs a second padding block.
    @Test(arguments: [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"),
    ])
    func sha256MatchesTheStandardVectors(text: String, digest: String) {
        #expect(SHA256.hex(text.utf8) == digest)
    }

    /// A rolling update of the pipeline (another text), another source or another
    /// `--max-page-bytes`: refused, naming both digests and what differs, before anything is written.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func aJobWithAnotherSpecIsRefused(backend: JoinBackend) throws {
        let url = try database(backend)
        let first = try job(JoinTests.yaml, url, name: "spec", source: MemoryPageSource(StoreSeamTests.pages))
        #expect(first.status == .finished, "\(first.error ?? "")")
        let changed = JoinTests.yaml.replacingOccurrences(of: "name: seam", with: "name: seam\n# v2: a comment is a change too")
        #expect(changed != JoinTests.yaml)
        let other = try job(changed, url, name: "spec", source: MemoryPageSource(StoreSeamTests.pages))
        #expect(other.status == .failed && other.failureKind == .configuration)
        let error = other.error ?? ""
        #expect(error.contains("the join 'spec' runs with spec ") && error.contains(", this job's is "), "\(error)")
        #expect(
            error.contains(
                "pipeline: the run has sha256:\(SHA256.hex(JoinTests.yaml.utf8)), this job has sha256:\(SHA256.hex(changed.utf8))"),
            "\(error)")
        #expect(!error.contains("source:") && !error.contains("max_page_bytes:"), "only what differs is named")

        let smaller = try job(JoinTests.yaml, url, name: "spec", source: MemoryPageSource(StoreSeamTests.pages), maxPageBytes: 4096)
        #expect(smaller.failureKind == .configuration)
        #expect(
            smaller.error?.contains("max_page_bytes: the run has \(RunOptions.defaultMaxPageBytes), this job has 4096") == true,
            "\(smaller.error ?? "")")

        let dir = temporaryDirectory().path
        let files = try job(JoinTests.yaml, url, name: "spec", source: DirectoryPageSource(directory: dir, glob: "*.json"))
        #expect(files.failureKind == .configuration)
        #expect(
            files.error?.contains("source: the run has MemoryPageSource, this job has files \(dir)/*.json") == true, "\(files.error ?? "")")
        let jobs =
            try url.memory.map { memory in memory.state.withLock { $0.joins["spec"]?.jobs.count ?? 0 } }
            ?? PGConnection(url: url.url).execute("SELECT count(*) FROM _ingot_join_jobs WHERE name = 'spec'").first?[0].flatMap { Int($0) }
        #expect(jobs == 1, "no refused job joined")
    }

    /// Every option that changes what is stored or accepted is in the spec: a job started with
    /// another `--max-record-rows` (it joined, and rejected records the others kept), another
    /// `--max-reject-rows`, `--max-rejects` or `--max-reject-ratio` is refused naming it; one with
    /// other lanes, batch or commit sizes joins.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func everyOptionThatChangesWhatIsStoredIsInTheSpec(backend: JoinBackend) throws {
        let url = try database(backend)
        let config = try PipelineConfig.parse(text: JoinTests.yaml, path: "join.yml")
        func job(_ change: (inout RunOptions) -> Void, config: PipelineConfig = config) -> RunSummary {
            var options = JoinTests.options(url, join: "options")
            change(&options)
            return url.run(
                PipelineRunner(config: config, options: options, logger: LogCapture().logger), MemoryPageSource(StoreSeamTests.pages))
        }
        let first = job { _ in }
        #expect(first.status == .finished, "\(first.error ?? "")")
        let changes: [(String, (inout RunOptions) -> Void)] = [
            ("max_record_rows: the run has \(RunOptions.defaultMaxRecordRows), this job has 3", { $0.maxRecordRows = 3 }),
            ("max_reject_rows: the run has 10000, this job has 5", { $0.maxRejectRows = 5 }),
            ("max_rejects: the run has none, this job has 2", { $0.maxRejects = 2 }),
            ("max_reject_ratio: the run has none, this job has 0.5", { $0.maxRejectRatio = 0.5 }),
        ]
        for (named, change) in changes {
            let refused = job(change)
            #expect(refused.failureKind == .configuration && refused.error?.contains(named) == true, "\(named): \(refused.error ?? "")")
        }
        let others = job({
            $0.lanes = 1; $0.batchRecords = 2; $0.commitRecords = 3
        })
        #expect(others.status == .finished, "\(others.error ?? "")")
    }

    /// One outage seen by three jobs fails the run (each fetcher role failed without progress);
    /// a job started once the source is back takes it up again and finishes it exactly.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func aRunFailedByAnOutageIsTakenUpByTheNextJob(backend: JoinBackend) throws {
        let url = try database(backend)
        let down = Outage()
        for k in 1...3 {
            let summary = try job(JoinTests.yaml, url, name: "outage", source: OutageSource(StoreSeamTests.pages, down: down))
            #expect(summary.status == .failed, "job \(k)")
        }
        #expect(try url.join("outage").map { [$0.status, "\($0.fetchFailures)"] } == ["failed", "3"])
        down.isDown.withLock { $0 = false }
        let logs = LogCapture()
        let back = try job(JoinTests.yaml, url, name: "outage", source: OutageSource(StoreSeamTests.pages, down: down), logs: logs)
        #expect(back.status == .finished, "\(back.error ?? "")")
        #expect(logs.all.contains { $0.contains("msg=join.revived") && $0.contains("the run had failed") })
        #expect(try url.join("outage").map { [$0.status, "\($0.fetchFailures)"] } == ["finished", "0"])
        #expect(try url.runs().map(\.status) == ["finished"])
        let (_, db) = try ingest(JoinTests.yaml, StoreSeamTests.pages)
        let expected = try url.sqlite(db)
        let got = try url.dump()
        for table in expected.keys.sorted() { #expect(got[table] == expected[table], "table \(table)") }
    }

    /// A unit row claiming 2^40 bytes is inflated no further than the job's `max_page_bytes`
    /// (a rejected page), a payload that is not zstd is a rejected page with its seq, and the
    /// run goes on with the other units.
    @Test(.hangGuard) func aUnitIsInputItsLengthBelievedOnlyUpToMaxPageBytes() throws {
        let database = try database(.postgresql)
        let url = database.url
        let config = try PipelineConfig.parse(text: JoinTests.yaml, path: "join.yml")
        // Create the tables and the join as a job would, then fill its queue by hand: the source is over.
        do {
            let store = try PGJoinedStore(url: url, model: config.model, plan: .joinedPositions)
            _ = try store.joinRun(JoinTests.request("units", config, lease: 2))
            try store.close()
        }
        let good = [StoreSeamTests.pages[0], StoreSeamTests.pages[1]]
        let zstd = Zstd(level: 1)
        let connection = try PGConnection(url: url)
        func unit(_ seq: Int, _ payload: [UInt8], _ length: Int) throws {
            try connection.execute(
                "INSERT INTO _ingot_units (name, seq, status, source, payload, length) VALUES ('units', $1, 'pending', $2, $3, $4)",
                [String(seq), "unit-\(seq)", PGConnection.byteaText(payload), String(length)])
        }
        try unit(1, try zstd.compress(Array(good[0].utf8)), good[0].utf8.count)
        try unit(2, try zstd.compress(Array("[]".utf8)), 1 << 40)
        try unit(3, Array("not a zstd frame".utf8), 10)
        try unit(4, try zstd.compress(Array(good[1].utf8)), good[1].utf8.count)
        // Labels (resource, for_each values) that are not what a job writes.
        try unit(5, try zstd.compress(Array(good[1].utf8)), good[1].utf8.count)
        try connection.execute("UPDATE _ingot_units SET labels = '{\"resource\": [' WHERE name = 'units' AND seq = 5")
        try connection.execute("UPDATE _ingot_joins SET next_seq = 6, end_seq = 6 WHERE name = 'units'")

        let summary = try job(JoinTests.yaml, database, name: "units", source: MemoryPageSource([]))
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedPages == 3)
        let rejects = try connection.execute(
            "SELECT reason_code, source, reason FROM _ingot_rejects WHERE record_index IS NULL ORDER BY source")
        #expect(rejects.map { $0[0] } == ["page_too_large", "unreadable", "unreadable"])
        #expect(rejects.first?[2]?.contains("1099511627776 bytes, over max_page_bytes") == true, "\(rejects)")
        #expect(rejects[1][2]?.contains("unit 3 of join 'units' cannot be read") == true, "\(rejects)")
        #expect(rejects.last?[2]?.contains("its labels (resource, for_each values) cannot be read") == true, "\(rejects)")
        let (_, db) = try ingest(JoinTests.yaml, good)
        let expected = try PostgresTests.sqliteDump(db, config.model)
        let got = try PostgresTests.postgresDump(url, config.model)
        for table in expected.keys.sorted() { #expect(got[table] == expected[table], "table \(table)") }
    }
}

/// Whether the API is down, shared by the jobs' sources.
private final class Outage: Sendable {
    let isDown = Mutex(true)
}

/// Pages from memory, or a source error while `down` is set (an outage every job sees).
private final class OutageSource: PageSource, @unchecked Sendable {  // used from the source queue only
    private let pages: MemoryPageSource
    private let down: Outage
    init(_ pages: [String], down: Outage) {
        self.pages = MemoryPageSource(pages)
        self.down = down
    }
    func next() throws -> Page? {
        if down.isDown.withLock({ $0 }) { throw SourceError(source: "outage", message: "the API is down") }
        return try pages.next()
    }
}
