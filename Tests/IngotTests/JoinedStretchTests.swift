import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Ingot

/// A joined job's staged stretch (PGStore+JoinedStaging.swift): units in an unbroken stretch are
/// staged and written at once, with one position; the tables end as a single job leaves them.
@Suite(.tags(.postgres), .beyondUnit, .serialized)
struct JoinedStretchTests {
    /// Three pages of 1,000 persons each (a job's first batch may be its first page alone:
    /// enough to stage), identities shuffled (in no identity order: staged), with dogs shared
    /// between pages.
    static let pages: [String] = {
        var rng = SeededGenerator(seed: 23)
        let ids = Array(1...3000).shuffled(using: &rng)
        return stride(from: 0, to: ids.count, by: 1000).map { start in
            bulkPage(
                ids[start..<start + 1000].map { id in
                    #"{"id": \#(id), "name": "n\#(id)", "email": "e\#(id)@x", "dogs": [\#(id % 50), {"id": \#(id % 7), "name": "d\#(id)"}]}"#
                }.joined(separator: ", "))
        }
    }()

    /// A job of join `name` over `pages` (it fetches them when no other job does), started;
    /// waits for its summary and log lines.
    private func startJob(
        _ url: String, _ name: String, _ pages: [String], yaml: String = bulkYAML
    ) throws -> () throws -> (RunSummary, [String]) {
        try start(try runner(url, name, yaml: yaml), pages)
    }

