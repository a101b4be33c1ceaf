import Foundation
import Testing

@testable import Ingot

/// URLs are sent as written (docs/reliability.md, "URLs sent as written"): a URL from a
/// response, a header or the pipeline keeps every byte; a value Ingot puts into a query is
/// form-encoded, into a path one segment.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct URLTextTests {
    /// RFC 3986, 5.4.1 and 5.4.2: every normal and abnormal example, against its base.
    @Test(arguments: [
        ("g:h", "g:h"), ("g", "http://a/b/c/g"), ("./g", "http://a/b/c/g"), ("g/", "http://a/b/c/g/"), ("/g", "http://a/g"),
        ("//g", "http://g"), ("?y", "http://a/b/c/d;p?y"), ("g?y", "http://a/b/c/g?y"), ("#s", "http://a/b/c/d;p?q#s"),
        ("g#s", "http://a/b/c/g#s"), ("g?y#s", "http://a/b/c/g?y#s"), (";x", "http://a/b/c/;x"), ("g;x", "http://a/b/c/g;x"),
        ("g;x?y#s", "http://a/b/c/g;x?y#s"), ("", "http://a/b/c/d;p?q"), (".", "http://a/b/c/"), ("./", "http://a/b/c/"),
        ("..", "http://a/b/"), ("../", "http://a/b/"), ("../g", "http://a/b/g"), ("../..", "http://a/"), ("../../", "http://a/"),
        ("../../g", "http://a/g"), ("../../../g", "http://a/g"), ("../../../../g", "http://a/g"), ("/./g", "http://a/g"),
        ("/../g", "http://a/g"), ("g.", "http://a/b/c/g."), (".g", "http://a/b/c/.g"), ("g..", "http://a/b/c/g.."),
        ("..g", "http://a/b/c/..g"), ("./../g", "http://a/b/g"), ("./g/.", "http://a/b/c/g/"), ("g/./h", "http://a/b/c/g/h"),
        ("g/../h", "http://a/b/c/h"), ("g;x=1/./y", "http://a/b/c/g;x=1/y"), ("g;x=1/../y", "http://a/b/c/y"),
        ("g?y/./x", "http://a/b/c/g?y/./x"), ("g?y/../x", "http://a/b/c/g?y/../x"), ("g#s/./x", "http://a/b/c/g#s/./x"),
        ("g#s/../x", "http://a/b/c/g#s/../x"),
    ])
    func referencesResolveAsRFC3986Says(reference: String, expected: String) {
        #expect(URLText.resolve(reference, against: "http://a/b/c/d;p?q") == expected)
    }

    /// Escapes, brackets and `+` of a reference survive resolution: no byte is decoded or
    /// encoded again.
    @Test(arguments: [
        (
            "https://z.test/api/v2/tickets?page[after]=abc%2B%2Fd%3D%3D&page[size]=1",
            "https://z.test/api/v2/tickets?page[after]=abc%2B%2Fd%3D%3D&page[size]=1"
        ),
        ("tickets?cursor=a+b%2Fc", "https://z.test/api/v2/tickets?cursor=a+b%2Fc"),
        ("?page%5Bafter%5D=x%253D", "https://z.test/api/v2/start?page%5Bafter%5D=x%253D"),
    ])
    func resolutionKeepsEveryByte(reference: String, expected: String) {
        #expect(URLText.resolve(reference, against: "https://z.test/api/v2/start?q=c%2B%2B") == expected)
    }

    @Test func settingAQueryValueKeepsTheRestAndFormEncodesTheValue() {
        let url = "https://api.stripe.test/v1/customers?expand[]=data.customer&q=c%2B%2B&starting_after=old#frag"
        #expect(
            URLText.settingQuery(url, [("starting_after", "cus_a+b/c== ü&x")])
                == "https://api.stripe.test/v1/customers?expand[]=data.customer&q=c%2B%2B&starting_after=cus_a%2Bb%2Fc%3D%3D%20%C3%BC%26x#frag"
        )
        // Names compare decoded: page%5Bnumber%5D is page[number].
        #expect(
            URLText.settingQuery("http://h/x?page%5Bnumber%5D=1&a=%2B", [("page[number]", "2")]) == "http://h/x?a=%2B&page%5Bnumber%5D=2")
        #expect(URLText.removingQuery("http://h/x?api_key=s&a=%2B", where: { $0 == "api_key" }) == "http://h/x?a=%2B")
        #expect(URLText.removingQuery("http://h/x?api_key=s", where: { $0 == "api_key" }) == "http://h/x")
    }

    @Test func aPasswordAndSecretQueryValuesAreRedactedKeepingTheRest() {
        let shown = Credentials.redact("https://u:p%40ss@h.test/x?Token=abc&q=c%2B%2B&page[after]=x%3D", ["token"])
        #expect(shown == "https://u:REDACTED@h.test/x?Token=REDACTED&q=c%2B%2B&page[after]=x%3D")
    }

    /// A Link header's URL is taken whole between `<` and `>`: commas and semicolons in it
    /// (Shopify's `fields=id,title`) do not cut it.
    @Test func aLinkHeadersURLMayHoldCommasAndSemicolons() {
        let shopify =
            #"<https://s.test/products.json?limit=1&fields=id,title&page_info=a%2Bb>; rel="next", <https://s.test/p?x=1>; rel="previous""#
        #expect(HTTPPageSource.nextLink(shopify) == "https://s.test/products.json?limit=1&fields=id,title&page_info=a%2Bb")
        #expect(HTTPPageSource.nextLink(#"<https://h/a;v=1,2>; title="a, b"; rel="prev next""#) == "https://h/a;v=1,2")
        #expect(HTTPPageSource.nextLink(#"<https://h/a>; rel = next"#) == "https://h/a")
        #expect(HTTPPageSource.nextLink(#"<https://h/a>; rel="nextish""#) == nil)
    }

    @Test func originsAreReadFromTheTextAsWritten() throws {
        let origin = try #require(OriginPolicy.Origin("HTTPS://User:pw@API.Example.org:8443/x?page[a]=1"))
        #expect(origin == OriginPolicy.Origin(scheme: "https", host: "api.example.org", port: 8443))
        #expect(OriginPolicy.Origin("http://[::1]:9/x")?.host == "::1")
        #expect(OriginPolicy.Origin("http://h.test:99999/") == nil)
        #expect(OriginPolicy.Origin("file:///etc/passwd") == nil)
        #expect(OriginPolicy.Origin("//h.test/x") == nil)
    }
}

