import Foundation
import Testing

@testable import Ingot

/// `on_invalid: null` on a relationship (docs/pipelines.md, "Value rules"): a bare identity its
/// rules cannot read makes no link, counted, instead of rejecting the record — and with it, a
/// reference to one of several kinds is two relationships on one key, each with its `pattern`
/// (Reddit's `parent_id`, https://www.reddit.com/dev/api/: `t1_…` a comment, `t3_…` a link).
struct DiscriminatedReferenceTests {
    static func reddit(onInvalid: Bool) -> String {
        let rule = onInvalid ? ", on_invalid: null" : ""
        return """
            version: 1
            name: reddit
            records: data.children
            root: {by: kind, entities: {t1: comment, t3: link}, other: skip}
            entities:
              link:
                identity: name
                attributes: {name: {type: string, key: data.name}, title: {type: string, key: data.title}}
              tag:
                identity: name
                attributes: {name: string}
              comment:
                identity: name
                attributes: {name: {type: string, key: data.name}, body: {type: string, key: data.body}}
                relationships:
                  parent_comment: {to: comment, key: data.parent_id, pattern: "^(t1_.+)$"\(rule)}
                  parent_link: {to: link, key: data.parent_id, pattern: "^(t3_.+)$"\(rule)}
                  tags: {to: tag, many: true, key: data.tags, pattern: "^#(\\\\w+)$"\(rule)}
            """
    }

    static let page = #"""
        {"kind": "Listing", "data": {"after": null, "children": [
          {"kind": "t3", "data": {"name": "t3_a", "title": "Swift 6"}},
          {"kind": "t1", "data": {"name": "t1_x", "body": "first", "parent_id": "t3_a", "tags": ["#swift", "news", "#six"]}},
          {"kind": "t1", "data": {"name": "t1_y", "body": "reply", "parent_id": "t1_x", "tags": []}},
          {"kind": "t1", "data": {"name": "t1_z", "body": "odd", "parent_id": "t5_2qh0u"}}]}}
        """#

    @Test func eachReferenceGoesToTheKindItsPatternReads() throws {
        let (summary, db) = try ingest(Self.reddit(onInvalid: true), [Self.page])
        #expect(summary.status == .finished && summary.counters.rejectedRecords == 0, "\(summary.error ?? "")")
        #expect(
            try rows(db, "SELECT name, parent_comment_id, parent_link_id FROM comment ORDER BY name") == [
                ["t1_x", "NULL", "t3_a"], ["t1_y", "t1_x", "NULL"], ["t1_z", "NULL", "NULL"],
            ])
        #expect(try rows(db, "SELECT * FROM comment_tags ORDER BY 2") == [["t1_x", "six"], ["t1_x", "swift"]])
        // Each side counts what it could not read: t1_x's link is not a comment, t1_y's parent
        // not a link, t1_z's neither; one tag without its `#`.
        #expect(summary.counters.invalidValues == ["comment.parent_comment": 2, "comment.parent_link": 2, "comment.tags": 1])
    }

    /// By default such an identity rejects its record, naming the relationship's key.
    @Test func withoutItTheRecordIsRejected() throws {
        let (summary, db) = try ingest(Self.reddit(onInvalid: false), [Self.page])
        #expect(summary.counters.rejectedRecords == 3)
        #expect(try rows(db, "SELECT count(*) FROM comment") == [["0"]])
    }

    @Test func onInvalidIsNullOrReject() {
        let problem = configProblems(
            "version: 1\nname: p\nroot: a\nentities:\n  a: {identity: id, attributes: {id: integer}, relationships: {b: {to: a, on_invalid: skip}}}",
            path: "p.yml")
        #expect(problem?.contains("on_invalid is reject") == true && problem?.hasPrefix("p.yml:5:") == true, "\(problem ?? "")")
    }
}
