import Dispatch
import Foundation
import GRDB
import Synchronization
import Testing

@testable import Ingot

private let peopleYAML = personPipeline(
    "people", beforeCountry: ["email: string"],
    attributes: [
        "active: bool", #"born: {type: date, format: "yyyy-MM-dd"}"#, "seen: {type: date, format: iso8601}", "meta: json",
        "legacy: {type: integer, key: legacy_id, coerce: true}",
    ])

private func page(_ records: String) -> String { #"{"results": [\#(records)]}"# }

/// Ingot's merge rules (docs/pipelines.md; Benchmarks/people.py models them too), one test each.
struct MergeRulesTests {
    @Test func storedIdentityUpdatesTheSameRow() throws {
        let (_, db) = try ingest(peopleYAML, [page(#"{"id": 1, "name": "Ada"}"#)])
        let before = try rows(db, "SELECT rowid FROM person WHERE id = 1")
        let (summary, _) = try ingest(peopleYAML, [page(#"{"id": 1, "name": "Grace"}"#)], db: db)
        #expect(try rows(db, "SELECT rowid, name FROM person") == [[before[0][0], "Grace"]])
        #expect(summary.counters.inserted == 0)
        #expect(summary.counters.updated == 1)
    }

    @Test func presentSetsNullClearsAbsentKeeps() throws {
        let (_, db) = try ingest(peopleYAML, [page(#"{"id": 1, "name": "Ada", "email": "a@x", "score": 1.5}"#)])
        try ingest(peopleYAML, [page(#"{"id": 1, "email": null, "score": 2}"#)], db: db)
        #expect(try rows(db, "SELECT name, email, score FROM person") == [["Ada", "NULL", "2.0"]])
    }

    @Test func keyPathRootAbsentKeepsLeafMissingClears() throws {
        let (_, db) = try ingest(peopleYAML, [page(#"{"id": 1, "origin": {"country": {"name": "Chile"}}}"#)])
        try ingest(peopleYAML, [page(#"{"id": 1, "name": "x"}"#)], db: db)
        #expect(try rows(db, "SELECT country FROM person") == [["Chile"]])
        try ingest(peopleYAML, [page(#"{"id": 1, "origin": {"country": {}}}"#)], db: db)
        #expect(try rows(db, "SELECT country FROM person") == [["NULL"]])
        try ingest(peopleYAML, [page(#"{"id": 1, "origin": {"country": {"name": "Peru"}}}"#)], db: db)
        try ingest(peopleYAML, [page(#"{"id": 1, "origin": null}"#)], db: db)
        #expect(try rows(db, "SELECT country FROM person") == [["NULL"]])
    }

    @Test func typesAreStoredAsDocumented() throws {
        let (_, db) = try ingest(
            peopleYAML,
            [
                page(
                    #"""
                    {"id": 1, "active": true, "born": "1990-02-03", "seen": "2026-01-14T10:09:02.5+01:00",
                     "meta": {"a": [1, 2]}, "legacy_id": "1699"}
                    """#)
            ])
        #expect(
            try rows(db, "SELECT active, born, seen, meta, legacy FROM person")
                == [["1", "1990-02-03", "2026-01-14T09:09:02.500000Z", #"{"a":[1,2]}"#, "1699"]])
    }

    /// A `json` attribute is stored in compact form: keys, values and order as sent, without the
    /// whitespace a server indents with (GitHub's and Shopify's pretty-printed pages), so that
    /// the same JSON sent twice, indented or not, is the same text — and unchanged on a rerun.
    /// Whitespace inside strings, escapes and number forms are kept as sent.
    @Test func jsonIsStoredInCompactForm() throws {
        let indented = """
            {"id": 1, "meta": {
                "b" : [ 1, 2.50 , {"c": "x y\\" z"} ],
                "a":\ttrue
            }}
            """
        let (_, db) = try ingest(peopleYAML, [page(indented), page(#"{"id": 2, "meta": {"b":[1,2.50,{"c":"x y\" z"}],"a":true}}"#)])
        #expect(
            try rows(db, "SELECT meta FROM person ORDER BY id") == [
                [#"{"b":[1,2.50,{"c":"x y\" z"}],"a":true}"#], [#"{"b":[1,2.50,{"c":"x y\" z"}],"a":true}"#],
            ])
    }

    /// Text is kept byte for byte whatever its form: plain, escaped, non-ASCII, empty; a text
    /// identity finds its row again in a later batch and a later run.
    @Test func textIsStoredExactlyAndTextIdentitiesMatchAcrossBatches() throws {
        let yaml = """
            version: 1
            name: t
            records: results
            root: film
            entities:
              film:
                identity: url
                attributes: {url: string, title: string, crawl: string}
            """
        let first = page(
            #"""
            {"url": "https://x/films/1/", "title": "A New Hope", "crawl": "It is a period of civil war.\r\nRebel \"spaceships\"\u2026"},
            {"url": "https://x/films/\u0032/", "title": "Ōtomo 中国 😀", "crawl": ""}
            """#)
        let second = page(#"{"url": "https://x/films/2/", "title": "The Empire Strikes Back"}"#)
        let (summary, db) = try ingest(yaml, [first, second], batchRecords: 1)
        #expect(summary.counters.inserted == 2)
        #expect(summary.counters.updated == 0, "a row this run inserted counts as inserted, whatever later records do")
        #expect(
            try rows(db, "SELECT url, title, crawl FROM film ORDER BY url") == [
                ["https://x/films/1/", "A New Hope", "It is a period of civil war.\r\nRebel \"spaceships\"…"],
                ["https://x/films/2/", "The Empire Strikes Back", ""],
            ])
        let again = try ingest(yaml, [first], db: db)
        #expect(again.summary.counters.inserted == 0)
        #expect(try rows(db, "SELECT title FROM film ORDER BY url") == [["A New Hope"], ["Ōtomo 中国 😀"]])
    }

    @Test func nestedObjectsUpsertAndPresentToManyReplacesTheSet() throws {
        let (_, db) = try ingest(peopleYAML, [page(#"{"id": 1, "dogs": [{"id": 7, "name": "Rex"}, {"id": 8, "name": "Fido"}]}"#)])
        try ingest(peopleYAML, [page(#"{"id": 1, "dogs": [{"id": 8, "name": "Fido II"}]}"#)], db: db)
        #expect(try rows(db, "SELECT person_id, dog_id FROM person_dogs") == [["1", "8"]])
        #expect(try rows(db, "SELECT id, name FROM dog ORDER BY id") == [["7", "Rex"], ["8", "Fido II"]])
        try ingest(peopleYAML, [page(#"{"id": 1, "name": "no dogs key"}"#)], db: db)
        #expect(try rows(db, "SELECT count(*) FROM person_dogs") == [["1"]])
        try ingest(peopleYAML, [page(#"{"id": 1, "dogs": []}"#)], db: db)
        #expect(try rows(db, "SELECT count(*) FROM person_dogs") == [["0"]])
        #expect(try rows(db, "SELECT count(*) FROM dog") == [["2"]], "targets are never deleted")
    }

    @Test func bareIdentitiesLinkOrCreateStubs() throws {
        let (_, db) = try ingest(peopleYAML, [page(#"{"id": 1, "dogs": [7, 8], "best_friend": 9}"#)])
        #expect(try rows(db, "SELECT id, name FROM dog ORDER BY id") == [["7", "NULL"], ["8", "NULL"], ["9", "NULL"]])
        #expect(try rows(db, "SELECT best_id FROM person") == [["9"]])
        // The stub is filled in when its own record arrives.
        try ingest(peopleYAML, [page(#"{"id": 2, "dogs": [{"id": 9, "name": "Laika"}], "best_friend": null}"#)], db: db)
        #expect(try rows(db, "SELECT name FROM dog WHERE id = 9") == [["Laika"]])
        try ingest(peopleYAML, [page(#"{"id": 1, "best_friend": null}"#)], db: db)
        #expect(try rows(db, "SELECT best_id FROM person WHERE id = 1") == [["NULL"]])
    }

    @Test func sameIdentityTwiceInABatchIsOneRowLaterWins() throws {
        let (summary, db) = try ingest(
            peopleYAML,
            [
                page(#"{"id": 1, "name": "A", "email": "e"}, {"id": 1, "name": "B"}"#),
                page(#"{"id": 2, "dogs": [{"id": 5, "name": "x"}]}, {"id": 3, "dogs": [{"id": 5, "name": "y"}]}"#),
            ])
        #expect(
            try rows(db, "SELECT id, name, email FROM person ORDER BY id") == [
                ["1", "B", "e"], ["2", "NULL", "NULL"], ["3", "NULL", "NULL"],
            ])
        #expect(try rows(db, "SELECT id, name FROM dog") == [["5", "y"]])
        #expect(summary.counters.inserted == 4)
    }

    @Test func laterPageWinsWhateverTheLanes() throws {
        var pages: [String] = []
        for p in 0..<40 { pages.append(page((0..<25).map { #"{"id": \#($0), "name": "p\#(p)"}"# }.joined(separator: ","))) }
        for lanes in [1, 2, 4, 8] {
            let (_, db) = try ingest(peopleYAML, pages, lanes: lanes, batchRecords: 60)
            #expect(try rows(db, "SELECT DISTINCT name FROM person") == [["p39"]], "lanes=\(lanes)")
        }
    }

    @Test func badRecordsAreRejectedWholeAndNeighboursSaved() throws {
        let logs = LogCapture()
        let (summary, db) = try ingest(
            peopleYAML,
            [
                page(
                    #"{"id": 1}, {"name": "no id"}, {"id": 2, "dogs": [{"id": 3}, {"name": "dog without id"}]}, {"id": "x"}, {"id": 4, "score": "high"}, {"id": 5, "dogs": {"id": 1}}, {"id": 6}"#
                ),
                #"{"results": [ {"id": 9}"#,
            ], logs: logs)
        #expect(try rows(db, "SELECT id FROM person ORDER BY id") == [["1"], ["6"]])
        #expect(try rows(db, "SELECT count(*) FROM dog") == [["0"]], "no partial row of a rejected record")
        #expect(summary.counters.rejectedRecords == 5)
        #expect(summary.counters.rejectedPages == 1)
        #expect(
            try rows(db, "SELECT entity, coding_path, reason, source, record_index FROM _ingot_rejects ORDER BY rowid LIMIT 6") == [
                ["person", "results[1].id", "identity 'id' is missing", "page-1.json", "1"],
                ["dog", "results[2].dogs[1].id", "identity 'id' is missing", "page-1.json", "2"],
                ["person", "results[3].id", #"expected integer, got string "x""#, "page-1.json", "3"],
                ["person", "results[4].score", #"expected double, got string "high""#, "page-1.json", "4"],
                ["person", "results[5].dogs", "expected an array for to-many relationship, got object", "page-1.json", "5"],
                ["person", "", "invalid JSON at byte 23: unexpected end of input, container not closed", "page-2.json", "NULL"],
            ])
        #expect(try rows(db, "SELECT raw FROM _ingot_rejects WHERE record_index = 3") == [[#"{"id": "x"}"#]])
        #expect(summary.status == .finished)
        #expect(logs.all.contains { $0.contains("msg=record.rejected") && $0.contains("coding_path=results[3].id") })
    }

    @Test func orderedToManyKeepsJSONOrder() throws {
        let yaml = peopleYAML.replacingOccurrences(of: "dogs: {to: dog, many: true}", with: "dogs: {to: dog, many: true, ordered: true}")
        let (_, db) = try ingest(yaml, [page(#"{"id": 1, "dogs": [9, 3, 5]}"#)])
        #expect(try rows(db, "SELECT dog_id FROM person_dogs ORDER BY position") == [["9"], ["3"], ["5"]])
    }

    @Test func missingPolicyIgnoreAndReject() throws {
        let yaml =
            peopleYAML
            .replacingOccurrences(of: "dogs: {to: dog, many: true}", with: "dogs: {to: dog, many: true, missing: ignore}")
            .replacingOccurrences(of: "best: {to: dog, key: best_friend}", with: "best: {to: dog, key: best_friend, missing: reject}")
        let (summary, db) = try ingest(
            yaml, [page(#"{"id": 1, "dogs": [{"id": 3}, 4]}, {"id": 2, "best_friend": 4}, {"id": 5, "best_friend": 3}"#)])
        #expect(try rows(db, "SELECT person_id, dog_id FROM person_dogs") == [["1", "3"]])
        #expect(try rows(db, "SELECT id, best_id FROM person ORDER BY id") == [["1", "NULL"], ["5", "3"]])
        #expect(summary.counters.rejectedRecords == 1)
        #expect(try rows(db, "SELECT coding_path, reason FROM _ingot_rejects") == [["results[1].best_friend", "no 'dog' with identity 4"]])
    }

    @Test func aRejectedReferenceInsideANestedObjectNamesItsWholePath() throws {
        let yaml = """
            version: 1
            name: vets
            records: results
            root: person
            entities:
              person:
                identity: id
                attributes: {id: integer}
                relationships:
                  dogs: {to: dog, many: true}
              dog:
                identity: id
                attributes: {id: integer}
                relationships:
                  vet: {to: vet, missing: reject}
              vet:
                identity: id
                attributes: {id: integer, name: string}
            """
        let (summary, db) = try ingest(
            yaml,
            [page(#"{"id": 1, "dogs": [{"id": 2, "vet": {"id": 7, "name": "Ada"}}]}, {"id": 3, "dogs": [{"id": 4}, {"id": 5, "vet": 8}]}"#)]
        )
        #expect(summary.counters.rejectedRecords == 1)
        #expect(try rows(db, "SELECT coding_path, reason FROM _ingot_rejects") == [["results[1].dogs[1].vet", "no 'vet' with identity 8"]])
        #expect(try rows(db, "SELECT id FROM person") == [["1"]])
    }

    /// Booleans are values of their own up to the store (SQLite keeps 0 and 1): an identity with
    /// a boolean key finds its stored row, within a batch, across batches and across runs.
    @Test func aBooleanIdentityKeyFindsItsStoredRow() throws {
        let yaml = """
            version: 1
            name: flags
            records: "."
            root: flag
            entities:
              flag:
                identity: [id, on]
                attributes: {id: integer, on: bool, label: string}
            """
        let first = #"[{"id": 1, "on": true, "label": "a"}, {"id": 1, "on": false, "label": "b"}, {"id": 1, "on": true, "label": "c"}]"#
        let (summary, db) = try ingest(yaml, [first, #"[{"id": 1, "on": false, "label": "d"}]"#], batchRecords: 2)
        #expect(summary.counters.inserted == 2 && summary.counters.updated == 0, "\(summary.counters)")
        let (again, _) = try ingest(yaml, [#"[{"id": 1, "on": true, "label": "e"}]"#], db: db)
        #expect(again.counters.inserted == 0 && again.counters.updated == 1)
        #expect(try rows(db, "SELECT id, \"on\", label FROM flag ORDER BY \"on\"") == [["1", "0", "d"], ["1", "1", "e"]])
    }

    @Test func compositeIdentityInTheBatchedPath() throws {
        let yaml = """
            version: 1
            name: cards
            records: "."
            root: hand
            entities:
              hand:
                identity: id
                attributes: {id: integer}
                relationships:
                  cards: {to: card, many: true}
                  top: {to: card}
              card:
                identity: [suit, value]
                attributes: {suit: string, value: integer, label: string}
            """
        let (_, db) = try ingest(
            yaml,
            [
                #"[{"id": 1, "cards": [{"suit": "h", "value": 1, "label": "A"}, {"suit": "s", "value": 1}], "top": {"suit": "h", "value": 1}}]"#,
                #"[{"id": 2, "cards": [{"suit": "h", "value": 1, "label": "Ace"}]}]"#,
            ], batchRecords: 1)
        #expect(try rows(db, "SELECT suit, value, label FROM card ORDER BY suit") == [["h", "1", "Ace"], ["s", "1", "NULL"]])
        #expect(
            try rows(db, "SELECT hand_id, card_suit, card_value FROM hand_cards ORDER BY hand_id, card_suit")
                == [["1", "h", "1"], ["1", "s", "1"], ["2", "h", "1"]])
        #expect(try rows(db, "SELECT top_suit, top_value FROM hand WHERE id = 1") == [["h", "1"]])
    }

    @Test func replaceDeletesUntouchedRootRowsOnlyAfterACompleteRun() throws {
        let yaml = peopleYAML.replacingOccurrences(of: "root: person", with: "root: person\nwrite: replace")
        let (_, db) = try ingest(yaml, [page(#"{"id": 1, "dogs": [7]}, {"id": 2, "dogs": [8]}, {"id": 3}"#)])
        // A run with a rejected record deletes nothing.
        let partial = try ingest(yaml, [page(#"{"id": 1}, {"name": "no id"}"#)], db: db)
        #expect(partial.summary.counters.deleted == 0)
        #expect(try rows(db, "SELECT count(*) FROM person") == [["3"]])
        let (summary, _) = try ingest(yaml, [page(#"{"id": 1}, {"id": 3}"#)], db: db)
        #expect(summary.counters.deleted == 1)
        #expect(try rows(db, "SELECT id FROM person ORDER BY id") == [["1"], ["3"]])
        #expect(try rows(db, "SELECT person_id, dog_id FROM person_dogs") == [["1", "7"]])
        #expect(try rows(db, "SELECT count(*) FROM dog") == [["2"]], "targets are never deleted")
    }

    @Test func countsArePerEntityInTheSummaryAndTheRunsTable() throws {
        let (first, db) = try ingest(
            peopleYAML,
            [
                page(
                    #"""
                    {"id": 1, "dogs": [7, 8]}, {"id": 2, "dogs": [{"id": 7, "name": "Rex"}]}, {"id": "bad"}
                    """#)
            ])
        // Person 1 and 2 inserted; dog 8 a stub (only its identity), dog 7 created with a name; one person rejected.
        #expect(first.counters.entities["person"] == EntityCounts(inserted: 2, updated: 0, stubs: 0, rejected: 1))
        // Dog is the target of stubbing relationships: its stubs still unfilled are counted at the end.
        #expect(first.counters.entities["dog"] == EntityCounts(inserted: 2, updated: 0, stubs: 1, rejected: 0, unfilled: 1))
        let (second, _) = try ingest(peopleYAML, [page(#"{"id": 1, "name": "Ada"}, {"id": 3}"#)], db: db)
        #expect(second.counters.entities["person"] == EntityCounts(inserted: 1, updated: 1, stubs: 1, rejected: 0))
        #expect(second.counters.entities["dog"] == EntityCounts(unfilled: 1), "dog 8, stubbed by the first run")
        let (third, _) = try ingest(peopleYAML, [page(#"{"id": 2, "dogs": [{"id": 8, "name": "Fido"}]}"#)], db: db)
        #expect(third.counters.entities["dog"] == EntityCounts(inserted: 0, updated: 1, unfilled: 0))
        #expect(
            try rows(db, "SELECT entity_counts FROM _ingot_runs ORDER BY rowid") == [
                [
                    #"{"dog":{"inserted":2,"updated":0,"unchanged":0,"stubs":1,"rejected":0,"unfilled":1},"person":{"inserted":2,"updated":0,"unchanged":0,"stubs":0,"rejected":1}}"#
                ],
                [
                    #"{"dog":{"inserted":0,"updated":0,"unchanged":0,"stubs":0,"rejected":0,"unfilled":1},"person":{"inserted":1,"updated":1,"unchanged":0,"stubs":1,"rejected":0}}"#
                ],
                [
                    #"{"dog":{"inserted":0,"updated":1,"unchanged":0,"stubs":0,"rejected":0,"unfilled":0},"person":{"inserted":0,"updated":1,"unchanged":0,"stubs":0,"rejected":0}}"#
                ],
            ])
    }

    @Test func rejectsAreCountedByReason() throws {
        let yaml = peopleYAML.replacingOccurrences(
            of: "best: {to: dog, key: best_friend}", with: "best: {to: dog, key: best_friend, missing: reject}")
        let (summary, db) = try ingest(
            yaml,
            [
                page(
                    #"""
                    {"id": 1}, {"name": "no id"}, {"id": "x"}, {"id": 2, "born": "yesterday"}, {"id": 3, "seen": 1e300},
                    {"id": 4, "best_friend": 99}, {"id": 5, "dogs": {"id": 1}}
                    """#),
                "not json", #"{"data": []}"#,
            ])
        #expect(
            summary.counters.rejectsByReason == [
                "missing_identity": 1, "wrong_type": 2, "not_a_date": 1, "missing_reference": 1, "wrong_shape": 1, "not_json": 1,
                "no_records": 1,
            ], "\(summary.counters.rejectsByReason)")
        #expect(
            try rows(db, "SELECT reason_code, count(*) FROM _ingot_rejects GROUP BY 1 ORDER BY 1") == [
                ["missing_identity", "1"], ["missing_reference", "1"], ["no_records", "1"], ["not_a_date", "1"], ["not_json", "1"],
                ["wrong_shape", "1"], ["wrong_type", "2"],
            ])
        #expect(
            try rows(db, "SELECT reject_counts FROM _ingot_runs") == [
                [
                    #"{"missing_identity":1,"missing_reference":1,"no_records":1,"not_a_date":1,"not_json":1,"wrong_shape":1,"wrong_type":2}"#
                ]
            ])
    }

    @Test func oneIdentityLookupPerEntityPerBatch() throws {
        let statements = Mutex<[String]>([])
        var pages: [String] = []
        for p in 0..<10 {
            pages.append(
                page(
                    (0..<50).map { i in #"{"id": \#(p * 50 + i), "dogs": [{"id": \#(i)}], "best_friend": \#(i + 100)}"# }.joined(
                        separator: ",")))
        }
        let (summary, _) = try ingest(peopleYAML, pages, batchRecords: 100, observer: { sql in statements.withLock { $0.append(sql) } })
        #expect(summary.counters.records == 500)
        let lookups = statements.withLock { $0 }.filter { $0.contains("json_each") }
        // 500 records in batches of 100: 5 batches × 2 entities (person, dog).
        #expect(lookups.count == 10)
        #expect(lookups.filter { $0.contains("CROSS JOIN \"person\" ON") }.count == 5)
        #expect(lookups.filter { $0.contains("CROSS JOIN \"dog\" ON") }.count == 5)
    }

    /// A batch's new rows go in by one statement per shape, reading them from a ``RowFeed``,
    /// whatever their count (multi-row `VALUES` needed a statement per count).
    @Test func newRowsGoInByOneStatementWhateverTheirCount() throws {
        let statements = Mutex<[String]>([])
        var next = 0
        let pages = (1...40).map { count in
            defer { next += count }
            return page((0..<count).map { #"{"id": \#(next + $0), "name": "n"}"# }.joined(separator: ","))
        }
        // A batch per page: its byte limit is reached by any page (pages are not split below 1000 records).
        let (summary, _) = try ingest(
            peopleYAML, pages, lanes: 1, batchRecords: 1000, batchBytes: 1, observer: { sql in statements.withLock { $0.append(sql) } })
        #expect(summary.counters.inserted == 820)
        let inserts = statements.withLock { $0 }.filter { $0.hasPrefix("INSERT INTO \"person\"") }
        #expect(inserts.count == 40, "a statement a batch")
        #expect(Set(inserts) == ["INSERT INTO \"person\" (\"id\", \"name\") SELECT c0, c1 FROM ingot_feed_2(?1)"])
    }

    @Test func aBatchAlsoEndsAtItsByteLimit() throws {
        let statements = Mutex<[String]>([])
        // Ten pages; at most two pages' bytes a batch: five batches, not one of 200 records.
        let pages = (0..<10).map { p in page((0..<20).map { #"{"id": \#(p * 20 + $0), "name": "n"}"# }.joined(separator: ",")) }
        let twoPages = 2 * (pages.map(\.utf8.count).max() ?? 0)
        let (summary, db) = try ingest(
            peopleYAML, pages, batchRecords: 1000, batchBytes: twoPages, observer: { sql in statements.withLock { $0.append(sql) } })
        #expect(summary.counters.inserted == 200)
        #expect(statements.withLock { $0 }.filter { $0.contains("CROSS JOIN \"person\" ON") }.count == 5)
        #expect(try rows(db, "SELECT count(*) FROM person") == [["200"]])
    }
}

/// A source that serves page k only once the clock ticked k - 1 times and k - 1 progress lines
/// were logged: the run is still going when they come, whatever the speed of the machine.
private final class ProgressGatedSource: PageSource, @unchecked Sendable {  // used from the source queue only
    private let pages: [String]
    private let logs: LogCapture
    private let tick: () -> Void
    private var served = 0
    init(_ pages: [String], logs: LogCapture, tick: @escaping () -> Void) {
        self.pages = pages
        self.logs = logs
        self.tick = tick
    }
    func next() throws -> Page? {
        guard served < pages.count else { return nil }
        if served > 0 { tick() }
        waitUntil { logs.all.filter { $0.contains("msg=run.progress") }.count >= served }
        served += 1
        return Page(seq: served, source: "slow-\(served).json", bytes: Array(pages[served - 1].utf8))
    }
}

struct ProgressTests {
    @Test(.hangGuard) func longRunsLogProgressAtAnInterval() throws {
        let config = try PipelineConfig.parse(text: peopleYAML, path: "p.yml")
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("p.db").path
        options.progressInterval = 30
        options.batchRecords = 1
        let timers = ManualTimers()
        options.timers = timers
        let logs = LogCapture()
        let pages = (0..<3).map { page(#"{"id": \#($0)}"#) }
        let summary = PipelineRunner(config: config, options: options, logger: logs.logger)
            .run(
                source: ProgressGatedSource(
                    pages, logs: logs,
                    tick: {
                        // The ticker starts beside the source: tick once it is there.
                        waitUntil { timers.repeating > 0 }
                        timers.advance(by: 30)
                    }))
        #expect(summary.counters.pages == 3)
        // One line per tick of the run's clock, and no other.
        let progress = logs.all.filter { $0.contains("msg=run.progress") }
        #expect(progress.count == 2, "\(logs.all)")
        for key in ["pages=", "records=", "records_per_s=", "rejected_records=", "rejected_pages=", "elapsed_s="] {
            #expect(progress.allSatisfy { $0.contains(key) }, "\(key)")
        }
        #expect(logs.all.last?.contains("msg=run.summary") == true)
    }
}

/// A source that serves its first page, then waits on `gate` before the rest.
private final class GatedPageSource: PageSource, @unchecked Sendable {  // used from the source queue only
    private let pages: [String]
    private var served = 0
    let gate = DispatchSemaphore(value: 0)
    init(_ pages: [String]) { self.pages = pages }
    func next() throws -> Page? {
        guard served < pages.count else { return nil }
        if served == 1 { gate.wait() }
        served += 1
        return Page(seq: served, source: "gated-\(served).json", bytes: Array(pages[served - 1].utf8))
    }
}

/// Batches share a transaction until it holds `commitRecords` records, or has been open
/// `commitInterval` seconds.
struct TransactionTests {
    @Test func batchesShareATransactionUntilItHoldsCommitRecords() throws {
        let statements = Mutex<[String]>([])
        let pages = (0..<10).map { p in page((0..<50).map { #"{"id": \#(p * 50 + $0)}"# }.joined(separator: ",")) }
        let (summary, db) = try ingest(
            peopleYAML, pages, batchRecords: 100, commitRecords: 250, observer: { sql in statements.withLock { $0.append(sql) } })
        #expect(summary.counters.inserted == 500)
        // Commits that carry person rows: after batch 3 (300 records ≥ 250), then at the end.
        var dirty = false
        var commits = 0
        for sql in statements.withLock({ $0 }) {
            if sql.hasPrefix("INSERT INTO \"person\"") { dirty = true }
            if sql.hasPrefix("COMMIT") && dirty {
                commits += 1
                dirty = false
            }
        }
        #expect(commits == 2)
        #expect(try rows(db, "SELECT count(*) FROM person") == [["500"]])
        #expect(try rows(db, "SELECT pages, records, inserted, status FROM _ingot_runs") == [["10", "500", "500", "finished"]])
    }

    @Test(.hangGuard) func anOpenTransactionIsCommittedAfterTheIntervalWhenTheSourceWaits() throws {
        let config = try PipelineConfig.parse(text: peopleYAML, path: "p.yml")
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("t.db").path
        options.progressInterval = 0
        options.batchRecords = 1
        options.commitInterval = 60
        let timers = ManualTimers()
        options.timers = timers
        let source = GatedPageSource([page(#"{"id": 1}"#), page(#"{"id": 2}"#)])
        let done = DispatchSemaphore(value: 0)
        let ended = Mutex<RunSummary?>(nil)
        let path = options.databasePath
        DispatchQueue.global().async { [options] in
            let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
            ended.withLock { $0 = summary }
            done.signal()
        }
        // The first page is saved, then the source waits: the interval commits it (only a
        // commit makes it visible to another connection; the time limit ends a wait that never
        // comes). The clock moves only when the test moves it.
        var seen: [[String]] = []
        waitUntil {
            if ended.withLock({ $0 }) != nil { return true }
            timers.advance(by: 60)
            guard FileManager.default.fileExists(atPath: path) else { return false }
            seen = (try? rows(path, "SELECT id FROM person")) ?? []
            return !seen.isEmpty
        }
        #expect(ended.withLock { $0 } == nil, "the run ended early: \(String(describing: ended.withLock { $0 }?.error))")
        #expect(seen == [["1"]])
        source.gate.signal()
        done.wait()
        #expect(try rows(path, "SELECT id FROM person ORDER BY id") == [["1"], ["2"]])
    }

    /// A batch that fails rolls back the open transaction (the batches saved in it before too);
    /// what was committed stays, and `--resume` redoes the rest exactly.
    @Test func aFailingBatchRollsBackItsTransactionAndResumeRedoesIt() throws {
        let config = try PipelineConfig.parse(text: peopleYAML, path: "p.yml")
        let dir = temporaryDirectory()
        let pages = dir.appendingPathComponent("pages")
        try FileManager.default.createDirectory(at: pages, withIntermediateDirectories: true)
        // 12 pages of 10 persons: ids 0..<120.
        for p in 0..<12 {
            let records = (0..<10).map { #"{"id": \#(p * 10 + $0), "name": "n\#(p * 10 + $0)"}"# }.joined(separator: ",")
            try page(records).write(
                to: pages.appendingPathComponent(String(format: "page-%02d.json", p)), atomically: false, encoding: .utf8)
        }
        var options = RunOptions()
        options.databasePath = dir.appendingPathComponent("r.db").path
        options.progressInterval = 0
        options.batchRecords = 10
        options.commitRecords = 40  // batches 1-4 commit together, then 5-8, then 9-12
        // Writing person 75 (in batch 8) fails as a full disk would fail a write: not a value the
        // database refuses (those are rejected, RefusedValueTests), an error of the database
        // itself (SQLITE_ERROR: integer overflow in abs()).
        _ = try SQLiteStore(path: options.databasePath, model: config.model).close()
        try DatabaseQueue(path: options.databasePath).write { db in
            try db.execute(
                sql:
                    "CREATE TRIGGER refuse BEFORE INSERT ON person WHEN NEW.id = 75 BEGIN SELECT abs(NEW.id - 75 - 9223372036854775807 - 1); END"
            )
        }
        func run(resume: Bool) throws -> RunSummary {
            var options = options
            options.resume = resume
            return PipelineRunner(config: config, options: options, logger: LogCapture().logger)
                .run(source: try DirectoryPageSource(directory: pages.path, glob: "page-*.json"))
        }
        let failed = try run(resume: false)
        #expect(failed.status == .failed)
        #expect(failed.error?.contains("integer overflow") == true, "\(failed.error ?? "")")
        // The error says what the run was writing: the entity, the batch and its first page.
        #expect(failed.error?.contains("[entity person, batch 8, page 8]") == true, "\(failed.error ?? "")")
        // Batches 1-4 were committed; 5-7 shared the transaction batch 8 rolled back.
        #expect(failed.counters.records == 40)
        #expect(try rows(options.databasePath, "SELECT count(*), max(id) FROM person") == [["40", "39"]])
        #expect(try rows(options.databasePath, "SELECT records, last_seq FROM _ingot_runs") == [["40", "4"]])

        try DatabaseQueue(path: options.databasePath).write { db in try db.execute(sql: "DROP TRIGGER refuse") }
        let resumed = try run(resume: true)
        #expect(resumed.status == .finished, "\(resumed.error ?? "")")
        #expect(resumed.runID == failed.runID)
        #expect(resumed.counters.records == 120)
        #expect(resumed.counters.inserted == 120)
        #expect(
            try rows(options.databasePath, "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM person") == [
                ["120", "120", "0", "119"]
            ])
    }

    @Test func theNextBatchSeesRowsOfUncommittedBatches() throws {
        // Batches of 1 record, one commit at the end: every later page updates a row that only
        // the open transaction holds (the read connection does not see it).
        let pages = (0..<6).map { page(#"{"id": 7, "name": "v\#($0)", "dogs": [{"id": 1, "name": "d\#($0)"}]}"#) }
        let (summary, db) = try ingest(peopleYAML, pages, lanes: 1, batchRecords: 1, commitRecords: 1000)
        #expect(summary.counters.inserted == 2)
        #expect(summary.counters.updated == 0, "both rows were inserted by this run")
        #expect(try rows(db, "SELECT id, name FROM person") == [["7", "v5"]])
        #expect(try rows(db, "SELECT id, name FROM dog") == [["1", "d5"]])
        #expect(try rows(db, "SELECT person_id, dog_id FROM person_dogs") == [["7", "1"]])
    }
}
