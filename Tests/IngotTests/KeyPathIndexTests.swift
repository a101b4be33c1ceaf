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

    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .postgresql])
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
}
