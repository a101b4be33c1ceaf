import Foundation
import Testing

@testable import Ingot

/// docs/cookbook.md's recipes for pages that are not one array of objects — bare ids (Hacker
/// News), an array inside each record (SWAPI's characters), a dictionary's values (npm), columns
/// (Open-Meteo), elements picked by a key's value (Zendesk), a total in a header (WordPress, GitLab), a
/// tree of blocks each level paginated by cursor (Notion) —
/// each against its fixture API (Tests/Fixtures/cookbook_apis.py), taken as written with only the
/// host changed: the first run holds what the pages say, a rerun inserts nothing, the archive
/// replays to the same tables, PostgreSQL ends equal, `kill -9` and `--resume` end exact, and a
/// rerun after the API changed (records edited, added, removed) ends as a first run of the
/// changed API does.
@Suite(.tags(.postgres, .process), .beyondUnit, .waitsOffThePool)
struct CookbookTests {
    struct Recipe: CustomTestStringConvertible, Sendable {
        var name: String
        /// Each URL prefix of the recipe to the fixture server's path for it (or a text to another).
        var changes: [String: String]
        var environment: [String: String] = [:]
        /// Pages and pages rejected by a first run.
        var pages: Int
        var rejectedPages = 0
        /// The request the `kill -9` test holds (the pages before it are committed).
        var holdAt: Int
        /// The pages committed before the kill when a fan-out's requests may reach the server out
        /// of the run's order (``killAndResume(_:server:holdAt:pages:committed:environment:batchRecords:beforeResume:check:)``);
        /// `nil`: all before the held request.
        var committed: Int? = nil
        /// Whether the fixture's `/control/cookbook-edit` changes what the API answers.
        var edits = true
        /// What the first run's database holds, as the pages say it.
        var check: @Sendable (String) throws -> Void
        var testDescription: String { name }
    }

