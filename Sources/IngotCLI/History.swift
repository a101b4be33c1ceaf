import ArgumentParser
import Foundation
import Ingot

/// `ingot runs`: the runs a database records, one line each (logfmt, or JSON Lines).
struct Runs: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "runs",
        abstract: "List the runs a database records: status, counts per entity, rejects by reason, archive.",
        discussion: "Oldest first. A run killed outright stays `running` until `ingot run --resume` takes it up.")

    @Option(help: "The database (a SQLite path or a postgresql:// URL; env INGOT_DB; default ingot.db).")
    var db: String?

    @Option(help: "Only this pipeline's runs.")
    var pipeline: String?

    @Flag(help: "One JSON object per run (JSON Lines) instead of logfmt.")
    var json = false

    func run() throws {
        let location = try historyLocation(db)
        let runs: [RunRecord]
        do {
            runs = try location.runs(pipeline: pipeline)
        } catch {
            printError("\(location): \(error)")
            throw Exit.failed
        }
        for run in runs { print(json ? Runs.json(run) : Runs.logfmt(run)) }
    }

    static func fields(_ run: RunRecord) -> [(String, Any)] {
        let c = run.counters
        var fields: [(String, Any)] = [
            ("run_id", run.runID), ("pipeline", run.pipeline), ("status", run.status), ("started_at", run.startedAt),
        ]
        if let finished = run.finishedAt { fields.append(("finished_at", finished)) }
        fields += [
            ("pages", c.pages), ("records", c.records), ("inserted", c.inserted), ("updated", c.updated), ("deleted", c.deleted),
            ("rejected_records", c.rejectedRecords), ("rejected_pages", c.rejectedPages),
        ]
        for (entity, counts) in c.entities.sorted(by: { $0.key < $1.key }) {
            fields += [
                ("\(entity).inserted", counts.inserted), ("\(entity).updated", counts.updated),
                ("\(entity).unchanged", counts.unchanged), ("\(entity).stubs", counts.stubs), ("\(entity).rejected", counts.rejected),
            ]
        }
        for (reason, count) in c.rejectsByReason.sorted(by: { $0.key < $1.key }) { fields.append(("rejects.\(reason)", count)) }
        if let archive = run.archive { fields.append(("archive", archive)) }
        return fields
    }

    static func logfmt(_ run: RunRecord) -> String {
        fields(run).map { key, value in "\(key)=\(logfmtValue("\(value)"))" }.joined(separator: " ")
    }

    static func json(_ run: RunRecord) -> String {
        var object: [String: Any] = [:]
        for (key, value) in fields(run) { object[key] = value }
        let data =
            (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

/// `ingot rejects`: the records (and pages) runs rejected, with entity, coding path, reason and
/// source.
struct Rejects: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rejects",
        abstract: "Show rejected records: entity, coding path, reason, source and archive entry.",
        discussion: "At most --max-reject-rows (10,000) are kept per run; each keeps up to 16 KiB of its JSON (--raw prints it).")

    @Option(help: "The database (a SQLite path or a postgresql:// URL; env INGOT_DB; default ingot.db).")
    var db: String?

    @Option(name: .customLong("run"), help: "Only this run's rejects (`last`: the latest run's).")
    var runID: String?

    @Option(help: "Only this reason code (wrong_type, missing_identity, not_json, …).")
    var reason: String?

    @Option(help: "At most this many.")
    var limit: Int?

    @Flag(help: "Print each rejected record's JSON after its line (control characters but newlines and tabs as \\u escapes).")
    var raw = false

    @Flag(help: "With --raw: the record's bytes exactly as stored, control characters included (refused on a terminal).")
    var rawUnescaped = false

    func run() throws {
        let location = try historyLocation(db)
        if rawUnescaped && isatty(1) != 0 {
            printError(
                "--raw-unescaped writes a page's bytes as they are (ESC, BEL, …): not to a terminal; redirect it to a file or a pipe")
            throw Exit.badConfig
        }
        // What a page held never reaches a terminal as a control, unless asked for, elsewhere.
        let unescaped = rawUnescaped
        func shown(_ text: String) -> String { unescaped ? text : JSONText.escapingTerminalControls(text) }
        do {
            var wanted = runID
            if runID == "last" {
                guard let last = try location.runs().last else { return }
                wanted = last.runID
            }
            for (runID, r) in try location.rejections(runID: wanted, reason: reason, limit: limit) {
                var fields = [
                    ("run_id", runID), ("entity", r.entity), ("coding_path", r.codingPath), ("reason_code", r.reasonCode),
                    ("reason", r.reason), ("source", r.source),
                ]
                if let index = r.recordIndex { fields.append(("record", String(index))) }
                if let archive = r.archivePath, let entry = r.archiveEntry { fields += [("archive", archive), ("entry", String(entry))] }
                print(fields.map { "\($0)=\(logfmtValue($1))" }.joined(separator: " "))
                guard raw || rawUnescaped else { continue }
                // The whole record from the archive when the run kept one; else the stored text
                // (up to 16 KiB).
                if let whole = Rejects.wholeRecord(r) {
                    print(shown(whole))
                } else {
                    print(shown(r.raw))
                    if r.rawLength > r.raw.utf8.count {
                        let page = r.archivePath.map { " (the page: ingot archive cat \($0) \(r.archiveEntry ?? 0))" } ?? ""
                        print("… \(r.rawLength) bytes in all\(page)")
                    }
                }
            }
        } catch {
            printError("\(location): \(error)")
            throw Exit.failed
        }
    }
}

