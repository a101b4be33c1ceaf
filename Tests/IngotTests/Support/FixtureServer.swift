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

/// Tests/Fixtures/server.py on 127.0.0.1 and a free port, for as long as the value lives.
final class FixtureServer {
    let process = Process()
    private let stdin = Pipe()
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
        process.executableURL = python3
        var arguments = [
            packageRoot.appendingPathComponent("Tests/Fixtures/server.py").path, "--exit-on-eof",
            "--faults", faults, "--slow", "\(slow)",
        ]
        if let people { arguments += ["--people", people] }
        if let token { arguments += ["--token", token] }
        if gate > 0 { arguments += ["--gate", "\(gate)"] }
        if let tls { arguments += ["--tls", tls.cert, tls.key] }
        if let validators { arguments += ["--validators", validators] }
        if apiSlow > 0 { arguments += ["--api-slow", "\(apiSlow)"] }
        if apiFail > 0 { arguments += ["--api-fail", "\(apiFail)"] }
        process.arguments = arguments
        let out = Pipe()
        process.standardOutput = out
        process.standardInput = stdin
        try process.run()
        var line = Data()
        while let byte = try out.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) {
            line.append(byte)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self).replacingOccurrences(of: "PORT ", with: "")) else {
            process.terminate()
            throw CocoaError(.fileReadCorruptFile)
        }
        self.port = port
    }

    /// The server's request counters (/requests): `people_requests`, `peak_in_flight`, ….
    func counters() throws -> [String: Int] {
        let response = try HTTPClient().get(base + "/requests", headers: [], timeout: 5)
        return (try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Int]) ?? [:]
    }

    /// Every request the server saw, in order: its path and query (`/seen`).
    func seen() throws -> [(path: String, query: String)] {
        let response = try HTTPClient().get(base + "/seen", headers: [], timeout: 5)
        let entries = (try JSONSerialization.jsonObject(with: Data(response.body)) as? [[String: Any]]) ?? []
        return entries.compactMap { entry in (entry["path"] as? String).map { ($0, entry["query"] as? String ?? "") } }
    }

    deinit {
        try? stdin.fileHandleForWriting.close()
        process.terminate()
        process.waitUntilExit()
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
