import Foundation
import Testing

@testable import Ingot

/// Key paths that index arrays: `names[0].name`, `names[-1].name` on
/// attributes and relationships; past the end is absent, a non-array is a rejected record; one
/// grammar, refused at validation otherwise.
@Suite
struct KeyPathIndexTests {
    /// PokeAPI's species: names per language, the genus in a list, the first type slot's type.
    static let yaml = """
        version: 1
        name: species
        records: results
        root: species
        entities:
          species:
            identity: id
            attributes:
              id: integer
              first_name: {type: string, key: "names[0].name"}
              last_name: {type: string, key: "names[-1].name"}
              second_language: {type: string, key: "names[1].language.name"}
              genus: {type: string, key: "genera[0].genus"}
              flavor: {type: string, key: "entries[0][1]"}
            relationships:
              first_type: {to: type, key: "types[0].type"}
          type:
            identity: name
            attributes:
              name: string
        """

    static let pages = [
        #"""
        {"results": [
          {"id": 1, "names": [{"name": "Fushigidane", "language": {"name": "ja"}}, {"name": "Bulbasaur", "language": {"name": "en"}}],
           "genera": [{"genus": "Seed Pokémon"}], "entries": [["en", "A strange seed"]],
           "types": [{"slot": 1, "type": {"name": "grass"}}, {"slot": 2, "type": {"name": "poison"}}]},
          {"id": 2, "names": [{"name": "Ivysaur"}], "genera": [], "entries": [], "types": [{"slot": 1, "type": "grass"}]},
          {"id": 3, "names": {"name": "not a list"}}
        ]}
        """#,
        // A later page: an index past the end leaves the stored column as it is; null clears it.
        #"""
        {"results": [
          {"id": 1, "names": [], "genera": [{"genus": null}]}
        ]}
        """#,
    ]

    @Test(arguments: StoreConformanceTests.storedBackends)
    func indexesReadArrayElements(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.yaml)
        let summary = try harness.run(Self.pages, 50)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.records == 4 && summary.counters.rejectedRecords == 1)
        let species = try #require(harness.dump()["species"])
        // Columns: id, first_name, last_name, second_language, genus, flavor, first_type.
        let bulbasaur = try #require(species.first { $0.first == "1" })
        #expect(bulbasaur.contains("Fushigidane") && bulbasaur.contains("Bulbasaur") && bulbasaur.contains("en"), "\(bulbasaur)")
        #expect(bulbasaur.contains("A strange seed") && bulbasaur.contains("grass"), "\(bulbasaur)")
        #expect(!bulbasaur.contains("Seed Pokémon"), "the later page's null cleared the genus: \(bulbasaur)")
        let ivysaur = try #require(species.first { $0.first == "2" })
        // One name: first and last are the same element; the second language is past the end.
        #expect(ivysaur.filter { $0 == "Ivysaur" }.count == 2, "\(ivysaur)")
        #expect(ivysaur.contains("grass"), "a bare identity at an index links too")
        #expect(species.count == 2, "the record whose names is an object is rejected")
        #expect(try harness.dump()["type"] == [["grass"]], "only the first type slot is read")
    }

    @Test func aNonArrayIsARejectedRecordWithItsPath() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "k.yml")
        var mapper = RecordMapper(plan: MappingPlan(model: config.model, root: "species", framing: config.framing))
        let page = mapper.map(bytes: Array(#"{"results": [{"id": 3, "names": {"name": "x"}}, {"id": 4}]}"#.utf8), seq: 1, source: "p")
        #expect(page.records.count == 1)
        let rejection = try #require(page.rejections.first)
        #expect(rejection.codingPath == "results[0].names", "\(rejection.codingPath)")
        #expect(rejection.reason.contains("expected an array, got object"), "\(rejection.reason)")
    }

    @Test func keysOutsideTheGrammarAreRefusedAtValidation() {
        func problem(_ key: String) -> String? {
            configProblems(
                "version: 1\nname: k\nroot: a\nentities:\n  a:\n    identity: id\n    attributes:\n      id: integer\n      x: {type: string, key: \"\(key)\"}\n    relationships:\n      r: {to: a, key: \"\(key)\"}",
                path: "k.yml")
        }
        #expect(problem("names[0].name") == nil)
        #expect(problem("names[-1]") == nil)
        #expect(problem("names[x].name")?.contains("is not an integer index") == true)
        #expect(problem("names[0")?.contains("an index is written [N]") == true)
        #expect(problem("[0].name")?.contains("starts with an index") == true)
        #expect(problem("a..b")?.contains("part 2 is empty") == true)
        #expect(problem("names[0].name]")?.hasPrefix("k.yml:9:") == true, "\(problem("names[0].name]") ?? "")")
        #expect(
            problem("names[0].name]")?.contains("k.yml:11:") == true,
            "the relationship's key is checked too: \(problem("names[0].name]") ?? "")")
    }

    /// Zendesk's tickets: each custom field is an element `{id, value}` of `custom_fields`,
    /// picked by its id (`[id=360001]`), a string id or a number alike; a field the ticket does
    /// not carry leaves its column as stored; a non-array is a rejected record naming the step.
    static let zendesk = """
        version: 1
        name: tickets
        records: tickets
        root: ticket
        entities:
          ticket:
            identity: id
            attributes:
              id: integer
              priority_code: {type: string, key: "custom_fields[id=360001].value"}
              region: {type: string, key: "custom_fields[id=360002].value"}
              approved: {type: bool, key: "custom_fields[id=k-3].value"}
        """

    @Test(arguments: StoreConformanceTests.storedBackends)
    func elementsArePickedByAKeysValue(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.zendesk)
        let pages = [
            #"""
            {"tickets": [
              {"id": 1, "custom_fields": [{"id": 360002, "value": "emea"}, {"id": 360001, "value": "P1"}, {"id": "k-3", "value": true}]},
              {"id": 2, "custom_fields": [{"id": "360001", "value": "P\u0032"}, "not an object", {"id": 360001, "value": "second"}]},
              {"id": 3, "custom_fields": {"id": 360001}}
            ]}
            """#,
            // A later page: fields missing leave the columns as they are; null clears.
            #"{"tickets": [{"id": 1, "custom_fields": [{"id": 360001, "value": null}]}]}"#,
        ]
        let summary = try harness.run(pages, 50)
        #expect(summary.status == .finished && summary.counters.records == 4 && summary.counters.rejectedRecords == 1)
        let tickets = try #require(harness.dump()["ticket"]).sorted { $0[0] < $1[0] }
        // Columns: id, priority_code, region, approved.
        #expect(tickets.count == 2)
        #expect(tickets.first.map { Array($0[1...]) } == ["NULL", "emea", "1"], "\(tickets)")
        #expect(tickets.last.map { Array($0[1...]) } == ["P2", "NULL", "NULL"], "the first match wins: \(tickets)")
        var mapper = RecordMapper(
            plan: MappingPlan(
                model: try PipelineConfig.parse(text: Self.zendesk, path: "z.yml").model, root: "ticket", framing: .array(at: ["tickets"])))
        let page = mapper.map(bytes: Array(#"{"tickets": [{"id": 3, "custom_fields": {"id": 360001}}]}"#.utf8), seq: 1, source: "p")
        let rejection = try #require(page.rejections.first)
        #expect(rejection.codingPath == "tickets[0].custom_fields" && rejection.reason.contains("expected an array"), "\(rejection)")
    }

    /// An element picked by a key's value is written back where it was read: the export's
    /// record reads as the same row.
    @Test func pickedElementsAreExportedBack() throws {
        let config = try PipelineConfig.parse(text: Self.zendesk, path: "z.yml")
        let page = #"{"tickets": [{"id": 1, "custom_fields": [{"id": 360001, "value": "P1"}, {"id": "k-3", "value": false}]}]}"#
        let (summary, db) = try ingest(Self.zendesk, [page])
        #expect(summary.status == .finished)
        var exported: [String] = []
        _ = try RecordExporter(config: config, location: try StoreLocation(db), entity: "ticket", filters: [], depth: 0).forEachRecord {
            exported.append($0)
        }
        #expect(
            exported == [#"{"id":1,"custom_fields":[{"id":360001,"value":"P1"},{"id":360002,"value":null},{"id":"k-3","value":false}]}"#])
        let again = try ingest(Self.zendesk, ["{\"tickets\": [\(exported[0])]}"])
        #expect(try rows(again.db, "SELECT * FROM ticket") == rows(db, "SELECT * FROM ticket"))
    }

    @Test func pickedElementsAreCheckedAtValidation() {
        let text = Self.zendesk.replacingOccurrences(of: "custom_fields[id=360002].value", with: "custom_fields[=3].value")
        #expect(configProblems(text)?.contains("picked as [key=value]") == true, "\(configProblems(text) ?? "")")
        let first = Self.zendesk.replacingOccurrences(of: "custom_fields[id=360002].value", with: "[id=3].value")
        #expect(configProblems(first)?.contains("starts with an index") == true)
        let document = try? JSONDocument(bytes: Array(#"{"custom_fields": [{"id": 1}, {"id": 360001, "value": 7}]}"#.utf8))
        let path = try? JSONKeyPath(parsing: "custom_fields[id=360001].value")
        #expect(document.flatMap { path?.resolve(in: $0.root) }?.numberText == "7")
    }
}
