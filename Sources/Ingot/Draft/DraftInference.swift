import Foundation

extension PipelineDraft {
    /// Drafts a pipeline named `name` from `samples` (in the order they were read) for `origin`;
    /// with `details`, the list's entries are links and the entity is drafted from the detail
    /// pages they name (``DraftDetails``). Throws when the pages hold no records it can map,
    /// saying what it found.
    package static func infer(name: String, origin: Origin, samples: [Sample], details: DraftDetails? = nil) throws(Failure)
        -> PipelineDraft
    {
        guard let first = samples.first else { throw Failure(description: "no page was read") }
        var (path, layout, why) = try recordsPath(of: first)
        if first.files?.jsonLines == true { why = "JSON Lines: each line is a record" }
        let records = details.map { $0.samples.map(\.document.root) } ?? Self.records(of: samples, path: path, layout: layout)
        let objects = records.filter { $0.kind == .object }
        guard !objects.isEmpty else {
            let bare = !records.isEmpty && records.allSatisfy { $0.kind == .number || $0.kind == .string }
            throw Failure(
                description: bare
                    ? "\(first.url ?? "the first page"): the page is a list of \(records.count) bare values (ids?), not records: draft from a page of the records they name, then read them with a for_each over {.} (docs/cookbook.md, \"Hacker News\"), or give their path: --for-each \"item/{.}.json\""
                    : "\(first.url ?? "the first page"): no record objects at '\(path)' (found \(records.count) values, none an object): give a page of records"
            )
        }
        let root =
            details.map(\.entity) ?? entityName(forRecordsAt: path, url: first.url, fallback: name)
        let sideloads = details == nil ? DraftSideload.of(samples, main: path, records: objects) : []
        var builder = EntityBuilder()
        for sideload in sideloads { builder.add(sideload.entity, sideload.objects) }
        builder.add(root, objects)
        builder.linkReferences()
        if !sideloads.isEmpty {
            why =
                "the records, and beside them the \(sideloads.map(\.path).joined(separator: " and ")) they name by id (sideloaded): each array its entity"
        }
        let paginate = origin.isURL ? Paginator.detect(samples, recordsPath: path) : nil
        var draft = PipelineDraft(
            name: name, origin: origin, recordsPath: path, recordsWhy: why, paginate: paginate, root: root, entities: builder.entities)
        draft.layout = layout
        draft.details = details
        draft.files = first.files
        draft.sideloads = sideloads.map { ($0.path, $0.entity) }
        if origin.isURL, first.document.root["ok"]?.bool == true {
            // Slack's Web API answers its errors with HTTP 200: `{"ok": false, "error": "ratelimited"}`.
            draft.errorWhen = (
                "{path: ok, equals: false, reason: error, retry: [ratelimited]}",
                "the pages say ok: true: an answer with ok: false is an error whatever its HTTP status (its `error` says why; ratelimited is retried)"
            )
        }
        if origin.isURL, let last = samples.last?.document.root, last.kind == .object {
            // A sync API's last page names where the next sync starts (Contentful, Microsoft Graph).
            for path in ["nextSyncUrl", "next_sync_url", "@odata.deltaLink", "deltaLink"] where last[path]?.string != nil {
                draft.syncURL = (
                    path,
                    "the last page read names where the next sync starts: kept, the next run reads what changed (tombstones: see delete_when)"
                )
                break
            }
        }
        return draft
    }

    /// A pipeline name from a URL: its host's first label and its path's last word
    /// (`https://api.github.com/repos/o/r/issues` → `github-issues`).
    package static func name(from url: String) -> String {
        let parts = URLText.Parts(url[...])
        let hostText: String = parts.host.map { String($0) } ?? "api"
        let labels: [String] = hostText.split(separator: ".").map { String($0) }
        let site: String = labels.count >= 2 ? labels[labels.count - 2] : (labels.first ?? "api")
        let segments: [String] = parts.path.split(separator: "/").map { String($0) }
        // Not an id (`8952`, `8952.json`): the resource's word before it (`item`).
        let last: String = segments.last { Int($0.components(separatedBy: ".").first ?? $0) == nil } ?? ""
        let word = identifier(last.components(separatedBy: ".").first ?? "")
        // An address or a local name says nothing of the API: its path's word alone.
        let local = hostText == "localhost" || hostText.allSatisfy { $0.isNumber || $0 == "." || $0 == ":" || $0 == "[" || $0 == "]" }
        let siteName = local ? "" : identifier(site).replacingOccurrences(of: "_", with: "-")
        if siteName.isEmpty { return word.isEmpty || word == "x" ? "api" : word.replacingOccurrences(of: "_", with: "-") }
        guard !word.isEmpty, word != "x" else { return siteName }
        return siteName + "-" + word.replacingOccurrences(of: "_", with: "-")
    }

    /// The value at a `records:` path (`"."`: the page).
    static func resolve(_ path: String, in root: JSONValue) -> JSONValue? {
        path == "." ? root : JSONKeyPath(keys: path.components(separatedBy: ".")).resolve(in: root)
    }

