import Foundation
import Testing

@testable import Ingot

/// `ingot init` (docs/pipelines.md, "A first draft"): a pipeline drafted from an API's first
/// pages, for the cookbook's APIs served by the fixture server, validates, loads the API with
/// nothing rejected, reruns inserting nothing, replays to the same tables, and chooses the
/// identity and paginator the hand-written recipe chose.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct InitTests {
    struct API: CustomTestStringConvertible, Sendable {
        var path: String
        /// The root entity's identity attribute and the paginator's kind, as the recipe has them.
        var identity: String
        var paginator: String?
        /// The hand-written pipeline of the same API: a docs/cookbook.md recipe's name, or a file
        /// of pipelines/, and its resource of the drafted URL (`nil`: its first with a root); where
        /// the draft chooses otherwise than it, why (else `nil`).
        var recipe = ""
        var resource: String? = nil
        var differs: String? = nil
        var testDescription: String { path }
        /// The enum its Swift draft is compiled in, named for its recipe (`zendesk-sideloads`:
        /// `ZendeskSideloadsDraft`).
        var namespace: String {
            let name = recipe.replacingOccurrences(of: "pipelines/", with: "").replacingOccurrences(of: ".yml", with: "")
            return name.split(separator: "-").map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined() + "Draft"
        }
    }

    static let apis: [API] = [
        API(path: "/api/people/", identity: "url", paginator: "next_url", recipe: "pipelines/swapi-people.yml"),
        API(path: "/stripe/v1/customers?limit=10", identity: "id", paginator: "cursor", recipe: "stripe-customers"),
        API(path: "/jira/rest/api/3/search?startAt=0&maxResults=3", identity: "id", paginator: "offset", recipe: "jira-issues"),
        API(
            path: "/github/repos/octocat/hello-world/issues?per_page=3", identity: "id", paginator: "link_header", recipe: "github",
            resource: "issues"),
        API(path: "/shopify/admin/api/2024-01/products.json?limit=2", identity: "id", paginator: "link_header", recipe: "shopify-products"),
        API(path: "/notion/v1/users?page_size=3", identity: "id", paginator: "cursor", recipe: "notion-users"),
        // Errors answered HTTP 200 as {"ok": false}: the draft says so in error_when.
        API(path: "/slack/api/conversations.history?channel=C1&limit=2", identity: "ts", paginator: "cursor", recipe: "slack-history"),
        // The recipe reads each kind as an entity of its own (root: {by: kind}); the draft, one
        // entity of every kind's keys, by the same identity (Reddit's fullname, data.name).
        API(path: "/reddit/r/swift/overview.json", identity: "data_name", paginator: "cursor", recipe: "reddit-overview"),
        // The list's entries are links: the draft reads a few detail pages and drafts a for_each.
        API(path: "/pokeapi/api/v2/pokemon?offset=0&limit=10", identity: "id", paginator: "next_url", recipe: "pokeapi"),
        API(path: "/zendesk/api/v2/tickets.json?per_page=2", identity: "id", paginator: "next_url", recipe: "zendesk-tickets"),
        // Users and groups sideloaded beside the tickets: records: {paths: …}, the tickets' ids of them linked.
        API(
            path: "/zendesk/api/v2/tickets.json?include=users,groups&per_page=2", identity: "id", paginator: "next_url",
            recipe: "zendesk-sideloads"),
        API(path: "/wp/wp-json/wp/v2/posts?per_page=2", identity: "id", paginator: "page", recipe: "wordpress-posts"),
        API(
            path: "/npm/left-pad", identity: "id", paginator: nil, recipe: "npm-left-pad",
            differs:
                "the draft's records are the package document itself (identity its `_id`); the recipe reads its `versions` dictionary as releases"
        ),
        API(path: "/meteo/v1/forecast?latitude=52.52", identity: "time", paginator: nil, recipe: "open-meteo-berlin"),
        API(path: "/twitter/1.1/followers/list.json", identity: "id", paginator: "cursor", recipe: "twitter-followers"),
        API(
            path: "/contentful/spaces/cfexample/environments/master/sync?initial=true", identity: "sys_id", paginator: "next_url",
            recipe: "contentful-sync"),
        API(
            path: "/gitlab/api/v4/projects/278964/issues?per_page=3", identity: "id", paginator: "link_header", recipe: "gitlab-issues"),
        // One Hacker News item: its `parent` and `kids` name items by bare id (stubs until loaded).
        API(path: "/hn/v0/item/8952.json", identity: "id", paginator: nil, recipe: "hacker-news"),
    ]

    /// The docs/cookbook.md recipes no API above drafts, and why.
    static let undrafted = [
        "swapi-characters":
            "each film's characters fetched by URL: a for_each the draft does not make (its people are drafted from /api/people/)",
        "github-graphql-issues": "a POST with a GraphQL body: `init` drafts what a GET answers",
        "elasticsearch-products": "a POST search: `init` drafts what a GET answers",
        "notion-search": "a POST search: `init` drafts what a GET answers",
        "notion-blocks": "a tree of requests, each block's children: a for_each the draft does not make",
    ]

    @Test(arguments: apis)
    func aDraftLoadsItsAPIExactly(api: API) throws {
        let server = try FixtureServer()
        let url = server.base + api.path
        let draft = try Self.draft(url)
        let config = try PipelineConfig.parse(text: draft.yaml, path: "draft.yml", environment: [:])
        let root = try #require(draft.entities.first { $0.name == draft.root })
        #expect(root.identity == [api.identity], "\(draft.yaml)")
        #expect(draft.paginate.map { String($0.yaml.dropFirst().prefix { $0 != ":" }) } == api.paginator, "\(draft.yaml)")
        #expect(draft.yaml.contains("# "), "every guess says why")
        #expect(draft.yaml.contains("sync_url: nextSyncUrl") == api.path.contains("/sync"), "\(draft.yaml)")
        #expect(draft.yaml.contains("error_when: {path: ok, equals: false") == api.path.hasPrefix("/slack/"), "\(draft.yaml)")
        #expect(
            draft.yaml.contains(#"records: {paths: {"users": user, "groups": group, "tickets": ticket}}"#) == api.path.contains("include="),
            "\(draft.yaml)")

        let db = temporaryDirectory().appendingPathComponent("draft.db").path
        let archive = temporaryDirectory().path
        func run(_ archiveDirectory: String?) throws -> RunSummary {
            var options = RunOptions()
            options.databasePath = db
            options.progressInterval = 0
            options.archiveDirectory = archiveDirectory
            return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        }
        let first = try run(archive)
        #expect(first.status == .finished && first.counters.records > 0, "\(first.error ?? "")\n\(draft.yaml)")
        let rejected = try rows(db, "SELECT coding_path, reason FROM _ingot_rejects")
        #expect(first.counters.rejectedRecords == 0 && first.counters.rejectedPages == 0, "\(rejected)\n\(draft.yaml)")
        let rerun = try run(nil)
        #expect(rerun.counters.inserted == 0 && rerun.counters.updated == 0 || root.identity.isEmpty, "\(rerun.counters)")
        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: archive).first)
        var replay = RunOptions()
        replay.databasePath = temporaryDirectory().appendingPathComponent("replay.db").path
        replay.progressInterval = 0
        #expect(
            PipelineRunner(config: config, options: replay, logger: LogCapture().logger).run(
                source: try ArchivePageSource(path: archive + "/" + file)
            )
            .status == .finished)
        #expect(try PostgresTests.sqliteDump(replay.databasePath, config.model) == PostgresTests.sqliteDump(db, config.model))
    }

    /// A first page with nothing to draft from says what it found, naming the URL; so does a
    /// page that is not JSON, and an answer that is not a success.
    @Test func aPageWithoutRecordsIsRefusedNamingIt() throws {
        let server = try FixtureServer()
        func failure(_ path: String) -> String {
            do {
                let samples = try PipelineDraft.samples(url: server.base + path, headers: [], pages: 3)
                _ = try PipelineDraft.infer(name: "x", origin: .url(server.base + path, bearerEnv: nil), samples: samples)
                return "drafted"
            } catch {
                return error.description
            }
        }
        #expect(failure("/hn/v0/topstories.json").contains("bare values (ids?)"))
        #expect(failure("/hostile/items?page=2").contains("not JSON"))
        #expect(failure("/stripe/nothing").contains("HTTP 404") && failure("/stripe/nothing").contains(server.base + "/stripe/nothing"))
    }

    /// A directory of sample pages drafts a files source; the command never overwrites a file
    /// and prints the draft with --dry-run.
    @Test func aDirectoryDraftsAFilesPipelineAndNothingIsOverwritten() throws {
        let dir = temporaryDirectory().appendingPathComponent("pages").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for k in 1...2 {
            let page = #"{"results": [{"id": \#(k), "name": "n\#(k)", "born": "2020-01-0\#(k)"}]}"#
            try Data(page.utf8).write(to: URL(fileURLWithPath: dir + "/page-\(k).json"))
        }
        let out = temporaryDirectory().appendingPathComponent("drafted.yml").path
        let made = try runIngot(["init", "--pages", dir, "--output", out])
        #expect(made.status == 0, "\(made.stderr)")
        let text = try String(contentsOfFile: out, encoding: .utf8)
        #expect(text.contains("files: {dir:") && text.contains("format: \"yyyy-MM-dd\""), "\(text)")
        #expect(try runIngot(["validate", out]).status == 0)
        let again = try runIngot(["init", "--pages", dir, "--output", out])
        #expect(again.status == 2 && again.stderr.contains("never overwritten"))
        let printed = try runIngot(["init", "--pages", dir, "--dry-run"])
        #expect(printed.status == 0 && printed.stdout == text)
    }

    /// Bare ids that name records become relationships when the key says which entity: the
    /// record's own for `parent` and `kids`, another drafted entity for `owner_id`, `label_ids`
    /// (integers for an integer identity, strings for a text one); a plain `owner` with one value,
    /// or ids of another kind than the target's identity, stay attributes.
    @Test func bareIdsNamedForAnEntityAreRelationships() throws {
        let page = #"""
            [{"id": 1, "parent": null, "kids": [2, 3], "owner_id": 7, "label_ids": [10], "tag_ids": ["a"], "owner": 7, "owners": [{"id": 7}]},
             {"id": 2, "parent": 1, "kids": [], "owner_id": 8, "label_ids": [], "tag_ids": [], "owner": 8, "owners": [{"id": 8}],
              "labels": [{"id": 10, "name": "bug"}]}]
            """#
        let draft = try PipelineDraft.infer(
            name: "things", origin: .directory("."), samples: [PipelineDraft.Sample(document: try JSONDocument(bytes: Array(page.utf8)))])
        let thing = try #require(draft.entities.first { $0.name == draft.root })
        let relationships = Dictionary(uniqueKeysWithValues: thing.relationships.map { ($0.name, $0.yaml) })
        #expect(relationships["parent"] == #"{to: thing, key: "parent"}"#, "\(draft.yaml)")
        #expect(relationships["kids"] == #"{to: thing, many: true, key: "kids", ordered: true}"#)
        #expect(relationships["owner_id"] == #"{to: owner, key: "owner_id"}"#)
        #expect(relationships["label_ids"] == #"{to: label, many: true, key: "label_ids", ordered: true}"#)
        #expect(relationships["tag_ids"] == nil && relationships["owner"] == nil, "no tag entity; a plain name is no reference")
        #expect(thing.attributes.contains { $0.name == "owner" }, "\(draft.yaml)")
        #expect(draft.swift.contains("var kids: [Ref<Thing>]?") && draft.swift.contains("var ownerId: Ref<Owner>?"), "\(draft.swift)")
        let config = try PipelineConfig.parse(text: draft.yaml, path: "draft.yml")
        #expect(config.model.entities.count == 3)
    }

    /// URLs that name records of another collection become relationships to an entity of it,
    /// its identity the URL, stubs until its records load: the Star Wars API's people drafted
    /// alone link `homeworld` to a `planet` and `films` to `film`s, as pipelines/swapi-people.yml
    /// does by hand; a record's own `url` stays its identity, and an id-less URL an attribute.
    @Test func urlsOfAnotherCollectionAreRelationships() throws {
        let server = try FixtureServer()
        let url = server.base + "/api/people/"
        let draft = try PipelineDraft.infer(
            name: "people", origin: .url(url, bearerEnv: nil), samples: try PipelineDraft.samples(url: url, headers: [], pages: 1))
        let person = try #require(draft.entities.first { $0.name == draft.root })
        let relationships = Dictionary(uniqueKeysWithValues: person.relationships.map { ($0.name, $0.yaml) })
        #expect(relationships["homeworld"] == #"{to: planet, key: "homeworld"}"#, "\(draft.yaml)")
        #expect(relationships["films"] == #"{to: film, many: true, key: "films", ordered: true}"#)
        #expect(relationships["species"] == #"{to: species, many: true, key: "species", ordered: true}"#)
        #expect(person.identity == ["url"])
        let planet = try #require(draft.entities.first { $0.name == "planet" })
        #expect(planet.identity == ["url"] && planet.attributes.map(\.name) == ["url"])
        #expect(
            draft.yaml.contains("/api/planets/ID) of one planet, by the collection it names: a to-one, a stub until it loads"),
            "\(draft.yaml)")

        let page = #"[{"id": 1, "html_url": "https://example.com/things/1", "next": "https://example.com/about"}]"#
        let plain = try PipelineDraft.infer(
            name: "things", origin: .directory("."), samples: [PipelineDraft.Sample(document: try JSONDocument(bytes: Array(page.utf8)))])
        #expect(plain.entities.count == 1 && plain.entities[0].relationships.isEmpty, "\(plain.yaml)")

        let config = try PipelineConfig.parse(text: draft.yaml, path: "draft.yml", environment: [:])
        let db = temporaryDirectory().appendingPathComponent("draft.db").path
        let run = load(config, into: db)
        #expect(run.status == .finished && run.counters.rejectedRecords == 0, "\(run.error ?? "")")
        #expect(
            try rows(db, "SELECT p.name FROM person p JOIN planet w ON w.url = p.homeworld_id WHERE w.url LIKE '%/planets/1/'").contains([
                "Luke Skywalker"
            ]))
        #expect(try rows(db, "SELECT count(*) > 0, count(*) = count(url) FROM film") == [["1", "1"]])
    }

    /// Records no one key names alone get a composite identity when two keys that look like
    /// identifying ones are unique together (GitHub's stargazers of several repositories as a
    /// list of stars: `repo_id` and `user_id`): the draft says to check it, finds or creates by
    /// both (a rerun inserts nothing), and declares both in Swift; a nested object gets none.
    @Test func twoKeysUniqueTogetherAreACompositeIdentity() throws {
        let page = #"""
            [{"repo_id": 1, "user_id": 7, "starred_at": "2024-01-02T10:00:00Z", "user": {"login": "a", "site": "x"}},
             {"repo_id": 1, "user_id": 8, "starred_at": "2024-01-03T10:00:00Z", "user": {"login": "b", "site": "x"}},
             {"repo_id": 2, "user_id": 7, "starred_at": "2024-01-04T10:00:00Z", "user": {"login": "a", "site": "y"}}]
            """#
        let dir = temporaryDirectory()
        try Data(page.utf8).write(to: dir.appendingPathComponent("stars.json"))
        let draft = try PipelineDraft.infer(
            name: "stars", origin: .directory(dir.path),
            samples: [PipelineDraft.Sample(document: try JSONDocument(bytes: Array(page.utf8)))])
        let star = try #require(draft.entities.first { $0.name == draft.root })
        #expect(star.identity == ["repo_id", "user_id"], "\(draft.yaml)")
        #expect(draft.yaml.contains("identity: [repo_id, user_id]   # no one key is unique in the 3 records"), "\(draft.yaml)")
        #expect(draft.swift.contains("static let identity: [CodingKeys] = [.repoId, .userId]"), "\(draft.swift)")
        #expect(draft.entities.count == 1, "the user objects have no identity of one key: \(draft.yaml)")
        let config = try PipelineConfig.parse(text: draft.yaml, path: dir.appendingPathComponent("stars.yml").path)
        let db = temporaryDirectory().appendingPathComponent("stars.db").path
        for pass in 0..<2 {
            let run = load(config, into: db)
            #expect(run.status == .finished && run.counters.rejectedRecords == 0, "\(run.error ?? "")")
            #expect(run.counters.inserted == (pass == 0 ? 3 : 0), "\(run.counters)")
        }
    }

    /// Entries are a list of links only when they hold nothing a record would: three keys at
    /// most, one a URL of one collection, different in each, the others short values.
    @Test func aListIsOfLinksOnlyWhenItsEntriesAreJustLinks() throws {
        func entries(_ json: String) throws -> [JSONValue] {
            let document = try JSONDocument(bytes: Array(json.utf8))
            return Array(document.root.elements)
        }
        let links = try entries(
            #"[{"name": "a", "url": "https://x.org/api/items/1/"}, {"name": "b", "url": "https://x.org/api/items/2/"}]"#)
        #expect(DraftDetails.linkKey(of: links)?.key == "url")
        #expect(DraftDetails.linkKey(of: links)?.collection.collection == "items")
        // A record of its own: more keys, or an object among them.
        let records = try entries(
            #"[{"name": "a", "height": "1", "mass": "2", "url": "https://x.org/api/items/1/"}, {"name": "b", "height": "1", "mass": "2", "url": "https://x.org/api/items/2/"}]"#
        )
        #expect(DraftDetails.linkKey(of: records) == nil)
        let nested = try entries(
            #"[{"owner": {"id": 1}, "url": "https://x.org/api/items/1/"}, {"owner": {"id": 2}, "url": "https://x.org/api/items/2/"}]"#)
        #expect(DraftDetails.linkKey(of: nested) == nil)
        // The same link twice, or links of two collections.
        #expect(
            try DraftDetails.linkKey(of: entries(#"[{"url": "https://x.org/api/items/1/"}, {"url": "https://x.org/api/items/1/"}]"#)) == nil
        )
        #expect(
            try DraftDetails.linkKey(of: entries(#"[{"url": "https://x.org/api/items/1/"}, {"url": "https://x.org/api/users/2/"}]"#)) == nil
        )
    }

    /// A list of bare ids (Hacker News's `topstories.json`) is refused saying to give the path of
    /// each id's page; given it (`--for-each "item/{.}.json"`), the draft reads three of those
    /// pages and drafts the list and a `for_each` over it, as docs/cookbook.md's recipe has them:
    /// the run loads the stories, rejects the one page the API answers `null`, and a rerun
    /// inserts nothing.
    @Test func aListOfBareIdsIsDraftedThroughThePathGiven() throws {
        let server = try FixtureServer()
        let url = server.base + "/hn/v0/topstories.json"
        let samples = try PipelineDraft.samples(url: url, headers: [], pages: 3)
        let refused = #expect(throws: PipelineDraft.Failure.self) {
            try PipelineDraft.infer(name: "hn", origin: .url(url, bearerEnv: nil), samples: samples)
        }
        #expect(refused?.description.contains(#"--for-each "item/{.}.json""#) == true, "\(refused?.description ?? "")")
        let details = try PipelineDraft.details(of: samples, headers: [], forEach: "item/{.}.json")
        let draft = try PipelineDraft.infer(name: "hn", origin: .url(url, bearerEnv: nil), samples: samples, details: details)
        #expect(draft.yaml.contains(#"for_each: {resource: item_list, path: "item/{.}.json"}"#), "\(draft.yaml)")
        #expect(draft.yaml.contains("url: \"\(server.base)/hn/v0/\""), "the list's folder: \(draft.yaml)")
        let config = try PipelineConfig.parse(text: draft.yaml, path: "hn.yml")
        let db = temporaryDirectory().appendingPathComponent("hn.db").path
        let first = load(config, into: db)
        #expect(first.status == .finished && first.counters.rejectedPages == 1 && first.counters.rejectedRecords == 0, "\(first.counters)")
        #expect(try rows(db, "SELECT id, type FROM item WHERE type IS NOT NULL ORDER BY id") == [["8863", "story"], ["8870", "story"]])
        #expect(load(config, into: db).counters.inserted == 0)
        #expect(throws: PipelineDraft.Failure.self) { try PipelineDraft.details(of: samples, headers: [], forEach: "item/8863.json") }
    }

    /// A directory of gzipped JSON Lines files in dated folders (docs/cookbook.md's export):
    /// `init --pages DIR` drafts a `files:` source of the kind it holds most of, in its folders
    /// too (`**/*.jsonl.gz`, `format: jsonl`), each line a record, a line that is not JSON left
    /// to the run to reject; the draft loads the files, a rerun inserts nothing, and it chooses
    /// the recipe's identity.
    @Test func aDirectoryOfCompressedJSONLinesIsDraftedAsItsFiles() throws {
        let dir = temporaryDirectory().appendingPathComponent("exports").path
        for (month, first) in [("01", 1), ("02", 4)] {
            let folder = dir + "/2024/" + month
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let lines = (first..<first + 3).map {
                #"{"id": "ev_\#($0)", "type": "order.paid", "at": "2024-\#(month)-0\#($0 % 9 + 1)T10:00:00Z", "payload": {"amount": \#($0 * 100)}}"#
            }
            let plain = folder + "/part-000\(first).jsonl"
            try Data((lines + (month == "02" ? ["not json", ""] : [])).joined(separator: "\n").utf8).write(to: URL(fileURLWithPath: plain))
            let gzip = Process()
            gzip.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            gzip.arguments = ["gzip", "-n", plain]
            try gzip.run()
            gzip.waitUntilExit()
        }
        try Data("notes".utf8).write(to: URL(fileURLWithPath: dir + "/README.txt"))
        let draft = try PipelineDraft.infer(
            name: "export", origin: .directory(dir), samples: try PipelineDraft.samples(directory: dir, pages: 3))
        #expect(draft.yaml.contains(#"glob: "**/*.jsonl.gz", format: jsonl}"#), "\(draft.yaml)")
        #expect(draft.yaml.contains("JSON Lines: each line is a record"), "\(draft.yaml)")
        let config = try PipelineConfig.parse(text: draft.yaml, path: temporaryDirectory().appendingPathComponent("export.yml").path)
        let recipe = try PipelineConfig.parse(text: ExportRoundTripTests.cookbook("export", "", [:]), path: "recipe.yml")
        #expect(Self.choices(config) == Self.choices(recipe), "the recipe's identity, and no paginator")
        let db = temporaryDirectory().appendingPathComponent("export.db").path
        let first = load(config, into: db)
        // Seven lines, one of them not JSON: rejected by the run. The entity is named for the
        // pipeline (nothing in a line names its kind; the recipe calls it event).
        #expect(first.status == .finished && first.counters.records == 7 && first.counters.rejectedRecords == 1, "\(first.counters)")
        #expect(try rows(db, "SELECT id, type FROM export ORDER BY id").map(\.[0]) == (1...6).map { "ev_\($0)" })
        #expect(load(config, into: db).counters.inserted == 0)
        #expect(throws: PipelineDraft.Failure.self) { try PipelineDraft.samples(directory: dir + "/2024/01/none", pages: 3) }
    }

    /// Nested objects of one shape — the same keys, the same identity — under several keys (an
    /// issue's `author`, `assignees`, `closed_by`: users) are records of one entity, drafted once
    /// and linked from each key, saying so; an object of another shape is an entity of its own.
    @Test func objectsOfOneShapeUnderSeveralKeysAreOneEntity() throws {
        let page = #"""
            [{"id": 1, "author": {"id": 7, "username": "ada"}, "assignees": [{"id": 8, "username": "bob"}],
              "closed_by": {"id": 8, "username": "bob"}, "milestone": {"id": 31, "title": "v1"}},
             {"id": 2, "author": {"id": 8, "username": "bob"}, "assignees": [], "closed_by": null, "milestone": {"id": 32, "title": "v2"}}]
            """#
        let dir = temporaryDirectory()
        try Data(page.utf8).write(to: dir.appendingPathComponent("issues.json"))
        let draft = try PipelineDraft.infer(
            name: "issues", origin: .directory(dir.path),
            samples: [PipelineDraft.Sample(document: try JSONDocument(bytes: Array(page.utf8)))])
        #expect(draft.entities.map(\.name) == ["issue", "author", "milestone"], "\(draft.yaml)")
        #expect(draft.yaml.contains(#"assignees: {to: author, many: true, key: "assignees"}"#), "\(draft.yaml)")
        #expect(draft.yaml.contains(#"closed_by: {to: author, key: "closed_by"}"#), "\(draft.yaml)")
        #expect(draft.yaml.contains("(the keys and identity of author's: records of the one entity)"), "\(draft.yaml)")
        let config = try PipelineConfig.parse(text: draft.yaml, path: dir.appendingPathComponent("issues.yml").path)
        let db = temporaryDirectory().appendingPathComponent("issues.db").path
        let run = load(config, into: db)
        #expect(run.status == .finished && run.counters.rejectedRecords == 0, "\(run.error ?? "")")
        #expect(try rows(db, "SELECT id, username FROM author ORDER BY id") == [["7", "ada"], ["8", "bob"]])
        #expect(try rows(db, "SELECT id, author_id, closed_by_id FROM issue ORDER BY id") == [["1", "7", "8"], ["2", "8", "NULL"]])
    }

    /// Ids under a key that does not name what they refer to (Zendesk's `assignee_id`: a user)
    /// are a relationship when every one of them is the identity of a drafted entity's record in
    /// the sample — at least two of them, of one entity alone — and the draft says to check it;
    /// ids some of which match no record, or a lone id, stay integers.
    @Test func idsTheKeyDoesNotNameAreFoundByTheirValues() throws {
        let page = #"""
            [{"id": 1, "requester": {"id": 7, "name": "Ada"}, "assignee_id": 7, "group_id": 70, "watcher_ids": [7, 8]},
             {"id": 2, "requester": {"id": 8, "name": "Bob"}, "assignee_id": 8, "group_id": 71, "watcher_ids": [8]},
             {"id": 3, "requester": {"id": 7, "name": "Ada"}, "assignee_id": null, "group_id": 70, "brand_id": 7}]
            """#
        let dir = temporaryDirectory()
        try Data(page.utf8).write(to: dir.appendingPathComponent("tickets.json"))
        let draft = try PipelineDraft.infer(
            name: "tickets", origin: .directory(dir.path),
            samples: [PipelineDraft.Sample(document: try JSONDocument(bytes: Array(page.utf8)))])
        #expect(draft.yaml.contains(#"assignee_id: {to: requester, key: "assignee_id"}"#), "\(draft.yaml)")
        #expect(draft.yaml.contains(#"watcher_ids: {to: requester, many: true, key: "watcher_ids", ordered: true}"#), "\(draft.yaml)")
        #expect(draft.yaml.contains("are all ids of requester records, though the key's name does not say so: check it"), "\(draft.yaml)")
        #expect(
            draft.yaml.contains("group_id: integer") && draft.yaml.contains("brand_id: integer"),
            "no user is 70 or 71; one 7 alone: \(draft.yaml)")
        #expect(draft.swift.contains("var assigneeId: Ref<Requester>?"), "\(draft.swift)")
        let config = try PipelineConfig.parse(text: draft.yaml, path: dir.appendingPathComponent("tickets.yml").path)
        let db = temporaryDirectory().appendingPathComponent("tickets.db").path
        let run = load(config, into: db)
        #expect(run.status == .finished && run.counters.rejectedRecords == 0, "\(run.error ?? "")")
        #expect(try rows(db, "SELECT id, assignee_id_id FROM ticket ORDER BY id") == [["1", "7"], ["2", "8"], ["3", "NULL"]])
    }

    /// A nested object with the records' own identity and only keys the records have is a
    /// partial copy of one of them (Jira's sub-task names its parent issue with its key, summary
    /// and status): a relationship to the records' own entity, not an entity of its own, and
    /// `partial:` so that the copy erases nothing it lacks, as docs/cookbook.md's Jira recipe has
    /// it: the parent's row keeps its own record's values.
    @Test func aPartialCopyOfARecordIsTheSameEntity() throws {
        let server = try FixtureServer()
        let url = server.base + "/jira/rest/api/3/search?startAt=0&maxResults=3"
        let draft = try PipelineDraft.infer(
            name: "jira", origin: .url(url, bearerEnv: nil), samples: try PipelineDraft.samples(url: url, headers: [], pages: 3))
        let issue = try #require(draft.entities.first { $0.name == draft.root })
        let relationships = Dictionary(uniqueKeysWithValues: issue.relationships.map { ($0.name, $0.yaml) })
        #expect(relationships["fields_parent"] == #"{to: issue, key: "fields.parent", partial: true}"#, "\(draft.yaml)")
        #expect(draft.entities.map(\.name).sorted() == ["assignee", "issue", "status"], "\(draft.yaml)")
        #expect(draft.swift.contains("var fieldsParent: Ref<Issue>?"), "a struct cannot hold itself: \(draft.swift)")
        let config = try PipelineConfig.parse(text: draft.yaml, path: "draft.yml", environment: [:])
        let db = temporaryDirectory().appendingPathComponent("jira.db").path
        let run = load(config, into: db)
        #expect(run.status == .finished && run.counters.rejectedRecords == 0, "\(run.error ?? "")")
        let got = try rows(
            db, "SELECT id, fields_parent_id, fields_created FROM issue WHERE id IN ('1001', '1005') ORDER BY id")
        #expect(got == [["1001", "NULL", "2024-01-01T09:00:00.000000Z"], ["1005", "1001", "2024-01-05T09:00:00.000000Z"]], "\(got)")
    }

    /// `ingot init --swift` compiles as is: Tests/ReadmeExamples/DraftedOrders.swift is what it
    /// prints for Tests/Fixtures/draft/shopify-orders, byte for byte — the build compiles it, it
    /// passes the strict lint, and `ReadmeExamplesTests.theDraftedTypesIngestThePagesTheyWereDraftedFrom`
    /// loads those pages with it. After a change to the drafter, make the file again with the
    /// command below.
    @Test func theSwiftDraftCompilesAndIsTheFileTheExamplesBuild() throws {
        let command = [
            "init", "--pages", "Tests/Fixtures/draft/shopify-orders", "--swift", "--dry-run", "--name", "shopify-orders",
        ]
        let drafted = try runIngot(command)
        #expect(drafted.status == 0, "\(drafted.stderr)")
        let file = try String(contentsOf: packageRoot.appendingPathComponent("Tests/ReadmeExamples/DraftedOrders.swift"), encoding: .utf8)
        #expect(
            drafted.stdout == file,
            "Tests/ReadmeExamples/DraftedOrders.swift is not what the drafter prints: ingot \(command.joined(separator: " ")) > Tests/ReadmeExamples/DraftedOrders.swift"
        )
    }

    /// Every recipe of docs/cookbook.md is drafted from its fixture API above, or listed in
    /// ``undrafted`` saying why not.
    @Test func everyCookbookRecipeIsDraftedOrSaysWhyNot() throws {
        let text = try String(contentsOf: packageRoot.appendingPathComponent("docs/cookbook.md"), encoding: .utf8)
        let names = Set(text.split(separator: "\n").filter { $0.hasPrefix("name: ") }.map { String($0.dropFirst(6)) })
        // The export's files are drafted by `aDirectoryOfCompressedJSONLinesIsDraftedAsItsFiles`.
        let drafted = Set(Self.apis.map(\.recipe) + ["export"])
        #expect(names.subtracting(drafted).subtracting(Self.undrafted.keys).isEmpty, "neither drafted nor said why not")
        #expect(drafted.intersection(Self.undrafted.keys).isEmpty)
    }

    /// The draft of each API chooses the root's identity (its key in the records) and the
    /// paginator its hand-written pipeline chose, but where ``API/differs`` says why not — nine
    /// APIs in ten at least. A difference listed that is gone fails too: the list says what is.
    @Test func theDraftChoosesTheRecipesIdentityAndPaginator() throws {
        let server = try FixtureServer()
        var same = 0
        for api in Self.apis {
            let url = server.base + api.path
            let draft = try Self.draft(url)
            let drafted = try Self.choices(PipelineConfig.parse(text: draft.yaml, path: "draft.yml", environment: [:]))
            let text =
                api.recipe.hasPrefix("pipelines/")
                ? try String(contentsOf: packageRoot.appendingPathComponent(api.recipe), encoding: .utf8)
                : try ExportRoundTripTests.cookbook(api.recipe, server.base, [:])
            let written = try Self.choices(PipelineConfig.parse(text: text, path: "recipe.yml", environment: [:]), resource: api.resource)
            if drafted == written { same += 1 }
            #expect((drafted != written) == (api.differs != nil), "\(api.recipe): drafted \(drafted), written \(written)")
        }
        #expect(same * 10 >= Self.apis.count * 9, "\(same) of \(Self.apis.count)")
    }

    /// `ingot init URL` as the command drafts it: up to three pages, the detail pages a list of
    /// links names, the draft.
    static func draft(_ url: String) throws -> PipelineDraft {
        let samples = try PipelineDraft.samples(url: url, headers: [], pages: 3)
        #expect(samples.count <= 3)
        let details = try PipelineDraft.details(of: samples, headers: [])
        return try PipelineDraft.infer(
            name: PipelineDraft.name(from: url), origin: .url(url, bearerEnv: nil), samples: samples, details: details)
    }

    /// A pipeline's choices for resource `name` (`nil`: its first with a root): its root's
    /// identity, by the keys its records hold it under, and its paginator's kind.
    static func choices(_ config: PipelineConfig, resource name: String? = nil) -> (identity: [String], paginator: String) {
        let resource = config.resources.first { resource in name.map { resource.name == $0 } ?? (resource.root != nil) }
        let root = resource?.root.flatMap { config.model.index(of: $0) }.map { config.model.entities[$0] }
        let paginator: String
        switch resource?.source {
        case .http(let http):
            switch http.paginate {
            case .none: paginator = "none"
            case .nextURL: paginator = "next_url"
            case .linkHeader: paginator = "link_header"
            case .page(_, _, let total): paginator = total == nil ? "page" : "page with a total"
            case .offset: paginator = "offset"
            case .cursor: paginator = "cursor"
            }
        default: paginator = "none"
        }
        return (root?.identityAttributes.map(\.key) ?? [], paginator)
    }

    /// `ingot init --swift` of every API above compiles as is: Tests/ReadmeExamples/DraftedAPIs.swift
    /// holds each API's draft as the drafter writes it, in an enum of its own (GitHub's `User` and
    /// Jira's are two types), and the build compiles it. After a change to the drafter, the test
    /// writes the file it expects beside the build and says so: copy it over.
    @Test func everyAPIsSwiftDraftCompiles() throws {
        let server = try FixtureServer()
        var expected = """
            // swift-format-ignore-file
            // `ingot init --swift` of each API of InitTests.apis, from its fixture pages, each in an enum of its own:
            // made by InitTests.everyAPIsSwiftDraftCompiles (the build compiles what the drafter writes).
            import Foundation
            import Ingot

            """
        for api in Self.apis {
            let url = server.base + api.path
            let draft = try Self.draft(url)
            // The fixture server's port, in the comments that quote a URL, is another each run.
            let swift = draft.swift.replacingOccurrences(of: server.base, with: "http://127.0.0.1:PORT")
            let lines = swift.split(separator: "\n", omittingEmptySubsequences: false)
            let body = lines.drop { $0.hasPrefix("//") || $0.hasPrefix("import ") || $0.isEmpty }
            #expect(lines.contains("import Ingot") && !body.isEmpty, "\(swift)")
            expected += "\nenum \(api.namespace) {\n"
            expected += body.map { $0.isEmpty ? "" : "    " + $0 }.joined(separator: "\n").trimmingCharacters(in: .newlines)
            expected += "\n}\n"
        }
        let path = "Tests/ReadmeExamples/DraftedAPIs.swift"
        let file = try? String(contentsOf: packageRoot.appendingPathComponent(path), encoding: .utf8)
        guard file != expected else { return }
        // Beside the build (the test's temporary files go with its process).
        let made = packageRoot.appendingPathComponent(".build/DraftedAPIs.swift")
        try Data(expected.utf8).write(to: made)
        Issue.record("\(path) is not what the drafter writes now: cp \(made.path) \(path)")
    }

    /// `--swift`: the same draft as `IngotEntity` structs — coding keys the records' keys, the
    /// identity non-optional, value rules where the pipeline file has them, relationships as the
    /// target's type, JSON of unknown shape left out saying so.
    @Test func theDraftAsSwiftTypes() throws {
        let pages = [
            #"{"results": [{"id": 1, "created_at": 1700000000, "height": "172", "owner": {"id": 7, "type": "User"}, "tags": ["a"]}, {"id": 2, "created_at": 1700000100, "height": "unknown", "owner": {"id": 8, "type": "Org"}, "tags": []}]}"#
        ]
        let samples = try pages.map { PipelineDraft.Sample(document: try JSONDocument(bytes: Array($0.utf8))) }
        let draft = try PipelineDraft.infer(name: "things", origin: .directory("."), samples: samples)
        let swift = draft.swift
        for line in [
            "struct Thing: IngotEntity, Codable {", "    var id: Int\n", "    var createdAt: Date?", "    var height: Int?",
            "    var owner: Owner?",
            "case id, createdAt = \"created_at\", height", "static let identity: [CodingKeys] = [.id]",
            "case .createdAt: IngotRule(dateFormat: .unixSeconds)", "case .height: IngotRule(coerce: true, values: [\"unknown\": nil])",
            "// \"tags\": JSON", "struct Owner: IngotEntity, Codable {", "var typeValue: String?", "typeValue = \"type\"",
        ] {
            #expect(swift.contains(line), "\(line)\n\(swift)")
        }
    }

    /// A run of `config` from its own source into the SQLite database `db`.
    private func load(_ config: PipelineConfig, into db: String) -> RunSummary {
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
    }
}
