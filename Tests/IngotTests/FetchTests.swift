import Foundation
import Testing

@testable import Ingot

/// The pipeline file of the people data set, fetched from the fixture server with `paginate`.
private func peopleOverHTTP(_ url: String, paginate: String, extra: String = "", timeout: Int = 2) throws -> PipelineConfig {
    let text = try peopleOverHTTPText(
        url, ["paginate: \(paginate)", "timeout_s: \(timeout)", "retry: {attempts: 4, base_delay_ms: 10, max_delay_ms: 200}"], raw: extra)
    return try PipelineConfig.parse(text: text, path: "people-http.yml")
}

private func run(
    _ config: PipelineConfig, db: String, resume: Bool = false, archive: String? = nil, logs: LogCapture = LogCapture(),
    environment: [String: String] = [:]
) throws -> RunSummary {
    let http = try #require(config.source.http)
    var options = RunOptions()
    options.databasePath = db
    options.progressInterval = 0
    options.batchRecords = 300
    options.resume = resume
    options.archiveDirectory = archive
    let source = try HTTPPageSource(config: http, framing: config.framing, environment: environment, logger: logs.logger)
    return PipelineRunner(config: config, options: options, logger: logs.logger).run(source: source)
}

@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct FetchTests {
    @Test func swapiFilmsAndPeopleIngestEverythingAndRerunsChangeNothing() throws {
        let server = try FixtureServer()
        let db = temporaryDirectory().appendingPathComponent("swapi.db").path
        for name in ["swapi-films", "swapi-people"] {
            let text = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/\(name).yml"), encoding: .utf8)
                .replacingOccurrences(of: "https://swapi.dev", with: server.base)
            let summary = try run(try PipelineConfig.parse(text: text, path: name), db: db)
            #expect(summary.status == .finished)
            #expect(summary.counters.rejectedRecords == 0)
        }
        #expect(try rows(db, "SELECT count(*), count(title) FROM film") == [["6", "6"]])
        #expect(try rows(db, "SELECT count(*), count(name) FROM person") == [["82", "82"]])
        #expect(
            try rows(
                db,
                "SELECT p.name FROM film_characters c JOIN film f ON f.url = c.film_id JOIN person p ON p.url = c.person_id WHERE f.title = 'A New Hope' ORDER BY length(p.url), p.url LIMIT 2"
            )
                == [["Luke Skywalker"], ["C-3PO"]])
        #expect(try rows(db, "SELECT homeworld_id FROM person WHERE name = 'Luke Skywalker'") == [["\(server.base)/api/planets/1/"]])
        let text = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/swapi-people.yml"), encoding: .utf8)
            .replacingOccurrences(of: "https://swapi.dev", with: server.base)
        let again = try run(try PipelineConfig.parse(text: text, path: "swapi-people"), db: db)
        #expect(again.counters.inserted == 0)
    }

    @Test(arguments: [
        ("next", "{next_url: next}"),
        ("link", "{link_header: true}"),
        ("page", "{page: {param: page, start: 1}}"),
        ("offset", "{offset: {param: offset, limit_param: limit, limit: 100, total: count}}"),
        ("cursor", "{cursor: {path: meta.next_cursor, param: cursor}}"),
    ])
    func everyPaginatorReachesTheExpectedState(style: String, paginate: String) throws {
        let pages = try generatePeople(persons: 1500, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let concurrency = style == "page" || style == "offset" ? "    concurrency: 4" : ""
        let config = try peopleOverHTTP("\(server.base)/people/\(style)", paginate: paginate, extra: concurrency)
        let db = temporaryDirectory().appendingPathComponent("p.db").path
        let summary = try run(config, db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))
    }

    /// A page is parsed once: a paginator that reads the body (next URL, cursor, page and offset
    /// counting records) hands its parse on with the page, for the decode lane to map; one that
    /// reads headers only (Link) parses nothing.
    @Test(arguments: [
        ("next", "{next_url: next}", true), ("link", "{link_header: true}", false),
        ("page", "{page: {param: page, start: 1}}", true), ("cursor", "{cursor: {path: meta.next_cursor, param: cursor}}", true),
    ])
    func aPageReadForPaginationIsParsedOnce(style: String, paginate: String, parsed: Bool) throws {
        let pages = try generatePeople(persons: 300, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let config = try peopleOverHTTP("\(server.base)/people/\(style)", paginate: paginate)
        let source = try HTTPPageSource(
            config: try #require(config.source.http), framing: config.framing, logger: LogCapture().logger)
        var seen = 0
        while let page = try source.next() {
            seen += 1
            #expect((page.parsed != nil) == parsed, "page \(page.seq)")
            if let document = page.parsed { #expect(document.bytes == page.bytes, "the parse is this page's") }
        }
        #expect(seen >= 3)
    }

    /// `concurrency: N` is N transfers in flight, whatever the core count (libcurl's multi
    /// interface, not a thread per core). The server holds every answer until 8 requests are in
    /// flight together: a client with fewer at once shows it in the peak (after the server's
    /// 10 s gate gives up; the 30 s timeout keeps retries from adding requests). No timing is
    /// measured.
    @Test(.hangGuard, arguments: ["page", "offset"])
    func concurrencyIsTransfersInFlightNotCores(style: String) throws {
        let pages = try generatePeople(persons: 1600, pageSize: 100)
        let server = try FixtureServer(people: pages, gate: 8)
        let paginate =
            // No total: a paginator that knows where the list ends asks one page first (see
            // RealAPITests.numberedPaginatorsNeverRequestPastTheEnd).
            style == "page" ? "{page: {param: page, start: 1}}" : "{offset: {param: offset, limit_param: limit, limit: 100}}"
        let config = try peopleOverHTTP("\(server.base)/people/\(style)", paginate: paginate, extra: "    concurrency: 8", timeout: 30)
        let db = temporaryDirectory().appendingPathComponent("p.db").path
        let summary = try run(config, db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(try server.counters()["peak_in_flight"] == 8)
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))
    }

    @Test(arguments: ["500:2,500:3", "429:2", "drop:3", "truncate:4", "slow:2"])
    func faultsAreRetriedToTheExactState(faults: String) throws {
        let pages = try generatePeople(persons: 800, pageSize: 100)
        let server = try FixtureServer(people: pages, faults: faults, slow: 3)
        let logs = LogCapture()
        let db = temporaryDirectory().appendingPathComponent("p.db").path
        let summary = try run(try peopleOverHTTP("\(server.base)/people/next", paginate: "{next_url: next}"), db: db, logs: logs)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))
        #expect(logs.all.contains { $0.contains("msg=fetch.retry") })
    }

    @Test func authComesFromTheEnvironmentAndNeverShows() throws {
        let pages = try generatePeople(persons: 300, pageSize: 100)
        let server = try FixtureServer(people: pages, token: "s3cret-token")
        let config = try peopleOverHTTP(
            "\(server.base)/people/next", paginate: "{next_url: next}", extra: "    auth: {bearer_env: PEOPLE_TOKEN}")
        let dir = temporaryDirectory()
        // Missing variable: refused before anything runs.
        #expect(throws: FetchError.self) { _ = try run(config, db: dir.appendingPathComponent("a.db").path) }
        // Wrong token: 401 fails at once (no retries), exit status failed.
        let logs = LogCapture()
        let refused = try run(config, db: dir.appendingPathComponent("b.db").path, logs: logs, environment: ["PEOPLE_TOKEN": "wrong"])
        #expect(refused.status == .failed)
        #expect(refused.error?.contains("HTTP 401") == true)
        #expect(!logs.all.contains { $0.contains("fetch.retry") })
        // Right token: every page, and the token is nowhere in logs, archive or database.
        let good = LogCapture()
        let db = dir.appendingPathComponent("c.db").path
        let archives = dir.appendingPathComponent("archives").path
        let summary = try run(config, db: db, archive: archives, logs: good, environment: ["PEOPLE_TOKEN": "s3cret-token"])
        #expect(summary.status == .finished)
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))
        #expect(!good.all.joined().contains("s3cret-token"))
        let archive = try [UInt8](Data(contentsOf: URL(fileURLWithPath: try #require(summary.archive))))
        let reader = try ArchiveReader(path: try #require(summary.archive))
        #expect(reader.entries.allSatisfy { $0.metadata.httpStatus == 200 && $0.metadata.headers?["content-type"] == "application/json" })
        #expect(!String(decoding: archive, as: UTF8.self).contains("s3cret"))
    }

    @Test func apiKeysInTheQueryAreRedacted() throws {
        let credentials = try Credentials(
            config: HTTPSourceConfig(url: "https://api.example.org/x", auth: .apiKeyQuery(param: "key", env: "K")),
            environment: ["K": "abc123"])
        #expect(credentials.redact("https://api.example.org/x?page=2&key=abc123") == "https://api.example.org/x?page=2&key=REDACTED")
        #expect(credentials.redact("https://user:pw@api.example.org/x") == "https://user:REDACTED@api.example.org/x")
    }

    @Test func loopingPaginationStopsWithAnError() throws {
        let server = try FixtureServer(people: try generatePeople(persons: 100, pageSize: 100))
        let db = temporaryDirectory().appendingPathComponent("l.db").path
        let loop = try run(try peopleOverHTTP("\(server.base)/people/loop", paginate: "{next_url: next}"), db: db)
        #expect(loop.status == .failed)
        #expect(loop.error?.contains("pagination would loop") == true)
        let stuck = try run(
            try peopleOverHTTP("\(server.base)/people/stuck", paginate: "{cursor: {path: meta.next_cursor, param: cursor}}"), db: db)
        #expect(stuck.status == .failed)
        #expect(stuck.error?.contains("cursor 'same' was already followed") == true, "\(stuck.error ?? "")")
        // A cycle of three cursors: 4 requests, not max_pages (it was fetched 10,000 times and
        // ended `finished`).
        let before = try server.counters()["people_requests"] ?? 0
        let cycle = try run(
            try peopleOverHTTP("\(server.base)/people/cycle", paginate: "{cursor: {path: meta.next_cursor, param: cursor}}"), db: db)
        #expect(cycle.status == .failed)
        #expect(cycle.error?.contains("cursor 'A' was already followed") == true, "\(cycle.error ?? "")")
        #expect(try server.counters()["people_requests"] == before + 4)
    }

    @Test(arguments: ["next", "page"])
    func aFailedRunResumesExactly(style: String) throws {
        let pages = try generatePeople(persons: 1500, pageSize: 100)
        // Request 6 fails every one of its 4 attempts: the run stops after committing pages 1-5.
        let server = try FixtureServer(people: pages, faults: "500:6,500:7,500:8,500:9")
        let paginate = style == "next" ? "{next_url: next}" : "{page: {param: page, start: 1}}"
        let config = try peopleOverHTTP("\(server.base)/people/\(style)", paginate: paginate)
        let db = temporaryDirectory().appendingPathComponent("r.db").path
        let first = try run(config, db: db)
        #expect(first.status == .failed)
        #expect(first.counters.pages == 5)
        let resumed = try run(config, db: db, resume: true)
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(resumed.runID == first.runID)
        #expect(resumed.counters.pages == (style == "page" ? 19 : 18), "18 pages, and the empty page that ends page pagination")
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))
        // A finished run is not resumed: --resume starts a new one.
        let again = try run(config, db: db, resume: true)
        #expect(again.runID != first.runID)
        #expect(again.counters.inserted == 0)
    }

    @Test func incrementalRunsSendTheHighestCursorSeen() throws {
        let pages = try generatePeople(persons: 400, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let config = try peopleOverHTTP(
            "\(server.base)/people/next", paginate: "{next_url: next}",
            extra: "incremental: {cursor_path: updated_at, param: updated_since}")
        #expect(config.incremental == IncrementalConfig(cursorPath: ["updated_at"], param: "updated_since"))
        let db = temporaryDirectory().appendingPathComponent("i.db").path
        #expect(try run(config, db: db).status == .finished)

        // The highest updated_at of every record served.
        var highest = ""
        for name in try FileManager.default.contentsOfDirectory(atPath: pages).filter({ $0.hasPrefix("page-") }) {
            let document = try JSONDocument(bytes: [UInt8](Data(contentsOf: URL(fileURLWithPath: pages + "/" + name))))
            for record in document.root["results"]?.elements ?? JSONElements(value: document.root) {
                if let v = record["updated_at"]?.string, v > highest { highest = v }
            }
        }
        let kept = try SQLiteStore.state(databasePath: db, model: config.model, pipeline: config.name, key: "incremental:updated_since")
        #expect(kept == highest)

        // The next run's first request carries it.
        let http = try #require(config.source.http)
        let source = try HTTPPageSource(
            config: http, framing: config.framing, query: [("updated_since", highest)], logger: LogCapture().logger)
        let first = try #require(try source.next())
        #expect(
            first.source.contains("updated_since=\(highest.replacingOccurrences(of: ":", with: "%3A"))")
                || first.source.contains("updated_since=\(highest)"))
    }

    @Test func tlsIsAlwaysVerified() throws {
        // A self-signed certificate: a server anyone could stand up. Ingot must refuse to talk to it.
        let dir = temporaryDirectory()
        let cert = dir.appendingPathComponent("cert.pem").path
        let key = dir.appendingPathComponent("key.pem").path
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        openssl.arguments = [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-days", "1", "-keyout", key, "-out", cert,
        ]
        openssl.standardError = Pipe()
        try openssl.run()
        openssl.waitUntilExit()
        try #require(openssl.terminationStatus == 0)
        let server = try FixtureServer(people: try generatePeople(persons: 100, pageSize: 100), tls: (cert, key))
        let config = try peopleOverHTTP(
            "https://127.0.0.1:\(server.port)/people/next", paginate: "{next_url: next}")
        let logs = LogCapture()
        let summary = try run(config, db: dir.appendingPathComponent("t.db").path, logs: logs)
        #expect(summary.status == .failed)
        #expect(
            summary.error?.lowercased().contains("certificate") == true || summary.error?.contains("SSL") == true, "\(summary.error ?? "")")
        #expect(summary.counters.pages == 0)
        #expect(!logs.all.contains { $0.contains("fetch.retry") }, "a certificate that does not verify is not retried")
    }

    @Test(.hangGuard) func stoppingCutsARetryWaitShort() throws {
        // The first request gets 429 with Retry-After: 3600: only stop() can end the wait before
        // the test's time limit does.
        let server = try FixtureServer(people: try generatePeople(persons: 100, pageSize: 100), faults: "429long:1")
        let text = try peopleOverHTTPText(
            "\(server.base)/people/next",
            ["paginate: {next_url: next}", "retry: {attempts: 6, base_delay_ms: 1000, max_delay_ms: 3600000}"])
        let config = try PipelineConfig.parse(text: text, path: "p.yml")
        let http = try #require(config.source.http)
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("s.db").path
        options.progressInterval = 0
        let logs = LogCapture()
        let runner = PipelineRunner(config: config, options: options, logger: logs.logger)
        // Stop once the source is waiting to retry (it has logged fetch.retry).
        DispatchQueue.global().async {
            waitUntil { logs.all.contains { $0.contains("msg=fetch.retry") } }
            runner.stop()
        }
        let summary = runner.run(source: try HTTPPageSource(config: http, framing: config.framing, logger: logs.logger))
        #expect(summary.status == .interrupted)
        #expect(summary.counters.pages == 0)
    }

    @Test func maxPagesIsAHardCapAndSaysSo() throws {
        let pages = try generatePeople(persons: 1000, pageSize: 100)
        let server = try FixtureServer(people: pages)
        let config = try peopleOverHTTP(
            "\(server.base)/people/page", paginate: "{page: {param: page, start: 1}}", extra: "    max_pages: 3\n    concurrency: 2")
        let logs = LogCapture()
        let summary = try run(config, db: temporaryDirectory().appendingPathComponent("m.db").path, logs: logs)
        #expect(summary.status == .finished)
        #expect(summary.counters.pages == 3)
        #expect(logs.all.contains { $0.contains("msg=fetch.max_pages") && $0.contains("pages=3") })
    }

    @Test func retryAfterAndLinkHeadersParse() {
        #expect(HTTPPageSource.retryAfter("2") == 2)
        #expect(HTTPPageSource.retryAfter("Wed, 21 Oct 2015 07:28:00 GMT") == 0)
        let now = Date(timeIntervalSince1970: 1_445_412_470)  // 2015-10-21T07:27:50Z
        #expect(HTTPPageSource.retryAfter("Wed, 21 Oct 2015 07:28:00 GMT", now: now) == 10)
        // Hostile values: nil (the computed backoff applies), never a trap.
        for value in [
            "Wed\u{033A}2v\n20", "-5", "1e308x", "nan", "inf", "Wed, 99 Oct 2015 07:28:00 GMT", "Wed, 21 Foo 2015 07:28:00 GMT", "",
        ] {
            #expect(HTTPPageSource.retryAfter(value) == nil, "\(value)")
        }
        #expect(HTTPPageSource.nextLink(#"<https://a/x?page=1>; rel="prev", <https://a/x?page=3>; rel="next""#) == "https://a/x?page=3")
        #expect(HTTPPageSource.nextLink(#"<https://a/x?page=1>; rel="prev""#) == nil)
    }
}