    /// Where the records are: the page when it is an array; else the largest array of objects
    /// among its members (and theirs, one level down); else an object of parallel arrays
    /// (columns) or of objects (a dictionary's values); else the page as one record.
    static func recordsPath(of sample: Sample) throws(Failure) -> (String, RecordsLayout, String) {
        let root = sample.document.root
        switch root.kind {
        case .array:
            return (".", .array, "the page is an array of \(root.count) values")
        case .object:
            var best: (path: String, count: Int)?
            var columns: (path: String, count: Int)?
            var values: (path: String, count: Int)?
            func consider(_ value: JSONValue, _ path: String) {
                if value.kind == .array, value.count > 0, value.elements.allSatisfy({ $0.kind == .object }) {
                    if best.map({ value.count > $0.count }) ?? true { best = (path, value.count) }
                }
                guard value.kind == .object, value.count >= 2 else { return }
                let members = value.members.map(\.1)
                if members.allSatisfy({ $0.kind == .array }), let n = members.first?.count, n > 1, members.allSatisfy({ $0.count == n }) {
                    if columns.map({ n > $0.count }) ?? true { columns = (path, n) }
                } else if value.count >= 3, members.allSatisfy({ $0.kind == .object && $0.count >= 2 }) {
                    if values.map({ value.count > $0.count }) ?? true { values = (path, value.count) }
                }
            }
            for (key, value) in root.members {
                guard let name = key.string, !name.contains(".") else { continue }
                consider(value, name)
                if value.kind == .object {
                    for (inner, nested) in value.members {
                        if let innerName = inner.string, !innerName.contains(".") { consider(nested, name + "." + innerName) }
                    }
                }
            }
            if let best { return (best.path, .array, "the page's largest array of objects (\(best.count) in the first page)") }
            if let columns {
                return (
                    columns.path, .columns, "'\(columns.path)' holds arrays of one length (\(columns.count)): columns, zipped into records"
                )
            }
            if let values {
                let key = singular(values.path.components(separatedBy: ".").last ?? "key")
                return (
                    values.path, .values(key: identifier(key), value: nil),
                    "'\(values.path)' holds \(values.count) objects by key: each a record, its key given as \(identifier(key))"
                )
            }
            return (".", .array, "the page is one object: one record")
        default:
            throw Failure(
                description: "\(sample.url ?? "the first page") is a \(root.kind.rawValue), not an object or an array of records")
        }
    }

    /// The root entity's name: the records' key in the singular, else the URL's last segment's,
    /// else the pipeline's name.
    static func entityName(forRecordsAt path: String, url: String?, fallback: String) -> String {
        let generic: Set<String> = ["results", "data", "items", "records", "entries", "values", "list", "nodes", "hits", "rows"]
        var candidate = path.components(separatedBy: ".").last ?? ""
        if candidate == "." || candidate.isEmpty || generic.contains(candidate), let url {
            let segments: [String] = URLText.Parts(url[...]).path.split(separator: "/").map { String($0) }
            candidate = segments.last { Int($0) == nil && !$0.contains(".") } ?? candidate
        }
        if candidate == "." || candidate.isEmpty || generic.contains(candidate) { candidate = fallback }
        return identifier(singular(candidate))
    }

    /// A word in the singular, as English plurals of API resources go (people, categories, boxes).
    static func singular(_ word: String) -> String {
        let lower = word.lowercased()
        if lower == "people" { return "person" }
        // Singular already: status, analysis, axis, species (menus and emus are not).
        let singularInS = ["status", "sis", "xis", "species", "series", "bonus", "campus", "census", "corpus", "focus", "virus"]
        if singularInS.contains(where: { lower.hasSuffix($0) }) { return word }
        if lower.hasSuffix("ies") && lower.count > 3 { return String(word.dropLast(3)) + "y" }
        for suffix in ["sses", "xes", "ches", "shes"] where lower.hasSuffix(suffix) { return String(word.dropLast(2)) }
        if lower.hasSuffix("s") && !lower.hasSuffix("ss") && lower.count > 1 { return String(word.dropLast()) }
        return word
    }

    /// `text` as a name a pipeline file takes for an entity or attribute: lowercase letters,
    /// digits and `_`, starting with a letter.
    package static func identifier(_ text: String) -> String {
        var out = ""
        var lastWasUpper = false
        for c in text {
            if c.isUppercase, !out.isEmpty, !lastWasUpper, out.last != "_" { out += "_" }
            lastWasUpper = c.isUppercase
            if c.isASCII && (c.isLetter || c.isNumber) {
                out += c.lowercased()
            } else if out.last != "_" && !out.isEmpty {
                out += "_"
            }
        }
        while out.hasSuffix("_") { out.removeLast() }
        if out.first.map({ !$0.isLetter }) ?? true { out = "x_" + out }
        return out
    }
}

extension PipelineDraft.Origin {
    var isURL: Bool { if case .url = self { true } else { false } }
}
