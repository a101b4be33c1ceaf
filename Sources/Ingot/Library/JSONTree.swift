import Foundation

/// A JSON value under construction; objects and arrays are shared boxes, so that containers
/// (value types) write into the same tree.
enum JSONTree {
    case scalar(String)  // its JSON text
    case object(ObjectNode)
    case array(ArrayNode)

    static func write(_ tree: JSONTree, to out: inout String) {
        switch tree {
        case .scalar(let text): out += text
        case .object(let node):
            out += "{"
            for (k, member) in node.members.enumerated() {
                if k > 0 { out += "," }
                JSONText.quote(member.key, into: &out)
                out += ":"
                write(member.value, to: &out)
            }
            out += "}"
        case .array(let node):
            out += "["
            for (k, item) in node.items.enumerated() {
                if k > 0 { out += "," }
                write(item, to: &out)
            }
            out += "]"
        }
    }

    static func string(_ s: String) -> JSONTree {
        var out = ""
        JSONText.quote(s, into: &out)
        return .scalar(out)
    }
}

final class ObjectNode {
    /// The members in the order they were first set (an entity's few keys: a linear search is
    /// cheaper than hashing).
    private(set) var members: [(key: String, value: JSONTree)] = []

    /// The value at `key`, if set.
    subscript(key: String) -> JSONTree? { members.first { $0.key == key }?.value }

    func set(_ key: String, _ value: JSONTree) {
        if let k = members.firstIndex(where: { $0.key == key }) {
            members[k].value = value
        } else {
            members.append((key, value))
        }
    }

    /// The object at `key`, made when missing.
    func object(_ key: String) throws -> ObjectNode {
        switch self[key] {
        case .object(let node)?: return node
        case nil:
            let node = ObjectNode()
            set(key, .object(node))
            return node
        default:
            throw EncodingError.invalidValue(key, .init(codingPath: [], debugDescription: "two key paths disagree on what '\(key)' is"))
        }
    }

    /// The array at `key`, made when missing.
    func array(_ key: String) throws -> ArrayNode {
        switch self[key] {
        case .array(let node)?: return node
        case nil:
            let node = ArrayNode()
            set(key, .array(node))
            return node
        default:
            throw EncodingError.invalidValue(key, .init(codingPath: [], debugDescription: "two key paths disagree on what '\(key)' is"))
        }
    }
}

extension JSONTree {
    /// The tree as JSON text.
    static func text(of tree: JSONTree) -> String {
        var out = ""
        write(tree, to: &out)
        return out
    }
}

final class ArrayNode {
    var items: [JSONTree] = []
}

extension JSONTree {
    /// A double as JSON: integral values keep a `.0`, as they were typed.
    static func number(_ v: Double) -> String { "\(v)" }

    /// An instant in ISO 8601, UTC, to the microsecond (rounded, trailing zeros dropped): a date
    /// read back from text encodes as the text's digits, not as the binary double's.
    static func instant(_ date: Date) -> String {
        var whole = date.timeIntervalSince1970.rounded(.down)
        var micros = Int(((date.timeIntervalSince1970 - whole) * 1e6).rounded())
        if micros >= 1_000_000 {
            whole += 1
            micros -= 1_000_000
        }
        let seconds = Date(timeIntervalSince1970: whole).formatted(Date.ISO8601FormatStyle())
        guard micros > 0, seconds.hasSuffix("Z") else { return seconds }
        var fraction = String(micros)
        fraction = String(repeating: "0", count: 6 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return seconds.dropLast() + "." + fraction + "Z"
    }
}

extension JSONKeyPath {
    /// Sets `value` at `components` below `node`, making the objects and arrays on the way
    /// (an index past an array's end pads it with nulls; one from the end cannot be rebuilt).
    static func place(_ value: JSONTree, along components: ArraySlice<Component>, in node: JSONTree) throws {
        guard let first = components.first else { return }
        let rest = components.dropFirst()
        switch (first, node) {
        case (.key(let key), .object(let object)):
            guard let next = rest.first else { return object.set(key, value) }
            if case .key = next {
                try place(value, along: rest, in: .object(try object.object(key)))
            } else {
                try place(value, along: rest, in: .array(try object.array(key)))
            }
        case (.match(let key, let wanted), .array(let array)):
            // The element whose `key` is `wanted`, made when missing: `[{"id": 360, "value": …}]`.
            let written: JSONTree =
                (try? JSONDocument(bytes: Array(wanted.utf8)))?.root.kind == .number ? .scalar(wanted) : JSONTree.string(wanted)
            let element =
                array.items.lazy.compactMap { item -> ObjectNode? in
                    guard case .object(let object) = item, case .scalar(let text)? = object[key] else { return nil }
                    return text == JSONTree.text(of: written) ? object : nil
                }.first
                ?? {
                    let made = ObjectNode()
                    made.set(key, written)
                    array.items.append(.object(made))
                    return made
                }()
            guard !rest.isEmpty else {
                throw EncodingError.invalidValue(
                    "\(components)", .init(codingPath: [], debugDescription: "a key path ending in [key=value] cannot be encoded back"))
            }
            try place(value, along: rest, in: .object(element))
        case (.index(let index), .array(let array)):
            guard index >= 0 else {
                throw EncodingError.invalidValue(
                    index, .init(codingPath: [], debugDescription: "a key path counting from an array's end cannot be encoded back"))
            }
            while array.items.count <= index { array.items.append(.scalar("null")) }
            guard let next = rest.first else {
                array.items[index] = value
                return
            }
            if case .object(let object) = array.items[index] {
                try place(value, along: rest, in: .object(object))
            } else if case .array(let inner) = array.items[index] {
                try place(value, along: rest, in: .array(inner))
            } else {
                let made: JSONTree
                if case .key = next { made = .object(ObjectNode()) } else { made = .array(ArrayNode()) }
                array.items[index] = made
                try place(value, along: rest, in: made)
            }
        default:
            throw EncodingError.invalidValue(
                "\(components)", .init(codingPath: [], debugDescription: "the key path does not fit the JSON already built"))
        }
    }
}
