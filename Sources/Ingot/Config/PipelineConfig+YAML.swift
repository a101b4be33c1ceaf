import Foundation
import Yams

extension PipelineConfig {
    /// Reads and validates the pipeline file at `path`.
    ///
    /// Every problem is reported as a ``ConfigError`` at the line and column that caused it:
    /// unknown keys, wrong types, identities naming no attribute, relationships to missing
    /// entities, names that are not SQL identifiers.
    public static func load(
        path: String, environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(ConfigError) -> PipelineConfig {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigError(file: path, line: 0, column: 0, message: "cannot read the pipeline file")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ConfigError(file: path, line: 0, column: 0, message: "the pipeline file is not UTF-8")
        }
        return try parse(text: text, path: path, environment: environment)
    }

    /// Parses and validates a pipeline from its YAML text. `path` names it in errors and anchors
    /// relative source directories. `${VAR}` and `${VAR:-default}` in any value expand from
    /// `environment` (`$${` is a literal `${`); a variable that is not set and has no default is
    /// an error at its line and column. The text kept (and archived) is the unexpanded one.
    ///
    /// `${VAR}` is read inside `source:` only (anywhere else it is refused at its line): what a
    /// run maps with is then in its archived text alone, and a replay, which never reads the
    /// source, maps exactly as the run did whatever its own environment (`readsSource: false`:
    /// the source is not read, so none of its variables need be set).
    public static func parse(
        text: String, path: String, environment: [String: String] = ProcessInfo.processInfo.environment,
        readsSource: Bool = true
    ) throws(ConfigError) -> PipelineConfig {
        // The file's text is archived with every run: it must fit an archive header.
        guard text.utf8.count <= PipelineConfig.maxFileBytes else {
            throw ConfigError(
                file: path, line: 1, column: 1,
                message: "the pipeline file is \(text.utf8.count) bytes; at most \(PipelineConfig.maxFileBytes) are accepted")
        }
        var reader = PipelineYAMLReader(file: path, environment: environment)
        reader.readsSource = readsSource
        return try reader.read(text)
    }
}

/// Turns a pipeline file's YAML into a ``PipelineConfig``, remembering where each part of the
/// model was declared so that model problems point at their line.
struct PipelineYAMLReader {
    let file: String
    let environment: [String: String]
    /// Whether `source:` is read (a replay skips it: it fetches nothing).
    var readsSource = true
    /// Set while `source:` is read: the only place `${VAR}` expands.
    private var inSource = false
    private var marks: [EntityModel.Location: Mark] = [:]
    /// Problems in attributes and relationships, collected while the rest of the model is read.
    private var modelProblems: [ConfigError] = []

    init(file: String, environment: [String: String] = [:]) {
        self.file = file
        self.environment = environment
    }

    mutating func read(_ text: String) throws(ConfigError) -> PipelineConfig {
        let root: Node
        do {
            guard let node = try Yams.compose(yaml: text) else {
                throw ConfigError(file: file, line: 1, column: 1, message: "the pipeline file is empty")
            }
            root = try resolvingMerges(node)
        } catch let e as ConfigError {
            throw e
        } catch let e as YamlError {
            throw yamlError(e)
        } catch {
            throw ConfigError(file: file, line: 1, column: 1, message: "cannot parse YAML: \(error)")
        }

        // Top-level keys starting with `x-` are the file's own (anchors for `<<` merges live there).
        var topNode = root
        if case .mapping(let mapping) = root {
            topNode = .mapping(
                Node.Mapping(
                    mapping.filter { !($0.key.scalar?.string.hasPrefix("x-") ?? false) }.map { ($0.key, $0.value) }, mapping.tag,
                    mapping.style, mapping.mark))
        }
        let top = try mapping(
            topNode,
            allowed: [
                "version", "name", "source", "records", "root", "write", "batch_records", "max_page_bytes", "limits", "incremental",
                "entities", "defaults", "resources",
            ])
        // Every section is read even when one before it failed: `validate` reports every
        // problem it finds (each section's first), then the model's, in file order.
        var problems: [ConfigError] = []
        func section<T>(_ read: () throws(ConfigError) -> T) -> T? {
            do {
                return try read()
            } catch {
                problems.append(error)
                return nil
            }
        }
        _ = section { () throws(ConfigError) in
            let versionNode = try required(top, "version", in: root)
            let version = try int(versionNode)
            guard version == 1 else { throw error(versionNode, "unsupported pipeline version \(version); this Ingot reads version 1") }
        }
        let name =
            section { () throws(ConfigError) -> String in
                let nameNode = try required(top, "name", in: root)
                let name = try string(nameNode)
                guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." }) else {
                    throw error(nameNode, "name must be non-empty and use only letters, digits, '-', '_' and '.'")
                }
                return name
            } ?? ""

        var source = SourceConfig.none
        var jsonLines = false
        if let node = top["source"], readsSource {
            inSource = true
            (source, jsonLines) = section { () throws(ConfigError) in try readSource(node) } ?? (.none, false)
            inSource = false
        }

