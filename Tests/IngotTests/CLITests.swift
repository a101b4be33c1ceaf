import Foundation
import Synchronization
import Testing

@testable import Ingot

/// The built `ingot` binary: output and exit codes, as a user sees them.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct CLITests {
    static var binary: URL {
        let dir =
            Bundle.main.executableURL?.deletingLastPathComponent()
            ?? packageRoot.appendingPathComponent(".build/debug")
        return dir.appendingPathComponent("ingot")
    }

    /// pipelines/people.yml with one change, written into `dir` (its sample directory made
    /// absolute, so the copy reads the same pages).
    private func peoplePipeline(in dir: URL, named name: String, replacing old: String, with new: String) throws -> URL {
        let url = dir.appendingPathComponent("\(name).yml")
        let text = try String(contentsOf: packageRoot.appendingPathComponent("pipelines/people.yml"), encoding: .utf8)
            .replacingOccurrences(of: old, with: new)
            .replacingOccurrences(of: "dir: samples/people", with: "dir: \(packageRoot.path)/pipelines/samples/people")
        try Data(text.utf8).write(to: url)
        return url
    }

    private func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, stdout: String, stderr: String) {
        try runIngot(arguments, environment: environment)
    }

    @Test func badConfigExitsTwoWithFileLineColumn() throws {
        let dir = temporaryDirectory()
        let file = dir.appendingPathComponent("bad.yml")
        try "version: 1\nname: x\nroot: a\nentities:\n  a:\n    identity: nope\n    attributes: {id: integer}\n".write(
            to: file, atomically: false, encoding: .utf8)
        for command in ["validate", "run", "schema"] {
            let result = try run([command, file.path])
            #expect(result.status == 2, "\(command)")
            #expect(result.stderr == "\(file.path):6:15: identity 'nope' names no attribute of entity 'a'\n")
        }
    }

    @Test func runsTheBundledSampleAndSummarises() throws {
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("people.db").path
        let first = try run(["run", "pipelines/people.yml", "--db", db, "--archive-dir", dir.path])
        #expect(first.status == 0)
        let summary = try #require(first.stderr.split(separator: "\n").last.map(String.init))
        for key in [
            "msg=run.summary", "pages=4", "records=73", "inserted=", "updated=", "rejected_records=1", "rejected_pages=0", "duration_s=",
        ] {
            #expect(summary.contains(key), "\(key) in \(summary)")
        }
        let second = try run(["run", "pipelines/people.yml", "--db", db, "--log-format", "json", "--no-archive"])
        #expect(second.status == 0)
        let last = try #require(second.stderr.split(separator: "\n").last.map(String.init))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any])
        #expect(json["msg"] as? String == "run.summary")
        #expect(json["inserted"] as? Int == 0, "a number, not a string")
    }

    /// `ingot runs` lists each run with its counts (logfmt or JSON Lines); `ingot rejects` shows
    /// each rejected record with its coding path, reason and archive entry, and its JSON with
    /// `--raw`; a database Ingot never wrote has none.
    @Test func runsAndRejectsReadTheHistoryBack() throws {
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("people.db").path
        #expect(try run(["run", "pipelines/people.yml", "--db", db, "--archive-dir", dir.path]).status == 0)
        #expect(try run(["run", "pipelines/people.yml", "--db", db, "--no-archive"]).status == 0)
        let runs = try run(["runs", "--db", db])
        #expect(runs.status == 0)
        let lines = runs.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2)
        for key in [
            "pipeline=people", "status=finished", "pages=4", "records=73", "rejected_records=1", "person.inserted=", "rejects.", "archive=",
        ] {
            #expect(lines[0].contains(key), "\(key) in \(lines[0])")
        }
        #expect(lines[1].contains("inserted=0") && !lines[1].contains("archive="))
        let json = try run(["runs", "--db", db, "--json", "--pipeline", "people"])
        let objects = try json.stdout.split(separator: "\n").map {
            try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
        #expect(objects.count == 2 && objects[0]["records"] as? Int == 73 && objects[0]["status"] as? String == "finished")
        #expect(try run(["runs", "--db", db, "--pipeline", "other"]).stdout.isEmpty)

        let rejects = try run(["rejects", "--db", db, "--run", "last", "--raw"])
        #expect(rejects.status == 0)
        let shown = rejects.stdout.split(separator: "\n").map(String.init)
        #expect(shown.count == 2, "\(shown)")
        for key in ["entity=person", "coding_path=results[", "reason_code=", "reason=", "source=", "record="] {
            #expect(shown.first?.contains(key) == true, "\(key) in \(shown)")
        }
        #expect(shown.last?.hasPrefix("{") == true)
        let first = try #require(objects.first?["run_id"] as? String)
        let firstRejects = try run(["rejects", "--db", db, "--run", first])
        #expect(firstRejects.stdout.contains("archive=") && firstRejects.stdout.contains("entry="))
        #expect(try run(["rejects", "--db", db, "--reason", "no_such_reason"]).stdout.isEmpty)

        let none = try run(["runs", "--db", dir.appendingPathComponent("never.db").path])
        #expect(none.status == 0 && none.stdout.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("never.db").path), "reading creates nothing")
    }

    /// `ingot rejects --raw` prints a rejected record whole from its run's archive (the
    /// database keeps 16 KiB of it), found with the archived pipeline's framing.
    @Test func rejectsRawReadsTheWholeRecordFromTheArchive() throws {
        let dir = temporaryDirectory()
        let pages = dir.appendingPathComponent("pages")
        try FileManager.default.createDirectory(at: pages, withIntermediateDirectories: true)
        let long = String(repeating: "x", count: 40_000)
        let record = #"{"first_name":"\#(long)","dogs":[]}"#
        try Data(#"{"results": [{"id": 1}, \#(record), {"id": 2}]}"#.utf8).write(to: pages.appendingPathComponent("page-00001.json"))
        let db = dir.appendingPathComponent("people.db").path
        #expect(try run(["run", "pipelines/people.yml", "--pages", pages.path, "--db", db, "--archive-dir", dir.path]).status == 0)
        let shown = try run(["rejects", "--db", db, "--raw"])
        let lines = shown.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2 && lines[0].contains("coding_path=results[1].id") && lines[0].contains("archive="), "\(lines.first ?? "")")
        #expect(lines.last == record)
        // Without the archive, the stored 16 KiB and where the whole is.
        for file in try FileManager.default.contentsOfDirectory(atPath: dir.path) where file.hasSuffix(".ingot") {
            try FileManager.default.removeItem(at: dir.appendingPathComponent(file))
        }
        let cut = try run(["rejects", "--db", db, "--raw"]).stdout.split(separator: "\n").map(String.init)
        #expect(cut.count == 3 && cut[1].utf8.count < record.utf8.count && record.hasPrefix(cut[1].replacingOccurrences(of: "…", with: "")))
        #expect(cut[2].hasPrefix("… \(record.utf8.count) bytes in all (the page: ingot archive cat "))
    }

    /// `ingot export` writes the stored rows back as the pipeline's page; `ingot run --pages`
    /// of that page gives the same persons, links and linked dogs (a dog no person links any
    /// more is reached with `--entity dog`). `--depth 0` gives identities, `--where` filters,
    /// `--format jsonl` one record a line.
    @Test func exportedRecordsIngestBackIntoTheSameTables() throws {
        let pages = try generatePeople(persons: 400, pageSize: 50, faults: true)
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("people.db").path
        #expect(try run(["run", "pipelines/people.yml", "--pages", pages, "--db", db, "--no-archive"]).status == 0)
        let export = try run(["export", "pipelines/people.yml", "--db", db])
        #expect(export.status == 0, "\(export.stderr)")
        #expect(export.stdout.hasPrefix(#"{"results":["#))
        let again = dir.appendingPathComponent("again")
        try FileManager.default.createDirectory(at: again, withIntermediateDirectories: true)
        try Data(export.stdout.utf8).write(to: again.appendingPathComponent("page-00001.json"))
        let copy = dir.appendingPathComponent("copy.db").path
        let rerun = try run(["run", "pipelines/people.yml", "--pages", again.path, "--db", copy, "--no-archive"])
        #expect(rerun.status == 0 && rerun.stderr.contains("rejected_records=0"), "\(rerun.stderr.suffix(500))")
        for sql in [
            "SELECT * FROM person ORDER BY id", "SELECT * FROM person_dogs ORDER BY 1, 2",
            "SELECT * FROM dog WHERE id IN (SELECT dog_id FROM person_dogs) ORDER BY id",
        ] {
            let (original, copied) = (try rows(db, sql), try rows(copy, sql))
            #expect(!original.isEmpty && original == copied, "\(sql)")
        }
        let someone = try #require(
            try rows(db, "SELECT id FROM person WHERE id IN (SELECT person_id FROM person_dogs) LIMIT 1").first?.first)
        let identities = try run([
            "export", "pipelines/people.yml", "--db", db, "--depth", "0", "--format", "jsonl", "--where", "id=\(someone)",
        ])
        let lines = identities.stdout.split(separator: "\n")
        #expect(lines.count == 1 && lines[0].hasPrefix(#"{"id":\#(someone),"#) && lines[0].contains(#""dogs":["#))
        let dogs = try #require(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])["dogs"] as? [Int]
        let stored = Set(try rows(db, "SELECT dog_id FROM person_dogs WHERE person_id = \(someone)").map { Int($0[0]) ?? -1 })
        #expect(dogs.map(Set.init) == stored)
        let dogsOut = try run(["export", "pipelines/people.yml", "--db", db, "--entity", "dog", "--format", "json"])
        let all = try #require(try JSONSerialization.jsonObject(with: Data(dogsOut.stdout.utf8)) as? [[String: Any]])
        let dogCount = try rows(db, "SELECT count(*) FROM dog")[0][0]
        #expect(String(all.count) == dogCount)
        let bad = try run(["export", "pipelines/people.yml", "--db", db, "--where", "nope=1"])
        #expect(bad.status == 2 && bad.stderr.contains("'nope' is not a column of person"))
    }

    @Test func aDatabaseThatCannotOpenFailsWithExitOneAndASummary() throws {
        let result = try run(["run", "pipelines/people.yml", "--db", "/proc/no-such-dir/x.db", "--no-archive"])
        #expect(result.status == 1)
        let lines = result.stderr.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.contains("msg=run.failed") && $0.contains("db=/proc/no-such-dir/x.db") }, "\(lines)")
        #expect(lines.last?.contains("msg=run.summary") == true && lines.last?.contains("status=failed") == true, "\(lines)")
    }

    @Test func bundledArchiveVerifiesListsAndReplays() throws {
        let verify = try run(["archive", "verify", "pipelines/samples/people.ingot"])
        #expect(verify.status == 0)
        #expect(verify.stdout == "pipelines/samples/people.ingot: ok, 4 entries\n")
        let list = try run(["archive", "ls", "pipelines/samples/people.ingot"])
        #expect(list.stdout.split(separator: "\n").count == 5)
        let cat = try run(["archive", "cat", "pipelines/samples/people.ingot", "2"])
        #expect(
            cat.stdout
                == (try String(contentsOf: packageRoot.appendingPathComponent("pipelines/samples/people/page-00002.json"), encoding: .utf8))
        )
        let db = temporaryDirectory().appendingPathComponent("replay.db").path
        let replay = try run(["replay", "pipelines/samples/people.ingot", "--db", db])
        #expect(replay.status == 0)
        #expect(replay.stderr.contains("records=73"))
        #expect(try rows(db, "SELECT count(*) FROM person") == [["60"]])
    }

    @Test func damagedArchiveFailsVerifyAndCutArchiveStillReplays() throws {
        var bytes = try [UInt8](Data(contentsOf: packageRoot.appendingPathComponent("pipelines/samples/people.ingot")))
        let dir = temporaryDirectory()
        let cut = dir.appendingPathComponent("cut.ingot")
        try Data(bytes[..<(bytes.count * 2 / 3)]).write(to: cut)
        let list = try run(["archive", "ls", cut.path])
        #expect(list.status == 0)
        #expect(list.stderr.hasPrefix("warning: \(cut.path): the archive is cut"))
        let replay = try run(["replay", cut.path, "--db", dir.appendingPathComponent("r.db").path])
        #expect(replay.status == 0)
        #expect(replay.stderr.contains("msg=archive.torn"))

        bytes[bytes.count / 2] ^= 1
        let flipped = dir.appendingPathComponent("flipped.ingot")
        try Data(bytes).write(to: flipped)
        let verify = try run(["archive", "verify", flipped.path])
        #expect(verify.status == 1)
        #expect(verify.stderr.contains(" entry "))
    }

    @Test func archiveLsRefusesAFileThatIsNotAnArchiveAndEscapesWhatItPrints() throws {
        let dir = temporaryDirectory()
        let text = dir.appendingPathComponent("notes.txt")
        try Data("hello, not an archive\n".utf8).write(to: text)
        for command in ["ls", "verify"] {
            let result = try run(["archive", command, text.path])
            #expect(result.status == 1, "archive \(command)")
            #expect(result.stderr.contains("not an Ingot archive"))
        }
        // A source holding terminal escapes is printed escaped.
        let path = dir.appendingPathComponent("esc.ingot").path
        let writer = try ArchiveWriter(
            path: path,
            header: ArchiveHeader(
                formatVersion: 2, runID: "r\u{1B}[2J", pipelineName: "p", pipelineText: "", pipelinePath: "", createdAt: ""))
        try writer.append(Array("[]".utf8), seq: 1, source: "https://x/\u{1B}]0;owned\u{07}\n")
        try writer.close()
        let list = try run(["archive", "ls", path])
        #expect(list.status == 0)
        #expect(!list.stdout.contains("\u{1B}") && !list.stdout.contains("\u{07}"))
        #expect(list.stdout.contains("\\u001b]0;owned\\u0007\\u000a"), "\(list.stdout)")
    }

    @Test func everyOptionHasAnEnvironmentVariableAndTheOptionWins() throws {
        let dir = temporaryDirectory()
        let fromEnv = dir.appendingPathComponent("env.db").path
        let fromFlag = dir.appendingPathComponent("flag.db").path
        let env = [
            "INGOT_DB": fromEnv, "INGOT_NO_ARCHIVE": "1", "INGOT_LOG_FORMAT": "json", "INGOT_PROGRESS_INTERVAL": "0",
            "INGOT_PIPELINE": "pipelines/people.yml",
        ]
        let viaEnv = try run(["run"], environment: env)
        #expect(viaEnv.status == 0, "\(viaEnv.stderr)")
        #expect(viaEnv.stderr.split(separator: "\n").last?.hasPrefix("{") == true, "JSON logs from INGOT_LOG_FORMAT")
        #expect(try rows(fromEnv, "SELECT count(*) FROM person") == [["60"]])
        let viaFlag = try run(["run", "pipelines/people.yml", "--db", fromFlag, "--log-format", "logfmt"], environment: env)
        #expect(viaFlag.status == 0)
        #expect(viaFlag.stderr.contains("msg=run.summary"), "the option wins over INGOT_LOG_FORMAT")
        #expect(FileManager.default.fileExists(atPath: fromFlag))
        for arguments in [["--metrics-port", "70000"], ["--metrics-port", "-1"], ["--metrics-file", ""], ["--db", "mysql://h/x"]] {
            let refused = try run(["run", "pipelines/people.yml", "--no-archive"] + arguments)
            #expect(refused.status == 2, "\(arguments): \(refused.stderr)")
        }
        // A database server that cannot be reached is temporary (75), and its password never shows.
        let unreachable = try run(["run", "pipelines/people.yml", "--no-archive", "--db", "postgresql://ingot:s3cret@127.0.0.1:9/x"])
        #expect(unreachable.status == 75, "\(unreachable.stderr)")
        #expect(!unreachable.stderr.contains("s3cret") && unreachable.stderr.contains("REDACTED"))
        let bad = try run(["run", "pipelines/people.yml"], environment: ["INGOT_LANES": "many"])
        #expect(bad.status == 2)
        #expect(bad.stderr.contains("INGOT_LANES='many' is not an integer"))
    }

    @Test func dryRunPrintsThePlanAndWritesNothing() throws {
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("plan.db").path
        let archives = dir.appendingPathComponent("archives").path
        let plan = try run(["run", "pipelines/people.yml", "--db", db, "--archive-dir", archives, "--dry-run"])
        #expect(plan.status == 0, "\(plan.stderr)")
        #expect(plan.stdout.contains("database: \(db) (new)"))
        #expect(plan.stdout.contains("schema: 6 statements to apply"), "\(plan.stdout)")  // with person_dogs(dog_id)
        #expect(plan.stdout.contains("(4 files)"))
        #expect(!FileManager.default.fileExists(atPath: db), "no database created")
        #expect(!FileManager.default.fileExists(atPath: archives), "no archive directory created")
        // After a run, nothing is left to apply; a pipeline that disagrees is refused with exit 2.
        #expect(try run(["run", "pipelines/people.yml", "--db", db, "--no-archive", "--progress-interval", "0"]).status == 0)
        #expect(try run(["run", "pipelines/people.yml", "--db", db, "--dry-run"]).stdout.contains("schema: 0 statements to apply"))
        let changed = try peoplePipeline(in: dir, named: "changed", replacing: "last_name: string", with: "last_name: integer")
        let refused = try run(["run", changed.path, "--db", db, "--dry-run"])
        #expect(refused.status == 2)
        #expect(refused.stdout.contains("table 'person', column 'last_name': stored as TEXT, the pipeline wants INTEGER"))
    }

    /// `--dry-run --bulk` says whether a staged load could run, and why not; `--bulk` on a filled
    /// database merges into it: a second load of the same pages changes nothing.
    @Test func bulkIsPlannedAndRefusedWithReasons() throws {
        let db = temporaryDirectory().appendingPathComponent("bulk.db").path
        let plan = try run(["run", "pipelines/people.yml", "--db", db, "--dry-run", "--bulk"])
        #expect(plan.stdout.contains("load: staged (--bulk)"), "\(plan.stdout)")
        let auto = try run(["run", "pipelines/people.yml", "--db", db, "--dry-run", "--bulk-after-mib", "5"])
        #expect(auto.stdout.contains("load: batch by batch, staged once the database holds 5 MiB"), "\(auto.stdout)")
        // By default at 4 MiB from local pages, at 40 MiB from a source that fetches (whose
        // waits hide the writes batch by batch).
        let local = try run(["run", "pipelines/people.yml", "--db", db, "--dry-run"])
        #expect(local.stdout.contains("load: batch by batch, staged once the database holds 4 MiB"), "\(local.stdout)")
        let fetched = try run(["run", "pipelines/people-http.yml", "--db", db, "--dry-run"])
        #expect(fetched.stdout.contains("load: batch by batch, staged once the database holds 40 MiB"), "\(fetched.stdout)")
        let never = try run(["run", "pipelines/people.yml", "--db", db, "--dry-run", "--bulk-after-mib", "5", "--no-bulk"])
        #expect(never.stdout.contains("load: batch by batch (--no-bulk)"), "\(never.stdout)")
        let badSize = try run(["run", "pipelines/people.yml", "--db", db, "--dry-run", "--bulk-after-mib=-1"])
        #expect(badSize.status == 2 && badSize.stderr.contains("--bulk-after-mib must be between 0"), "\(badSize.stderr)")
        let swapiAuto = try run(["run", "pipelines/swapi.yml", "--db", db, "--dry-run"])
        #expect(swapiAuto.stdout.contains("load: batch by batch (it cannot turn staged: "), "\(swapiAuto.stdout)")
        let swapi = try run(["run", "pipelines/swapi.yml", "--db", db, "--dry-run", "--bulk"])
        #expect(swapi.stdout.contains("load: --bulk refused:") && swapi.stdout.contains("entity transport is a parent"), "\(swapi.stdout)")
        // What a joined run would do, or why it cannot, before anything runs.
        let pg = "postgresql://127.0.0.1:1/none"
        let swapiJoined = try run(["run", "pipelines/swapi.yml", "--db", pg, "--join", "sw", "--dry-run"])
        #expect(
            swapiJoined.stdout.contains(
                "units committed in the run's order, one after the other: a relationship read from both sides takes its links from whichever side came last (inverse: film.characters"
            ), "\(swapiJoined.stdout)")
        let peopleJoined = try run(["run", "pipelines/people.yml", "--db", pg, "--join", "p", "--dry-run"])
        #expect(peopleJoined.stdout.contains("join: p: units (pages"), "\(peopleJoined.stdout)")
        #expect(peopleJoined.stdout.contains("; each file read by the job that claims it"), "\(peopleJoined.stdout)")
        let poke = temporaryDirectory().appendingPathComponent("pokeapi.yml")
        try Data(RealAPITests.pokeapi("http://127.0.0.1:1").utf8).write(to: poke)
        let pokeJoined = try run(["run", poke.path, "--db", pg, "--join", "k", "--dry-run"])
        #expect(pokeJoined.stdout.contains("; the requests of pokemon fetched by the jobs that claim them"), "\(pokeJoined.stdout)")
        let github = temporaryDirectory().appendingPathComponent("github.yml")
        try Data(try RealAPITests.github("http://127.0.0.1:1").utf8).write(to: github)
        let githubJoined = try run(["run", github.path, "--db", pg, "--join", "g", "--dry-run"], environment: ["GITHUB_TOKEN": "t"])
        #expect(
            githubJoined.stdout.contains("; the requests of comments (each with its pages) fetched by the jobs that claim them"),
            "\(githubJoined.stdout)")
        let paged = temporaryDirectory().appendingPathComponent("paged.yml")
        try Data(
            try peopleOverHTTPText(
                "http://127.0.0.1:1/people", ["paginate: {page: {param: page, start: 1, total_pages: meta.total_pages}}"]
            )
            .utf8
        ).write(to: paged)
        let pagedJoined = try run(["run", paged.path, "--db", pg, "--join", "n", "--dry-run"])
        #expect(pagedJoined.stdout.contains("; the numbered pages after the first fetched by the jobs"), "\(pagedJoined.stdout)")
        #expect(try run(["run", "pipelines/people.yml", "--db", db, "--no-archive", "--progress-interval", "0", "--bulk"]).status == 0)
        let again = try run(["run", "pipelines/people.yml", "--db", db, "--no-archive", "--progress-interval", "0", "--bulk"])
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stderr.contains(" inserted=0 ") && again.stderr.contains(" updated=0"), "\(again.stderr)")
        #expect(again.stderr.contains(" person.unchanged=") && !again.stderr.contains(" person.unchanged=0 "), "\(again.stderr)")
    }

    /// A test per row of the exit-code table (0, 1, 2 and 130/143 have their own tests above).
    @Test func exitThreeWhenRejectsPassALimitOrEverythingWasRejected() throws {
        let dir = temporaryDirectory()
        // The bundled sample has one rejected record.
        let limited = try run([
            "run", "pipelines/people.yml", "--db", dir.appendingPathComponent("a.db").path, "--no-archive", "--max-rejects", "0",
        ])
        #expect(limited.status == 3)
        #expect(limited.stderr.contains("msg=run.rejects_over_limit"))
        #expect(limited.stderr.contains("status=finished"), "what was committed stays committed")
        #expect(try rows(dir.appendingPathComponent("a.db").path, "SELECT count(*) FROM person") == [["60"]])
        let ratio = try run(
            ["run", "pipelines/people.yml", "--db", dir.appendingPathComponent("b.db").path, "--no-archive"],
            environment: ["INGOT_MAX_REJECT_RATIO": "0.001"])
        #expect(ratio.status == 3)
        let within = try run([
            "run", "pipelines/people.yml", "--db", dir.appendingPathComponent("c.db").path, "--no-archive", "--max-rejects", "1",
        ])
        #expect(within.status == 0)
        // A wrong `records:` path rejects every page: with no limit set, that is exit 3 too.
        let wrong = try peoplePipeline(in: dir, named: "wrong", replacing: "records: results", with: "records: data")
        let everything = try run(["run", wrong.path, "--db", dir.appendingPathComponent("d.db").path, "--no-archive"])
        #expect(everything.status == 3)
        #expect(everything.stderr.contains("saw nothing usable"))
    }

    @Test func exitTwoWhenTheDatabaseDisagreesWithThePipeline() throws {
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("x.db").path
        #expect(try run(["run", "pipelines/people.yml", "--db", db, "--no-archive"]).status == 0)
        let changed = try peoplePipeline(in: dir, named: "changed", replacing: "score: double", with: "score: string")
        let refused = try run(["run", changed.path, "--db", db, "--no-archive"])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("failure=configuration"))
    }

    @Test func exitSeventyFiveWhenTheSourceStaysUnreachable() throws {
        let dir = temporaryDirectory()
        // A port nothing listens on: every attempt is refused, then the run gives up.
        let pipeline = dir.appendingPathComponent("down.yml")
        try Data(
            """
            version: 1
            name: down
            source:
              http:
                url: http://127.0.0.1:9/items
                retry: {attempts: 2, base_delay_ms: 1, max_delay_ms: 5}
            records: results
            root: item
            entities:
              item:
                identity: id
                attributes: {id: integer}
            """.utf8
        ).write(to: pipeline)
        let result = try run(["run", pipeline.path, "--db", dir.appendingPathComponent("d.db").path, "--no-archive"])
        #expect(result.status == 75, "\(result.stderr)")
        #expect(result.stderr.contains("failure=temporary"))
    }

    @Test func exitSeventyFiveWhenAnotherRunHoldsTheDatabase() throws {
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("held.db").path
        let holder = try RunLock(databasePath: db, timeout: 0)
        holder.describe(runID: "the-other-run")
        let result = try run(["run", "pipelines/people.yml", "--db", db, "--no-archive", "--lock-timeout", "0.2"])
        #expect(result.status == 75)
        #expect(result.stderr.contains("held by another run"))
        #expect(result.stderr.contains("run_id=the-other-run") && result.stderr.contains("pid=\(getpid())"), "\(result.stderr)")
        withExtendedLifetime(holder) {}
    }

    /// docs/logging.md's events, and the fields that are numbers.
    static let vocabulary: Set<String> = [
        "run.started", "run.resumed", "run.progress", "run.summary", "run.failed", "run.stopping", "run.empty",
        "run.rejects_over_limit", "record.rejected", "page.rejected", "record.rejected.more", "fetch.retry", "fetch.stopped",
        "fetch.max_pages", "batch.failed", "commit.failed", "replace.skipped", "archive.torn", "page.decoded", "batch.committed",
        "metrics.failed",
    ]
    static let numericFields: Set<String> = [
        "pages", "records", "inserted", "updated", "deleted", "rejected_records", "rejected_pages", "bytes", "records_per_s",
        "duration_s", "elapsed_s", "lanes", "batch_records", "commit_records", "seq", "record_index", "attempt", "delay_s",
        "offset", "entries", "pages_read", "pages_decoded", "decode_ms", "commit_ms", "metrics_port", "merged_rows", "staged_after_records",
    ]

    @Test func aJSONLogOfAFullRunFollowsTheVocabulary() throws {
        let token = "tok-9f8e7d6c5b4a"
        let pages = try generatePeople(persons: 1500, pageSize: 100, faults: true)
        let server = try FixtureServer(people: pages, faults: "500:2,429:4", token: token)
        let dir = temporaryDirectory()
        let pipeline = dir.appendingPathComponent("people-http.yml")
        let text = try peopleOverHTTPText(
            "\(server.base)/people/page",
            [
                "paginate: {page: {param: page}}", "auth: {bearer_env: PEOPLE_TOKEN}",
                "retry: {attempts: 4, base_delay_ms: 1, max_delay_ms: 20}",
            ])
        try Data(text.utf8).write(to: pipeline)
        let db = dir.appendingPathComponent("log.db").path
        let archives = dir.appendingPathComponent("archives").path
        let metricsFile = dir.appendingPathComponent("ingot.prom").path
        let result = try run(
            ["run", pipeline.path, "--db", db, "--archive-dir", archives, "--progress-interval", "0.05"],
            environment: ["PEOPLE_TOKEN": token, "INGOT_LOG_FORMAT": "json", "INGOT_LOG_LEVEL": "debug", "INGOT_METRICS_FILE": metricsFile])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stderr.split(separator: "\n").map(String.init)
        var events: Set<String> = []
        var runIDs: Set<String> = []
        for line in lines {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "not JSON: \(line)")
            let msg = try #require(object["msg"] as? String)
            events.insert(msg)
            #expect(Self.vocabulary.contains(msg), "\(msg) is not in docs/logging.md")
            #expect(object["pipeline"] as? String == "people", "\(line)")
            if let id = object["run_id"] as? String { runIDs.insert(id) } else { Issue.record("no run_id: \(line)") }
            for (key, value) in object where Self.numericFields.contains(key) {
                #expect(value is NSNumber && !(value is String), "\(key) is not a number in \(line)")
            }
        }
        #expect(runIDs.count == 1)
        // The page that is not JSON is rejected and ends page pagination (fetch.stopped).
        #expect(
            events.isSuperset(of: [
                "run.started", "run.summary", "fetch.retry", "record.rejected", "page.rejected", "fetch.stopped", "page.decoded",
                "batch.committed",
            ]), "\(events)")
        let decoded = lines.filter { $0.contains(#""msg":"page.decoded""#) }.count
        let summaryPages = lines.last.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }?["pages"] as? Int
        #expect(decoded == summaryPages, "a debug line per page decoded (the page that is not JSON included)")
        // The metrics file parses strictly and agrees with the summary.
        let summary = try #require(lines.last.flatMap { try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] })
        #expect(summary["msg"] as? String == "run.summary")
        let exposition = String(decoding: try Data(contentsOf: URL(fileURLWithPath: metricsFile)), as: UTF8.self)
        let metrics = try PrometheusText(exposition)
        func number(_ key: String) -> Double? { (summary[key] as? NSNumber)?.doubleValue }
        #expect(
            metrics.value("ingot_pages_total", ["outcome": "applied"]).map {
                $0 + (metrics.value("ingot_pages_total", ["outcome": "rejected"]) ?? -1)
            } == number("pages"))
        #expect(metrics.value("ingot_pages_total", ["outcome": "rejected"]) == number("rejected_pages"))
        #expect(metrics.value("ingot_records_read_total") == number("records"))
        #expect(metrics.value("ingot_bytes_total", ["stage": "committed"]) == number("bytes"))
        for entity in ["person", "dog"] {
            for outcome in ["inserted", "updated", "stubs", "rejected"] {
                #expect(
                    metrics.value("ingot_records_total", ["entity": entity, "outcome": outcome]) == number("\(entity).\(outcome)"),
                    "\(entity).\(outcome)")
            }
        }
        #expect(number("dog.stubs_unfilled") != nil)
        #expect(metrics.value("ingot_stubs_unfilled", ["entity": "dog"]) == number("dog.stubs_unfilled"))
        let rejectKeys = summary.keys.filter { $0.hasPrefix("rejects.") }
        #expect(!rejectKeys.isEmpty)
        for key in rejectKeys {
            #expect(metrics.value("ingot_rejects_total", ["reason": String(key.dropFirst(8))]) == number(key), "\(key)")
        }
        #expect(metrics.all("ingot_rejects_total").count == rejectKeys.count)
        #expect((metrics.value("ingot_fetch_retries_total") ?? 0) >= 2)  // a 500 and a 429
        #expect((metrics.value("ingot_fetch_duration_seconds_count") ?? 0) >= number("pages") ?? 1)
        #expect((metrics.value("ingot_run_last_success_timestamp_seconds") ?? 0) > 1_700_000_000)
        // The token appears nowhere: not in the log, the metrics, the archive, or the database.
        #expect(!result.stderr.contains(token))
        #expect(!exposition.contains(token))
        let archive = try #require(try FileManager.default.contentsOfDirectory(atPath: archives).first)
        let archived = try Data(contentsOf: URL(fileURLWithPath: archives + "/" + archive))
        #expect(archived.range(of: Data(token.utf8)) == nil)
        for file in [db, db + "-wal"] where FileManager.default.fileExists(atPath: file) {
            #expect(try Data(contentsOf: URL(fileURLWithPath: file)).range(of: Data(token.utf8)) == nil)
        }
    }

    /// `ingot run` of 300 people paged over HTTP (next URLs, 100 a page) with `arguments`, into a
    /// new database, no archive, no progress lines; the fixture server holds request `slow` for an
    /// hour. The process, its standard error, and the server (alive as long as the test holds it).
    private func startHangingRun(hangingAt slow: Int, _ arguments: [String]) throws -> (Process, Pipe, FixtureServer) {
        let pages = try generatePeople(persons: 300, pageSize: 100)
        let server = try FixtureServer(people: pages, faults: "slow:\(slow)", slow: 3600)
        let dir = temporaryDirectory()
        let pipeline = dir.appendingPathComponent("hang.yml")
        let text = try peopleOverHTTPText("\(server.base)/people/next", ["paginate: {next_url: next}", "timeout_s: 7200"])
        try Data(text.utf8).write(to: pipeline)
        let process = Process()
        process.executableURL = Self.binary
        process.arguments =
            ["run", pipeline.path, "--db", dir.appendingPathComponent("h.db").path, "--no-archive", "--progress-interval", "0"] + arguments
        process.currentDirectoryURL = packageRoot
        let err = Pipe()
        process.standardError = err
        process.standardOutput = Pipe()
        try process.run()
        return (process, err, server)
    }

    /// `--metrics-port 0` serves /metrics and /healthz on a free port (logged in run.started) while
    /// the run lasts: scraped during a run held by a hanging request, then gone after SIGTERM.
    @Test(.hangGuard) func metricsAreServedWhileTheRunLasts() throws {
        let (process, err, server) = try startHangingRun(
            hangingAt: 2, ["--metrics-port", "0", "--log-format", "json", "--batch-records", "100", "--commit-interval", "0.05"])
        defer { withExtendedLifetime(server) {} }
        // The port, from run.started (read line by line while the run goes on).
        var port: Int?
        var buffered = Data()
        while port == nil, let chunk = try err.fileHandleForReading.read(upToCount: 1), !chunk.isEmpty {
            if chunk == Data("\n".utf8) {
                let line = try JSONSerialization.jsonObject(with: buffered) as? [String: Any]
                if line?["msg"] as? String == "run.started" { port = line?["metrics_port"] as? Int }
                buffered = Data()
            } else {
                buffered.append(chunk)
            }
        }
        let base = "http://127.0.0.1:\(try #require(port))"
        let client = HTTPClient()
        #expect(try client.get(base + "/healthz", headers: [], timeout: 5).body == Array("ok\n".utf8))
        // The first page is committed while the second request hangs.
        waitUntil {
            let body = (try? client.get(base + "/metrics", headers: [], timeout: 5).body) ?? []
            let metrics = try? PrometheusText(String(decoding: body, as: UTF8.self))
            return metrics?.value("ingot_pages_total", ["outcome": "applied"]) == 1
        }
        kill(process.processIdentifier, SIGTERM)
        _ = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 143)
        #expect(throws: TransportError.self) { try client.get(base + "/healthz", headers: [], timeout: 5) }
    }

    @Test(.hangGuard) func sigtermDuringAHangingRequestStopsPromptly() throws {
        // The first request hangs for an hour on the server: only aborting it ends the run
        // before the test's time limit does.
        let (process, err, server) = try startHangingRun(hangingAt: 1, [])
        // Signal once the server holds the request.
        waitUntil {
            let body = (try? HTTPClient().get(server.base + "/requests", headers: [], timeout: 5).body) ?? []
            let counts = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Int]
            return (counts?["people_requests"] ?? 0) >= 1
        }
        kill(process.processIdentifier, SIGTERM)
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 143, "\(stderr)")
        #expect(stderr.contains("msg=run.summary") && stderr.contains("status=interrupted"), "\(stderr)")
    }

    /// What a page held never reaches a terminal as a control: `ingot rejects` escapes C0, DEL
    /// and C1 in a file name, `--raw` in the stored page text (newlines and tabs stay);
    /// `--raw-unescaped` gives the exact bytes, to a file or a pipe only.
    @Test func rejectsNeverPrintControlCharacters() throws {
        let dir = temporaryDirectory()
        let pages = dir.appendingPathComponent("pages")
        try FileManager.default.createDirectory(at: pages, withIntermediateDirectories: true)
        let hostile = "{\"results\": [{\"id\": 1, \"first_name\": \"\u{1B}[2J\u{07}\u{9B}31m\"}]}\n\t"
        try Data(hostile.utf8).write(to: pages.appendingPathComponent("page-1\u{1B}]0;pwned\u{07}.json"))
        let db = dir.appendingPathComponent("r.db").path
        let result = try run(["run", "pipelines/people.yml", "--pages", pages.path, "--db", db, "--no-archive"])
        #expect(result.status == 3, "\(result.stderr)")
        let controls = { (text: String) in text.unicodeScalars.filter { $0.value == 0x1B || $0.value == 0x07 || $0.value == 0x9B }.count }
        #expect(controls(result.stderr) == 0, "the logs escape them: \(result.stderr)")
        let listed = try run(["rejects", "--db", db])
        #expect(listed.status == 0)
        #expect(controls(listed.stdout) == 0 && listed.stdout.contains("page-1\\u001b]0;pwned\\u0007.json"), "\(listed.stdout)")
        let raw = try run(["rejects", "--db", db, "--raw"])
        #expect(controls(raw.stdout) == 0 && raw.stdout.contains("\\u001b[2J\\u0007\\u009b31m"), "\(raw.stdout)")
        #expect(raw.stdout.contains("}\n\t"), "newlines and tabs stay")
        let exact = try run(["rejects", "--db", db, "--raw-unescaped"])
        #expect(exact.status == 0)
        #expect(exact.stdout.contains("\u{1B}[2J\u{07}\u{9B}31m"), "the exact bytes, to a pipe")
    }

    @Test func schemaPrintsTheDDL() throws {
        let result = try run(["schema", "pipelines/people.yml"])
        #expect(result.status == 0)
        #expect(result.stdout.contains(#"CREATE TABLE IF NOT EXISTS "person" ("id" INTEGER NOT NULL, "first_name" TEXT"#))
    }

    @Test(.hangGuard) func sigtermStopsCleanlyAndTheArchiveReplays() throws {
        let dir = temporaryDirectory()
        // 8,000 persons in pages of 50: about 190 pages, the hundredth of them mid-run.
        let pages = try generatePeople(persons: 8000, pageSize: 50)
        // Page 100 becomes a named pipe: the run cannot get past it until the test writes it,
        // which it does only after the signal was received. So the signal always lands mid-run.
        let held = pages + "/page-00100.json"
        let heldBytes = try Data(contentsOf: URL(fileURLWithPath: held))
        try FileManager.default.removeItem(atPath: held)
        #expect(mkfifo(held, 0o600) == 0)

        let db = dir.appendingPathComponent("run.db").path
        let archives = dir.appendingPathComponent("archives").path
        let process = Process()
        process.executableURL = Self.binary
        // Batch by batch (`--no-bulk`): what is compared below is the tables a stop leaves, which
        // then hold every committed page (a staged load keeps them in its staging file until resumed).
        process.arguments = [
            "run", "pipelines/people.yml", "--pages", pages, "--db", db, "--archive-dir", archives,
            "--progress-interval", "0", "--batch-records", "1000", "--commit-interval", "0.1", "--no-bulk",
        ]
        process.currentDirectoryURL = packageRoot
        let err = Pipe()
        process.standardError = err
        process.standardOutput = Pipe()
        let collected = Mutex(Data())
        let reading = err.fileHandleForReading
        let drain = Thread {
            while let data = try? reading.read(upToCount: 4096), !data.isEmpty { collected.withLock { $0.append(data) } }
        }
        try process.run()
        drain.start()
        // Batches before the pipe are committed while the source waits on it.
        waitUntil {
            guard FileManager.default.fileExists(atPath: db), let done = try? rows(db, "SELECT pages FROM _ingot_runs"),
                let p = Int(done.first?.first ?? "")
            else { return false }
            return p > 0
        }
        kill(process.processIdentifier, SIGTERM)
        waitUntil { String(decoding: collected.withLock { $0 }, as: UTF8.self).contains("msg=run.stopping") }
        // Now give the source its page if it is waiting on it (it may have seen the stop first).
        while process.isRunning {
            let fd = open(held, O_WRONLY | O_NONBLOCK)
            if fd >= 0 {
                _ = fcntl(fd, F_SETFL, 0)
                let pipe = FileHandle(fileDescriptor: fd, closeOnDealloc: true)
                pipe.write(heldBytes)
                try pipe.close()
                break
            }
            Thread.sleep(forTimeInterval: 0.01)
        }
        process.waitUntilExit()
        waitUntil { String(decoding: collected.withLock { $0 }, as: UTF8.self).contains("msg=run.summary") }
        let stderr = String(decoding: collected.withLock { $0 }, as: UTF8.self)

        #expect(process.terminationStatus == 143)
        let summary = try #require(stderr.split(separator: "\n").last { $0.contains("msg=run.summary") })
        #expect(summary.contains("status=interrupted"), "\(summary)")
        #expect(try rows(db, "PRAGMA integrity_check") == [["ok"]])
        let pagesDone = try #require(Int(try rows(db, "SELECT pages FROM _ingot_runs").first?.first ?? ""))
        #expect(pagesDone > 0 && pagesDone <= 100, "stopped mid-run, at \(pagesDone) pages")
        #expect(try rows(db, "SELECT status FROM _ingot_runs") == [["interrupted"]])

        // The archive holds every page the run read, whole: a replay reaches the same state.
        let archive = try #require(try FileManager.default.contentsOfDirectory(atPath: archives).first)
        let reader = try ArchiveReader(path: archives + "/" + archive)
        #expect(reader.tornAt == nil)
        #expect(reader.entries.count >= pagesDone)
        let replayDB = dir.appendingPathComponent("replay.db").path
        let replay = try run(["replay", archives + "/" + archive, "--db", replayDB, "--progress-interval", "0"])
        #expect(replay.status == 0)
        let content = "SELECT count(*), sum(id), sum(length(coalesce(last_name, ''))) FROM person"
        #expect(try rows(replayDB, content) == rows(db, content))
    }

    @Test(arguments: [false, true])
    func killedRunsResumeToTheExactState(bulk: Bool) throws {
        // The small version of `make chaos`: kill -9 three times, resume after each (a staged
        // load too: kills land while it stages or merges).
        let process = Process()
        process.executableURL = python3
        process.arguments =
            [
                packageRoot.appendingPathComponent("scripts/chaos.py").path, "--ingot", Self.binary.path,
                "--kills", "3", "--persons", "8000", "--max-delay", "0.4", "--seed", "7",
                // Pages of 1000 records in parts of 300, a commit every part: kills land mid-page.
                "--page-size", "1000", "--batch-records", "300", "--commit-records", "300",
            ] + (bulk ? ["--bulk"] : [])
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let result = String(decoding: data, as: UTF8.self)
        #expect(process.terminationStatus == 0, "\(result)")
        #expect(result.contains(#""ok": true"#))
        #expect(result.contains(#""duplicate_rows": 0"#))
    }
}
