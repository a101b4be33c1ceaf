import Foundation
import GRDB
import Logging
import Synchronization
import Testing

@testable import Ingot

/// The repository's root (the package directory).
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()

/// A fresh temporary directory inside this test process's own root, which is removed when the
/// process exits (roots left by crashed or killed test processes are swept by the next run).
func temporaryDirectory() -> URL {
    let url = testRoot.appendingPathComponent(UUID().uuidString)
    try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// `$TMPDIR/ingot-tests-<pid>`, created on first use.
private let testRoot: URL = {
    let fileManager = FileManager.default
    let tmp = fileManager.temporaryDirectory
    // Sweep roots whose process is gone.
    for name in (try? fileManager.contentsOfDirectory(atPath: tmp.path)) ?? [] where name.hasPrefix("ingot-tests-") {
        if let pid = Int32(name.dropFirst("ingot-tests-".count)), kill(pid, 0) == 0 || errno == EPERM { continue }
        try? fileManager.removeItem(at: tmp.appendingPathComponent(name))
    }
    let root = tmp.appendingPathComponent("ingot-tests-\(getpid())")
    try? fileManager.createDirectory(at: root, withIntermediateDirectories: true)
    atexit { removeTestRoot() }
    return root
}()

private func removeTestRoot() {
    try? FileManager.default.removeItem(
        atPath: FileManager.default.temporaryDirectory.appendingPathComponent("ingot-tests-\(getpid())").path)
}

/// Collects log lines in memory.
final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }

    var logger: Logger {
        let output = LogfmtLogHandler.Output { line in self.lines.withLock { $0.append(line) } }
        var logger = Logger(label: "test") { _ in LogfmtLogHandler(output: output, timestamps: false) }
        logger.logLevel = .info
        return logger
    }
}

/// A logfmt line's `key=value` fields (values without spaces, as the load plan's code).
func logfmtFields(_ line: some StringProtocol) -> [String] {
    String(line).split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init)
}

/// Pages given in memory.
final class MemoryPageSource: PageSource, @unchecked Sendable {  // used from the source queue only
    private var pages: [String]
    private var seq = 0
    init(_ pages: [String]) { self.pages = pages }
    func next() throws -> Page? {
        guard !pages.isEmpty else { return nil }
        seq += 1
        return Page(seq: seq, source: "page-\(seq).json", bytes: Array(pages.removeFirst().utf8))
    }
}

/// Runs `yaml` over `pages` into `db` (a new temporary database unless given).
@discardableResult
func ingest(
    _ yaml: String, _ pages: [String], db: String? = nil, lanes: Int = 2, batchRecords: Int? = nil,
    commitRecords: Int? = nil, batchBytes: Int? = nil, observer: (@Sendable (String) -> Void)? = nil, logs: LogCapture = LogCapture(),
    bulk: Bool = false, stageAfterBytes: Int? = nil
) throws -> (summary: RunSummary, db: String) {
    let config = try PipelineConfig.parse(text: yaml, path: "test.yml")
    let path = db ?? temporaryDirectory().appendingPathComponent("test.db").path
    var options = RunOptions()
    options.databasePath = path
    options.lanes = lanes
    options.batchRecords = batchRecords
    if let commitRecords { options.commitRecords = commitRecords }
    if let batchBytes { options.batchBytes = batchBytes }
    options.progressInterval = 0
    options.statementObserver = observer
    options.loading = bulk ? .staged : .automatic(afterBytes: stageAfterBytes)
    let summary = PipelineRunner(config: config, options: options, logger: logs.logger).run(source: MemoryPageSource(pages))
    return (summary, path)
}

/// Rows of `sql` as text ("NULL" for null), for compact assertions.
func rows(_ db: String, _ sql: String) throws -> [[String]] {
    // Tests read a database side by side (the reference a matrix's cells compare with): the last
    // connection of a WAL database to close checkpoints it under an exclusive lock, which another
    // opening then waits out instead of failing on.
    var configuration = Configuration()
    configuration.busyMode = .timeout(30)
    let queue = try DatabaseQueue(path: db, configuration: configuration)
    return try queue.read { db in
        try Row.fetchAll(db, sql: sql).map { row in
            row.databaseValues.map { value in
                switch value.storage {
                case .null: "NULL"
                case .int64(let v): String(v)
                case .double(let v): String(v)
                case .string(let s): s
                case .blob: "<blob>"
                }
            }
        }
    }
}

