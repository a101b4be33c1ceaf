import Foundation
import Logging
import Testing

@testable import Ingot

/// A `for_each` whose requests paginate by answer (next URLs, `Link` headers, cursors) makes
/// `concurrency` requests at once in a single run (``RequestChains``), each followed to its end,
/// and reads their pages in the order one request after the other gives: the same pages, resume
/// states and tables as `concurrency: 1`.
@Suite struct RequestChainsTests {
    /// People from files, then each person's notes over HTTP: 1 to 3 pages by next URL, the last
    /// page's note winning (Tests/Fixtures/server.py, `/people/notes/ID`).
    private func pipeline(_ pages: String, _ base: String, concurrency: Int) throws -> PipelineConfig {
        let people = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/people.yml"), encoding: .utf8)
        let text = people.replacingOccurrences(
            of: "source:\n  files: {dir: samples/people, glob: \"page-*.json\"}\nrecords: results\nroot: person\n",
            with: """
                defaults: {http: {url: "\(base)/"}}
                resources:
                  - {name: pages, source: {files: {dir: \(pages), glob: "page-*.json"}}, records: results, root: person}
                  - name: notes
                    for_each: {resource: pages, path: "people/notes/{id}"}
                    source: {http: {paginate: {next_url: next}, concurrency: \(concurrency), timeout_s: 30}}
                    records: results
                    root: person

                """
        ).replacingOccurrences(of: "      tags: json\n", with: "      tags: json\n      note: string\n")
        return try PipelineConfig.parse(text: text, path: "notes.yml")
    }

    private func pages(of config: PipelineConfig, resumingFrom state: String? = nil) throws -> [(source: String, state: String)] {
        let source = ResourcesPageSource(config: config, environment: [:], maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "t"))
        if let state { try source.resume(from: state) }
        var seen: [(String, String)] = []
        while let page = try source.next() { seen.append((page.source, page.resumeState ?? "")) }
        return seen
    }

    /// Three requests at once: the server holds its answers until three are in flight together
    /// (`--gate 3`: a source making fewer shows it in the peak), and the run reads the same pages,
    /// with the same resume states, in the same order as one request at a time — and resumes
    /// from any of them, mid-request too, to the same rest.
    @Test(.hangGuard) func requestsPaginatedByAnswerAreMadeConcurrencyAtOnceInOrder() throws {
        let pages = try generatePeople(persons: 30, pageSize: 10)
        let server = try FixtureServer(people: pages, gate: 3)
        let chained = try self.pages(of: try pipeline(pages, server.base, concurrency: 3))
        #expect(try server.counters()["peak_in_flight"] == 3)
        let one = try self.pages(of: try pipeline(pages, server.base, concurrency: 1))
        #expect(chained.map(\.source) == one.map(\.source) && chained.map(\.state) == one.map(\.state))
        // Every page of every request (1 + ID % 3 of them: a person the list gives twice is
        // requested twice, as alone).
        let notes = chained.map(\.source).filter { $0.contains("/people/notes/") }
        let requests = notes.filter { !$0.contains("?page=") }.compactMap { Int($0.split(separator: "/").last ?? "") }
        #expect(Set(requests).count == 30 && notes.count == requests.map { 1 + $0 % 3 }.reduce(0, +), "\(notes)")
        let config = try pipeline(pages, server.base, concurrency: 3)
        for k in [3, 4, 5, 17, chained.count - 2] {
            let rest = try self.pages(of: config, resumingFrom: chained[k].state)
            #expect(rest.map(\.source) == chained[(k + 1)...].map(\.source), "resumed after page \(k + 1): \(chained[k].state)")
        }
    }

    /// The tables of a run making three requests at once are those of one at a time: each
    /// person's note is the one of its request's last page.
    @Test(.hangGuard) func aRunMakingSeveralRequestsAtOnceEndsAsOneAtATime() throws {
        let pages = try generatePeople(persons: 30, pageSize: 10)
        let server = try FixtureServer(people: pages)
        var dumps: [[String: [[String]]]] = []
        for concurrency in [3, 1] {
            let config = try pipeline(pages, server.base, concurrency: concurrency)
            var options = RunOptions()
            options.databasePath = temporaryDirectory().appendingPathComponent("n.db").path
            options.progressInterval = 0
            options.timers = ManualTimers()
            let source = ResourcesPageSource(
                config: config, environment: [:], maxPageBytes: Page.defaultMaxBytes, logger: Logger(label: "t"))
            let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
            #expect(summary.status == .finished, "\(summary.error ?? "")")
            dumps.append(try PostgresTests.sqliteDump(options.databasePath, config.model))
        }
        #expect(dumps[0] == dumps[1])
        let notes = (dumps[0]["person"] ?? []).compactMap { row in row.first { $0.hasPrefix("note ") } }
        #expect(notes.count == 30)
        for note in notes {
            let id = Int(note.split(separator: " ").last ?? "") ?? 0
            #expect(note == "note \(1 + id % 3) of \(id)")
        }
    }

    /// The requests after the one being read stop fetching while the pages they hold pass the
    /// byte bound: with none allowed, no request is asked for before the one before it is read
    /// to its end — the server sees the requests one after the other, each with all its pages.
    @Test(.hangGuard) func requestsAheadWaitWhileTheirPagesPassTheByteBound() throws {
        let pages = try generatePeople(persons: 30, pageSize: 10)
        let server = try FixtureServer(people: pages)
        let config = try pipeline(pages, server.base, concurrency: 3)
        let forEach = try #require(config.resources.last?.forEach)
        let ids = [3, 5, 1, 2, 4, 6]
        let framing = try #require(config.resources.last?.framing)
        let make: RequestChains.Make = { k, _ in
            var http = forEach.http
            http.url = server.base + "/people/notes/\(ids[k])"
            return try HTTPPageSource(config: http, framing: framing, logger: Logger(label: "t"))
        }
        let chains = RequestChains(count: { ids.count }, concurrency: 3, aheadBytes: 0, make: make)
        var read: [String] = []
        for k in ids.indices {
            let source = try chains.source(for: k)
            while let page = try source.next() { read.append(page.source) }
        }
        let seen = try server.seen().filter { $0.path.hasPrefix("/people/notes/") }.map {
            $0.path + ($0.query.isEmpty ? "" : "?" + $0.query)
        }
        #expect(read.count == ids.map { 1 + $0 % 3 }.reduce(0, +))
        #expect(seen == read.map { $0.replacingOccurrences(of: server.base, with: "") }, "\(seen)")
    }
}
