import Foundation
import Testing

@testable import Ingot

/// Inverse relationships: `person.films` ↔ `film.characters` share one join
/// table; a present to-many on either side replaces that owner's links on that side only; both
/// sides read the same links; validation checks that both ends agree.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct InverseTests {
    static func yaml(root: String) -> String {
        """
        version: 1
        name: swapi-\(root)
        records: results
        root: \(root)
        entities:
          person:
            identity: id
            attributes: {id: integer, name: string}
            relationships:
              films: {to: film, many: true, inverse: characters}
              following: {to: person, many: true, inverse: followers}
              followers: {to: person, many: true, inverse: following}
          film:
            identity: id
            attributes: {id: integer, title: string}
            relationships:
              characters: {to: person, many: true, inverse: films}
        """
    }

    /// Runs `pages` through the pipeline rooted at `root`, into `database` (a SQLite path or a PostgreSQL URL).
    private func run(_ root: String, _ pages: [String], _ database: String) throws -> RunSummary {
        var options = RunOptions()
        options.databasePath = database
        options.progressInterval = 0
        let config = try PipelineConfig.parse(text: Self.yaml(root: root), path: "\(root).yml")
        return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(pages))
    }

    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .postgresql])
    func bothSidesShareOneJoinTable(backend: StoreConformanceTests.Backend) throws {
        let database =
            backend == .sqlite ? temporaryDirectory().appendingPathComponent("i.db").path : try PostgresServer.freshDatabase()
        let people = try run(
            "person",
            [
                #"{"results": [{"id": 1, "name": "Luke", "films": [1, 2], "following": [2]}, {"id": 2, "name": "Leia", "films": [1]}]}"#
            ], database)
        #expect(people.status == .finished, "\(people.error ?? "")")
        // Films name their characters: film 1 says 1 and 3 (Leia no longer), film 3 is new.
        let films = try run(
            "film",
            [#"{"results": [{"id": 1, "title": "A New Hope", "characters": [1, 3]}, {"id": 3, "title": "Revenge", "characters": [2]}]}"#],
            database)
        #expect(films.status == .finished, "\(films.error ?? "")")
        let links: [[String]]
        let followers: [[String]]
        if backend == .sqlite {
            links = try rows(database, "SELECT person_id, film_id FROM person_films ORDER BY 1, 2")
            followers = try rows(database, "SELECT person_id, following_id FROM person_following ORDER BY 1, 2")
            #expect(try rows(database, "SELECT count(*) FROM sqlite_master WHERE name = 'film_characters'") == [["0"]])
        } else {
            let connection = try PGConnection(url: database)
            links = try connection.execute("SELECT person_id, film_id FROM person_films ORDER BY 1, 2").map { $0.map { $0 ?? "" } }
            followers = try connection.execute("SELECT person_id, following_id FROM person_following ORDER BY 1, 2").map {
                $0.map { $0 ?? "" }
            }
            #expect(try connection.execute("SELECT to_regclass('film_characters') IS NULL") == [["t"]])
        }
        // Film 1's characters replaced film 1's links only; person 1's link to film 2 stays.
        #expect(links == [["1", "1"], ["1", "2"], ["2", "3"], ["3", "1"]])
        #expect(followers == [["1", "2"]], "Luke follows Leia: Leia's followers are Luke")

        // The person side again: Luke's films replaced on his side only (film 3's Leia stays).
        let again = try run("person", [#"{"results": [{"id": 1, "films": [3]}, {"id": 2, "followers": []}]}"#], database)
        #expect(again.status == .finished, "\(again.error ?? "")")
        let after =
            backend == .sqlite
            ? try rows(database, "SELECT person_id, film_id FROM person_films ORDER BY 1, 2")
            : try PGConnection(url: database).execute("SELECT person_id, film_id FROM person_films ORDER BY 1, 2").map {
                $0.map { $0 ?? "" }
            }
        #expect(after == [["1", "3"], ["2", "3"], ["3", "1"]])
        let unfollowed =
            backend == .sqlite
            ? try rows(database, "SELECT count(*) FROM person_following")
            : try PGConnection(url: database).execute("SELECT count(*) FROM person_following").map { $0.map { $0 ?? "" } }
        #expect(unfollowed == [["0"]], "Leia's followers given empty: Luke no longer follows her")
    }

    @Test func bothEndsMustAgree() {
        func problem(_ films: String, _ characters: String) -> String? {
            configProblems(
                """
                version: 1
                name: i
                root: person
                entities:
                  person:
                    identity: id
                    attributes: {id: integer}
                    relationships:
                      films: \(films)
                  film:
                    identity: id
                    attributes: {id: integer}
                    relationships:
                      characters: \(characters)
                """, path: "i.yml")
        }
        #expect(problem("{to: film, many: true, inverse: characters}", "{to: person, many: true, inverse: films}") == nil)
        #expect(problem("{to: film, many: true, inverse: cast}", "{to: person, many: true}")?.contains("names no relationship") == true)
        #expect(
            problem("{to: film, many: true, inverse: characters}", "{to: person, many: true}")?.contains(
                "must name 'person.films' back") == true)
        #expect(
            problem("{to: film, many: true, inverse: characters, ordered: true}", "{to: person, many: true, inverse: films}")?
                .contains("ordered") == true)
        #expect(problem("{to: film, inverse: characters}", "{to: person, many: true, inverse: films}") == nil, "a to-one and its to-many")
        #expect(problem("{to: film, inverse: characters}", "{to: person, inverse: films}")?.contains("two to-ones") == true)
        #expect(problem("{to: film, many: true, inverse: charactrs}", "{to: person, many: true}")?.hasPrefix("i.yml:9:") == true)
    }

    /// A to-one and its to-many inverse (`person.homeworld` ↔ `planet.residents`) are one column.
    static let homeworld = """
        version: 1
        name: homeworld
        records: results
        root: {by: type, entities: {person: person, planet: planet}}
        entities:
          person:
            identity: id
            attributes: {id: integer, name: string}
            relationships:
              homeworld: {to: planet, inverse: residents}
          planet:
            identity: id
            attributes: {id: integer, name: string}
            relationships:
              residents: {to: person, many: true, inverse: homeworld}
        """

    @Test(arguments: StoreConformanceTests.Backend.allCases)
    func aToOneAndItsToManyAreOneColumn(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.homeworld)
        let first = try harness.run(
            [
                #"{"results": [{"type": "person", "id": 1, "name": "Luke", "homeworld": 1}, {"type": "person", "id": 5, "name": "Leia", "homeworld": 2}]}"#,
                // Tatooine's residents: Luke and Owen (a stub); Leia is not Tatooine's.
                #"{"results": [{"type": "planet", "id": 1, "name": "Tatooine", "residents": [1, 2]}, {"type": "planet", "id": 2, "name": "Alderaan"}]}"#,
            ], 1)
        #expect(first.status == .finished, "\(first.error ?? "")")
        var tables = try harness.dump()
        #expect(tables["person"] == [["1", "Luke", "1"], ["2", "NULL", "1"], ["5", "Leia", "2"]], "\(tables["person"] ?? [])")
        #expect(tables.keys.filter { $0.contains("residents") }.isEmpty, "no join table")
        // Alderaan's residents given empty: Leia no longer lives there.
        let second = try harness.run(
            [#"{"results": [{"type": "planet", "id": 2, "residents": []}, {"type": "planet", "id": 1, "residents": [1, 2]}]}"#], 50)
        #expect(second.status == .finished)
        tables = try harness.dump()
        #expect(tables["person"] == [["1", "Luke", "1"], ["2", "NULL", "1"], ["5", "Leia", "NULL"]], "\(tables["person"] ?? [])")
        #expect(
            second.counters.entities["planet"] == EntityCounts(updated: 1, unchanged: 1, unfilled: 0),
            "Tatooine's residents are as they were")
    }
}