    /// A job alone in its run stages every unit and writes them at once: the tables, counts and
    /// rejects of a single job, no positions (the stretch is the whole run: nothing is left to
    /// merge with), and no staging file left — its own, or one a job that died before writing
    /// its stretch left behind.
    @Test(.timeLimit(.minutes(1))) func aJobAloneStagesTheWholeRun() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let pages = Self.pages + [bulkPage(#"{"id": "bad"}, {"id": 5, "name": "Five"}"#)]
        // A job that died holding a stretch left its file and key (its units' leases ran out).
        let dead = try PGJoinedStore(url: url, model: config.model, plan: .joinedPositions)
        let deadRun = try dead.joinRun(JoinTests.request("alone", config))
        let leftover = PGStaging.newPath()
        try Data("staged".utf8).write(to: URL(fileURLWithPath: leftover))
        let connection = try PGConnection(url: url)
        _ = try connection.execute(
            "INSERT INTO _ingot_state (pipeline, key, value) VALUES ('', $1, $2)",
            [PGStaging.stateKey(deadRun.runID, job: "dead-job"), leftover])
        try dead.close()

        let (summary, logs) = try startJob(url, "alone", pages)()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(logs.contains { $0.contains("msg=bulk.started") } && logs.contains { $0.contains("msg=bulk.merged") })
        let (single, db) = try ingest(bulkYAML, pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(summary.counters.inserted == single.counters.inserted && summary.counters.rejectedRecords == 1)
        #expect(try connection.execute("SELECT count(*) FROM _ingot_rejects") == [["1"]])
        #expect(try connection.execute("SELECT count(*) FROM person WHERE _ingot_pos IS NOT NULL") == [["0"]])
        #expect(try connection.execute("SELECT status, records FROM _ingot_runs") == [["finished", "3002"]])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE pipeline = ''") == [["0"]])
        #expect(!FileManager.default.fileExists(atPath: leftover), "the dead job's file is removed with the run's end")
    }

    /// A stretch whose last page is staged in part (a page in parts, its first batch staged)
    /// breaks at a batch that goes on with that page's rest and another job's unit: written
    /// then, it must leave that unit open — its rest is written batch by batch and marks it done.
    /// Marked done with the stretch, the rest was refused as a lost claim and lost — its records,
    /// their rejections and its page's counts — while the run said finished.
    ///
    /// Its rows are written at the key of the last part staged, not past the whole unit: the
    /// unit's later parts, written batch by batch at their own keys, must win over its earlier
    /// records. Written past the unit, a record deleted later in the page kept its earlier
    /// columns (JoinedOrderTests, when the source ended while the page was still decoding).
    @Test func aStretchLeavesAUnitStagedInPartOpen() {
        let (u1, u2, u4) = (UnitRef(seq: 1, claim: 1), UnitRef(seq: 2, claim: 1), UnitRef(seq: 4, claim: 1))
        var stretch = JoinedStretch()
        stretch.add([u1], lastKey: UnitOrder.key(seq: 1, part: 4), endingItsPage: true)
        #expect(stretch.key == UnitOrder.lastKey(seq: 1))
        stretch.add([u2], lastKey: UnitOrder.key(seq: 2, part: 2), endingItsPage: false)
        #expect(stretch.units == [u1, u2] && stretch.wholeUnits == [u1])
        #expect(stretch.key == UnitOrder.key(seq: 2, part: 2), "below the unit's later parts")
        #expect(stretch.key < UnitOrder.key(seq: 2, part: 3) && stretch.key > UnitOrder.lastKey(seq: 1))
        #expect(stretch.continues(with: [u2]), "the rest of its page")
        #expect(!stretch.continues(with: [u2, u4]), "another job holds unit 3")
        stretch.add([u2], lastKey: UnitOrder.key(seq: 2, part: 5), endingItsPage: true)
        #expect(stretch.wholeUnits == [u1, u2])
        #expect(stretch.key == UnitOrder.lastKey(seq: 2))
    }

    /// Another job holds unit 4 while this job stages units 1–3; it writes unit 4 (a person of
    /// unit 2, renamed, with other dogs) before this job claims unit 5. The stretch ends there
    /// (unit 5 does not continue it): written with one position, it meets the row unit 4 made
    /// (a unique violation), and is merged by position instead — unit 4's values win over the
    /// stretch's, the stretch's over no one's; unit 5 then goes batch by batch and wins over
    /// both. The tables are a single job's over the five pages in order.
    @Test(.timeLimit(.minutes(1))) func aStretchThatMeetsAnotherJobsRowsIsMergedByPosition() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let renamed = 1001  // a person of the stretch
        let unit4 = bulkPage(#"{"id": \#(renamed), "name": "four", "dogs": [900, {"id": 901, "name": "new"}]}"#)
        let unit5 = bulkPage(#"{"id": \#(renamed), "email": "five@x"}, {"id": 5000, "name": "last"}"#)
        let pages = Self.pages + [unit4, unit5]
        // The other job fetches: units 1–4 enqueued, unit 4 held, the source not ended yet.
        let other = try PGJoinedStore(url: url, model: config.model, plan: .joinedPositions)
        defer { try? other.close() }
        let run = try other.joinRun(JoinTests.request("meet", config))
        _ = try #require(try run.takeFetcherRole())
        for seq in 1...4 { #expect(try run.enqueue(Page(seq: seq, source: "p\(seq)", bytes: Array(pages[seq - 1].utf8)), as: seq)) }
        var held: [Page] = []
        for _ in 1...4 { held.append(try #require(try run.claim(maxPageBytes: 1 << 20)).page) }
        let connection = try PGConnection(url: url)
        _ = try connection.execute(
            "UPDATE _ingot_units SET status = 'pending', job = NULL, lease_until = NULL WHERE name = 'meet' AND seq <= 3")

        let job = try startJob(url, "meet", pages)
        // This job stages units 1–3 (its staging file is named once its first batch stages).
        try waitUntil { try connection.execute("SELECT count(*) FROM _ingot_state WHERE key LIKE 'staged_load:%:%'") == [["1"]] }
        // The other job writes unit 4, then enqueues unit 5 and ends the source.
        try Self.write(unit4, as: held[3], config, into: other)
        #expect(try run.enqueue(Page(seq: 5, source: "p5", bytes: Array(unit5.utf8)), as: 5))
        #expect(try run.endSource(at: 6))

        let (summary, logs) = try job()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(logs.contains { $0.contains("msg=bulk.merged") })
        // Merged by position: the renamed person was stored already, by another job's batch (the
        // stretch counts it updated, not inserted); unit 5's deferred row meets the row this run
        // made, which the merge does not count as an update of the run.
        #expect(summary.counters.entities["person"]?.updated == 1, "\(summary.counters.entities)")
        let (_, db) = try ingest(bulkYAML, pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(try connection.execute("SELECT name, email FROM person WHERE id = \(renamed)") == [["four", "five@x"]])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_rejects") == [["0"]])
        #expect(try connection.execute("SELECT status FROM _ingot_joins") == [["finished"]])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE pipeline = ''") == [["0"]])
    }

    /// Batches outside a stretch are deferred: another job writes unit 2 into the run's own
    /// tables (the entities' tables stay as they were); this job's units 1, 3 and 4 do not come
    /// in an unbroken stretch, so they are deferred too (staged, if unit 1 made a batch alone);
    /// ending the run, it merges the run's tables once — unit 4's values win over unit 2's,
    /// unit 2's over unit 1's — and drops them. The tables and counts are a single job's over
    /// the four pages in order.
    @Test(.timeLimit(.minutes(1))) func batchesOutsideAStretchAreMergedOnceWhenTheRunEnds() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        // A person of unit 1 (the stretch), renamed by unit 2, given an email by unit 4.
        let first = try #require(Self.pages[0].firstMatch(of: /"id": (\d+)/).map { Int($0.1) ?? 0 })
        let unit2 = bulkPage(
            #"{"id": \#(first), "name": "two", "dogs": [900, {"id": 901, "name": "new"}]}, {"id": 8001, "name": "eight", "email": "8@x"}"#)
        let unit4 = bulkPage(#"{"id": \#(first), "email": "four@x"}, {"id": 8001, "dogs": [1, 2]}, {"id": 8002, "name": "nine"}"#)
        let pages = [Self.pages[0], unit2, Self.pages[1], unit4]
        // The other job fetches: every unit enqueued, unit 2 held.
        let other = try PGJoinedStore(url: url, model: config.model, plan: .joinedDeferred)
        defer { try? other.close() }
        let run = try other.joinRun(JoinTests.request("deferred", config))
        _ = try #require(try run.takeFetcherRole())
        for seq in 1...4 { #expect(try run.enqueue(Page(seq: seq, source: "p\(seq)", bytes: Array(pages[seq - 1].utf8)), as: seq)) }
        #expect(try run.endSource(at: 5))
        let held = try (1...2).map { _ in try #require(try run.claim(maxPageBytes: 1 << 20)).page }
        let connection = try PGConnection(url: url)
        _ = try connection.execute(
            "UPDATE _ingot_units SET status = 'pending', job = NULL, lease_until = NULL WHERE name = 'deferred' AND seq = 1")
        try Self.write(unit2, as: held[1], config, into: other)
        let ordinal = try #require(try connection.execute("SELECT id FROM _ingot_joins WHERE name = 'deferred'").first?[0])
        #expect(try connection.execute("SELECT count(*) FROM person") == [["0"]], "a deferred batch leaves the tables as they were")
        #expect(try connection.execute("SELECT count(*) FROM _ingot_run\(ordinal)_e0") == [["2"]])
        let index = "SELECT to_regclass('person_dogs_dog_id')::oid"
        let before = try #require(try connection.execute(index).first?[0])

        let (summary, logs) = try startJob(url, "deferred", pages)()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(logs.contains { $0.contains("msg=join.merged") })
        let (single, db) = try ingest(bulkYAML, pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(try connection.execute("SELECT name, email FROM person WHERE id = \(first)") == [["two", "four@x"]])
        #expect(summary.counters.inserted == single.counters.inserted, "\(summary.counters.entities) \(single.counters.entities)")
        // The person of the stretch, given again by units 2 and 4: the merge meets the row this
        // run's stretch made, which is the run's insert, not an update.
        #expect(summary.counters.updated == single.counters.updated, "\(summary.counters.entities) \(single.counters.entities)")
        #expect(
            try connection.execute("SELECT count(*) FROM pg_tables WHERE tablename ~ '^_ingot_run[0-9]+_e'") == [["0"]],
            "the run's tables go with its end")
        #expect(try connection.execute("SELECT status FROM _ingot_joins") == [["finished"]])
        // The foreign key's index of the empty join table was dropped for the merge and built
        // again when the run finished: a new index.
        let after = try #require(try connection.execute(index).first?[0])
        #expect(after != before)
    }

    /// The merge takes an identity's latest deferred row as it is when that row gave every column
    /// and set (a whole record: nothing older can win a column of it), and folds the others
    /// column by column. Another job writes units 1 and 2 into the run's tables; person 1 is
    /// whole in both (unit 2's row wins whole), person 2 whole in unit 1 and renamed alone in
    /// unit 2 (its name from unit 2, the rest from unit 1), person 3 whole in unit 2 only.
    @Test(.timeLimit(.minutes(1))) func wholeLatestRowsAreTakenAsTheyAreOthersFolded() throws {
        let url = try PostgresServer.freshDatabase()
        let yaml = personPipeline("whole")
        let config = try PipelineConfig.parse(text: yaml, path: "whole.yml")
        func person(_ id: Int, _ name: String, _ country: String, dogs: [Int]) -> String {
            #"{"id": \#(id), "name": "\#(name)", "origin": {"country": {"name": "\#(country)"}}, "score": \#(id).5, "dogs": \#(dogs), "best_friend": \#(dogs[0])}"#
        }
        let pages = [
            bulkPage(person(1, "one", "NO", dogs: [1, 2]) + ", " + person(2, "two", "SE", dogs: [3])),
            bulkPage(person(1, "uno", "IT", dogs: [4]) + #", {"id": 2, "name": "dos"}, "# + person(3, "tres", "ES", dogs: [5])),
            bulkPage(person(4, "four", "DK", dogs: [6])),
        ]
        let other = try PGJoinedStore(url: url, model: config.model, plan: .joinedDeferred)
        defer { try? other.close() }
        let run = try other.joinRun(JoinTests.request("whole", config))
        _ = try #require(try run.takeFetcherRole())
        for seq in 1...3 { #expect(try run.enqueue(Page(seq: seq, source: "p\(seq)", bytes: Array(pages[seq - 1].utf8)), as: seq)) }
        #expect(try run.endSource(at: 4))
        for seq in 1...2 {
            try Self.write(pages[seq - 1], as: try #require(try run.claim(maxPageBytes: 1 << 20)).page, config, into: other)
        }
        let connection = try PGConnection(url: url)
        let ordinal = try #require(try connection.execute("SELECT id FROM _ingot_joins WHERE name = 'whole'").first?[0])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_run\(ordinal)_e0") == [["5"]])

        let (summary, _) = try startJob(url, "whole", pages, yaml: yaml)()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let (single, db) = try ingest(yaml, pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(
            try connection.execute("SELECT id, name, country, score, best_id FROM person ORDER BY id")
                == [
                    ["1", "uno", "IT", "1.5", "4"], ["2", "dos", "SE", "2.5", "3"], ["3", "tres", "ES", "3.5", "5"],
                    ["4", "four", "DK", "4.5", "6"],
                ])
        #expect(
            try connection.execute("SELECT person_id, dog_id FROM person_dogs ORDER BY 1, 2") == [
                ["1", "4"], ["2", "3"], ["3", "5"], ["4", "6"],
            ])
        #expect(summary.counters.inserted == single.counters.inserted, "\(summary.counters.entities) \(single.counters.entities)")
    }

    /// A job stopped while it holds a staged stretch wrote none of it: its units are taken over
    /// once their leases run out, by a job that writes them, and the run ends as a single job's.
    /// The stopped job's staging file stays (named in PostgreSQL) until the job that finishes
    /// the run removes it.
    @Test(.timeLimit(.minutes(1))) func aStretchLeftUnwrittenIsTakenOver() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let unit4 = bulkPage(#"{"id": 1001, "name": "four"}, {"id": 9000, "name": "new"}"#)
        let pages = Self.pages + [unit4]
        // Another job fetches: units 1-3 enqueued, the source not ended yet.
        let fetcher = try PGJoinedStore(url: url, model: config.model, plan: .joinedPositions)
        defer { try? fetcher.close() }
        let run = try fetcher.joinRun(JoinTests.request("stop", config))
        _ = try #require(try run.takeFetcherRole())
        for seq in 1...3 { #expect(try run.enqueue(Page(seq: seq, source: "p\(seq)", bytes: Array(pages[seq - 1].utf8)), as: seq)) }
        let connection = try PGConnection(url: url)
        // The first job stages them, then waits for more (the source has not ended): stopped.
        let first = try runner(url, "stop")
        let firstEnds = try start(first, pages)
        try waitUntil {
            try connection.execute("SELECT count(*) FROM _ingot_units WHERE status = 'claimed' AND seq <= 3") == [["3"]]
                && connection.execute("SELECT count(*) FROM _ingot_state WHERE key LIKE 'staged_load:%:%'") == [["1"]]
        }
        first.0.stop()
        let (stopped, _) = try firstEnds()
        #expect(stopped.status != .finished)
        #expect(try connection.execute("SELECT count(*) FROM person") == [["0"]], "nothing of the stretch is written")
        let named = try #require(
            try connection.execute("SELECT value FROM _ingot_state WHERE key LIKE 'staged_load:%:%'").first?[0] ?? nil)
        #expect(FileManager.default.fileExists(atPath: named))
        // The source ends after unit 4; a second job takes units 1-3 over once their leases ran
        // out (ended here, as time passing would).
        #expect(try run.enqueue(Page(seq: 4, source: "p4", bytes: Array(unit4.utf8)), as: 4))
        #expect(try run.endSource(at: 5))
        try connection.execute(
            "UPDATE _ingot_units SET lease_until = now() - interval '1 second' WHERE name = 'stop' AND status = 'claimed'")
        let (summary, logs) = try start(try runner(url, "stop"), pages)()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(logs.contains { $0.contains("msg=unit.taken_over") })
        let (_, db) = try ingest(bulkYAML, pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(try connection.execute("SELECT status FROM _ingot_joins") == [["finished"]])
        #expect(try connection.execute("SELECT count(*) FROM _ingot_state WHERE pipeline = ''") == [["0"]])
        #expect(!FileManager.default.fileExists(atPath: named), "the stopped job's file is removed with the run's end")
    }

    /// Two writers waiting on each other while a stretch is written: the server aborts the
    /// stretch's transaction (`deadlock_detected`), and it is written again, the careful way
    /// (`batch.retried`). The test makes the cycle: it holds dog 49 (an uncommitted insert)
    /// while the stretch copies dogs 0 to 49, then inserts dog 3 itself. The job's deadlock check
    /// runs 2 s after it starts waiting (the test's, 60 s after), so the job is the one aborted.
    @Test(.timeLimit(.minutes(1))) func aDeadlockedStretchIsWrittenAgain() throws {
        let url = try PostgresServer.freshDatabase()
        let config = try PipelineConfig.parse(text: bulkYAML, path: "bulk.yml")
        let name = String(url.split(separator: "/").last ?? "")
        let connection = try PGConnection(url: url)
        _ = try connection.execute("ALTER DATABASE \(name) SET deadlock_timeout = '2s'")
        // Another job fetches: units 1-3 enqueued; the source ends when the test says.
        let fetcher = try PGJoinedStore(url: url, model: config.model, plan: .joinedPositions)
        defer { try? fetcher.close() }
        let run = try fetcher.joinRun(JoinTests.request("cycle", config))
        _ = try #require(try run.takeFetcherRole())
        for seq in 1...3 { #expect(try run.enqueue(Page(seq: seq, source: "p\(seq)", bytes: Array(Self.pages[seq - 1].utf8)), as: seq)) }
        let job = try startJob(url, "cycle", Self.pages)
        try waitUntil {
            try connection.execute("SELECT count(*) FROM _ingot_units WHERE status = 'claimed'") == [["3"]]
                && connection.execute("SELECT count(*) FROM _ingot_state WHERE key LIKE 'staged_load:%:%'") == [["1"]]
        }
        let holder = try PGConnection(url: url)
        _ = try holder.execute("SET deadlock_timeout = '60s'")
        _ = try holder.execute("BEGIN")
        _ = try holder.execute("INSERT INTO dog (id) VALUES (49)")
        // The job's stretch is written once the source ends: it waits for dog 49.
        #expect(try run.endSource(at: 4))
        try waitUntil {
            try connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()") != [["0"]]
        }
        _ = try holder.execute("INSERT INTO dog (id) VALUES (3)")
        _ = try holder.execute("ROLLBACK")
        let (summary, logs) = try job()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(logs.contains { $0.contains("msg=batch.retried") && $0.contains("reason=deadlock") }, "\(logs)")
        let (_, db) = try ingest(bulkYAML, Self.pages)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        #expect(try connection.execute("SELECT count(*) FROM _ingot_rejects") == [["0"]])
    }

    /// Writes `text` as the claimed unit `unit` through `store` (another job's write of it, as
    /// its writer stage would: mapped, folded, resolved), and commits.
    private static func write(_ text: String, as unit: Page, _ config: PipelineConfig, into store: PGJoinedStore) throws {
        var mapper = RecordMapper(plan: MappingPlan(model: config.model, root: config.root, framing: config.framing))
        var decoded: [DecodedPage] = []
        mapper.map(bytes: Array(text.utf8), seq: unit.seq, source: "p\(unit.seq)", partRecords: 100) { part in
            var page = part
            page.unit = unit.unit
            decoded.append(page)
        }
        let resolver = BatchResolver(model: config.model, layouts: EntityLayout.layouts(of: config.model))
        try store.write(try resolver.resolve(resolver.prepare(decoded, uncommitted: UncommittedIdentities(), store: store), store: store)) {
            _ in
        }
        try store.commit()
    }

    /// A runner of join `name` into `url`, and its logs. Its leases (30 s) are renewed only when
    /// a test moves its clock (``ManualTimers``): a lease lapses because a test ends it, never
    /// because the machine was slow.
    private func runner(_ url: String, _ name: String, yaml: String = bulkYAML) throws -> (PipelineRunner, LogCapture) {
        let config = try PipelineConfig.parse(text: yaml, path: "bulk.yml")
        var options = RunOptions()
        options.databasePath = url
        options.join = name
        options.timers = ManualTimers()
        options.progressInterval = 0
        let logs = LogCapture()
        return (PipelineRunner(config: config, options: options, logger: logs.logger), logs)
    }

    /// Runs `runner` over `pages` on a thread of its own; waits for its summary and log lines.
    private func start(_ runner: (PipelineRunner, LogCapture), _ pages: [String]) throws -> () throws -> (RunSummary, [String]) {
        let result = Mutex<RunSummary?>(nil)
        let done = DispatchSemaphore(value: 0)
        let (job, logs) = runner
        Thread.detachNewThread {
            let summary = job.run(source: MemoryPageSource(pages))
            result.withLock { $0 = summary }
            done.signal()
        }
        return {
            done.wait()
            return (try #require(result.withLock { $0 }), logs.all)
        }
    }
}
