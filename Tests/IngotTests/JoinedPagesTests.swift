import Foundation
import Logging
import Synchronization
import Testing

@testable import Ingot

/// Numbered pages in a shared run (docs/scale-out.md, "Requests any job makes"): once a page said
/// the source's total, the fetcher enqueues the pages up to it unfetched, each naming its position
/// (``Page/cursor``), and the job that claims one fetches it — so a long numbered list is fetched
/// by every job at once, where one fetcher fetched it all.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct JoinedPagesTests {
    static let paginators = [
        ("paged", "{page: {param: page, start: 1, total_pages: meta.total_pages}}"),
        ("offset404", "{offset: {param: offset, limit_param: limit, limit: 100, total: count}}"),
    ]

    /// The fetcher reads the first page itself (it says the total), then hands out the others
    /// unfetched, numbered, up to the total and never past it; each is fetched by
    /// ``HTTPPageSource/fetchPage(at:)`` exactly as the single run reads it.
    @Test(arguments: paginators)
    func theFetcherEnqueuesThePagesItLearnedOfUnfetched(style: String, paginate: String) throws {
        let pages = try generatePeople(persons: 450, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let config = try PipelineConfig.parse(
            text: try peopleOverHTTPText("\(server.base)/people/\(style)", ["paginate: \(paginate)", "concurrency: 3"]), path: "p.yml")
        let http = try #require(config.source.http)
        #expect(SharedRequests.defersPages(of: http, in: config))
        let source = try HTTPPageSource(config: http, framing: config.framing, logger: Logger(label: "test"))
        source.defersNumberedPages = true
        var seen: [Page] = []
        while let page = try source.next() { seen.append(page) }
        let files = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.count
        #expect(seen.count == files && files > 3)
        #expect(seen.first?.bytes.isEmpty == false && seen.first?.cursor == nil, "the first page is read: it says the total")
        let positions = (1..<files).map { style == "paged" ? "page:\($0 + 1)" : "offset:\($0 * 100)" }
        #expect(seen.dropFirst().map(\.cursor) == positions)
        #expect(seen.dropFirst().allSatisfy { $0.bytes.isEmpty && SharedRequests.isPending($0) })
        #expect(seen.last?.resumeState == "done")
        #expect(try server.counters()["people_requests"] == 1, "only the first page was asked for")
        // A job that claims page 3 fetches what the single run reads there.
        let requests = SharedRequests(config: config, environment: [:], maxPageBytes: Page.defaultMaxBytes)
        let third = try #require(try requests.fetch(seen[2], logger: Logger(label: "test")).only)
        let alone = try HTTPPageSource(config: http, framing: config.framing, logger: Logger(label: "test"))
        _ = try alone.next()
        _ = try alone.next()
        let read = try #require(try alone.next())
        #expect(third.bytes == read.bytes && !third.bytes.isEmpty)
        #expect(third.source == read.source)
    }

    /// A fetcher that takes the role over resumes where the last unit enqueued left the source
    /// (`page:4`): it reads that page itself, to learn the total again, then hands the rest out
    /// unfetched — none before it asked twice, none past the total asked at all.
    @Test func aFetcherTakingOverReadsOnePageToLearnTheTotal() throws {
        let pages = try generatePeople(persons: 700, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let config = try PipelineConfig.parse(
            text: try peopleOverHTTPText("\(server.base)/people/paged", ["paginate: \(Self.paginators[0].1)", "concurrency: 3"]),
            path: "p.yml")
        let source = try HTTPPageSource(config: try #require(config.source.http), framing: config.framing, logger: Logger(label: "test"))
        source.defersNumberedPages = true
        try source.resume(from: "page:4")
        var seen: [Page] = []
        while let page = try source.next() { seen.append(page) }
        let files = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.count
        #expect(seen.count == files - 3)
        #expect(seen.first?.bytes.isEmpty == false && seen.first?.cursor == nil)
        #expect(seen.dropFirst().map(\.cursor) == (5...files).map { "page:\($0)" })
        #expect(try server.counters()["people_requests"] == 1)
    }

    /// Three jobs over numbered pages end in the single run's tables, each page asked for once.
    /// Asked with `--bulk`, the jobs defer their batches to the run's end
    /// (``LoadPlan/JoinedLoad/deferredAsked``) instead of writing each with positions, and the
    /// run ends the same.
    @Test(.hangGuard, arguments: [(JoinBackend.memory, false), (.postgresql, false), (.postgresql, true)])
    func numberedPagesRunJoinedAsAlone(backend: JoinBackend, bulk: Bool) throws {
        let pages = try generatePeople(persons: 1200, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let config = try PipelineConfig.parse(
            text: try peopleOverHTTPText("\(server.base)/people/paged", ["paginate: \(Self.paginators[0].1)", "concurrency: 2"]),
            path: "p.yml")
        let http = try #require(config.source.http)
        let database = try JoinDatabase(backend, model: config.model)
        let logs = LogCapture()
        let summaries = try JoinTests.runJoined(
            config, database, name: "paged", jobs: 3, batchRecords: 150, loading: bulk ? .staged : .automatic(), logs: logs
        ) {
            try HTTPPageSource(config: http, framing: config.framing, logger: Logger(label: "test"))
        }
        // Deferred batches are merged by the jobs once every unit is done (`join.merged`);
        // written with positions, nothing is left to merge.
        #expect(logs.all.contains { $0.contains("msg=join.merged") } == bulk, "\(logs.all.filter { $0.contains("msg=join.") })")
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { "\($0.status) \($0.error ?? "")" })")
        JoinTests.expectShared(summaries)
        let files = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.count
        #expect(try server.counters()["people_requests"] == files, "each page asked for once, by one job")
        #expect(try database.runs().first?.counters?.pages == files)
        try Self.expectTheSingleRunsTables(config, in: database)
    }

    /// Numbered pages without a total (docs/scale-out.md, "Numbered pages any job fetches"): the
    /// fetcher enqueues every page unfetched from the first, the jobs fetch them, and the first
    /// empty page ends the run as it ends a single run — counted once, every page before it asked
    /// for exactly once, those after it only as far as the jobs' requests in flight reached.
    @Test(.hangGuard, arguments: [(JoinBackend.memory, "page"), (.postgresql, "page"), (.postgresql, "offset")])
    func numberedPagesWithoutATotalRunJoinedAsAlone(backend: JoinBackend, style: String) throws {
        let pages = try generatePeople(persons: 1200, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let paginate = style == "page" ? "{page: {param: page, start: 1}}" : "{offset: {param: offset, limit_param: limit, limit: 100}}"
        let config = try PipelineConfig.parse(
            text: try peopleOverHTTPText("\(server.base)/people/\(style)", ["paginate: \(paginate)", "concurrency: 3"]), path: "p.yml")
        let http = try #require(config.source.http)
        #expect(SharedRequests.mayEndTheSource(config) && SharedRequests.madeByJobs(config) == ["the numbered pages"])
        let database = try JoinDatabase(backend, model: config.model)
        let logs = LogCapture()
        let summaries = try JoinTests.runJoined(config, database, name: "untold", jobs: 3, batchRecords: 150, logs: logs) {
            try HTTPPageSource(config: http, framing: config.framing, logger: Logger(label: "test"))
        }
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { "\($0.status) \($0.error ?? "")" })")
        JoinTests.expectShared(summaries)
        let files = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.count
        #expect(logs.all.filter { $0.contains("msg=join.source_end") }.count == 1, "\(logs.all.filter { $0.contains("msg=join.") })")
        var asked: [Int: Int] = [:]
        for (path, query) in try server.seen() where path == "/people/\(style)" {
            let field = query.split(separator: "&").first { $0.hasPrefix(style == "page" ? "page=" : "offset=") }
            let number = field.flatMap { Int($0.split(separator: "=").last ?? "") } ?? -1
            asked[style == "page" ? number : number / 100 + 1, default: 0] += 1
        }
        #expect((1...files + 1).allSatisfy { asked[$0] == 1 }, "\(asked.sorted { $0.key < $1.key })")
        #expect(asked.keys.allSatisfy { (1...files + 1 + 3 * 3).contains($0) } && asked.values.allSatisfy { $0 == 1 })
        let alone = try Self.expectTheSingleRunsTables(config, in: database)
        #expect(alone.counters.pages == files + 1, "a single run counts the empty page that ends it")
        #expect(try database.runs().first?.counters?.pages == alone.counters.pages)
    }

    /// A lone joined job asked to defer (`--bulk`) hands its requests' answers out in the order
    /// of its claims (``LoadPlan/AnswerOrder/claimed``), four requests at once, and exchanges its
    /// rows: every row of the run is written once, by its parts, when the last unit is done
    /// (`join.merged` inserts them all). The tables and counts are a single run's.
    @Test(.hangGuard) func aLoneBulkJobOverHTTPWritesEveryRowAtTheEnd() throws {
        let pages = try generatePeople(persons: 1200, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let config = try PipelineConfig.parse(
            text: try peopleOverHTTPText("\(server.base)/people/paged", ["paginate: \(Self.paginators[0].1)", "concurrency: 4"]),
            path: "p.yml")
        let http = try #require(config.source.http)
        let database = try JoinDatabase(.postgresql, model: config.model)
        let logs = LogCapture()
        let summaries = try JoinTests.runJoined(config, database, name: "lone", jobs: 1, batchRecords: 150, loading: .staged, logs: logs) {
            try HTTPPageSource(config: http, framing: config.framing, logger: Logger(label: "test"))
        }
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { "\($0.status) \($0.error ?? "")" })")
        #expect(!logs.all.contains { $0.contains("msg=bulk.") }, "a joined job stages nothing of its own")
        let merged = logs.all.filter { $0.contains("msg=join.merged") }
        let inserted = summaries.first?.counters.inserted ?? 0
        #expect(inserted > 1200 && merged.count == 1 && merged[0].contains(" inserted=\(inserted) "), "\(merged)")
        #expect(summaries.first?.loaded?.hasPrefix("exchanged") == true)
        try Self.expectTheSingleRunsTables(config, in: database)
    }

    /// The joined run's tables in `database` are those a single run of `config` leaves; that
    /// run's summary.
    @discardableResult
    private static func expectTheSingleRunsTables(_ config: PipelineConfig, in database: JoinDatabase) throws -> RunSummary {
        let db = temporaryDirectory().appendingPathComponent("alone.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        let alone = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        #expect(alone.status == .finished, "\(alone.error ?? "")")
        #expect(try database.sqlite(db) == (try database.dump()))
        return alone
    }

    /// A numbered unit is input: one that names a position its source does not make (a `url:`
    /// state would send the credentials wherever it points) is a rejected page, and nothing is
    /// asked of the server.
    @Test func aNumberedUnitOfAnotherKindIsRefused() throws {
        let pages = try generatePeople(persons: 200, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let config = try PipelineConfig.parse(
            text: try peopleOverHTTPText("\(server.base)/people/paged", ["paginate: \(Self.paginators[0].1)"]), path: "p.yml")
        let requests = SharedRequests(config: config, environment: [:], maxPageBytes: Page.defaultMaxBytes)
        for cursor in ["url:\(server.base)/people/paged?page=1", "offset:100", "page:x", "item:1"] {
            var page = Page(seq: 2, source: "unit 2", bytes: [])
            page.cursor = cursor
            let answered = try #require(try requests.fetch(page, logger: Logger(label: "test")).only)
            #expect(answered.bytes.isEmpty && answered.unreadable?.contains("not a numbered page of its source") == true, "\(cursor)")
        }
        #expect(try server.counters()["people_requests"] == nil || (try server.counters()["people_requests"]) == 0)
    }

    /// What decides page by page, or what reads the pages' records as they come, keeps one
    /// fetcher: `has_more`, an incremental cursor sent with each request, a for_each that reads
    /// the resource.
    @Test func pagesStayWithTheFetcherWhenTheyMust() throws {
        func defers(_ settings: [String], incremental: Bool = false) throws -> Bool {
            var text = try peopleOverHTTPText("https://api.example.org/people", settings)
            if incremental { text += "\nincremental: {cursor_path: updated_at, param: updated_since}\n" }
            let config = try PipelineConfig.parse(text: text, path: "p.yml")
            return SharedRequests.defersPages(of: try #require(config.source.http), in: config)
        }
        #expect(try defers(["paginate: \(Self.paginators[0].1)"]))
        #expect(try defers(["paginate: \(Self.paginators[1].1)"]))
        #expect(try defers(["paginate: {page: {param: page, start: 1}}"]), "the first empty page found by a job ends it")
        // A resource's pages without a total stay with the fetcher: their end is where it goes on
        // to the next resource.
        func resourceDefers(_ paginate: String) throws -> Bool {
            let config = try PipelineConfig.parse(text: try peopleOverHTTPText("https://api.example.org/people", [paginate]), path: "p.yml")
            return SharedRequests.defersPages(of: try #require(config.source.http), in: config, resource: "people")
        }
        #expect(try resourceDefers("paginate: \(Self.paginators[0].1)"))
        #expect(try !resourceDefers("paginate: {page: {param: page, start: 1}}"))
        #expect(try !defers(["paginate: {page: {param: page, start: 1, total_pages: meta.total_pages}, has_more: meta.more}"]))
        #expect(try !defers(["paginate: \(Self.paginators[0].1)"], incremental: true))
        #expect(try !defers(["paginate: {next_url: next}"]))
    }

    /// A pause asked of a run's jobs (a server's `Retry-After`) is kept by the store, by its own
    /// clock: the longest asked stands, and a new run has none.
    @Test(arguments: JoinBackend.allCases)
    func aPauseAskedIsKeptByTheRun(backend: JoinBackend) throws {
        let config = try PipelineConfig.parse(
            text: try peopleOverHTTPText("https://api.example.org/people", ["paginate: \(Self.paginators[0].1)"]), path: "p.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let store = try database.sharedStore()
        defer { try? store.close() }
        let run = try store.joinRun(database.request("pause", config))
        #expect(try run.requestPause() == 0)
        try run.pauseRequests(for: 30)
        try run.pauseRequests(for: 5)
        let left = try run.requestPause()
        #expect(left > 5 && left <= 30, "\(left)")
    }

    /// A job whose request the server answers 429 with `Retry-After` asks every job of the run to
    /// wait (the run keeps the pause), and the run still ends in the single run's tables. The
    /// third request is a job's: the fetcher asks only the first page.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func aRetryAfterMetByOneJobIsKeptForAll(backend: JoinBackend) throws {
        let pages = try generatePeople(persons: 600, pageSize: 100)
        let server = try FixtureServer(people: pages, faults: "429:3")
        let config = try PipelineConfig.parse(
            text: try peopleOverHTTPText("\(server.base)/people/paged", ["paginate: \(Self.paginators[0].1)", "concurrency: 2"]),
            path: "p.yml")
        let http = try #require(config.source.http)
        let database = try JoinDatabase(backend, model: config.model)
        let summaries = try JoinTests.runJoined(config, database, name: "slow", jobs: 2, batchRecords: 150) {
            try HTTPPageSource(config: http, framing: config.framing, logger: Logger(label: "test"))
        }
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { "\($0.status) \($0.error ?? "")" })")
        JoinTests.expectShared(summaries)
        #expect(try database.pauseWasAsked("slow"), "the 429's Retry-After reached the run")
        let files = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.count
        #expect(try database.runs().first?.counters?.pages == files)
        #expect(try server.counters()["people_requests"] == files + 1, "each page once, and the one answered 429 again")
    }

    /// The fetcher's own request answered 429 with `Retry-After` (here the first page, the one
    /// that says the total) pauses the jobs as a job's does.
    @Test(.hangGuard) func aRetryAfterMetByTheFetcherIsKeptForAll() throws {
        let pages = try generatePeople(persons: 300, pageSize: 100)
        let server = try FixtureServer(people: pages, faults: "429:1")
        let config = try PipelineConfig.parse(
            text: try peopleOverHTTPText("\(server.base)/people/paged", ["paginate: \(Self.paginators[0].1)"]), path: "p.yml")
        let http = try #require(config.source.http)
        let database = try JoinDatabase(.memory, model: config.model)
        let summaries = try JoinTests.runJoined(config, database, name: "first", jobs: 2, batchRecords: 150) {
            try HTTPPageSource(config: http, framing: config.framing, logger: Logger(label: "test"))
        }
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { "\($0.status) \($0.error ?? "")" })")
        JoinTests.expectShared(summaries)
        #expect(try database.pauseWasAsked("first"))
    }

    /// A job that finds the run's requests paused starts none until the pause ends (here an
    /// hour: the job is stopped while it waits, having asked the server nothing).
    @Test(.hangGuard) func aJobWaitsOutThePauseBeforeItsRequests() throws {
        let pages = try generatePeople(persons: 200, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let config = try PipelineConfig.parse(
            text: try peopleOverHTTPText("\(server.base)/people/paged", ["paginate: \(Self.paginators[0].1)"]), path: "p.yml")
        let database = try JoinDatabase(.memory, model: config.model)
        let member = try database.sharedStore()
        defer { try? member.close() }
        let http = try #require(config.source.http)
        var request = database.request("paused", config, fetching: true)
        request.spec["source"] = try HTTPPageSource(config: http, framing: config.framing, logger: Logger(label: "t")).origin
        let run = try member.joinRun(request)
        _ = try #require(try run.takeFetcherRole())
        var unit = Page(seq: 1, source: "page 2", bytes: [])
        unit.cursor = "page:2"
        #expect(try run.enqueue(unit, as: 1))
        #expect(try run.endSource(at: 2))
        try run.pauseRequests(for: 3600)
        let logs = LogCapture()
        let runner = PipelineRunner(config: config, options: JoinTests.options(database, join: "paused"), logger: logs.logger)
        let ended = Mutex<RunSummary?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let source = try? HTTPPageSource(config: http, framing: config.framing, logger: Logger(label: "t"))
            ended.withLock { $0 = source.map { database.run(runner, $0) } }
            done.signal()
        }
        waitUntil { logs.all.contains { $0.contains("msg=join.paused") } }
        #expect(try server.counters()["people_requests"] ?? 0 == 0, "no request while paused")
        runner.stop()
        done.wait()
        #expect(ended.withLock { $0 }?.status == .interrupted, "\(ended.withLock { $0 }?.error ?? "")")
    }
}

/// Files in a shared run (docs/scale-out.md, "Pages any job reads"): the fetcher enqueues each file
/// of a directory source unread, a unit naming it and its size (``FileUnit``), and the job that
/// claims it reads it from its own directory — no payload goes through the work queue. A unit row
/// is input: a name outside the source's glob reads nothing.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct JoinedFilesTests {
    /// A directory of four pages, one of them compressed, and a file the glob leaves out.
    static func directory() throws -> String {
        let dir = temporaryDirectory().appendingPathComponent("files").path
        try FileManager.default.createDirectory(atPath: dir + "/sub", withIntermediateDirectories: true)
        for (k, name) in ["a.json", "b.json", "sub/c.json"].enumerated() {
            try Data(#"{"results": [{"id": \#(k)}]}"#.utf8).write(to: URL(fileURLWithPath: dir + "/" + name))
        }
        try Data(try Zstd().compress(Array(#"{"results": []}"#.utf8))).write(to: URL(fileURLWithPath: dir + "/d.json.zst"))
        try Data("secret".utf8).write(to: URL(fileURLWithPath: dir + "/notes.txt"))
        return dir
    }

    @Test func theFetcherEnqueuesFilesUnreadNamingThemAndTheirSizes() throws {
        let dir = try Self.directory()
        let source = try DirectoryPageSource(directory: dir, glob: "**/*.json*")
        source.defersReading = true
        var seen: [Page] = []
        while let page = try source.next() { seen.append(page) }
        let zst = try FileManager.default.attributesOfItem(atPath: dir + "/d.json.zst")[.size] as? Int ?? 0
        #expect(seen.map(\.cursor) == ["file:24:a.json", "file:24:b.json", "file:\(zst):d.json.zst", "file:24:sub/c.json"])
        #expect(seen.allSatisfy { $0.bytes.isEmpty && SharedRequests.isFile($0) && !SharedRequests.isPending($0) })
        #expect(seen.map(\.resumeState) == ["after:a.json", "after:b.json", "after:d.json.zst", "after:sub/c.json"])
    }

    @Test func aJobReadsTheFileAUnitNames() throws {
        let dir = try Self.directory()
        let files = try DirectoryPageSource(directory: dir, glob: "**/*.json*").shared
        let zst = try Array(Data(contentsOf: URL(fileURLWithPath: dir + "/d.json.zst")))
        var unit = Page(seq: 3, source: "elsewhere/d.json.zst", bytes: [])
        unit.cursor = "file:\(zst.count):d.json.zst"
        let named = try #require(FileUnit(cursor: "file:\(zst.count):d.json.zst"))
        let page = try files.read(unit, unit: named)
        #expect(page.source == dir + "/d.json.zst" && page.compression == .zstd && page.unreadable == nil)
        #expect(page.bytes == zst, "read as it is: the decode lane inflates it")
        let nested = try files.read(unit, unit: FileUnit(name: "sub/c.json", size: 24))
        #expect(nested.bytes == Array(#"{"results": [{"id": 2}]}"#.utf8))
    }

    /// Names that are not files of the source — climbing out, absolute, another pattern, empty
    /// parts — are rejected pages, and nothing is read; a cursor that is not a file unit's is one too.
    @Test(arguments: ["../files/a.json", "/etc/passwd", "sub/../a.json", "notes.txt", "sub//c.json", "./a.json", ""])
    func aUnitNamingAFileOutsideTheSourceReadsNothing(name: String) throws {
        let dir = try Self.directory()
        let files = try DirectoryPageSource(directory: dir, glob: "**/*.json*").shared
        let page = try files.read(Page(seq: 1, source: "x", bytes: []), unit: FileUnit(name: name, size: 24))
        #expect(page.bytes.isEmpty && page.unreadable?.contains("not a file of \(dir)") == true, "\(page.unreadable ?? "read")")
        let requests = SharedRequests(
            config: try PipelineConfig.parse(text: itemPipeline("files"), path: "p.yml"), environment: [:], maxPageBytes: 1 << 20,
            files: files)
        var odd = Page(seq: 1, source: "x", bytes: [])
        odd.cursor = "file:many:a.json"
        #expect(try requests.read(odd).unreadable?.contains("not a file of its source") == true)
    }

    /// A file this job cannot find, or finds at another size than the fetcher listed, fails the
    /// job, saying that every job must see the same files: its unit goes back to the queue for a
    /// job that does, rather than the run finishing without the file's rows.
    @Test func aFileMissingOrDifferentHereFailsTheJob() throws {
        let dir = try Self.directory()
        let files = try DirectoryPageSource(directory: dir, glob: "**/*.json*").shared
        let unit = Page(seq: 2, source: "x", bytes: [])
        for (name, size) in [("gone.json", 24), ("a.json", 25)] {
            #expect {
                _ = try files.read(unit, unit: FileUnit(name: name, size: size))
            } throws: { error in
                "\(error)".contains("every job of a joined run must see the same files") && "\(error)".contains(dir + "/" + name)
            }
        }
    }
}

extension Array {
    /// The array's one element; `nil` when it holds none or several.
    fileprivate var only: Element? { count == 1 ? first : nil }
}

/// A joined job's requests in flight hand their answers out as they came, or in the order of
/// their units (``LoadPlan/AnswerOrder``): three answers posted out of order (no timing: every
/// answer is there before the first take).
@Suite struct RequestWindowTests {
    private func window(_ order: LoadPlan.AnswerOrder, units: [Int] = [1, 2, 3]) -> RequestWindow {
        let window = RequestWindow(order: order)
        let tickets = units.map { window.started(unit: $0) }
        for k in [2, 0, 1] {
            window.answer(.success([Page(seq: tickets[k], source: "r\(units[k])", bytes: [])]), ticket: tickets[k])
        }
        return window
    }

    @Test func answersInClaimOrderOrAsTheyCame() throws {
        let claimed = window(.claimed)
        #expect(try (0..<3).map { _ in try claimed.take {}.first?.source } == ["r1", "r2", "r3"])
        #expect(claimed.inFlight == 0)
        let asTheyCome = window(.asTheyCome)
        #expect(try (0..<3).map { _ in try asTheyCome.take {}.first?.source } == ["r3", "r1", "r2"])
        // A job whose claims stop being in a row (another job took a unit between) hands the
        // rest out as they came.
        let broken = window(.claimed)
        #expect(try broken.take {}.first?.source == "r1")
        broken.answerAsTheyCome()
        #expect(try (0..<2).map { _ in try broken.take {}.first?.source } == ["r3", "r2"])
    }

    /// Numbered pages that may end the source keep their units' order whatever the claims: a
    /// unit taken over from another job (claimed after a later one) is handed out first, and
    /// claims out of a row change nothing.
    @Test func numberedPagesKeepTheirUnitsOrder() throws {
        let units = window(.units, units: [7, 5, 6])
        units.answerAsTheyCome()
        #expect(try (0..<3).map { _ in try units.take {}.first?.source } == ["r5", "r6", "r7"])
        #expect(units.inFlight == 0)
    }
}
