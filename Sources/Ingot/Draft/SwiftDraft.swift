import Foundation

extension PipelineDraft {
    /// The draft as Swift types for the library (`ingot init … --swift`): one `IngotEntity`
    /// struct per entity, its coding keys the records' keys, its identity, value rules where the
    /// pipeline file has them, relationships as properties of the target's type. A JSON
    /// attribute of unknown shape is left out, said in a comment (declare a `Codable` type for it).
    package var swift: String {
        var out = "// Drafted by `ingot init` from sample pages: check each guess (the comments say why it was made).\n"
        out += "import Foundation\nimport Ingot\n"
        for entity in entities { out += "\n" + Self.swift(of: entity) }
        return out
    }

    private static func swift(of entity: DraftEntity) -> String {
        var properties: [String] = []
        var keys: [String] = []
        var rules: [String] = []
        var identityCases: [(index: Int, name: String)] = []
        var used: Set<String> = []
        func property(_ name: String) -> String {
            var p = camel(name)
            if swiftKeywords.contains(p) { p += "Value" }
            while used.contains(p) { p += "_" }
            used.insert(p)
            return p
        }
        for attribute in entity.attributes {
            let key = keyPath(in: attribute.yaml) ?? attribute.name
            guard let (type, rule) = swiftType(ofYAML: attribute.yaml) else {
                properties.append(
                    "    // \(PipelineDraft.quoted(key)): JSON (\(attribute.why ?? "kept as JSON")): declare a Codable type for it")
                continue
            }
            let name = property(attribute.name)
            let identityIndex = entity.identity.firstIndex(of: attribute.name)
            let isIdentity = identityIndex != nil
            if let identityIndex { identityCases.append((identityIndex, name)) }
            let why = attribute.why.map { "  // \($0)" } ?? ""
            properties.append("    var \(name): \(type)\(isIdentity ? "" : "?")\(why)")
            keys.append(name == key ? name : "\(name) = \(PipelineDraft.quoted(key))")
            if let rule { rules.append("        case .\(name): \(rule)") }
        }
        for relationship in entity.relationships {
            guard let target = field("to", in: relationship.yaml) else { continue }
            let key = keyPath(in: relationship.yaml) ?? relationship.name
            let name = property(relationship.name)
            let type = typeName(target)
            let many = relationship.yaml.contains("many: true")
            // A record's own kind is referred to through a box (`Ref<Self>`): a struct cannot hold itself.
            let element = relationship.byReference || target == entity.name ? "Ref<\(type)>" : type
            properties.append("    var \(name): \(many ? "[\(element)]" : element)?  // \(relationship.why)")
            keys.append(name == key ? name : "\(name) = \(PipelineDraft.quoted(key))")
        }
        var out = "struct \(typeName(entity.name)): IngotEntity, Codable {\n"
        out += properties.joined(separator: "\n") + "\n"
        out += "    enum CodingKeys: String, CodingKey {\n" + caseList(keys) + "\n    }\n"
        if snakeCase(typeName(entity.name)) != entity.name {
            out += "    static let entityName = \(PipelineDraft.quoted(entity.name))\n"
        }
        let identity = identityCases.sorted { $0.index < $1.index }.map { "." + $0.name }
        out += "    static let identity: [CodingKeys] = [\(identity.joined(separator: ", "))]"
        out += identity.isEmpty ? "  // \(entity.identityWhy)\n" : "\n"
        if !rules.isEmpty {
            out += "    static func rule(for key: CodingKeys) -> IngotRule? {\n        switch key {\n"
            out += rules.joined(separator: "\n") + "\n        default: nil\n        }\n    }\n"
        }
        return out + "}\n"
    }