        let recordsPath =
            section { () throws(ConfigError) -> [String] in
                guard let node = top["records"] else { return [] }
                let path = try string(node)
                if jsonLines && path != "." {
                    throw error(node, "with format: jsonl each line is a record: leave records out, or write records: \".\"")
                }
                guard path != "." else { return [] }
                let recordsPath = path.components(separatedBy: ".")
                if recordsPath.contains("") { throw error(node, "records: '\(path)' has an empty path component") }
                return recordsPath
            } ?? []

        let write =
            section { () throws(ConfigError) -> WriteMode in
                guard let node = top["write"] else { return .merge }
                let value = try string(node)
                guard let mode = WriteMode(rawValue: value) else {
                    throw error(node, "write must be one of \(WriteMode.allCases.map(\.rawValue).joined(separator: ", ")), not '\(value)'")
                }
                return mode
            } ?? .merge

        let batchRecords =
            section { () throws(ConfigError) -> Int? in
                guard let node = top["batch_records"] else { return nil }
                let value = try int(node)
                guard value >= 1 && value <= 1_000_000 else { throw error(node, "batch_records must be between 1 and 1000000") }
                return value
            } ?? nil

        let maxPageBytes =
            section { () throws(ConfigError) -> Int? in
                guard let node = top["max_page_bytes"] else { return nil }
                let value = try int(node)
                guard Page.maxBytesRange.contains(value) else {
                    throw error(
                        node, "max_page_bytes must be between \(Page.maxBytesRange.lowerBound) and \(Page.maxBytesRange.upperBound)")
                }
                return value
            } ?? nil

        let limits = section { () throws(ConfigError) -> (Int?, Double?) in
            guard let node = top["limits"] else { return (nil, nil) }
            var maxRejects: Int?
            var maxRejectRatio: Double?
            let fields = try mapping(node, allowed: ["max_rejects", "max_reject_ratio"])
            if let n = fields["max_rejects"] {
                maxRejects = try int(n)
                guard (maxRejects ?? 0) >= 0 else { throw error(n, "max_rejects must be 0 or more") }
            }
            if let n = fields["max_reject_ratio"] {
                guard let value = Double(try string(n)), (0...1).contains(value) else {
                    throw error(n, "max_reject_ratio must be a number between 0 and 1")
                }
                maxRejectRatio = value
            }
            return (maxRejects, maxRejectRatio)
        }
        let (maxRejects, maxRejectRatio) = limits ?? (nil, nil)

        let incremental =
            section { () throws(ConfigError) -> IncrementalConfig? in
                guard let node = top["incremental"] else { return nil }
                let fields = try mapping(node, allowed: ["cursor_path", "param"])
                let path = try string(try required(fields, "cursor_path", in: node))
                return IncrementalConfig(
                    cursorPath: path.components(separatedBy: "."), param: try string(try required(fields, "param", in: node)))
            } ?? nil

        let entitiesNode = top["entities"]
        let model = section { () throws(ConfigError) -> EntityModel in
            guard let entitiesNode else { throw error(root, "missing required key 'entities'") }
            return try readModel(entitiesNode)
        }

        var resources: [ResourceConfig] = []
        if let resourcesNode = top["resources"] {
            for key in ["source", "records", "root", "incremental"] {
                if let node = top[key] {
                    problems.append(
                        error(node, "with resources:, \(key) belongs to each resource (or, for HTTP settings, to defaults.http)"))
                }
            }
            resources =
                section { () throws(ConfigError) in try readResources(resourcesNode, defaults: top["defaults"], model: model) } ?? []
        } else if let defaults = top["defaults"] {
            problems.append(error(defaults, "defaults apply to resources: give resources:, or put these settings in source:"))
        }

        var rootChoice: RootChoice?
        let rootName = section { () throws(ConfigError) -> String in
            if top["resources"] != nil {
                guard let first = resources.compactMap(\.root).first else { throw error(root, "no resource has a root entity") }
                return first
            }
            let rootNode = try required(top, "root", in: root)
            let (rootName, choice) = try readRoot(rootNode, model: model)
            rootChoice = choice
            return rootName
        }

