import Foundation
import Synchronization

@testable import Ingot

/// A throwaway PostgreSQL server for the tests: `initdb` into a temporary directory, listening on
/// 127.0.0.1 only, on a free port, stopped when the value goes away. Debian's server binaries
/// (`make` installs the `postgresql` package); as root (CI), the server runs as `nobody`, since
/// PostgreSQL refuses to run as root. One server per test process, started on first use.
final class PostgresServer: @unchecked Sendable {  // immutable after init
    let directory: URL
    let port: Int
    private let binaries = "/usr/lib/postgresql/15/bin"
    private let asNobody = getuid() == 0

    static let shared: Result<PostgresServer, any Error> = Result {
        let server = try PostgresServer()
        // Statics are never deinitialized: stop the server when the test process exits.
        stopAtExit.withLock { $0 = server.directory.path }
        atexit {
            // Immediate shutdown (SIGQUIT to the postmaster, whose pid heads postmaster.pid).
            guard let directory = PostgresServer.stopAtExit.withLock({ $0 }) else { return }
            if let text = try? String(contentsOfFile: directory + "/data/postmaster.pid", encoding: .utf8),
                let pid = text.split(separator: "\n").first.flatMap({ Int32($0) })
            {
                kill(pid, SIGQUIT)
            }
            // Outside the tests' root when it is on tmpfs.
            try? FileManager.default.removeItem(atPath: directory)
        }
        return server
    }
    private static let stopAtExit = Mutex<String?>(nil)

    /// A URL to a new, empty database on the server.
    /// `options`: what `CREATE DATABASE` says besides the name (a collation, a template).
    /// Made inside a test case that ``WaitsOffThePool``, it is dropped when the case ends.
    static func freshDatabase(_ options: String = "") throws -> String {
        let server = try shared.get()
        let name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(20)
        // Through libpq, not psql: Debian's psql is a Perl wrapper, a process start per database.
        try PGConnection(url: server.maintenance).execute("CREATE DATABASE \(name) \(options)")
        made?.names.withLock { $0.append(String(name)) }
        return "postgresql://postgres@127.0.0.1:\(server.port)/\(name)"
    }

    /// The server's own database, for making and dropping the tests'.
    private var maintenance: String { "postgresql://postgres@127.0.0.1:\(port)/postgres" }

    /// The databases a test case made (``freshDatabase(_:)``), dropped when it ends: a run of
    /// every test makes some hundreds, about 8 MB each.
    final class MadeDatabases: Sendable {
        fileprivate let names = Mutex<[String]>([])

        /// Drops them, with any connection a test's process left open.
        func drop() {
            let names = self.names.withLock { $0 }
            guard !names.isEmpty, let server = try? PostgresServer.shared.get(),
                let connection = try? PGConnection(url: server.maintenance)
            else { return }
            for name in names { _ = try? connection.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
        }
    }

    @TaskLocal static var made: MadeDatabases?

    /// Where the server's files go: on tmpfs (`/dev/shm`) when it has room, since making a
    /// database creates some hundreds of files and ext4's inode allocation was a fifth of the
    /// server's CPU in a profile of the whole suite (a database is made in about 20 ms there
    /// and 85 ms on ext4); in the tests' temporary directory otherwise (a container's 64 MB
    /// `/dev/shm`, say).
    private static func placeFiles() -> URL {
        let shm = "/dev/shm"
        var stats = statvfs()
        guard statvfs(shm, &stats) == 0, UInt64(stats.f_bavail) * UInt64(stats.f_frsize) >= 2 << 30, access(shm, W_OK) == 0 else {
            return temporaryDirectory().appendingPathComponent("pg")
        }
        // Sweep the servers' files of test processes that are gone.
        for name in (try? FileManager.default.contentsOfDirectory(atPath: shm)) ?? [] where name.hasPrefix("ingot-test-pg-") {
            if let pid = Int32(name.dropFirst("ingot-test-pg-".count)), kill(pid, 0) == 0 || errno == EPERM { continue }
            try? FileManager.default.removeItem(atPath: shm + "/" + name)
        }
        return URL(fileURLWithPath: "\(shm)/ingot-test-pg-\(getpid())")
    }

    private init() throws {
        directory = Self.placeFiles()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        port = try PostgresServer.freePort()
        if asNobody { try run("/bin/chown", ["-R", "nobody", directory.path]) }
        try run("\(binaries)/initdb", ["-D", directory.path + "/data", "-A", "trust", "-U", "postgres", "--no-sync"])
        // The postmaster itself, in the background (pg_ctl's start never returned under the test
        // runner); ready once it accepts a connection.
        let postgres = Process()
        let arguments = [
            "\(binaries)/postgres", "-D", directory.path + "/data", "-k", directory.path, "-h", "127.0.0.1", "-p", "\(port)",
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "autovacuum=off",
        ]
        postgres.executableURL = URL(fileURLWithPath: asNobody ? "/sbin/runuser" : arguments[0])
        postgres.arguments = asNobody ? ["-u", "nobody", "--"] + arguments : Array(arguments.dropFirst())
        _ = FileManager.default.createFile(atPath: directory.path + "/log", contents: nil)
        let log = try FileHandle(forWritingTo: directory.appendingPathComponent("log"))
        postgres.standardOutput = log
        postgres.standardError = log
        postgres.standardInput = FileHandle.nullDevice
        try postgres.run()
        let url = "postgresql://postgres@127.0.0.1:\(port)/postgres?connect_timeout=2"
        // Up to a minute on a loaded machine (it takes about a second).
        var ready = false
        for _ in 0..<1200 where !ready {
            ready = (try? PGConnection(url: url)) != nil
            if !ready { Thread.sleep(forTimeInterval: 0.05) }
        }
        guard ready else {
            let text = (try? String(contentsOf: directory.appendingPathComponent("log"), encoding: .utf8)) ?? ""
            throw CocoaError(.executableLoad, userInfo: [NSLocalizedDescriptionKey: "PostgreSQL did not start: \(text)"])
        }
    }

    @discardableResult
    private func run(_ tool: String, _ arguments: [String]) throws -> String {
        let process = Process()
        if asNobody && tool.hasPrefix(binaries) {
            process.executableURL = URL(fileURLWithPath: "/sbin/runuser")
            process.arguments = ["-u", "nobody", "--", tool] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: tool)
            process.arguments = arguments
        }
        process.currentDirectoryURL = directory
        // The server that pg_ctl starts would hold pipes open: its output goes to files instead.
        let outURL = directory.appendingPathComponent("out-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        let out = try FileHandle(forWritingTo: outURL)
        defer { try? FileManager.default.removeItem(at: outURL) }
        process.standardOutput = out
        process.standardError = out
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        try? out.close()
        let output = (try? String(contentsOf: outURL, encoding: .utf8)) ?? ""
        guard process.terminationStatus == 0 else {
            throw CocoaError(
                .executableLoad, userInfo: [NSLocalizedDescriptionKey: "\(tool) \(arguments.joined(separator: " ")): \(output)"])
        }
        return output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A port nothing listens on now (the system picks it for a socket bound to port 0).
    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw CocoaError(.fileWriteUnknown) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
