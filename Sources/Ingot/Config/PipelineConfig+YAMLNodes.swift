import Foundation
import Yams

// The reader's YAML helpers: merge keys, typed scalars, `${VAR}` expansion, errors with their marks.
extension PipelineYAMLReader {
    // MARK: - Node helpers

    /// `node` with YAML merge keys (`<<: *anchor`, `<<: [*a, *b]`) applied, as YAML 1.1's merge
    /// type says: the merged mappings' keys are added where the mapping does not set them itself,
    /// an earlier mapping of a list winning over a later one. Nodes keep their marks: a problem in
    /// a merged value is reported where that value is written.
    func resolvingMerges(_ node: Node, depth: Int = 0) throws(ConfigError) -> Node {
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

    func mapping(_ node: Node, allowed: [String]) throws(ConfigError) -> [String: Node] {
        guard case .mapping(let mapping) = node else {
            throw error(node, "expected a mapping with keys \(allowed.joined(separator: ", "))")
        }
        var result: [String: Node] = [:]
        for (keyNode, value) in mapping {
            let key = try string(keyNode)
            guard allowed.contains(key) else {
                // Reported, and the rest read without it: `validate` says every mistake at once.
                unknownKeys.add(
                    error(
                        keyNode,
                        "unknown key '\(key)'\(NearMiss.hint(for: key, among: allowed)); expected one of \(allowed.joined(separator: ", "))"
                    ))
                continue
            }
            guard result[key] == nil else { throw error(keyNode, "key '\(key)' appears twice") }
            result[key] = value
        }
        return result
    }

    func required(_ fields: [String: Node], _ key: String, in parent: Node) throws(ConfigError) -> Node {
        guard let node = fields[key] else { throw error(parent, "missing required key '\(key)'") }
        return node
    }

    func string(_ node: Node) throws(ConfigError) -> String {
        guard case .scalar(let scalar) = node else { throw error(node, "expected a string") }
        return try expand(scalar.string, at: node)
    }

    func int(_ node: Node) throws(ConfigError) -> Int {
        guard case .scalar = node, let value = Int(try string(node)) else { throw error(node, "expected an integer") }
        return value
    }

    func bool(_ node: Node) throws(ConfigError) -> Bool {
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

    func error(_ node: Node?, _ message: String) -> ConfigError {
        error(node?.mark, message)
    }

    func error(_ mark: Mark?, _ message: String) -> ConfigError {
        ConfigError(file: file, line: mark?.line ?? 1, column: mark?.column ?? 1, message: message)
    }

    /// The parser's error, said as a newcomer needs it: a tab in a line's indentation (YAML
    /// indents with spaces only) is named as a tab.
    func yamlError(_ e: YamlError, text: String) -> ConfigError {
        switch e {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _), .composer(_, let problem, let mark, _):
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            if lines.indices.contains(mark.line - 1), lines[mark.line - 1].prefix(while: { $0 == " " || $0 == "\t" }).contains("\t") {
                return ConfigError(
                    file: file, line: mark.line, column: mark.column,
                    message: "a tab indents this line: YAML indents with spaces only (invalid YAML: \(problem))")
            }
            return ConfigError(file: file, line: mark.line, column: mark.column, message: "invalid YAML: \(problem)")
        default:
            return ConfigError(file: file, line: 1, column: 1, message: "invalid YAML: \(e)")
        }
    }
}