        problems += modelProblems
        if let model {
            for entity in model.entities {
                for relationship in entity.relationships where relationship.pattern != nil || !relationship.values.isEmpty {
                    if let target = model[relationship.target], target.identity.count != 1 {
                        problems.append(
                            error(
                                marks[.relationship(entity: entity.name, name: relationship.name)] ?? root.mark,
                                "pattern and values read a bare identity: '\(target.name)' needs exactly one identity attribute"))
                    }
                }
            }
            for problem in model.problems() {
                problems.append(error(marks[problem.location] ?? entitiesNode?.mark ?? root.mark, problem.message))
            }
        }
        guard problems.isEmpty, let model, let rootName else {
            if problems.isEmpty { throw error(root, "the pipeline cannot be read") }
            var first = problems.sorted { ($0.line, $0.column) < ($1.line, $1.column) }
            let head = first.removeFirst()
            throw ConfigError(file: head.file, line: head.line, column: head.column, message: head.message, others: first)
        }
        var config = PipelineConfig(
            path: file, text: text, name: name, recordsPath: recordsPath, root: rootName, batchRecords: batchRecords, model: model)
        config.source = source
        config.jsonLines = jsonLines
        if resources.isEmpty {
            resources = [
                ResourceConfig(
                    name: name, source: source, recordsPath: recordsPath, jsonLines: jsonLines, root: rootName, rootChoice: rootChoice)
            ]
        } else if let first = resources.first(where: { $0.root != nil }) {
            (config.source, config.recordsPath, config.jsonLines) = (first.source, first.recordsPath, first.jsonLines)
        }
        config.resources = resources
        config.write = write
        config.incremental = incremental
        config.maxPageBytes = maxPageBytes
        config.maxRejects = maxRejects
        config.maxRejectRatio = maxRejectRatio
        return config
    }

    // MARK: - Sections

    /// `resources:`: a list of resources, each with a name, and either a source or a `for_each`
    /// over an earlier resource's records.
    private mutating func readResources(_ node: Node, defaults: Node?, model: EntityModel?) throws(ConfigError) -> [ResourceConfig] {
        guard case .sequence(let list) = node, list.count > 0 else {
            throw error(node, "resources is a list of resources, each {name, source or for_each, records, root}")
        }
        var resources: [ResourceConfig] = []
        var rootNodes: [String: Node] = [:]
        for item in list {
            let fields = try mapping(item, allowed: ["name", "source", "records", "root", "for_each", "write", "batch_records"])
            let nameNode = try required(fields, "name", in: item)
            let name = try string(nameNode)
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
                throw error(nameNode, "a resource's name uses only letters, digits, '-' and '_'")
            }
            guard !resources.contains(where: { $0.name == name }) else { throw error(nameNode, "resource '\(name)' is declared twice") }
            var resource = ResourceConfig(name: name, source: .none, recordsPath: [])
            if let forEachNode = fields["for_each"] {
                let f = try mapping(forEachNode, allowed: ["resource", "path", "url", "with"])
                let parentNode = try required(f, "resource", in: forEachNode)
                let parent = try string(parentNode)
                guard resources.contains(where: { $0.name == parent }) else {
                    throw error(parentNode, "for_each reads resource '\(parent)', which is not declared before '\(name)'")
                }
                if resources.contains(where: { $0.name == parent && $0.forEach != nil }) {
                    throw error(
                        parentNode,
                        "for_each reads resource '\(parent)', itself a for_each: not supported yet (read a resource with a source)")
                }
                guard (f["path"] == nil) != (f["url"] == nil), let templateNode = f["path"] ?? f["url"] else {
                    throw error(forEachNode, "for_each takes path (relative to defaults.http.url) or url (a whole URL), one of them")
                }
                let template = try urlTemplate(templateNode)
                var with: [ResourceConfig.WithKey] = []
                if let withNode = f["with"] {
                    guard case .mapping(let pairs) = withNode else { throw error(withNode, "with is a mapping of new keys to key paths") }
                    for (key, value) in pairs { with.append(ResourceConfig.WithKey(key: try string(key), path: try keyPath(value))) }
                }
                // Its requests: defaults.http, and its own source.http (pagination) over it.
                guard let defaults, try baseURL(defaults) != nil else {
                    throw error(forEachNode, "for_each needs defaults.http.url: its requests' origin and base")
                }
                var httpNode = try required(try mapping(defaults, allowed: ["http"]), "http", in: defaults)
                if let sourceNode = fields["source"] {
                    let source = try mapping(sourceNode, allowed: ["http"])
                    guard let own = source["http"] else { throw error(sourceNode, "a for_each resource's source is http: {paginate: …}") }
                    if let url = try mapping(own, allowed: HTTPSourceConfig.keys)["url"] {
                        throw error(url, "a for_each resource's URL comes from its for_each template")
                    }
                    httpNode = try mergingDefaults(defaults, into: own)
                }
                let config: HTTPSourceConfig
                do {
                    inSource = true
                    defer { inSource = false }
                    config = try readHTTP(httpNode)
                    resource.jsonLines = try readSource(.mapping(Node.Mapping([(Node("http"), httpNode)]))).jsonLines
                }
                resource.forEach = ResourceConfig.ForEach(
                    resource: parent, template: template, isURL: f["url"] != nil, with: with, http: config)
            } else {
                let sourceNode = try required(fields, "source", in: item)
                inSource = true
                defer { inSource = false }
                (resource.source, resource.jsonLines) = try readSource(sourceNode, defaults: defaults)
            }
            if let recordsNode = fields["records"] {
                let path = try string(recordsNode)
                if resource.jsonLines && path != "." {
                    throw error(recordsNode, "with format: jsonl each line is a record: leave records out, or write records: \".\"")
                }
                if path != "." {
                    resource.recordsPath = path.components(separatedBy: ".")
                    if resource.recordsPath.contains("") { throw error(recordsNode, "records: '\(path)' has an empty path component") }
                }
            }
            if let rootNode = fields["root"] {
                (resource.root, resource.rootChoice) = try readRoot(rootNode, model: model)
                rootNodes[name] = rootNode
            }
            if let writeNode = fields["write"] {
                let value = try string(writeNode)
                guard let mode = WriteMode(rawValue: value) else {
                    throw error(
                        writeNode, "write must be one of \(WriteMode.allCases.map(\.rawValue).joined(separator: ", ")), not '\(value)'")
                }
                guard resource.root != nil else { throw error(writeNode, "write needs a root: a resource without one stores nothing") }
                resource.write = mode
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
            if !resources.contains(where: { $0.forEach?.resource == resource.name }) {
                throw error(item, "resource '\(resource.name)' has no root: and no for_each reads it: its records would go nowhere")
            }
        }
        return resources
    }

    /// `root:`: an entity's name, or `{by: KEY.PATH, entities: {VALUE: ENTITY}, other: reject|skip}`.
    private func readRoot(_ node: Node, model: EntityModel?) throws(ConfigError) -> (String, RootChoice?) {
        func declared(_ name: String, at node: Node) throws(ConfigError) {
            if let model, model[name] == nil { throw error(node, "root entity '\(name)' is not declared under entities") }
        }
        guard case .mapping = node else {
            let name = try string(node)
            try declared(name, at: node)
            return (name, nil)
        }
        let fields = try mapping(node, allowed: ["by", "entities", "other"])
        var choice = RootChoice(path: try keyPath(try required(fields, "by", in: node)), entities: [])
        let entitiesNode = try required(fields, "entities", in: node)
        guard case .mapping(let pairs) = entitiesNode, pairs.count > 0 else {
            throw error(entitiesNode, "entities maps each kind to an entity: {t1: comment, t3: link}")
        }
        for (value, entity) in pairs {
            let name = try string(entity)
            try declared(name, at: entity)
            choice.entities.append((try string(value), name))
        }
        if let other = fields["other"] {
            switch try string(other) {
            case "reject": choice.skipsOthers = false
            case "skip": choice.skipsOthers = true
            default: throw error(other, "other is reject (the default) or skip")
            }
        }
        return (choice.entities[0].entity, choice)
    }

    /// A `for_each` template: text with `{key.path}` placeholders.
    private func urlTemplate(_ node: Node) throws(ConfigError) -> URLTemplate {
        let text = try string(node)
        var parts: [URLTemplate.Part] = []
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "{") {
            if open > rest.startIndex { parts.append(.literal(String(rest[..<open]))) }
            guard let close = rest[open...].firstIndex(of: "}") else { throw error(node, "'\(text)': a '{' without its '}'") }
            let inner = String(rest[rest.index(after: open)..<close])
            do throws(JSONKeyPath.ParseError) {
                parts.append(.value(try JSONKeyPath(parsing: inner)))
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

    /// `source:`, and whether its pages are JSON Lines (`format: jsonl`).
    private func readSource(_ node: Node, defaults: Node? = nil) throws(ConfigError) -> (SourceConfig, jsonLines: Bool) {
        let source = try mapping(node, allowed: ["files", "http"])
        func format(_ fields: [String: Node]) throws(ConfigError) -> Bool {
            guard let node = fields["format"] else { return false }
            switch try string(node) {
            case "json": return false
            case "jsonl": return true
            default: throw error(node, "format is json (one JSON text a page, the default) or jsonl (JSON Lines: one record a line)")
            }
        }
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
    private func keyPath(_ node: Node) throws(ConfigError) -> JSONKeyPath {
        let text = try string(node)
        do throws(JSONKeyPath.ParseError) {
            return try JSONKeyPath(parsing: text)
        } catch {
            throw self.error(node, error.description)
        }
    }

    /// `paginate:`: one paginator, and `has_more` (with `has_more_absent`) for any of them.
    private func readPagination(_ paginate: Node, into config: inout HTTPSourceConfig) throws(ConfigError) {
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
                totalPages: try f["total_pages"].map { (n: Node) throws(ConfigError) in try keyPath(n) })
        case "offset":
            let f = try mapping(value, allowed: ["param", "limit_param", "limit", "total"])
            let limitNode = try required(f, "limit", in: value)
            let limit = try int(limitNode)
            guard (1...1_000_000).contains(limit) else { throw error(limitNode, "limit must be between 1 and 1000000") }
            config.paginate = .offset(
                param: try string(try required(f, "param", in: value)),
                limitParam: try string(try required(f, "limit_param", in: value)), limit: limit,
                total: try f["total"].map { (n: Node) throws(ConfigError) in try keyPath(n) })
        default:
            let f = try mapping(value, allowed: ["path", "from_last_record", "param", "stop_values"])
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
            config.paginate = .cursor(source, param: try string(try required(f, "param", in: value)), stopValues: stopValues)
        }
    }

    /// `defaults.http`'s URL, expanded: what resource URLs are relative to.
    private func baseURL(_ defaults: Node) throws(ConfigError) -> String? {
        guard let http = try mapping(defaults, allowed: ["http"])["http"],
            let url = try mapping(http, allowed: HTTPSourceConfig.keys)["url"]
        else { return nil }
        return try expand(try string(url), at: url)
    }

    /// A resource's `http:` with `defaults.http`'s keys added where it does not set them.
    private func mergingDefaults(_ defaults: Node, into http: Node) throws(ConfigError) -> Node {
        guard let base = try mapping(defaults, allowed: ["http"])["http"], case .mapping(let shared) = base,
            case .mapping(let own) = http
        else { return http }
        let keys = own.map(\.key)
        let pairs = own.map { ($0.key, $0.value) } + shared.filter { !keys.contains($0.key) }.map { ($0.key, $0.value) }
        return .mapping(Node.Mapping(pairs, own.tag, own.style, own.mark))
    }

    private func readHTTP(_ node: Node, base: String? = nil) throws(ConfigError) -> HTTPSourceConfig {
        let fields = try mapping(
            node, allowed: HTTPSourceConfig.keys)
        let urlNode = try required(fields, "url", in: node)
        guard case .scalar(let urlScalar) = urlNode else { throw error(urlNode, "expected a string") }
        var (url, fromEnvironment) = try expanding(urlScalar.string, at: urlNode)
        // A resource's URL is relative to defaults.http.url (RFC 3986).
        if let base, !url.contains("://"), let resolved = URL(string: url, relativeTo: URL(string: base))?.absoluteString {
            let prefix = resolved.utf8.count - url.utf8.count
            fromEnvironment = url == urlScalar.string ? [] : fromEnvironment.map { ($0.lowerBound + prefix)..<($0.upperBound + prefix) }
            url = resolved
        }
        guard let parsed = URLComponents(string: url), parsed.scheme == "http" || parsed.scheme == "https", parsed.host != nil else {
            throw error(urlNode, "url must be an absolute http(s) URL")
        }
        var config = HTTPSourceConfig(url: url)
        config.urlSecrets = PipelineYAMLReader.secretParts(of: url, fromEnvironment: fromEnvironment)
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
        if let auth = fields["auth"] {
            let a = try mapping(auth, allowed: ["bearer_env", "basic", "api_key"])
            guard a.count == 1 else { throw error(auth, "auth takes one of bearer_env, basic, api_key") }
            if let env = a["bearer_env"] {
                config.auth = .bearer(env: try string(env))
            } else if let basic = a["basic"] {
                let b = try mapping(basic, allowed: ["user", "password_env"])
                config.auth = .basic(
                    user: try string(try required(b, "user", in: basic)),
                    passwordEnv: try string(try required(b, "password_env", in: basic)))
            } else if let key = a["api_key"] {
                let k = try mapping(key, allowed: ["header", "query", "env"])
                let env = try string(try required(k, "env", in: key))
                if let header = k["header"], k["query"] == nil {
                    config.auth = .apiKeyHeader(header: try string(header), env: env)
                } else if let query = k["query"], k["header"] == nil {
                    config.auth = .apiKeyQuery(param: try string(query), env: env)
                } else {
                    throw error(key, "api_key takes header or query, and env")
                }
            }
        }
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
        return config
    }

    private mutating func readModel(_ node: Node) throws(ConfigError) -> EntityModel {
        guard case .mapping(let mapping) = node else { throw error(node, "entities must be a mapping of entity names") }
        if mapping.count == 0 { throw error(node, "entities must declare at least one entity") }
        var entities: [Entity] = []
        var seen: Set<String> = []
        for (keyNode, value) in mapping {
            let name = try string(keyNode)
            guard seen.insert(name).inserted else { throw error(keyNode, "entity '\(name)' is declared twice") }
            marks[.entity(name)] = keyNode.mark
            entities.append(try readEntity(name, value))
        }
        return EntityModel(entities: entities)
    }

    private mutating func readEntity(_ name: String, _ node: Node) throws(ConfigError) -> Entity {
        let fields = try mapping(node, allowed: ["table", "identity", "key_delimiter", "attributes", "relationships"])
        var table = name
        if let t = fields["table"] {
            table = try string(t)
            marks[.table(entity: name)] = t.mark
        }
        var delimiter = "."
        if let d = fields["key_delimiter"] {
            delimiter = try string(d)
            marks[.keyDelimiter(entity: name)] = d.mark
        }
        var identity: [String] = []
        if let i = fields["identity"] {
            marks[.identity(entity: name)] = i.mark
            switch i {
            case .sequence(let seq):
                for item in seq { identity.append(try string(item)) }
                if identity.isEmpty { throw error(i, "identity must name at least one attribute") }
            default:
                identity = [try string(i)]
            }
        }

        let attributesNode = try required(fields, "attributes", in: node)
        guard case .mapping(let attributeMapping) = attributesNode else {
            throw error(attributesNode, "attributes must be a mapping of attribute names to types")
        }
        var attributes: [Attribute] = []
        for (keyNode, value) in attributeMapping {
            let attributeName = try string(keyNode)
            marks[.attribute(entity: name, name: attributeName)] = keyNode.mark
            do {
                attributes.append(try readAttribute(attributeName, value))
            } catch {
                // Reported, and the rest of the model still checked: the attribute stays, as text.
                modelProblems.append(error)
                attributes.append(Attribute(name: attributeName, type: .string))
            }
        }

        var relationships: [Relationship] = []
        if let relationshipsNode = fields["relationships"] {
            guard case .mapping(let relationshipMapping) = relationshipsNode else {
                throw error(relationshipsNode, "relationships must be a mapping of relationship names")
            }
            for (keyNode, value) in relationshipMapping {
                let relationshipName = try string(keyNode)
                marks[.relationship(entity: name, name: relationshipName)] = keyNode.mark
                do {
                    relationships.append(try readRelationship(relationshipName, value))
                } catch {
                    modelProblems.append(error)
                }
            }
        }
        return Entity(
            name: name, table: table, identity: identity, attributes: attributes, relationships: relationships,
            keyDelimiter: delimiter)
    }

    private func readAttribute(_ name: String, _ node: Node) throws(ConfigError) -> Attribute {
        if case .scalar = node {
            return Attribute(name: name, type: try attributeType(node, format: nil, timeZone: nil))
        }
        let fields = try mapping(
            node,
            allowed: [
                "type", "key", "coerce", "format", "timezone", "values", "pattern", "grouping", "on_invalid", "default", "const",
            ])
        let typeNode = try required(fields, "type", in: node)
        let type = try attributeType(typeNode, format: fields["format"], timeZone: fields["timezone"])
        let key = try fields["key"].map { (n: Node) throws(ConfigError) in try string(n) }
        let coerce = try fields["coerce"].map { (n: Node) throws(ConfigError) in try bool(n) } ?? false
        var attribute = Attribute(name: name, type: type, key: key, coerce: coerce)
        (attribute.values, attribute.pattern) = try textRules(values: fields["values"], pattern: fields["pattern"])
        if let node = fields["grouping"] {
            let grouping = try string(node)
            guard type == .integer || type == .double else { throw error(node, "grouping applies to integer and double attributes") }
            guard !grouping.isEmpty, !grouping.contains(where: { $0.isNumber }) else {
                throw error(node, "grouping is a separator between digit groups, like \",\" or \"'\"")
            }
            attribute.grouping = grouping
        }
        for (key, node) in [("default", fields["default"]), ("const", fields["const"])] {
            guard let node else { continue }
            guard case .scalar(let scalar) = node else { throw error(node, "\(key) is a scalar value of the attribute's type") }
            guard AttributeRules.storedValue(scalar.string, type: type) != nil else {
                throw error(node, "\(key) '\(scalar.string)' is not a value of type \(type.name)")
            }
            if key == "default" { attribute.defaultValue = scalar.string } else { attribute.constValue = scalar.string }
        }
        if attribute.defaultValue != nil && attribute.constValue != nil {
            throw error(node, "an attribute takes default or const, not both")
        }
        if let node = fields["on_invalid"] {
            switch try string(node) {
            case "reject": attribute.nullOnInvalid = false
            case "null": attribute.nullOnInvalid = true
            default: throw error(node, "on_invalid is reject (the default: the record is rejected) or null (the value is stored as NULL)")
            }
        }
        return attribute
    }

    private func attributeType(_ node: Node, format: Node?, timeZone: Node?) throws(ConfigError) -> AttributeType {
        let name = try string(node)
        let type: AttributeType
        switch name {
        case "integer": type = .integer
        case "double": type = .double
        case "string": type = .string
        case "bool": type = .bool
        case "json": type = .json
        case "date":
            var zone = "UTC"
            if let timeZone {
                zone = try string(timeZone)
                guard TimeZone(identifier: zone) != nil else { throw error(timeZone, "unknown time zone '\(zone)'") }
            }
            let formatName = try format.map { (n: Node) throws(ConfigError) in try string(n) } ?? "iso8601"
            switch formatName {
            case "iso8601": type = .date(.iso8601(timeZone: zone))
            case "unix": type = .date(.unixSeconds)
            case "unix_ms": type = .date(.unixMilliseconds)
            default:
                if let problem = DatePattern.problem(in: formatName) {
                    throw error(format, "date format '\(formatName)': \(problem)")
                }
                type = .date(.pattern(formatName, timeZone: zone))
            }
            return type
        default:
            throw error(node, "unknown attribute type '\(name)'; expected integer, double, string, bool, date or json")
        }
        if let format { throw error(format, "format applies only to date attributes") }
        if let timeZone { throw error(timeZone, "timezone applies only to date attributes") }
        return type
    }

    private func readRelationship(_ name: String, _ node: Node) throws(ConfigError) -> Relationship {
        let fields = try mapping(node, allowed: ["to", "many", "key", "missing", "ordered", "pattern", "values"])
        let target = try string(try required(fields, "to", in: node))
        let many = try fields["many"].map { (n: Node) throws(ConfigError) in try bool(n) } ?? false
        let ordered = try fields["ordered"].map { (n: Node) throws(ConfigError) in try bool(n) } ?? false
        let key = try fields["key"].map { (n: Node) throws(ConfigError) in try string(n) }
        var missing = MissingTargetPolicy.stub
        if let m = fields["missing"] {
            let value = try string(m)
            guard let policy = MissingTargetPolicy(rawValue: value) else {
                throw error(m, "missing must be one of stub, ignore, reject, not '\(value)'")
            }
            missing = policy
        }
        var relationship = Relationship(name: name, target: target, isToMany: many, isOrdered: ordered, key: key, missing: missing)
        (relationship.values, relationship.pattern) = try textRules(values: fields["values"], pattern: fields["pattern"])
        return relationship
    }

    /// `values:` and `pattern:` (of an attribute or a relationship's bare identities), checked.
    private func textRules(values: Node?, pattern: Node?) throws(ConfigError) -> ([String: String?], String?) {
        var replacements: [String: String?] = [:]
        if let node = values {
            guard case .mapping(let pairs) = node else {
                throw error(node, "values maps a value's text to another (or to null): {\"unknown\": null, \"yes\": true}")
            }
            for (from, to) in pairs {
                guard case .scalar(let target) = to else { throw error(to, "a replacement is a scalar: null, true, 42, or text") }
                let text = try string(from)
                guard replacements[text] == nil else { throw error(from, "'\(text)' is replaced twice") }
                // A plain null (`null`, `~`, nothing) is NULL; `"null"` quoted is the text.
                let isNull = target.style == .plain && ["null", "Null", "NULL", "~", ""].contains(target.string)
                replacements[text] = isNull ? .some(nil) : .some(target.string)
            }
        }
        var compiled: String?
        if let node = pattern {
            let text = try string(node)
            let regex: NSRegularExpression
            do {
                regex = try NSRegularExpression(pattern: text)
            } catch {
                throw self.error(node, "pattern '\(text)' is not a regular expression")
            }
            guard regex.numberOfCaptureGroups == 1 else {
                throw error(
                    node, "pattern '\(text)' must have exactly one capture group (the part kept), it has \(regex.numberOfCaptureGroups)")
            }
            compiled = text
        }
        return (replacements, compiled)
    }

    // MARK: - Node helpers

    /// `node` with YAML merge keys (`<<: *anchor`, `<<: [*a, *b]`) applied, as YAML 1.1's merge
    /// type says: the merged mappings' keys are added where the mapping does not set them itself,
    /// an earlier mapping of a list winning over a later one. Nodes keep their marks: a problem in
    /// a merged value is reported where that value is written.
    private func resolvingMerges(_ node: Node, depth: Int = 0) throws(ConfigError) -> Node {
        guard depth < 64 else { throw error(node, "nesting deeper than 64 levels") }
        switch node {
        case .mapping(let mapping):
            var own: [(Node, Node)] = []
            var merged: [(Node, Node)] = []
            for (key, value) in mapping {
                guard case .scalar(let scalar) = key, scalar.string == "<<", scalar.style == .plain else {
                    own.append((key, try resolvingMerges(value, depth: depth + 1)))
                    continue
                }
                let sources: [Node]
                switch value {
                case .mapping: sources = [value]
                case .sequence(let list): sources = Array(list)
                default: throw error(value, "a merge key (<<) takes a mapping (*anchor) or a list of them")
                }
                for source in sources {
                    guard case .mapping(let resolved) = try resolvingMerges(source, depth: depth + 1) else {
                        throw error(source, "a merge key (<<) takes a mapping (*anchor) or a list of them")
                    }
                    for (k, v) in resolved where !merged.contains(where: { $0.0 == k }) { merged.append((k, v)) }
                }
            }
            let keys = own.map(\.0)
            let pairs = own + merged.filter { pair in !keys.contains(pair.0) }
            return .mapping(Node.Mapping(pairs, mapping.tag, mapping.style, mapping.mark))
        case .sequence(let sequence):
            var nodes: [Node] = []
            for item in sequence { nodes.append(try resolvingMerges(item, depth: depth + 1)) }
            return .sequence(Node.Sequence(nodes, sequence.tag, sequence.style, sequence.mark))
        default:
            return node
        }
    }

    private func mapping(_ node: Node, allowed: [String]) throws(ConfigError) -> [String: Node] {
        guard case .mapping(let mapping) = node else {
            throw error(node, "expected a mapping with keys \(allowed.joined(separator: ", "))")
        }
        var result: [String: Node] = [:]
        for (keyNode, value) in mapping {
            let key = try string(keyNode)
            guard allowed.contains(key) else {
                throw error(keyNode, "unknown key '\(key)'; expected one of \(allowed.joined(separator: ", "))")
            }
            guard result[key] == nil else { throw error(keyNode, "key '\(key)' appears twice") }
            result[key] = value
        }
        return result
    }

    private func required(_ fields: [String: Node], _ key: String, in parent: Node) throws(ConfigError) -> Node {
        guard let node = fields[key] else { throw error(parent, "missing required key '\(key)'") }
        return node
    }

    private func string(_ node: Node) throws(ConfigError) -> String {
        guard case .scalar(let scalar) = node else { throw error(node, "expected a string") }
        return try expand(scalar.string, at: node)
    }

    private func int(_ node: Node) throws(ConfigError) -> Int {
        guard case .scalar = node, let value = Int(try string(node)) else { throw error(node, "expected an integer") }
        return value
    }

    private func bool(_ node: Node) throws(ConfigError) -> Bool {
        guard case .scalar = node else { throw error(node, "expected true or false") }
        let text = try string(node)
        switch text {
        case "true", "True", "TRUE", "yes": return true
        case "false", "False", "FALSE", "no": return false
        default: throw error(node, "expected true or false, not '\(text)'")
        }
    }

    /// `${VAR}` and `${VAR:-default}` in `text` replaced from the environment; `$${` stays `${`.
    func expand(_ text: String, at node: Node) throws(ConfigError) -> String {
        try expanding(text, at: node).text
    }

    /// ``expand(_:at:)``, with where in the result each value taken from the environment lies
    /// (UTF-8 offsets; a `:-default` from the file is not one). Outside `source:` a reference is
    /// refused: a replay must map with what the run mapped with, and it has no environment.
    func expanding(_ text: String, at node: Node) throws(ConfigError) -> (text: String, fromEnvironment: [Range<Int>]) {
        guard text.contains("${") else { return (text, []) }
        var ranges: [Range<Int>] = []
        var out = ""
        var rest = Substring(text)
        while let dollar = rest.firstIndex(of: "$") {
            out += rest[..<dollar]
            let after = rest[rest.index(after: dollar)...]
            if after.hasPrefix("${") {
                out += "${"
                rest = after.dropFirst(2)
                continue
            }
            guard after.hasPrefix("{") else {
                out += "$"
                rest = after
                continue
            }
            guard let close = after.firstIndex(of: "}") else {
                throw error(node, "'${' without its closing '}'")
            }
            let inside = after[after.index(after: after.startIndex)..<close]
            let name: Substring
            var fallback: Substring?
            if let separator = inside.range(of: ":-") {
                name = inside[..<separator.lowerBound]
                fallback = inside[separator.upperBound...]
            } else {
                name = inside
            }
            guard !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else {
                throw error(node, "'${\(inside)}' is not a variable reference; use ${NAME} or ${NAME:-default}")
            }
            guard inSource else {
                throw error(
                    node,
                    "${\(name)} is read inside source: only: elsewhere it would make a replay, which has no environment, map differently from its run"
                )
            }
            if let value = environment[String(name)], !(value.isEmpty && fallback != nil) {
                let start = out.utf8.count
                out += value
                ranges.append(start..<out.utf8.count)
            } else if let fallback {
                out += fallback
            } else {
                throw error(node, "the environment variable \(name) is not set (and ${\(name)} has no :-default)")
            }
            rest = after[after.index(after: close)...]
        }
        out += rest
        return (out, ranges)
    }

    /// The pieces of `url`'s environment values (`fromEnvironment`, UTF-8 offsets) that lie in
    /// its user info or after its authority (path, query, fragment): those are secrets. A value
    /// that gives the scheme, host or port is not.
    static func secretParts(of url: String, fromEnvironment: [Range<Int>]) -> [String] {
        guard !fromEnvironment.isEmpty else { return [] }
        let bytes = Array(url.utf8)
        var regions: [Range<Int>] = []
        if let schemeEnd = url.range(of: "://").map({ url.utf8.distance(from: url.utf8.startIndex, to: $0.upperBound) }) {
            let authorityEnd =
                bytes[schemeEnd...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }
                ?? bytes.count
            if let at = bytes[schemeEnd..<authorityEnd].lastIndex(of: UInt8(ascii: "@")) { regions.append(schemeEnd..<at) }
            regions.append(authorityEnd..<bytes.count)
        } else {
            regions.append(0..<bytes.count)
        }
        var secrets: [String] = []
        for range in fromEnvironment {
            for region in regions {
                let part = range.clamped(to: region)
                if !part.isEmpty { secrets.append(String(decoding: bytes[part], as: UTF8.self)) }
            }
        }
        return secrets
    }

    private func error(_ node: Node?, _ message: String) -> ConfigError {
        error(node?.mark, message)
    }

    private func error(_ mark: Mark?, _ message: String) -> ConfigError {
        ConfigError(file: file, line: mark?.line ?? 1, column: mark?.column ?? 1, message: message)
    }

    private func yamlError(_ e: YamlError) -> ConfigError {
        switch e {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _), .composer(_, let problem, let mark, _):
            return ConfigError(file: file, line: mark.line, column: mark.column, message: "invalid YAML: \(problem)")
        default:
            return ConfigError(file: file, line: 1, column: 1, message: "invalid YAML: \(e)")
        }
    }
}
