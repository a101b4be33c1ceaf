import Foundation
import Testing

@testable import Ingot

/// `ingot export`'s walk over a table: keyset pages in identity order, composite identities too.
struct RecordExporterTests {
    static let yaml = """
        version: 1
        name: vets
        records: results
        root: vet
        entities:
          vet:
            identity: [city, license]
            attributes: {city: string, license: integer, name: string}
            relationships:
              patients: {to: pet, many: true}
          pet:
            identity: id
            attributes: {id: integer, name: string}
        """

    /// Two relationships on one key (Reddit's `parent_id`: a comment's parent is a comment or a
    /// link, each relationship with its pattern): loaded by relationship, so each record's key
    /// holds its one reference at `--depth 0` (one was written `null` over it), and the bare
    /// identity at `--depth 1` (a nested object was read back by both: a bogus row). Run back
    /// with the same pipeline, the output gives the same tables at both depths.
    @Test(arguments: [0, 1])
    func referencesOfSeveralKindsExportAndReadBack(depth: Int) throws {
        let yaml = DiscriminatedReferenceTests.reddit(onInvalid: true)
            .replacingOccurrences(of: #"pattern: "^(t1_.+)$""#, with: #"pattern: "^(t1_.+)$", template: "{}""#)
            .replacingOccurrences(of: #"pattern: "^(t3_.+)$""#, with: #"pattern: "^(t3_.+)$", template: "{}""#)
            .replacingOccurrences(of: ##"pattern: "^#(\\w+)$""##, with: ##"pattern: "^#(\\w+)$", template: "#{}""##)
        let config = try PipelineConfig.parse(text: yaml, path: "reddit.yml")
        let (first, db) = try ingest(yaml, [DiscriminatedReferenceTests.page])
        #expect(first.status == .finished, "\(first.error ?? "")")
        #expect(
            try rows(db, "SELECT name, coalesce(parent_comment_id, '-'), coalesce(parent_link_id, '-') FROM comment ORDER BY name")
                == [["t1_x", "-", "t3_a"], ["t1_y", "t1_x", "-"], ["t1_z", "-", "-"]])

        var records: [String] = []
        for (entity, kind) in [("link", "t3"), ("comment", "t1")] {
            try RecordExporter(config: config, location: try StoreLocation(db), entity: entity, filters: [], depth: depth).forEachRecord {
                records.append($0)
                #expect($0.contains(#""kind":"\#(kind)""#), "\($0)")
            }
        }
        let parents = try records.compactMap { text -> String? in
            let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
            let data = try #require(object["data"] as? [String: Any])
            guard (data["name"] as? String)?.hasPrefix("t1_") == true else { return nil }
            return "\(data["name"] ?? ""):\(data["parent_id"].map { "\($0)" } ?? "absent")"
        }
        #expect(parents == ["t1_x:t3_a", "t1_y:t1_x", "t1_z:<null>"], "\(records)")

        let page = #"{"kind": "Listing", "data": {"children": [\#(records.joined(separator: ","))]}}"#
        let (again, copy) = try ingest(yaml, [page])
        #expect(again.status == .finished && again.counters.rejectedRecords == 0, "\(again.error ?? "")")
        for table in ["link", "comment", "tag", "comment_tags"] {
            func sorted(_ db: String) throws -> [[String]] { try rows(db, "SELECT * FROM \(table)").sorted { "\($0)" < "\($1)" } }
            #expect(try sorted(copy) == sorted(db), "\(table)")
        }
    }

    /// A composite identity is walked column by column (`city > x OR (city = x AND license > y)`),
    /// across pages smaller than the table: every row once, in identity order, and the records
    /// ingest back into the same tables.
    @Test func compositeIdentitiesExportInKeysetPages() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "vets.yml")
        let cities = ["Oslo", "Rome", "Ås", "Bergen"]
        var records: [String] = []
        for k in 0..<23 {
            let patients = k % 3 == 0 ? #", "patients": [\#(k), {"id": \#(k + 100), "name": "P\#(k)"}]"# : ""
            records.append(#"{"city": "\#(cities[k % 4])", "license": \#(k % 5), "name": "V\#(k)"\#(patients)}"#)
        }
        let page = #"{"results": [\#(records.joined(separator: ", "))]}"#
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("vets.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource([page]))
        #expect(summary.status == .finished && summary.counters.rejectedRecords == 0)
        let stored = try rows(db, "SELECT city, license FROM vet ORDER BY city, license")
        #expect(stored.count == 20)  // 23 records, 3 of them the same vet again

        var exporter = try RecordExporter(config: config, location: try StoreLocation(db), entity: nil, filters: [], depth: 1)
        exporter.chunk = 3
        var exported: [String] = []
        try exporter.forEachRecord { exported.append($0) }
        let keys = try exported.map { text -> [String] in
            let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
            return ["\(object["city"] ?? "")", "\(object["license"] ?? "")"]
        }
        #expect(keys == stored)

        let copy = dir.appendingPathComponent("copy.db").path
        options.databasePath = copy
        let again = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: MemoryPageSource([#"{"results": [\#(exported.joined(separator: ","))]}"#]))
        #expect(again.status == .finished && again.counters.rejectedRecords == 0)
        for sql in [
            "SELECT * FROM vet ORDER BY city, license", "SELECT * FROM vet_patients ORDER BY 1, 2, 3",
            "SELECT * FROM pet WHERE id IN (SELECT pet_id FROM vet_patients) ORDER BY id",
        ] {
            #expect(try rows(db, sql) == (try rows(copy, sql)), "\(sql)")
        }
    }

    /// An owned entity is exported inside its owners' records, not alone.
    @Test func anOwnedEntityIsNotARoot() throws {
        let yaml = """
            version: 1
            name: poke
            root: pokemon
            entities:
              pokemon:
                identity: id
                attributes: {id: integer}
                relationships:
                  types: {to: type_slot, many: true, owned: true}
              type_slot:
                attributes: {slot: integer}
            """
        let config = try PipelineConfig.parse(text: yaml, path: "poke.yml")
        let db = temporaryDirectory().appendingPathComponent("poke.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        _ = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(["[]"]))
        #expect(throws: RecordExporter.Problem.self) {
            try RecordExporter(config: config, location: try StoreLocation(db), entity: "type_slot", filters: [], depth: 1)
        }
    }

    /// What a `pattern:` read is written back so that it reads back the same (`ingot export
    /// --help`: "the same tables"): by its `template:`, or from the attribute keeping the same
    /// key's whole text (SWAPI's `url` beside the `id` read from it) — for an attribute and for
    /// a bare identity of a relationship, at depth 0 and 1.
    static let patterned = """
        version: 1
        name: things
        records: results
        root: thing
        entities:
          thing:
            identity: id
            attributes:
              id: {type: integer, key: url, pattern: "/things/(\\\\d+)/$", template: "https://api.example.org/things/{}/"}
              name: string
              code: {type: string, pattern: "^SKU-(.+)$", template: "SKU-{}"}
              first_color: {type: string, key: "colors[0].name"}
              second_color: {type: string, key: "colors[1].name"}
            relationships:
              maker: {to: person}
              helpers: {to: person, many: true, pattern: "^@(\\\\w+)$", template: "@{}"}
          person:
            identity: id
            attributes:
              id: {type: string, key: url, pattern: "/people/(\\\\w+)/$", template: "https://h/people/{}/"}
              url: string
              name: string
        """

    @Test(arguments: [0, 1])
    func whatAPatternReadIsWrittenBackSoThatItReadsBack(depth: Int) throws {
        let config = try PipelineConfig.parse(text: Self.patterned, path: "things.yml")
        let page = #"""
            {"results": [
              {"url": "https://api.example.org/things/7/", "name": "Seven", "code": "SKU-A7", "colors": [{"name": "red"}, {"name": "blue"}],
               "maker": {"url": "https://h/people/ann/", "name": "Ann"}, "helpers": ["@ann", "@bob"]},
              {"url": "https://api.example.org/things/8/", "name": "Eight", "code": "SKU-B8", "maker": "https://h/people/bob/"}]}
            """#
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("things.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        let first = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource([page]))
        #expect(first.status == .finished && first.counters.rejectedRecords == 0, "\(first.error ?? "")")
        var exported: [String] = []
        try RecordExporter(config: config, location: try StoreLocation(db), entity: nil, filters: [], depth: depth).forEachRecord {
            exported.append($0)
        }
        #expect(exported.first?.contains(#""url":"https://api.example.org/things/7/""#) == true, "\(exported)")
        let copy = dir.appendingPathComponent("copy.db").path
        options.databasePath = copy
        let again = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: MemoryPageSource([#"{"results": [\#(exported.joined(separator: ","))]}"#]))
        #expect(again.status == .finished && again.counters.rejectedRecords == 0, "\(exported)")
        for sql in ["SELECT * FROM thing ORDER BY id", "SELECT * FROM thing_helpers ORDER BY 1, 2"] {
            #expect(try rows(db, sql) == (try rows(copy, sql)), "\(sql)")
        }
        // Stubs stay stubs: only the people the things named, as identities.
        #expect(try rows(copy, "SELECT id FROM person ORDER BY id") == [["ann"], ["bob"]])
    }

    /// What cannot be written back is refused before anything is written, naming it: a pattern
    /// without a template or a twin attribute, and a kind of a parent entity.
    @Test func whatCannotBeWrittenBackIsRefusedNamingIt() throws {
        let yaml = Self.patterned.replacingOccurrences(of: #", template: "SKU-{}""#, with: "")
        let config = try PipelineConfig.parse(text: yaml, path: "things.yml")
        let db = temporaryDirectory().appendingPathComponent("t.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        _ = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(
            source: MemoryPageSource(["{\"results\": []}"]))
        do {
            _ = try RecordExporter(config: config, location: try StoreLocation(db), entity: nil, filters: [], depth: 0)
            Issue.record("refused")
        } catch let problem as RecordExporter.Problem {
            #expect(problem.description.contains("thing.code (pattern '^SKU-(.+)$', no template"), "\(problem)")
        }
        let fromTheEnd = try PipelineConfig.parse(
            text: Self.patterned.replacingOccurrences(of: "colors[1].name", with: "colors[-1].name"), path: "things.yml")
        #expect(throws: RecordExporter.Problem.self) {
            _ = try RecordExporter(config: fromTheEnd, location: try StoreLocation(db), entity: nil, filters: [], depth: 0)
        }
        #expect(
            configProblems(Self.patterned.replacingOccurrences(of: #"template: "SKU-{}""#, with: #"template: "SKU""#))?
                .contains("one {}") == true)
        #expect(
            configProblems(
                Self.patterned.replacingOccurrences(
                    of: "name: string\n      code", with: "name: {type: string, template: \"x{}\"}\n      code"))?
                .contains("beside a pattern") == true)
    }
}