/// A seeded generator (SplitMix64): tests that draw random inputs draw the same ones every run,
/// and print the seed with any failure so it can be replayed.
struct SeededGenerator: RandomNumberGenerator {
    let seed: UInt64
    private var state: UInt64

    init(seed: UInt64) {
        self.seed = seed
        state = seed
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Waits until `condition` holds, checking every 10 ms. No deadline of its own: the calling
/// test's `.hangGuard` ends a wait that never comes, so no test passes or fails on a timer.
func waitUntil(
    _ condition: () throws -> Bool, sourceLocation: SourceLocation = #_sourceLocation
) rethrows {
    // Polls; the bound is not a timing assumption but a guard: a condition that never comes
    // fails the test here instead of hanging the whole suite (a time limit cannot stop a blocked
    // thread).
    let deadline = Date().addingTimeInterval(180)
    while try !condition() {
        if Date() > deadline {
            Issue.record("waited 180 s for a condition that never came", sourceLocation: sourceLocation)
            return
        }
        Thread.sleep(forTimeInterval: 0.01)
    }
}

/// pipelines/people.yml fetching from `url` over HTTP instead of its sample files: `settings`
/// are the lines of its `http:` block after the URL (pagination, retries, auth, …); `raw`, lines
/// that follow the block as they are (with their own indentation).
func peopleOverHTTPText(_ url: String, _ settings: [String], raw: String = "") throws -> String {
    let block = (["  http:", "    url: \(url)"] + settings.map { "    " + $0 } + (raw.isEmpty ? [] : [raw])).joined(separator: "\n")
    return try String(contentsOf: packageRoot.appendingPathComponent("pipelines/people.yml"), encoding: .utf8)
        .replacingOccurrences(of: #"  files: {dir: samples/people, glob: "page-*.json"}"#, with: block)
}

/// The problems of a pipeline whose `entities:` block is `entities` (root `a`), as text; empty
/// when it is valid.
func modelProblems(_ entities: String) -> String {
    do {
        _ = try PipelineConfig.parse(text: "version: 1\nname: n\nroot: a\nentities:\n" + entities, path: "n.yml")
        return ""
    } catch {
        return error.description
    }
}

/// Runs the built `ingot` binary with `arguments` (and `environment` on top of this process's),
/// in the package root; returns its exit status and output.
func runIngot(_ arguments: [String], environment: [String: String] = [:]) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = Process()
    process.executableURL = CLITests.binary
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    process.currentDirectoryURL = packageRoot
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    // Both pipes drained at once: a big stderr must not block the process while stdout is read.
    let stderrData = Mutex(Data())
    let group = DispatchGroup()
    DispatchQueue.global().async(group: group) { stderrData.withLock { $0 = err.fileHandleForReading.readDataToEndOfFile() } }
    let stdout = out.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderrData.withLock { $0 }, as: UTF8.self))
}

extension SourceConfig {
    /// The HTTP source's settings; `nil` for another source (tests `#require` it).
    var http: HTTPSourceConfig? {
        if case .http(let settings) = self { settings } else { nil }
    }
}

/// The smallest pipeline most tests need: `item {id integer identity, name string}`, named
/// `name`, with `lines` (a `source:`, `records:`, `write:` …) before its entities.
func itemPipeline(_ name: String, _ lines: String...) -> String {
    (["version: 1", "name: \(name)"] + lines + ["root: item", "entities: {item: {identity: id, attributes: {id: integer, name: string}}}"])
        .joined(separator: "\n")
}

/// A clock a test advances itself (``RunOptions/timers``): the commit interval, progress ticks
/// and lease renewals fire when the test says, never because the machine was slow or fast.
final class ManualTimers: RunTimers {
    private struct Entry {
        var due: Double
        var interval: Double?
        let queue: DispatchQueue
        let body: @Sendable () -> Void
    }
    private struct State {
        var now = 0.0
        var entries: [Int: Entry] = [:]
        var nextID = 0
    }
    private let state = Mutex(State())

    private struct Handle: RunTimer {
        let id: Int
        let timers: ManualTimers
        func cancel() { timers.state.withLock { _ = $0.entries.removeValue(forKey: id) } }
    }

    func now() -> Double { state.withLock { $0.now } }

    func every(_ interval: Double, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void) -> any RunTimer {
        Handle(id: add(Entry(due: now() + interval, interval: interval, queue: queue, body: body)), timers: self)
    }

    func after(_ delay: Double, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void) {
        _ = add(Entry(due: now() + delay, interval: nil, queue: queue, body: body))
    }

