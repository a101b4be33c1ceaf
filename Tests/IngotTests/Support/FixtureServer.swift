import Foundation
import Synchronization

@testable import Ingot

/// The Python the fixtures run on (they use its standard library only): Debian's, run directly,
/// else the first `python3` on PATH. Not through `env python3` where a version manager's shim
/// (pyenv) comes first on PATH: that started a few shells and a `readlink` per process, about
/// half as much CPU over the whole suite as Python itself (a profile of `make test`).
let python3 = URL(
    fileURLWithPath: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")
        ? "/usr/bin/python3"
        : (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { $0 + "/python3" }.first {
            FileManager.default.isExecutableFile(atPath: $0)
        } ?? "/usr/bin/python3")

/// Tests/Fixtures/server.py on 127.0.0.1 and a free port, for as long as the value lives: forked
/// by the test process's one fixture zygote (``FixtureZygote``), and stopped when the connection
/// it was asked for on closes.
final class FixtureServer {
    /// The connection to the server's own process: it stops when this closes, with the test
    /// process if need be.
    private let control: Int32
    let port: Int

    var base: String { "http://127.0.0.1:\(port)" }

    /// - Parameters:
    ///   - gate: hold /people/* answers until this many are in flight at once.
    ///   - validators: answers carry `etag`, `last-modified` or `both`, and a conditional request
    ///     that matches gets a 304.
    ///   - apiSlow: the Nth request to the Star Wars API (/api/*) waits `slow` seconds.
    ///   - apiFail: the Nth request to the Star Wars API is answered 401 (the run fails).
    init(
        people: String? = nil, faults: String = "", token: String? = nil, slow: Double = 3, gate: Int = 0,
        tls: (cert: String, key: String)? = nil, validators: String? = nil, apiSlow: Int = 0, apiFail: Int = 0
    ) throws {
        var arguments = ["--faults", faults, "--slow", "\(slow)"]
        if let people { arguments += ["--people", people] }
        if let token { arguments += ["--token", token] }
        if gate > 0 { arguments += ["--gate", "\(gate)"] }
        if let tls { arguments += ["--tls", tls.cert, tls.key] }
        if let validators { arguments += ["--validators", validators] }
        if apiSlow > 0 { arguments += ["--api-slow", "\(apiSlow)"] }
        if apiFail > 0 { arguments += ["--api-fail", "\(apiFail)"] }
        (control, port) = try FixtureZygote.shared.get().fork(arguments)
    }

    /// The server's request counters (/requests): `people_requests`, `peak_in_flight`, ….
    func counters() throws -> [String: Int] {
        let response = try HTTPClient().get(base + "/requests", headers: [], timeout: 5)
        return (try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Int]) ?? [:]
    }

    /// From now on the request counters start again from 0 and the `n`th request to the APIs
    /// (the one `faults: "401:n"` or `apiFail: n` would fail) is answered 401; 0: none is.
    func fail(request n: Int) throws {
        _ = try HTTPClient().get(base + "/control/fail?n=\(n)", headers: [], timeout: 5)
    }

    /// Every request the server saw, in order: its path and query (`/seen`).
    func seen() throws -> [(path: String, query: String)] {
        let response = try HTTPClient().get(base + "/seen", headers: [], timeout: 5)
        let entries = (try JSONSerialization.jsonObject(with: Data(response.body)) as? [[String: Any]]) ?? []
        return entries.compactMap { entry in (entry["path"] as? String).map { ($0, entry["query"] as? String ?? "") } }
    }

    /// Stops the server and waits until it is gone: its end of the connection closes when its
    /// process exits.
    deinit {
        shutdown(control, Int32(SHUT_WR))
        var byte: UInt8 = 0
        while read(control, &byte, 1) > 0 {}
        close(control)
    }
}

/// One `server.py --zygote` per test process, started on first use: it imports the fixtures'
/// modules once and forks each ``FixtureServer`` (a fork takes milliseconds; starting Python and
/// its imports took about 0.09 CPU-seconds a server, and the suite starts some hundreds). It
/// listens on an abstract Unix socket named after the test process, and stops when the test
/// process does (its stdin is a pipe this process holds); each server stops when its connection
/// closes.
final class FixtureZygote: @unchecked Sendable {  // immutable after init: `fork` reads the address only
    private let address: String
    private let process: Process
    /// The zygote's stdin: held open for the life of the test process.
    private let stdin: Pipe

    static let shared: Result<FixtureZygote, any Error> = Result { try FixtureZygote() }

