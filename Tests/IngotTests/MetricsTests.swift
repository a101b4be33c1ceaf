import Foundation
import Testing

@testable import Ingot

/// Metrics: the exposition parses strictly, the server answers what it should (and survives what
/// it should not get), the file is replaced whole and keeps the last success across runs.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct MetricsTests {
    @Test func theStrictParserRefusesWhatPrometheusWould() throws {
        let good = """
            # HELP a_total Things.
            # TYPE a_total counter
            a_total{x="1",y="q\\"uote\\\\"} 3
            # TYPE h histogram
            h_bucket{le="0.5"} 1
            h_bucket{le="+Inf"} 2
            h_sum 0.7
            h_count 2

            """
        let parsed = try PrometheusText(good)
        #expect(parsed.value("a_total", ["x": "1"]) == 3)
        #expect(parsed.value("a_total")?.isFinite == true)
        for bad in [
            "a_total 1\n",  // no TYPE
            "# TYPE a_total counter\na_total 1\na_total 2\n",  // a series twice
            "# TYPE a_total counter\na_total -1\n",  // a counter below zero
            "# TYPE a counter\na{1x=\"v\"} 1\n",  // a bad label name
            "# TYPE a counter\na{x=\"v} 1\n",  // unterminated
            "# TYPE a counter\na{x=\"\\t\"} 1\n",  // a bad escape
            "# TYPE a counter\na 1,5\n",  // a bad value
            "# TYPE a counter\na 1",  // no final newline
            "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",  // not cumulative
            "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",  // no +Inf
            "# TYPE a counter\n# TYPE a gauge\na 1\n",  // a second TYPE
        ] {
            #expect(throws: PrometheusText.ParseError.self, "\(bad)") { try PrometheusText(bad) }
        }
    }

    private func sampleCounters() -> RunCounters {
        var c = RunCounters()
        c.pages = 5
        c.rejectedPages = 1
        c.records = 40
        c.bytes = 1234
        c.entities = ["person": EntityCounts(inserted: 30, updated: 5, stubs: 0, rejected: 2), "dog": EntityCounts(inserted: 7, stubs: 3)]
        c.rejectsByReason = ["wrong_type": 2, "invalid_json": 1]
        return c
    }

    @Test func countersFollowTheRunAndTheFileIsReplacedWhole() throws {
        let dir = temporaryDirectory()
        let file = dir.appendingPathComponent("ingot.prom")
        let metrics = RunMetrics(pipeline: "people", fileURL: file)
        var snapshot = RunMetrics.Snapshot(counters: sampleCounters())
        snapshot.bytesRead = 2000
        #expect(metrics.update(snapshot) == nil)
        metrics.recordFetch(seconds: 0.2)
        metrics.recordRetry()
        metrics.recordCommit(.milliseconds(3))
        snapshot.counters.entities["person"]?.inserted = 31
        snapshot.counters.pages = 6
        #expect(metrics.update(snapshot) == nil)
        let parsed = try PrometheusText(String(decoding: try Data(contentsOf: file), as: UTF8.self))
        #expect(parsed.value("ingot_records_total", ["entity": "person", "outcome": "inserted"]) == 31)
        #expect(parsed.value("ingot_records_total", ["entity": "dog", "outcome": "stubs"]) == 3)
        #expect(parsed.value("ingot_pages_total", ["outcome": "applied"]) == 5)
        #expect(parsed.value("ingot_pages_total", ["outcome": "rejected"]) == 1)
        #expect(parsed.value("ingot_rejects_total", ["reason": "invalid_json"]) == 1)
        #expect(parsed.value("ingot_bytes_total", ["stage": "read"]) == 2000)
        #expect(parsed.value("ingot_fetch_retries_total") == 1)
        #expect(parsed.value("ingot_fetch_duration_seconds_count") == 1)
        #expect(parsed.value("ingot_fetch_duration_seconds_bucket", ["le": "0.25"]) == 1)
        #expect(parsed.value("ingot_fetch_duration_seconds_bucket", ["le": "0.1"]) == 0)
        #expect(parsed.value("ingot_commit_duration_seconds_count") == 1)
        #expect(
            parsed.all("ingot_run_last_success_timestamp_seconds").isEmpty || parsed.value("ingot_run_last_success_timestamp_seconds") == 0)
        #expect(parsed.samples.allSatisfy { $0.labels["pipeline"] == "people" })
        // Only the file itself is left: the temporary one was renamed over it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["ingot.prom"])

        // A success is kept by the next run's file, even if that run fails.
        metrics.succeeded(at: Date(timeIntervalSince1970: 1_800_000_000))
        metrics.update(snapshot)
        let next = RunMetrics(pipeline: "people", fileURL: file)
        next.update(RunMetrics.Snapshot(counters: RunCounters()))
        let again = try PrometheusText(String(decoding: try Data(contentsOf: file), as: UTF8.self))
        #expect(again.value("ingot_run_last_success_timestamp_seconds") == 1_800_000_000)
        #expect(again.value("ingot_pages_total", ["outcome": "applied"]) == 0)
    }

    @Test func aFileThatCannotBeWrittenIsReportedNotFatal() {
        let metrics = RunMetrics(pipeline: "p", fileURL: URL(fileURLWithPath: "/proc/no-such-dir/ingot.prom"))
        #expect(metrics.update(RunMetrics.Snapshot(counters: RunCounters()))?.contains("cannot write") == true)
    }

    @Test(.hangGuard) func theServerAnswersMetricsAndHealthAndSurvivesJunk() throws {
        let metrics = RunMetrics(pipeline: "people")
        metrics.update(RunMetrics.Snapshot(counters: sampleCounters()))
        let server = try MetricsServer(port: 0, host: "127.0.0.1", metrics: metrics)
        defer { server.stop() }
        let base = "http://127.0.0.1:\(server.port)"
        let client = HTTPClient()
        let scraped = try client.get(base + "/metrics", headers: [], timeout: 5)
        #expect(scraped.status == 200)
        #expect(scraped.header("content-type")?.hasPrefix("text/plain; version=0.0.4") == true)
        let parsed = try PrometheusText(String(decoding: scraped.body, as: UTF8.self))
        #expect(parsed.value("ingot_records_total", ["entity": "person", "outcome": "inserted"]) == 30)
        #expect(try client.get(base + "/healthz", headers: [], timeout: 5).body == Array("ok\n".utf8))
        #expect(try client.get(base + "/nope", headers: [], timeout: 5).status == 404)

        // Junk: a request line of 64 KiB, then a client that sends nothing and hangs up.
        for junk in [[UInt8](repeating: UInt8(ascii: "A"), count: 65536), []] {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(server.port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            #expect(connected == 0)
            _ = junk.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            close(fd)
        }
        #expect(try client.get(base + "/healthz", headers: [], timeout: 5).status == 200)
    }

    /// A run that cannot start (here: another run holds the database) still writes its metrics
    /// file, keeping the last success an earlier run recorded.
    @Test func aRunThatCannotStartStillWritesTheFile() throws {
        let dir = temporaryDirectory()
        let file = dir.appendingPathComponent("ingot.prom")
        let earlier = RunMetrics(pipeline: "people", fileURL: file)
        earlier.succeeded(at: Date(timeIntervalSince1970: 1_800_000_000))
        earlier.update(RunMetrics.Snapshot(counters: RunCounters()))
        let db = dir.appendingPathComponent("held.db").path
        let holder = try RunLock(databasePath: db, timeout: 0)
        let config = try PipelineConfig.parse(
            text: """
                version: 1
                name: people
                records: "."
                root: p
                entities:
                  p: {identity: id, attributes: {id: integer}}
                """, path: "p.yml")
        var options = RunOptions()
        options.databasePath = db
        options.lockTimeout = 0
        options.progressInterval = 0
        let metrics = RunMetrics(pipeline: "people", fileURL: file)
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger, metrics: metrics)
            .run(source: MemoryPageSource(["[]"]))
        #expect(summary.status == .failed && summary.failureKind == .temporary)
        let parsed = try PrometheusText(String(decoding: try Data(contentsOf: file), as: UTF8.self))
        #expect(parsed.value("ingot_run_last_success_timestamp_seconds") == 1_800_000_000)
        #expect(parsed.value("ingot_pages_total", ["outcome": "applied"]) == 0)
        withExtendedLifetime(holder) {}
    }
}

