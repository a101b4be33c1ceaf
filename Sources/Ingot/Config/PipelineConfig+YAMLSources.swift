import Foundation
import Yams

// The reader's sections about where pages come from: `source:`, `resources:` with their
// `for_each`, paginators and HTTP settings (what a page holds: PipelineConfig+YAMLRecords.swift).
extension PipelineYAMLReader {
    // MARK: - Sections

    /// `resources:`: a list of resources, each with a name, and either a source or a `for_each`
    /// over an earlier resource's records.
    mutating func readResources(_ node: Node, defaults: Node?, model: EntityModel?) throws(ConfigError) -> [ResourceConfig] {
        guard case .sequence(let list) = node, list.count > 0 else {
            throw error(node, "resources is a list of resources, each {name, source or for_each, records, root}")
        }
        var resources: [ResourceConfig] = []
        for item in list {
            let fields = try mapping(
                item, allowed: ["name", "source", "records", "root", "for_each", "write", "batch_records", "delete_when"])
            let nameNode = try required(fields, "name", in: item)
            let name = try string(nameNode)
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
                throw error(nameNode, "a resource's name uses only letters, digits, '-' and '_'")
            }
            guard !resources.contains(where: { $0.name == name }) else { throw error(nameNode, "resource '\(name)' is declared twice") }
            var resource = ResourceConfig(name: name, source: .none, recordsPath: [])
            if let forEachNode = fields["for_each"] {
                (resource.forEach, resource.jsonLines) = try readForEach(
                    forEachNode, of: name, source: fields["source"], after: resources, defaults: defaults)
            } else {
                let sourceNode = try required(fields, "source", in: item)
                inSource = true
                defer { inSource = false }
                (resource.source, resource.jsonLines) = try readSource(sourceNode, defaults: defaults)
                if case .http(let http) = resource.source, http.syncURL != nil {
                    throw error(
                        sourceNode, "sync_url is kept for a pipeline of one resource (not yet with resources:): give the sync its own file")
                }
            }
            try readRecordsAndRoot(fields, into: &resource, model: model)
            if let writeNode = fields["write"] {
                try readResourceWrite(writeNode, into: &resource, after: resources, model: model)
                if case .paths = resource.recordsLayout, resource.write == .replace { throw error(writeNode, Self.sideloadsReplaced) }
            }
            if let node = fields["batch_records"] {
                let value = try int(node)
                guard value >= 1 && value <= 1_000_000 else { throw error(node, "batch_records must be between 1 and 1000000") }
                resource.batchRecords = value
            }
            resources.append(resource)
        }
        // A resource without a root is read only to drive another.
        for (resource, item) in zip(resources, list) where resource.root == nil {
            if !resources.haveReader(of: resource.name) {
                throw error(item, "resource '\(resource.name)' has no root: and no for_each reads it: its records would go nowhere")
            }
        }
        return resources
    }

    /// A resource's `for_each` (resource `name`, declared after `earlier`): the resource it reads,
    /// its URL template and injected keys, and its requests' HTTP settings — `defaults.http`, and
    /// its own `source.http` (pagination) over it; and whether its pages are JSON Lines.
    private mutating func readForEach(
        _ node: Node, of name: String, source sourceNode: Node?, after earlier: [ResourceConfig], defaults: Node?
    ) throws(ConfigError) -> (ResourceConfig.ForEach, jsonLines: Bool) {
        let f = try mapping(node, allowed: ["resource", "each", "path", "url", "with", "not_found", "depth", "when"])
        var notFoundFails = false
        if let notFound = f["not_found"] {
            switch try string(notFound) {
            case "skip": notFoundFails = false
            case "fail": notFoundFails = true
            default: throw error(notFound, "not_found is skip (a 404 or 410 detail is a rejected page, the run goes on) or fail")
            }
        }
        let parentNode = try required(f, "resource", in: node)
        let parent = try string(parentNode)
        guard earlier.contains(where: { $0.name == parent }) else {
            throw error(parentNode, "for_each reads resource '\(parent)', which is not declared before '\(name)'")
        }
        guard (f["path"] == nil) != (f["url"] == nil), let templateNode = f["path"] ?? f["url"] else {
            throw error(node, "for_each takes path (relative to defaults.http.url) or url (a whole URL), one of them")
        }
        let template = try urlTemplate(templateNode)
        let each = try f["each"].map { (node: Node) throws(ConfigError) in try keyPath(node) }
        let when = try f["when"].map { (node: Node) throws(ConfigError) in try keyPath(node) }
        var with: [ResourceConfig.WithKey] = []
        if let withNode = f["with"] {
            guard case .mapping(let pairs) = withNode else { throw error(withNode, "with is a mapping of new keys to key paths") }
            for (key, value) in pairs { with.append(ResourceConfig.WithKey(key: try string(key), path: try keyPath(value))) }
        }
        // Its requests: defaults.http, and its own source.http (pagination) over it. Both are
        // source configuration: `${VAR}` expands there as in source: (a staging server, a
        // mirror), and a replay never reads them.
        inSource = true
        defer { inSource = false }
        guard let defaults, try baseURL(defaults) != nil else {
            throw error(node, "for_each needs defaults.http.url: its requests' origin and base")
        }
        var httpNode = try required(try mapping(defaults, allowed: ["http"]), "http", in: defaults)
        if let sourceNode {
            let source = try mapping(sourceNode, allowed: ["http"])
            guard let own = source["http"] else { throw error(sourceNode, "a for_each resource's source is http: {paginate: …}") }
            if let url = try mapping(own, allowed: HTTPSourceConfig.keys)["url"] {
                throw error(url, "a for_each resource's URL comes from its for_each template")
            }
            httpNode = try mergingDefaults(defaults, into: own)
        }
        let config = try readHTTP(httpNode)
        let jsonLines = try readSource(.mapping(Node.Mapping([(Node("http"), httpNode)]))).jsonLines
        var forEach = ResourceConfig.ForEach(
            resource: parent, each: each, template: template, isURL: f["url"] != nil, with: with, http: config,
            notFoundFails: notFoundFails)
        forEach.when = when
        if let depthNode = f["depth"] { forEach.depth = try depth(depthNode) }
        return (forEach, jsonLines)
    }

    /// A for_each's `depth:`, 1 to ``ResourceConfig/ForEach/maxDepth``.
    private func depth(_ node: Node) throws(ConfigError) -> Int {
        guard let depth = Int(try string(node)), (1...ResourceConfig.ForEach.maxDepth).contains(depth) else {
            throw error(
                node,
                "depth is the levels of requests, 1 to \(ResourceConfig.ForEach.maxDepth): 1 reads the parent's records only, "
                    + "more reads this resource's own records too, that many levels down")
        }
        return depth
    }

    /// A resource's `write:`: it needs a root, a scope names one of the root's keys, and one root
    /// has one row-level write mode across the resources (`earlier`).
    private func readResourceWrite(
        _ node: Node, into resource: inout ResourceConfig, after earlier: [ResourceConfig], model: EntityModel?
    ) throws(ConfigError) {
        let (mode, rejectsUnknown, scope) = try readWrite(node)
        guard let root = resource.root else { throw error(node, "write needs a root: a resource without one stores nothing") }
        if let scope, let model, let missing = resource.rootEntities.first(where: { model.scopeColumn(scope, of: $0) == nil }) {
            throw error(node, "scope '\(scope)' is the key of no attribute or to-one of root '\(missing)'")
        }
        resource.writeScope = scope
        let rowLevel: Set<WriteMode> = [.insertOnly, .updateOnly]
        if rowLevel.contains(mode),
            let other = earlier.first(where: { $0.root == root && $0.write.map(rowLevel.contains) == true && $0.write != mode })
        {
            throw error(node, "resource '\(other.name)' writes root '\(root)' \(other.write?.rawValue ?? ""): one root, one write mode")
        }
        (resource.write, resource.writeRejectsUnknown) = (mode, rejectsUnknown)
    }

    /// `write:`: a mode (`merge`, `replace`, `insert_only`, `update_only`), or
    /// `{mode: update_only, unknown: skip|reject}`.
    func readWrite(_ node: Node) throws(ConfigError) -> (WriteMode, rejectsUnknown: Bool, scope: String?) {
        func mode(_ node: Node) throws(ConfigError) -> WriteMode {
            let value = try string(node)
            guard let mode = WriteMode(rawValue: value) else {
                throw error(node, "write must be one of \(WriteMode.allCases.map(\.rawValue).joined(separator: ", ")), not '\(value)'")
            }
            return mode
        }
        guard case .mapping = node else { return (try mode(node), false, nil) }
        let fields = try mapping(node, allowed: ["mode", "unknown", "scope"])
        let written = try mode(try required(fields, "mode", in: node))
        var scope: String?
        if let node = fields["scope"] {
            guard written == .replace else { throw error(node, "scope applies to write mode replace") }
            scope = try string(node)
        }
        guard let unknown = fields["unknown"] else { return (written, false, scope) }
        guard written == .updateOnly else { throw error(unknown, "unknown applies to write mode update_only") }
        switch try string(unknown) {
        case "skip": return (written, false, scope)
        case "reject": return (written, true, scope)
        case let other: throw error(unknown, "unknown must be skip or reject, not '\(other)'")
        }
    }

    /// A `for_each` template: text with `{key.path}` placeholders; `{.}` is the value itself (a
    /// list of bare ids: Hacker News's `topstories.json`, an `each:` array's elements).
    func urlTemplate(_ node: Node) throws(ConfigError) -> URLTemplate {
        let text = try string(node)
        var parts: [URLTemplate.Part] = []
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "{") {
            if open > rest.startIndex { parts.append(.literal(String(rest[..<open]))) }
            guard let close = rest[open...].firstIndex(of: "}") else { throw error(node, "'\(text)': a '{' without its '}'") }
            let inner = String(rest[rest.index(after: open)..<close])
            do throws(JSONKeyPath.ParseError) {
                parts.append(.value(inner == "." ? JSONKeyPath([]) : try JSONKeyPath(parsing: inner)))
            } catch {
                throw self.error(node, "'\(text)': \(error.description)")
            }
            rest = rest[rest.index(after: close)...]
        }
        if rest.contains("}") { throw error(node, "'\(text)': a '}' without its '{'") }
        if !rest.isEmpty { parts.append(.literal(String(rest))) }
        guard parts.contains(where: { if case .value = $0 { true } else { false } }) else {
            throw error(node, "'\(text)' reads no value of the record: write {key.path} where each record's value goes")
        }
        return URLTemplate(parts: parts)
    }

    /// Whether `fields` (a source's `http:` or `files:`) say `format: jsonl`.
    func format(_ fields: [String: Node]) throws(ConfigError) -> Bool {
        guard let node = fields["format"] else { return false }
        switch try string(node) {
        case "json": return false
        case "jsonl": return true
        default: throw error(node, "format is json (one JSON text a page, the default) or jsonl (JSON Lines: one record a line)")
        }
    }

    /// Only the page format of `source:` — what a replay needs of a source it does not read: its
    /// pages are framed as the run's were (`format: jsonl` pages replayed as JSON Lines).
    func readSourceFormat(_ node: Node) throws(ConfigError) -> Bool {
        guard case .mapping = node else { return false }
        let source = try mapping(node, allowed: ["files", "http"])
        guard let kind = source["http"] ?? source["files"], case .mapping(let pairs) = kind else { return false }
        var fields: [String: Node] = [:]
        for (key, value) in pairs { if let name = key.string { fields[name] = value } }
        return try format(fields)
    }

    /// `source:`, and whether its pages are JSON Lines (`format: jsonl`).
    func readSource(_ node: Node, defaults: Node? = nil) throws(ConfigError) -> (SourceConfig, jsonLines: Bool) {
        let source = try mapping(node, allowed: ["files", "http"])
        if let http = source["http"] {
            guard source["files"] == nil else { throw error(node, "source takes either files or http, not both") }
            let merged = try defaults.map { (d: Node) throws(ConfigError) in try mergingDefaults(d, into: http) } ?? http
            let config = try readHTTP(merged, base: try defaults.flatMap { (d: Node) throws(ConfigError) in try baseURL(d) })
            return (.http(config), try format(try mapping(merged, allowed: HTTPSourceConfig.keys)))
        }
        guard let filesNode = source["files"] else { throw error(node, "source needs 'files' or 'http'") }
        let files = try mapping(filesNode, allowed: ["dir", "glob", "format"])
        let dir = try string(try required(files, "dir", in: filesNode))
        let glob = try files["glob"].map { (n: Node) throws(ConfigError) in try string(n) } ?? "*.json"
        // A relative directory is relative to the pipeline file, so a pipeline runs from anywhere.
        let base = (file as NSString).deletingLastPathComponent
        let resolved = dir.hasPrefix("/") || base.isEmpty ? dir : (base as NSString).appendingPathComponent(dir)
        return (.files(directory: resolved, glob: glob), try format(files))
    }

    /// A key path of the pipeline file (``JSONKeyPath``'s grammar), refused at `node` when it is not one.
    func keyPath(_ node: Node) throws(ConfigError) -> JSONKeyPath {
        let text = try string(node)
        do throws(JSONKeyPath.ParseError) {
            return try JSONKeyPath(parsing: text)
        } catch {
            throw self.error(node, error.description)
        }
    }

    /// `paginate:`: one paginator, and `has_more` (with `has_more_absent`) for any of them.
    func readPagination(_ paginate: Node, into config: inout HTTPSourceConfig) throws(ConfigError) {
        let kinds = ["next_url", "link_header", "page", "offset", "cursor"]
        let p = try mapping(paginate, allowed: kinds + ["has_more", "has_more_absent"])
        let chosen = p.filter { kinds.contains($0.key) }
        guard chosen.count == 1, let (kind, value) = chosen.first else {
            throw error(paginate, "paginate takes one of next_url, link_header, page, offset, cursor (and has_more)")
        }
        if let flag = p["has_more"] {
            var hasMore = HTTPSourceConfig.HasMore(path: try keyPath(flag))
            if let absent = p["has_more_absent"] {
                switch try string(absent) {
                case "stop": hasMore.continueWhenAbsent = false
                case "continue": hasMore.continueWhenAbsent = true
                default: throw error(absent, "has_more_absent is stop or continue")
                }
            }
            config.hasMore = hasMore
        } else if let absent = p["has_more_absent"] {
            throw error(absent, "has_more_absent needs has_more")
        }
        switch kind {
        case "next_url": config.paginate = .nextURL(path: try keyPath(value))
        case "link_header":
            guard try bool(value) else { throw error(value, "link_header: true, or leave paginate out") }
            config.paginate = .linkHeader
        case "page":
            let f = try mapping(value, allowed: ["param", "start", "total_pages"])
            let start =
                try f["start"].map { (n: Node) throws(ConfigError) in
                    let v = try int(n)
                    guard (0...1_000_000_000).contains(v) else { throw error(n, "start must be between 0 and 1000000000") }
                    return v
                } ?? 1
            config.paginate = .page(
                param: try string(try required(f, "param", in: value)), start: start,
                totalPages: try f["total_pages"].map { (n: Node) throws(ConfigError) in try count(n) })
        case "offset":
            let f = try mapping(value, allowed: ["param", "limit_param", "limit", "total"])
            let limitNode = try required(f, "limit", in: value)
            let limit = try int(limitNode)
            guard (1...1_000_000).contains(limit) else { throw error(limitNode, "limit must be between 1 and 1000000") }
            config.paginate = .offset(
                param: try string(try required(f, "param", in: value)),
                limitParam: try string(try required(f, "limit_param", in: value)), limit: limit,
                total: try f["total"].map { (n: Node) throws(ConfigError) in try count(n) })
        default:
            config.paginate = try readCursor(value)
        }
    }

    /// A numbered paginator's total: a key path of the page, or `{header: NAME}`.
    private func count(_ node: Node) throws(ConfigError) -> HTTPSourceConfig.CountSource {
        guard case .mapping = node else { return .body(try keyPath(node)) }
        let header = try string(try required(try mapping(node, allowed: ["header"]), "header", in: node))
        guard !header.isEmpty, header.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
            throw error(node, "'\(header)' is not a header name (letters, digits, - and _)")
        }
        return .header(header.lowercased())
    }

    /// `paginate: {cursor: …}`: where the cursor is read (a key path of the page, or of its last
    /// record), the parameter that sends it, and the values that end the list.
    private func readCursor(_ value: Node) throws(ConfigError) -> HTTPSourceConfig.Pagination {
        let f = try mapping(value, allowed: ["path", "from_last_record", "param", "body", "stop_values"])
        let source: HTTPSourceConfig.CursorSource
        switch (f["path"], f["from_last_record"]) {
        case (let path?, nil): source = .path(try keyPath(path))
        case (nil, let key?): source = .lastRecord(try keyPath(key))
        default: throw error(value, "cursor takes path (a key path of the page) or from_last_record (one of its last record)")
        }
        var stopValues: [String] = []
        if let list = f["stop_values"] {
            guard case .sequence(let items) = list else { throw error(list, "stop_values is a list, like [0, \"0\", \"\"]") }
            for item in items {
                guard case .scalar(let scalar) = item else { throw error(item, "a stop value is a number or a string") }
                stopValues.append(scalar.string)
            }
        }
        switch (f["param"], f["body"]) {
        case (let param?, nil): return .cursor(source, into: .query(try string(param)), stopValues: stopValues)
        case (nil, let body?):
            let path = try keyPath(body)
            guard path.isKeysOnly, !path.components.isEmpty else {
                throw error(body, "a body cursor goes at a path of keys, like variables.cursor")
            }
            return .cursor(source, into: .body(path), stopValues: stopValues)
        default: throw error(value, "cursor takes param (a query parameter) or body (a key path of the request's JSON body), one of them")
        }
    }

    /// `defaults.http`'s URL, expanded: what resource URLs are relative to, with the parts of it
    /// that came from the environment and are secret (its user info, path and query), which stay
    /// secret in every URL resolved against it.
    func baseURL(_ defaults: Node) throws(ConfigError) -> (url: String, secrets: [String])? {
        guard let http = try mapping(defaults, allowed: ["http"])["http"],
            let node = try mapping(http, allowed: HTTPSourceConfig.keys)["url"]
        else { return nil }
        guard case .scalar(let scalar) = node else { throw error(node, "expected a string") }
        let (url, fromEnvironment) = try expanding(scalar.string, at: node)
        return (url, PipelineYAMLReader.secretParts(of: url, fromEnvironment: fromEnvironment))
    }

    /// A resource's `http:` with `defaults.http`'s keys added where it does not set them.
    func mergingDefaults(_ defaults: Node, into http: Node) throws(ConfigError) -> Node {
        guard let base = try mapping(defaults, allowed: ["http"])["http"], case .mapping(let shared) = base,
            case .mapping(let own) = http
        else { return http }
        let keys = own.map(\.key)
        let pairs = own.map { ($0.key, $0.value) } + shared.filter { !keys.contains($0.key) }.map { ($0.key, $0.value) }
        return .mapping(Node.Mapping(pairs, own.tag, own.style, own.mark))
    }

    func readHTTP(_ node: Node, base: (url: String, secrets: [String])? = nil) throws(ConfigError) -> HTTPSourceConfig {
        let fields = try mapping(
            node, allowed: HTTPSourceConfig.keys)
        let urlNode = try required(fields, "url", in: node)
        guard case .scalar(let urlScalar) = urlNode else { throw error(urlNode, "expected a string") }
        var (url, fromEnvironment) = try expanding(urlScalar.string, at: urlNode)
        var secrets: [String] = []
        // A resource's URL is relative to defaults.http.url (RFC 3986), whose secrets it keeps
        // (each part is secret as a value: where it lands in the resolved URL does not matter).
        if let base, URLText.Parts(url[...]).scheme == nil, let resolved = URLText.resolve(URLText.escapingInvalid(url), against: base.url)
        {
            secrets = base.secrets + PipelineYAMLReader.secretParts(of: url, fromEnvironment: fromEnvironment)
            fromEnvironment = []
            url = resolved
        }
        let parts = URLText.Parts(url[...])
        guard let scheme = parts.scheme?.lowercased(), scheme == "http" || scheme == "https", parts.host?.isEmpty == false,
            parts.port != .invalid
        else {
            throw error(urlNode, "url must be an absolute http(s) URL")
        }
        // Kept as written: a request escapes only the bytes a URL cannot carry (PageFetch).
        var config = HTTPSourceConfig(url: url)
        config.urlSecrets = secrets + PipelineYAMLReader.secretParts(of: url, fromEnvironment: fromEnvironment)
        if let headers = fields["headers"] {
            guard case .mapping(let map) = headers else { throw error(headers, "headers must be a mapping of header names to values") }
            for (k, v) in map {
                let name = try string(k)
                if ["authorization", "cookie"].contains(name.lowercased()) {
                    throw error(k, "put credentials under auth (read from the environment), not in headers")
                }
                // A value taken from the environment may be a secret: it is scrubbed wherever shown.
                let fromEnvironment = if case .scalar(let raw) = v { raw.string.contains("${") } else { false }
                config.headers.append(.init(name: name, value: try string(v), isSecret: fromEnvironment))
            }
        }
        if let hosts = fields["allowed_hosts"] {
            guard case .sequence(let list) = hosts else { throw error(hosts, "allowed_hosts must be a list of host or host:port entries") }
            for entry in list {
                let host = try string(entry)
                guard HTTPSourceConfig.isValidHostEntry(host) else {
                    throw error(entry, "allowed_hosts entry '\(host)' must be a host name or host:port, without scheme or path")
                }
                config.allowedHosts.append(host)
            }
        }
        if let auth = fields["auth"] { config.auth = try readAuth(auth) }
        try readTransfer(fields, into: &config)
        if let rule = fields["error_when"] { config.errorWhen = try readErrorWhen(rule) }
        try readMethodAndBody(fields, node: node, into: &config)
        if let sync = fields["sync_url"] { config.syncURL = try keyPath(sync) }
        return config
    }

    /// `method:` and `body:`: a POST's JSON body, given as a mapping (written out as JSON) or as
    /// JSON text; a body cursor needs a body and a POST.
    private func readMethodAndBody(_ fields: [String: Node], node: Node, into config: inout HTTPSourceConfig) throws(ConfigError) {
        if let method = fields["method"] {
            switch try string(method).uppercased() {
            case "GET": config.method = .get
            case "POST": config.method = .post
            default: throw error(method, "method is GET (the default) or POST")
            }
        }
        if let body = fields["body"] {
            guard config.method == .post else { throw error(body, "a body is sent with method: POST") }
            var secrets: [String] = []
            let text: String
            if case .scalar(let scalar) = body {
                let (expanded, fromEnvironment) = try expanding(scalar.string, at: body)
                secrets = fromEnvironment.map { String(decoding: Array(expanded.utf8)[$0], as: UTF8.self) }
                text = expanded
                guard let document = try? JSONDocument(bytes: Array(text.utf8)), document.root.kind == .object else {
                    throw error(body, "body is a mapping, or the text of a JSON object")
                }
            } else {
                text = try json(of: body, secrets: &secrets)
            }
            config.body = text
            config.bodySecrets = secrets.filter { !$0.isEmpty }
        }
        if case .cursor(_, .body, _) = config.paginate, config.body == nil {
            throw error(fields["paginate"] ?? node, "a body cursor is written into the request's body: give method: POST and a body")
        }
    }

    /// A YAML value as JSON text: mappings and sequences as objects and arrays; a plain scalar
    /// `null`, `~`, `true`, `false` or a JSON number as itself; every other scalar (and every
    /// quoted one) as a string, its `${VAR}`s expanded (`secrets` gets their values).
    private func json(of node: Node, secrets: inout [String]) throws(ConfigError) -> String {
        switch node {
        case .mapping(let mapping):
            var parts: [String] = []
            for (key, value) in mapping {
                var name = ""
                JSONText.quote(try string(key), into: &name)
                parts.append(name + ":" + (try json(of: value, secrets: &secrets)))
            }
            return "{" + parts.joined(separator: ",") + "}"
        case .sequence(let sequence):
            var parts: [String] = []
            for item in sequence { parts.append(try json(of: item, secrets: &secrets)) }
            return "[" + parts.joined(separator: ",") + "]"
        case .scalar(let scalar):
            if scalar.style == .plain {
                switch scalar.string {
                case "null", "~", "": return "null"
                case "true", "false": return scalar.string
                default:
                    if let number = try? JSONDocument(bytes: Array(scalar.string.utf8)), number.root.kind == .number {
                        return scalar.string
                    }
                }
            }
            let (expanded, fromEnvironment) = try expanding(scalar.string, at: node)
            secrets += fromEnvironment.map { String(decoding: Array(expanded.utf8)[$0], as: UTF8.self) }
            var text = ""
            JSONText.quote(expanded, into: &text)
            return text
        default:
            throw error(node, "a body holds mappings, lists and values")
        }
    }

    /// `error_when:`: `path` and one of `equals: VALUE` or `present: true`; `reason` and `retry`.
    private func readErrorWhen(_ node: Node) throws(ConfigError) -> HTTPSourceConfig.ErrorWhen {
        let f = try mapping(node, allowed: ["path", "equals", "present", "reason", "retry", "not_found"])
        var rule = HTTPSourceConfig.ErrorWhen(path: try keyPath(try required(f, "path", in: node)))
        switch (f["equals"], f["present"]) {
        case (let equals?, nil):
            guard case .scalar = equals else { throw error(equals, "equals takes one value (true, false, a number or a text)") }
            rule.equals = try string(equals)
        case (nil, let present?):
            guard try bool(present) else {
                throw error(present, "present: false would make every body an error; say present: true, or equals: VALUE")
            }
        default:
            throw error(node, "error_when takes equals: VALUE (the value at path that makes the body an error) or present: true")
        }
        if let reason = f["reason"] { rule.reason = try keyPath(reason) }
        if let retry = f["retry"] {
            guard case .sequence(let items) = retry else { throw error(retry, "retry must be a list of reasons, e.g. [ratelimited]") }
            guard rule.reason != nil else { throw error(retry, "retry needs reason: the key path of the reason it lists") }
            for item in items { rule.retry.append(try string(item)) }
        }
        if let notFound = f["not_found"] {
            guard case .sequence(let items) = notFound else {
                throw error(notFound, "not_found must be a list of reasons, e.g. [channel_not_found]")
            }
            guard rule.reason != nil else { throw error(notFound, "not_found needs reason: the key path of the reason it lists") }
            for item in items {
                let reason = try string(item)
                if rule.retry.contains(reason) { throw error(item, "'\(reason)' is both retried and not found: say it in one list") }
                rule.notFound.append(reason)
            }
        }
        return rule
    }

    /// `auth:`: one of `bearer_env`, `basic`, `api_key`, each naming environment variables.
    private func readAuth(_ auth: Node) throws(ConfigError) -> HTTPSourceConfig.Auth? {
        let a = try mapping(auth, allowed: ["bearer_env", "basic", "api_key"])
        guard a.count == 1 else { throw error(auth, "auth takes one of bearer_env, basic, api_key") }
        if let env = a["bearer_env"] { return .bearer(env: try string(env)) }
        if let basic = a["basic"] {
            let b = try mapping(basic, allowed: ["user", "password_env"])
            return .basic(
                user: try string(try required(b, "user", in: basic)), passwordEnv: try string(try required(b, "password_env", in: basic)))
        }
        guard let key = a["api_key"] else { return nil }
        let k = try mapping(key, allowed: ["header", "query", "env"])
        let env = try string(try required(k, "env", in: key))
        if let header = k["header"], k["query"] == nil { return .apiKeyHeader(header: try string(header), env: env) }
        if let query = k["query"], k["header"] == nil { return .apiKeyQuery(param: try string(query), env: env) }
        throw error(key, "api_key takes header or query, and env")
    }

    /// `paginate`, `max_pages`, `concurrency`, `timeout_s` and `retry`.
    private func readTransfer(_ fields: [String: Node], into config: inout HTTPSourceConfig) throws(ConfigError) {
        if let paginate = fields["paginate"] {
            try readPagination(paginate, into: &config)
        }
        if let n = fields["max_pages"] {
            config.maxPages = try int(n)
            guard (1...100_000_000).contains(config.maxPages) else { throw error(n, "max_pages must be between 1 and 100000000") }
        }
        if let n = fields["concurrency"] {
            config.concurrency = try int(n)
            guard (1...64).contains(config.concurrency) else { throw error(n, "concurrency must be between 1 and 64") }
        }
        if let n = fields["timeout_s"] {
            guard case .scalar = n, let value = Double(try string(n)), value > 0, value <= 86_400 else {
                throw error(n, "timeout_s must be a number of seconds above 0 and at most 86400")
            }
            config.timeout = value
        }
        if let r = fields["retry"] {
            let f = try mapping(r, allowed: ["attempts", "base_delay_ms", "max_delay_ms"])
            func bounded(_ key: String, _ range: ClosedRange<Int>) throws(ConfigError) -> Int? {
                guard let n = f[key] else { return nil }
                let v = try int(n)
                guard range.contains(v) else { throw error(n, "\(key) must be between \(range.lowerBound) and \(range.upperBound)") }
                return v
            }
            if let v = try bounded("attempts", 1...100) { config.retry.attempts = v }
            if let v = try bounded("base_delay_ms", 0...3_600_000) { config.retry.baseDelayMs = v }
            if let v = try bounded("max_delay_ms", 0...3_600_000) { config.retry.maxDelayMs = v }
        }
    }
}
