import Foundation
import Yams

// The reader's `entities:` section: entities, attributes with their value rules, relationships.
extension PipelineYAMLReader {
    mutating func readModel(_ node: Node) throws(ConfigError) -> EntityModel {
        guard case .mapping(let mapping) = node else { throw error(node, "entities must be a mapping of entity names") }
        if mapping.count == 0 { throw error(node, "entities must declare at least one entity") }
        // A key of an entity dedented to the entities' level reads as an entity of its own (and
        // the entity above it then misses that key): named as what it is.
        let names = mapping.map { $0.key.string ?? "" }
        for (k, (keyNode, value)) in mapping.enumerated() where k > 0 && PipelineYAMLReader.entityKeys.contains(names[k]) {
            guard !(value.mapping?.keys.contains { $0.string == "attributes" } ?? false) else { continue }
            throw error(keyNode, "'\(names[k])' is indented as an entity of its own: indent it under entity '\(names[k - 1])'")
        }
        var entities: [Entity] = []
        var seen: Set<String> = []
        // Every entity is read, whatever an earlier one got wrong: each one's first problem is
        // reported (the model is not made then: what refers to a broken entity would only say so).
        var broken: [ConfigError] = []
        for (keyNode, value) in mapping {
            do throws(ConfigError) {
                let name = try string(keyNode)
                guard seen.insert(name).inserted else { throw error(keyNode, "entity '\(name)' is declared twice") }
                marks[.entity(name)] = keyNode.mark
                entities.append(try readEntity(name, value))
            } catch {
                broken.append(error)
            }
        }
        if let first = broken.first {
            modelProblems += broken.dropFirst()
            throw first
        }
        return EntityModel(entities: entities).completed()
    }

    /// The keys an entity takes.
    static let entityKeys = ["table", "identity", "key_delimiter", "attributes", "relationships", "parent"]

    mutating func readEntity(_ name: String, _ node: Node) throws(ConfigError) -> Entity {
        let fields = try mapping(node, allowed: PipelineYAMLReader.entityKeys)
        let parent = try fields["parent"].map { (n: Node) throws(ConfigError) in try string(n) }
        if let p = fields["parent"] { marks[.parent(entity: name)] = p.mark }
        if parent != nil, let i = fields["identity"] {
            throw error(i, "entity '\(name)' takes its parent's identity (parent: \(parent ?? "")): leave identity out")
        }
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

        // Relationships first: their problems are collected, and reported even when the
        // attributes are missing (a misspelt `attributes:` key).
        let relationships = try fields["relationships"].map { (n: Node) throws(ConfigError) in try readRelationships(of: name, n) } ?? []
        let attributes = try readAttributes(of: name, try required(fields, "attributes", in: node))
        var entity = Entity(
            name: name, table: table, identity: identity, attributes: attributes, relationships: relationships,
            keyDelimiter: delimiter)
        entity.parent = parent
        return entity
    }

