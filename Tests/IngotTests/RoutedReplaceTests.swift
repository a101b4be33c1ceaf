import Foundation
import Testing

@testable import Ingot

/// `write: replace` over records of several kinds (`root: {by: …}`): every entity the root routes
/// to is a replaced root, whatever the order of the map (docs/pipelines.md, "Write modes").
struct RoutedReplaceTests {
    static func reddit(_ entities: String, scope: String? = nil) -> String {
        """
        version: 1
        name: reddit
        records: data.children
        root: {by: kind, entities: {\(entities)}}
        write: \(scope.map { "{mode: replace, scope: \($0)}" } ?? "replace")
        entities:
          link:
            identity: name
            attributes: {name: {type: string, key: data.name}, sub: {type: string, key: data.subreddit}}
          comment:
            identity: name
            attributes: {name: {type: string, key: data.name}, sub: {type: string, key: data.subreddit}}
        """
    }

    static func listing(_ children: [(kind: String, name: String)], sub: String = "swift") -> String {
        let items = children.map { #"{"kind": "\#($0.kind)", "data": {"name": "\#($0.name)", "subreddit": "\#(sub)"}}"# }
        return #"{"kind": "Listing", "data": {"children": [\#(items.joined(separator: ", "))]}}"#
    }

    @Test(arguments: ["t1: comment, t3: link", "t3: link, t1: comment"])
    func everyRoutedEntityIsReplaced(map: String) throws {
        let yaml = RoutedReplaceTests.reddit(map)
        #expect(try PipelineConfig.parse(text: yaml, path: "reddit.yml").replacedEntities.count == 2)
        let (first, db) = try ingest(
            yaml, [RoutedReplaceTests.listing([("t3", "t3_a"), ("t3", "t3_b"), ("t1", "t1_x"), ("t1", "t1_y")])])
        #expect(first.status == .finished)
        // The listing no longer holds t3_b and t1_y: both kinds' stale rows go.
        let (second, _) = try ingest(yaml, [RoutedReplaceTests.listing([("t3", "t3_a"), ("t1", "t1_x")])], db: db)
        #expect(second.status == .finished, "\(second.error ?? "")")
        #expect(second.counters.deleted == 2)
        #expect(try rows(db, "SELECT name FROM link") == [["t3_a"]])
        #expect(try rows(db, "SELECT name FROM comment") == [["t1_x"]])
    }

    /// A scope bounds the deletes of each routed entity; a scope that one of them lacks is
    /// refused at validation, naming it.
    @Test func aScopeBoundsEveryRoutedEntityAndMustNameAColumnOfEach() throws {
        let yaml = RoutedReplaceTests.reddit("t1: comment, t3: link", scope: "data.subreddit")
        let (_, db) = try ingest(yaml, [RoutedReplaceTests.listing([("t3", "t3_a"), ("t1", "t1_x")], sub: "swift")])
        _ = try ingest(yaml, [RoutedReplaceTests.listing([("t3", "t3_r"), ("t1", "t1_r")], sub: "rust")], db: db)
        let (summary, _) = try ingest(yaml, [RoutedReplaceTests.listing([("t3", "t3_a")], sub: "swift")], db: db)
        #expect(summary.counters.deleted == 1)
        #expect(try rows(db, "SELECT name FROM link ORDER BY name") == [["t3_a"], ["t3_r"]])
        #expect(try rows(db, "SELECT name FROM comment ORDER BY name") == [["t1_r"]])

        let lacking = yaml.replacingOccurrences(
            of:
                "  comment:\n    identity: name\n    attributes: {name: {type: string, key: data.name}, sub: {type: string, key: data.subreddit}}",
            with: "  comment:\n    identity: name\n    attributes: {name: {type: string, key: data.name}}")
        #expect(lacking != yaml)
        #expect(throws: ConfigError.self) { try PipelineConfig.parse(text: lacking, path: "reddit.yml") }
        do {
            _ = try PipelineConfig.parse(text: lacking, path: "reddit.yml")
        } catch {
            #expect("\(error)".contains("root 'comment'"), "\(error)")
        }
    }
}
