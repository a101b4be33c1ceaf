import Foundation
import Testing

@testable import Ingot

/// Value rules on attributes (docs/pipelines.md, value rules): `values`, `pattern`, `grouping`, `on_invalid`,
/// the text a rule makes converted as a `coerce: true` value would be; on both backends.
@Suite
struct ValueRuleTests {
    /// The problems of a pipeline whose entity `a` has attribute `x: ATTRIBUTE` (line 9).
    private func error(_ attribute: String) -> String? {
        configProblems(
            "version: 1\nname: v\nroot: a\nentities:\n  a:\n    identity: id\n    attributes:\n      id: integer\n      x: \(attribute)",
            path: "v.yml")
    }

    /// SWAPI's shapes: ids in URLs, "unknown" and "n/a", "1,000".
    static let yaml = """
        version: 1
        name: rules
        records: results
        root: person
        entities:
          person:
            identity: id
            attributes:
              id: {type: integer, key: url, pattern: "/(\\\\d+)/$"}
              name: string
              mass: {type: double, values: {"unknown": null}, grouping: ","}
              height: {type: integer, values: {"unknown": null, "n/a": null}, on_invalid: null}
              tall: {type: bool, key: height_class, values: {"tall": true, "short": false}}
              born: {type: date, key: birth, format: "yyyy-MM-dd", pattern: "^born (.*)$", on_invalid: null}
            relationships:
              homeworld: {to: planet}
          planet:
            identity: id
            attributes:
              id: {type: integer, key: url, pattern: "/planets/(\\\\d+)/$"}
        """

