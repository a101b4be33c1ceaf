import Foundation
import Testing

@testable import Ingot

/// The store seam: the same pages through SQLite and through `MemoryStore` (a backend written
/// against the public seam alone, with no merge rule of its own) end in the same state and the
/// same counts. The merge rules live above the store.
struct StoreSeamTests {
    /// A model and pages that exercise every merge rule: nested objects, bare references under
    /// each policy, a composite identity, ordered links, booleans, dates, JSON, escapes, a
    /// rejected record and a rejected page. Shared with ``PostgresTests``.
    static let yaml = personPipeline(
        "seam",
        attributes: ["active: bool", #"born: {type: date, format: "yyyy-MM-dd"}"#, "seen: {type: date, format: iso8601}", "meta: json"],
        relationships: ["vet: {to: vet, missing: ignore}", "friends: {to: person, many: true, ordered: true}"],
        entities: ["vet:\n  identity: [city, license]\n  attributes: {city: string, license: integer, name: string}"])

    static let pages = [
        #"{"results": [{"id": 1, "name": "Ada\ttab \"q\" \\ back", "origin": {"country": {"name": "UK"}}, "active": true, "dogs": [7, {"id": 8, "name": "Rex"}], "best_friend": 9, "meta": {"b": [1, 2.5], "a": null}, "seen": "2024-02-03T04:05:06.789+02:00"},"#
            + #"{"id": 2, "name": "Bob\nnewline", "score": 1.0, "born": "1990-02-03", "vet": {"city": "Oslo", "license": 3}, "friends": [1, 3, 1], "seen": "2024-02-03"}, {"id": "bad"}]}"#,
        #"{"results": [{"id": 1, "name": null, "active": false, "dogs": [{"id": 7, "name": "Fido"}]}, {"id": 3, "origin": {}, "vet": {"city": "Oslo", "license": 3, "name": "Dr No"}},"#
            + #"{"id": 2, "vet": {"city": "Rome", "license": 1}, "friends": []}, {"id": 4, "best_friend": {"id": 9, "name": "Max"}}]}"#,
        #"not json"#,
        #"{"results": [{"id": 3, "name": "Cy", "dogs": [], "friends": [2, 1]}, {"id": 1, "score": 2.25, "meta": "text"}]}"#,
    ]

    /// SQLite's tables as text, in the column order of the layouts, sorted.
    /// A SQLite database's tables as the memory store's `dump()` prints them.
    static func sqliteDump(_ db: String, _ model: EntityModel) throws -> [String: [[String]]] {
        var out: [String: [[String]]] = [:]
        for layout in EntityLayout.layouts(of: model) {
            let columns = layout.columns.map { "\"\($0.name)\"" }.joined(separator: ", ")
            out[layout.table] = try rows(db, "SELECT \(columns) FROM \"\(layout.table)\"").sorted { $0.lexicographicallyPrecedes($1) }
            for toMany in layout.toMany where toMany.hasJoinTable {
                let linkColumns = (toMany.sourceColumns + toMany.targetColumns + (toMany.isOrdered ? ["position"] : [])).map { "\"\($0)\"" }
                out[toMany.joinTable] = try rows(db, "SELECT \(linkColumns.joined(separator: ", ")) FROM \"\(toMany.joinTable)\"")
                    .sorted { $0.lexicographicallyPrecedes($1) }
            }
        }
        return out
    }

    /// Entities and columns travel by position: a store opened for another model is refused
    /// before anything is written.
    @Test func aStoreOpenedForAnotherModelIsRefused() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "seam.yml")
        let other = try PipelineConfig.parse(
            text: "version: 1\nname: other\nroot: a\nentities: {a: {identity: id, attributes: {id: integer}}}", path: "other.yml")
        let memory = MemoryStore(model: other.model)
        var options = RunOptions()
        options.progressInterval = 0
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: MemoryPageSource(Self.pages), store: memory)
        #expect(summary.status == .failed && summary.failureKind == .configuration)
        #expect(summary.error?.contains("opened for another model") == true, "\(summary.error ?? "")")
        let empty = memory.dump().values.allSatisfy(\.isEmpty)
        #expect(empty, "nothing was written")
    }

    @Test(arguments: [1, 2, 50])
    func theMemoryBackendEndsInSQLitesState(batchRecords: Int) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "seam.yml")
        let (sqlite, db) = try ingest(Self.yaml, Self.pages, batchRecords: batchRecords)
        let memory = MemoryStore(model: config.model)
        var options = RunOptions()
        options.batchRecords = batchRecords
        options.progressInterval = 0
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: MemoryPageSource(Self.pages), store: memory)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters == sqlite.counters)
        let expected = try Self.sqliteDump(db, config.model)
        let got = memory.dump()
        for table in expected.keys.sorted() {
            #expect(got[table] == expected[table], "table \(table)")
        }
        // Real data in every table (the comparison is not between empty states).
        #expect(expected.allSatisfy { !$0.value.isEmpty }, "\(expected.filter { $0.value.isEmpty }.keys)")
    }

    @Test func theMemoryBackendReplacesAndCountsStubsLikeSQLite() throws {
        let yaml = Self.yaml.replacingOccurrences(of: "root: person", with: "root: person\nwrite: replace")
        let config = try PipelineConfig.parse(text: yaml, path: "seam.yml")
        let first = Array(Self.pages[0...1])
        let second = [#"{"results": [{"id": 2, "name": "Bo", "dogs": [11]}]}"#]
        let (_, db) = try ingest(yaml, first)
        let (sqlite, _) = try ingest(yaml, second, db: db)
        let memory = MemoryStore(model: config.model)
        var options = RunOptions()
        options.progressInterval = 0
        for pages in [first, second] {
            let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
                .run(source: MemoryPageSource(pages), store: memory)
            #expect(summary.status == .finished)
            if pages == second { #expect(summary.counters == sqlite.counters) }
        }
        #expect(sqlite.counters.deleted == 3)
        #expect(sqlite.counters.entities["dog"]?.unfilled != nil)
        #expect(memory.dump() == (try Self.sqliteDump(db, config.model)))
    }
}
