import Foundation
import Testing

/// Every write may fail (docs/reliability.md): the `ingot` binary run with scripts/faultfs.c
/// preloaded, which fails one chosen write or sync to the database's files, then `--resume`
/// without the fault, then Benchmarks/people.py's check. The small version of `make chaos`'s
/// sweep (scripts/faultsweep.py: 48 points per load plan, EIO and ENOSPC).
@Suite(.tags(.sweep), .beyondUnit, .waitsOffThePool)
struct FaultInjectionTests {
    /// The shim, compiled once per test process with the toolchain's C compiler.
    static let shim: String? = {
        let out = temporaryDirectory().appendingPathComponent("faultfs.so").path
        let source = packageRoot.appendingPathComponent("scripts/faultfs.c").path
        for compiler in ["cc", "clang", "gcc"] {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = [compiler, "-shared", "-fPIC", "-O2", "-o", out, source, "-ldl"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            guard (try? process.run()) != nil else { continue }
            process.waitUntilExit()
            if process.terminationStatus == 0 { return out }
        }
        return nil
    }()

    /// A people run from local pages into `db`, with `options`; with `fault` (the shim's
    /// settings) preloaded. The shim's report (`calls=`, `hit=`) comes back too.
    private func run(
        pages: String, db: String, dir: URL, options: [String], resume: Bool = false, fault: [String: String]? = nil
    ) throws -> (status: Int32, stderr: String, calls: Int, hit: String) {
        var environment: [String: String] = [:]
        let report = dir.appendingPathComponent("faultfs.report").path
        try? FileManager.default.removeItem(atPath: report)
        if let fault {
            let shim = try #require(Self.shim, "scripts/faultfs.c compiles with the toolchain's cc")
            environment = fault.merging(["LD_PRELOAD": shim, "FAULTFS_REPORT": report]) { $1 }
        }
        let result = try runIngot(
            [
                "run", "pipelines/people.yml", "--pages", pages, "--db", db, "--no-archive", "--progress-interval", "0", "--lanes", "2",
            ] + options + (resume ? ["--resume"] : []),
            environment: environment)
        let text = (try? String(contentsOfFile: report, encoding: .utf8)) ?? ""
        var calls = 0
        var hit = ""
        for line in text.split(separator: "\n") {
            if line.hasPrefix("calls=") { calls = Int(line.dropFirst(6)) ?? 0 }
            if line.hasPrefix("hit=") { hit = String(line.dropFirst(4)) }
        }
        return (result.status, result.stderr, calls, hit)
    }

    /// A staged load in one transaction (no commit on time), its staging file's writes failing
    /// one at a time with EIO, over all of them: the first run fails with exit 1 naming the disk
    /// error, never a signal; `--resume` without the fault ends in the exact state. Before the
    /// fix, a failed COMMIT of the staging file let the run's end commit the resume point past
    /// it: the resume ended `finished` with 0 of the persons.
    @Test func aFailedWriteOfTheStagingFileResumesExactly() throws {
        try sweep(match: ".db.stage", mode: "eio", points: 8)
    }

    /// The same with the database file itself, which the merge writes (under a rollback journal)
    /// and whose commit fails: the staging file stays for the resume (it was removed, and every
    /// resume refused the load as "missing").
    @Test func aFailedWriteOfTheDatabaseDuringAStagedLoadResumesExactly() throws {
        try sweep(match: ".db$", mode: "eio", points: 8)
    }

    /// A disk that fills up under the staging file: every write from the Nth on fails with ENOSPC.
    @Test func aFullDiskUnderTheStagingFileResumesExactly() throws {
        try sweep(match: ".db.stage", mode: "enospc", points: 4)
    }

    /// A staged load that failed half-way, whose staging file is then lost (removed, or cut to
    /// half its size: torn), resumes exactly: the run goes back to where the load began (here,
    /// its first page) and stages those pages again. It was refused ("the staging file … is
    /// missing or another load's: run the pipeline again without --resume").
    @Test(arguments: [("removed", [String]()), ("torn", []), ("removed", ["--bulk"]), ("torn", ["--bulk"])])
    func aLostStagingFileIsStagedAgainOnResume(damage: String, mode: [String]) throws {
        let pages = try generatePeople(persons: 3000, pageSize: 100)
        // A commit after each batch of a third of the records: the fault, two thirds into the
        // staging file's writes, comes after the first commit whatever the file's own writes.
        let options = mode + ["--batch-records", "1000", "--commit-records", "1000", "--commit-interval", "3600"]
        let dir = temporaryDirectory()
        let counting = try run(
            pages: pages, db: dir.appendingPathComponent("count.db").path, dir: dir, options: options, fault: ["FAULTFS_MATCH": ".db.stage"]
        )
        let db = dir.appendingPathComponent("people.db").path
        let first = try run(
            pages: pages, db: db, dir: dir, options: options,
            fault: ["FAULTFS_MATCH": ".db.stage", "FAULTFS_AT": "\(counting.calls * 2 / 3)", "FAULTFS_MODE": "eio"])
        #expect(first.status == 1, "\(first.stderr.suffix(600))")
        #expect(try rows(db, "SELECT pages > 0 FROM _ingot_runs") == [["1"]], "some staged batches were committed")
        let stage = stageFile(db)
        if damage == "removed" {
            try FileManager.default.removeItem(atPath: stage)
        } else {
            let handle = try #require(FileHandle(forUpdatingAtPath: stage))
            try handle.truncate(atOffset: try handle.seekToEnd() / 2)
            try handle.close()
        }
        let resumed = try run(pages: pages, db: db, dir: dir, options: options, resume: true)
        #expect(resumed.status == 0, "\(resumed.stderr.suffix(600))")
        #expect(try checkPeople(db, pages).contains(#""ok": true"#))
        let files = try FileManager.default.contentsOfDirectory(atPath: pages).filter { $0.hasPrefix("page-") }.count
        #expect(try rows(db, "SELECT status, pages FROM _ingot_runs") == [["finished", "\(files)"]], "every page counted once")
        #expect(!FileManager.default.fileExists(atPath: stage))
    }

    private func sweep(match: String, mode: String, points: Int) throws {
        // A thousand persons (twelve pages, 1,200 records) in four batches: every write the sweep
        // picks falls in a load of several batches, and each point costs a run and a resume of
        // the debug binary.
        let pages = try generatePeople(persons: 1000, pageSize: 100)
        let options = ["--bulk", "--batch-records", "334", "--commit-records", "100000", "--commit-interval", "3600"]
        let dir = temporaryDirectory()
        let counting = try run(
            pages: pages, db: dir.appendingPathComponent("count.db").path, dir: dir, options: options, fault: ["FAULTFS_MATCH": match])
        #expect(counting.status == 0, "\(counting.stderr.suffix(600))")
        #expect(counting.calls > points, "the run writes \(match) \(counting.calls) times")
        var fired = 0
        for i in 0..<points {
            let n = 1 + i * (counting.calls - 1) / max(1, points - 1)
            let db = dir.appendingPathComponent("people-\(mode)-\(n).db").path
            let first = try run(
                pages: pages, db: db, dir: dir, options: options,
                fault: ["FAULTFS_MATCH": match, "FAULTFS_AT": "\(n)", "FAULTFS_MODE": mode])
            if !first.hit.isEmpty { fired += 1 }
            if first.status == 0 {
                // The write was one SQLite could do without (a sync it retried, a journal it
                // did not need): then every row must be there.
                #expect(try checkPeople(db, pages).contains(#""ok": true"#), "\(mode)@\(n): exit 0 with rows missing")
                continue
            }
            #expect(first.status == 1, "\(mode)@\(n) hit \(first.hit): \(first.stderr.suffix(600))")
            #expect(first.stderr.contains("disk I/O error") || first.stderr.contains("full"), "\(first.stderr.suffix(600))")
            let resumed = try run(pages: pages, db: db, dir: dir, options: options, resume: true)
            #expect(resumed.status == 0, "\(mode)@\(n) hit \(first.hit): the resume: \(resumed.stderr.suffix(600))")
            let check = try checkPeople(db, pages)
            #expect(check.contains(#""ok": true"#), "\(mode)@\(n) hit \(first.hit): \(check.prefix(400))")
        }
        // Every point fires but, with ENOSPC, one that falls on a sync (a full disk fails writes).
        #expect(fired >= (mode == "enospc" ? points - 1 : points), "\(fired) of \(points) points fired")
    }
}

/// Logging that never ends a run: stderr and stdout that refuse writes (closed, a full disk, a
/// pipe whose reader is gone) cost the lines, counted, never the run.
@Suite(.tags(.sweep), .beyondUnit, .waitsOffThePool)
struct StandardStreamTests {
    /// Runs the bundled sample with `stderr` as the process's standard error; its exit status
    /// and the persons stored.
    private func run(stderr: FileHandle?, stdout: FileHandle? = nil, arguments: [String] = []) throws -> (status: Int32, persons: String) {
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("people.db").path
        let process = Process()
        process.executableURL = CLITests.binary
        process.arguments = ["run", "pipelines/people.yml", "--db", db, "--no-archive"] + arguments
        process.currentDirectoryURL = packageRoot
        process.standardError = stderr
        process.standardOutput = stdout ?? FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationReason == .exit, "ended by a signal")
        return (process.terminationStatus, try rows(db, "SELECT count(*) FROM person").first?.first ?? "")
    }