    static let recipes: [Recipe] = [
        Recipe(
            name: "hacker-news", changes: ["https://hacker-news.firebaseio.com/v0/": "/hn/v0/"], pages: 8, rejectedPages: 1, holdAt: 8
        ) { db throws in
            #expect(
                try rows(db, "SELECT id, type, by, title, score, parent_id FROM item WHERE type IS NOT NULL ORDER BY id") == [
                    ["8863", "story", "dhouston", "My YC app: Dropbox - Throw away your USB drive", "111", "NULL"],
                    ["8870", "story", "pg", "Ask HN: été", "12", "NULL"], ["8952", "comment", "nickb", "NULL", "NULL", "8863"],
                    ["9153", "comment", "dhouston", "NULL", "NULL", "8952"], ["9180", "comment", "pg", "NULL", "NULL", "9153"],
                    ["9224", "comment", "BrandonM", "NULL", "NULL", "8863"],
                ])
            #expect(try rows(db, "SELECT id FROM item WHERE type IS NULL") == [["9190"]], "replies below depth 3 are stubs")
            #expect(try rows(db, "SELECT count(*) FROM item_kids") == [["6"]])
            let rejected = try rows(db, "SELECT entity, coding_path, reason, source FROM _ingot_rejects")
            #expect(rejected.count == 1 && rejected.first?[2].contains("got null") == true, "\(rejected)")
            #expect(rejected.first?[3].hasSuffix("/hn/v0/item/8881.json") == true, "the page names its URL: \(rejected)")
        },
        Recipe(name: "swapi-characters", changes: ["https://swapi.dev/api/": "/api/"], pages: 0, holdAt: 4, edits: false) { db throws in
            #expect(try rows(db, "SELECT count(*) FROM film") == [["6"]])
            #expect(
                try rows(db, "SELECT count(*), count(name) FROM person")
                    == rows(db, "SELECT count(DISTINCT person_id), count(DISTINCT person_id) FROM film_characters"),
                "every character fetched")
            #expect(try rows(db, "SELECT name, height FROM person WHERE name = 'Luke Skywalker'") == [["Luke Skywalker", "172"]])
        },
        Recipe(name: "npm-left-pad", changes: ["https://registry.npmjs.org/": "/npm/"], pages: 2, holdAt: 2) { db throws in
            #expect(try rows(db, "SELECT name, latest, license FROM package") == [["left-pad", "1.3.0", "WTFPL"]])
            #expect(
                try rows(db, "SELECT id, version, license, deprecated, package_id FROM release ORDER BY version") == [
                    ["left-pad@0.0.3", "0.0.3", "WTFPL", "NULL", "left-pad"], ["left-pad@1.0.0", "1.0.0", "WTFPL", "NULL", "left-pad"],
                    ["left-pad@1.1.0", "1.1.0", "WTFPL", "NULL", "left-pad"],
                    ["left-pad@1.3.0", "1.3.0", "MIT", "use String.prototype.padStart()", "left-pad"],
                ])
        },
        Recipe(name: "open-meteo-berlin", changes: ["https://api.open-meteo.com/": "/meteo/"], pages: 1, holdAt: 1) { db throws in
            #expect(
                try rows(db, "SELECT time, temperature_2m, precipitation FROM hour ORDER BY time") == [
                    ["2026-12-06T00:00:00.000000Z", "1.5", "0.0"], ["2026-12-06T01:00:00.000000Z", "1.25", "0.0"],
                    ["2026-12-06T02:00:00.000000Z", "0.8", "0.3"], ["2026-12-06T03:00:00.000000Z", "-0.5", "NULL"],
                    ["2026-12-06T04:00:00.000000Z", "-1.0", "0.1"], ["2026-12-06T05:00:00.000000Z", "-1.25", "0.0"],
                ])
        },
        Recipe(
            name: "zendesk-tickets", changes: ["https://example.zendesk.com/": "/zendesk/", "per_page=100": "per_page=2"],
            environment: ["ZENDESK_TOKEN": "t0ken"], pages: 3, holdAt: 3
        ) { db throws in
            #expect(
                try rows(db, "SELECT id, status, plan, vip, requester_id FROM ticket ORDER BY id") == [
                    ["101", "open", "gold", "0", "901"], ["102", "solved", "basic", "0", "900"], ["103", "open", "gold", "1", "901"],
                    ["104", "solved", "basic", "0", "900"], ["105", "open", "gold", "0", "901"],
                ])
            #expect(try rows(db, "SELECT id FROM user ORDER BY id") == [["900"], ["901"]])
        },
        Recipe(name: "wordpress-posts", changes: ["https://example.com/": "/wp/", "per_page=100": "per_page=2"], pages: 3, holdAt: 3) {
            db throws in
            #expect(try rows(db, "SELECT id, slug, title, author_id FROM post ORDER BY id").map { $0[0] } == ["1", "2", "3", "5", "8"])
            #expect(try rows(db, "SELECT title, date_gmt FROM post WHERE id = 2") == [["Post 2", "2024-01-02T08:30:00.000000Z"]])
        },
        Recipe(
            name: "github-graphql-issues", changes: ["https://api.github.com/": "/github/"], environment: ["GITHUB_TOKEN": "t0ken"],
            pages: 3, holdAt: 2
        ) { db throws in
            #expect(
                try rows(db, "SELECT number, title, state, author_id FROM issue ORDER BY number") == [
                    ["1", "Report 1", "OPEN", "user1"], ["2", "Report 2", "OPEN", "user0"], ["3", "Report 3", "OPEN", "user1"],
                    ["4", "Report 4", "CLOSED", "user0"], ["5", "Report 5", "OPEN", "user1"],
                ])
        },
        Recipe(
            name: "elasticsearch-products", changes: ["http://localhost:9200/": "/es/", "size: 100": "size: 3"], pages: 4, holdAt: 3
        ) { db throws in
            #expect(
                try rows(db, "SELECT id, name, price FROM product ORDER BY id")
                    == (1...7).map {
                        ["p\($0)", "Product \($0)", "\(Double(10 * $0) + ($0 % 2 == 1 ? 0.5 : 0))"]
                    })
        },
        Recipe(
            name: "contentful-sync", changes: ["https://cdn.contentful.com/": "/contentful/"], environment: ["CONTENTFUL_TOKEN": "t0ken"],
            pages: 2, holdAt: 2
        ) { db throws in
            #expect(
                try rows(db, "SELECT id, content_type, revision, title FROM entry ORDER BY id") == [
                    ["e1", "product", "1", "Product 1"], ["e2", "product", "1", "Product 2"], ["e3", "product", "1", "Product 3"],
                    ["e4", "product", "1", "Product 4"],
                ])
            #expect(
                try rows(db, "SELECT value FROM _ingot_state WHERE key = 'sync:next_url'").first?.first?.hasSuffix("sync_token=t1") == true)
        },
        Recipe(
            name: "zendesk-sideloads", changes: ["https://example.zendesk.com/": "/zendesk/", "per_page=100": "per_page=2"],
            environment: ["ZENDESK_TOKEN": "t0ken"], pages: 3, holdAt: 3
        ) { db throws in
            #expect(
                try rows(db, "SELECT id, requester_id, group_id FROM ticket ORDER BY id") == [
                    ["101", "901", "71"], ["102", "900", "70"], ["103", "901", "71"], ["104", "900", "70"], ["105", "901", "71"],
                ])
            #expect(
                try rows(db, "SELECT id, name, role FROM user ORDER BY id") == [["900", "Ada", "end-user"], ["901", "Grace", "end-user"]])
            #expect(try rows(db, "SELECT id, name FROM \"group\" ORDER BY id") == [["70", "Tier 1"], ["71", "Tier 2"]])
        },
        Recipe(
            name: "notion-search", changes: ["https://api.notion.com/": "/notion/", "page_size: 100": "page_size: 2"],
            environment: ["NOTION_TOKEN": "t0ken"], pages: 3, holdAt: 2
        ) { db throws in
            #expect(try rows(db, "SELECT id, title, archived FROM page ORDER BY id") == (1...5).map { ["pg-\($0)", "Page \($0)", "0"] })
        },
        Recipe(
            name: "gitlab-issues", changes: ["https://gitlab.com/": "/gitlab/", "per_page=100": "per_page=3"],
            environment: ["GITLAB_TOKEN": "t0ken"], pages: 3, holdAt: 3
        ) { db throws in
            #expect(
                try rows(db, "SELECT id, iid, state, author_id, milestone_id, labels FROM issue ORDER BY id") == [
                    ["5001", "1", "opened", "2", "31", #"["bug"]"#], ["5002", "2", "opened", "1", "31", #"["feature","P2"]"#],
                    ["5003", "3", "opened", "2", "31", #"["bug"]"#], ["5004", "4", "opened", "1", "31", #"["feature","P2"]"#],
                    ["5005", "5", "opened", "2", "NULL", #"["bug"]"#], ["5006", "6", "opened", "1", "NULL", #"["feature","P2"]"#],
                    ["5007", "7", "opened", "2", "NULL", #"["bug"]"#],
                ])
            #expect(try rows(db, "SELECT issue_id, user_id FROM issue_assignees ORDER BY issue_id") == [["5003", "1"], ["5006", "1"]])
            #expect(try rows(db, "SELECT id, title, due_date FROM milestone") == [["31", "v1.0", "2024-03-01"]])
        },
        Recipe(
            name: "notion-blocks", changes: ["https://api.notion.com/": "/notion/", "page_size=100": "page_size=2"],
            // Four requests at once over a tree: the ninth to reach the server may be one whose
            // page the run hands out before others', which then wait behind it.
            environment: ["NOTION_TOKEN": "t0ken", "NOTION_PAGE_ID": "pg-root"], pages: 9, holdAt: 9, committed: 4
        ) { db throws in
            #expect(
                try rows(db, "SELECT id, type, has_children, page_id, parent_id FROM block ORDER BY id") == [
                    ["b1", "heading_1", "0", "pg-root", "NULL"], ["b2", "toggle", "1", "pg-root", "NULL"],
                    ["b21", "paragraph", "0", "NULL", "b2"], ["b22", "toggle", "1", "NULL", "b2"],
                    ["b221", "paragraph", "0", "NULL", "b22"],
                    ["b222", "to_do", "1", "NULL", "b22"], ["b2221", "paragraph", "0", "NULL", "b222"],
                    ["b23", "paragraph", "0", "NULL", "b2"],
                    ["b3", "paragraph", "0", "pg-root", "NULL"], ["b4", "bulleted_list_item", "1", "pg-root", "NULL"],
                    ["b41", "bulleted_list_item", "0", "NULL", "b4"], ["b42", "bulleted_list_item", "1", "NULL", "b4"],
                    ["b421", "paragraph", "0", "NULL", "b42"], ["b5", "paragraph", "0", "pg-root", "NULL"],
                ])
            #expect(
                try rows(
                    db,
                    "SELECT json_extract(to_do, '$.rich_text[0].plain_text'), json_extract(to_do, '$.checked') FROM block WHERE id = 'b222'"
                )
                    == [["Check it", "0"]])
        },
    ]

    private func run(_ yaml: String, db: String, environment: [String: String], archive: String? = nil) throws -> RunSummary {
        let config = try PipelineConfig.parse(text: yaml, path: "cookbook.yml", environment: environment)
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        options.archiveDirectory = archive
        // The recipe's credentials from `environment`, not the test process's.
        let source = try config.makeSource(
            database: try StoreLocation(db), maxPageBytes: Page.defaultMaxBytes, environment: environment, logger: LogCapture().logger)
        return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
    }

    @Test(arguments: recipes)
    func aRecipeLoadsItsAPIExactly(recipe: Recipe) throws {
        let server = try FixtureServer()
        let yaml = try ExportRoundTripTests.cookbook(recipe.name, server.base, recipe.changes)
        let model = try PipelineConfig.parse(text: yaml, path: "cookbook.yml", environment: recipe.environment).model
        let db = temporaryDirectory().appendingPathComponent("\(recipe.name).db").path
        let archive = temporaryDirectory().path
        let first = try run(yaml, db: db, environment: recipe.environment, archive: archive)
        #expect(first.status == .finished, "\(first.error ?? "")")
        #expect(first.counters.rejectedRecords == 0 && first.counters.rejectedPages == recipe.rejectedPages)
        if recipe.pages > 0 { #expect(first.counters.pages == recipe.pages) }
        try recipe.check(db)
        let reference = try PostgresTests.sqliteDump(db, model)

        let rerun = try run(yaml, db: db, environment: recipe.environment)
        #expect(rerun.status == .finished && rerun.counters.inserted == 0 && rerun.counters.updated == 0, "\(rerun.counters)")
        #expect(try PostgresTests.sqliteDump(db, model) == reference, "a rerun changes nothing")

        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: archive).first)
        let replayed = temporaryDirectory().appendingPathComponent("replay.db").path
        var replay = RunOptions()
        replay.databasePath = replayed
        replay.progressInterval = 0
        let config = try PipelineConfig.parse(text: yaml, path: "cookbook.yml", environment: recipe.environment)
        let replaySummary = PipelineRunner(config: config, options: replay, logger: LogCapture().logger)
            .run(source: try ArchivePageSource(path: archive + "/" + file))
        #expect(replaySummary.status == .finished)
        #expect(try PostgresTests.sqliteDump(replayed, model) == reference, "the archive replays to the same tables")

        let url = try PostgresServer.freshDatabase()
        #expect(try run(yaml, db: url, environment: recipe.environment).status == .finished)
        #expect(try PostgresTests.postgresDump(url, model) == reference, "PostgreSQL ends equal")

        // The API changes: a rerun into the first database ends as a first run of what it says now.
        _ = try HTTPClient().get(server.base + "/control/cookbook-edit", headers: [], timeout: 5)
        let refreshed = try run(yaml, db: db, environment: recipe.environment)
        #expect(refreshed.status == .finished, "\(refreshed.error ?? "")")
        let fresh = temporaryDirectory().appendingPathComponent("fresh.db").path
        #expect(try run(yaml, db: fresh, environment: recipe.environment).status == .finished)
        let now = try PostgresTests.sqliteDump(fresh, model)
        #expect((now != reference) == recipe.edits, "the edited API changes the tables")
        #expect(try PostgresTests.sqliteDump(db, model) == now, "a rerun after the API changed ends as a first run of it")
    }

    /// An `each:` fan-out requests every id once, however many records list it, and a record
    /// whose array is absent makes no request; `{.}` over a list of bare ids requests each id,
    /// and a for_each over those requests' records (the stories' `kids`) each of theirs.
    @Test func aFanOutRequestsEachIdOnce() throws {
        let server = try FixtureServer()
        let yaml = try ExportRoundTripTests.cookbook("swapi-characters", server.base, ["https://swapi.dev/api/": "/api/"])
        let db = temporaryDirectory().appendingPathComponent("characters.db").path
        #expect(try run(yaml, db: db, environment: [:]).status == .finished)
        let people = try server.seen().filter { $0.path.hasPrefix("/api/people/") }.map(\.path)
        #expect(!people.isEmpty && people.count == Set(people).count, "\(people.count) requests for \(Set(people).count) characters")
        #expect(try rows(db, "SELECT count(*) FROM person") == [["\(people.count)"]])
        #expect(try rows(db, "SELECT count(*) FROM film_characters") == [["162"]], "every film keeps all its characters")

        let hn = try FixtureServer()
        let stories = try ExportRoundTripTests.cookbook("hacker-news", hn.base, ["https://hacker-news.firebaseio.com/v0/": "/hn/v0/"])
        #expect(try run(stories, db: temporaryDirectory().appendingPathComponent("hn.db").path, environment: [:]).status == .finished)
        #expect(
            try hn.seen().map(\.path).sorted() == [
                "/hn/v0/item/8863.json", "/hn/v0/item/8870.json", "/hn/v0/item/8881.json", "/hn/v0/item/8952.json",
                "/hn/v0/item/9153.json", "/hn/v0/item/9180.json", "/hn/v0/item/9224.json", "/hn/v0/topstories.json",
            ], "each item once, 9224 though two items list it; 9190 below depth 3 not at all")
        // Joined, the fetcher reads the stories and the comments itself (their records make the
        // next requests); a chain whose last level makes none leaves that level to the jobs.
        var joined = RunOptions()
        joined.join = "hn"
        let config = try PipelineConfig.parse(text: stories, path: "hn.yml")
        #expect(PipelineRunner.joinRefusal(config, joined, sharesRuns: true) == nil)
        #expect(SharedRequests.madeByJobs(config).isEmpty)
        #expect(SharedRequests.madeByFetcher(config) == ["the requests of stories", "the requests of comments"])
        let flat = try PipelineConfig.parse(text: stories.replacingOccurrences(of: ", depth: 3}", with: "}"), path: "hn.yml")
        #expect(SharedRequests.madeByJobs(flat) == ["the requests of comments"])
        #expect(SharedRequests.madeByFetcher(flat) == ["the requests of stories"])
    }

    /// A fan-out that reads its own records goes as deep as its threads when `depth:` allows it,
    /// one request after another (`concurrency: 1`) as in flight together: every comment of the
    /// fixture's thread, four levels down, each requested once.
    @Test(arguments: [1, 4]) func aRecursiveFanOutFollowsEveryLevelItIsAllowed(concurrency: Int) throws {
        let server = try FixtureServer()
        let yaml = try ExportRoundTripTests.cookbook("hacker-news", server.base, ["https://hacker-news.firebaseio.com/v0/": "/hn/v0/"])
            .replacingOccurrences(of: "depth: 3}", with: "depth: 10}")
            .replacingOccurrences(of: "concurrency: 4", with: "concurrency: \(concurrency)")
        let db = temporaryDirectory().appendingPathComponent("hn.db").path
        let summary = try run(yaml, db: db, environment: [:])
        #expect(summary.status == .finished && summary.counters.pages == 9, "\(summary.counters)")
        let items = try server.seen().map(\.path).filter { $0.hasPrefix("/hn/v0/item/") }
        #expect(items.count == Set(items).count && items.contains("/hn/v0/item/9190.json"), "\(items)")
        #expect(try rows(db, "SELECT count(*) FROM item WHERE type IS NULL") == [["0"]], "no stub left: every level was read")
        #expect(try rows(db, "SELECT parent_id FROM item WHERE id = 9190") == [["9180"]])
    }

    /// A fan-out that reads its own records, each request paginated by what its answers say
    /// (Notion's block children: `start_cursor`), one request after another or four in flight:
    /// every block with children is asked for them once, each of its pages once, and a block
    /// without (`when: has_children`) never; `depth:` stops the levels below it.
    @Test(arguments: [1, 4]) func aRecursiveFanOutPagedByItsAnswersAsksOnlyForChildren(concurrency: Int) throws {
        for depth in [10, 2] {
            let server = try FixtureServer()
            let yaml = try ExportRoundTripTests.cookbook(
                "notion-blocks", server.base,
                [
                    "https://api.notion.com/": "/notion/", "page_size=100": "page_size=2", "concurrency: 4": "concurrency: \(concurrency)",
                    "depth: 10": "depth: \(depth)",
                ])
            let db = temporaryDirectory().appendingPathComponent("blocks.db").path
            let summary = try run(yaml, db: db, environment: ["NOTION_TOKEN": "t", "NOTION_PAGE_ID": "pg-root"])
            #expect(summary.status == .finished && summary.counters.rejectedRecords == 0, "\(summary.error ?? "")")
            let asked = try server.seen().map { "\($0.path.replacingOccurrences(of: "/notion/v1/blocks/", with: ""))?\($0.query)" }
            var expected = [
                "pg-root/children?page_size=2", "pg-root/children?page_size=2&start_cursor=2",
                "pg-root/children?page_size=2&start_cursor=4",
                "b2/children?page_size=2", "b2/children?page_size=2&start_cursor=2", "b4/children?page_size=2",
                "b22/children?page_size=2", "b42/children?page_size=2",
            ]
            if depth > 2 { expected.append("b222/children?page_size=2") }
            #expect(asked.sorted() == expected.sorted(), "depth \(depth)")
            #expect(try rows(db, "SELECT count(*) FROM block") == [[depth > 2 ? "14" : "13"]], "depth \(depth)")
        }
    }

    /// `depth:` bounds a fan-out that reads its own records: 1 to 1,000 levels, refused otherwise
    /// with its line; joined, its requests are the fetcher's (their pages make the next
    /// requests), where a fan-out of one level leaves them to the jobs.
    @Test func aRecursiveFanOutIsBoundedAndItsRequestsAreTheFetchers() throws {
        let yaml = try ExportRoundTripTests.cookbook("swapi-characters", "http://127.0.0.1:1", ["https://swapi.dev/api/": "/api/"])
        let lines = yaml.split(separator: "\n", omittingEmptySubsequences: false)
        let number = try #require(lines.firstIndex { $0.contains("each: characters") })
        let line = lines[number]
        for depth in ["0", "1001", "two"] {
            let bad = yaml.replacingOccurrences(of: line, with: line.dropLast() + ", depth: \(depth)}")
            let problem = configProblems(bad) ?? ""
            #expect(problem.contains("depth") && problem.contains("test.yml:\(number + 1):"), "\(problem)")
        }
        let recursive = yaml.replacingOccurrences(of: line, with: line.dropLast() + ", depth: 2}")
        let config = try PipelineConfig.parse(text: recursive, path: "characters.yml")
        #expect(config.resources.last?.forEach?.depth == 2)
        var joined = RunOptions()
        joined.join = "characters"
        #expect(PipelineRunner.joinRefusal(config, joined, sharesRuns: true) == nil)
        #expect(SharedRequests.madeByJobs(config).isEmpty)
        let flat = try PipelineConfig.parse(text: yaml, path: "characters.yml")
        #expect(SharedRequests.madeByJobs(flat) == ["the requests of \(try #require(flat.resources.last?.name))"])
    }

    /// A total read from a header (WordPress's `X-WP-TotalPages`) ends paging at it: no request
    /// goes past the last page, which WordPress answers 400. A header name that cannot be one is
    /// refused at validation.
    @Test func aHeaderTotalEndsPagingAtTheLastPage() throws {
        let server = try FixtureServer()
        let yaml = try ExportRoundTripTests.cookbook(
            "wordpress-posts", server.base, ["https://example.com/": "/wp/", "per_page=100": "per_page=2"])
        let summary = try run(yaml, db: temporaryDirectory().appendingPathComponent("wp.db").path, environment: [:])
        #expect(summary.status == .finished && summary.counters.pages == 3 && summary.counters.records == 5)
        let asked = try server.seen().map(\.query)
        #expect(asked == ["per_page=2&page=1", "per_page=2&page=2", "per_page=2&page=3"], "\(asked)")
        let bad = yaml.replacingOccurrences(of: "{header: X-WP-TotalPages}", with: "{header: \"X WP\"}")
        #expect(configProblems(bad)?.contains("is not a header name") == true, "\(configProblems(bad) ?? "")")
    }

    /// `kill -9` while the server holds one request, then `--resume`: exact.
    @Test(.hangGuard, arguments: recipes.filter { $0.pages > 1 })
    func aRecipeResumesExactlyAfterKill9(recipe: Recipe) throws {
        let reference: [String: [[String]]]
        let model: EntityModel
        do {
            let server = try FixtureServer()
            let yaml = try ExportRoundTripTests.cookbook(recipe.name, server.base, recipe.changes)
            model = try PipelineConfig.parse(text: yaml, path: "cookbook.yml", environment: recipe.environment).model
            let db = temporaryDirectory().appendingPathComponent("reference.db").path
            #expect(try run(yaml, db: db, environment: recipe.environment).status == .finished)
            reference = try PostgresTests.sqliteDump(db, model)
        }
        let server = try FixtureServer(faults: "slow:\(recipe.holdAt)", slow: 60)
        let yaml = try ExportRoundTripTests.cookbook(recipe.name, server.base, recipe.changes)
        try killAndResume(
            yaml, server: server, holdAt: recipe.holdAt, pages: recipe.pages, committed: recipe.committed, environment: recipe.environment
        ) { db throws in
            #expect(try PostgresTests.sqliteDump(db, model) == reference)
        }
    }

    /// Every `yaml` block of docs/cookbook.md that is a pipeline file validates (with the
    /// variables its source expands set, as a user's run has them).
    @Test func everyCookbookPipelineValidates() throws {
        let text = try String(contentsOf: packageRoot.appendingPathComponent("docs/cookbook.md"), encoding: .utf8)
        let blocks = text.components(separatedBy: "```yaml\n").dropFirst().compactMap { $0.components(separatedBy: "```").first }
        let pipelines = blocks.filter { $0.hasPrefix("version: 1") }
        var names: [String] = []
        for (k, pipeline) in pipelines.enumerated() {
            #expect(throws: Never.self, "cookbook pipeline \(k + 1)") {
                names.append(
                    try PipelineConfig.parse(text: pipeline, path: "cookbook-\(k + 1).yml", environment: ["NOTION_PAGE_ID": "pg-root"]).name
                )
            }
        }
        let recipes = [
            "github", "stripe-customers", "twitter-followers", "reddit-overview", "slack-history", "jira-issues", "shopify-products",
            "notion-users", "hacker-news", "swapi-characters", "npm-left-pad", "open-meteo-berlin", "zendesk-tickets", "wordpress-posts",
            "github-graphql-issues", "elasticsearch-products", "contentful-sync", "zendesk-sideloads",
            "notion-search", "notion-blocks", "gitlab-issues",
        ]
        #expect(Set(recipes).isSubset(of: Set(names)), "\(names)")
    }
}
