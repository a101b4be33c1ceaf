import Foundation
import Testing

@testable import Ingot

/// `partial: true` on a relationship (docs/pipelines.md, "Nested objects"): a nested object that
/// is a partial copy of its target — Jira nests an issue's parent as `{id, key, fields: {summary,
/// status}}` (https://developer.atlassian.com/cloud/jira/platform/rest/v3/api-group-issue-search/)
/// — leaves the columns whose key paths it lacks as stored, where by the key-path rule (root
/// present, leaf missing: NULL) it erased the parent's `created`, `labels` and the rest.
struct PartialCopyTests {
    static func jira(partial: Bool) -> String {
        """
        version: 1
        name: jira
        records: issues
        root: issue
        entities:
          issue:
            identity: id
            attributes:
              id: string
              key: string
              summary: {type: string, key: fields.summary}
              status: {type: string, key: fields.status.name}
              created: {type: string, key: fields.created}
              labels: {type: json, key: fields.labels}
            relationships:
              parent: {to: issue, key: fields.parent\(partial ? ", partial: true" : "")}
              subtasks: {to: issue, many: true, key: fields.subtasks\(partial ? ", partial: true" : "")}
        """
    }

    /// A search page: the epic in full, then a story whose parent (the epic) and subtask come as
    /// partial copies; the subtask again in full on the next page.
    static let pages = [
        #"""
        {"startAt": 0, "maxResults": 2, "total": 3, "issues": [
          {"id": "10001", "key": "PROJ-1", "fields": {"summary": "Epic", "status": {"name": "Open"},
            "created": "2024-01-01T09:00:00.000+0000", "labels": ["platform"]}},
          {"id": "10002", "key": "PROJ-2", "fields": {"summary": "Story", "status": {"name": "Done"},
            "created": "2024-01-02T09:00:00.000+0000", "labels": [],
            "parent": {"id": "10001", "key": "PROJ-1", "fields": {"summary": "Epic (renamed)", "status": {"name": "Open"}}},
            "subtasks": [{"id": "10003", "key": "PROJ-3", "fields": {"summary": "Task", "status": {"name": "To Do"}}}]}}]}
        """#,
        #"""
        {"startAt": 2, "maxResults": 2, "total": 3, "issues": [
          {"id": "10003", "key": "PROJ-3", "fields": {"summary": "Task", "status": {"name": "To Do"},
            "created": "2024-01-03T09:00:00.000+0000", "labels": ["x"], "parent": {"id": "10002", "key": "PROJ-2"}}}]}
        """#,
    ]

    @Test func aPartialCopyLeavesWhatItLacksAsStored() throws {
        let (summary, db) = try ingest(Self.jira(partial: true), Self.pages)
        #expect(summary.status == .finished && summary.counters.rejectedRecords == 0, "\(summary.error ?? "")")
        #expect(
            try rows(db, "SELECT id, summary, status, created, labels, parent_id FROM issue ORDER BY id") == [
                ["10001", "Epic (renamed)", "Open", "2024-01-01T09:00:00.000+0000", #"["platform"]"#, "NULL"],
                ["10002", "Story", "Done", "2024-01-02T09:00:00.000+0000", "[]", "10001"],
                ["10003", "Task", "To Do", "2024-01-03T09:00:00.000+0000", #"["x"]"#, "10002"],
            ])
        // The story's parent copy gave `fields` without `parent`: PROJ-2's own parent stays as
        // stored too (absent, not cleared), and a partial copy's null still means null.
        #expect(try rows(db, "SELECT * FROM issue_subtasks") == [["10002", "10003"]])
    }

    /// Without it the documented key-path rule holds: the epic's copy inside the story erases
    /// its created date and labels — the trap `partial: true` closes.
    @Test func withoutItTheKeyPathRuleErases() throws {
        let (_, db) = try ingest(Self.jira(partial: false), Self.pages)
        #expect(try rows(db, "SELECT created, labels FROM issue WHERE id = '10001'") == [["NULL", "NULL"]])
    }

    /// `partial:` on owned children is refused with file:line:column: an owned set is replaced whole.
    @Test func partialOwnedChildrenAreRefused() {
        let problem = configProblems(
            """
            version: 1
            name: p
            root: a
            entities:
              a: {identity: id, attributes: {id: integer}, relationships: {lines: {to: line, many: true, owned: true, partial: true}}}
              line: {attributes: {n: integer}}
            """, path: "p.yml")
        #expect(problem?.contains("partial does not apply to owned children") == true, "\(problem ?? "")")
        #expect(problem?.hasPrefix("p.yml:5:") == true, "\(problem ?? "")")
    }
}
