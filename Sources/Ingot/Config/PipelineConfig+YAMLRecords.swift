import Foundation
import Yams

// The reader's sections about what a page holds: `records:` (a path, or an object's layout:
// values, columns, several paths), `root:`, and `delete_when:`.
extension PipelineYAMLReader {
    /// Why `write: replace` is refused over `records: {paths: …}`.
    static let sideloadsReplaced =
        "write: replace would delete every row of the arrays' entities a page did not name (sideloads are partial): use merge"

    /// A resource's `records:`, `root:` (or the root its records' paths name) and `delete_when:`.
    func readRecordsAndRoot(_ fields: [String: Node], into resource: inout ResourceConfig, model: EntityModel?) throws(ConfigError) {
        if let recordsNode = fields["records"] {
            (resource.recordsPath, resource.recordsLayout) = try readRecords(recordsNode, jsonLines: resource.jsonLines)
        }
        if let rootNode = fields["root"] { (resource.root, resource.rootChoice) = try readRoot(rootNode, model: model) }
        if case .paths(let paths) = resource.recordsLayout, let recordsNode = fields["records"] {
            if let rootNode = fields["root"] { throw error(rootNode, "records: {paths: …} names each array's entity: leave root out") }
            (resource.root, resource.rootChoice) = try rootOfPaths(paths, at: recordsNode, model: model)
        }
        if let node = fields["delete_when"] { resource.deleteWhen = try readDeleteWhen(node, root: resource.root, model: model) }
    }

    /// `records:` (the pipeline's or a resource's): a key path (`.`: the page itself, as JSON
    /// Lines pages always are), or an object's layout — `{values: PATH, key: NAME, value: NAME}`,
    /// `{columns: PATH}`, `{paths: {PATH: ENTITY, …}}` (``RecordsLayout``).
    func readRecords(_ node: Node, jsonLines: Bool) throws(ConfigError) -> (path: [String], layout: RecordsLayout) {
        func path(_ node: Node) throws(ConfigError) -> [String] {
            let path = try string(node)
            guard path != "." else { return [] }
            let components = path.components(separatedBy: ".")
            if components.contains("") { throw error(node, "records: '\(path)' has an empty path component") }
            return components
        }
        guard case .mapping = node else {
            if jsonLines, try string(node) != "." {
                throw error(node, "with format: jsonl each line is a record: leave records out, or write records: \".\"")
            }
            return (try path(node), .array)
        }
        if jsonLines { throw error(node, "with format: jsonl each line is a record: leave records out") }
        let fields = try mapping(node, allowed: ["values", "key", "value", "columns", "paths"])
        if let pathsNode = fields["paths"] {
            guard fields.count == 1, case .mapping(let pairs) = pathsNode, !pairs.isEmpty else {
                throw error(node, "records: {paths: {PATH: ENTITY, …}} maps each array of the page to its entity, and takes nothing else")
            }
            var paths: [RecordsLayout.RecordsPath] = []
            for (pathNode, entityNode) in pairs {
                let text = try string(pathNode)
                let components = text.components(separatedBy: ".")
                if text == "." || components.contains("") { throw error(pathNode, "records: '\(text)' is not a key path of the page") }
                if paths.contains(where: { $0.path == components }) { throw error(pathNode, "records: '\(text)' is listed twice") }
                paths.append(RecordsLayout.RecordsPath(path: components, entity: try string(entityNode)))
            }
            return ([RecordsLayout.combinedKey], .paths(paths))
        }
        switch (fields["values"], fields["columns"]) {
        case (let values?, nil):
            guard let key = fields["key"] else {
                throw error(node, "records: {values: …} needs key: NAME, the attribute each record's member key is given as")
            }
            let keyName = try string(key)
            let valueName = try fields["value"].map { (node) throws(ConfigError) in try string(node) }
            guard !keyName.isEmpty, valueName?.isEmpty != true, valueName != keyName else {
                throw error(key, "records: key and value are two different, non-empty names")
            }
            return (try path(values), .values(key: keyName, value: valueName))
        case (nil, let columns?):
            if let extra = fields["key"] ?? fields["value"] {
                throw error(extra, "records: {columns: …} takes no key or value: each column's name is its attribute")
            }
            return (try path(columns), .columns)
        default:
            throw error(
                node,
                "records is a key path, {values: PATH, key: NAME} (a dictionary's values) or {columns: PATH} (parallel arrays)")
        }
    }

    /// The root of `records: {paths: …}`: each record's entity chosen by the array it came from.
    func rootOfPaths(_ paths: [RecordsLayout.RecordsPath], at node: Node, model: EntityModel?) throws(ConfigError) -> (String, RootChoice) {
        for entry in paths where model != nil && model?[entry.entity] == nil {
            throw error(node, "records: entity '\(entry.entity)' (for '\(entry.text)') is not declared under entities")
        }
        let choice = RootChoice(path: JSONKeyPath(keys: [RecordsLayout.fromKey]), entities: paths.map { ($0.text, $0.entity) })
        return (paths[0].entity, choice)
    }

    /// `root:`: an entity's name, or `{by: KEY.PATH, entities: {VALUE: ENTITY}, other: reject|skip}`.
    func readRoot(_ node: Node, model: EntityModel?) throws(ConfigError) -> (String, RootChoice?) {
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

    /// `delete_when: {path: KEY.PATH, equals: VALUE}` or `{path: KEY.PATH, present: true}`, for
    /// a root whose entity has an identity (a tombstone names its row by it).
    func readDeleteWhen(_ node: Node, root: String?, model: EntityModel?) throws(ConfigError) -> DeleteWhen {
        let f = try mapping(node, allowed: ["path", "equals", "present"])
        var rule = DeleteWhen(path: try keyPath(try required(f, "path", in: node)))
        switch (f["equals"], f["present"]) {
        case (let equals?, nil):
            guard case .scalar = equals else { throw error(equals, "equals takes one value (true, a number or a text)") }
            rule.equals = try string(equals)
        case (nil, let present?):
            guard try bool(present) else { throw error(present, "present: false would make every record a tombstone; say present: true") }
        default:
            throw error(node, "delete_when takes equals: VALUE (the value at path that makes a record a tombstone) or present: true")
        }
        guard let root, let entity = model?[root] else {
            throw error(node, "delete_when needs a root: the entity whose rows the records delete")
        }
        if entity.identity.isEmpty {
            throw error(node, "delete_when: entity \(root) has no identity, so a record cannot name the row it deletes")
        }
        return rule
    }
}