/// Both sides of an inverse pair in one batch: the links end as the records in order make them,
/// whatever the batch size (a batch used to replace one side's links after the other's: found
/// by the refresh tests).
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct InverseOrderTests {
    static let yaml = InverseTests.yaml(root: "person")

    /// `table` after `pages` ran twice into SQLite, by batch size: one record a batch, and all.
    static func table(_ table: String, after pages: [String], yaml: String) throws -> [Int: [[String]]] {
        var out: [Int: [[String]]] = [:]
        for batch in [1, 50] {
            let harness = try StoreConformanceTests.harness(.sqlite, yaml: yaml)
            for _ in 0..<2 { #expect(try harness.run(pages, batch).status == .finished) }
            out[batch] = try harness.dump()[table]
        }
        return out
    }
    static let pages = [
        #"{"results": [{"id": 3, "name": "Han"}, {"id": 2, "name": "Lando", "following": [3]}, {"id": 1, "following": [3]}]}"#,
        #"{"results": [{"id": 3, "followers": [1]}]}"#,
        #"{"results": [{"id": 2, "following": [3]}]}"#,
    ]

    @Test func bothSidesInOneBatchApplyInRecordOrder() throws {
        let links = try Self.table("person_following", after: Self.pages, yaml: Self.yaml)
        // Record order: 1 and 2 follow 3 (the last page makes 2 follow 3 again).
        #expect(links[1] == [["3", "1"], ["3", "2"]])
        #expect(links[50] == links[1])
    }
}

/// A to-one and its to-many inverse (`person.homeworld` ↔ `planet.residents`) in one batch: the
/// keys end as the records in order make them, whatever the batch size (the to-many side, written
/// after the rows, used to win within a batch).
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct ForeignKeyInverseOrderTests {
    static let pages = [
        #"{"results": [{"type": "person", "id": 5, "name": "Leia", "homeworld": 2}, {"type": "planet", "id": 1, "residents": [5]}]}"#,
        #"{"results": [{"type": "planet", "id": 2, "residents": []}]}"#,
        #"{"results": [{"type": "person", "id": 5, "homeworld": 2}, {"type": "planet", "id": 3, "residents": [6]}, {"type": "person", "id": 6, "homeworld": 1}]}"#,
    ]

    @Test func bothSidesInOneBatchApplyInRecordOrder() throws {
        let people = try InverseOrderTests.table("person", after: Self.pages, yaml: InverseTests.homeworld)
        // Record order: Leia (5) ends on planet 2, person 6 on planet 1.
        #expect(people[1] == [["5", "Leia", "2"], ["6", "NULL", "1"]])
        #expect(people[50] == people[1])
    }
}
