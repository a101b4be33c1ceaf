import Foundation
import GRDBSQLite
import Testing

@testable import Ingot

/// A staged load's sorted runs (Store/Staging/StagedRuns.swift): each batch staged in identity
/// order, and the runs merged in the order SQLite would sort them.
struct StagedRunsTests {
    /// Identities of every kind a staging table can hold, in no order: integers (negative, the
    /// largest), reals, a boolean (staged as 1), text (empty, multi-byte UTF-8, a prefix of
    /// another), an integer and a real of one value.
    static let mixed: [ScalarValue] = [
        .text("b"), .integer(3), .real(2.5), .integer(-7), .text("ä"), .text("ab"), .text(""), .integer(2), .real(2.0),
        .bool(true), .text("a"), .integer(.max), .real(-1e300), .text("Z"), .integer(0), .real(0.5),
    ]

    /// One value as SQLite reads it back: its type and text.
    private static func shown(_ statement: OpaquePointer, _ column: Int32) -> String {
        "\(sqlite3_column_type(statement, column)):" + (sqlite3_column_text(statement, column).map { String(cString: $0) } ?? "NULL")
    }

    /// A connection on a new in-memory database with a table `t (run, v)` of no type affinity.
    private static func table() throws -> OpaquePointer {
        var handle: OpaquePointer?
        guard sqlite3_open(":memory:", &handle) == SQLITE_OK, let handle else { throw StoreError.schema("open") }
        sqlite3_exec(handle, "CREATE TABLE t (run, v)", nil, nil, nil)
        return handle
    }

    private static func insert(_ values: [ScalarValue], run: Int, on handle: OpaquePointer) throws {
        let insert = try RawStatement(connection: handle, sql: "INSERT INTO t (run, v) VALUES (?1, ?2)")
        defer { insert.finalize() }
        for value in values {
            insert.bind(.integer(Int64(run)), at: 1)
            insert.bind(value, at: 2)
            try insert.execute()
        }
    }

    private static func read(_ sql: String, on handle: OpaquePointer) throws -> [String] {
        let select = try RawStatement(connection: handle, sql: sql)
        defer { select.finalize() }
        var shown: [String] = []
        try select.query { row in shown.append(Self.shown(row, 0)) }
        return shown
    }

    /// A batch's rows sorted as a staged batch is appended come in the order SQLite's
    /// `ORDER BY` gives the same values (an integer before a real of the same value).
    @Test func aBatchIsSortedAsSQLiteSortsIt() throws {
        var storage = RowStorage()
        var rows: [EntityRow] = []
        for value in Self.mixed {
            let row = storage.appendRow(entity: 0, columns: 2, links: 0, identity: .single(value))
            storage.set(row.valueStart, value)
            storage.set(row.valueStart + 1, .text("other column"))
            rows.append(row)
        }
        // A row without identity is never staged.
        rows.append(storage.appendRow(entity: 0, columns: 2, links: 0))
        let order = rows.withUnsafeBufferPointer { all in storage.withView { StageOrder.sorted(all, slots: [0], in: $0) } }
        #expect(order.count == Self.mixed.count)

        let handle = try Self.table()
        defer { sqlite3_close(handle) }
        try Self.insert(order.map { Self.mixed[$0] }, run: 0, on: handle)
        let asStaged = try Self.read("SELECT v FROM t ORDER BY rowid", on: handle)
        #expect(asStaged == (try Self.read("SELECT v FROM t ORDER BY v, rowid", on: handle)))
        #expect(asStaged.firstIndex(of: "1:2") == asStaged.firstIndex(of: "2:2.0").map { $0 - 1 }, "\(asStaged)")

        // One integer identity takes the integers' own sort; ties keep the order given.
        var numbers = RowStorage()
        var numbered: [EntityRow] = []
        for (k, v) in [5, -1, 5, 3, Int.min, 5].enumerated() {
            let row = numbers.appendRow(entity: 0, columns: 2, links: 0, identity: .single(.integer(Int64(v))))
            numbers.set(row.valueStart, .integer(Int64(v)))
            numbers.set(row.valueStart + 1, .integer(Int64(k)))
            numbered.append(row)
        }
        let byNumber = numbered.withUnsafeBufferPointer { all in numbers.withView { StageOrder.sorted(all, slots: [0], in: $0) } }
        #expect(byNumber == [4, 1, 3, 0, 2, 5])
    }

