import Foundation
import Testing

/// The built `ingot` binary: output and exit codes, as a user sees them.
struct CLITests {
    static var binary: URL {
        let dir = Bundle.main.executableURL?.deletingLastPathComponent()
            ?? packageRoot.appendingPathComponent(".build/debug")
        return dir.appendingPathComponent("ingot")
    }

    private func run(_ arguments: [String]) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = Self.binary
        process.arguments = arguments
        process.currentDirectoryURL = packageRoot
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
    }

    @Test func badConfigExitsTwoWithFileLineColumn() throws {
        let dir = temporaryDirectory()
        let file = dir.appendingPathComponent("bad.yml")
        try "version: 1\nname: x\nroot: a\nentities:\n  a:\n    identity: nope\n    attributes: {id: integer}\n".write(to: file, atomically: true, encoding: .utf8)
        for command in ["validate", "run", "schema"] {
            let result = try run([command, file.path])
            #expect(result.status == 2, "\(command)")
            #expect(result.stderr == "\(file.path):6:15: identity 'nope' names no attribute of entity 'a'\n")
        }
    }

    @Test func runsTheBundledSampleAndSummarises() throws {
        let db = temporaryDirectory().appendingPathComponent("people.db").path
        let first = try run(["run", "pipelines/people.yml", "--db", db])
        #expect(first.status == 0)
        let summary = try #require(first.stderr.split(separator: "\n").last.map(String.init))
        for key in ["msg=run.summary", "pages=4", "records=73", "inserted=", "updated=", "rejected_records=1", "rejected_pages=0", "duration_s="] {
            #expect(summary.contains(key), "\(key) in \(summary)")
        }
        let second = try run(["run", "pipelines/people.yml", "--db", db, "--log-format", "json"])
        #expect(second.status == 0)
        let last = try #require(second.stderr.split(separator: "\n").last.map(String.init))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: String])
        #expect(json["msg"] == "run.summary")
        #expect(json["inserted"] == "0")
    }

    @Test func schemaPrintsTheDDL() throws {
        let result = try run(["schema", "pipelines/people.yml"])
        #expect(result.status == 0)
        #expect(result.stdout.contains(#"CREATE TABLE IF NOT EXISTS "person" ("id" INTEGER NOT NULL, "first_name" TEXT"#))
    }
}