    @Test func aFullDiskUnderStderrCostsTheLinesNotTheRun() throws {
        let full = try #require(FileHandle(forWritingAtPath: "/dev/full"))
        let dir = temporaryDirectory()
        let metrics = dir.appendingPathComponent("ingot.prom").path
        let result = try run(stderr: full, arguments: ["--metrics-file", metrics])
        #expect(result.status == 0)
        #expect(result.persons == "60")
        let exposition = try String(contentsOfFile: metrics, encoding: .utf8)
        let dropped = exposition.split(separator: "\n").first { $0.hasPrefix("ingot_log_lines_dropped_total{") }
        #expect(dropped.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0 > 0, "\(exposition)")
    }

    /// Started with stderr closed (`2>&-`): the log lines go nowhere, the database file never
    /// takes stderr's number (/dev/null does), and the run ends with its own code.
    @Test func aClosedStderrCostsTheLinesNotTheRun() throws {
        let db = temporaryDirectory().appendingPathComponent("people.db").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "exec \"$0\" run pipelines/people.yml --db \"$1\" --no-archive 2>&-", CLITests.binary.path, db]
        process.currentDirectoryURL = packageRoot
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == 0)
        #expect(try rows(db, "SELECT count(*) FROM person") == [["60"]])
        #expect(try rows(db, "PRAGMA integrity_check") == [["ok"]])
    }

    @Test func aPipeWhoseReaderIsGoneCostsTheLinesNotTheRun() throws {
        let pipe = Pipe()
        try pipe.fileHandleForReading.close()
        let result = try run(stderr: pipe.fileHandleForWriting, stdout: pipe.fileHandleForWriting)
        #expect(result.status == 0)
        #expect(result.persons == "60")
    }
}
