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
    /// `${VAR}` is read where sources are configured only — `source:`, a resource's `source:`,
    /// `defaults.http` — and refused anywhere else at its line: what a
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
    var inSource = false
    /// Where each part of the model is declared (model problems point there).
    var marks: [EntityModel.Location: Mark] = [:]
    /// Problems in attributes and relationships, collected while the rest of the model is read.
    var modelProblems: [ConfigError] = []
    /// Unknown keys, wherever a mapping is read: each is reported and the mapping read without it,
    /// so that one pass finds every mistake of a file (a reference: the readers are values).
    let unknownKeys = UnknownKeys()

    /// The unknown keys found so far, each once (a mapping may be read more than once).
    final class UnknownKeys {
        private(set) var problems: [ConfigError] = []

        func add(_ problem: ConfigError) {
            guard !problems.contains(where: { ($0.line, $0.column, $0.message) == (problem.line, problem.column, problem.message) })
            else { return }
            problems.append(problem)
        }
    }

    init(file: String, environment: [String: String] = [:]) {
        self.file = file
        self.environment = environment
    }

    mutating func read(_ text: String) throws(ConfigError) -> PipelineConfig {
        let (root, top) = try readDocument(text)
        // Every section is read even when one before it failed: `validate` reports every
        // problem it finds (each section's first), then the model's, in file order.
        var sections = Sections()
        let head = readHead(top, root: root, &sections)
        let entitiesNode = top["entities"]
        let model = sections.read { () throws(ConfigError) -> EntityModel in
            guard let entitiesNode else { throw error(root, "missing required key 'entities'") }
            return try readModel(entitiesNode)
        }
        let (resources, rootName, rootChoice) = readResourcesAndRoot(top, root: root, records: head.recordsLayout, model: model, &sections)
        sections.problems += modelProblems + unknownKeys.problems
        let roots =
            top["resources"] != nil
            ? resources.flatMap { $0.writeScope == nil ? $0.rootEntities : [] } : (rootChoice?.entityNames ?? rootName.map { [$0] } ?? [])
        checkModel(model, top: top, root: root, entitiesNode: entitiesNode, roots: roots, head: head, &sections)
        let deleteWhen =
            top["resources"] == nil
            ? sections.read { () throws(ConfigError) -> DeleteWhen? in
                try top["delete_when"].map { (node: Node) throws(ConfigError) in try readDeleteWhen(node, root: rootName, model: model) }
            } ?? nil : nil
        guard sections.problems.isEmpty, let model, let rootName else {
            if sections.problems.isEmpty { throw error(root, "the pipeline cannot be read") }
            var first = sections.problems.sorted { ($0.line, $0.column) < ($1.line, $1.column) }
            let problem = first.removeFirst()
            throw ConfigError(file: problem.file, line: problem.line, column: problem.column, message: problem.message, others: first)
        }
        var config = PipelineConfig(
            path: file, text: text, name: head.name, recordsPath: head.recordsPath, root: rootName, batchRecords: head.batchRecords,
            model: model)
        config.source = head.source
        config.jsonLines = head.jsonLines
        config.resources =
            resources.isEmpty
            ? [
                ResourceConfig(
                    name: head.name, source: head.source, recordsPath: head.recordsPath, recordsLayout: head.recordsLayout,
                    jsonLines: head.jsonLines, root: rootName, rootChoice: rootChoice, deleteWhen: deleteWhen)
            ] : resources
        config.write = head.write
        config.writeRejectsUnknown = head.writeRejectsUnknown
        config.writeScope = head.writeScope
        config.mirrorFirstStoredResource()
        config.incremental = head.incremental
        config.maxPageBytes = head.maxPageBytes
        config.maxRejects = head.maxRejects
        config.maxRejectRatio = head.maxRejectRatio
        return config
    }

    /// `write: replace` where a run does not see every row of its entities: sideloads (the rows
    /// a page's records name), a sync (what changed since the last).
    private func checkReplace(_ top: [String: Node], _ head: Head, _ sections: inout Sections) {
        guard head.write == .replace, let node = top["write"] else { return }
        if case .paths = head.recordsLayout { sections.problems.append(error(node, Self.sideloadsReplaced)) }
        if case .http(let http) = head.source, http.syncURL != nil {
            sections.problems.append(
                error(
                    node,
                    "write: replace deletes what a run did not see, and a sync run sees only what changed: use merge (and delete_when for deletions)"
                ))
        }
    }

    /// The problems of the sections read so far: a section that fails adds its first problem,
    /// and the next section is read all the same.
    struct Sections {
        var problems: [ConfigError] = []

        mutating func read<T>(_ read: () throws(ConfigError) -> T) -> T? {
            do {
                return try read()
            } catch {
                problems.append(error)
                return nil
            }
        }
    }

    /// The file's top-level settings, besides the entities and the resources.
    struct Head {
        var name = ""
        var source = SourceConfig.none
        var jsonLines = false
        var recordsPath: [String] = []
        var recordsLayout = RecordsLayout.array
        var write = WriteMode.merge
        var writeRejectsUnknown = false
        var writeScope: String?
        var batchRecords: Int?
        var maxPageBytes: Int?
        var maxRejects: Int?
        var maxRejectRatio: Double?
        var incremental: IncrementalConfig?
    }

    /// The YAML document (merge keys resolved) and its top-level mapping, without the file's own
    /// `x-` keys.
    private func readDocument(_ text: String) throws(ConfigError) -> (Node, [String: Node]) {
        let root: Node
        do {
            guard let node = try Yams.compose(yaml: text) else {
                throw ConfigError(file: file, line: 1, column: 1, message: "the pipeline file is empty")
            }
            root = try resolvingMerges(node)
        } catch let e as ConfigError {
            throw e
        } catch let e as YamlError {
            throw yamlError(e, text: text)
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
                "entities", "defaults", "resources", "delete_when",
            ])
        return (root, top)
    }

    /// The version, name, source, records, write mode, limits and incremental settings.
    private mutating func readHead(_ top: [String: Node], root: Node, _ sections: inout Sections) -> Head {
        var head = Head()
        _ = sections.read { () throws(ConfigError) in
            let versionNode = try required(top, "version", in: root)
            let version = try int(versionNode)
            guard version == 1 else { throw error(versionNode, "unsupported pipeline version \(version); this Ingot reads version 1") }
        }
        head.name =
            sections.read { () throws(ConfigError) -> String in
                let nameNode = try required(top, "name", in: root)
                let name = try string(nameNode)
                guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == "." }) else {
                    throw error(nameNode, "name must be non-empty and use only letters, digits, '-', '_' and '.'")
                }
                return name
            } ?? ""

        if let node = top["source"], readsSource {
            inSource = true
            (head.source, head.jsonLines) = sections.read { () throws(ConfigError) in try readSource(node) } ?? (.none, false)
            inSource = false
        } else if let node = top["source"] {
            head.jsonLines = sections.read { () throws(ConfigError) in try readSourceFormat(node) } ?? false
        }
        let jsonLines = head.jsonLines

        (head.recordsPath, head.recordsLayout) =
            sections.read { () throws(ConfigError) in
                guard let node = top["records"] else { return ([], .array) }
                return try readRecords(node, jsonLines: jsonLines)
            } ?? ([], .array)

        (head.write, head.writeRejectsUnknown, head.writeScope) =
            sections.read { () throws(ConfigError) -> (WriteMode, Bool, String?) in
                guard let node = top["write"] else { return (.merge, false, nil) }
                return try readWrite(node)
            } ?? (.merge, false, nil)

        readSettings(top, into: &head, &sections)
        return head
    }

    /// `batch_records`, `max_page_bytes`, `limits` and `incremental`.
    private mutating func readSettings(_ top: [String: Node], into head: inout Head, _ sections: inout Sections) {
        checkReplace(top, head, &sections)

        head.batchRecords =
            sections.read { () throws(ConfigError) -> Int? in
                guard let node = top["batch_records"] else { return nil }
                let value = try int(node)
                guard value >= 1 && value <= 1_000_000 else { throw error(node, "batch_records must be between 1 and 1000000") }
                return value
            } ?? nil

        head.maxPageBytes =
            sections.read { () throws(ConfigError) -> Int? in
                guard let node = top["max_page_bytes"] else { return nil }
                let value = try int(node)
                guard Page.maxBytesRange.contains(value) else {
                    throw error(
                        node, "max_page_bytes must be between \(Page.maxBytesRange.lowerBound) and \(Page.maxBytesRange.upperBound)")
                }
                return value
            } ?? nil

        let limits = sections.read { () throws(ConfigError) -> (Int?, Double?) in
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
        (head.maxRejects, head.maxRejectRatio) = limits ?? (nil, nil)

        head.incremental =
            sections.read { () throws(ConfigError) -> IncrementalConfig? in
                guard let node = top["incremental"] else { return nil }
                let fields = try mapping(node, allowed: ["cursor_path", "param"])
                let path = try string(try required(fields, "cursor_path", in: node))
                return IncrementalConfig(
                    cursorPath: path.components(separatedBy: "."), param: try string(try required(fields, "param", in: node)))
            } ?? nil
    }

    /// The resources (or the one the top-level source makes) and the root entity.
    private mutating func readResourcesAndRoot(
        _ top: [String: Node], root: Node, records: RecordsLayout, model: EntityModel?, _ sections: inout Sections
    ) -> ([ResourceConfig], String?, RootChoice?) {
        var resources: [ResourceConfig] = []
        // Resources that could not be read have their own problem: no second one about their roots.
        var resourcesUnread = false
        if let resourcesNode = top["resources"] {
            for key in ["source", "records", "root", "delete_when"] {
                if let node = top[key] {
                    sections.problems.append(
                        error(node, "with resources:, \(key) belongs to each resource (or, for HTTP settings, to defaults.http)"))
                }
            }
            if let node = top["incremental"] {
                sections.problems.append(
                    error(
                        node,
                        "incremental is not supported with resources: yet; give the resource that reads changes since a cursor a pipeline file of its own"
                    ))
            }
            let read = sections.read { () throws(ConfigError) in try readResources(resourcesNode, defaults: top["defaults"], model: model) }
            resources = read ?? []
            resourcesUnread = read == nil
        } else if let defaults = top["defaults"] {
            sections.problems.append(error(defaults, "defaults apply to resources: give resources:, or put these settings in source:"))
        }

        var rootChoice: RootChoice?
        let rootName = sections.read { () throws(ConfigError) -> String in
            if top["resources"] != nil {
                if let first = resources.compactMap(\.root).first { return first }
                guard resourcesUnread else { throw error(root, "no resource has a root entity") }
                return ""
            }
            if case .paths(let paths) = records, let recordsNode = top["records"] {
                if let rootNode = top["root"] { throw error(rootNode, "records: {paths: …} names each array's entity: leave root out") }
                let (rootName, choice) = try rootOfPaths(paths, at: recordsNode, model: model)
                rootChoice = choice
                return rootName
            }
            let rootNode = try required(top, "root", in: root)
            let (rootName, choice) = try readRoot(rootNode, model: model)
            rootChoice = choice
            return rootName
        }
        return (resources, rootName, rootChoice)
    }

    /// What holds across the model and the rest of the file: a replace scope names a column of
    /// each root, bare-identity rules need a single identity, and the model's own rules.
    private func checkModel(
        _ model: EntityModel?, top: [String: Node], root: Node, entitiesNode: Node?, roots: [String], head: Head,
        _ sections: inout Sections
    ) {
        if let scope = head.writeScope, let model, let node = top["write"],
            let root = roots.first(where: { model.scopeColumn(scope, of: $0) == nil })
        {
            sections.problems.append(error(node, "scope '\(scope)' is the key of no attribute or to-one of root '\(root)'"))
        }
        if let model {
            for entity in model.entities {
                for relationship in entity.relationships where relationship.pattern != nil || !relationship.values.isEmpty {
                    if let target = model[relationship.target], target.identity.count != 1 {
                        sections.problems.append(
                            error(
                                marks[.relationship(entity: entity.name, name: relationship.name)] ?? root.mark,
                                "pattern and values read a bare identity: '\(target.name)' needs exactly one identity attribute"))
                    }
                }
            }
            for problem in model.problems() {
                sections.problems.append(error(marks[problem.location] ?? entitiesNode?.mark ?? root.mark, problem.message))
            }
        }
    }
}
