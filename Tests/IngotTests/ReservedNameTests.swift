import Foundation
import Testing

@testable import Ingot

/// Names and shapes the databases reserve: refused at validation
/// with file:line:column, for both backends alike, so a pipeline never validates for one and
/// breaks on the other.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct ReservedNameTests {
    private func problems(_ entities: String) -> String { modelProblems(entities) }

    @Test(arguments: ["rowid", "OID", "_rowid_", "xmin", "ctid", "cmin", "cmax", "xmax", "tableoid", "_present", "_ingot_pos", "_pos"])
    func systemAndStagingColumnsAreRefused(name: String) {
        let message = problems("  a:\n    identity: id\n    attributes:\n      id: integer\n      \(name): string\n")
        #expect(message.contains("n.yml:9:") && message.contains("'\(name)' is reserved"), "\(message)")
    }

    @Test func aRelationshipWhoseColumnIsReservedIsRefused() {
        // A to-one named `ct` would be `ct_id`, fine; one whose key column is `_ingot_x_id` is not.
        let message = problems(
            """
              a:
                identity: id
                attributes: {id: integer}
                relationships: {_ingot_x: {to: a}}

            """)
        #expect(message.contains("reserved"), "\(message)")
    }

    @Test func grdbMigrationsIsReserved() {
        let message = problems("  a:\n    table: GRDB_Migrations\n    identity: id\n    attributes: {id: integer}\n")
        #expect(message.contains("n.yml:") && message.contains("is reserved"), "\(message)")
    }

    @Test func namesPostgreSQLWouldCutAreRefused() {
        let long = String(repeating: "t", count: 49)
        let table = problems("  a:\n    table: \(long)\n    identity: id\n    attributes: {id: integer}\n")
        #expect(table.contains("n.yml:6:") && table.contains("at most 48"), "\(table)")
        #expect(problems("  a:\n    table: \(long.dropLast())\n    identity: id\n    attributes: {id: integer}\n").isEmpty)
        let column = String(repeating: "c", count: 64)
        let attribute = problems("  a:\n    identity: id\n    attributes: {id: integer, \(column): string}\n")
        #expect(attribute.contains("64 bytes"), "\(attribute)")
        let join = problems(
            "  a:\n    identity: id\n    attributes: {id: integer}\n    relationships: {\(String(repeating: "r", count: 50)): {to: a, many: true}}\n"
        )
        #expect(join.contains("at most 51"), "\(join)")
    }

    /// The 58-character table of the report: refused before any run, instead of running once and
    /// refusing every later run.
    @Test func aFiftyEightCharacterTableNeverReachesPostgreSQL() throws {
        let yaml =
            "version: 1\nname: n\nroot: a\nrecords: r\nentities:\n  a:\n    table: \(String(repeating: "x", count: 58))\n    identity: id\n    attributes: {id: integer}\n"
        #expect(throws: ConfigError.self) { try PipelineConfig.parse(text: yaml, path: "n.yml") }
    }

    /// An entity without identity and a record that mentions none of its keys: a row of NULLs in
    /// both backends (SQLite built `INSERT … () VALUES ()` and failed the run on every resume).
    @Test func aRecordWithNoneOfItsKeysIsARowOfNullsInBothBackends() throws {
        let yaml = "version: 1\nname: bare\nroot: note\nrecords: r\nentities:\n  note:\n    attributes: {text: string, n: integer}\n"
        let pages = [#"{"r": [{}, {"other": 1}, {"text": "x"}, {}]}"#]
        let (sqlite, db) = try ingest(yaml, pages)
        #expect(sqlite.status == .finished, "\(sqlite.error ?? "")")
        #expect(try rows(db, "SELECT count(*), count(text), count(n) FROM note") == [["4", "1", "0"]])
        let url = try PostgresServer.freshDatabase()
        var options = RunOptions()
        options.databasePath = url
        options.progressInterval = 0
        let config = try PipelineConfig.parse(text: yaml, path: "bare.yml")
        let postgres = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(pages))
        #expect(postgres.counters == sqlite.counters)
        #expect(try PGConnection(url: url).execute("SELECT count(*), count(text) FROM note") == [["4", "1"]])
    }
}
