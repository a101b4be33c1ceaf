import Foundation
import Testing

@testable import Ingot

/// Parent entities (docs/pipelines.md, "Parent entities": Core Data's entity inheritance): `starship` and `vehicle`
/// share `transport`'s identity and fields; a child's record is one row in the parent's table
/// (with `kind`) and one in its own; a relationship to the parent reaches every child.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct ParentEntityTests {
    static let yaml = """
        version: 1
        name: transport
        records: results
        root: {by: kind, entities: {starship: starship, vehicle: vehicle}}
        entities:
          transport:
            identity: id
            attributes:
              id: {type: integer, key: url, pattern: "/(\\\\d+)/$"}
              name: string
              crew: {type: integer, values: {"unknown": null}, grouping: ","}
            relationships:
              films: {to: film, many: true}
          starship:
            parent: transport
            attributes: {hyperdrive_rating: {type: double, values: {"unknown": null}}}
            relationships:
              pilots: {to: person, many: true}
          vehicle:
            parent: transport
            attributes: {vehicle_class: string}
          person:
            identity: id
            attributes: {id: integer, name: string}
            relationships:
              ride: {to: transport}
              ship: {to: starship}
          film:
            identity: id
            attributes: {id: integer}
        """

    static let pages = [
        #"""
        {"results": [
          {"kind": "starship", "url": "https://swapi.dev/api/starships/12/", "name": "X-wing", "crew": "1", "hyperdrive_rating": "1.0", "films": [1], "pilots": [1]},
          {"kind": "vehicle", "url": "https://swapi.dev/api/vehicles/14/", "name": "Snowspeeder", "crew": "2", "vehicle_class": "airspeeder", "films": [2]},
          {"kind": "starship", "url": "https://swapi.dev/api/starships/9/", "name": "Death Star", "crew": "342,953", "hyperdrive_rating": "unknown"}
        ]}
        """#
    ]

    /// `validate` and `--dry-run` say what the records are: the entities a `root: {by: …}`
    /// chooses among, not the first of them (they said `root starship`); a resources pipeline,
    /// its resources.
    @Test func validateAndTheDryRunNameWhatTheRecordsAre() throws {
        let file = temporaryDirectory().appendingPathComponent("transport.yml")
        try Self.yaml.write(to: file, atomically: false, encoding: .utf8)
        let shown = "root by kind (starship: starship, vehicle: vehicle; others rejected)"
        let validated = try runIngot(["validate", file.path])
        #expect(validated.stdout.contains("entities, \(shown))"), "\(validated.stdout)")
        let dry = try runIngot(["run", file.path, "--pages", temporaryDirectory().path, "--dry-run"])
        #expect(dry.stdout.contains("(\(file.path)): \(shown), write merge"), "\(dry.stdout)")
        let swapi = try runIngot(["validate", packageRoot.appendingPathComponent("pipelines/swapi.yml").path])
        #expect(swapi.stdout.contains("resources films, people, planets, species, starships, vehicles)"), "\(swapi.stdout)")
    }

    /// A child entity's table declares its foreign key to its parent's (`starship.id` →
    /// `transport.id`), so that `.schema`, Datasette and ORMs see the inheritance; the rows a run
    /// writes keep it true. `ingot schema --foreign-keys` prints it for PostgreSQL too.
    @Test func aChildsTableDeclaresItsParent() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "transport.yml")
        let keys = ForeignKey.of(config.model).filter { $0.target == "transport" && $0.columns == ["id"] }
        #expect(Set(keys.map(\.table)) == ["starship", "vehicle"], "\(keys)")
        #expect(
            ForeignKey.postgresStatements(of: config.model).contains {
                $0.hasPrefix("ALTER TABLE \"starship\"") && $0.contains("REFERENCES \"transport\" (\"id\")")
            })
        let db = temporaryDirectory().appendingPathComponent("fk.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        #expect(
            PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(Self.pages)).status
                == .finished)
        let sql = try rows(db, "SELECT sql FROM sqlite_master WHERE name = 'starship'").first?.first ?? ""
        #expect(sql.contains(#"FOREIGN KEY ("id") REFERENCES "transport" ("id")"#), "\(sql)")
        #expect(try rows(db, "PRAGMA foreign_key_check").isEmpty)
    }

    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .memory, .postgresql])
    func aChildRecordFillsItsParentsRowAndItsOwn(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.yaml)
        let summary = try harness.run(Self.pages, 50)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedRecords == 0)
        let tables = try harness.dump()
        // transport: id, name, crew, kind — one row per child record, the shared fields once.
        #expect(
            tables["transport"] == [
                ["12", "X-wing", "1", "starship"], ["14", "Snowspeeder", "2", "vehicle"], ["9", "Death Star", "342953", "starship"],
            ],
            "\(tables["transport"] ?? [])")
        // The children's tables: the identity and their own fields.
        #expect(tables["starship"] == [["12", "1.0"], ["9", "NULL"]], "\(tables["starship"] ?? [])")
        #expect(tables["vehicle"] == [["14", "airspeeder"]])
        // The parent's relationships are the parent's; a child's its own.
        #expect(tables["transport_films"] == [["12", "1"], ["14", "2"]])
        #expect(tables["starship_pilots"] == [["12", "1"]])
        #expect(summary.counters.entities["transport"]?.inserted == 3 && summary.counters.entities["starship"]?.inserted == 2)

        // A relationship to the parent links any child; one to a child links that child.
        let people = try harness.run([#"{"results": [{"kind": "starship", "url": "/starships/12/", "name": "X-wing (T-65)"}]}"#], 50)
        #expect(people.status == .finished)
        #expect(try harness.dump()["transport"]?.first { $0[0] == "12" } == ["12", "X-wing (T-65)", "1", "starship"])
    }

    /// One identity, one kind: a vehicle numbered as a stored starship — in a later run, or later
    /// in the same batch — is a rejected record (`wrong_kind`, its coding path and source), the
    /// first kind stays, and the identity is in one child table only (it was in both, and
    /// `transport JOIN starship` returned the vehicle).
    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .postgresql])
    func oneIdentityIsOneKind(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.yaml)
        #expect(try harness.run(Self.pages, 50).status == .finished)
        let later = try harness.run(
            [
                #"{"results": [{"kind": "vehicle", "url": "/vehicles/12/", "name": "not a starship", "vehicle_class": "wheeled"}, "#
                    + #"{"kind": "starship", "url": "/starships/30/", "name": "first"}, {"kind": "vehicle", "url": "/vehicles/30/", "name": "second"}]}"#
            ], 50)
        #expect(later.status == .finished, "\(later.error ?? "")")
        #expect(later.counters.rejectsByReason["wrong_kind"] == 2, "\(later.counters.rejectsByReason)")
        let tables = try harness.dump()
        #expect(tables["vehicle"] == [["14", "airspeeder"]], "\(tables["vehicle"] ?? [])")
        #expect(tables["starship"]?.map { $0[0] } == ["12", "30", "9"], "\(tables["starship"] ?? [])")
        #expect(tables["transport"]?.first { $0[0] == "12" } == ["12", "X-wing", "1", "starship"])
        #expect(tables["transport"]?.first { $0[0] == "30" }?.last == "starship")
    }

    @Test func relationshipsToParentAndChildLinkByTheSharedIdentity() throws {
        let yaml = Self.yaml.replacingOccurrences(
            of: "root: {by: kind, entities: {starship: starship, vehicle: vehicle}}", with: "root: person")
        let (first, db) = try ingest(Self.yaml, Self.pages)
        #expect(first.status == .finished)
        let (summary, _) = try ingest(
            yaml,
            [
                #"{"results": [{"id": 1, "name": "Luke", "ride": "https://swapi.dev/api/vehicles/14/", "ship": "https://swapi.dev/api/starships/12/"}]}"#
            ], db: db)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(
            try rows(
                db,
                "SELECT p.name, r.kind, r.name, s.hyperdrive_rating FROM person p JOIN transport r ON r.id = p.ride_id JOIN starship s ON s.id = p.ship_id"
            )
                == [["Luke", "vehicle", "Snowspeeder", "1.0"]])
        // Person 1 was a stub (starship 12's pilot); no transport or starship stub is made.
        #expect((summary.counters.inserted, summary.counters.updated) == (0, 1), "\(summary.counters)")
        // A bare reference to a starship no row has stubs both of its rows, the parent's too.
        let (stubbed, _) = try ingest(yaml, [#"{"results": [{"id": 2, "ship": "https://swapi.dev/api/starships/99/"}]}"#], db: db)
        #expect(stubbed.counters.entities["starship"]?.stubs == 1 && stubbed.counters.entities["transport"]?.stubs == 1)
        #expect(try rows(db, "SELECT count(*) FROM transport JOIN starship USING (id) WHERE id = 99") == [["1"]])
        // The same when the batch is looked up before it is folded (a relationship that ignores).
        let checking = yaml.replacingOccurrences(of: "ride: {to: transport}", with: "ride: {to: transport, missing: ignore}")
        #expect(checking != yaml)
        let (checked, _) = try ingest(
            checking,
            [#"{"results": [{"id": 4, "ship": "https://swapi.dev/api/starships/98/", "ride": "https://swapi.dev/api/vehicles/97/"}]}"#],
            db: db)
        #expect(checked.status == .finished, "\(checked.error ?? "")")
        #expect(try rows(db, "SELECT count(*) FROM transport JOIN starship USING (id) WHERE id = 98") == [["1"]])
        #expect(
            try rows(db, "SELECT count(*), coalesce(max(ride_id), -1) FROM person WHERE id = 4") == [["1", "-1"]], "vehicle 97: ignored")
        // A stored starship referred to again makes nothing.
        let (again, _) = try ingest(yaml, [#"{"results": [{"id": 3, "ship": "https://swapi.dev/api/starships/12/"}]}"#], db: db)
        #expect(again.counters.inserted == 1, "person 3 only: \(again.counters.entities)")
    }

    @Test func parentsAreCheckedAtValidation() {
        func problem(_ from: String, _ to: String) -> String? {
            configProblems(Self.yaml.replacingOccurrences(of: from, with: to), path: "t.yml")
        }
        #expect(problem("", "") == nil)
        #expect(
            problem("parent: transport\n    attributes: {vehicle_class", "parent: plane\n    attributes: {vehicle_class")?.contains(
                "parent 'plane' is not a declared entity") == true)
        #expect(
            problem("attributes: {vehicle_class: string}", "attributes: {vehicle_class: string, name: string}")?.contains(
                "declared by parent 'transport'") == true)
        #expect(
            problem("vehicle:\n    parent: transport", "vehicle:\n    parent: transport\n    identity: id")?.contains(
                "takes its parent's identity") == true)
        #expect(
            problem("name: string\n      crew", "name: string\n      kind: string\n      crew")?.contains("'kind' is the column") == true)
        #expect(problem("vehicle:\n    parent: transport", "vehicle:\n    parent: starship")?.contains("one level of parents") == true)
        #expect(
            problem("parent: transport\n    attributes: {vehicle_class", "parent: plane\n    attributes: {vehicle_class")?.hasPrefix(
                "t.yml:20:") == true,
            "\(problem("parent: transport\n    attributes: {vehicle_class", "parent: plane\n    attributes: {vehicle_class") ?? "")")
    }

    /// A kind of a parent entity exports whole (`ingot export --entity starship`): its parent's
    /// attributes and relationships, the `kind` that routes it, its identity through the
    /// parent's template — and running the export gives the same tables.
    @Test func aKindExportsWithItsParentsAttributes() throws {
        let yaml = Self.yaml.replacingOccurrences(
            of: #"pattern: "/(\\d+)/$"}"#, with: #"pattern: "/(\\d+)/$", template: "https://swapi.dev/api/starships/{}/"}"#)
        let config = try PipelineConfig.parse(text: yaml, path: "transport.yml")
        let (first, db) = try ingest(yaml, Self.pages)
        #expect(first.counters.rejectedRecords == 0)
        var exported: [String] = []
        try RecordExporter(config: config, location: try StoreLocation(db), entity: "starship", filters: [], depth: 0).forEachRecord {
            exported.append($0)
        }
        #expect(
            exported.count == 2 && exported.allSatisfy { $0.contains(#""kind":"starship""#) && $0.contains(#""name":"#) }, "\(exported)")
        let (again, copy) = try ingest(yaml, [#"{"results": [\#(exported.joined(separator: ","))]}"#])
        #expect(again.counters.rejectedRecords == 0, "\(exported)")
        for sql in [
            "SELECT * FROM transport WHERE kind = 'starship' ORDER BY id", "SELECT * FROM starship ORDER BY id",
            "SELECT * FROM transport_films WHERE transport_id IN (SELECT id FROM starship) ORDER BY 1, 2",
            "SELECT * FROM starship_pilots ORDER BY 1, 2",
        ] {
            #expect(try rows(db, sql) == (try rows(copy, sql)), "\(sql)")
        }
        // Nested at depth 1 (a person's ship), a kind would lack its parent's attributes: refused.
        #expect(throws: RecordExporter.Problem.self) {
            _ = try RecordExporter(config: config, location: try StoreLocation(db), entity: "person", filters: [], depth: 1)
        }
    }
}
