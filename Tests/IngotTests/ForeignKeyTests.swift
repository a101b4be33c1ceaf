import Foundation
import Testing

@testable import Ingot

/// The relations as foreign keys (docs/stores.md, "Foreign keys").
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct ForeignKeyTests {
    /// PostgreSQL declares no foreign keys (each would be checked at every link written), but
    /// `ingot schema --foreign-keys` prints the statements that declare the relations SQLite
    /// declares (the same set: one list, `ForeignKey.of`); applied to a loaded SWAPI database they
    /// validate, and a rerun under them still finishes — Ingot's writes keep them true.
    @Test func theForeignKeysIngotPrintsHoldOnEveryRun() throws {
        let server = try FixtureServer()
        let config = try PipelineConfig.load(
            path: packageRoot.appendingPathComponent("pipelines/swapi.yml").path, environment: ["SWAPI_API": server.base])
        let sqlite = temporaryDirectory().appendingPathComponent("fk.db").path
        var options = RunOptions()
        options.databasePath = sqlite
        options.progressInterval = 0
        #expect(PipelineRunner(config: config, options: options, logger: LogCapture().logger).run().status == .finished)
        let keys = ForeignKey.of(config.model)
        var declared = 0
        for table in Set(keys.map(\.table)) {
            declared += Set(try rows(sqlite, "SELECT id FROM pragma_foreign_key_list('\(table)')").map { $0[0] }).count
        }
        #expect(declared == keys.count, "SQLite declares the same relations")

        let url = try PostgresServer.freshDatabase()
        options.databasePath = url
        #expect(PipelineRunner(config: config, options: options, logger: LogCapture().logger).run().status == .finished)
        let printed = try runIngot(
            ["schema", "pipelines/swapi.yml", "--foreign-keys"], environment: ["SWAPI_API": server.base])
        let statements = printed.stdout.split(separator: "\n").map(String.init)
        #expect(statements.count == keys.count)
        let connection = try PGConnection(url: url)
        for statement in statements { try connection.execute(statement) }
        for row in try connection.execute("SELECT conrelid::regclass::text, conname FROM pg_constraint WHERE contype = 'f'") {
            try connection.execute("ALTER TABLE \"\(row[0] ?? "")\" VALIDATE CONSTRAINT \"\(row[1] ?? "")\"")
        }
        #expect(try connection.execute("SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND convalidated") == [["\(keys.count)"]])
        let rerun = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        #expect(rerun.status == .finished, "\(rerun.error ?? "")")
    }
}
