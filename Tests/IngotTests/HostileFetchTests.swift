import Foundation
import Testing

@testable import Ingot

/// A response must not steer Ingot anywhere it was not pointed.
/// Two fixture servers on loopback play the configured API (A) and another host (B).
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct HostileFetchTests {
    static let token = "s3cr3t-T0KEN-value"
    static let apiKey = "k3y-V4LUE-secret"

    /// A pipeline of `item {id, name}` fetched from `url`.
    func pipeline(_ url: String, paginate: String, auth: String = "{bearer_env: TOKEN}", extra: String = "") throws -> PipelineConfig {
        try PipelineConfig.parse(
            text: """
                version: 1
                name: hostile
                source:
                  http:
                    url: \(url)
                    paginate: \(paginate)
                    auth: \(auth)
                    headers: {X-Custom: custom-header-value}
                    timeout_s: 5
                    retry: {attempts: 2, base_delay_ms: 1, max_delay_ms: 5}
                \(extra)
                records: results
                root: item
                entities:
                  item:
                    identity: id
                    attributes: {id: integer, name: string}
                """, path: "hostile.yml")
    }

    func run(_ config: PipelineConfig, logs: LogCapture, maxPageBytes: Int? = nil) throws -> (RunSummary, String) {
        let http = try #require(config.source.http)
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("h.db").path
        options.progressInterval = 0
        options.maxPageBytes = maxPageBytes
        let source = try HTTPPageSource(
            config: http, framing: config.framing,
            environment: ["TOKEN": HostileFetchTests.token, "KEY": HostileFetchTests.apiKey],
            maxPageBytes: maxPageBytes ?? RunOptions.defaultMaxPageBytes, logger: logs.logger)
        return (PipelineRunner(config: config, options: options, logger: logs.logger).run(source: source), options.databasePath)
    }

    /// What server `s` saw: one entry per request.
    func seen(_ s: FixtureServer) throws -> [[String: String]] {
        let response = try HTTPClient().get(s.base + "/seen", headers: [], timeout: 5)
        let list = try JSONSerialization.jsonObject(with: Data(response.body)) as? [[String: Any]] ?? []
        return list.map { $0.compactMapValues { $0 as? String } }
    }

    func percent(_ url: String) -> String { url.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? url }

    /// A server's `total_pages` that overflows `start + total_pages`, or is negative, fails the
    /// run naming the page and the value (its page saved), never the process (it trapped: SIGILL,
    /// and every resume trapped again).
    @Test(arguments: ["9223372036854775807", "-3"])
    func aTotalOutOfRangeFailsTheRunNotTheProcess(value: String) throws {
        let a = try FixtureServer()
        let logs = LogCapture()
        let config = try pipeline(
            a.base + "/hostile/total?value=" + percent(value), paginate: "{page: {param: page, start: 1, total_pages: meta.total_pages}}")
        let (summary, db) = try run(config, logs: logs)
        #expect(summary.status == .failed)
        #expect(summary.error?.contains("total_pages at 'meta.total_pages' is out of range (\(value))") == true, "\(summary.error ?? "")")
        #expect(summary.error?.contains("/hostile/total") == true, "the page is named")
        #expect(try rows(db, "SELECT count(*) FROM item") == [["1"]], "the page that said it is saved")
    }

    /// Where a numbered source ends, from a server's total: `nil` for a total that is negative
    /// or overflows the sum, at every edge (the pagination fuzz harness drives it with any number).
    @Test func aServersTotalNeverOverflows() {
        #expect(HTTPPageSource.end(total: 9, isPages: true, first: 1) == 10)
        #expect(HTTPPageSource.end(total: 9, isPages: false, first: 1) == 9)
        #expect(HTTPPageSource.end(total: Int.max, isPages: true, first: 1) == nil)
        #expect(HTTPPageSource.end(total: Int.max, isPages: true, first: 0) == Int.max)
        #expect(HTTPPageSource.end(total: -1, isPages: false, first: 0) == nil)
        #expect(HTTPPageSource.end(total: Int.max - 1, isPages: true, first: 2) == nil)
    }

    @Test(arguments: ["file:///etc/passwd", "gopher://127.0.0.1:1/x", "dict://127.0.0.1:1/x", "ftp://127.0.0.1/x"])
    func aNextURLWithAnotherSchemeIsRefused(target: String) throws {
        let a = try FixtureServer()
        let logs = LogCapture()
        let (summary, db) = try run(try pipeline(a.base + "/hostile/next?to=" + percent(target), paginate: "{next_url: next}"), logs: logs)
        #expect(summary.status == .failed)
        #expect(summary.error?.contains("only http and https URLs are followed") == true, "\(summary.error ?? "")")
        #expect(try rows(db, "SELECT count(*) FROM item") == [["1"]], "the page before the refused URL is saved")
        #expect(!logs.all.joined().contains("root:"), "no byte of a local file reaches the logs")
    }

    @Test(arguments: ["next", "link"])
    func anotherHostNamedByAResponseIsRefusedAndGetsNothing(kind: String) throws {
        let a = try FixtureServer()
        let b = try FixtureServer()
        let paginate = kind == "next" ? "{next_url: next}" : "{link_header: true}"
        let url = a.base + "/hostile/\(kind)?to=" + percent(b.base + "/hostile/items?page=1")
        let (summary, _) = try run(try pipeline(url, paginate: paginate), logs: LogCapture())
        #expect(summary.status == .failed)
        #expect(summary.error?.contains("not the pipeline's origin and not in source.http.allowed_hosts") == true, "\(summary.error ?? "")")
        #expect(try seen(b).isEmpty, "host B received no request at all")
    }

    @Test func anAllowedHostIsFollowedWithCredentials() throws {
        let a = try FixtureServer()
        let b = try FixtureServer()
        let url = a.base + "/hostile/next?to=" + percent(b.base + "/hostile/items?page=1")
        let config = try pipeline(url, paginate: "{next_url: next}", extra: "    allowed_hosts: [\"127.0.0.1:\(b.port)\"]")
        let (summary, _) = try run(config, logs: LogCapture())
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let requests = try seen(b)
        #expect(requests.count == 1)
        #expect(requests.first?["authorization"] == "Bearer \(HostileFetchTests.token)")
    }

    @Test(arguments: ["bearer", "header", "query"])
    func aCrossOriginRedirectDropsEveryCredential(auth: String) throws {
        let a = try FixtureServer()
        let b = try FixtureServer()
        let authYAML =
            switch auth {
            case "bearer": "{bearer_env: TOKEN}"
            case "header": "{api_key: {header: X-Api-Key, env: KEY}}"
            default: "{api_key: {query: api_key, env: KEY}}"
            }
        let url = a.base + "/hostile/redirect?to=" + percent(b.base + "/hostile/items?page=1")
        let config = try pipeline(
            url, paginate: "{page: {param: page}}", auth: authYAML, extra: "    allowed_hosts: [\"127.0.0.1:\(b.port)\"]\n    max_pages: 2")
        let (summary, _) = try run(config, logs: LogCapture())
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        // A sent credentials to its own origin…
        let fromA = try seen(a)
        #expect(fromA.first?["x_custom"] == "custom-header-value")
        // …and B, reached by a redirect that changed origin, got none of them.
        let fromB = try seen(b)
        #expect(!fromB.isEmpty)
        for request in fromB {
            #expect(request["authorization"] == nil)
            #expect(request["x_api_key"] == nil)
            #expect(request["x_custom"] == nil)
            #expect(!(request["query"] ?? "").contains(HostileFetchTests.apiKey))
        }
    }

    @Test func aRedirectToAHostNotAllowedIsRefused() throws {
        let a = try FixtureServer()
        let b = try FixtureServer()
        let url = a.base + "/hostile/redirect?to=" + percent(b.base + "/hostile/items?page=1")
        let (summary, _) = try run(try pipeline(url, paginate: "{page: {param: page}}"), logs: LogCapture())
        #expect(summary.status == .failed)
        #expect(summary.error?.contains("refused redirect") == true, "\(summary.error ?? "")")
        #expect(try seen(b).isEmpty)
    }

    @Test func aSameOriginRedirectKeepsCredentials() throws {
        let a = try FixtureServer()
        let url = a.base + "/hostile/redirect?to=" + percent("/hostile/items?page=1")
        let (summary, _) = try run(try pipeline(url, paginate: "{page: {param: page}}", extra: "    max_pages: 2"), logs: LogCapture())
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let items = try seen(a).filter { $0["path"] == "/hostile/items" }
        #expect(items.first?["authorization"] == "Bearer \(HostileFetchTests.token)")
    }

    @Test(arguments: ["{bearer_env: TOKEN}", "{api_key: {query: api_key, env: KEY}}"])
    func aSecretEchoedByTheServerNeverReachesTheLogs(auth: String) throws {
        let a = try FixtureServer()
        let logs = LogCapture()
        let (summary, db) = try run(try pipeline(a.base + "/hostile/echo", paginate: "{page: {param: page}}", auth: auth), logs: logs)
        #expect(summary.status == .failed)
        #expect(summary.error?.contains("REDACTED") == true, "\(summary.error ?? "")")
        let everything = logs.all.joined(separator: "\n") + (summary.error ?? "")
        #expect(!everything.contains(HostileFetchTests.token))
        #expect(!everything.contains(HostileFetchTests.apiKey))
        let stored = try rows(db, "SELECT coalesce(group_concat(source || reason || raw), '') FROM _ingot_rejects")
        #expect(!stored.description.contains(HostileFetchTests.token))
    }

    @Test func pagePaginationStopsAtAPageThatIsNotJSON() throws {
        let a = try FixtureServer()
        let logs = LogCapture()
        let (summary, db) = try run(try pipeline(a.base + "/hostile/items", paginate: "{page: {param: page}}"), logs: logs)
        #expect(summary.status == .finished)
        #expect(summary.counters.pages == 2)
        #expect(summary.counters.rejectedPages == 1)
        #expect(try seen(a).count == 2, "no request after the HTML page (not 10,000 of them)")
        #expect(logs.all.contains { $0.contains("msg=fetch.stopped") })
        #expect(try rows(db, "SELECT count(*) FROM item") == [["1"]])
    }

    @Test func aPageOverMaxPageBytesIsARejectedPageNotAFailure() throws {
        let a = try FixtureServer()
        let archive = temporaryDirectory().path
        let config = try pipeline(a.base + "/hostile/big?size=200000", paginate: "{page: {param: page}}")
        let http = try #require(config.source.http)
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("h.db").path
        options.progressInterval = 0
        options.maxPageBytes = 100_000
        options.archiveDirectory = archive
        let logs = LogCapture()
        let source = try HTTPPageSource(
            config: http, framing: config.framing, environment: ["TOKEN": HostileFetchTests.token], maxPageBytes: 100_000,
            logger: logs.logger)
        let summary = PipelineRunner(config: config, options: options, logger: logs.logger).run(source: source)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedPages == 1)
        #expect(try seen(a).count == 1, "an oversized page ends page pagination")
        let reject = try rows(options.databasePath, "SELECT reason, length(raw), raw_length FROM _ingot_rejects")
        #expect(reject.first?.first?.contains("over max_page_bytes (100000)") == true, "\(reject)")
        // What the run archived, the replay reads: the archive verifies (the big page is not in it).
        let reader = try ArchiveReader(path: try #require(summary.archive))
        try reader.verify()
        #expect(reader.entries.isEmpty)
        #expect(reader.header.maxPageBytes == 100_000)
    }

    @Test func originPolicyRules() {
        let policy = OriginPolicy(url: "https://api.example.org/v1/items", allowedHosts: ["cdn.example.org", "files.example.org:8443"])
        #expect(policy.check("https://api.example.org/v1/items?page=2") == nil)
        #expect(policy.check("https://API.example.org:443/x") == nil)
        #expect(policy.check("http://api.example.org/x") != nil, "another scheme is another origin")
        #expect(policy.check("https://api.example.org:8443/x") != nil, "another port is another origin")
        #expect(policy.check("https://cdn.example.org/x") == nil)
        #expect(policy.check("https://files.example.org:8443/x") == nil)
        #expect(policy.check("https://files.example.org/x") != nil)
        #expect(policy.check("https://evil.example.org/x") != nil)
        #expect(policy.check("file:///etc/passwd") == .scheme)
        #expect(policy.check("https://api.example.org@evil.example.org/") != nil, "userinfo does not fool the host check")
        #expect(policy.mayReceiveCredentials("https://cdn.example.org/x"))
        #expect(!policy.mayReceiveCredentials("http://cdn.example.org/x"), "no credentials over a downgrade")
        #expect(!policy.mayReceiveCredentials("https://evil.example.org/x"))
        #expect(HTTPSourceConfig.isValidHostEntry("cdn.example.org"))
        #expect(HTTPSourceConfig.isValidHostEntry("127.0.0.1:8080"))
        #expect(!HTTPSourceConfig.isValidHostEntry("https://cdn.example.org"))
        #expect(!HTTPSourceConfig.isValidHostEntry("cdn.example.org/path"))
    }
}