    private init() throws {
        address = "ingot-fixtures-\(getpid())"
        process = Process()
        stdin = Pipe()
        process.executableURL = python3
        process.arguments = [packageRoot.appendingPathComponent("Tests/Fixtures/server.py").path, "--zygote", "@" + address]
        let out = Pipe()
        process.standardOutput = out
        process.standardInput = stdin
        try process.run()
        guard readLine(out.fileHandleForReading.fileDescriptor) == "READY" else {
            throw FixtureError(description: "the fixture zygote did not start")
        }
    }

    /// A server of its own for `arguments` (server.py's options): the connection it stops with
    /// and the port it listens on.
    func fork(_ arguments: [String]) throws -> (control: Int32, port: Int) {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw FixtureError(description: "socket: errno \(errno)") }
        var name = sockaddr_un()
        name.sun_family = sa_family_t(AF_UNIX)
        // An abstract address: a NUL, then the name (not NUL-terminated; its length says where it ends).
        let bytes = Array(address.utf8)
        withUnsafeMutableBytes(of: &name.sun_path) { path in
            path[0] = 0
            for (i, byte) in bytes.enumerated() where i + 1 < path.count { path[i + 1] = byte }
        }
        let length = socklen_t(MemoryLayout<sockaddr_un>.size - MemoryLayout.size(ofValue: name.sun_path) + 1 + bytes.count)
        let connected = withUnsafePointer(to: &name) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) }
        }
        guard connected == 0 else {
            close(fd)
            throw FixtureError(description: "connect to the fixture zygote: errno \(errno)")
        }
        let request = Array((String(decoding: try JSONSerialization.data(withJSONObject: arguments), as: UTF8.self) + "\n").utf8)
        var sent = 0
        while sent < request.count {
            let n = request[sent...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                close(fd)
                throw FixtureError(description: "write to the fixture zygote: errno \(errno)")
            }
            sent += n
        }
        guard let line = readLine(fd), line.hasPrefix("PORT "), let port = Int(line.dropFirst(5)) else {
            close(fd)
            throw FixtureError(description: "the fixture server did not start (its error is on stderr): \(arguments)")
        }
        return (fd, port)
    }
}

/// A fixture that could not start.
struct FixtureError: Error, CustomStringConvertible {
    var description: String
}

/// The bytes read from `fd` up to a newline (not included), one at a time so that nothing after
/// it is consumed; `nil` at the end of input before one.
private func readLine(_ fd: Int32) -> String? {
    var line: [UInt8] = []
    var byte: UInt8 = 0
    while true {
        let n = read(fd, &byte, 1)
        if n < 0 && errno == EINTR { continue }
        guard n == 1 else { return nil }
        if byte == UInt8(ascii: "\n") { return String(decoding: line, as: UTF8.self) }
        line.append(byte)
    }
}

/// Benchmarks/people.py output in a temporary directory of the caller's own (a test may change
/// its pages). The generator is seeded: each data set is made once per test process and copied
/// (the suite asked for about 160 data sets, some 25 of them different).
func generatePeople(persons: Int, pageSize: Int, faults: Bool = false) throws -> String {
    let made = PeopleDataSets.shared.withLock { sets in
        let key = "\(persons)-\(pageSize)-\(faults)"
        if let made = sets[key] { return made }
        let made = PeopleDataSets.Made()
        sets[key] = made
        return made
    }
    let original = try made.directory.withLock { directory in
        if let directory { return directory }
        let generated = try runPeopleGenerator(persons: persons, pageSize: pageSize, faults: faults)
        directory = generated
        return generated
    }
    let copy = temporaryDirectory().appendingPathComponent("pages").path
    try FileManager.default.copyItem(atPath: original, toPath: copy)
    return copy
}

/// The people data sets made so far, by their parameters; each made under its own lock.
private enum PeopleDataSets {
    final class Made: Sendable {
        let directory = Mutex<String?>(nil)
    }
    static let shared = Mutex<[String: Made]>([:])
}

private func runPeopleGenerator(persons: Int, pageSize: Int, faults: Bool) throws -> String {
    let dir = temporaryDirectory().appendingPathComponent("pages").path
    let process = Process()
    process.executableURL = python3
    process.arguments =
        [
            packageRoot.appendingPathComponent("Benchmarks/people.py").path, "--out", dir,
            "--persons", "\(persons)", "--page-size", "\(pageSize)",
        ] + (faults ? ["--faults"] : [])
    process.standardOutput = Pipe()
    try process.run()
    process.waitUntilExit()
    return dir
}

/// Benchmarks/people.py --check: the JSON it prints.
func checkPeople(_ db: String, _ pages: String) throws -> String {
    let process = Process()
    process.executableURL = python3
    process.arguments = [
        packageRoot.appendingPathComponent("Benchmarks/people.py").path, "--check", db,
        "--expected", pages + "/expected.json",
    ]
    let out = Pipe()
    process.standardOutput = out
    try process.run()
    let data = out.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}
