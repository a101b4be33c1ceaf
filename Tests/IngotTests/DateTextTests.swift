import Foundation
import GRDB
import Testing

@testable import Ingot

/// Dates a SQL user can trust (docs/stores.md, "Dates"): the stored text has one fixed width, so
/// text order is time order, and a database written with the earlier shortest form is rewritten
/// when a run opens it.
@Suite
struct DateTextTests {
    static let yaml = """
        version: 1
        name: dates
        records: results
        root: event
        entities:
          event:
            identity: id
            attributes:
              id: string
              at: {type: date, format: iso8601}
              day: {type: date, format: "yyyy-MM-dd"}
            relationships:
              tick: {to: tick, key: tick}
              ticks: {to: tick, many: true, key: ticks}
          tick:
            identity: at
            attributes:
              at: {type: date, format: iso8601}
        """

    /// SWAPI's `edited` values, where the shortest text sorted `…:50.33Z` after `…:50.338Z` and
    /// `…:30Z` after `…:30.5Z`: ORDER BY, MIN, MAX and BETWEEN on the text follow time.
    static let pages = [
        #"""
        {"results": [
          {"id": "a", "at": "2014-12-20T21:17:50.338Z", "day": "2014-12-20", "tick": "2014-12-20T21:17:30.5Z", "ticks": ["2014-12-20T21:17:30Z"]},
          {"id": "b", "at": "2014-12-20T21:17:50.33Z", "tick": "2014-12-20T21:17:30Z", "ticks": ["2014-12-20T21:17:30.5Z", "2014-12-20T21:17:30Z"]},
          {"id": "c", "at": "2014-12-20T21:17:30Z"},
          {"id": "d", "at": "2014-12-20T21:17:30.5Z"},
          {"id": "e", "at": "2014-12-20T22:17:50+01:00"}
        ]}
        """#
    ]

    @Test func textOrderIsTimeOrder() throws {
        let (summary, db) = try ingest(Self.yaml, Self.pages)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(try rows(db, "SELECT id FROM event ORDER BY at, id").map { $0[0] } == ["c", "d", "e", "b", "a"])
        #expect(
            try rows(db, "SELECT min(at), max(at) FROM event")
                == [["2014-12-20T21:17:30.000000Z", "2014-12-20T21:17:50.338000Z"]])
        #expect(
            try rows(
                db, "SELECT id FROM event WHERE at BETWEEN '2014-12-20T21:17:30.000000Z' AND '2014-12-20T21:17:50.330000Z' ORDER BY id"
            )
            .map { $0[0] } == ["b", "c", "d", "e"])
        #expect(try rows(db, "SELECT at FROM tick ORDER BY at") == [["2014-12-20T21:17:30.000000Z"], ["2014-12-20T21:17:30.500000Z"]])
        #expect(try rows(db, "SELECT length(at) FROM event GROUP BY length(at)") == [["27"]])
        #expect(try rows(db, "SELECT day FROM event WHERE day IS NOT NULL") == [["2014-12-20"]], "a date without a time keeps its form")
    }

    /// A database of the shortest form (entity columns, a to-one's key column, a join table's key
    /// column) is rewritten once when a run opens it: the rerun of the same pages then changes
    /// nothing, and every date-time has the fixed width.
    @Test func aDatabaseOfTheShortestFormIsRewrittenWhenOpened() throws {
        let (first, db) = try ingest(Self.yaml, Self.pages)
        #expect(first.status == .finished)
        let before = try rows(db, "SELECT id, at, tick_id FROM event ORDER BY id")
        // Back to the form earlier versions wrote: no trailing zeros, no fraction when it is zero.
        let shortest = "CASE WHEN %@ LIKE '%.000000Z' THEN substr(%@, 1, 19) || 'Z' ELSE rtrim(substr(%@, 1, 26), '0') || 'Z' END"
        func short(_ column: String) -> String { shortest.replacingOccurrences(of: "%@", with: column) }
        let queue = try DatabaseQueue(path: db)
        try queue.write { db in
            try db.execute(sql: "UPDATE event SET at = \(short("at")), tick_id = \(short("tick_id"))")
            try db.execute(sql: "UPDATE tick SET at = \(short("at"))")
            try db.execute(sql: "UPDATE event_ticks SET tick_id = \(short("tick_id"))")
            try db.execute(sql: "DELETE FROM _ingot_date_columns")
        }
        try queue.close()
        #expect(try rows(db, "SELECT at FROM event WHERE id = 'b'") == [["2014-12-20T21:17:50.33Z"]])
        #expect(try rows(db, "SELECT at FROM tick ORDER BY at").map { $0[0] } == ["2014-12-20T21:17:30.5Z", "2014-12-20T21:17:30Z"])

        let (rerun, _) = try ingest(Self.yaml, Self.pages, db: db)
        #expect(rerun.status == .finished, "\(rerun.error ?? "")")
        #expect(rerun.counters.inserted == 0 && rerun.counters.updated == 0, "\(rerun.counters)")
        #expect(try rows(db, "SELECT id, at, tick_id FROM event ORDER BY id") == before)
        #expect(try rows(db, "SELECT count(*) FROM tick") == [["2"]])
        #expect(
            try rows(db, "SELECT tick_id FROM event_ticks ORDER BY event_id, tick_id")
                == [["2014-12-20T21:17:30.000000Z"], ["2014-12-20T21:17:30.000000Z"], ["2014-12-20T21:17:30.500000Z"]])
        #expect(
            try rows(db, "SELECT tbl, col FROM _ingot_date_columns ORDER BY tbl, col")
                == [["event", "at"], ["event", "day"], ["event", "tick_id"], ["event_ticks", "tick_id"], ["tick", "at"]])
    }

    /// The rewrite happens once per column: a value a user writes in another form afterwards is
    /// theirs, and a column added by a changed pipeline is recorded when it is made.
    @Test func eachColumnIsRewrittenOnce() throws {
        let model = try PipelineConfig.parse(text: Self.yaml, path: "dates.yml").model
        let layouts = EntityLayout.layouts(of: model)
        let (_, path) = try ingest(Self.yaml, Self.pages)
        let queue = try DatabaseQueue(path: path)
        defer { try? queue.close() }
        let rewritten = try queue.inDatabase { db in
            try db.execute(sql: "UPDATE event SET at = '2014-12-20T21:17:30Z' WHERE id = 'c'")
            return try DateTextMigration.migrate(db, model: model, layouts: layouts)
        }
        #expect(rewritten.isEmpty)
        #expect(try rows(path, "SELECT at FROM event WHERE id = 'c'") == [["2014-12-20T21:17:30Z"]])
    }
}
