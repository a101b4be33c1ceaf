import Foundation
import Logging
import Synchronization

/// The metadata keys Ingot logs, each defined once. Messages are constant event names
/// (`run.summary`); everything variable is metadata.
package enum LogKey {
    package static let pipeline = "pipeline"
    package static let runID = "run_id"
    package static let status = "status"
    package static let pages = "pages"
    package static let records = "records"
    package static let inserted = "inserted"
    package static let updated = "updated"
    package static let deleted = "deleted"
    package static let rejectedRecords = "rejected_records"
    package static let rejectedPages = "rejected_pages"
    package static let bytes = "bytes"
    package static let recordsPerSecond = "records_per_s"
    package static let duration = "duration_s"
    package static let elapsed = "elapsed_s"
    package static let error = "error"
    package static let database = "db"
    package static let lanes = "lanes"
    package static let batchRecords = "batch_records"
    package static let commitRecords = "commit_records"
    package static let entity = "entity"
    package static let codingPath = "coding_path"
    package static let reason = "reason"
    package static let source = "source"
    package static let recordIndex = "record_index"
    package static let seq = "seq"
    package static let archive = "archive"
    package static let url = "url"
    package static let offset = "offset"

    static func seconds(_ value: Double) -> String { String(format: "%.3f", value) }
}

extension Logger.MetadataValue {
    /// A count or size: a number in JSON logs.
    package static func int(_ value: Int) -> Self { .stringConvertible(value) }

    /// Seconds, to the millisecond: a number in JSON logs.
    package static func seconds(_ value: Double) -> Self {
        .stringConvertible(value.isFinite ? (value * 1000).rounded() / 1000 : 0)
    }
}

/// A swift-log handler writing one line per event, as logfmt (`key=value`, quoted where needed)
/// or as one JSON object per line.
///
/// ```
/// ts=2026-11-22T03:40:00.123Z level=info msg=run.summary pipeline=people pages=240 …
/// {"ts":"2026-11-22T03:40:00.123Z","level":"info","msg":"run.summary","pipeline":"people","pages":240,…}
/// ```
///
/// In JSON, numbers (``Logger/MetadataValue/int(_:)``, ``Logger/MetadataValue/seconds(_:)``) and
/// booleans logged as such are JSON numbers and booleans; everything else is a string. The event
/// names and their fields are listed in docs/logging.md.
///
/// Lines are written whole under a lock, so events from different queues never interleave.
package struct LogfmtLogHandler: LogHandler {
    package enum Format: String, Sendable, CaseIterable {
        case logfmt, json
    }

    /// Where lines go: a file handle, or a closure in tests.
    package final class Output: Sendable {
        private let write: @Sendable (String) -> Void
        private let lock = Mutex(())

        package init(_ write: @escaping @Sendable (String) -> Void) {
            self.write = write
        }

        /// Standard error; a line it refuses is dropped and counted, never a trap (StandardStream).
        package static let standardError = Output { line in
            StandardStream.standardError(line)
        }

        func emit(_ line: String) {
            lock.withLock { _ in write(line) }
        }
    }

    package var metadata: Logger.Metadata = [:]
    package var logLevel: Logger.Level = .info
    package var metadataProvider: Logger.MetadataProvider?
    let format: Format
    let output: Output
    /// Whether lines start with a timestamp (tests turn it off to pin exact lines).
    let timestamps: Bool

    package init(format: Format = .logfmt, output: Output = .standardError, timestamps: Bool = true) {
        self.format = format
        self.output = output
        self.timestamps = timestamps
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        var fields: [(String, Logger.MetadataValue)] = []
        if timestamps { fields.append(("ts", .string(LogfmtLogHandler.now()))) }
        fields.append(("level", .string(event.level.rawValue)))
        fields.append(("msg", .string(event.message.description)))
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        // Context first (pipeline, run), then the event's own keys in a stable order.
        let context = [LogKey.pipeline, LogKey.runID]
        for key in context { if let v = merged.removeValue(forKey: key) { fields.append((key, v)) } }
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) { fields.append((key, value)) }
        output.emit(format == .json ? LogfmtLogHandler.json(fields) : LogfmtLogHandler.logfmt(fields))
    }

    static func logfmt(_ fields: [(String, Logger.MetadataValue)]) -> String {
        fields.map { key, value in "\(key)=\(quoteIfNeeded("\(value)"))" }.joined(separator: " ") + "\n"
    }

    /// The value as is when it has no space, `=`, quote, backslash or control character (C0,
    /// DEL, C1); else quoted and escaped as a JSON string (so a value never breaks its line, nor
    /// reaches a terminal as a control).
    static func quoteIfNeeded(_ value: String) -> String {
        let needs =
            value.isEmpty || value.unicodeScalars.contains { $0 == " " || $0 == "=" || $0 == "\"" || $0 == "\\" || JSONText.isControl($0) }
        guard needs else { return value }
        var out = ""
        JSONText.quote(value, into: &out)
        return escapingDELAndC1(out)
    }

    /// A quoted JSON string with DEL and C1 controls escaped too (JSON allows them raw; a
    /// terminal may act on them).
    static func escapingDELAndC1(_ quoted: String) -> String {
        guard quoted.unicodeScalars.contains(where: { (0x7F...0x9F).contains($0.value) }) else { return quoted }
        var out = ""
        for scalar in quoted.unicodeScalars {
            if (0x7F...0x9F).contains(scalar.value) {
                out += "\\u00" + String(scalar.value, radix: 16)
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    static func json(_ fields: [(String, Logger.MetadataValue)]) -> String {
        var out = "{"
        for (k, (key, value)) in fields.enumerated() {
            if k > 0 { out += "," }
            JSONText.quote(key, into: &out)
            out += ":"
            switch value {
            case .stringConvertible(let v as Bool): out += v ? "true" : "false"
            case .stringConvertible(let v as Int): out += String(v)
            case .stringConvertible(let v as Double) where v.isFinite: out += "\(v)"
            default:
                var quoted = ""
                JSONText.quote("\(value)", into: &quoted)
                out += escapingDELAndC1(quoted)
            }
        }
        return out + "}\n"
    }

    private static func now() -> String {
        var t = timespec()
        clock_gettime(CLOCK_REALTIME, &t)
        var tm = tm()
        var seconds = t.tv_sec
        gmtime_r(&seconds, &tm)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", Int(tm.tm_year) + 1900, Int(tm.tm_mon) + 1, Int(tm.tm_mday),
            Int(tm.tm_hour), Int(tm.tm_min), Int(tm.tm_sec), t.tv_nsec / 1_000_000)
    }
}