    static let pages = [
        #"""
        {"results": [
          {"url": "https://swapi.dev/api/people/1/", "name": "Luke", "mass": "77", "height": "172", "height_class": "tall", "birth": "born 1951-09-25", "homeworld": "https://swapi.dev/api/planets/1/"},
          {"url": "https://swapi.dev/api/people/2/", "name": "Jabba", "mass": "1,358", "height": "n/a", "height_class": "short", "birth": "19BBY"},
          {"url": "https://swapi.dev/api/people/3/", "name": "R5", "mass": "unknown", "height": "about 97", "birth": "born yesterday"},
          {"url": "https://swapi.co/api/people/4/", "name": "moved host", "mass": 84},
          {"url": "https://swapi.dev/api/people/x/", "name": "no id"}
        ]}
        """#
    ]

    @Test(arguments: StoreConformanceTests.storedBackends)
    func rulesTurnAPITextIntoValues(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.yaml)
        let summary = try harness.run(Self.pages, 50)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        // The record whose url has no number cannot have an identity: rejected; the rest kept.
        #expect(summary.counters.records == 5 && summary.counters.rejectedRecords == 1)
        // on_invalid: null: "about 97" and "born yesterday" (no match) and "19BBY" (not a date) are NULL, counted.
        #expect(summary.counters.invalidValues == ["person.height": 1, "person.born": 2])
        let people = try #require(harness.dump()["person"])
        #expect(people.count == 4)
        let luke = try #require(people.first { $0.contains("Luke") })
        #expect(luke.contains("1") && luke.contains("172") && luke.contains("1951-09-25"))
        let jabba = try #require(people.first { $0.contains("Jabba") })
        #expect(jabba.contains { $0.hasPrefix("1358") }, "\(jabba)")
        let planets = try #require(harness.dump()["planet"])
        #expect(planets == [["1"]], "the bare reference's identity goes through the planet's pattern")
    }

    /// A pattern cannot stall a run: a repetition of a repetition is refused at validation
    /// (`^(\d+)+$` was exponential), and a value longer than a pattern reads is a rejected record
    /// (`(\d+)$` was quadratic: a 60 KB value took 50 s, SIGTERM waited for it); the run goes on.
    @Test func aPatternCannotStallARun() throws {
        #expect(error(#"{type: integer, pattern: "^(\\d+)+$"}"#)?.contains("repeats (\\d+), which repeats itself") == true)
        #expect(error(#"{type: integer, pattern: "^((a|b*)c)*(\\d)$"}"#)?.hasPrefix("v.yml:9:") == true)
        #expect(error(#"{type: integer, pattern: "^(\\d+)$"}"#) == nil)
        #expect(
            error(#"{type: integer, pattern: "^(?:[+*]x)*-(\\d{2})$"}"#) == nil,
            "a class and a bounded repetition are not nested repetitions")
        #expect(AttributeRules.Pattern.nestedRepetition(in: #"(\d+)+"#) == #"(\d+)"#)
        #expect(AttributeRules.Pattern.nestedRepetition(in: #"(a{2,})*"#) == "(a{2,})")
        #expect(AttributeRules.Pattern.nestedRepetition(in: #"(a\+)+"#) == nil, "an escaped + is a character")
        let long = String(repeating: "7", count: 60_000)
        let page =
            #"{"results": [{"url": "https://swapi.dev/api/people/\#(long)/", "name": "long"}, {"url": "https://swapi.dev/api/people/5/", "name": "short"}]}"#
        let (summary, db) = try ingest(Self.yaml, [page])
        #expect(summary.status == .finished)
        #expect(summary.counters.rejectsByReason["too_large"] == 1)
        #expect(try rows(db, "SELECT id, name FROM person") == [["5", "short"]])
        let reason = try rows(db, "SELECT reason FROM _ingot_rejects").first?.first ?? ""
        #expect(reason.contains("60030 bytes, longer than pattern '/(\\d+)/$' reads (4096)"), "\(reason)")
    }

    @Test func rulesAreCheckedAtValidation() {
        #expect(error(#"{type: integer, pattern: "/(\\d+)/$"}"#) == nil)
        #expect(error(#"{type: integer, pattern: "/\\d+/$"}"#)?.contains("exactly one capture group") == true)
        #expect(error(#"{type: integer, pattern: "(unclosed"}"#)?.contains("is not a regular expression") == true)
        #expect(error(#"{type: string, grouping: ","}"#)?.contains("integer and double") == true)
        #expect(error(#"{type: integer, grouping: "1"}"#)?.contains("separator") == true)
        #expect(error(#"{type: integer, on_invalid: skip}"#)?.hasPrefix("v.yml:9:") == true)
        #expect(error(#"{type: integer, values: [unknown]}"#)?.contains("values maps") == true)
        // A const identity validated, then every later run was refused by the identity index.
        let constIdentity = configProblems(
            "version: 1\nname: c\nroot: a\nentities:\n  a:\n    identity: id\n    attributes:\n      id: {type: integer, const: 1}\n",
            path: "c.yml")
        #expect(
            constIdentity?.hasPrefix("c.yml:8:") == true && constIdentity?.contains("cannot be const") == true, "\(constIdentity ?? "")")
    }

    /// A rule's text is never stored as-is: a string attribute with a rule leaves the fast path.
    @Test func aStringWithARuleIsRewritten() throws {
        let yaml = """
            version: 1
            name: s
            root: a
            entities: {a: {identity: id, attributes: {id: integer, tag: {type: string, values: {"n/a": null}, pattern: "^#(.*)$"}}}}
            """
        let (summary, db) = try ingest(yaml, [##"[{"id": 1, "tag": "#swift"}, {"id": 2, "tag": "n/a"}, {"id": 3, "tag": "plain"}]"##])
        #expect(summary.counters.rejectedRecords == 1)
        #expect(try rows(db, "SELECT id, tag FROM a ORDER BY id") == [["1", "swift"], ["2", "NULL"]])
    }

    /// `const:` goes into every row of its entity (stubs too); `default:` into rows inserted
    /// without the key (stubs too), never over a stored value nor over a present null.
    @Test(arguments: StoreConformanceTests.storedBackends)
    func constAndDefault(backend: StoreConformanceTests.Backend) throws {
        let yaml = """
            version: 1
            name: fills
            root: item
            entities:
              item:
                identity: id
                attributes:
                  id: integer
                  name: string
                  kind: {type: string, const: api}
                  status: {type: string, default: new}
                  weight: {type: double, default: 1.5}
                relationships: {owner: {to: owner}}
              owner:
                identity: id
                attributes: {id: integer, source: {type: string, const: "stub or not"}, tier: {type: integer, default: 3}}
            """
        let harness = try StoreConformanceTests.harness(backend, yaml: yaml)
        #expect(try harness.run([#"[{"id": 1, "name": "a", "owner": 9}]"#], 50).status == .finished)
        #expect(try harness.run([#"[{"id": 1, "status": "done"}, {"id": 2, "name": "b", "status": null}]"#], 50).status == .finished)
        let third = try harness.run([#"[{"id": 1, "name": "a2", "weight": 2}]"#], 50)
        #expect(third.status == .finished)
        #expect(third.counters.entities["owner"]?.stubs == nil || third.counters.entities["owner"]?.stubs == 0)
        let dump = try harness.dump()
        let items = try #require(dump["item"]).map { $0.joined(separator: "|") }
        #expect(items.contains { $0.hasPrefix("1|a2|api|done|2") }, "\(items)")
        #expect(items.contains { $0.hasPrefix("2|b|api|NULL|1.5") }, "a present null is not an absent key: \(items)")
        let owners = try #require(dump["owner"]).map { $0.joined(separator: "|") }
        #expect(owners == ["9|stub or not|3"], "a stub gets the const and the default")
    }

    @Test func constAndDefaultAreCheckedAtValidation() {
        #expect(error("{type: integer, default: 3}") == nil)
        #expect(error("{type: integer, default: three}")?.hasPrefix("v.yml:9:") == true)
        #expect(error("{type: bool, const: maybe}")?.contains("not a value of type") == true)
        #expect(error("{type: date, format: \"yyyy-MM-dd\", default: \"2024-01-01\"}") == nil)
        #expect(error("{type: string, default: a, const: b}")?.contains("not both") == true)
    }

    /// A relationship's own `pattern`/`values` read its bare identities (the target's identity
    /// has no rule): `homeworld: {to: planet, pattern: …}`; a value mapped to null makes no link.
    @Test func relationshipsReadBareIdentitiesWithTheirOwnRules() throws {
        let yaml = """
            version: 1
            name: rel
            root: person
            entities:
              person:
                identity: id
                attributes: {id: integer}
                relationships:
                  homeworld: {to: planet, pattern: "/planets/(\\\\d+)/$", values: {"none": null}}
                  films: {to: film, many: true, pattern: "/films/(\\\\d+)/$"}
              planet: {identity: id, attributes: {id: integer}}
              film: {identity: id, attributes: {id: integer}}
            """
        let (summary, db) = try ingest(
            yaml,
            [
                #"[{"id": 1, "homeworld": "https://swapi.dev/api/planets/7/", "films": ["https://swapi.dev/api/films/1/", "https://swapi.dev/api/films/3/"]}, {"id": 2, "homeworld": "none"}, {"id": 3, "homeworld": "https://swapi.dev/api/people/1/"}]"#
            ])
        #expect(summary.counters.records == 3 && summary.counters.rejectedRecords == 1, "a reference that does not match is rejected")
        #expect(try rows(db, "SELECT id, homeworld_id FROM person ORDER BY id") == [["1", "7"], ["2", "NULL"]])
        #expect(try rows(db, "SELECT person_id, film_id FROM person_films ORDER BY film_id") == [["1", "1"], ["1", "3"]])
        #expect(try rows(db, "SELECT id FROM planet") == [["7"]])
        func error(_ text: String) -> String? {
            configProblems(text, path: "r.yml")
        }
        let composite = yaml.replacingOccurrences(
            of: "planet: {identity: id, attributes: {id: integer}}",
            with: "planet: {identity: [id, n], attributes: {id: integer, n: integer}}")
        #expect(error(composite)?.contains("needs exactly one identity attribute") == true, "\(error(composite) ?? "")")
        #expect(error(yaml.replacingOccurrences(of: "/films/(", with: "/films/"))?.contains("is not a regular expression") == true)
    }
}
