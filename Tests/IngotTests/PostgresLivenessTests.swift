import Foundation
import Testing

@testable import Ingot

/// PostgreSQL liveness, exit codes and writers sharing tables.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct PostgresLivenessTests {
    /// A server that accepts connections and never answers: the connection gives up
    /// (`connect_timeout`, 10 s by default, 1 here through the URL) and the run exits 75.
    /// A socket on 127.0.0.1 that listens (the kernel completes connections, with a backlog of 8)
    /// and never accepts nor answers: a PostgreSQL server that never answers. Its descriptor and port.
    static func silentServer() -> (fd: Int32, port: Int) {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        _ = listen(listener, 8)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        return (listener, Int(UInt16(bigEndian: address.sin_port)))
    }

    @Test(.hangGuard) func aServerThatNeverAnswersIsTemporaryNotAHang() throws {
        let (listener, port) = Self.silentServer()
        defer { close(listener) }
        let result = try runIngot([
            "run", "pipelines/people.yml", "--db", "postgresql://ingot@127.0.0.1:\(port)/people?connect_timeout=1", "--no-archive",
        ])
        #expect(result.status == 75, "\(result.stderr)")
    }

    /// SIGTERM while connecting to a server that never answers ends the run with 143 at once,
    /// not after `connect_timeout` (600 s here: the test's time limit would end it first). The
    /// signal is sent once the connection waits in the listener's queue.
    @Test(.hangGuard) func sigtermWhileConnectingToASilentServerStopsAtOnce() throws {
        let (listener, port) = Self.silentServer()
        defer { close(listener) }
        let process = Process()
        process.executableURL = CLITests.binary
        process.arguments = [
            "run", "pipelines/people.yml", "--db", "postgresql://ingot@127.0.0.1:\(port)/people?connect_timeout=600", "--no-archive",
        ]
        process.currentDirectoryURL = packageRoot
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        // The connection is made by the kernel and waits to be accepted: Ingot is connecting.
        var pending = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        #expect(poll(&pending, 1, 30_000) == 1)
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.terminationStatus == 143)
    }

    /// A connection option libpq would refuse (`sslmode=bogus`) can never connect: exit 2 naming
    /// the option and the words it takes, not 75 (temporary), and nothing is tried.
    @Test func aConnectionOptionLibpqRefusesIsAConfigurationError() throws {
        let result = try runIngot([
            "run", "pipelines/people.yml", "--db", "postgresql://ingot@127.0.0.1:9/people?sslmode=bogus", "--no-archive",
        ])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(
            result.stderr.contains("sslmode 'bogus' is none of allow, disable, prefer, require, verify-ca, verify-full"), "\(result.stderr)"
        )
    }

    /// A statement that never ends (another session holds the table locked): SIGTERM ends the run
    /// within two seconds with 143, and `--resume` then finishes it exactly.
    @Test(.hangGuard) func sigtermCancelsAStatementThatNeverEnds() throws {
        let url = try PostgresServer.freshDatabase()
        let dir = temporaryDirectory()
        #expect(try runIngot(["run", "pipelines/people.yml", "--db", url, "--no-archive", "--pages", dir.path]).status == 0)
        let holder = try PGConnection(url: url)
        try holder.execute("BEGIN")
        try holder.execute("LOCK TABLE person IN ACCESS EXCLUSIVE MODE")
        let process = Process()
        process.executableURL = CLITests.binary
        process.arguments = ["run", "pipelines/people.yml", "--db", url, "--no-archive", "--progress-interval", "0"]
        process.currentDirectoryURL = packageRoot
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let watcher = try PGConnection(url: url)
        waitUntil {
            let waiting = try? watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
            return waiting?.first?[0] == "1" || !process.isRunning
        }
        let signalled = ContinuousClock.now
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        let took = ContinuousClock.now - signalled
        try holder.execute("ROLLBACK")
        #expect(process.terminationStatus == 143)
        #expect(took < .seconds(10), "\(took)")  // 2 s promised; generous for a loaded machine
        #expect(try runIngot(["run", "pipelines/people.yml", "--db", url, "--no-archive", "--resume"]).status == 0)
    }

    /// Two different pipelines writing the same table at once: a row the other created since the
    /// lookup is updated with this batch's present keys, never a duplicate-key failure.
    @Test func aRowAnotherWriterCreatedMeanwhileIsUpdatedNotAFailure() throws {
        let url = try PostgresServer.freshDatabase()
        let yaml =
            "version: 1\nname: one\nrecords: r\nroot: item\nentities:\n  item:\n    identity: id\n    attributes: {id: integer, a: string, b: string}\n"
        let config = try PipelineConfig.parse(text: yaml, path: "one.yml")
        let store = try PGStore(url: url, model: config.model)
        // The resolver looked id 1 up and did not find it; then another writer created it.
        let other = try PGConnection(url: url)
        try other.execute("INSERT INTO item (id, a, b) VALUES (1, 'theirs', 'theirs')")
        var page = DecodedPage(seq: 1, source: "p", bytes: 0, records: [], rejections: [], pageRejected: false, recordCount: 1)
        let row = page.storage.appendRow(entity: 0, layout: store.layouts[0], identity: .single(.integer(1)))
        page.storage.set(row.valueStart, .integer(1))
        page.storage.set(row.valueStart + 1, .text("mine"))
        var stored = row
        stored.mask.insert(0)
        stored.mask.insert(1)
        page.rows.append(stored)
        page.records.append(DecodedRecord(index: 0, rows: 0..<1, references: []))
        let resolved = try BatchResolver(model: config.model, layouts: store.layouts).resolve(
            PreparedBatch(pages: [page]), store: EmptyLookups(store))
        #expect(resolved.refs[0] == [nil])  // the resolver found no row
        try store.write(resolved) { _ in }
        try store.commit()
        #expect(try other.execute("SELECT id, a, b FROM item ORDER BY id") == [["1", "mine", "theirs"]])
    }
}

/// A store whose lookups find nothing (as a lookup made before another writer's insert did), writing through `base`.
final class EmptyLookups: IngestStore, @unchecked Sendable {
    let base: PGStore
    init(_ base: PGStore) { self.base = base }
    var layouts: [EntityLayout] { base.layouts }
    func unfinishedRun(pipeline: String) throws -> UnfinishedRun? { nil }
    func beginRun(_ run: RunBeginning) throws {}
    func finishRun(id: String, status: RunStatus, counters: RunCounters, finishedAt: Date) throws {}
    func lookup(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef] { [:] }
    func lookupCommitted(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef]? { [:] }
    func write(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws { try base.write(batch, then: then) }
    func writeIsolated(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        try base.writeIsolated(batch, then: then)
    }
    func recordProgress(_ progress: RunProgress) throws {}
    func commit() throws -> Bool { try base.commit() }
    func rollback() throws { try base.rollback() }
    func delete(_ rows: RowsToDelete, of entity: Int, sparing: [Int: Set<IdentityKey>]) throws -> Int { 0 }
    func unfilledStubs() throws -> [Int: Int] { [:] }
    func close() throws {}
}
