import Foundation
import Logging
import Synchronization
import Testing

@testable import Ingot

/// Pipelines with resources and `for_each` run joined as they run alone (docs/scale-out.md,
/// "What a unit carries"): each unit keeps its page's resource and the values its records take
/// from a parent, so whichever job decodes it maps it as the single run did; the run's
/// incremental cursor moves once, when the run finishes.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct JoinedResourcesTests {
    /// pipelines/swapi.yml's six resources and its parent entity, each relationship read from one
    /// side (so that its units are committed in any order), run by three jobs over the fixture
    /// server: a single run's tables, with its counts.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func sixResourcesRunJoinedAsAlone(backend: JoinBackend) throws {
        let server = try FixtureServer()
        let swapi = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/swapi.yml"), encoding: .utf8)
        let oneSided = swapi.replacingOccurrences(of: #", inverse: \w+"#, with: "", options: .regularExpression)
        let archives = (0..<3).map { _ in temporaryDirectory().path }
        let (config, single, database, db) = try runSwapiJoinedAndAlone(oneSided, server, backend, archives: archives)
        // The finishing job archived every unit with its resource: a replay maps each page as
        // the run did.
        let files = archives.flatMap { dir in ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).map { dir + "/" + $0 } }
        #expect(files.count == 1)
        let archive = try #require(files.first)
        let replayed = temporaryDirectory().appendingPathComponent("replay.db").path
        let replay = try ingotReplay(config, archive: archive, db: replayed)
        #expect(replay.status == .finished && replay.counters.pages == single.counters.pages, "\(replay.error ?? "")")
        #expect(replay.counters.resourceRecords == single.counters.resourceRecords)
        #expect(try database.sqlite(replayed) == (try database.sqlite(db)))
    }

    /// Two resources read from directories, run by two jobs: each file is a unit naming it, read
    /// by the job that claims it (docs/scale-out.md, "Pages any job reads"), and the tables end
    /// as a single run's — later pages winning over earlier ones within each resource.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func resourcesOfFilesAreReadByTheJobsThatClaimThem(backend: JoinBackend) throws {
        let root = temporaryDirectory().path
        for (resource, key) in [("items", "name"), ("tags", "label")] {
            try FileManager.default.createDirectory(atPath: root + "/" + resource, withIntermediateDirectories: true)
            for page in 0..<6 {
                // Each page re-sends half of the previous page's records with new values.
                let records = (0..<20).map { k in #"{"id": \#(page * 10 + k), "\#(key)": "\#(resource)-\#(page)-\#(k)"}"# }
                try Data(#"{"results": [\#(records.joined(separator: ", "))]}"#.utf8).write(
                    to: URL(fileURLWithPath: root + "/\(resource)/page-\(page).json"))
            }
        }
        let yaml = """
            version: 1
            name: two
            resources:
              - name: items
                source: {files: {dir: \(root)/items, glob: "*.json"}}
                records: results
                root: item
              - name: tags
                source: {files: {dir: \(root)/tags, glob: "*.json"}}
                records: results
                root: tag
            entities:
              item: {identity: id, attributes: {id: integer, name: string}}
              tag: {identity: id, attributes: {id: integer, label: string}}
            """
        let config = try PipelineConfig.parse(text: yaml, path: "two.yml")
        let (single, db) = try runAlone(config, environment: [:])
        let database = try JoinDatabase(backend, model: config.model)
        let summaries = try JoinTests.runJoined(config, database, name: "two", jobs: 2, batchRecords: 15) {
            ResourcesPageSource(config: config, environment: [:], maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
        }
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { "\($0.status) \($0.error ?? "")" })")
        JoinTests.expectShared(summaries)
        #expect(summaries.map(\.counters.records).reduce(0, +) == single.counters.records)
        JoinTests.expectShared(summaries)
        try expectSameTables(database, db, config)
        #expect(try database.dump()["tag"]?.count == 70)
        if backend == .postgresql {
            let cursors = try PGConnection(url: database.url).execute(
                "SELECT labels::json->>'resource', labels::json->>'cursor' FROM _ingot_units WHERE name = 'two' ORDER BY seq")
            var want: [[String]] = []
            for resource in ["items", "tags"] {
                for page in 0..<6 {
                    want.append([resource, "file:\(try fileSize(root + "/\(resource)/page-\(page).json")):page-\(page).json"])
                }
            }
            #expect(cursors.map { $0.map { $0 ?? "" } } == want)
        }
    }

    /// The cookbook's GitHub pipeline — issues, then each issue's comments (`for_each` … `with:
    /// {issue_number: number}`) — run by two jobs: every comment carries its issue's number, as
    /// in a single run, and no request is made twice.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func forEachRunsJoinedAsAlone(backend: JoinBackend) throws {
        let server = try FixtureServer()
        let environment = ["GITHUB_TOKEN": "t0ken"]
        let config = try PipelineConfig.parse(text: try RealAPITests.github(server.base), path: "github.yml", environment: environment)
        let (single, db) = try runAlone(config, environment: environment)
        let alone = try server.counters()
        let database = try JoinDatabase(backend, model: config.model)
        let archives = (0..<2).map { _ in temporaryDirectory().path }
        let summaries = try JoinTests.runJoined(config, database, name: "github", jobs: 2, batchRecords: 3, archives: archives) {
            ResourcesPageSource(config: config, environment: environment, maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
        }
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { "\($0.status) \($0.error ?? "")" })")
        JoinTests.expectShared(summaries)
        try expectSameTables(database, db, config)
        let sqlite = try database.sqlite(db)
        #expect(sqlite["comment"]?.isEmpty == false)
        let joined = try server.counters()
        // Requests of the joined run: the counters went on from the single run's.
        for (path, count) in alone { #expect(joined[path] == 2 * count, "\(path)") }
        // The jobs made the comments requests, two of them followed to a second page: the
        // archive holds each page as an entry of its own, and a replay is the single run.
        let files = archives.flatMap { dir in ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).map { dir + "/" + $0 } }
        let archive = try #require(files.first)
        let replayed = temporaryDirectory().appendingPathComponent("replay.db").path
        let replay = try ingotReplay(config, archive: archive, db: replayed)
        #expect(replay.status == .finished && replay.counters.pages == single.counters.pages, "\(replay.error ?? "")")
        #expect(try database.sqlite(replayed) == sqlite)
    }

    /// PokeAPI — the list, then each pokemon's detail page with its owned type slots and moves
    /// (and each move's owned details) — run by three jobs ends in a single run's tables. The
    /// detail requests (one page each) are made by the jobs that claim them, three at once, and
    /// none twice.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func ownedChildrenOfDetailPagesRunJoinedAsAlone(backend: JoinBackend) throws {
        let server = try FixtureServer()
        let config = try PipelineConfig.parse(text: RealAPITests.pokeapi(server.base, concurrency: 3), path: "pokeapi.yml")
        let (single, db) = try runAlone(config, environment: [:])
        let alone = try server.counters()
        let database = try JoinDatabase(backend, model: config.model)
        let summaries = try JoinTests.runJoined(config, database, name: "poke", jobs: 3, batchRecords: 2) {
            ResourcesPageSource(config: config, environment: [:], maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
        }
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { "\($0.status) \($0.error ?? "")" })")
        JoinTests.expectShared(summaries)
        try expectSameTables(database, db, config)
        #expect(try database.runs().first?.counters?.records == single.counters.records)
        let joined = try server.counters()
        for (path, count) in alone where count > 0 { #expect(joined[path] == 2 * count, "\(path)") }
    }

    /// A request unit (``Page/request``: a for_each request answered by one page) is fetched by
    /// the job that claims it: here the fetcher is a bare member of the run that enqueues the
    /// request unfetched and never fetches anything, and the job that claims it asks the server,
    /// keeps the answer in the unit, and stores the record.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func theJobThatClaimsARequestMakesIt(backend: JoinBackend) throws {
        let server = try FixtureServer()
        let config = try PipelineConfig.parse(text: RealAPITests.pokeapi(server.base), path: "pokeapi.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let before = try server.counters()
        let summaries = try runRequestUnit(server.base + "/pokeapi/api/v2/pokemon/1/", config, database)
        #expect(summaries.map(\.status) == [.finished], "\(summaries.compactMap(\.error))")
        // The job's request, and this count's own.
        #expect(try server.counters()["requests"] == (before["requests"] ?? 0) + 2, "one request, by the job")
        let pokemon = try #require(try database.dump()["pokemon"])
        #expect(pokemon.count == 1 && pokemon.first?.contains("bulbasaur") == true, "\(pokemon)")
    }

    /// A request unit is input like any other: one whose URL leaves the pipeline's origin (a row
    /// of the work queue someone wrote) is a rejected page, and no job sends the resource's
    /// credentials there.
    @Test(.hangGuard) func aRequestUnitLeavingTheOriginIsRefused() throws {
        let server = try FixtureServer()
        let config = try PipelineConfig.parse(text: RealAPITests.pokeapi(server.base), path: "pokeapi.yml")
        let database = try JoinDatabase(.memory, model: config.model)
        let elsewhere = try FixtureServer()
        let summaries = try runRequestUnit(elsewhere.base.replacingOccurrences(of: "127.0.0.1", with: "localhost") + "/x", config, database)
        #expect(summaries.map(\.status) == [.finished], "\(summaries.compactMap(\.error))")
        #expect(summaries.first?.counters.rejectedPages == 1)
        #expect(try elsewhere.counters()["requests"] == 1, "only this count's own")
    }

    /// The cookbook's GitHub pipeline against `server`, and the environment it reads.
    private func github(_ server: FixtureServer) throws -> (PipelineConfig, [String: String]) {
        let environment = ["GITHUB_TOKEN": "t0ken"]
        return (
            try PipelineConfig.parse(text: try RealAPITests.github(server.base), path: "github.yml", environment: environment), environment
        )
    }

    /// A request unit for `url` (PokeAPI's detail resource), run by one job (``runEnqueued``).
    private func runRequestUnit(_ url: String, _ config: PipelineConfig, _ database: JoinDatabase) throws -> [RunSummary] {
        var request = Page(seq: 1, source: url, bytes: [])
        request.request = url
        request.resource = 1
        request.resourceName = "pokemon"
        request.injected = [InjectedValue(key: "listed_as", json: #""bulbasaur""#)]
        return try runEnqueued(request, config, database, environment: [:])
    }

    /// Enqueues `unit` as the run's one unit, as a bare fetcher that never fetches, ends the
    /// source, and runs one job of the join over it: its summaries.
    private func runEnqueued(
        _ unit: Page, _ config: PipelineConfig, _ database: JoinDatabase, environment: [String: String]
    ) throws -> [RunSummary] {
        let fetcher = try database.sharedStore()
        defer { try? fetcher.close() }
        var spec = database.request("req", config, fetching: true)
        let source = ResourcesPageSource(
            config: config, environment: environment, maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
        spec.spec["source"] = source.origin
        let run = try fetcher.joinRun(spec)
        _ = try #require(try run.takeFetcherRole())
        #expect(try run.enqueue(unit, as: 1))
        #expect(try run.endSource(at: 2))
        return try JoinTests.runJoined(config, database, name: "req", jobs: 1) {
            ResourcesPageSource(config: config, environment: environment, maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
        }
    }

    /// The fetcher of a shared run reads the GitHub pipeline's repository and issues and leaves
    /// every comments request — paginated by `Link` headers — unfetched, a unit naming its URL
    /// and its issue's number, for the job that claims it to make.
    @Test(.hangGuard) func theFetcherLeavesPaginatedRequestsToTheJobs() throws {
        let server = try FixtureServer()
        let (config, environment) = try github(server)
        let fetcher = ResourcesPageSource(
            config: config, environment: environment, maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
        fetcher.defersRequests = true
        var seen: [Page] = []
        while let page = try fetcher.next() { seen.append(page) }
        let comments = seen.filter { $0.resourceName == "comments" }
        #expect(comments.count == 7 && comments.allSatisfy { SharedRequests.isPending($0) && $0.request != nil })
        #expect(comments.first?.injected == [InjectedValue(key: "issue_number", json: "7")])
        let paths = try server.seen().map(\.path)
        #expect(paths.contains { $0.hasSuffix("/issues") } && !paths.contains { $0.hasSuffix("/comments") }, "\(paths)")
    }

    /// A shared run's fetcher reads the levels of a chain of for_each whose records make the
    /// next requests (Hacker News: the stories and their comments, three levels deep) and
    /// leaves only a last level's requests unfetched; a fetcher that takes the role over after
    /// any page, resumed from that page's state, enqueues exactly the pages the first would have
    /// enqueued after it.
    @Test(.hangGuard, arguments: [true, false]) func aFetcherTakenOverInAChainOfForEachGoesOnWhereItStopped(recursive: Bool) throws {
        let server = try FixtureServer()
        var yaml = try ExportRoundTripTests.cookbook("hacker-news", server.base, ["https://hacker-news.firebaseio.com/v0/": "/hn/v0/"])
        if !recursive { yaml = yaml.replacingOccurrences(of: ", depth: 3}", with: "}") }
        let config = try PipelineConfig.parse(text: yaml, path: "hn.yml")
        func fetcher() -> ResourcesPageSource {
            let source = ResourcesPageSource(
                config: config, environment: [:], maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
            source.defersRequests = true
            return source
        }
        func shown(_ page: Page) -> String {
            "\(page.resourceName ?? "-") \(page.request ?? page.source)\(SharedRequests.isPending(page) ? " (the jobs')" : "")"
        }
        var whole: [Page] = []
        let first = fetcher()
        while let page = try first.next() { whole.append(page) }
        let comments = whole.filter { $0.resourceName == "comments" }
        #expect(!comments.isEmpty && comments.allSatisfy { SharedRequests.isPending($0) != recursive }, "\(whole.map(shown))")
        #expect(whole.filter { $0.resourceName == "stories" }.allSatisfy { !SharedRequests.isPending($0) })
        for k in whole.indices.dropLast() {
            let state = try #require(whole[k].resumeState, "page \(k)")
            let taken = fetcher()
            try taken.resume(from: state)
            var rest: [String] = []
            while let page = try taken.next() { rest.append(shown(page)) }
            #expect(rest == whole[(k + 1)...].map(shown), "after page \(k) (\(state))")
        }
    }

    /// A paginated request is one unit: the job that claims it follows the request's pages to
    /// its end and keeps them together in the unit (``Page/requestPages``); a job that takes the
    /// unit over decodes what was kept, in order, and asks the server nothing. Here the unit is
    /// enqueued kept already — two pages of comments of the fixture's fifth issue — and the job's
    /// tables hold all three comments, the later page's value winning where both pages give one.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func aRequestsKeptPagesAreDecodedInOrderByTheJobThatTakesItOver(backend: JoinBackend) throws {
        let server = try FixtureServer()
        let (config, environment) = try github(server)
        let base = server.base + "/github/repos/octocat/hello-world/issues/5/comments?per_page=2"
        let first =
            #"[{"id": 5050, "body": "first", "user": {"id": 1, "login": "octocat"}}, {"id": 5051, "body": "b", "user": {"id": 2, "login": "hubot"}}]"#
        let second =
            #"[{"id": 5052, "body": "c", "user": {"id": 1, "login": "octocat"}}, {"id": 5050, "body": "last", "user": {"id": 1, "login": "octocat"}}]"#
        var unit = try #require(
            Page.kept([
                Page(seq: 1, source: base, bytes: Array(first.utf8)), Page(seq: 1, source: base + "&page=2", bytes: Array(second.utf8)),
            ]))
        unit.request = base
        unit.resourceName = "comments"
        unit.injected = [InjectedValue(key: "issue_number", json: "5")]
        let database = try JoinDatabase(backend, model: config.model)
        let before = try server.counters()
        let summaries = try runEnqueued(unit, config, database, environment: environment)
        #expect(summaries.map(\.status) == [.finished], "\(summaries.compactMap(\.error))")
        #expect(summaries.first?.counters.pages == 2 && summaries.first?.counters.records == 4)
        #expect(try server.counters() == before.merging(["requests": (before["requests"] ?? 0) + 1]) { $1 }, "nothing asked but this count")
        let comments = try #require(try database.dump()["comment"])
        #expect(comments.count == 3, "\(comments)")
        #expect(comments.contains { $0.contains("last") } && !comments.contains { $0.contains("first") }, "\(comments)")
    }

    /// A unit's kept pages are input: a list of pages that does not add up to the payload (a row
    /// someone wrote) is one rejected page naming the unit, and the run finishes.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func keptPagesThatDoNotAddUpAreARejectedPage(backend: JoinBackend) throws {
        let server = try FixtureServer()
        let (config, environment) = try github(server)
        let url = server.base + "/github/repos/octocat/hello-world/issues/5/comments?per_page=2"
        var unit = Page(seq: 1, source: url, bytes: Array(#"[{"id": 1}][{"id": 2}]"#.utf8))
        unit.requestPages = [RequestPage(source: url, length: 11), RequestPage(source: url, length: 99)]
        unit.request = url
        unit.resourceName = "comments"
        let database = try JoinDatabase(backend, model: config.model)
        let summaries = try runEnqueued(unit, config, database, environment: environment)
        #expect(summaries.map(\.status) == [.finished], "\(summaries.compactMap(\.error))")
        #expect(summaries.first?.counters.rejectedPages == 1 && summaries.first?.counters.records == 0)
        #expect(try database.dump()["comment"]?.isEmpty ?? true)
    }

    /// What a unit says of its kept pages is checked against its payload before any page is
    /// cut from it: lengths that do not add up — past it, negative, or wrapping around `Int` —
    /// make one rejected page, never a slice out of range.
    @Test(arguments: [[11, 99], [Int.max, Int.max, 24], [-1, 23], [], [22, 0, -22, 22]])
    func keptPagesAreCheckedAgainstThePayload(lengths: [Int]) {
        var unit = Page(seq: 1, source: "u", bytes: Array(#"[{"id": 1}][{"id": 2}]"#.utf8))
        unit.requestPages = lengths.map { RequestPage(source: "u", length: $0) }
        let pages = unit.keptPages()
        #expect(pages.count == 1 && pages[0].bytes.isEmpty && pages[0].unreadable?.contains("do not add up") == true)
        unit.requestPages = [11, 0, 11].map { RequestPage(source: "u", length: $0) }
        #expect(unit.keptPages().map(\.bytes.count) == [11, 0, 11] && unit.keptPages().map(\.unitContinues) == [true, true, false])
    }

    /// A detail request the job makes answered 404 (the record was deleted after the list was
    /// read) is a rejected page naming it, as in a single run: the run finishes, counted.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func aRequestAnswered404IsARejectedPageAsAlone(backend: JoinBackend) throws {
        let server = try FixtureServer()
        _ = try HTTPClient().get(server.base + "/control/pokeapi-gone?n=5", headers: [], timeout: 5)
        let config = try PipelineConfig.parse(text: RealAPITests.pokeapi(server.base, concurrency: 2), path: "pokeapi.yml")
        let (single, db) = try runAlone(config, environment: [:])
        let database = try JoinDatabase(backend, model: config.model)
        let summaries = try JoinTests.runJoined(config, database, name: "gone", jobs: 2) {
            ResourcesPageSource(config: config, environment: [:], maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
        }
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.compactMap(\.error))")
        #expect(single.counters.rejectedPages == 1)
        #expect(summaries.map(\.counters.rejectedPages).reduce(0, +) == 1)
        try expectSameTables(database, db, config)
    }

    /// A joined job stopped while a request it claimed hangs on the server (for an hour) stops
    /// at once: it does not wait for the answer.
    @Test(.hangGuard) func aJobStoppedDuringAHangingRequestStopsPromptly() throws {
        // The list's three pages, then the first detail request (the job's) hangs.
        let server = try FixtureServer(faults: "slow:4", slow: 3600)
        let config = try PipelineConfig.parse(text: RealAPITests.pokeapi(server.base), path: "pokeapi.yml")
        let database = try JoinDatabase(.memory, model: config.model)
        let runner = PipelineRunner(config: config, options: JoinTests.options(database, join: "hang"), logger: LogCapture().logger)
        let ended = Mutex<RunSummary?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let source = ResourcesPageSource(
                config: config, environment: [:], maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "t"))
            ended.withLock { $0 = database.run(runner, source) }
            done.signal()
        }
        try waitUntil { (try server.counters()["people_requests"] ?? 0) >= 4 }
        runner.stop()
        done.wait()
        #expect(ended.withLock { $0 }?.status == .interrupted, "\(ended.withLock { $0 }?.error ?? "")")
    }

    /// The GitHub pipeline, run by three `ingot` processes: the comments requests (paginated,
    /// each a unit) are made by the jobs that claim them, and the job whose request the server
    /// holds (the eighth to the API: no timing involved) is killed with `kill -9` and a job
    /// started in its place. Another job takes the unit over once its lease runs out, makes the
    /// request again with its pages, and the run ends exactly as a single run.
    @Test(.hangGuard) func aForEachJobKilledDuringItsRequestIsReplacedExact() throws {
        let server = try FixtureServer(faults: "slow:8", slow: 20)
        let environment = ["GITHUB_TOKEN": "t0ken"]
        let text = try RealAPITests.github(server.base)
        try killTheFetcherAndReplaceIt(
            text, name: "gh", jobs: 3, extra: ["--lease", "2"], environment: environment,
            when: { _ in ((try? server.counters()) ?? [:]).values.reduce(0, +) >= 8 },
            victim: { watcher in
                // The job whose request hangs: the one unit claimed and not answered yet (its
                // payload still empty), once the eighth request is in.
                let rows = try? watcher.execute("SELECT job FROM _ingot_units WHERE name = 'gh' AND status = 'claimed' AND length = 0")
                guard let rows, rows.count == 1 else { return nil }
                return rows[0][0] ?? nil
            })
    }

    /// A joined incremental run's cursor moves once, when the run finishes: jobs that fail at a
    /// unit leave it where it was (a later run fetches from there again, and loses nothing),
    /// though they committed units past it; joined again and finished, it moves to the greatest
    /// value any unit gave.
    @Test(.hangGuard) func anIncrementalCursorMovesWhenTheRunFinishes() throws {
        let yaml = itemPipeline(
            "cursor", "records: results", "incremental: {cursor_path: updated, param: since}",
            "source: {files: {dir: /nonexistent, glob: \"*.json\"}}"
        ).replacingOccurrences(of: "{id: integer, name: string}", with: "{id: integer, name: string, updated: string}")
        let config = try PipelineConfig.parse(text: yaml, path: "cursor.yml")
        let database = try JoinDatabase(.postgresql, model: config.model)
        let pages = (1...4).map { k in #"{"results": [{"id": \#(k), "name": "n\#(k)", "updated": "2024-01-0\#(k)"}]}"# }
        _ = try JoinTests.runJoined(config, database, name: "schema", jobs: 1, source: { MemoryPageSource([]) })
        let connection = try PGConnection(url: database.url)
        try connection.execute(
            """
            CREATE FUNCTION fail_two() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
              IF NEW.id = 2 THEN RAISE EXCEPTION 'the disk is on fire' USING ERRCODE = 'XX000'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER fail_two BEFORE INSERT OR UPDATE ON item FOR EACH ROW EXECUTE FUNCTION fail_two()
            """)
        let cursor = { try connection.execute("SELECT value FROM _ingot_state WHERE pipeline = 'cursor' AND key = 'incremental:since'") }
        let failed = try JoinTests.runJoined(config, database, name: "c", jobs: 2, batchRecords: 1, source: { MemoryPageSource(pages) })
        #expect(failed.allSatisfy { $0.status == .failed })
        #expect(try cursor() == [["2024-01-01"]] || (try cursor()).isEmpty, "no unit past the failed one moves the cursor")
        #expect(try cursor() != [["2024-01-04"]] && (try cursor()) != [["2024-01-03"]])
        try connection.execute("DROP TRIGGER fail_two ON item")
        let finished = try JoinTests.runJoined(config, database, name: "c", jobs: 2, batchRecords: 1, source: { MemoryPageSource(pages) })
        #expect(finished.allSatisfy { $0.status == .finished }, "\(finished.compactMap(\.error))")
        #expect(try cursor() == [["2024-01-04"]])
    }

    /// pipelines/swapi.yml as shipped — relationships read from both sides (`inverse:`) — run by
    /// three jobs: its units are committed in the run's order (docs/scale-out.md, "Units committed
    /// in order"), and the tables end as a single run's. PostgreSQL only: the memory store keeps
    /// each side's links apart and has no join table two relationships share.
    @Test(.hangGuard, arguments: [JoinBackend.postgresql])
    func inversePairsRunJoinedInOrder(backend: JoinBackend) throws {
        let server = try FixtureServer()
        let swapi = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/swapi.yml"), encoding: .utf8)
        let (config, _, _, _) = try runSwapiJoinedAndAlone(swapi, server, backend)
        #expect(PipelineRunner.joinOrder(config) != .anyOrder)
    }

    /// PokeAPI — the list, then each pokemon's detail page, requested by the job that claims it —
    /// run by three `ingot` processes: the fetcher is killed with `kill -9` while the server
    /// holds the sixth request (no timing involved), a fourth job is started in its place, and
    /// the run ends exactly as a single run, every detail page stored once.
    @Test(.hangGuard) func detailRequestsJobKilledAndReplacedEndsExact() throws {
        let server = try FixtureServer(faults: "slow:6", slow: 5)
        try killTheFetcherAndReplaceIt(
            RealAPITests.pokeapi(server.base, concurrency: 2), name: "poke", jobs: 3, extra: ["--lease", "2"], environment: [:],
            when: { _ in ((try? server.counters()) ?? [:]).values.reduce(0, +) >= 6 })
    }

    /// The same with `kill -9`: the job holding the unit in progress is killed while the server
    /// holds that unit's request (the fifth to the API: no timing involved), a job is started in
    /// its place, and the run ends exactly as a single run.
    @Test(.hangGuard) func inversePairsJobKilledAndReplacedEndsExact() throws {
        let server = try FixtureServer(slow: 5, apiSlow: 5)
        let environment = ["SWAPI_API": server.base]
        let text = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/swapi.yml"), encoding: .utf8)
        try killTheFetcherAndReplaceIt(
            text, name: "sw", jobs: 3, extra: ["--lease", "2"], environment: environment,
            when: { _ in (try? server.counters()["requests"]) ?? 0 >= 5 })
    }

    /// `write: replace` over two resources, run by three jobs after a run that left more rows:
    /// at the run's end each replaced root loses the rows no unit touched — an owner that only
    /// an item names (a stub of an existing row) was touched, as in a single run — and the tables
    /// end as the same two runs alone leave them.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func replaceOverSeveralResourcesRunsJoinedAsAlone(backend: JoinBackend) throws {
        func pipeline(owners: [String], items: [String]) throws -> PipelineConfig {
            var dirs: [String] = []
            for pages in [owners, items] {
                let dir = temporaryDirectory()
                for (k, page) in pages.enumerated() { try Data(page.utf8).write(to: dir.appendingPathComponent("page-\(k + 10).json")) }
                dirs.append(dir.path)
            }
            let text = """
                version: 1
                name: shop
                write: replace
                resources:
                  - {name: owners, source: {files: {dir: \(dirs[0]), glob: "page-*.json"}}, records: ".", root: owner}
                  - {name: items, source: {files: {dir: \(dirs[1]), glob: "page-*.json"}}, records: ".", root: item}
                entities:
                  owner: {identity: id, attributes: {id: integer, name: string}}
                  item:
                    identity: id
                    attributes: {id: integer, name: string}
                    relationships: {owner: {to: owner}}
                """
            return try PipelineConfig.parse(text: text, path: "shop.yml")
        }
        let seed = try pipeline(
            owners: [#"[{"id": 1}, {"id": 2}, {"id": 3}]"#, #"[{"id": 4}, {"id": 5}]"#],
            items: [#"[{"id": 1, "owner": 1}, {"id": 2, "owner": 4}]"#, #"[{"id": 3, "owner": 5}]"#])
        let again = try pipeline(
            owners: [#"[{"id": 1, "name": "one"}]"#, #"[{"id": 2}]"#],
            items: [#"[{"id": 1, "owner": 3}]"#, #"[{"id": 4, "owner": 9}]"#])
        let (_, db) = try runAlone(seed, environment: [:])
        let (single, _) = try runAlone(again, environment: [:], db: db)
        #expect(single.counters.deleted == 4, "owners 4 and 5, items 2 and 3")
        let database = try JoinDatabase(backend, model: seed.model)
        for (config, name) in [(seed, "seed"), (again, "again")] {
            let summaries = try JoinTests.runJoined(config, database, name: name, jobs: 3, batchRecords: 1) {
                ResourcesPageSource(config: config, environment: [:], maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
            }
            #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { "\($0.status) \($0.error ?? "")" })")
            JoinTests.expectShared(summaries)
        }
        #expect(try database.runs().last?.counters?.deleted == single.counters.deleted)
        try expectSameTables(database, db, seed)
    }

    // MARK: - Helpers

    /// The pipeline `text` run by `jobs` `ingot` processes joined as `name` into a new PostgreSQL
    /// database; once `when` holds (asked with a connection to it) and a job holds the fetcher's
    /// role — or `victim` names a job — that job is killed with `kill -9` and a new one started:
    /// every other job exits 0, and the tables and the run's counts are a single run's.
    private func killTheFetcherAndReplaceIt(
        _ text: String, name: String, jobs: Int, extra: [String], environment: [String: String],
        when: (PGConnection) -> Bool, victim: ((PGConnection) -> String?)? = nil
    ) throws {
        let pipeline = temporaryDirectory().appendingPathComponent("\(name).yml")
        try Data(text.utf8).write(to: pipeline)
        let url = try PostgresServer.freshDatabase()
        let arguments = ["run", pipeline.path, "--db", url, "--join", name] + extra
        var processes = try JoinTests.startJobs(jobs, arguments, environment: environment)
        let watcher = try PGConnection(url: url)
        var fetcher = ""
        waitUntil {
            guard when(watcher) else { return false }
            if let victim {
                fetcher = victim(watcher) ?? ""
            } else {
                let row = (try? watcher.execute("SELECT fetcher FROM _ingot_joins WHERE name = $1", [name]))?.first
                fetcher = (row?[0] ?? nil) ?? ""
            }
            return !fetcher.isEmpty
        }
        let pid = try #require(Int32(fetcher.split(separator: "-").dropLast().last ?? ""))
        let victim = try #require(processes.first { $0.processIdentifier == pid })
        kill(victim.processIdentifier, SIGKILL)
        victim.waitUntilExit()
        processes += try JoinTests.startJobs(1, arguments, environment: environment)
        for process in processes where process !== victim {
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
        }
        let config = try PipelineConfig.parse(text: text, path: "\(name).yml", environment: environment)
        let (single, db) = try runAlone(config, environment: environment)
        let (got, want) = (try PostgresTests.postgresDump(url, config.model), try PostgresTests.sqliteDump(db, config.model))
        let differing = want.keys.sorted().filter { got[$0] != want[$0] }.map {
            "\($0): \(got[$0]?.count ?? 0) rows, want \(want[$0]?.count ?? 0)"
        }
        #expect(differing.isEmpty, "\(differing)")
        let runs = try watcher.execute("SELECT status, pages, records, rejected_pages, rejected_records FROM _ingot_runs")
        let rejects = try watcher.execute("SELECT source, reason FROM _ingot_rejects")
        #expect(
            runs == [["finished", String(single.counters.pages), String(single.counters.records), "0", "0"]],
            "\(runs), single run \(single.counters.pages) pages, \(single.counters.records) records; rejects \(rejects)")
    }

    /// `config` run alone into a new SQLite database: its summary and the database.
    /// `text` (pipelines/swapi.yml or a variant) against `server`: run alone into SQLite, then by
    /// three jobs joined into `backend` (archiving into `archives`, one directory a job, when
    /// given); every job finishes, the tables are the single run's, and so are the run's pages,
    /// records and rejected pages.
    private func runSwapiJoinedAndAlone(
        _ text: String, _ server: FixtureServer, _ backend: JoinBackend, archives: [String] = []
    ) throws -> (config: PipelineConfig, single: RunSummary, database: JoinDatabase, db: String) {
        let environment = ["SWAPI_API": server.base]
        let config = try PipelineConfig.parse(text: text, path: "swapi.yml", environment: environment)
        let (single, db) = try runAlone(config, environment: environment)
        let database = try JoinDatabase(backend, model: config.model)
        let summaries = try JoinTests.runJoined(config, database, name: "swapi", jobs: 3, batchRecords: 7, archives: archives) {
            ResourcesPageSource(config: config, environment: environment, maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
        }
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { "\($0.status) \($0.error ?? "")" })")
        JoinTests.expectShared(summaries)
        try expectSameTables(database, db, config)
        let total = try #require(try database.runs().first?.counters)
        let want: [Int] = [single.counters.pages, single.counters.records, 0]
        #expect([total.pages, total.records, total.rejectedPages] == want)
        return (config, single, database, db)
    }

    private func runAlone(_ config: PipelineConfig, environment: [String: String], db: String? = nil) throws -> (RunSummary, String) {
        var options = RunOptions()
        options.databasePath = db ?? temporaryDirectory().appendingPathComponent("alone.db").path
        options.progressInterval = 0
        options.timers = ManualTimers()
        let source = ResourcesPageSource(
            config: config, environment: environment, maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "test"))
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        return (summary, options.databasePath)
    }

    private func expectSameTables(_ database: JoinDatabase, _ db: String, _ config: PipelineConfig) throws {
        let expected = try database.sqlite(db)
        let got = try database.dump()
        #expect(expected.keys.sorted() == got.keys.sorted())
        for table in expected.keys.sorted() { #expect(got[table] == expected[table], "table \(table)") }
    }

    /// A replay of `archive` by `config` into `db`.
    private func ingotReplay(_ config: PipelineConfig, archive: String, db: String) throws -> RunSummary {
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        options.timers = ManualTimers()
        let source = try ArchivePageSource(path: archive)
        return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
    }
}

/// The size of the file at `path`.
private func fileSize(_ path: String) throws -> Int {
    try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? -1
}