    /// An entity's `attributes:`. One that cannot be read is reported and the rest of the model
    /// still checked: the attribute stays, as text.
    private mutating func readAttributes(of name: String, _ attributesNode: Node) throws(ConfigError) -> [Attribute] {
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
                modelProblems.append(error)
                attributes.append(Attribute(name: attributeName, type: .string))
            }
        }
        return attributes
    }

    /// An entity's `relationships:`; one that cannot be read is reported and left out.
    private mutating func readRelationships(of name: String, _ relationshipsNode: Node) throws(ConfigError) -> [Relationship] {
        guard case .mapping(let relationshipMapping) = relationshipsNode else {
            throw error(relationshipsNode, "relationships must be a mapping of relationship names")
        }
        var relationships: [Relationship] = []
        for (keyNode, value) in relationshipMapping {
            let relationshipName = try string(keyNode)
            marks[.relationship(entity: name, name: relationshipName)] = keyNode.mark
            do {
                relationships.append(try readRelationship(relationshipName, value))
            } catch {
                modelProblems.append(error)
            }
        }
        return relationships
    }

    func readAttribute(_ name: String, _ node: Node) throws(ConfigError) -> Attribute {
        if case .scalar = node {
            return Attribute(name: name, type: try attributeType(node, format: nil, timeZone: nil))
        }
        let fields = try mapping(
            node,
            allowed: [
                "type", "key", "coerce", "format", "timezone", "values", "pattern", "grouping", "on_invalid", "default", "const",
                "template",
            ])
        let typeNode = try required(fields, "type", in: node)
        let type = try attributeType(typeNode, format: fields["format"], timeZone: fields["timezone"])
        let key = try fields["key"].map { (n: Node) throws(ConfigError) in try string(n) }
        let coerce = try fields["coerce"].map { (n: Node) throws(ConfigError) in try bool(n) } ?? false
        var attribute = Attribute(name: name, type: type, key: key, coerce: coerce)
        (attribute.values, attribute.pattern) = try textRules(values: fields["values"], pattern: fields["pattern"])
        attribute.template = try template(fields["template"], pattern: attribute.pattern)
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

    func attributeType(_ node: Node, format: Node?, timeZone: Node?) throws(ConfigError) -> AttributeType {
        let name = try string(node)
        let type: AttributeType
        switch name {
        case "integer": type = .integer
        case "double": type = .double
        case "decimal": type = .decimal
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
                    let hint = NearMiss.hint(for: formatName, among: ["iso8601", "unix", "unix_ms"])
                    throw error(format, "date format '\(formatName)'\(hint): \(problem)")
                }
                type = .date(.pattern(formatName, timeZone: zone))
            }
            return type
        default:
            let types = ["integer", "double", "string", "bool", "date", "json"]
            throw error(
                node,
                "unknown attribute type '\(name)'\(NearMiss.hint(for: name, among: types)); expected integer, double, string, bool, date or json"
            )
        }
        if let format { throw error(format, "format applies only to date attributes") }
        if let timeZone { throw error(timeZone, "timezone applies only to date attributes") }
        return type
    }

    func readRelationship(_ name: String, _ node: Node) throws(ConfigError) -> Relationship {
        let fields = try mapping(
            node,
            allowed: [
                "to", "many", "key", "missing", "ordered", "pattern", "values", "inverse", "fields", "owned", "delete", "operations",
                "partial", "on_invalid", "template",
            ])
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
        relationship.template = try template(fields["template"], pattern: relationship.pattern)
        relationship.inverse = try fields["inverse"].map { (n: Node) throws(ConfigError) in try string(n) }
        relationship.owned = try fields["owned"].map { (n: Node) throws(ConfigError) in try bool(n) } ?? false
        try readWrites(fields, into: &relationship)
        if let node = fields["fields"] {
            guard case .mapping(let pairs) = node, !pairs.isEmpty else {
                throw error(node, "fields maps the target's attributes to the record's keys: {id: subreddit_id, display_name: subreddit}")
            }
            if many { throw error(node, "fields applies to a to-one relationship only") }
            if key != nil { throw error(node, "a relationship reads either key or fields, not both") }
            for (attribute, path) in pairs {
                let name = try string(attribute)
                guard relationship.fields[name] == nil else { throw error(attribute, "fields gives '\(name)' twice") }
                relationship.fields[name] = try string(path)
            }
        }
        return relationship
    }

    /// A relationship's `on_invalid`, `partial`, `operations` and `delete`: what a record through
    /// it may write, and what it does with what it cannot read.
    private func readWrites(_ fields: [String: Node], into relationship: inout Relationship) throws(ConfigError) {
        if let node = fields["on_invalid"] {
            switch try string(node) {
            case "null": relationship.nullOnInvalid = true
            case "reject": relationship.nullOnInvalid = false
            default:
                throw error(
                    node,
                    "on_invalid is reject (the default: the record is rejected) or null (an identity its rules cannot read makes no link, counted)"
                )
            }
        }
        if let node = fields["partial"] {
            relationship.partial = try bool(node)
            if relationship.partial && relationship.owned {
                throw error(node, "partial does not apply to owned children: an owned set is replaced whole, each child with it")
            }
        }
        if let node = fields["operations"] {
            guard case .sequence(let items) = node else { throw error(node, "operations is a list: [insert, update, delete]") }
            var given: Set<String> = []
            for item in items {
                let operation = try string(item)
                guard ["insert", "update", "delete"].contains(operation) else {
                    throw error(item, "an operation is insert, update or delete, not '\(operation)'")
                }
                given.insert(operation)
            }
            relationship.insertsTargets = given.contains("insert")
            relationship.updatesTargets = given.contains("update")
            relationship.deletesLinks = given.contains("delete")
        }
        if let node = fields["delete"] {
            switch try string(node) {
            case "cascade": relationship.cascadesDeletes = true
            case "nullify": relationship.cascadesDeletes = false
            case let other: throw error(node, "delete must be nullify or cascade, not '\(other)'")
            }
        }
    }

    /// `template:`: beside a `pattern`, with one `{}` where the stored value goes.
    private func template(_ node: Node?, pattern: String?) throws(ConfigError) -> String? {
        guard let node else { return nil }
        let template = try string(node)
        guard pattern != nil else { throw error(node, "template rebuilds what a pattern read: it goes beside a pattern") }
        guard template.components(separatedBy: "{}").count == 2 else {
            throw error(node, "a template holds one {} where the stored value goes, like \"https://swapi.dev/api/people/{}/\"")
        }
        return template
    }

    /// `values:` and `pattern:` (of an attribute or a relationship's bare identities), checked.
    func textRules(values: Node?, pattern: Node?) throws(ConfigError) -> ([String: String?], String?) {
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
            if let nested = AttributeRules.Pattern.nestedRepetition(in: text) {
                throw error(
                    node,
                    "pattern '\(text)' repeats \(nested), which repeats itself: a value that almost matches takes exponential time; repeat one or the other"
                )
            }
            compiled = text
        }
        return (replacements, compiled)
    }
}
