import Foundation
import Testing

@testable import Ingot

/// Sources that POST a JSON body (GraphQL, search endpoints) and paginate by writing the cursor
/// into it (docs/pipelines.md, "HTTP sources"): what is sent, what is archived, what is refused.
@Suite struct PostBodyTests {
    /// A body cursor replaces the value at its path, or adds the keys that are missing; any JSON
    /// value goes in as it came.
    @Test func aCursorIsWrittenIntoTheBody() throws {
        func set(_ value: String, _ path: String, _ body: String) throws -> String {
            HTTPPageSource.setting(value, at: try JSONKeyPath(parsing: path), in: body)
        }
        #expect(
            try set(#""Y3Vy""#, "variables.cursor", #"{"query": "q", "variables": {"cursor": null}}"#)
                == #"{"query": "q", "variables": {"cursor": "Y3Vy"}}"#)
        #expect(try set(#""b""#, "variables.cursor", #"{"variables": {"cursor": "a"}}"#) == #"{"variables": {"cursor": "b"}}"#)
        #expect(try set(#"[1700000100,"p4"]"#, "search_after", #"{"size": 3}"#) == #"{"size": 3,"search_after":[1700000100,"p4"]}"#)
        #expect(try set("7", "a.b.c", "{}") == #"{"a":{"b":{"c":7}}}"#)
        #expect(try set("7", "a.b", #"{"a": {"x": 1}}"#) == #"{"a": {"x": 1,"b":7}}"#)
        #expect(try set("7", "a.b", #"{"a": "text"}"#) == #"{"a": {"b":7}}"#, "a key on the way that is no object is replaced")
    }

    static let graphQL = """
        version: 1
        name: gql
        source:
          http:
            url: "BASE/github/graphql"
            method: POST
            auth: {bearer_env: GITHUB_TOKEN}
            body:
              query: "query($cursor: String) { repository { issues(first: 2, after: $cursor) { nodes { number } } } }"
              variables: {cursor: null, owner: "${GQL_OWNER}", first: 2, draft: false}
            paginate:
              cursor: {path: data.repository.issues.pageInfo.endCursor, body: variables.cursor}
              has_more: data.repository.issues.pageInfo.hasNextPage
            error_when: {path: errors, present: true, reason: "errors[0].message"}
        records: data.repository.issues.nodes
        root: issue
        entities: {issue: {identity: number, attributes: {number: integer, title: string}}}
        """

    private func run(_ yaml: String, server: FixtureServer, archive: String? = nil) throws -> RunSummary {
        let environment = ["GITHUB_TOKEN": "t0ken", "GQL_OWNER": "s3cret-owner"]
        let config = try PipelineConfig.parse(
            text: yaml.replacingOccurrences(of: "BASE", with: server.base), path: "gql.yml", environment: environment)
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("gql.db").path
        options.progressInterval = 0
        options.archiveDirectory = archive
        let source = try config.makeSource(database: nil, maxPageBytes: 1 << 20, environment: environment, logger: LogCapture().logger)
        return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
    }

    /// Each page is a POST of the body, as JSON, the cursor of the page before in its variables;
    /// the archive keeps each entry's body, its environment values redacted, and a replay maps
    /// the same records.
    @Test(.tags(.process), .beyondUnit, .waitsOffThePool) func everyPageIsAPostOfTheBodyAndItsCursor() throws {
        let server = try FixtureServer()
        let archive = temporaryDirectory().path
        let summary = try run(Self.graphQL, server: server, archive: archive)
        #expect(summary.status == .finished && summary.counters.pages == 3 && summary.counters.records == 5, "\(summary.error ?? "")")
        let response = try HTTPClient().get(server.base + "/seen", headers: [], timeout: 5)
        let seen = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [[String: Any]])
        #expect(seen.count == 3 && seen.allSatisfy { $0["method"] as? String == "POST" })
        #expect(seen.allSatisfy { $0["content_type"] as? String == "application/json" && $0["authorization"] as? String == "Bearer t0ken" })
        let cursors = try seen.map { entry -> String in
            let body = try #require((entry["body"] as? String).flatMap { try? JSONDocument(bytes: Array($0.utf8)) })
            #expect(body.root["variables"]?["owner"]?.string == "s3cret-owner", "the environment's value is sent")
            return body.root["variables"]?["cursor"]?.rawText ?? "absent"
        }
        #expect(cursors == ["null", #""Y3Vyc29yOjI=""#, #""Y3Vyc29yOjQ=""#])

        let file = try #require(try FileManager.default.contentsOfDirectory(atPath: archive).first)
        let reader = try ArchiveReader(path: archive + "/" + file)
        let bodies = (1...3).map { reader.entry(seq: $0)?.metadata.request?.body ?? "none" }
        #expect(bodies.allSatisfy { $0.contains("REDACTED") && !$0.contains("s3cret-owner") }, "\(bodies)")
        #expect(bodies[1].contains(#""cursor":"Y3Vyc29yOjI=""#), "the body as asked, cursor included: \(bodies[1])")
    }