/// Every paginator and `for_each` against the fixture server's `/verbatim/` script: each request's
/// target must be the one the API wrote (or Ingot composed), byte for byte, else the server
/// answers 400 and the run fails.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct URLsSentAsWrittenTests {
    private func pipeline(_ url: String, paginate: String, extra: String = "") -> String {
        """
        version: 1
        name: verbatim
        source:
          http:
            url: "\(url)"
            paginate: \(paginate)
            retry: {attempts: 1}
        \(extra)
        records: data
        root: hit
        entities: {hit: {identity: id, attributes: {id: string}}}
        """
    }

    private func run(_ text: String, server: FixtureServer) throws -> (status: Int32, targets: [String], stderr: String) {
        let dir = temporaryDirectory()
        let file = dir.appendingPathComponent("verbatim.yml").path
        try text.write(toFile: file, atomically: true, encoding: .utf8)
        let cli = try runIngot(["run", file, "--db", dir.appendingPathComponent("v.db").path, "--no-archive"])
        let targets = try server.seenTargets().filter { $0.hasPrefix("/verbatim/") }
        return (cli.status, targets, cli.stderr)
    }

    @Test(arguments: [
        ("next", "/verbatim/next?page[size]=1&filter[tags]=c%2B%2B", "{next_url: links.next}", ""),
        ("link", "/verbatim/link?limit=1&fields=id,title", "{link_header: true}", ""),
        (
            "cursor", "/verbatim/cursor?limit=1&expand[]=data.customer",
            "{cursor: {from_last_record: id, param: starting_after}, has_more: has_more}", ""
        ),
        ("page", "/verbatim/page?q=c%2B%2B&filter[state]=open", "{page: {param: page, start: 1}}", ""),
    ])
    func everyPaginatorSendsTheURLsAsWritten(route: String, start: String, paginate: String, extra: String) throws {
        let server = try FixtureServer()
        let result = try run(pipeline(server.base + start, paginate: paginate, extra: extra), server: server)
        #expect(result.status == 0, "\(result.stderr)")
        let expected = try server.verbatimScript(route).filter { !$0.contains("updated_since") }
        #expect(result.targets == expected)
    }

    @Test func anIncrementalValueIsFormEncoded() throws {
        let server = try FixtureServer()
        let config = try PipelineConfig.parse(
            text: pipeline(server.base + "/verbatim/page?q=c%2B%2B&filter[state]=open", paginate: "{page: {param: page, start: 1}}"),
            path: "verbatim.yml")
        let http = try #require(config.source.http)
        let source = try HTTPPageSource(
            config: http, framing: config.framing, query: [("updated_since", "2024-03-31T02:30:00+01:00")], logger: LogCapture().logger)
        let first = try #require(try source.next())
        #expect(
            first.source.hasSuffix("/verbatim/page?q=c%2B%2B&filter[state]=open&page=1&updated_since=2024-03-31T02%3A30%3A00%2B01%3A00"))
        #expect(
            try server.seenTargets().last
                == "/verbatim/page?q=c%2B%2B&filter[state]=open&page=1&updated_since=2024-03-31T02%3A30%3A00%2B01%3A00")
    }

    /// A `path:` template's values are one segment (or one query value) each; a `url:`
    /// template's value is a URL from a response, sent as written.
    @Test(arguments: [
        ("path: \"verbatim/detail/{id}?tag={tag}\"", ["/verbatim/detail/a+b%2Fc?tag=x%2By%3Dz", "/verbatim/detail/%C3%BC%20~?tag=100%25"]),
        ("url: \"{url}\"", ["/verbatim/detail/x%2Fy?q=c%2B%2B&page[after]=abc%3D%3D", "/verbatim/detail/%E2%9C%93?tag=%2B"]),
    ])
    func forEachSendsValuesEncodedAndURLsAsWritten(template: String, expected: [String]) throws {
        let server = try FixtureServer()
        let text = """
            version: 1
            name: verbatim
            defaults: {http: {url: "\(server.base)/", retry: {attempts: 1}}}
            resources:
              - name: parents
                source: {http: {url: "verbatim/parents"}}
                records: data
              - name: details
                for_each: {resource: parents, \(template)}
                records: "."
                root: hit
            entities: {hit: {identity: id, attributes: {id: string}}}
            """
        let result = try run(text, server: server)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.targets.first == "/verbatim/parents")
        #expect(Set(result.targets.dropFirst()) == Set(expected))
    }
}

extension FixtureServer {
    /// The request targets the server saw, as sent (path and query, no byte changed).
    func seenTargets() throws -> [String] {
        let response = try HTTPClient().get(base + "/seen", headers: [], timeout: 5)
        let entries = (try JSONSerialization.jsonObject(with: Data(response.body)) as? [[String: Any]]) ?? []
        return entries.compactMap { $0["target"] as? String }
    }

    /// The targets of one `/verbatim/` route's script (Tests/Fixtures/server.py's VERBATIM), in order.
    func verbatimScript(_ route: String) throws -> [String] {
        let script = try String(contentsOf: packageRoot.appendingPathComponent("Tests/Fixtures/server.py"), encoding: .utf8)
        var targets: [String] = []
        var inRoute = false
        for line in script.split(separator: "\n") {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("\"") && trimmed.hasSuffix("\": [") { inRoute = trimmed == "\"\(route)\": [" }
            if inRoute, trimmed.hasPrefix("(\"/verbatim/"), let end = trimmed.dropFirst(2).firstIndex(of: "\"") {
                targets.append(String(trimmed[trimmed.index(trimmed.startIndex, offsetBy: 2)..<end]))
            }
        }
        return targets
    }
}
