import Foundation

/// The entry points the fuzzers drive (`make fuzz`, Sources/IngotFuzz), one per kind of hostile
/// input. Each takes raw bytes and must return normally whatever they hold: errors are
/// expected, traps are bugs. The tests replay every input kept in `Tests/Fixtures/fuzz/`.
package enum FuzzTargets {
    /// The harness names, as `ingot-fuzz NAME` takes them.
    package static let names = ["page", "archive", "pipeline", "pagination", "draft"]

    /// Runs the harness `name` on `bytes`; `false` for an unknown name.
    @discardableResult
    package static func run(_ name: String, _ bytes: [UInt8]) -> Bool {
        switch name {
        case "page": page(bytes)
        case "archive": archive(bytes)
        case "pipeline": pipeline(bytes)
        case "pagination": pagination(bytes)
        case "draft": draft(bytes)
        default: return false
        }
        return true
    }

    // MARK: - Page: the JSON parser and the record mapper

    /// A model that reaches every mapping path: every attribute type and date format, key paths,
    /// to-one and to-many relationships, nested and bare, a composite identity, coercion.
    static let pageModel: PipelineConfig? = try? PipelineConfig.parse(
        text: """
            version: 1
            name: fuzz
            records: results
            root: person
            entities:
              person:
                identity: id
                attributes:
                  id: integer
                  name: string
                  score: {type: double, coerce: true}
                  active: {type: bool, coerce: true}
                  n: {type: integer, key: a.b.n, coerce: true}
                  day: {type: date, format: "yyyy-MM-dd"}
                  at: {type: date, format: iso8601, timezone: Europe/Paris}
                  unix: {type: date, format: unix, coerce: true}
                  ms: {type: date, format: unix_ms}
                  local: {type: date, format: "dd/MM/yyyy HH:mm:ss.SSS", timezone: America/New_York}
                  meta: json
                relationships:
                  dogs: {to: dog, many: true}
                  best: {to: dog, key: best_friend, missing: reject}
                  visits: {to: place, many: true, ordered: true, missing: ignore}
              dog:
                identity: id
                attributes: {id: integer, name: string}
              place:
                identity: [country, code]
                attributes: {country: string, code: integer}
            """, path: "fuzz.yml")

    private static let pagePlan: MappingPlan? = pageModel.map {
        MappingPlan(model: $0.model, root: $0.root, framing: $0.framing, incrementalPath: ["name"])
    }

    static func page(_ bytes: [UInt8]) {
        guard let plan = pagePlan else { return }
        var mapper = RecordMapper(plan: plan)
        let decoded = mapper.map(bytes: bytes, seq: 1, source: "fuzz")
        // Everything the later stages read from a decoded page must be readable.
        for rejection in decoded.rejections { _ = rejection.description }
        for record in decoded.records { precondition(record.rows.upperBound <= decoded.rows.count) }
        if let document = try? JSONDocument(bytes: bytes) { _ = describe(document.root, depth: 0) }
        // The same bytes as JSON Lines (one record a line), and a for_each's injection: what it
        // writes must parse as what it was given.
        if let plan = linesPlan {
            var lines = RecordMapper(plan: plan)
            let decoded = lines.map(bytes: bytes, seq: 1, source: "fuzz")
            for rejection in decoded.rejections { _ = rejection.description }
        }
        for framing in layoutFramings {
            if let injected = framing.injecting([InjectedValue(key: "with\"key", json: "[1,\"two\"]")], into: bytes) {
                precondition((try? framing.parse(injected)) != nil, "an injection broke the page")
            }
            // A layout's rewrite parses, and reads as records or says why not.
            if let document = try? framing.parse(bytes) {
                switch framing.records(in: document) {
                case .success(let records): _ = records.last(in: document)
                case .failure(let failure): _ = failure.reason
                }
                _ = framing.rawRecord(0, in: bytes)
            }
        }
        // Key paths picked by a member's value, on the page (`[id=…]`).
        if let document = try? JSONDocument(bytes: bytes), let path = try? JSONKeyPath(parsing: "results[id=1].name") {
            _ = path.resolve(in: document.root)
        }
    }

    /// Every way a page's records may sit: arrays, JSON Lines, a dictionary's values, columns,
    /// several paths.
    private static let layoutFramings: [RecordFraming] = [
        .array(at: ["results"]), .array(at: []), .lines, .array(at: ["results"], layout: .values(key: "k", value: "v")),
        .array(at: [], layout: .values(key: "k", value: nil)), .array(at: ["results"], layout: .columns),
        .array(
            at: [RecordsLayout.combinedKey],
            layout: .paths([.init(path: ["results"], entity: "a"), .init(path: ["included"], entity: "b")])),
    ]

    private static let linesPlan: MappingPlan? = pageModel.map {
        MappingPlan(model: $0.model, root: $0.root, framing: .lines)
    }

    /// Walks a parsed document the way the mapper's callers do (strings, numbers, members).
    private static func describe(_ value: JSONValue, depth: Int) -> Int {
        guard depth < 64 else { return 0 }
        var n = 1
        _ = value.string
        _ = value.int64
        _ = value.double
        for element in value.elements { n += describe(element, depth: depth + 1) }
        for (_, member) in value.members { n += describe(member, depth: depth + 1) }
        return n
    }

    // MARK: - Archive: the reader, on any file

    private static let archivePath = FileManager.default.temporaryDirectory
        .appendingPathComponent("ingot-fuzz-\(getpid()).ingot").path

    static func archive(_ bytes: [UInt8]) {
        guard FileManager.default.createFile(atPath: archivePath, contents: Data(bytes)) else { return }
        defer { unlink(archivePath) }
        guard let reader = try? ArchiveReader(path: archivePath) else { return }
        reader.decompressionLimit = 1 << 20
        for entry in reader.entries { _ = try? reader.payload(of: entry) }
        _ = try? reader.verify()
        _ = ArchiveReader.printable(reader.header.pipelineText)
        if let text = try? PipelineConfig.parse(text: reader.header.pipelineText, path: "archived", readsSource: false) { _ = text.name }
    }

    // MARK: - Pipeline: the YAML loader and the model's validation

    static func pipeline(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let config = try? PipelineConfig.parse(text: text, path: "fuzz.yml") else { return }
        // A pipeline that loads must give a schema and a mapping plan without trapping.
        _ = try? StoreLocation.sqlite(path: ":memory:").schema(of: config.model)
        _ = MappingPlan(model: config.model, root: config.root, framing: config.framing)
        if case .http(let http) = config.source {
            _ = OriginPolicy(url: http.url, allowedHosts: http.allowedHosts).check(http.url)
        }
    }

    // MARK: - Pagination: response headers and body in, next URL out

    private static let policy = OriginPolicy(url: "https://api.example.org/v1/items?page=1", allowedHosts: ["cdn.example.org"])

    /// The input is `Link header value \n Retry-After value \n body`.
    static func pagination(_ bytes: [UInt8]) {
        let parts = bytes.split(separator: UInt8(ascii: "\n"), maxSplits: 2, omittingEmptySubsequences: false)
        let link = parts.count > 0 ? String(decoding: parts[0], as: UTF8.self) : ""
        let retryAfter = parts.count > 1 ? String(decoding: parts[1], as: UTF8.self) : ""
        let body = parts.count > 2 ? Array(parts[2]) : []
        _ = HTTPPageSource.retryAfter(retryAfter)
        var candidates: [String] = []
        if let next = HTTPPageSource.nextLink(link) { candidates.append(next) }
        if let document = try? JSONDocument(bytes: body) {
            if let next = document.root["next"]?.string { candidates.append(next) }
            // A server's totals (`total_pages`, `total`, `count`) end a numbered source: any number.
            for key in ["total_pages", "total", "count"] {
                guard let n = document.root["meta"]?[key]?.int64 ?? document.root[key]?.int64 else { continue }
                for first in [0, 1, Int.max - 1] {
                    _ = HTTPPageSource.end(total: Int(n), isPages: true, first: first)
                    _ = HTTPPageSource.end(total: Int(n), isPages: false, first: first)
                }
            }
        }
        for candidate in candidates {
            _ = HTTPPageSource.shown(candidate)
            if let absolute = URL(string: candidate, relativeTo: URL(string: "https://api.example.org/v1/items?page=1"))?.absoluteString {
                _ = policy.check(absolute)
                _ = policy.mayReceiveCredentials(absolute)
            }
        }
    }

    // MARK: - Draft: `ingot init` over the pages an API answers

    /// The input is a page as an API answered it: drafted as a JSON page and as JSON Lines, as
    /// from a URL (paginators, lists of links, `error_when:`) and from a directory; each draft
    /// written as YAML and as Swift, and the YAML read back as a pipeline file.
    static func draft(_ bytes: [UInt8]) {
        let url = "https://api.example.org/v1/items?page=1"
        for page in [bytes, PipelineDraft.arrayOfLines(bytes)] {
            guard let document = try? JSONDocument(bytes: page) else { continue }
            let sample = PipelineDraft.Sample(document: document, url: url, headers: ["link": "<\(url)&x=2>; rel=\"next\""])
            for origin in [PipelineDraft.Origin.url(url, bearerEnv: "TOKEN"), .directory("/fuzz")] {
                // A list of links: the page itself stands for the detail pages it names.
                var details: DraftDetails?
                if origin.isURL, let (path, layout, _) = try? PipelineDraft.recordsPath(of: sample),
                    let (key, collection) = DraftDetails.linkKey(of: PipelineDraft.records(of: [sample], path: path, layout: layout))
                {
                    details = DraftDetails(
                        link: .key(key), entity: PipelineDraft.identifier(PipelineDraft.singular(collection.collection)), samples: [sample])
                }
                guard let draft = try? PipelineDraft.infer(name: "fuzz", origin: origin, samples: [sample, sample], details: details)
                else { continue }
                _ = draft.swift
                _ = try? PipelineConfig.parse(text: draft.yaml, path: "draft.yml", environment: ["TOKEN": "t"])
            }
        }
    }
}