    private func add(_ entry: Entry) -> Int {
        state.withLock { state in
            state.nextID += 1
            state.entries[state.nextID] = entry
            return state.nextID
        }
    }

    /// Moves the clock `seconds` on; every timer then due fires once (on its queue, in due order).
    func advance(by seconds: Double) {
        let due = state.withLock { state -> [Entry] in
            state.now += seconds
            let due = state.entries.filter { $0.value.due <= state.now }.sorted { $0.value.due < $1.value.due }
            for (id, entry) in due {
                if let interval = entry.interval {
                    state.entries[id]?.due = state.now + interval
                } else {
                    state.entries[id] = nil
                }
            }
            return due.map(\.value)
        }
        for entry in due { entry.queue.async(execute: entry.body) }
    }

    /// How many timers are waiting.
    var pending: Int { state.withLock { $0.entries.count } }
    /// How many repeating timers are registered (a run's progress ticker, once it started).
    var repeating: Int { state.withLock { $0.entries.values.filter { $0.interval != nil }.count } }
}

/// The library's backends by name for a suite that otherwise starts nothing: PostgreSQL is left
/// out at the unit level (`make check` starts no server; docs/reliability.md, "Test levels").
var libraryBackends: [String] { TestLevel.unitOnly ? ["sqlite"] : ["sqlite", "postgresql"] }

/// The problems of pipeline file `text`, as `ingot validate` prints them; `nil` when it is valid.
func configProblems(_ text: String, path: String = "test.yml") -> String? {
    do {
        _ = try PipelineConfig.parse(text: text, path: path)
        return nil
    } catch {
        return "\(error)"
    }
}

/// A library database on `backend` — "sqlite": a new file `name`.db in a temporary directory;
/// "postgresql": a fresh database on the tests' server (`createOptions`: what `CREATE DATABASE`
/// says besides the name) — and where it is (the path or the URL).
func libraryDatabase(
    _ backend: String, _ name: String, entities: [any IngotEntity.Type], createOptions: String = ""
) throws -> (db: IngotDatabase, at: String) {
    if backend == "sqlite" {
        let path = temporaryDirectory().appendingPathComponent("\(name).db").path
        return (try IngotDatabase.sqlite(path, entities: entities), path)
    }
    let url = try PostgresServer.freshDatabase(createOptions)
    return (try IngotDatabase.postgres(url, entities: entities), url)
}

/// The person pipeline the store suites share (records under `results`, root `person`):
/// person — `id`, `name`, the lines of `beforeCountry`, `country` read from
/// `origin.country.name`, `score`, the lines of `attributes`; `dogs` (to-many) and `best` (a
/// to-one read from `best_friend`), then the lines of `relationships` — and dog (`id`, `name`,
/// the lines of `dogAttributes`), then `entities` (each entity's YAML, indented as an entity).
/// Each suite names what it adds to it, not the whole pipeline again.
func personPipeline(
    _ name: String, beforeCountry: [String] = [], attributes: [String] = [], relationships: [String] = [],
    dogAttributes: [String] = [], entities: [String] = []
) -> String {
    let personAttributes =
        ["id: integer", "name: string"] + beforeCountry + ["country: {type: string, key: origin.country.name}", "score: double"]
        + attributes
    let dog = "{" + (["id: integer", "name: string"] + dogAttributes).joined(separator: ", ") + "}"
    var lines = [
        "version: 1", "name: \(name)", "records: results", "root: person", "entities:", "  person:", "    identity: id", "    attributes:",
    ]
    lines += personAttributes.map { "      " + $0 }
    lines +=
        ["    relationships:", "      dogs: {to: dog, many: true}", "      best: {to: dog, key: best_friend}"]
        + relationships.map { "      " + $0 }
    lines +=
        ["  dog:", "    identity: id", "    attributes: \(dog)"] + entities.map { "  " + $0.replacingOccurrences(of: "\n", with: "\n  ") }
    return lines.joined(separator: "\n")
}

/// The staging file of `pipeline`'s staged loads into the SQLite database `db`
/// (``StageFile/path(for:pipeline:)``: one per pipeline).
func stageFile(_ db: String, pipeline: String = "people") -> String { StageFile.path(for: db, pipeline: pipeline) }

/// Claims taken in turn by a test's `jobs` in-process jobs of a shared run (``ClaimTurns``): no
/// job claims a unit while another job that has not ended claimed fewer — a job not seen yet
/// counts as one with none — so every job takes units while there are as many as jobs, and the
/// test can check that each did (``JoinTests/expectShared(_:)``).
final class TakingTurns: ClaimTurns {
    private struct State {
        var claims: [String: Int] = [:]
        var left: Set<String> = []
    }
    private let jobs: Int
    private let state = Mutex(State())

