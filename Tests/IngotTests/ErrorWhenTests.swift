import Foundation
import Testing

@testable import Ingot

/// APIs that answer their errors with HTTP 200 (`error_when:`, docs/pipelines.md): Slack's
/// `{"ok": false, "error": "ratelimited"}`, GraphQL's `{"errors": […]}`. Such a body is never a
/// page: a temporary reason is retried, any other fails the run naming it — a cursor list does
/// not end at it as a rejected page.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct ErrorWhenTests {
    /// Slack's conversations.history (https://api.slack.com/methods/conversations.history):
    /// cursors in `response_metadata.next_cursor`, `has_more`, and errors answered 200.
    static func slack(_ base: String, channel: String, errorWhen: Bool = true) -> String {
        """
        version: 1
        name: slack
        source:
          http:
            url: \(base)/slack/api/conversations.history?channel=\(channel)&limit=2
            paginate: {cursor: {path: response_metadata.next_cursor, param: cursor, stop_values: [""]}, has_more: has_more}
            retry: {base_delay_ms: 10, max_delay_ms: 100}
        \(errorWhen ? "    error_when: {path: ok, equals: false, reason: error, retry: [ratelimited]}" : "")
        records: messages
        root: message
        entities:
          message:
            identity: ts
            attributes: {ts: string, user: string, text: string}
        """
    }

    private func run(_ yaml: String, logs: LogCapture = LogCapture()) throws -> (RunSummary, String) {
        let config = try PipelineConfig.parse(text: yaml, path: "slack.yml")
        let db = temporaryDirectory().appendingPathComponent("slack.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        return (PipelineRunner(config: config, options: options, logger: logs.logger).run(), db)
    }

    /// `ratelimited` on page 2 is retried (as a 429 is), and the list goes on to its end.
    @Test func aTemporaryErrorAnswered200IsRetried() throws {
        let server = try FixtureServer()
        let logs = LogCapture()
        let (summary, db) = try run(Self.slack(server.base, channel: "C1"), logs: logs)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(try rows(db, "SELECT count(*), min(ts), max(ts) FROM message") == [["5", "1512085950.000216", "1512085950.000220"]])
        #expect(summary.counters.pages == 3 && summary.counters.rejectedPages == 0)
        #expect(logs.all.contains { $0.contains("msg=fetch.retry") && $0.contains("error_when") && $0.contains("ratelimited") })
    }

    /// `channel_not_found` on page 2 fails the run, naming the request and the reason; the
    /// first page's messages stay (committed), nothing is rejected, and the run is not
    /// `finished`. Without the rule, the same answer ended the list as a page without records.
    @Test func anErrorAnswered200FailsTheRunNamingIt() throws {
        let server = try FixtureServer()
        let (summary, db) = try run(Self.slack(server.base, channel: "C2"))
        #expect(summary.status == .failed)
        let error = summary.error ?? ""
        #expect(error.contains("error_when") && error.contains("channel_not_found") && error.contains("cursor=next_ts"), "\(error)")
        #expect(try rows(db, "SELECT count(*) FROM _ingot_rejects") == [["0"]])
        let (unruled, _) = try run(Self.slack(server.base, channel: "C2", errorWhen: false))
        #expect(unruled.status == .finished, "the trap the rule closes: \(unruled.error ?? "")")
    }

    /// A reason `not_found:` lists is answered as a 404 is: in a `for_each`, the channel whose
    /// history says `channel_not_found` (HTTP 200) is a rejected page, counted, and the run
    /// goes on and finishes — where it failed, and every `--resume` after it failed again.
    @Test func aNotFoundReasonSkipsAForEachRequestAsA404Does() throws {
        let server = try FixtureServer()
        let yaml = """
            version: 1
            name: slack
            defaults:
              http:
                url: \(server.base)/slack/api/
                retry: {base_delay_ms: 10, max_delay_ms: 100}
                error_when: {path: ok, equals: false, reason: error, retry: [ratelimited], not_found: [channel_not_found]}
            resources:
              - name: channels
                source: {http: {url: conversations.list}}
                records: channels
              - name: history
                for_each: {resource: channels, path: "conversations.history?channel={id}&limit=2", with: {channel: id}}
                source: {http: {paginate: {cursor: {path: response_metadata.next_cursor, param: cursor, stop_values: [""]}, has_more: has_more}}}
                records: messages
                root: message
            entities:
              message:
                identity: ts
                attributes: {ts: string, user: string, text: string, channel: string}
            """
        let logs = LogCapture()
        let (summary, db) = try run(yaml, logs: logs)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedPages == 1)
        #expect(try rows(db, "SELECT count(*), min(channel), max(channel) FROM message") == [["5", "C1", "C1"]])
        let reasons = try rows(db, "SELECT reason FROM _ingot_rejects").joined().joined()
        #expect(reasons.contains("channel_not_found"), "\(reasons)")
        // With not_found: fail on the for_each, the same answer fails the run, naming it.
        let failing = yaml.replacingOccurrences(of: "with: {channel: id}}", with: "with: {channel: id}, not_found: fail}")
        let (failed, _) = try run(failing)
        #expect(failed.status == .failed && failed.error?.contains("channel_not_found") == true, "\(failed.error ?? "")")
    }

    /// A reason is cut as a server's other texts are: a 30 MB reason makes no 30 MB log line.
    @Test func aLongReasonIsCut() throws {
        let rule = HTTPSourceConfig.ErrorWhen(path: JSONKeyPath(keys: ["ok"]), equals: "false", reason: JSONKeyPath(keys: ["error"]))
        let long = String(repeating: "x", count: 100_000)
        let said = try #require(rule.error(in: try JSONDocument(bytes: Array(#"{"ok": false, "error": "\#(long)"}"#.utf8))))
        #expect(said.utf8.count < 300 && said.hasSuffix("… (100000 bytes)"), "\(said.prefix(300))")
    }

    /// The rule's forms: `equals:` compares the value's text, `present: true` any value that is
    /// not null, false or empty (GraphQL's `errors`); the reason is the `reason:` value, else
    /// the sign.
    @Test func theRuleReadsTheBody() throws {
        func rule(_ yaml: String) throws -> HTTPSourceConfig.ErrorWhen {
            let config = try PipelineConfig.parse(
                text: "version: 1\nname: n\nsource:\n  http:\n    url: https://api.example.org/x\n    error_when: \(yaml)\n"
                    + "root: a\nentities: {a: {identity: id, attributes: {id: integer}}}", path: "p.yml")
            return try #require(config.source.http?.errorWhen)
        }
        func error(_ rule: HTTPSourceConfig.ErrorWhen, _ body: String) throws -> String? {
            rule.error(in: try JSONDocument(bytes: Array(body.utf8)))
        }
        let slack = try rule("{path: ok, equals: false, reason: error}")
        #expect(try error(slack, #"{"ok": false, "error": "invalid_auth"}"#) == "invalid_auth")
        #expect(try error(slack, #"{"ok": true, "messages": []}"#) == nil)
        #expect(try error(slack, #"{"messages": []}"#) == nil, "no sign, no error")
        let graphQL = try rule("{path: errors, present: true, reason: \"errors[0].message\"}")
        #expect(try error(graphQL, #"{"errors": [{"message": "Field 'x' doesn't exist"}]}"#) == "Field 'x' doesn't exist")
        #expect(try error(graphQL, #"{"data": {"items": []}, "errors": []}"#) == nil)
        #expect(try error(graphQL, #"{"data": {"items": []}}"#) == nil)
        let bare = try rule("{path: status, equals: error}")
        #expect(try error(bare, #"{"status": "error"}"#) == "status = error")
    }

    /// A rule that cannot mean anything is refused with file:line:column.
    @Test func aRuleThatCannotMeanAnythingIsRefused() {
        func problems(_ yaml: String) -> String {
            configProblems(
                "version: 1\nname: n\nsource:\n  http:\n    url: https://api.example.org/x\n    error_when: \(yaml)\n"
                    + "root: a\nentities: {a: {identity: id, attributes: {id: integer}}}", path: "p.yml") ?? ""
        }
        #expect(problems("{path: ok}").contains("equals: VALUE"))
        #expect(problems("{path: ok, equals: false, present: true}").contains("equals: VALUE"))
        #expect(problems("{path: errors, present: false}").contains("present: false would make every body an error"))
        #expect(problems("{path: ok, equals: false, retry: [ratelimited]}").contains("retry needs reason"))
        #expect(problems("{path: ok, equals: false, not_found: [gone]}").contains("not_found needs reason"))
        #expect(problems("{path: ok, equals: false, reason: e, retry: [x], not_found: [x]}").contains("both retried and not found"))
        #expect(problems("{path: ok, equals: false, when: x}").hasPrefix("p.yml:6:"))
    }
}