extension Rejects {
    /// A rejected record's whole text, read from its run's archive with the archived pipeline's
    /// framing; `nil` when there is no archive (or it cannot be read): the stored prefix will do.
    static func wholeRecord(_ r: RecordRejection) -> String? {
        guard let path = r.archivePath, let seq = r.archiveEntry, let reader = try? ArchiveReader(path: path),
            let entry = reader.entry(seq: seq), let bytes = try? reader.payload(of: entry)
        else { return nil }
        guard let index = r.recordIndex else { return String(decoding: bytes, as: UTF8.self) }
        guard
            let config = try? PipelineConfig.parse(
                text: reader.header.pipelineText, path: "\(path) (pipeline \(reader.header.pipelinePath))", readsSource: false),
            config.resources.count == 1, let resource = config.resources.first
        else { return nil }
        return resource.framing.rawRecord(index, in: bytes)
    }
}

/// The database `--db` (or INGOT_DB) names for `runs` and `rejects`.
private func historyLocation(_ db: String?) throws -> StoreLocation {
    do {
        return try StoreLocation(db ?? Environment.string("INGOT_DB") ?? "ingot.db")
    } catch {
        printError("\(error)")
        throw Exit.badConfig
    }
}

/// A logfmt value: bare when it can be, else quoted with `"` and `\` escaped.
/// A logfmt value: bare, or quoted with quotes, backslashes and every control character (C0,
/// DEL, C1: a file name or reason a server chose) escaped, so nothing reaches the terminal as a
/// control.
private func logfmtValue(_ value: String) -> String {
    let bare =
        !value.isEmpty && value.unicodeScalars.allSatisfy { $0.value > 0x20 && $0 != "\"" && $0 != "=" && $0 != "\\" && $0.value < 0x7f }
    if bare { return value }
    var out = "\""
    for ch in JSONText.escapingControlCharacters(value).unicodeScalars {
        if ch == "\"" { out += "\\\"" } else { out.unicodeScalars.append(ch) }
    }
    return out + "\""
}

/// `ingot export`: stored rows back out as the pipeline's records.
struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write stored rows back out as the records they came from, with the pipeline's keys and key paths.",
        discussion: """
            By default one page in the pipeline's shape (records at its `records:` path), which `ingot run --pages` takes \
            back: the same tables. Relationships are nested objects (--depth 1) or their targets' identities (--depth 0). \
            What a pattern read is written back through its template (or the attribute keeping the same key's whole text); \
            an export that cannot write something back so that it reads back the same is refused, naming it.
            """)

    @Argument(help: "The pipeline file.")
    var pipeline: String

    @Option(help: "The database (a SQLite path or a postgresql:// URL; env INGOT_DB; default ingot.db).")
    var db: String?

    @Option(help: "The entity to export (default: the pipeline's root).")
    var entity: String?

    @Option(name: .customLong("where"), help: "Only rows whose ATTRIBUTE equals VALUE (repeatable: all must hold).")
    var filters: [String] = []

    @Option(help: "Relationships as nested objects (1) or as identities (0).")
    var depth = 1

    @Option(help: "page (the pipeline's page shape), json (an array of records) or jsonl (one record a line).")
    var format = "page"

    func run() throws {
        let config = try loadPipeline(pipeline)
        guard ["page", "json", "jsonl"].contains(format) else { throw ValidationError("--format is page, json or jsonl") }
        let location = try historyLocation(db)
        let exporter: RecordExporter
        do {
            exporter = try RecordExporter(config: config, location: location, entity: entity, filters: filters, depth: depth)
        } catch {
            printError("\(error)")
            throw Exit.badConfig
        }
        let path = format == "page" ? config.recordsPath : []
        let (open, close) = (
            path.map { "{\"\($0)\":" }.joined() + (format == "jsonl" ? "" : "["),
            (format == "jsonl" ? "" : "]") + String(repeating: "}", count: path.count)
        )
        var output = BufferedOutput()
        var first = true
        output.write(open + (format == "jsonl" ? "" : "\n"))
        do {
            let skipped = try exporter.forEachRecord { record in
                output.write((first || format == "jsonl" ? "" : ",\n") + record + (format == "jsonl" ? "\n" : ""))
                first = false
            }
            for reason in skipped { printError("left out: \(reason)") }
        } catch {
            output.flush()
            printError("\(location): \(error)")
            throw Exit.failed
        }
        output.write((format == "jsonl" ? "" : "\n") + close + (format == "jsonl" ? "" : "\n"))
        output.flush()
    }
}

/// Standard output, written a megabyte at a time.
private struct BufferedOutput {
    private var buffer: [UInt8] = []

    mutating func write(_ text: String) {
        buffer += text.utf8
        if buffer.count >= 1 << 20 { flush() }
    }

    mutating func flush() {
        guard !buffer.isEmpty else { return }
        StandardStream.write(buffer, to: 1)
        buffer.removeAll(keepingCapacity: true)
    }
}