    init(jobs: Int) { self.jobs = jobs }

    func mayClaim(_ job: String) -> Bool {
        state.withLock { state in
            if state.claims[job] == nil { state.claims[job] = 0 }
            let mine = state.claims[job, default: 0]
            let unseen = jobs - state.claims.keys.count
            if unseen > 0 && mine > 0 { return false }
            return state.claims.allSatisfy { other, claims in other == job || state.left.contains(other) || claims >= mine }
        }
    }

    func claimed(_ job: String) { state.withLock { $0.claims[job, default: 0] += 1 } }

    func left(_ job: String) {
        state.withLock { state in
            if state.claims[job] == nil { state.claims[job] = 0 }
            state.left.insert(job)
        }
    }

    /// Units claimed, per job.
    var claims: [String: Int] { state.withLock { $0.claims } }
}

extension LoadPlan {
    /// A joined job's plan that defers its batches, as a job reading local pages has by default.
    static let joinedDeferred = LoadPlan(mode: .joined(.deferred), capabilities: PostgresBackend(url: "").loadCapabilities)
    /// A SQLite load staged from the start (`--bulk`).
    static let sqliteStaged = LoadPlan(mode: .staged, capabilities: SQLiteBackend(path: "").loadCapabilities)
    /// A joined job's plan that writes its batches with positions (`--no-bulk`, or a fetching source).
    static let joinedPositions = LoadPlan(mode: .joined(.positions), capabilities: PostgresBackend(url: "").loadCapabilities)
}

extension Tag {
    /// Needs a PostgreSQL server (started by the tests themselves: Support/PostgresServer.swift).
    @Tag static var postgres: Self
    /// Starts processes: the `ingot` binary, a fixture server, jobs killed with `kill -9`.
    @Tag static var process: Self
    /// Sweeps many cases: every fault point of every load plan.
    @Tag static var sweep: Self
}

/// The levels `make` runs the tests at: `make test` (the README's command, CI) every level;
/// `make check` (`INGOT_TEST_LEVEL=unit`) only the tests that run in the test process and start
/// nothing — no server, no other process — in under a minute.
enum TestLevel {
    /// Whether only the unit level was asked.
    static let unitOnly = ProcessInfo.processInfo.environment["INGOT_TEST_LEVEL"] == "unit"
}

/// A guard against a hang, never a speed target: a test that waits on processes, servers or
/// other jobs records an issue once it has run for five minutes, far above what any such test
/// takes alone (seconds), since under the whole suite a test's processes share two cores with
/// every other test's: a one-minute limit failed a test that ran two small `ingot run`s once in a
/// loaded stretch.
///
/// Counted from when the case starts running: in a suite that waits off the pool, once the gate
/// admits it (``WaitsOffThePool`` applies the guard inside its scope). Swift Testing's
/// `.timeLimit` wraps every scope of a case, the gate's included, so a case queued behind the
/// others counted its wait: the run slowed down twice under `strace` failed eleven cases that
/// were only waiting their turn. Like `.timeLimit`, it cannot stop a synchronous test; it makes a
/// slow one fail, naming it.
struct HangGuard: TestTrait, TestScoping {
    static let limit = Duration.seconds(300)

    func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        testCase == nil || test.traits.contains { $0 is WaitsOffThePool } ? nil : self
    }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        try await Self.guarding(function)
    }

    /// Runs `function`, and records an issue if it is still running after ``limit``.
    static func guarding(_ function: @Sendable () async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            // On the global executor: a waiting suite's case blocks its own queue's thread.
            group.addTask(executorPreference: globalConcurrentExecutor) {
                try? await Task.sleep(for: limit)
                if !Task.isCancelled { Issue.record("still running after \(limit): a hang guard (docs/reliability.md)") }
            }
            defer { group.cancelAll() }
            try await function()
        }
    }
}

extension Trait where Self == HangGuard {
    /// See ``HangGuard``.
    static var hangGuard: Self { HangGuard() }
}

extension Trait where Self == ConditionTrait {
    /// Left out at the unit level (``TestLevel``): a suite tagged `postgres`, `process` or `sweep`.
    static var beyondUnit: Self { .disabled(if: TestLevel.unitOnly, "INGOT_TEST_LEVEL=unit runs the in-process tests only") }
}
