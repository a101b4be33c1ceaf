import Foundation
import Testing

@testable import Ingot

/// Schema evolution and relations tools can read: a pipeline that gained
/// attributes, relationships or entities adds them to an existing database (`schema.migrated`);
/// a change that cannot be applied safely is refused before anything is written; `ingot schema
/// --db` prints the migration; SQLite declares foreign keys, kept true.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct SchemaEvolutionTests {
    static let v1 = """
        version: 1
        name: evolve
        records: results
        root: person
        entities:
          person:
            identity: id
            attributes: {id: integer, name: string}
            relationships:
              best: {to: dog}
              dogs: {to: dog, many: true}
          dog:
            identity: id
            attributes: {id: integer, name: string}
        """

    /// v1 plus an attribute, a to-many, a to-one and an entity.
    static let v2 =
        v1.replacingOccurrences(
            of: "attributes: {id: integer, name: string}\n    relationships:",
            with:
                "attributes: {id: integer, name: string, nickname: string}\n    relationships:\n      cats: {to: cat, many: true}\n      vet: {to: cat}"
        )
        + "\n  cat:\n    identity: id\n    attributes: {id: integer}"

    private func run(_ yaml: String, _ pages: [String], _ database: String, _ logs: LogCapture = LogCapture()) throws -> RunSummary {
        var options = RunOptions()
        options.databasePath = database
        options.progressInterval = 0
        return PipelineRunner(config: try PipelineConfig.parse(text: yaml, path: "e.yml"), options: options, logger: logs.logger)
            .run(source: MemoryPageSource(pages))
    }

    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .postgresql])
    func aGrownPipelineAddsWhatItGainedAndSaysSo(backend: StoreConformanceTests.Backend) throws {
        #expect(Self.v2.contains("nickname") && Self.v2.contains("cats:"))
        let database =
            backend == .sqlite ? temporaryDirectory().appendingPathComponent("e.db").path : try PostgresServer.freshDatabase()
        let fresh = LogCapture()
        #expect(
            try run(Self.v1, [#"{"results": [{"id": 1, "name": "Ada", "best": 7, "dogs": [7]}]}"#], database, fresh).status == .finished)
        #expect(!fresh.all.contains { $0.contains("schema.migrated") }, "a new database is created, not migrated")
        let logs = LogCapture()
        let grown = try run(Self.v2, [#"{"results": [{"id": 2, "name": "Bo", "nickname": "B", "cats": [3], "vet": 4}]}"#], database, logs)
        #expect(grown.status == .finished, "\(grown.error ?? "")")
        let line = try #require(logs.all.first { $0.contains("msg=schema.migrated") })
        for added in ["person.nickname", "person.vet_id", "cat", "person_cats"] { #expect(line.contains(added), "\(line)") }
        // The new columns are there and filled; what v1 stored is as it was.
        let people: [[String]]
        if backend == .sqlite {
            people = try rows(
                database, "SELECT id, name, coalesce(nickname, '-'), coalesce(vet_id, '-'), coalesce(best_id, '-') FROM person ORDER BY id")
        } else {
            people = try PGConnection(url: database).execute(
                "SELECT id, name, coalesce(nickname, '-'), coalesce(vet_id::text, '-'), coalesce(best_id::text, '-') FROM person ORDER BY id"
            ).map { $0.map { $0 ?? "" } }
        }
        #expect(people == [["1", "Ada", "-", "-", "7"], ["2", "Bo", "B", "4", "-"]])
        let again = LogCapture()
        #expect(try run(Self.v2, [], database, again).status == .finished)
        #expect(!again.all.contains { $0.contains("schema.migrated") }, "nothing left to add")
    }

    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .postgresql])
    func aRelationshipThatChangedItsKindIsRefused(backend: StoreConformanceTests.Backend) throws {
        let database =
            backend == .sqlite ? temporaryDirectory().appendingPathComponent("k.db").path : try PostgresServer.freshDatabase()
        #expect(try run(Self.v1, [#"{"results": [{"id": 1, "best": 7, "dogs": [7]}]}"#], database).status == .finished)
        let toMany = Self.v1.replacingOccurrences(of: "best: {to: dog}", with: "best: {to: dog, many: true}")
        let refused = try run(toMany, [#"{"results": [{"id": 2}]}"#], database)
        #expect(refused.status == .failed && refused.failureKind == .configuration)
        #expect(
            refused.error?.contains(
                "table 'person', relationship 'best': stored as a to-one (column 'best_id'), the pipeline wants a to-many (join table 'person_best')"
            ) == true,
            "\(refused.error ?? "")")
        let toOne = Self.v1.replacingOccurrences(of: "dogs: {to: dog, many: true}", with: "dogs: {to: dog}")
        let refusedToo = try run(toOne, [], database)
        #expect(
            refusedToo.error?.contains(
                "relationship 'dogs': stored as a to-many (join table 'person_dogs'), the pipeline wants a to-one (column 'dogs_id')")
                == true,
            "\(refusedToo.error ?? "")")
    }

    /// Every foreign key is indexed (docs/pipelines.md, "Schema"): a to-one column and the target
    /// side of a join table, so that a join from the target is a lookup — SQLite's plan searches
    /// the index; PostgreSQL has the same indexes.
    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .postgresql])
    func everyForeignKeyIsIndexed(backend: StoreConformanceTests.Backend) throws {
        let database =
            backend == .sqlite ? temporaryDirectory().appendingPathComponent("i.db").path : try PostgresServer.freshDatabase()
        #expect(try run(Self.v1, [#"{"results": [{"id": 1, "name": "Ada", "best": 7, "dogs": [7]}]}"#], database).status == .finished)
        if backend == .sqlite {
            let indexes = try rows(
                database,
                "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_ingot%' ORDER BY name"
            )
            #expect(indexes == [["dog_identity"], ["person_best_id"], ["person_dogs_dog_id"], ["person_identity"]], "\(indexes)")
            let plan = try rows(database, "EXPLAIN QUERY PLAN SELECT person_id FROM person_dogs WHERE dog_id = 7").map { $0.last ?? "" }
            #expect(
                plan.contains { $0.contains("USING INDEX person_dogs_dog_id") || $0.contains("USING COVERING INDEX person_dogs_dog_id") },
                "\(plan)")
        } else {
            let indexes = try PGConnection(url: database).execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname NOT LIKE '%_pkey' AND indexname NOT LIKE '_ingot%' ORDER BY indexname"
            )
            #expect(
                indexes.map { $0[0] ?? "" } == ["dog_identity", "person_best_id", "person_dogs_dog_id", "person_identity"], "\(indexes)")
            // A staged load builds them after its copy, in its transaction: there at the end too.
            let staged = try PostgresServer.freshDatabase()
            var options = RunOptions()
            options.databasePath = staged
            options.progressInterval = 0
            options.loading = .staged
            let summary = PipelineRunner(
                config: try PipelineConfig.parse(text: Self.v1, path: "e.yml"), options: options, logger: LogCapture().logger
            )
            .run(source: MemoryPageSource([#"{"results": [{"id": 1, "name": "Ada", "best": 7, "dogs": [7]}]}"#]))
            #expect(
                summary.status == .finished && summary.loaded?.hasPrefix("staged") == true, "\(summary.loaded ?? "") \(summary.error ?? "")"
            )
            let built = try PGConnection(url: staged).execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname IN ('person_best_id', 'person_dogs_dog_id') ORDER BY 1"
            )
            #expect(built.map { $0[0] ?? "" } == ["person_best_id", "person_dogs_dog_id"])
        }
    }

    @Test func schemaPrintsTheMigrationOfAnExistingDatabase() throws {
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("s.db").path
        _ = try ingest(Self.v1, [#"{"results": [{"id": 1}]}"#], db: db)
        let pipeline = dir.appendingPathComponent("v2.yml")
        try Data(Self.v2.utf8).write(to: pipeline)
        let plan = try runIngot(["schema", pipeline.path, "--db", db])
        #expect(plan.status == 0, "\(plan.stderr)")
        #expect(plan.stdout.contains("a run would apply"))
        #expect(plan.stdout.contains(#"ALTER TABLE "person" ADD COLUMN "nickname" TEXT;"#), "\(plan.stdout)")
        #expect(!plan.stdout.contains(#"CREATE TABLE IF NOT EXISTS "dog""#), "what exists is not printed")
        #expect(try rows(db, "SELECT count(*) FROM pragma_table_info('person') WHERE name = 'nickname'") == [["0"]], "nothing written")
        let same = try runIngot(["schema", dir.appendingPathComponent("v1.yml").path, "--db", db])
        #expect(same.status != 0, "no such pipeline file")
    }

    /// Join tables, to-ones and owned rows declare their foreign keys; the rows Ingot writes keep them true.
    @Test func foreignKeysAreDeclaredAndHold() throws {
        let (_, db) = try ingest(
            Self.v2, [#"{"results": [{"id": 1, "best": 7, "dogs": [7, 8], "cats": [{"id": 3}], "vet": 4}, {"id": 2, "best": {"id": 9}}]}"#])
        #expect(
            try rows(db, "SELECT \"table\", \"from\", \"to\" FROM pragma_foreign_key_list('person_dogs') ORDER BY 2")
                == [["dog", "dog_id", "id"], ["person", "person_id", "id"]])
        #expect(
            try rows(db, "SELECT \"table\", \"from\" FROM pragma_foreign_key_list('person') ORDER BY 2") == [
                ["dog", "best_id"], ["cat", "vet_id"],
            ])
        #expect(try rows(db, "SELECT count(*) FROM pragma_foreign_key_check") == [["0"]])
    }
}