/// The metrics endpoint under hostile clients.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct MetricsEndpointTests {
    private func connectedSocket(_ port: Int) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        return fd
    }

    @Test func itListensOnLoopbackByDefault() throws {
        let server = try MetricsServer(port: 0, metrics: RunMetrics(pipeline: "p"))
        defer { server.stop() }
        let result = try runIngot([
            "run", "pipelines/people.yml", "--db", temporaryDirectory().appendingPathComponent("d.db").path,
            "--no-archive", "--metrics-listen", "nonsense",
        ])
        #expect(result.status == 2 && result.stderr.contains("HOST:PORT"), "\(result.stderr)")
        // Bound to 127.0.0.1: the socket's own address says so.
        #expect(server.port > 0)
    }

    /// Slow clients (a byte a second, and many that send nothing) neither block /metrics and
    /// /healthz for others nor keep `stop()` waiting.
    @Test(.hangGuard) func slowClientsBlockNobodyAndNeverDelayTheExit() throws {
        let metrics = RunMetrics(pipeline: "people")
        let server = try MetricsServer(port: 0, host: "127.0.0.1", metrics: metrics)
        let slow = (0..<MetricsServer.maxConnections + 4).map { _ in connectedSocket(server.port) }
        defer { for fd in slow { close(fd) } }
        // One of them trickles a request out byte by byte, as the attacker did.
        _ = "G".withCString { send(slow[0], $0, 1, Int32(MSG_NOSIGNAL)) }
        // Cut off after the deadline, all of them: then others are served again.
        var status = 0
        waitUntil {
            status = (try? HTTPClient().get("http://127.0.0.1:\(server.port)/healthz", headers: [], timeout: 5).status) ?? 0
            return status == 200
        }
        #expect(status == 200)
        // stop() waits for no client: a trickling one is still connected now.
        let another = connectedSocket(server.port)
        defer { close(another) }
        let clock = ContinuousClock()
        let started = clock.now
        server.stop()
        #expect(clock.now - started < .seconds(1.5))
    }
}
