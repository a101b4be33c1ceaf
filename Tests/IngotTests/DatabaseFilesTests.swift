import Foundation
import GRDB
import Testing

@testable import Ingot

/// Files beside the database and the numbers that guard them.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct DatabaseFilesTests {
    @Test func aLockFileThatIsASymbolicLinkIsRefusedNotFollowed() throws {
        let dir = temporaryDirectory()
        let victim = dir.appendingPathComponent("victim.txt")
        try Data("precious\n".utf8).write(to: victim)
        let db = dir.appendingPathComponent("d.db").path
        try FileManager.default.createSymbolicLink(atPath: db + ".lock", withDestinationPath: victim.path)
        #expect(throws: RunLockError.self) { try RunLock(databasePath: db, timeout: 0) }
        #expect(try String(contentsOf: victim, encoding: .utf8) == "precious\n")
        do {
            _ = try RunLock(databasePath: db, timeout: 0)
        } catch {
            #expect(!error.isHeld && error.message.contains("symbolic link"), "\(error)")
        }
    }

    /// The lock covers the file, not its spelling: a symbolic link, a hard link and another
    /// relative path to the same database are all excluded while a run holds it.
    @Test func anotherPathToTheSameDatabaseIsExcludedToo() throws {
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("d.db").path
        var holder: RunLock? = try RunLock(databasePath: db, timeout: 0)
        let symlink = dir.appendingPathComponent("alias.db").path
        try FileManager.default.createSymbolicLink(atPath: symlink, withDestinationPath: db)
        let hardlink = dir.appendingPathComponent("hard.db").path
        try FileManager.default.linkItem(atPath: db, toPath: hardlink)
        for alias in [symlink, hardlink, dir.path + "/./d.db"] {
            do {
                _ = try RunLock(databasePath: alias, timeout: 0.1)
                Issue.record("\(alias) was not excluded")
            } catch {
                #expect(error.isHeld, "\(alias): \(error)")
            }
        }
        #expect(holder != nil)
        holder = nil
        // Released: any path takes it now.
        #expect(throws: Never.self) { _ = try RunLock(databasePath: symlink, timeout: 0) }
    }

    @Test func theMetricsFileIsNeverWrittenThroughAPlantedLink() throws {
        let dir = temporaryDirectory()
        let victim = dir.appendingPathComponent("victim.txt")
        try Data("precious\n".utf8).write(to: victim)
        let file = dir.appendingPathComponent("ingot.prom")
        // The old predictable names, planted for this process and a few others.
        for pid in [getpid(), getpid() + 1, 1] {
            try FileManager.default.createSymbolicLink(
                atPath: dir.appendingPathComponent(".ingot.prom.\(pid).tmp").path, withDestinationPath: victim.path)
        }
        let metrics = RunMetrics(pipeline: "p", fileURL: file)
        #expect(metrics.update(RunMetrics.Snapshot(counters: RunCounters())) == nil)
        #expect(try String(contentsOf: victim, encoding: .utf8) == "precious\n")
        #expect(try String(contentsOf: file, encoding: .utf8).contains("ingot_run_duration_seconds"))
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter {
            $0.hasPrefix(".ingot.prom.") && !$0.hasSuffix(".tmp")
        }
        #expect(left.isEmpty, "\(left)")
    }

    /// Another program holding SQLite's write lock past --lock-timeout (a shell inside a
    /// transaction, a backup): the same temporary condition as another run, exit 75.
    @Test(.hangGuard) func anotherProgramHoldingTheDatabaseIsTemporary() throws {
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("people.db").path
        #expect(try runIngot(["run", "pipelines/people.yml", "--db", db, "--no-archive"]).status == 0)
        var configuration = Configuration()
        configuration.allowsUnsafeTransactions = true  // a transaction held open, as a shell would
        let other = try DatabaseQueue(path: db, configuration: configuration)
        try other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN EXCLUSIVE") }
        let result = try runIngot(["run", "pipelines/people.yml", "--db", db, "--no-archive", "--lock-timeout", "0.3"])
        try other.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }
        #expect(result.status == 75, "\(result.stderr)\n\(result.stdout)")
        #expect(result.stderr.contains("locked") || result.stderr.contains("busy"), "\(result.stderr)")
    }

    @Test(arguments: [
        ("--lock-timeout", "2147484", ""), ("", "", "2147484"), ("--lock-timeout", "1e300", ""), ("--commit-interval", "1e12", ""),
    ])
    func numericOptionsAreBoundedBeforeUse(option: String, value: String, environment: String) throws {
        let dir = temporaryDirectory()
        let arguments =
            ["run", "pipelines/people.yml", "--db", dir.appendingPathComponent("d.db").path, "--no-archive"]
            + (option.isEmpty ? [] : [option, value])
        let result = try runIngot(arguments, environment: environment.isEmpty ? [:] : ["INGOT_LOCK_TIMEOUT": environment])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains(option.isEmpty ? "INGOT_LOCK_TIMEOUT" : option), "\(result.stderr)")
    }
}
