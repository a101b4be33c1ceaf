import Foundation
import GRDB
import Testing

@testable import Ingot

/// Conditional requests (docs/pipelines.md, "Conditional requests"): a run keeps each answer
/// that came with a validator; the next run asks whether it changed since, and takes a 304 as
/// the kept body, byte for byte — the database ends as a full rerun leaves it.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct ConditionalRequestTests {
    /// The people pipeline over the fixture server's numbered pages, run into `db`.
    private static func run(
        _ server: FixtureServer, into db: String, full: Bool = false, archives: String? = nil, links: Bool = false,
        logs: LogCapture = LogCapture()
    ) throws -> RunSummary {
        let yaml =
            links
            ? try peopleOverHTTPText(server.base + "/people/link", ["paginate: {link_header: true}"])
            : try peopleOverHTTPText(server.base + "/people/page", ["paginate: {page: {param: page}}"])
        let config = try PipelineConfig.parse(text: yaml, path: "people-http.yml")
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        options.fullRefresh = full
        options.archiveDirectory = archives
        return PipelineRunner(config: config, options: options, logger: logs.logger).run()
    }

    private static func model(_ server: FixtureServer) throws -> EntityModel {
        try PipelineConfig.parse(
            text: try peopleOverHTTPText(server.base + "/people/page", ["paginate: {page: {param: page}}"]), path: "p.yml"
        ).model
    }

    /// The conditional headers of each request the server saw, in order (`nil`: unconditional).
    private static func asked(_ server: FixtureServer) throws -> [String?] {
        let response = try HTTPClient().get(server.base + "/seen", headers: [], timeout: 5)
        let seen = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [[String: Any]])
        return seen.filter { ($0["path"] as? String) == "/people/page" }.map {
            ($0["if_none_match"] as? String) ?? ($0["if_modified_since"] as? String)
        }
    }

    /// ETags: the second run asks for every page with its ETag, every answer is a 304, and the
    /// pages are the kept bodies (a refresh then leaves them all out). A page changed on the
    /// server is fetched whole; the database ends as a full run over the changed pages leaves it.
    @Test func aRerunAsksWithTheKeptETagsAndTakesEach304AsTheKeptBody() throws {
        let pages = try generatePeople(persons: 300, pageSize: 100)
        let server = try FixtureServer(people: pages, validators: "etag")
        let db = temporaryDirectory().appendingPathComponent("a.db").path
        let first = try Self.run(server, into: db)
        #expect(first.status == .finished && first.counters.notModifiedPages == 0, "\(first.error ?? "")")
        let requests = try Self.asked(server).count
        #expect(try Self.asked(server).allSatisfy { $0 == nil }, "no answer kept yet: nothing asked conditionally")

        let logs = LogCapture()
        let archives = temporaryDirectory().appendingPathComponent("archives").path
        let second = try Self.run(server, into: db, archives: archives, logs: logs)
        #expect(second.status == .finished, "\(second.error ?? "")")
        let answered304 = try server.counters()["not_modified"]
        #expect(second.counters.notModifiedPages == requests && answered304 == requests)
        #expect(Array(try Self.asked(server).suffix(requests)).allSatisfy { $0?.hasPrefix("\"") == true })
        #expect(second.counters.records == first.counters.records && second.counters.unchangedPages == first.counters.pages)
        #expect(logs.all.contains { $0.contains("msg=run.summary") && $0.contains("pages_not_modified=\(requests)") })
        // Its archive holds the kept bodies (each entry says 304): replayed into a new database,
        // it makes the same tables.
        let reader = try ArchiveReader(path: try #require(second.archive))
        #expect(reader.entries.allSatisfy { $0.metadata.httpStatus == 304 } && reader.entries.count == requests)
        let replayDB = temporaryDirectory().appendingPathComponent("replay.db").path
        var options = RunOptions()
        options.databasePath = replayDB
        options.progressInterval = 0
        let replayed = PipelineRunner(
            config: try PipelineConfig.parse(text: reader.header.pipelineText, path: "archive"), options: options,
            logger: LogCapture().logger
        ).run(source: ArchivePageSource(reader: reader))
        #expect(replayed.status == .finished)
        #expect(try PostgresTests.sqliteDump(replayDB, Self.model(server)) == PostgresTests.sqliteDump(db, Self.model(server)))

        // Page 2 changes on the server: fetched again (200), the others still 304.
        let path = (pages as NSString).appendingPathComponent("page-00002.json")
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try text.replacingOccurrences(
            of: #""first_name":""#, with: #""first_name":"Renamed "#, options: [], range: text.range(of: #""first_name":""#)
        ).write(toFile: path, atomically: false, encoding: .utf8)
        _ = try HTTPClient().get(server.base + "/control/reload-people", headers: [], timeout: 5)
        let third = try Self.run(server, into: db)
        #expect(third.status == .finished && third.counters.notModifiedPages == requests - 1, "\(third.error ?? "")")
        #expect(third.counters.updated == 1)
        let full = temporaryDirectory().appendingPathComponent("full.db").path
        let fresh = try FixtureServer(people: pages)
        #expect(try Self.run(fresh, into: full).status == .finished)
        #expect(try PostgresTests.sqliteDump(db, Self.model(server)) == PostgresTests.sqliteDump(full, Self.model(fresh)))
        // The next run asks with page 2's new ETag, and every answer is a 304 again; a full
        // refresh asks nothing conditionally.
        let fourth = try Self.run(server, into: db)
        #expect(fourth.counters.notModifiedPages == requests)
        let fifth = try Self.run(server, into: db, full: true)
        #expect(fifth.status == .finished && fifth.counters.notModifiedPages == 0)
        #expect(Array(try Self.asked(server).suffix(requests)).allSatisfy { $0 == nil })
    }

    /// Last-Modified dates into PostgreSQL; a kept body that cannot be read back (damaged in the
    /// table) makes its request go again, unconditionally, and the run still ends exact.
    @Test func lastModifiedDatesAndADamagedKeptBody() throws {
        let pages = try generatePeople(persons: 200, pageSize: 100)
        let server = try FixtureServer(people: pages, validators: "last-modified")
        let url = try PostgresServer.freshDatabase()
        let first = try Self.run(server, into: url)
        #expect(first.status == .finished, "\(first.error ?? "")")
        let requests = try Self.asked(server).count
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT count(*) FROM _ingot_http_answers") == [["\(requests)"]])
        _ = try connection.execute("UPDATE _ingot_http_answers SET body = '\\x00'::bytea WHERE request LIKE '%page=2'")

        let second = try Self.run(server, into: url)
        #expect(second.status == .finished, "\(second.error ?? "")")
        #expect(second.counters.notModifiedPages == requests - 1 && second.counters.records == first.counters.records)
        let asked = Array(try Self.asked(server).suffix(requests + 1))
        #expect(asked.filter { $0 == nil }.count == 1, "the damaged page asked again without a date: \(asked)")
        #expect(asked.compactMap { $0 }.allSatisfy { $0.hasSuffix("GMT") })
        // The answer fetched again is kept, readable, for the next run.
        #expect(try Self.run(server, into: url).counters.notModifiedPages == requests)
    }

    /// A list and a `for_each` request per record (a pipeline's resources share the run's kept
    /// answers): the rerun's list pages and detail requests are all 304s, the tables the same.
    @Test func aForEachFanOutAsksConditionallyToo() throws {
        let pages = try generatePeople(persons: 60, pageSize: 20)
        let server = try FixtureServer(people: pages, validators: "both")
        let yaml = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/people.yml"), encoding: .utf8)
            .replacingOccurrences(
                of: "source:\n  files: {dir: samples/people, glob: \"page-*.json\"}\nrecords: results\nroot: person\n",
                with: """
                    defaults: {http: {url: "\(server.base)/", concurrency: 4}}
                    resources:
                      - {name: pages, source: {http: {url: people/next, paginate: {next_url: next}}}, records: results, root: person}
                      - {name: details, for_each: {resource: pages, path: "people/detail/{id}"}, records: ".", root: person}

                    """
            ).replacingOccurrences(of: "      tags: json\n", with: "      tags: json\n      note: string\n")
        let config = try PipelineConfig.parse(text: yaml, path: "fanout.yml")
        let db = temporaryDirectory().appendingPathComponent("fanout.db").path
        func run() throws -> RunSummary {
            var options = RunOptions()
            options.databasePath = db
            options.progressInterval = 0
            return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        }
        let first = try run()
        #expect(first.status == .finished && first.counters.notModifiedPages == 0, "\(first.error ?? "")")
        let dump = try PostgresTests.sqliteDump(db, config.model)
        let requests = try #require(try server.counters()["people_requests"])
        let second = try run()
        #expect(second.status == .finished, "\(second.error ?? "")")
        #expect(second.counters.notModifiedPages == requests && second.counters.records == first.counters.records)
        #expect(try PostgresTests.sqliteDump(db, config.model) == dump)
    }

    /// Pages linked by `Link` headers: a 304 need not send them again (the fixture server does
    /// not), so the kept answer's headers stand in for them, and the rerun reads every page.
    @Test func linkHeadersOfAKeptAnswerStand() throws {
        let pages = try generatePeople(persons: 300, pageSize: 100)
        let server = try FixtureServer(people: pages, validators: "etag")
        let db = temporaryDirectory().appendingPathComponent("links.db").path
        let first = try Self.run(server, into: db, links: true)
        #expect(first.status == .finished && first.counters.pages > 1, "\(first.error ?? "")")
        let second = try Self.run(server, into: db, links: true)
        #expect(second.status == .finished && second.counters.pages == first.counters.pages, "\(second.error ?? "")")
        #expect(second.counters.notModifiedPages == first.counters.pages && second.counters.records == first.counters.records)
    }

    /// A server that sends no validator: nothing is kept, nothing asked conditionally.
    @Test func answersWithoutValidatorsAreNotKept() throws {
        let pages = try generatePeople(persons: 100, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let db = temporaryDirectory().appendingPathComponent("plain.db").path
        #expect(try Self.run(server, into: db).status == .finished)
        #expect(try Self.run(server, into: db).counters.notModifiedPages == 0)
        #expect(try Self.asked(server).allSatisfy { $0 == nil })
        #expect(try DatabaseQueue(path: db).read { try Int.fetchOne($0, sql: "SELECT count(*) FROM _ingot_http_answers") } == 0)
    }
}
