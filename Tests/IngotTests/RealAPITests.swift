import Foundation
import Synchronization
import Testing

@testable import Ingot

/// Real APIs as they are served, each against the fixture server shaped after its
/// public documentation: the pipeline a user would write, loaded exactly, and a rerun that
/// inserts nothing.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct RealAPITests {
    /// Runs `yaml` (its `source:` as written) into `db`.
    private func run(_ yaml: String, db: String, logs: LogCapture = LogCapture()) throws -> RunSummary {
        let config = try PipelineConfig.parse(text: yaml, path: "api.yml")
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        return PipelineRunner(config: config, options: options, logger: logs.logger).run()
    }

    /// Stripe's lists (https://stripe.com/docs/api/pagination): `starting_after` is the last
    /// object's id, and `has_more: false` ends the list. Every customer once, in three requests.
    @Test func stripeListsFollowTheLastRecordUntilHasMoreIsFalse() throws {
        let server = try FixtureServer()
        let yaml = Self.stripe(server.base)
        let db = temporaryDirectory().appendingPathComponent("s.db").path
        let summary = try run(yaml, db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.pages == 3 && summary.counters.inserted == 25)
        #expect(try rows(db, "SELECT count(*), min(id), max(id) FROM customer") == [["25", "cus_0001", "cus_0025"]])
        #expect(try rows(db, "SELECT tier FROM customer WHERE id = 'cus_0003'") == [["gold"]])
        #expect(try server.counters()["people_requests"] == 3)
        let again = try run(yaml, db: db)
        #expect(again.status == .finished && again.counters.inserted == 0)
    }

    /// A Stripe list stopped by a failure after its first page resumes at that page's last
    /// record: every customer once, no page applied twice.
    @Test func stripeResumesAfterItsLastCommittedRecord() throws {
        let server = try FixtureServer(faults: "404:2")
        let yaml = Self.stripe(server.base)
        let db = temporaryDirectory().appendingPathComponent("s.db").path
        let first = try run(yaml, db: db)
        #expect(first.status == .failed && first.counters.pages == 1)
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        options.resume = true
        let resumed = PipelineRunner(
            config: try PipelineConfig.parse(text: yaml, path: "s.yml"), options: options, logger: LogCapture().logger
        )
        .run()
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(resumed.counters.pages == 3 && resumed.counters.inserted == 25)
        #expect(try server.counters()["people_requests"] == 4, "page 1, the failed page 2, then pages 2 and 3")
    }

    /// Twitter v1.1's cursored lists end with `next_cursor: 0`: a stop value, not a cursor to send.
    @Test func twitterCursorsStopAtZero() throws {
        let server = try FixtureServer()
        let yaml = Self.twitter(server.base)
        let db = temporaryDirectory().appendingPathComponent("t.db").path
        let summary = try run(yaml, db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.inserted == 30 && summary.counters.pages == 3)
        #expect(try server.counters()["people_requests"] == 3, "no request with cursor=0")
    }

    /// A page that is one object (GitHub's `GET /repos/{owner}/{repo}`) is one record at
    /// `records: "."`; its nested owner is a to-one relationship.
    @Test func aPageThatIsOneObjectIsOneRecord() throws {
        let server = try FixtureServer()
        let yaml = """
            version: 1
            name: github-repo
            source: {http: {url: "\(server.base)/github/repos/octocat/hello-world"}}
            records: "."
            root: repo
            entities:
              repo:
                identity: id
                attributes: {id: integer, full_name: string, stargazers_count: integer, private: bool, topics: json}
                relationships: {owner: {to: user}}
              user:
                identity: id
                attributes: {id: integer, login: string, type: string}
            """
        let db = temporaryDirectory().appendingPathComponent("g.db").path
        let summary = try run(yaml, db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.records == 1 && summary.counters.rejectedRecords == 0)
        #expect(
            try rows(db, "SELECT id, full_name, stargazers_count, owner_id, topics FROM repo") == [
                ["1296269", "octocat/Hello-World", "80", "1", #"["octocat","api"]"#]
            ])
        #expect(try rows(db, "SELECT id, login FROM user") == [["1", "octocat"]])
    }

    /// A record of a one-object page that does not fit is rejected with the page's own coding
    /// path (no `[0]`), and nothing else of the page is lost.
    @Test func aRejectedOneObjectPageNamesItsPath() throws {
        let yaml = itemPipeline("single", "records: \".\"")
        let (summary, db) = try ingest(yaml, [#"{"id": 1, "name": "one"}"#, #"{"id": "two", "name": "two"}"#, "[{\"id\": 3}]"])
        #expect(summary.counters.records == 3 && summary.counters.rejectedRecords == 1)
        #expect(try rows(db, "SELECT id FROM item ORDER BY id") == [["1"], ["3"]])
        #expect(try rows(db, "SELECT coding_path, record_index FROM _ingot_rejects") == [["id", "0"]])
    }

    /// Page numbers with `total_pages`, offsets with `total`: at `concurrency: 4` no request goes
    /// past the end (the server answers 404 there), and every page is read once.
    @Test(arguments: [
        ("paged", "{page: {param: page, start: 1, total_pages: meta.total_pages}}"),
        ("offset404", "{offset: {param: offset, limit_param: limit, limit: 100, total: count}}"),
    ])
    func numberedPaginatorsNeverRequestPastTheEnd(style: String, paginate: String) throws {
        let pages = try generatePeople(persons: 1500, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let text = try peopleOverHTTPText("\(server.base)/people/\(style)", ["paginate: \(paginate)", "concurrency: 4"])
        let db = temporaryDirectory().appendingPathComponent("p.db").path
        let summary = try run(text, db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let files = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.count
        #expect(try server.counters()["people_requests"] == files)
        #expect(summary.counters.pages == files)
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))
    }

    /// Key paths in paginators follow the pipeline's one grammar: an index is read as one, and a
    /// path the grammar does not define is refused with file:line:column.
    @Test func paginatorKeyPathsAreCheckedAtValidation() throws {
        func error(_ paginate: String) -> String? {
            configProblems(
                "version: 1\nname: n\nsource:\n  http:\n    url: https://api.example.org/x\n    paginate: \(paginate)\n"
                    + "root: a\nentities: {a: {identity: id, attributes: {id: integer}}}", path: "p.yml")
        }
        #expect(error("{cursor: {path: \"data[-1].id\", param: starting_after}}") == nil)
        #expect(error("{cursor: {path: \"data[last].id\", param: x}}")?.hasPrefix("p.yml:6:") == true)
        #expect(error("{cursor: {path: \"data..id\", param: x}}")?.contains("part 2 is empty") == true)
        #expect(error("{next_url: \"links]next\"}")?.contains("without its '['") == true)
        #expect(error("{cursor: {path: a, from_last_record: id, param: x}}")?.contains("path") == true)
        #expect(error("{link_header: true, has_more_absent: continue}")?.contains("has_more_absent needs has_more") == true)
        let config = try PipelineConfig.parse(
            text: "version: 1\nname: n\nsource:\n  http:\n    url: https://api.example.org/x\n"
                + "    paginate: {cursor: {path: \"data[-1].id\", param: starting_after}, has_more: meta.has_more, has_more_absent: continue}\n"
                + "root: a\nentities: {a: {identity: id, attributes: {id: integer}}}",
            path: "p.yml")
        let http = try #require(config.source.http)
        #expect(
            http.paginate
                == .cursor(.path(JSONKeyPath([.key("data"), .index(-1), .key("id")])), into: .query("starting_after"), stopValues: []))
        #expect(http.hasMore == HTTPSourceConfig.HasMore(path: JSONKeyPath(keys: ["meta", "has_more"]), continueWhenAbsent: true))
    }

    /// The key path grammar itself.
    @Test func keyPathsReadIndexesAndRefuseTheRest() throws {
        let document = try JSONDocument(bytes: Array(#"{"data": [{"id": "a"}, {"id": "b"}], "n": {"x": [1, [2, 3]]}}"#.utf8))
        func at(_ path: String) throws -> String? {
            let v = try JSONKeyPath(parsing: path).resolve(in: document.root)
            return v.map { $0.string ?? $0.numberText ?? $0.kind.rawValue }
        }
        #expect(try at("data[0].id") == "a")
        #expect(try at("data[-1].id") == "b")
        #expect(try at("data[2].id") == nil)
        #expect(try at("data[-3].id") == nil)
        #expect(try at("n.x[1][0]") == "2")
        #expect(try at("n.x[-1][-1]") == "3")
        #expect(try at("n[0]") == nil, "an index into an object finds nothing")
        #expect(try JSONKeyPath(parsing: "[0].id").description == "[0].id")
        for bad in ["", "a.", ".a", "a[", "a[x]", "a[1", "a]", "a[+1]", "a.[0]", "a[1]b"] {
            #expect(throws: JSONKeyPath.ParseError.self, "\(bad)") { try JSONKeyPath(parsing: bad) }
        }
    }

    /// A Reddit listing mixes kinds: each record is mapped as the entity its `kind` names
    /// (comments and links), and a kind no entity is for is skipped and counted (`other: skip`)
    /// or rejected (the default).
    @Test(arguments: ["skip", "reject"])
    func aListingOfSeveralKindsMapsEachAsItsEntity(other: String) throws {
        let server = try FixtureServer()
        let yaml = Self.reddit(server.base, other: other)
        let db = temporaryDirectory().appendingPathComponent("r.db").path
        let summary = try run(yaml, db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.pages == 2 && summary.counters.records == 13)
        #expect(try rows(db, "SELECT count(*) FROM link WHERE title IS NOT NULL") == [["8"]])
        #expect(try rows(db, "SELECT count(*), sum(link_id IS NOT NULL) FROM comment") == [["4", "4"]])
        #expect(try rows(db, "SELECT body FROM comment WHERE name = 't1_c3'") == [["comment 3"]])
        if other == "skip" {
            #expect(summary.counters.skippedRecords == 1 && summary.counters.rejectedRecords == 0)
        } else {
            #expect(summary.counters.skippedRecords == 0 && summary.counters.rejectedRecords == 1)
            #expect(try rows(db, "SELECT coding_path, reason_code FROM _ingot_rejects") == [["data.children[5]", "wrong_shape"]])
        }
    }

    // MARK: - Several resources

    /// SWAPI's six resources in one pipeline file (pipelines/swapi.yml), one run: every table
    /// full, every link's target filled by its own resource, and a rerun changes nothing.
    @Test func swapiSixResourcesInOneRun() throws {
        let server = try FixtureServer()
        let config = try PipelineConfig.load(
            path: packageRoot.appendingPathComponent("pipelines/swapi.yml").path, environment: ["SWAPI_API": server.base])
        #expect(config.resources.map(\.name) == ["films", "people", "planets", "species", "starships", "vehicles"])
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("swapi.db").path
        options.progressInterval = 0
        let logs = LogCapture()
        let summary = PipelineRunner(config: config, options: options, logger: logs.logger).run()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedRecords == 0 && summary.counters.rejectedPages == 0)
        let db = options.databasePath
        #expect(
            try rows(
                db,
                "SELECT (SELECT count(*) FROM film), (SELECT count(*) FROM person), (SELECT count(*) FROM planet), "
                    + "(SELECT count(*) FROM species), (SELECT count(*) FROM starship), (SELECT count(*) FROM vehicle)")
                == [["6", "82", "60", "37", "36", "39"]])
        // Identities are the numbers in the URLs; numbers are numbers ("unknown" NULL, "1,000" 1000).
        #expect(
            try rows(db, "SELECT id, height, mass, typeof(mass) FROM person WHERE name = 'Luke Skywalker'") == [
                ["1", "172", "77.0", "real"]
            ])
        #expect(try rows(db, "SELECT count(*) FROM person WHERE mass IS NULL") != [["0"]])
        #expect(try rows(db, "SELECT population FROM planet WHERE name = 'Coruscant'") == [["1000000000000"]])
        #expect(try rows(db, "SELECT homeworld_id FROM person WHERE id = 1") == [["1"]])
        // Tatooine's residents (the planets resource) and its people's homeworld are one column.
        #expect(try rows(db, "SELECT count(*) FROM person WHERE homeworld_id = 1") == [["10"]])
        #expect((summary.counters.invalidValues["transport.crew"] ?? 0) > 0, "ranges like 30-165 are NULL, counted")
        // Every row a link reaches was filled by its own resource: no stub is left.
        #expect(try rows(db, "SELECT count(*) FROM person WHERE name IS NULL") == [["0"]])
        #expect(try rows(db, "SELECT count(*) FROM planet WHERE name IS NULL") == [["0"]])
        // Starships and vehicles are transports: one numbering, their shared fields in transport.
        #expect(
            try rows(db, "SELECT kind, count(*) FROM transport GROUP BY kind ORDER BY kind") == [["starship", "36"], ["vehicle", "39"]])
        #expect(
            try rows(db, "SELECT count(*) FROM transport t JOIN starship s ON s.id = t.id WHERE t.name IS NULL OR t.model IS NULL") == [
                ["0"]
            ])
        #expect(try rows(db, "SELECT count(*) FROM starship JOIN vehicle USING (id)") == [["0"]])
        // SWAPI's 8 many-to-many relations are 8 join tables, each read from both sides.
        let joinTables = try rows(
            db,
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%\\_%' ESCAPE '\\' AND name NOT LIKE '\\_ingot%' ESCAPE '\\' AND name <> 'grdb_migrations' ORDER BY 1"
        )
        #expect(
            joinTables.map { $0[0] } == [
                "film_characters", "film_planets", "film_species", "film_starships", "film_vehicles", "person_species", "person_starships",
                "person_vehicles",
            ], "\(joinTables)")
        #expect(try rows(db, "SELECT count(*) > 0 FROM person_starships") == [["1"]])
        // Luke's films, as the people resource gave them, are the films whose characters name him.
        #expect(
            try rows(db, "SELECT group_concat(film_id) FROM (SELECT film_id FROM film_characters WHERE person_id = 1 ORDER BY 1)") == [
                ["1,2,3,6"]
            ])
        #expect(logs.all.filter { $0.contains("msg=resource.done") }.count == 6)
        // Counts per resource: SWAPI serves pages of 10.
        #expect(summary.counters.resourcePages == ["films": 1, "people": 9, "planets": 6, "species": 4, "starships": 4, "vehicles": 4])
        #expect(summary.counters.resourceRecords["people"] == 82 && summary.counters.resourceRecords["vehicles"] == 39)
        #expect(
            try rows(db, "SELECT resource_counts FROM _ingot_runs").first?.first?.hasPrefix(#"{"films":{"pages":1,"records":6},"people""#)
                == true)
        #expect(logs.all.last?.contains("resource.people.pages=9") == true)
        let again = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        #expect(again.status == .finished && again.counters.inserted == 0)
        // Both sides of every relation agree: the rerun finds every row and link set as it is.
        #expect(again.counters.updated == 0 && again.counters.unchanged == 335, "\(again.counters.entities)")
    }
    /// The cookbook's GitHub pipeline (issues, then each issue's comments) against the fixture
    /// server at `base`: three issues a page, two comments a page.
    static func github(_ base: String) throws -> String {
        let cookbook = try String(contentsOf: packageRoot.appendingPathComponent("docs/cookbook.md"), encoding: .utf8)
        let github = try #require(
            cookbook.components(separatedBy: "```yaml\n").first { $0.hasPrefix("version: 1\nname: github") }?.components(separatedBy: "```")
                .first)
        return github.replacingOccurrences(of: "https://api.github.com/", with: base + "/github/")
            .replacingOccurrences(of: "per_page=100", with: "per_page=3")
            .replacingOccurrences(of: "issues/{number}/comments\"", with: "issues/{number}/comments?per_page=2\"")
    }

    /// Stripe's customers list (https://stripe.com/docs/api/pagination): `starting_after` is the
    /// last object's id, and `has_more: false` ends the list.
    static func stripe(_ base: String) -> String {
        """
        version: 1
        name: stripe
        source:
          http:
            url: \(base)/stripe/v1/customers?limit=10
            paginate: {cursor: {from_last_record: id, param: starting_after}, has_more: has_more}
        records: data
        root: customer
        entities:
          customer:
            identity: id
            attributes: {id: string, email: string, created: integer, tier: {type: string, key: metadata.tier}}
        """
    }

    /// Twitter v1.1's cursored followers list: `next_cursor: 0` ends it.
    static func twitter(_ base: String) -> String {
        """
        version: 1
        name: twitter
        source:
          http:
            url: \(base)/twitter/1.1/followers/list.json
            paginate: {cursor: {path: next_cursor_str, param: cursor, stop_values: [0, "0"]}}
        records: users
        root: user
        entities:
          user:
            identity: id
            attributes: {id: integer, screen_name: string, followers_count: integer}
        """
    }

    /// Reddit's listing of links (`t3`) and comments (`t1`); `other` says what becomes of the kinds
    /// it names no entity for.
    static func reddit(_ base: String, other: String = "skip") -> String {
        """
        version: 1
        name: reddit
        source:
          http:
            url: \(base)/reddit/r/swift/overview.json
            paginate: {cursor: {path: data.after, param: after}}
        records: data.children
        root: {by: kind, entities: {t1: comment, t3: link}, other: \(other)}
        entities:
          link:
            identity: name
            attributes:
              name: {type: string, key: data.name}
              title: {type: string, key: data.title}
              score: {type: integer, key: data.score}
          comment:
            identity: name
            attributes:
              name: {type: string, key: data.name}
              body: {type: string, key: data.body}
            relationships: {link: {to: link, key: data.link_id}}
        """
    }

    /// PokeAPI: the list endpoint, then each pokemon's detail page through `url: "{url}"`; the
    /// list itself is not stored (no root); each detail learns its list name (`with:`).
    static func pokeapi(_ base: String, concurrency: Int = 1) -> String {
        """
        version: 1
        name: pokeapi
        defaults: {http: {url: "\(base)/pokeapi/api/v2/", concurrency: \(concurrency), retry: {attempts: 2, base_delay_ms: 1, max_delay_ms: 5}}}
        resources:
          - name: list
            source: {http: {url: "pokemon?offset=0&limit=10", paginate: {next_url: next}}}
            records: results
          - name: pokemon
            for_each: {resource: list, url: "{url}", with: {listed_as: name}}
            records: "."
            root: pokemon
        entities:
          pokemon:
            identity: id
            attributes: {id: integer, name: string, height: integer, weight: integer, listed_as: string}
            relationships: {types: {to: pokemon_type, many: true, owned: true}}
          pokemon_type:
            attributes: {slot: integer}
            relationships: {type: {to: type, key: type.name}}
          type: {identity: name, attributes: {name: string}}
        """
    }

    /// A detail deleted after the list was read (404) is a rejected page naming its request, and
    /// the run goes on to finish (it failed the run and every resume: it could never finish);
    /// one at a time and four at a time. `not_found: fail` makes it fatal.
    @Test(arguments: [1, 4])
    func aDetailThatIsGoneIsSkippedNotFatal(concurrency: Int) throws {
        let server = try FixtureServer()
        _ = try HTTPClient().get(server.base + "/control/pokeapi-gone?n=5", headers: [], timeout: 5)
        _ = try HTTPClient().get(server.base + "/control/pokeapi-gone?n=25", headers: [], timeout: 5)
        let db = temporaryDirectory().appendingPathComponent("poke.db").path
        let logs = LogCapture()
        let summary = try run(Self.pokeapi(server.base, concurrency: concurrency), db: db, logs: logs)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedPages == 2 && summary.counters.rejectsByReason["unreadable"] == 2)
        #expect(try rows(db, "SELECT count(*), min(id), max(id) FROM pokemon") == [["23", "1", "24"]])
        #expect(try rows(db, "SELECT count(*) FROM pokemon WHERE id = 5") == [["0"]])
        let rejects = try rows(db, "SELECT source, reason FROM _ingot_rejects ORDER BY source")
        #expect(rejects.count == 2 && rejects[1][0].hasSuffix("/pokemon/5/") && rejects[1][1].contains("HTTP 404"), "\(rejects)")
        #expect(logs.all.filter { $0.contains("msg=for_each.skipped") && $0.contains("status=404") }.count == 2)

        let fatal = Self.pokeapi(server.base, concurrency: concurrency)
            .replacingOccurrences(of: "with: {listed_as: name}}", with: "with: {listed_as: name}, not_found: fail}")
        let failed = try run(fatal, db: temporaryDirectory().appendingPathComponent("fatal.db").path)
        #expect(failed.status == .failed && failed.error?.contains("404") == true, "\(failed.error ?? "")")
    }

    /// At `concurrency: 4` the details are fetched four at a time and applied in list order.
    @Test(arguments: [1, 4])
    func pokeapiFollowsEachListEntryToItsDetailPage(concurrency: Int) throws {
        let server = try FixtureServer()
        let db = temporaryDirectory().appendingPathComponent("poke.db").path
        let summary = try run(Self.pokeapi(server.base, concurrency: concurrency), db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.pages == 28, "3 list pages and 25 details")
        #expect(summary.counters.records == 25 && summary.counters.rejectedRecords == 0, "the list's records are read, not stored")
        #expect(summary.counters.resourcePages == ["list": 3, "pokemon": 25])
        #expect(try rows(db, "SELECT count(*), count(DISTINCT listed_as), sum(name = listed_as) FROM pokemon") == [["25", "25", "25"]])
        #expect(try rows(db, "SELECT name, height, weight FROM pokemon WHERE id = 25") == [["pikachu", "28", "215"]])
        // Each pokemon's type slot is an owned row, linked to the shared type row.
        #expect(
            try rows(db, "SELECT count(*), count(DISTINCT pokemon_id), min(position), max(position) FROM pokemon_type") == [
                ["25", "25", "0", "0"]
            ])
        #expect(try rows(db, "SELECT count(*) FROM type") == [["8"]])
        #expect(try server.counters()["people_requests"] == 28)
    }

    /// A for_each whose parent has no record makes no request, and the resources after it
    /// still run.
    @Test func anEmptyForEachDoesNotEndTheRun() throws {
        let server = try FixtureServer()
        let yaml = """
            version: 1
            name: empty
            defaults: {http: {url: "\(server.base)/"}}
            resources:
              - {name: list, source: {http: {url: "pokeapi/api/v2/pokemon?offset=100&limit=10"}}, records: results}
              - {name: pokemon, for_each: {resource: list, url: "{url}"}, records: ".", root: pokemon}
              - {name: repo, source: {http: {url: "github/repos/octocat/hello-world"}}, records: ".", root: repo}
            entities:
              pokemon: {identity: id, attributes: {id: integer, name: string}}
              repo: {identity: id, attributes: {id: integer, full_name: string}}
            """
        let db = temporaryDirectory().appendingPathComponent("e.db").path
        let logs = LogCapture()
        let config = try PipelineConfig.parse(text: yaml, path: "e.yml")
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        let summary = PipelineRunner(config: config, options: options, logger: logs.logger).run()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.pages == 2)
        #expect(try rows(db, "SELECT full_name FROM repo") == [["octocat/Hello-World"]])
        #expect(logs.all.filter { $0.contains("msg=resource.done") }.count == 3)
    }

    /// Into PostgreSQL too: a for_each stopped by a failure resumes exactly, its counts per
    /// resource kept in `_ingot_runs.resource_counts`.
    @Test func aForEachResumesExactlyIntoPostgreSQL() throws {
        let server = try FixtureServer(faults: "401:15")
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: Self.pokeapi(server.base), path: "api.yml")
        var options = RunOptions()
        options.databasePath = url
        options.progressInterval = 0
        #expect(PipelineRunner(config: config, options: options, logger: LogCapture().logger).run().status == .failed)
        options.resume = true
        let resumed = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(resumed.counters.pages == 28 && resumed.counters.resourcePages == ["list": 3, "pokemon": 25])
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT count(*), count(DISTINCT listed_as) FROM pokemon") == [["25", "25"]])
        #expect(
            try connection.execute("SELECT resource_counts FROM _ingot_runs") == [
                [#"{"list":{"pages":3,"records":0},"pokemon":{"pages":25,"records":25}}"#]
            ])
    }

    /// `write: replace` per resource: a complete run deletes the rows of that resource's root it
    /// did not see; the other resources merge.
    @Test func writeReplaceIsPerResource() throws {
        let items = temporaryDirectory().path
        let things = temporaryDirectory().path
        let yaml = """
            version: 1
            name: mixed
            resources:
              - {name: items, source: {files: {dir: "\(items)", glob: "*.json"}}, root: item, write: replace}
              - {name: things, source: {files: {dir: "\(things)", glob: "*.json"}}, root: thing}
            entities:
              item: {identity: id, attributes: {id: integer}}
              thing: {identity: id, attributes: {id: integer}}
            """
        let config = try PipelineConfig.parse(text: yaml, path: "m.yml")
        #expect(config.replacedEntities == [config.model.index(of: "item")].compactMap { $0 })
        let db = temporaryDirectory().appendingPathComponent("m.db").path
        try Data("[{\"id\": 1}, {\"id\": 2}, {\"id\": 3}]".utf8).write(to: URL(fileURLWithPath: items + "/a.json"))
        try Data("[{\"id\": 7}, {\"id\": 8}]".utf8).write(to: URL(fileURLWithPath: things + "/a.json"))
        #expect(try run(yaml, db: db).status == .finished)
        try Data("[{\"id\": 1}, {\"id\": 2}]".utf8).write(to: URL(fileURLWithPath: items + "/a.json"))
        try Data("[{\"id\": 8}]".utf8).write(to: URL(fileURLWithPath: things + "/a.json"))
        let second = try run(yaml, db: db)
        #expect(second.status == .finished && second.counters.deleted == 1)
        #expect(try rows(db, "SELECT id FROM item ORDER BY id") == [["1"], ["2"]])
        #expect(try rows(db, "SELECT id FROM thing ORDER BY id") == [["7"], ["8"]], "things merge")
    }

    /// `batch_records` per resource: each resource's records are folded, looked up and saved in
    /// batches of its own size (one identity lookup per entity per batch shows it).
    @Test func batchRecordsIsPerResource() throws {
        let items = temporaryDirectory().path
        let things = temporaryDirectory().path
        let page = "[" + (1...40).map { "{\"id\": \($0)}" }.joined(separator: ",") + "]"
        try Data(page.utf8).write(to: URL(fileURLWithPath: items + "/a.json"))
        try Data(page.utf8).write(to: URL(fileURLWithPath: things + "/a.json"))
        let yaml = """
            version: 1
            name: sizes
            batch_records: 40
            resources:
              - {name: items, source: {files: {dir: "\(items)", glob: "*.json"}}, root: item, batch_records: 10}
              - {name: things, source: {files: {dir: "\(things)", glob: "*.json"}}, root: thing}
            entities:
              item: {identity: id, attributes: {id: integer}}
              thing: {identity: id, attributes: {id: integer}}
            """
        let statements = Mutex<[String]>([])
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("b.db").path
        options.progressInterval = 0
        options.statementObserver = { sql in statements.withLock { $0.append(sql) } }
        let summary = PipelineRunner(
            config: try PipelineConfig.parse(text: yaml, path: "b.yml"), options: options, logger: LogCapture().logger
        )
        .run()
        #expect(summary.status == .finished && summary.counters.inserted == 80)
        let lookups = statements.withLock { $0 }.filter { $0.contains("CROSS JOIN") }
        #expect(lookups.filter { $0.contains("\"item\"") }.count == 4)
        #expect(lookups.filter { $0.contains("\"thing\"") }.count == 1)
    }

    /// The archive of a run with resources records each page's resource and the values its
    /// records took from their parent: a replay, offline, ends in the same tables.
    @Test func aRunWithResourcesReplaysFromItsArchive() throws {
        let server = try FixtureServer()
        let config = try PipelineConfig.parse(text: Self.pokeapi(server.base), path: "api.yml")
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("poke.db").path
        options.archiveDirectory = temporaryDirectory().path
        options.progressInterval = 0
        #expect(PipelineRunner(config: config, options: options, logger: LogCapture().logger).run().status == .finished)
        let archive = try #require(options.archiveDirectory)
        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: archive).first)
        var replay = RunOptions()
        replay.databasePath = temporaryDirectory().appendingPathComponent("replay.db").path
        replay.progressInterval = 0
        let replayed = PipelineRunner(config: config, options: replay, logger: LogCapture().logger)
            .run(source: try ArchivePageSource(path: archive + "/" + file))
        #expect(replayed.status == .finished && replayed.counters.pages == 28)
        let query = "SELECT id, name, listed_as, height FROM pokemon ORDER BY id"
        #expect(try rows(replay.databasePath, query) == (try rows(options.databasePath, query)))
    }

    /// Killed inside the for_each (a detail request fails and the run stops), `--resume`
    /// continues exactly: the list is read again to know the requests, no detail page is applied
    /// twice and none is skipped. Also when the failure is the for_each's first request (the
    /// 4th): the list's last page committed the state of a resource not begun (`res:pokemon:-:`),
    /// which a resume refused ("cannot resume from state"); and when it is the list's third page:
    /// the list's first two pages are read again for their requests (the for_each made only the
    /// third page's five, and the run said finished).
    @Test(arguments: [1, 4], [15, 4, 3])
    func aForEachResumesExactly(concurrency: Int, failing request: Int) throws {
        let server = try FixtureServer(faults: "401:\(request)")
        let db = temporaryDirectory().appendingPathComponent("poke.db").path
        let first = try run(Self.pokeapi(server.base, concurrency: concurrency), db: db)
        #expect(first.status == .failed)
        #expect(first.counters.pages < 28)
        let config = try PipelineConfig.parse(text: Self.pokeapi(server.base, concurrency: concurrency), path: "api.yml")
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        options.resume = true
        let logs = LogCapture()
        let resumed = PipelineRunner(config: config, options: options, logger: logs.logger).run()
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(resumed.counters.pages == 28, "every page once across both runs")
        #expect(resumed.counters.resourcePages == ["list": 3, "pokemon": 25], "counts per resource continue across the resume")
        #expect(try rows(db, "SELECT count(*), sum(name = listed_as) FROM pokemon") == [["25", "25"]])
        #expect(logs.all.contains { $0.contains("msg=resource.reread") })
    }

    /// A run that fails at any one request of a pipeline with resources, then `--resume`d, ends in
    /// the tables of an uninterrupted run, every page once: PokeAPI (a list of three pages, then a
    /// detail page per record), GitHub (the repository, issues by Link headers, then each issue's
    /// comments, paginated themselves) and pipelines/swapi.yml (six resources by next URLs, a
    /// parent entity, relationships read from both sides) — every request in turn refused (401,
    /// which fails the run), on the server the uninterrupted run was made on (its URLs are in the
    /// tables), its counters started again for each.
    @Test(arguments: ["pokeapi", "github", "swapi"])
    func aResumeAfterAFailureAtAnyRequestEndsExact(api: String) throws {
        let swapi = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/swapi.yml"), encoding: .utf8)
        let server = try FixtureServer()
        let text: String
        switch api {
        case "pokeapi": text = Self.pokeapi(server.base)
        case "github":
            text = try Self.github(server.base).replacingOccurrences(
                of: "issues/{number}/comments\"", with: "issues/{number}/comments?per_page=2\"")
        default: text = swapi
        }
        let environment = ["GITHUB_TOKEN": "t0ken", "SWAPI_API": server.base]
        let config = try PipelineConfig.parse(text: text, path: "api.yml", environment: environment)
        func run(db: String, resume: Bool) throws -> RunSummary {
            var options = RunOptions()
            options.databasePath = db
            options.progressInterval = 0
            options.resume = resume
            let source = try config.makeSource(
                database: .sqlite(path: db), maxPageBytes: 1 << 20, environment: environment, logger: LogCapture().logger)
            return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
        }
        let reference = temporaryDirectory().appendingPathComponent("alone.db").path
        let alone = try run(db: reference, resume: false)
        #expect(alone.status == .finished, "\(alone.error ?? "")")
        let requests = try #require(try server.counters()[api == "swapi" ? "api_requests" : "people_requests"])
        #expect(requests >= 13)
        let want = try PostgresTests.sqliteDump(reference, config.model)
        for failing in 1...requests {
            try server.fail(request: failing)
            let db = temporaryDirectory().appendingPathComponent("resumed-\(failing).db").path
            let first = try run(db: db, resume: false)
            #expect(first.status == .failed, "request \(failing)")
            let resumed = try run(db: db, resume: true)
            #expect(resumed.status == .finished, "request \(failing): \(resumed.error ?? "")")
            let got = try PostgresTests.sqliteDump(db, config.model)
            #expect(got == want, "request \(failing): \(want.keys.sorted().filter { got[$0] != want[$0] })")
            #expect(resumed.counters.pages == alone.counters.pages, "request \(failing): every page once across both runs")
        }
    }

    /// GitHub: the issues (Link headers), then each issue's comments through a path template,
    /// each comment learning its `issue_number`; comments are paginated too, and an issue without
    /// any answers `[]`.
    @Test func githubIssuesAndTheirCommentsLinkUp() throws {
        let server = try FixtureServer()
        let cookbook = try String(contentsOf: packageRoot.appendingPathComponent("docs/cookbook.md"), encoding: .utf8)
        let github = try #require(
            cookbook.components(separatedBy: "```yaml\n").first { $0.hasPrefix("version: 1\nname: github") }?.components(
                separatedBy: "```"
            ).first)
        let yaml =
            github.replacingOccurrences(of: "https://api.github.com/", with: server.base + "/github/")
            .replacingOccurrences(of: "per_page=100", with: "per_page=3")
            .replacingOccurrences(
                of: "source: {http: {paginate: {link_header: true}}}", with: "source: {http: {paginate: {link_header: true}}}"
            )
            .replacingOccurrences(of: "issues/{number}/comments\"", with: "issues/{number}/comments?per_page=2\"")
        let db = temporaryDirectory().appendingPathComponent("gh.db").path
        let config = try PipelineConfig.parse(text: yaml, path: "github.yml")
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        // The token comes from the environment (here, the source's): the server checks nothing.
        let source = try config.makeSource(
            database: .sqlite(path: db), maxPageBytes: 1 << 20, environment: ["GITHUB_TOKEN": "t0ken"], logger: LogCapture().logger)
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedRecords == 0 && summary.counters.rejectedPages == 0)
        #expect(try rows(db, "SELECT count(*) FROM repo") == [["1"]])
        #expect(try rows(db, "SELECT count(*), min(number), max(number) FROM issue") == [["7", "1", "7"]])
        // (n × 7) mod 4 comments for issue n: 3, 2, 1, 0, 3, 2, 1.
        #expect(
            try rows(db, "SELECT issue_number, count(*) FROM comment GROUP BY issue_number ORDER BY issue_number") == [
                ["1", "3"], ["2", "2"], ["3", "1"], ["5", "3"], ["6", "2"], ["7", "1"],
            ])
        #expect(try rows(db, "SELECT count(*) FROM comment WHERE body = 'comment 2 on 5' AND issue_number = 5") == [["1"]])
        #expect(try rows(db, "SELECT count(*) FROM user") == [["2"]])
        // Every request carried the token: 1 repo, 3 issue pages, 6 + 2 comment pages (two
        // issues have 3 comments at 2 a page) and one empty page.
        let response = try HTTPClient().get(server.base + "/seen", headers: [], timeout: 5)
        let seen = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [[String: Any]])
        let requests: [String?] = seen.filter { ($0["path"] as? String)?.hasPrefix("/github/") == true }.map {
            $0["authorization"] as? String
        }
        #expect(requests.count == 13)
        #expect(requests.allSatisfy { $0 == "Bearer t0ken" })
    }

    /// JSON Lines over HTTP (`format: jsonl` on `source.http`), with page numbers: an empty page ends it.
    @Test func jsonLinesOverHTTP() throws {
        let server = try FixtureServer()
        let yaml = """
            version: 1
            name: events
            source: {http: {url: "\(server.base)/export/events.jsonl", paginate: {page: {param: page, start: 1}}, format: jsonl}}
            root: event
            entities: {event: {identity: id, attributes: {id: string, type: string, n: integer}}}
            """
        let db = temporaryDirectory().appendingPathComponent("e.db").path
        let summary = try run(yaml, db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.records == 15 && summary.counters.pages == 4)
        #expect(try rows(db, "SELECT count(*), sum(type = 'push') FROM event") == [["15", "8"]])
    }

    /// A path template's values are percent-encoded (a value with `/`, a space or `?` stays one
    /// path segment); a `url:` template's are used as given, under the origin rules.
    @Test func templateValuesAreEncodedInPathsAndCheckedInURLs() throws {
        let yaml = """
            version: 1
            name: t
            defaults: {http: {url: "https://api.example.org/v1/", allowed_hosts: [cdn.example.org]}}
            resources:
              - {name: list, source: {http: {url: items}}, records: "."}
              - {name: by_path, for_each: {resource: list, path: "items/{key}/detail"}, records: ".", root: a}
              - {name: by_url, for_each: {resource: list, url: "{href}"}, records: ".", root: a}
            entities: {a: {identity: id, attributes: {id: integer}}}
            """
        let config = try PipelineConfig.parse(text: yaml, path: "t.yml")
        let source = ResourcesPageSource(config: config, environment: [:], maxPageBytes: 1 << 20, logger: LogCapture().logger)
        let document = try JSONDocument(
            bytes: Array(
                #"[{"key": "a/b c?d", "href": "https://cdn.example.org/x/1"}, {"href": "https://evil.example/1"}, {"href": "http://cdn.example.org/x/2"}, {"key": 5, "href": "/v1/items/5"}]"#
                    .utf8))
        let records = Array(document.root.elements)
        func url(_ k: Int, _ resource: Int) -> String? {
            source.request(for: records[k], of: records[k], try! #require(config.resources[resource].forEach), config.resources[resource])?
                .url
        }
        #expect(url(0, 1) == "https://api.example.org/v1/items/a%2Fb%20c%3Fd/detail")
        #expect(url(3, 1) == "https://api.example.org/v1/items/5/detail")
        #expect(url(1, 1) == nil, "no key: skipped")
        #expect(url(0, 2) == "https://cdn.example.org/x/1", "an allowed host")
        #expect(url(1, 2) == nil, "another origin: skipped")
        #expect(url(2, 2) == nil, "a downgrade to http: skipped")
        #expect(url(3, 2) == "https://api.example.org/v1/items/5", "relative to the base")

        // A value that is a dot segment stays a segment (`..` asked for /v1/detail, with the
        // credentials); `&`, `=` and `+` stay inside their query value.
        let dotted = """
            version: 1
            name: t
            defaults: {http: {url: "https://api.example.org/v1/"}}
            resources:
              - {name: list, source: {http: {url: items}}, records: "."}
              - {name: by_path, for_each: {resource: list, path: "items/{key}/detail?q={key}&page=1"}, records: ".", root: a}
            entities: {a: {identity: id, attributes: {id: integer}}}
            """
        let dottedConfig = try PipelineConfig.parse(text: dotted, path: "t.yml")
        let dottedForEach = try #require(dottedConfig.resources[1].forEach)
        let dottedSource = ResourcesPageSource(config: dottedConfig, environment: [:], maxPageBytes: 1 << 20, logger: LogCapture().logger)
        let values = try JSONDocument(bytes: Array(#"[{"key": ".."}, {"key": "."}, {"key": "a&admin=1+b"}, {"key": "..."}]"#.utf8))
        func dottedURL(_ k: Int) -> String? {
            let record = Array(values.root.elements)[k]
            return dottedSource.request(for: record, of: record, dottedForEach, dottedConfig.resources[1])?.url
        }
        #expect(dottedURL(0) == "https://api.example.org/v1/items/%2E%2E/detail?q=%2E%2E&page=1")
        #expect(dottedURL(1) == "https://api.example.org/v1/items/%2E/detail?q=%2E&page=1")
        #expect(dottedURL(2) == "https://api.example.org/v1/items/a&admin=1+b/detail?q=a%26admin%3D1%2Bb&page=1")
        #expect(dottedURL(3) == "https://api.example.org/v1/items/%2E%2E%2E/detail?q=%2E%2E%2E&page=1")
    }

    /// `--resource NAME` runs some resources: the others are not read, except those a selected
    /// for_each reads, which are read only; a run of some resources resumes by name.
    @Test func someResourcesRunAlone() throws {
        let server = try FixtureServer()
        let swapi = try PipelineConfig.load(
            path: packageRoot.appendingPathComponent("pipelines/swapi.yml").path, environment: ["SWAPI_API": server.base])
        let two = try swapi.selectingResources(["planets", "films"])
        #expect(two.resources.map(\.name) == ["films", "planets"])
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("two.db").path
        options.progressInterval = 0
        let summary = PipelineRunner(config: two, options: options, logger: LogCapture().logger).run()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(
            try rows(
                options.databasePath,
                "SELECT (SELECT count(*) FROM film), (SELECT count(*) FROM planet WHERE name IS NOT NULL), "
                    + "(SELECT count(*) FROM person WHERE name IS NOT NULL)") == [["6", "60", "0"]])
        #expect(throws: ConfigError.self) { try swapi.selectingResources(["ships"]) }

        let poke = try PipelineConfig.parse(text: Self.pokeapi(server.base), path: "api.yml").selectingResources(["pokemon"])
        #expect(poke.resources.map(\.name) == ["list", "pokemon"] && poke.resources[0].root == nil)
    }

    /// The README's pipeline (its one YAML block) runs against the Star Wars API as written: films
    /// and people, linked from both sides, the heights numbers, the edited dates in time order.
    @Test func theREADMEsPipelineRuns() throws {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let start = try #require(readme.range(of: "```yaml\n"))
        let end = try #require(readme.range(of: "\n```", range: start.upperBound..<readme.endIndex))
        let server = try FixtureServer()
        let config = try PipelineConfig.parse(
            text: String(readme[start.upperBound..<end.lowerBound]), path: "README.md", environment: ["SWAPI_API": server.base])
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("readme.db").path
        options.progressInterval = 0
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        #expect(summary.status == .finished && summary.counters.rejectedRecords == 0, "\(summary.error ?? "") \(summary.counters)")
        let db = options.databasePath
        #expect(try rows(db, "SELECT count(*) FROM film") == [["6"]])
        #expect(try rows(db, "SELECT count(*) FROM person WHERE name IS NOT NULL") == [["82"]])
        #expect(try rows(db, "SELECT name, height FROM person WHERE id = 1") == [["Luke Skywalker", "172"]])
        #expect(try rows(db, "SELECT count(*) FROM film_characters") == [["162"]])
        let edited = try rows(db, "SELECT edited FROM person ORDER BY edited").map { $0[0] }
        #expect(edited == edited.sorted() && edited.allSatisfy { $0.count == 27 })
    }

    /// Each resource of pipelines/swapi.yml selected alone reads its own source and stores its
    /// own entity (a selection of one that was not the first read the first resource's pages
    /// and mapped films as planets, exit 0); `--dry-run` names its source.
    @Test(arguments: [
        ("films", "film", 6), ("people", "person", 82), ("planets", "planet", 60), ("species", "species", 37),
        ("starships", "starship", 36), ("vehicles", "vehicle", 39),
    ])
    func eachResourceRunsAloneWithItsOwnSource(resource: String, table: String, count: Int) throws {
        let server = try FixtureServer()
        let swapi = try PipelineConfig.load(
            path: packageRoot.appendingPathComponent("pipelines/swapi.yml").path, environment: ["SWAPI_API": server.base])
        let one = try swapi.selectingResources([resource])
        let source = try #require(one.resources.first?.source)
        #expect(one.source == source && one.root == one.resources.first?.root, "the pipeline-wide settings mirror the selection")
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("one.db").path
        options.progressInterval = 0
        let summary = PipelineRunner(config: one, options: options, logger: LogCapture().logger).run()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.records == count && summary.counters.rejectedRecords == 0)
        // Rows its own resource filled (a film's title, a transport's name; the others' names).
        func filled(_ table: String) throws -> [[String]] {
            switch table {
            case "film": try rows(options.databasePath, "SELECT count(*) FROM film WHERE title IS NOT NULL")
            case "starship", "vehicle":
                try rows(options.databasePath, "SELECT count(*) FROM \(table) JOIN transport USING (id) WHERE transport.name IS NOT NULL")
            default: try rows(options.databasePath, "SELECT count(*) FROM \(table) WHERE name IS NOT NULL")
            }
        }
        #expect(try filled(table) == [["\(count)"]])
        for other in ["film", "person", "planet", "species", "starship", "vehicle"] where other != table {
            #expect(try filled(other) == [["0"]], "\(other) only linked to, never filled")
        }
        let dryRun = try runIngot(
            [
                "run", "pipelines/swapi.yml", "--resource", resource, "--dry-run", "--db",
                temporaryDirectory().appendingPathComponent("d.db").path,
            ],
            environment: ["SWAPI_API": server.base])
        #expect(dryRun.stdout.contains("/api/\(resource)/"), "\(dryRun.stdout)")
        #expect(!dryRun.stdout.contains("/api/films/") || resource == "films", "\(dryRun.stdout)")
    }

    /// A for_each resumes by its requests' identities, not their position: the run is killed
    /// while the 9th detail request hangs, then the list loses pokemon 2 (before the point the run
    /// stopped at). Its requests up to there differ from those the resume state's digest names, so
    /// the for_each starts over (`for_each.restarted`) and every pokemon of the list is fetched:
    /// 11 pages committed before the kill, 24 details after. By position, the resume went on at
    /// the 9th entry of the shorter list — pokemon 10 — and pokemon 9 was never requested,
    /// while the run said `finished`.
    @Test(.hangGuard) func aForEachWhoseListChangedResumesByIdentity() throws {
        let server = try FixtureServer(faults: "slow:12", slow: 60)
        try killAndResume(
            Self.pokeapi(server.base), server: server, holdAt: 12, pages: 11 + 24,
            beforeResume: { _ = try HTTPClient().get(server.base + "/control/pokeapi-drop?n=2", headers: [], timeout: 5) },
            check: { db throws in
                #expect(try rows(db, "SELECT count(*), sum(name = listed_as) FROM pokemon") == [["25", "25"]])
                #expect(try rows(db, "SELECT name FROM pokemon WHERE id = 9") == [["blastoise"]])
            })
    }

    /// A slow source commits on time, not at `--batch-records`: 5 pages of 100 records, then the
    /// server holds the 6th for a minute; with the default 5,000 records a batch, the 500 records
    /// are committed within about two commit intervals (the batch closes on time, then the
    /// writer commits), so the kill -9 while the request hangs costs nothing. Before, nothing
    /// was committed until 5,000 records had come (the wait below ran into its time limit).
    @Test(.hangGuard) func aSlowSourceCommitsOnTimeAndAKillCostsOnlyThat() throws {
        let pages = try generatePeople(persons: 1200, pageSize: 100)
        let count = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.count
        let server = try FixtureServer(people: pages, faults: "slow:6", slow: 60)
        let yaml = try peopleOverHTTPText("\(server.base)/people/next", ["paginate: {next_url: next}"])
        try killAndResume(yaml, server: server, holdAt: 6, pages: count, batchRecords: 5000) { db throws in
            #expect(try checkPeople(db, pages).contains(#""ok": true"#))
        }
    }

    /// kill -9 and --resume on each API's shape: a for_each (PokeAPI, its parent read again),
    /// Stripe's last-record cursor, Twitter's cursor, Reddit's listing of kinds, GitHub's issues
    /// and comments.
    @Test(.hangGuard) func everyAPIShapeResumesExactlyAfterKill9() throws {
        do {
            let server = try FixtureServer(faults: "slow:12", slow: 60)
            try killAndResume(Self.pokeapi(server.base), server: server, holdAt: 12, pages: 28) { db throws in
                #expect(try rows(db, "SELECT count(*), sum(name = listed_as) FROM pokemon") == [["25", "25"]])
                #expect(try rows(db, "SELECT count(*), count(DISTINCT pokemon_id) FROM pokemon_type") == [["25", "25"]])
            }
        }
        do {
            let server = try FixtureServer(faults: "slow:3", slow: 60)
            let yaml = Self.stripe(server.base)
            try killAndResume(yaml, server: server, holdAt: 3, pages: 3) { db throws in
                #expect(try rows(db, "SELECT count(*), count(DISTINCT id) FROM customer") == [["25", "25"]])
            }
        }
        do {
            let server = try FixtureServer(faults: "slow:2", slow: 60)
            let yaml = Self.twitter(server.base)
            try killAndResume(yaml, server: server, holdAt: 2, pages: 3) { db throws in
                #expect(try rows(db, "SELECT count(*) FROM user") == [["30"]])
            }
        }
        do {
            let server = try FixtureServer(faults: "slow:2", slow: 60)
            let yaml = Self.reddit(server.base)
            try killAndResume(yaml, server: server, holdAt: 2, pages: 2) { db throws in
                #expect(try rows(db, "SELECT (SELECT count(*) FROM link), (SELECT count(*) FROM comment)") == [["8", "4"]])
            }
        }
        do {
            let server = try FixtureServer(faults: "slow:8", slow: 60)
            let yaml = try Self.github(server.base)
            // 1 repo, 3 issue pages, then comments of issues 7, 6 and 5 (two pages): held at the 8th.
            try killAndResume(yaml, server: server, holdAt: 8, pages: 13, environment: ["GITHUB_TOKEN": "t0ken"]) { db throws in
                #expect(try rows(db, "SELECT count(*) FROM comment") == [["12"]])
                #expect(try rows(db, "SELECT count(*) FROM issue") == [["7"]])
            }
        }
    }

    /// A resource's URL is relative to `defaults.http.url`; a for_each template's values are
    /// percent-encoded in a path; what cannot work is refused at validation.
    @Test func resourcesAreCheckedAtValidation() throws {
        func error(_ resources: String, defaults: String = "defaults: {http: {url: \"https://api.example.org/v1/\"}}") -> String? {
            do {
                _ = try PipelineConfig.parse(
                    text:
                        "version: 1\nname: r\n\(defaults)\nresources:\n\(resources)\nentities: {a: {identity: id, attributes: {id: integer}}}",
                    path: "r.yml")
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(error("  - {name: a, source: {http: {url: items}}, root: a}") == nil)
        let config = try PipelineConfig.parse(
            text: "version: 1\nname: r\ndefaults: {http: {url: \"https://api.example.org/v1/\", concurrency: 3}}\nresources:\n"
                + "  - {name: a, source: {http: {url: items?x=1}}, root: a}\nentities: {a: {identity: id, attributes: {id: integer}}}",
            path: "r.yml")
        let http = try #require(config.resources.first?.source.http)
        #expect(http.url == "https://api.example.org/v1/items?x=1" && http.concurrency == 3)
        #expect(error("  - {name: a, source: {http: {url: items}}}")?.contains("no root: and no for_each reads it") == true)
        #expect(error("  - {name: b, for_each: {resource: a, path: \"x/{id}\"}, root: a}")?.contains("not declared before") == true)
        #expect(
            error("  - {name: a, source: {http: {url: x}}}\n  - {name: b, for_each: {resource: a, path: \"x/{id\"}, root: a}")?
                .contains("without its '}'") == true)
        #expect(
            error("  - {name: a, source: {http: {url: x}}}\n  - {name: b, for_each: {resource: a, path: \"x/{[x]}\"}, root: a}")?
                .contains("not an integer index") == true)
        #expect(
            error("  - {name: a, source: {http: {url: x}}}\n  - {name: b, for_each: {resource: a, path: x, url: y}, root: a}")?
                .contains("one of them") == true)
        #expect(
            error(
                "  - {name: a, source: {http: {url: \"https://h.example/x\"}}}\n  - {name: b, for_each: {resource: a, path: \"x/{id}\"}, root: a}",
                defaults: "")?
                .contains("for_each needs defaults.http.url") == true)
        #expect(error("  - {name: a, source: {http: {url: x}}, root: a}\nroot: a")?.contains("belongs to each resource") == true)
        // Not "belongs to each resource": a resource takes no incremental (its own key would be unknown).
        #expect(
            error("  - {name: a, source: {http: {url: x}}, root: a}\nincremental: {param: since, cursor_path: at}")?.contains(
                "incremental is not supported with resources: yet") == true)
        // A for_each over a for_each's records validates (single runs; a joined run is refused).
        #expect(
            error(
                "  - {name: a, source: {http: {url: x}}}\n  - {name: b, for_each: {resource: a, path: \"x/{id}\"}}\n"
                    + "  - {name: c, for_each: {resource: b, path: \"y/{id}\"}, root: a}") == nil)
    }
}
