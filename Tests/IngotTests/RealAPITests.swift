import Foundation
import Testing

@testable import Ingot

/// Real APIs as they are served (issue 17), each against the fixture server shaped after its
/// public documentation: the pipeline a user would write, loaded exactly, and a rerun that
/// inserts nothing.
@Suite(.serialized)
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
        let yaml = """
            version: 1
            name: stripe
            source:
              http:
                url: \(server.base)/stripe/v1/customers?limit=10
                paginate: {cursor: {from_last_record: id, param: starting_after}, has_more: has_more}
            records: data
            root: customer
            entities:
              customer:
                identity: id
                attributes: {id: string, email: string, created: integer, tier: {type: string, key: metadata.tier}}
            """
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

    /// Twitter v1.1's cursored lists end with `next_cursor: 0`: a stop value, not a cursor to send.
    @Test func twitterCursorsStopAtZero() throws {
        let server = try FixtureServer()
        let yaml = """
            version: 1
            name: twitter
            source:
              http:
                url: \(server.base)/twitter/1.1/followers/list.json
                paginate: {cursor: {path: next_cursor_str, param: cursor, stop_values: [0, "0"]}}
            records: users
            root: user
            entities:
              user:
                identity: id
                attributes: {id: integer, screen_name: string, followers_count: integer}
            """
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
            do {
                _ = try PipelineConfig.parse(
                    text: "version: 1\nname: n\nsource:\n  http:\n    url: https://api.example.org/x\n    paginate: \(paginate)\n"
                        + "root: a\nentities: {a: {identity: id, attributes: {id: integer}}}",
                    path: "p.yml")
                return nil
            } catch {
                return "\(error)"
            }
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
            http.paginate == .cursor(.path(JSONKeyPath([.key("data"), .index(-1), .key("id")])), param: "starting_after", stopValues: []))
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
}
