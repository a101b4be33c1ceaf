import Foundation
import Testing

@testable import Ingot

/// Records that are not an array (docs/pipelines.md, "Records that are not an array"): a
/// dictionary's values with their keys (npm's `versions`), parallel columns zipped (Open-Meteo's
/// `hourly`), each rewritten into the array every reader of the page sees.
@Suite struct RecordsLayoutTests {
    static let npm = """
        version: 1
        name: npm
        records: {values: versions, key: version}
        root: release
        entities:
          release:
            identity: version
            attributes: {version: string, name: string, deprecated: {type: string, key: deprecated}}
        """

    /// Each member's value is a record, given its key; a record with the key of its own keeps
    /// its own; the rest of the page stays readable; an empty dictionary (or one answered as `[]`)
    /// holds no record.
    @Test func aDictionarysValuesAreRecordsWithTheirKeys() throws {
        let pages = [
            #"{"name": "left-pad", "versions": {"1.0.0": {"name": "left-pad"}, "1.1.0": {"name": "left-pad", "deprecated": "use String.padStart"}, "1.2.0": {}}}"#,
            #"{"name": "left-pad", "versions": {"2.0.0": {"version": "2.0.0-own", "name": "lp"}, "a\"b": {"name": "x"}}}"#,
            #"{"name": "none", "versions": {}}"#,
            #"{"name": "php", "versions": []}"#,
        ]
        let (summary, db) = try ingest(Self.npm, pages)
        #expect(summary.status == .finished && summary.counters.rejectedRecords == 0 && summary.counters.rejectedPages == 0)
        #expect(
            try rows(db, "SELECT version, name, deprecated FROM release ORDER BY version") == [
                ["1.0.0", "left-pad", "NULL"], ["1.1.0", "left-pad", "use String.padStart"], ["1.2.0", "NULL", "NULL"],
                ["2.0.0-own", "lp", "NULL"], ["a\"b", "x", "NULL"],
            ])
    }

    /// With `value:`, a scalar value becomes a record of its key and the value (npm's `time`).
    @Test func scalarValuesAreGivenAName() throws {
        let yaml = """
            version: 1
            name: npm-time
            records: {values: time, key: version, value: published}
            root: release
            entities: {release: {identity: version, attributes: {version: string, published: {type: date, format: iso8601}}}}
            """
        let (summary, db) = try ingest(yaml, [#"{"time": {"1.0.0": "2014-03-14T07:35:00.000Z", "1.0.1": null}}"#])
        #expect(summary.status == .finished && summary.counters.records == 2 && summary.counters.rejectedRecords == 0)
        #expect(try rows(db, "SELECT version, published IS NULL FROM release ORDER BY version") == [["1.0.0", "0"], ["1.0.1", "1"]])
    }

    static let meteo = """
        version: 1
        name: meteo
        records: {columns: hourly}
        root: hour
        entities:
          hour:
            identity: time
            attributes: {time: string, temperature_2m: double, precipitation: double}
        """

    /// Parallel arrays are zipped: record i holds every column's ith value (nulls clear).
    @Test func columnsAreZippedIntoRecords() throws {
        let page = #"""
            {"latitude": 52.52, "hourly_units": {"time": "iso8601"},
             "hourly": {"time": ["2026-12-06T00:00", "2026-12-06T01:00", "2026-12-06T02:00"],
                        "temperature_2m": [1.5, 1.25, -0.5], "precipitation": [0, null, 0.3]}}
            """#
        let (summary, db) = try ingest(Self.meteo, [page])
        #expect(summary.status == .finished && summary.counters.records == 3 && summary.counters.rejectedRecords == 0)
        #expect(
            try rows(db, "SELECT time, temperature_2m, precipitation FROM hour ORDER BY time") == [
                ["2026-12-06T00:00", "1.5", "0.0"], ["2026-12-06T01:00", "1.25", "NULL"], ["2026-12-06T02:00", "-0.5", "0.3"],
            ])
    }

    /// Columns that cannot be zipped reject the page, naming the column and why; the next page
    /// is read all the same.
    @Test(arguments: [
        (#"{"hourly": {"time": ["a", "b"], "temperature_2m": [1.5]}}"#, #"column "temperature_2m" has 1 values where "time" has 2"#),
        (#"{"hourly": {"time": ["a"], "temperature_2m": 1.5}}"#, #"column "temperature_2m" is number, not an array"#),
        (#"{"hourly": "none"}"#, "expected an array of records at 'hourly', got string"),
    ])
    func columnsThatCannotBeZippedRejectThePage(page: String, reason: String) throws {
        let good = #"{"hourly": {"time": ["c"], "temperature_2m": [2.0], "precipitation": [0]}}"#
        let (summary, db) = try ingest(Self.meteo, [page, good])
        #expect(summary.status == .finished && summary.counters.rejectedPages == 1 && summary.counters.records == 1)
        let stored = try rows(db, "SELECT coding_path, reason FROM _ingot_rejects")
        #expect(stored.count == 1 && stored.first?[0] == "hourly" && stored.first?[1].contains(reason) == true, "\(stored)")
    }

    /// A record that breaks a rule is rejected with its place in the rewritten array and its
    /// text as the pipeline read it (the key given to it included).
    @Test func aBadRecordIsRejectedWithItsKey() throws {
        let yaml = Self.npm.replacingOccurrences(of: "name: string", with: "name: integer")
        let (summary, db) = try ingest(yaml, [#"{"versions": {"1.0.0": {"name": 1}, "1.0.1": {"name": "x"}}}"#])
        #expect(summary.counters.records == 2 && summary.counters.rejectedRecords == 1)
        let stored = try rows(db, "SELECT coding_path, raw FROM _ingot_rejects")
        #expect(stored == [["versions[1].name", #"{"version":"1.0.1","name": "x"}"#]], "\(stored)")
    }

    /// What a layout cannot be is refused at validation, with the file's line.
    @Test(arguments: [
        ("records: {values: versions}", "needs key: NAME"),
        ("records: {columns: hourly, key: k}", "takes no key or value"),
        ("records: {values: v, columns: c, key: k}", "records is a key path"),
        ("records: {values: v, key: k, value: k}", "two different, non-empty names"),
        ("records: {value: v}", "records is a key path"),
        ("records: {values: v, key: k, valeu: x}", "unknown key 'valeu' (did you mean 'value'?)"),
    ])
    func layoutsThatCannotBeReadAreRefused(line: String, message: String) {
        let text = Self.npm.replacingOccurrences(of: "records: {values: versions, key: version}", with: line)
        let problems = configProblems(text) ?? ""
        #expect(problems.contains("test.yml:3:") && problems.contains(message), "\(problems)")
    }

    /// JSON Lines pages are records line by line: no layout applies.
    @Test func jsonLinesTakeNoLayout() {
        let text = """
            version: 1
            name: x
            source: {files: {dir: ., format: jsonl}}
            records: {columns: hourly}
            root: hour
            entities: {hour: {identity: time, attributes: {time: string}}}
            """
        #expect(configProblems(text)?.contains("test.yml:4:") == true)
    }

    /// The rewritten page is what pagination, `for_each` and `rejects --raw` read: the records'
    /// count, the last record, record i's exact text.
    @Test func everyReaderSeesTheRewrittenArray() throws {
        let framing = RecordFraming.array(at: ["data", "versions"], layout: .values(key: "v", value: nil))
        let bytes = Array(#"{"next": "x", "data": {"versions": {"1": {"a": 1}, "2": {"v": "own"}}}}"#.utf8)
        let document = try framing.parse(bytes)
        guard case .success(let records) = framing.records(in: document) else {
            Issue.record("no records")
            return
        }
        #expect(records.count == 2 && records.last(in: document)?.rawText == #"{"v": "own"}"#)
        #expect(document.root["next"]?.string == "x")
        #expect(framing.rawRecord(0, in: bytes) == #"{"v":"1","a": 1}"#)
        let injected = framing.injecting([InjectedValue(key: "parent", json: "7")], into: bytes).map { String(decoding: $0, as: UTF8.self) }
        #expect(injected == #"{"next": "x", "data": {"versions": [{"parent":7,"v":"1","a": 1},{"parent":7,"v": "own"}]}}"#)
    }

    static let sideloads = """
        version: 1
        name: zd
        records: {paths: {users: user, tickets: ticket}}
        entities:
          ticket:
            identity: id
            attributes: {id: integer, subject: string}
            relationships: {requester: {to: user, key: requester_id}}
          user:
            identity: id
            attributes: {id: integer, name: string}
        """

    /// Several arrays of one page, each of its entity, in the order listed; an absent array holds
    /// none; one that is not an array rejects the page naming it; the page's other members stay.
    @Test func severalArraysOfAPageAreEachTheirEntity() throws {
        let pages = [
            #"{"tickets": [{"id": 1, "subject": "a", "requester_id": 7}], "users": [{"id": 7, "name": "Ada"}], "next_page": null}"#,
            #"{"tickets": [{"id": 2, "subject": "b", "requester_id": 8}]}"#,
            #"{"tickets": [{"id": 3}], "users": {"id": 9}}"#,
            #"{"users": [], "tickets": []}"#,
        ]
        let (summary, db) = try ingest(Self.sideloads, pages)
        #expect(summary.status == .finished && summary.counters.records == 3 && summary.counters.rejectedPages == 1, "\(summary.counters)")
        #expect(try rows(db, "SELECT id, subject, requester_id FROM ticket ORDER BY id") == [["1", "a", "7"], ["2", "b", "8"]])
        #expect(try rows(db, "SELECT id, name FROM user ORDER BY id") == [["7", "Ada"], ["8", "NULL"]], "8 is a stub")
        #expect(
            try rows(db, "SELECT reason FROM _ingot_rejects").first?.first?.contains("expected an array of records at 'users', got object")
                == true)
        // A bad record is named by its own array's path.
        let bad = try ingest(Self.sideloads, [#"{"users": [{"id": 1}, {"id": "x"}], "tickets": [{"id": 5}, {"id": []}]}"#])
        #expect(bad.summary.counters.rejectedRecords == 2)
        #expect(try rows(bad.db, "SELECT coding_path FROM _ingot_rejects ORDER BY coding_path") == [["tickets[1].id"], ["users[1].id"]])
    }

    @Test(arguments: [
        (
            "records: {paths: {users: user, tickets: ticket}}", "records: {paths: {users: user, tickets: ticket}}\nroot: ticket",
            "leave root out"
        ),
        ("records: {paths: {users: user, tickets: ticket}}", "records: {paths: {users: person, tickets: ticket}}", "entity 'person'"),
        (
            "records: {paths: {users: user, tickets: ticket}}", "records: {paths: {users: user, tickets: ticket}}\nwrite: replace",
            "sideloads are partial"
        ),
        ("records: {paths: {users: user, tickets: ticket}}", "records: {paths: {users: user}, columns: x}", "takes nothing else"),
    ])
    func pathsThatCannotBeReadAreRefused(from: String, to: String, message: String) {
        let problems = configProblems(Self.sideloads.replacingOccurrences(of: from, with: to)) ?? ""
        #expect(problems.contains(message), "\(problems)")
    }
}