    /// A table `t (run, v)` — `t (run, v, w)` for `columns` 2 — of three runs, each sorted, sharing
    /// values across runs (not an integer and a real of one value: SQLite sorts those by rowid,
    /// the merges integer first); its runs' rowids.
    private static func runsTable(columns: Int) throws -> (handle: OpaquePointer, runs: [StagedRun]) {
        let handle = try Self.table()
        if columns == 2 { sqlite3_exec(handle, "DROP TABLE t; CREATE TABLE t (run, v, w)", nil, nil, nil) }
        let runs: [[ScalarValue]] = [
            [.integer(-7), .integer(2), .real(2.5), .text(""), .text("a"), .text("b")],
            [.integer(2), .integer(3), .text("a"), .text("ab"), .text("ä")],
            [.real(-1e300), .integer(2), .text("a"), .text("b"), .text("Z")].sorted { StageOrderTestKey($0) < StageOrderTestKey($1) },
        ]
        var ranges: [StagedRun] = []
        for (k, run) in runs.enumerated() {
            let first = sqlite3_last_insert_rowid(handle) + 1
            if columns == 2 {
                // A composite identity (v, w): w breaks v's ties within and across runs.
                let insert = try RawStatement(connection: handle, sql: "INSERT INTO t (run, v, w) VALUES (?1, ?2, ?3)")
                defer { insert.finalize() }
                for value in run {
                    for w in [ScalarValue.text("x"), .integer(1)].sorted(by: { StageOrderTestKey($0) < StageOrderTestKey($1) }) {
                        insert.bind(.integer(Int64(k)), at: 1)
                        insert.bind(value, at: 2)
                        insert.bind(w, at: 3)
                        try insert.execute()
                    }
                }
            } else {
                try Self.insert(run, run: k, on: handle)
            }
            ranges.append(StagedRun(first: first, last: sqlite3_last_insert_rowid(handle)))
        }
        return (handle, ranges)
    }

    /// `t`'s rows as SQLite sorts the whole table: by the identity, then rowid.
    private static func sortedWhole(_ handle: OpaquePointer, columns: Int) throws -> [String] {
        let identity = columns == 2 ? "v, w" : "v"
        let select = try RawStatement(connection: handle, sql: "SELECT run, \(identity) FROM t ORDER BY \(identity), rowid")
        defer { select.finalize() }
        var sorted: [String] = []
        try select.query { row in sorted.append((0..<Int32(columns + 1)).map { Self.shown(row, $0) }.joined(separator: " ")) }
        return sorted
    }

    /// Runs merged by ``RunMerge`` come out as the whole table sorted by SQLite, rows of one
    /// value in the order of their runs: text, numbers and a composite of both.
    @Test(arguments: [1, 2])
    func runsMergeAsTheWholeTableSorts(columns: Int) throws {
        let (handle, runs) = try Self.runsTable(columns: columns)
        defer { sqlite3_close(handle) }
        let statements = try runs.map { run in
            try RawStatement(
                connection: handle,
                sql: "SELECT run, v\(columns == 2 ? ", w" : "") FROM t WHERE rowid BETWEEN \(run.first) AND \(run.last) ORDER BY rowid")
        }
        var merge = RunMerge(statements: statements, identity: columns == 2 ? [1, 2] : [1])
        defer { merge.finalize() }
        var merged: [String] = []
        while try merge.step() {
            merged.append((0..<Int32(columns + 1)).map { Self.shown(merge.current, $0) }.joined(separator: " "))
        }
        #expect(merged == (try Self.sortedWhole(handle, columns: columns)))
        #expect(merged.count == 16 * columns)
    }

