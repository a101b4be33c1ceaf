import CoreMetrics
import Foundation
import Prometheus
import Synchronization

/// A run's metrics, recorded through swift-metrics into a Prometheus registry of the run's own
/// (no global bootstrap: a process may hold several runs, a test many).
///
/// Counters are taken from the run's committed counters at each progress tick and at the end
/// (``update(_:)``), so at exit they equal the summary's exactly; the fetch and commit latency
/// histograms and the retry counter are recorded where those happen. The text exposition comes
/// from swift-prometheus; ``fileURL`` gets it atomically (a temporary file renamed over it, for
/// node_exporter's textfile collector), ``MetricsServer`` serves it.
///
/// Every series carries `pipeline`. Names and meanings: docs/logging.md, "Metrics".
package final class RunMetrics: FetchObserver, Sendable {
    /// The registry the exposition is read from.
    package let registry: PrometheusCollectorRegistry
    /// Where ``update(_:)`` writes the exposition, if anywhere.
    package let fileURL: URL?
    /// The pipeline every series is labelled with.
    package let pipeline: String
    /// The port a ``MetricsServer`` serves these metrics on, if one does (`run.started` logs it).
    package var servingPort: Int? {
        get { port.withLock { $0 } }
        set { port.withLock { $0 = newValue } }
    }
    private let port = Mutex<Int?>(nil)
    private let factory: PrometheusMetricsFactory
    /// The counters taken from the run's counters, by name and labels, with the value each has reached.
    private let counters = Mutex<[String: (counter: CoreMetrics.Counter, value: Int64)]>([:])
    private let gauges = Mutex<[String: CoreMetrics.Gauge]>([:])
    private let fetchDuration: CoreMetrics.Timer
    private let commitDuration: CoreMetrics.Timer
    private let fetchRetries: CoreMetrics.Counter
    private let runDuration: CoreMetrics.Gauge
    private let lastSuccess: CoreMetrics.Gauge

    /// What one update reports: the committed counters and what the stages have seen so far.
    package struct Snapshot: Sendable {
        /// The committed counters (what the summary will say).
        package var counters: RunCounters
        /// Pages the source delivered so far (committed or not).
        package var pagesRead = 0
        /// Their bytes (an oversized page counts what was received).
        package var bytesRead = 0
        /// Compressed bytes in the run's archive; `nil` without one.
        package var bytesArchived: Int?
        /// Seconds since the run started.
        package var elapsed: Double = 0

        /// A snapshot of `counters` (the rest as the stages report it).
        package init(counters: RunCounters) {
            self.counters = counters
        }
    }

    /// Metrics of a run of `pipeline`, written to `fileURL` at each update when given. A file
    /// left by an earlier run keeps its last-success time (a failed run does not erase it).
    package init(pipeline: String, fileURL: URL? = nil) {
        self.pipeline = pipeline
        self.fileURL = fileURL
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets = [
            "ingot_fetch_duration_seconds": [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000].map { .milliseconds($0) },
            "ingot_commit_duration_seconds": [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000].map { .milliseconds($0) },
        ]
        self.registry = registry
        self.factory = factory
        let labels = [("pipeline", pipeline)]
        fetchDuration = Timer(label: "ingot_fetch_duration_seconds", dimensions: labels, factory: factory)
        commitDuration = Timer(label: "ingot_commit_duration_seconds", dimensions: labels, factory: factory)
        fetchRetries = Counter(label: "ingot_fetch_retries_total", dimensions: labels, factory: factory)
        runDuration = Gauge(label: "ingot_run_duration_seconds", dimensions: labels, factory: factory)
        lastSuccess = Gauge(label: "ingot_run_last_success_timestamp_seconds", dimensions: labels, factory: factory)
        if let fileURL, let previous = RunMetrics.lastSuccess(in: fileURL, pipeline: pipeline) {
            lastSuccess.record(previous)
        }
    }

    /// Brings the counters to `snapshot` (they only grow: each moves by the difference) and
    /// writes the file. Returns why the file could not be written, if it could not.
    @discardableResult
    package func update(_ snapshot: Snapshot) -> String? {
        let c = snapshot.counters
        for (entity, counts) in c.entities {
            for (outcome, value) in [
                ("inserted", counts.inserted), ("updated", counts.updated), ("unchanged", counts.unchanged), ("stubs", counts.stubs),
                ("rejected", counts.rejected),
            ] {
                sync("ingot_records_total", [("entity", entity), ("outcome", outcome)], value)
            }
        }
        for (entity, counts) in c.entities {
            guard let unfilled = counts.unfilled else { continue }
            let gauge = gauges.withLock { all in
                if let existing = all[entity] { return existing }
                let made = Gauge(label: "ingot_stubs_unfilled", dimensions: [("pipeline", pipeline), ("entity", entity)], factory: factory)
                all[entity] = made
                return made
            }
            gauge.record(unfilled)
        }
        sync("ingot_pages_total", [("outcome", "applied")], c.pages - c.rejectedPages - c.unchangedPages)
        sync("ingot_pages_total", [("outcome", "rejected")], c.rejectedPages)
        if c.unchangedPages > 0 { sync("ingot_pages_total", [("outcome", "unchanged")], c.unchangedPages) }
        for (reason, value) in c.rejectsByReason { sync("ingot_rejects_total", [("reason", reason)], value) }
        sync("ingot_rows_deleted_total", [], c.deleted)
        sync("ingot_bytes_total", [("stage", "read")], snapshot.bytesRead)
        sync("ingot_bytes_total", [("stage", "committed")], c.bytes)
        if let archived = snapshot.bytesArchived { sync("ingot_bytes_total", [("stage", "archived")], archived) }
        sync("ingot_pages_read_total", [], snapshot.pagesRead)
        sync("ingot_records_read_total", [], c.records)
        sync("ingot_log_lines_dropped_total", [], StandardStream.droppedLines)
        runDuration.record(snapshot.elapsed)
        return write()
    }

    /// One HTTP response came after `seconds` (`ingot_fetch_duration_seconds`).
    package func recordFetch(seconds: Double) {
        fetchDuration.recordSeconds(seconds)
    }

    /// A request is retried (`ingot_fetch_retries_total`).
    package func recordRetry() {
        fetchRetries.increment()
    }

    /// A commit took `duration` (`ingot_commit_duration_seconds`).
    package func recordCommit(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        commitDuration.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    /// Marks the run a success now (`ingot_run_last_success_timestamp_seconds`).
    package func succeeded(at date: Date = Date()) {
        lastSuccess.record(date.timeIntervalSince1970)
    }

    /// The Prometheus text exposition of every metric.
    package func exposition() -> [UInt8] {
        registry.emitToBuffer()
    }

    private func sync(_ name: String, _ labels: [(String, String)], _ value: Int) {
        let dimensions = [("pipeline", pipeline)] + labels
        let key = name + dimensions.map { "\u{1}\($0.0)=\($0.1)" }.joined()
        let (counter, delta) = counters.withLock { all -> (CoreMetrics.Counter, Int64) in
            let entry = all[key] ?? (Counter(label: name, dimensions: dimensions, factory: factory), 0)
            let delta = Int64(value) - entry.value
            all[key] = (entry.counter, max(entry.value, Int64(value)))
            return (entry.counter, delta)
        }
        if delta > 0 { counter.increment(by: delta) }
    }

    /// Writes the exposition to ``fileURL`` through a temporary file in the same directory and a
    /// rename, so a collector never reads half a file. The temporary file is created by
    /// `mkstemp` (an unpredictable name, created exclusively: never an existing file, never
    /// through a symbolic link another user planted).
    private func write() -> String? {
        guard let fileURL else { return nil }
        var template = Array((fileURL.deletingLastPathComponent().path + "/.\(fileURL.lastPathComponent).XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { buffer in buffer.baseAddress.map { mkstemp($0) } ?? -1 }
        let temporary = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard fd >= 0 else {
            return "cannot write \(fileURL.path): cannot create a temporary file beside it: \(String(cString: strerror(errno)))"
        }
        let bytes = exposition()
        var written = 0
        let ok = bytes.withUnsafeBytes { raw -> Bool in
            guard let base = raw.baseAddress else { return true }
            while written < raw.count {
                let n = Glibc.write(fd, base + written, raw.count - written)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return false }
                written += n
            }
            return true
        }
        _ = fchmod(fd, 0o644)
        close(fd)
        guard ok else {
            unlink(temporary)
            return "cannot write \(temporary): \(String(cString: strerror(errno)))"
        }
        guard rename(temporary, fileURL.path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            return "cannot rename \(temporary) to \(fileURL.path): \(reason)"
        }
        return nil
    }

    /// The last-success time a previous run left in `url` for `pipeline`, if any.
    static func lastSuccess(in url: URL, pipeline: String) -> Double? {
        guard let data = try? Data(contentsOf: url, options: .mappedIfSafe), data.count < 16 << 20 else { return nil }
        let prefix = "ingot_run_last_success_timestamp_seconds{"
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") where line.hasPrefix(prefix) {
            guard line.contains("pipeline=\"\(pipeline)\""), let value = line.split(separator: " ").last.flatMap({ Double($0) }),
                value.isFinite, value > 0
            else { continue }
            return value
        }
        return nil
    }
}