    /// An error answered with HTTP 200 (`{"errors": […]}`) fails the run naming its message,
    /// never taken as a page.
    @Test(.tags(.process), .beyondUnit, .waitsOffThePool) func aGraphQLErrorFailsTheRunNamingIt() throws {
        let server = try FixtureServer()
        let summary = try run(Self.graphQL.replacingOccurrences(of: "issues(first", with: "isues(first"), server: server)
        #expect(summary.status == .failed && summary.counters.pages == 0)
        #expect(summary.error?.contains("Field 'isues' doesn't exist") == true, "\(summary.error ?? "")")
    }

    /// What cannot be sent is refused at validation, with the file's line.
    @Test(arguments: [
        ("method: POST\n    body: {q: 1}", "method: PUT\n    body: {q: 1}", "method is GET (the default) or POST"),
        ("method: POST\n    body: {q: 1}", "body: {q: 1}", "a body is sent with method: POST"),
        ("method: POST\n    body: {q: 1}", "method: POST\n    body: \"[1, 2]\"", "body is a mapping, or the text of a JSON object"),
        ("method: POST\n    body: {q: 1}", "method: POST", "give method: POST and a body"),
        ("body: after", "param: after, body: after", "one of them"),
        ("body: after", "body: \"a[0]\"", "a path of keys"),
    ])
    func whatCannotBeSentIsRefused(from: String, to: String, message: String) {
        let yaml = """
            version: 1
            name: p
            source:
              http:
                url: "https://api.example.org/search"
                method: POST
                body: {q: 1}
                paginate: {cursor: {path: next, body: after}}
            root: a
            entities: {a: {identity: id, attributes: {id: integer}}}
            """
        let changed = yaml.replacingOccurrences(of: from, with: to)
        #expect(changed != yaml)
        let problems = configProblems(changed) ?? ""
        #expect(problems.contains(message) && problems.hasPrefix("test.yml:"), "\(problems)")
    }

    /// A body given as JSON text is sent as written; a mapping is written out as JSON, plain
    /// scalars keeping their JSON types, quoted ones strings.
    @Test func aBodyIsJSON() throws {
        let yaml = """
            version: 1
            name: p
            source:
              http:
                url: "https://api.example.org/search"
                method: POST
                body: {n: 2, f: 1.5, t: true, z: null, s: "2", l: [a, 3], o: {k: v}}
            root: a
            entities: {a: {identity: id, attributes: {id: integer}}}
            """
        let body = try #require(try PipelineConfig.parse(text: yaml, path: "p.yml").source.http?.body)
        #expect(body == #"{"n":2,"f":1.5,"t":true,"z":null,"s":"2","l":["a",3],"o":{"k":"v"}}"#)
        let text = yaml.replacingOccurrences(
            of: "body: {n: 2, f: 1.5, t: true, z: null, s: \"2\", l: [a, 3], o: {k: v}}",
            with: "body: '{\"query\": \"{ viewer { login } }\"}'")
        #expect(try PipelineConfig.parse(text: text, path: "p.yml").source.http?.body == #"{"query": "{ viewer { login } }"}"#)
    }
}