    /// ``BufferedRunMerge`` reads each run a slice at a time — a row a slice, a few, or the whole
    /// run — and merges them as the whole table sorts; ``StagedRead/hasIdentity(of:at:)`` tells
    /// the rows of the identity held from those of the next.
    @Test(arguments: [1, 2], [1, 100, 1 << 20])
    func bufferedRunsMergeAsTheWholeTableSorts(columns: Int, budget: Int) throws {
        let (handle, runs) = try Self.runsTable(columns: columns)
        defer { sqlite3_close(handle) }
        // The merge's rows: rowid, the identity, and `run` where a staging table has its blob.
        let select = try RawStatement(
            connection: handle,
            sql: "SELECT rowid, v\(columns == 2 ? ", w" : ""), run FROM t WHERE rowid BETWEEN ?1 AND ?2 ORDER BY rowid")
        var merge = BufferedRunMerge(select: select, on: handle, identityCount: columns, firstParameter: 1, runs: runs, budget: budget)
        defer { merge.finalize() }
        let show = try RawStatement(connection: handle, sql: "SELECT ?1, ?2, ?3")
        defer { show.finalize() }
        var held = HeldValues(count: columns)
        defer { held.deallocate() }
        let slots = Array(0..<columns)
        func identityShown(_ identity: UnsafeRawBufferPointer) -> [String] {
            var at = 0
            for slot in slots { held.load(slot, from: identity, at: &at) }
            for slot in slots { held.bind(slot, to: show.handle, at: Int32(slot + 1)) }
            _ = try? show.step()
            defer { sqlite3_reset(show.handle) }
            return slots.map { Self.shown(show.handle, Int32($0)) }
        }
        var merged: [String] = []
        var previous: [String] = []
        while try merge.step() {
            let run = String(decoding: merge.row, as: UTF8.self)
            // The held identity (the previous row's) is the current row's exactly when the two show the same.
            let same = merge.hasIdentity(of: held, at: slots)
            let current = identityShown(merge.identity)
            if !previous.isEmpty { #expect(same == (previous == current), "\(previous) then \(current)") }
            previous = current
            merged.append((["1:" + run] + current).joined(separator: " "))
        }
        #expect(merged == (try Self.sortedWhole(handle, columns: columns)))
    }

    /// How a fold reads a staging table: by a cursor a run up to the settings' limit, through
    /// buffers beyond it, sorted whole when no runs are noted or the settings say so.
    @Test func theReadPlanFollowsTheRunsAndTheSettings() {
        let runs: [StagedRun] = (0..<300).map { (k: Int) -> StagedRun in
            let first = Int64(k) * 10 + 1
            return StagedRun(first: first, last: first + 9)
        }
        var settings = FoldSettings()
        #expect(StagedReadPlan(runs: Array(runs.prefix(256)), settings: settings) == .cursors(runs: 256))
        #expect(StagedReadPlan(runs: runs, settings: settings) == .buffered(runs: 300))
        #expect(StagedReadPlan(runs: [], settings: settings) == .sorted)
        #expect(StagedReadPlan(runs: nil, settings: settings) == .sorted)
        settings.readsRuns = false
        #expect(StagedReadPlan(runs: runs, settings: settings) == .sorted)
        #expect("\(StagedReadPlan.buffered(runs: 300))" == "300 runs, buffered")
    }

    /// The people pipeline over 600 persons (with their faults) in pages of 50, staged from the
    /// first batch into a new database, in batches of `batchRecords`.
    private static func stagedPeople(batchRecords: Int) throws -> (pages: String, config: PipelineConfig, options: RunOptions) {
        let pages = try generatePeople(persons: 600, pageSize: 50, faults: true)
        var config = try PipelineConfig.load(path: packageRoot.appendingPathComponent("pipelines/people.yml").path)
        config.source = .files(directory: pages, glob: "page-*.json")
        var options = RunOptions()
        options.databasePath = temporaryDirectory().appendingPathComponent("people.db").path
        options.progressInterval = 0
        options.batchRecords = batchRecords
        options.loading = .staged
        return (pages, config, options)
    }

    /// ``stagedPeople(batchRecords:)`` in batches and commits of 40 records, stopped by its source
    /// failing after `pages` pages: its staging file holds what it committed.
    private static func stoppedStagedPeople(afterPages pages: Int) throws -> (
        pages: String, config: PipelineConfig, options: RunOptions
    ) {
        var (directory, config, options) = try stagedPeople(batchRecords: 40)
        options.commitRecords = 40
        let stopped = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: FailingAfter(try DirectoryPageSource(directory: directory, glob: "page-*.json"), pages: pages))
        #expect(stopped.status == .failed)
        return (directory, config, options)
    }