    /// The Swift type and value rule of an attribute's YAML (`integer`, `{type: date, format: unix}`,
    /// `{type: integer, coerce: true, values: {"unknown": null}}`); `nil` for JSON.
    static func swiftType(ofYAML yaml: String) -> (String, String?)? {
        let type = yaml.first == "\u{7B}" ? (field("type", in: yaml) ?? "string") : yaml
        var parts: [String] = []
        if yaml.contains("coerce: true") { parts.append("coerce: true") }
        if let start = yaml.range(of: "values: \u{7B}"), let end = yaml[start.upperBound...].firstIndex(of: "\u{7D}") {
            parts.append("values: [" + yaml[start.upperBound..<end].replacingOccurrences(of: ": null", with: ": nil") + "]")
        }
        let swift: String
        switch type {
        case "integer": swift = "Int"
        case "double": swift = "Double"
        case "bool": swift = "Bool"
        case "decimal": swift = "Decimal"
        case "string": swift = "String"
        case "date":
            swift = "Date"
            switch field("format", in: yaml) ?? "iso8601" {
            case "unix": parts.append("dateFormat: .unixSeconds")
            case "unix_ms": parts.append("dateFormat: .unixMilliseconds")
            case "iso8601": parts.append("dateFormat: .iso8601(timeZone: \"UTC\")")
            case let pattern: parts.append("dateFormat: .pattern(\(PipelineDraft.quoted(pattern)), timeZone: \"UTC\")")
            }
        default: return nil
        }
        return (swift, parts.isEmpty ? nil : "IngotRule(" + parts.joined(separator: ", ") + ")")
    }

    /// The value of `name:` in a flow mapping the draft wrote (a word or a quoted text).
    private static func field(_ name: String, in yaml: String) -> String? {
        guard let start = yaml.range(of: name + ": ") else { return nil }
        let rest = yaml[start.upperBound...]
        if rest.first == "\"" {
            let body = rest.dropFirst()
            guard let end = body.firstIndex(of: "\"") else { return nil }
            return String(body[..<end])
        }
        return String(rest.prefix { $0 != "," && $0 != "\u{7D}" && $0 != " " })
    }

    private static func keyPath(in yaml: String) -> String? { yaml.first == "\u{7B}" ? field("key", in: yaml) : nil }

    private static let swiftKeywords: Set<String> = [
        "class", "struct", "enum", "protocol", "func", "var", "let", "if", "else", "for", "while", "return", "switch", "case", "default",
        "in", "is", "as", "self", "Self", "type", "init", "import", "public", "private", "internal", "static", "where", "repeat", "do",
        "try", "throw", "throws", "nil", "true", "false", "extension", "operator", "subscript", "deinit", "associatedtype", "typealias",
    ]

    /// `first_name` → `firstName`.
    static func camel(_ name: String) -> String {
        let parts = name.split(separator: "_").map(String.init)
        guard let first = parts.first else { return name }
        return first + parts.dropFirst().map(\.capitalizedFirst).joined()
    }

    /// `line_item` → `LineItem`.
    static func typeName(_ entity: String) -> String {
        let name = camel(entity).capitalizedFirst
        return takenTypeNames.contains(name) ? name + "Record" : name
    }

    /// Names a drafted type must not have: `Type` and `Protocol` cannot name a member type, and
    /// the others are the types the draft's own code names (a `Date` of its own would hide
    /// Foundation's). An entity so named gets `Record` after it (`type` → `TypeRecord`, with its
    /// `entityName`).
    static let takenTypeNames: Set<String> = [
        "Type", "Protocol", "Self", "Any", "String", "Int", "Double", "Bool", "Date", "Data", "Decimal", "URL", "UUID", "Error",
        "Array", "Set", "Dictionary", "Optional", "Ref", "Codable", "CodingKey", "CodingKeys", "IngotEntity", "IngotRule", "Never",
        "Result", "Task", "Sendable",
    ]

    /// `LineItem` → `line_item`, as the library names an entity by default.
    static func snakeCase(_ name: String) -> String {
        var out = ""
        for c in name {
            if c.isUppercase, !out.isEmpty { out += "_" }
            out += c.lowercased()
        }
        return out
    }
}

extension String {
    fileprivate var capitalizedFirst: String { prefix(1).uppercased() + dropFirst() }
}

extension PipelineDraft {
    /// `case a, b = "x", …` as swift-format lays it out at 140 columns: the keys filled in, each
    /// line after the first indented by 12 — so that a drafted file passes a strict lint as is.
    static func caseList(_ keys: [String]) -> String {
        let first = "        case ", next = "            "
        var lines: [String] = []
        var line = first
        for (k, key) in keys.enumerated() {
            let piece = key + (k == keys.count - 1 ? "" : ",")
            let fresh = line == first || line == next
            if !fresh && line.count + 1 + piece.count > 140 {
                lines.append(line)
                line = next + piece
            } else {
                line += (fresh ? "" : " ") + piece
            }
        }
        return (lines + [line]).joined(separator: "\n")
    }
}
