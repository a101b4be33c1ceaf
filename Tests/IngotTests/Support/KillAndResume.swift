import Foundation
import Testing

@testable import Ingot

/// `kill -9` while the server holds request `holdAt` (the pages before it are committed by
/// then: no timing involved), then `--resume`: the run ends exactly as one uninterrupted run,
/// every page counted once across both. `check` runs on the database after.
///
/// `committed`: the pages committed before the kill, when fewer than `holdAt - 1` can be — a
/// fan-out whose requests are made several at once reaches the server in an order of their
/// answers' timing, while the run hands its pages out in its own: the held request may be one
/// whose page comes before others, which then wait behind it (docs/cookbook.md's Notion tree,
/// `concurrency: 4`). The kill then waits for the held request to reach the server too.
func killAndResume(
    _ yaml: String, server: FixtureServer, holdAt: Int, pages: Int, committed: Int? = nil, environment: [String: String] = [:],
    batchRecords: Int = 1, beforeResume: () throws -> Void = {}, check: (String) throws -> Void
) throws {
    let dir = temporaryDirectory()
    let pipeline = dir.appendingPathComponent("api.yml")
    try Data(yaml.utf8).write(to: pipeline)
    let db = dir.appendingPathComponent("api.db").path
    let arguments = [
        "run", pipeline.path, "--db", db, "--no-archive", "--progress-interval", "0", "--commit-interval", "0.2", "--batch-records",
        "\(batchRecords)",
    ]
    // The pipe lives as long as its process: a file handle closed while another test spawns
    // a process can fail that spawn (Foundation's Process reads the open descriptors).
    func start(_ extra: [String], errors: Any?) throws -> Process {
        let process = Process()
        process.executableURL = CLITests.binary
        process.arguments = arguments + extra
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors ?? FileHandle.nullDevice
        try process.run()
        return process
    }
    // The first run's log goes to a file (no pipe to drain): read if it ends on its own.
    let firstLog = dir.appendingPathComponent("first.log")
    _ = FileManager.default.createFile(atPath: firstLog.path, contents: nil)
    let firstErrors = try FileHandle(forWritingTo: firstLog)
    defer { try? firstErrors.close() }
    let first = try start([], errors: firstErrors)
    // Normally the kill comes at exactly `holdAt - 1` pages. Should a loaded machine let the
    // held request time out (30 s) and the run go on, it comes later: the resume must be
    // exact all the same. A run that ended on its own fails the test instead of a wait.
    waitUntil {
        guard first.isRunning else { return true }
        guard FileManager.default.fileExists(atPath: db) else { return false }
        let done = ((try? rows(db, "SELECT pages FROM _ingot_runs"))?.first?.first).flatMap { Int($0) } ?? 0
        guard let committed else { return done >= holdAt - 1 }
        return done >= committed && (try? server.counters()["people_requests"]).flatMap { $0 } ?? 0 >= holdAt
    }
    #expect(
        first.isRunning,
        "the first run ended before it was killed (status \(first.isRunning ? 0 : first.terminationStatus)): \((try? String(contentsOf: firstLog, encoding: .utf8)) ?? "")"
    )
    kill(first.processIdentifier, SIGKILL)
    first.waitUntilExit()
    #expect(try rows(db, "SELECT status FROM _ingot_runs") == [["running"]])
    try beforeResume()
    let out = Pipe()
    let resume = try start(["--resume"], errors: out)
    let log = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    resume.waitUntilExit()
    #expect(resume.terminationStatus == 0, "\(log)")
    #expect(try rows(db, "SELECT status, pages FROM _ingot_runs") == [["finished", "\(pages)"]])
    try check(db)
}