    /// A stopped staged load's staging file: every staged row is in exactly one run, the runs
    /// follow one another, and each run is in identity order.
    @Test func everyStagedRowIsInOneSortedRun() throws {
        let options = try Self.stoppedStagedPeople(afterPages: 8).options
        let stage = stageFile(options.databasePath)
        for table in ["_ingot_stage_person", "_ingot_stage_dog"] {
            let runs = try rows(stage, "SELECT first, last FROM _ingot_stage_runs WHERE stage = '\(table)' ORDER BY first")
                .map { (Int($0[0]) ?? 0, Int($0[1]) ?? 0) }
            #expect(runs.count >= 8, "\(table): \(runs.count) runs")
            var next = 1
            for (first, last) in runs {
                #expect(first == next && last >= first, "\(table): run \(first)...\(last) after \(next - 1)")
                next = last + 1
                let inRun = "FROM \(table) WHERE rowid BETWEEN \(first) AND \(last)"
                // Identity order, an identity's rows as their records came (a batch is staged
                // unfolded: UnfoldedRowsTests).
                #expect(try rows(stage, "SELECT id \(inRun) ORDER BY rowid") == rows(stage, "SELECT id \(inRun) ORDER BY id, rowid"))
            }
            #expect(try rows(stage, "SELECT count(*), coalesce(max(rowid), 0) FROM \(table)") == [["\(next - 1)", "\(next - 1)"]])
        }
    }

    /// A staging file written by another program is input like any: a staged row whose blob does
    /// not add up stops the merge with a message naming its table (nothing merged, no trap); a
    /// file staged in an earlier format is not read, and the resumed load stages its pages again
    /// and ends exact.
    @Test(arguments: [false, true])
    func aStagingFileChangedByHandIsRefusedOrStagedAgain(earlierFormat: Bool) throws {
        let (pages, config, stopped) = try Self.stoppedStagedPeople(afterPages: 4)
        var options = stopped
        var file: OpaquePointer?
        #expect(sqlite3_open_v2(stageFile(options.databasePath), &file, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK)
        let change =
            earlierFormat
            ? "ALTER TABLE _ingot_stage_dog RENAME COLUMN _ingot_row TO _ingot_from"
            : "UPDATE _ingot_stage_dog SET _ingot_row = x'0100' WHERE rowid = 2"
        #expect(sqlite3_exec(file, change, nil, nil, nil) == SQLITE_OK)
        sqlite3_close(file)
        options.resume = true
        let resumed = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
        if earlierFormat {
            #expect(resumed.status == .finished, "\(resumed.error ?? "")")
            let check = try checkPeople(options.databasePath, pages)
            #expect(check.contains(#""ok": true"#), "\(check)")
        } else {
            #expect(resumed.status == .failed)
            #expect(resumed.error?.contains("a staged row of dog does not add up") == true, "\(resumed.error ?? "")")
            #expect(try rows(options.databasePath, "SELECT count(*) FROM person") == [["0"]])
        }
    }

    /// A table staged in more runs than the merge reads by cursors (``FoldSettings/cursorRuns``)
    /// is read through buffers, and ends the same: the people data set in batches of 2 records
    /// (over 300 runs), and of 40. The merge's log line says which read it used, per entity.
    @Test(arguments: [2, 40])
    func manyRunsOrFewTheLoadIsExact(batchRecords: Int) throws {
        let (pages, config, options) = try Self.stagedPeople(batchRecords: batchRecords)
        let logs = LogCapture()
        let summary = PipelineRunner(config: config, options: options, logger: logs.logger).run()
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        let check = try checkPeople(options.databasePath, pages)
        #expect(check.contains(#""ok": true"#), "\(check)")
        let merged = try #require(logs.all.first { $0.contains("msg=bulk.merged") })
        let read = try #require(merged.firstMatch(of: /person: (\d+) runs, (buffered|a cursor each)/), "\(merged)")
        let runs = Int(read.1) ?? 0
        #expect(read.2 == (runs > FoldSettings().cursorRuns ? "buffered" : "a cursor each"), "\(merged)")
        #expect(batchRecords == 2 ? read.2 == "buffered" : read.2 == "a cursor each", "\(merged)")
    }
}

/// SQLite's order of the values these tests use, to sort their runs by: NULL, numbers, text.
private struct StageOrderTestKey: Comparable {
    let value: ScalarValue
    init(_ value: ScalarValue) { self.value = value }

    private var rank: Int {
        switch value {
        case .null: 0
        case .integer, .real, .bool: 1
        case .text: 2
        }
    }

    private var number: Double {
        switch value {
        case .integer(let v): Double(v)
        case .real(let v): v
        case .bool(let v): v ? 1 : 0
        default: 0
        }
    }

    static func < (a: Self, b: Self) -> Bool {
        if a.rank != b.rank { return a.rank < b.rank }
        if case .text(let x) = a.value, case .text(let y) = b.value { return Array(x.utf8).lexicographicallyPrecedes(Array(y.utf8)) }
        return a.number < b.number
    }

    static func == (a: Self, b: Self) -> Bool { !(a < b) && !(b < a) }
}
