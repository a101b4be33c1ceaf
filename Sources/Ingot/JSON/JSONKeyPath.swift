import Foundation

/// A path into a JSON value, as pipeline files write it: keys joined by a delimiter (`.` unless
/// an entity says otherwise), each key optionally followed by array indexes — `data[-1].id`,
/// `meta.next_cursor`, `names[0].name`, `[0]` (the first element of a page that is an array).
/// A negative index counts from the end (`-1`: the last element). `[key=value]` picks the first
/// element of an array that is an object whose `key` is `value` — a string equal to it or a
/// number written as it (Zendesk's `custom_fields[id=360001].value`). One grammar for every key path
/// of a pipeline file; text it does not define is refused (``init(parsing:delimiter:)``), never
/// read as a key that resolves to nothing.
package struct JSONKeyPath: Sendable, Hashable, CustomStringConvertible {
    /// One step of a path.
    package enum Component: Sendable, Hashable {
        /// The member of an object.
        case key(String)
        /// The element of an array: from the start (0, 1, …) or from the end (-1, -2, …).
        case index(Int)
        /// The first element of an array that is an object whose member `key` is `value` (a
        /// string of that text, or a number of those digits).
        case match(key: String, value: String)

        /// Whether `element` is the one a `.match` picks.
        package static func matches(_ element: JSONValue, key: String, value: String) -> Bool {
            guard element.kind == .object, let found = element[key] else { return false }
            return found.string == value || found.numberText == value
        }
    }

    /// The steps, in order; empty: the value itself.
    package var components: [Component]
    /// The delimiter the path was written with (for messages).
    package var delimiter: String

    /// A path of `components`.
    package init(_ components: [Component], delimiter: String = ".") {
        self.components = components
        self.delimiter = delimiter
    }

    /// A path of plain keys (no index).
    package init(keys: [String], delimiter: String = ".") {
        self.init(keys.map(Component.key), delimiter: delimiter)
    }

    /// Why a text is not a key path.
    package struct ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        /// What is wrong, naming the text.
        package var description: String
    }

    /// Reads `text`. Each part between delimiters is a key, a key followed by `[N]` indexes, or
    /// (first) indexes alone; an index is an integer, negative from the end. Refused: an empty
    /// text or part, a `[` or `]` elsewhere, an index that is not an integer.
    package init(parsing text: String, delimiter: String = ".") throws(ParseError) {
        func refuse(_ why: String) -> ParseError { ParseError(description: "key path '\(text)': \(why)") }
        guard !text.isEmpty else { throw refuse("it is empty") }
        guard !delimiter.isEmpty else { throw refuse("the delimiter is empty") }
        var components: [Component] = []
        for (k, part) in text.components(separatedBy: delimiter).enumerated() {
            guard !part.isEmpty else { throw refuse("part \(k + 1) is empty") }
            var rest = Substring(part)
            let key = rest.prefix { $0 != "[" }
            rest = rest.dropFirst(key.count)
            if key.contains("]") { throw refuse("'\(part)' has a ']' without its '['") }
            if !key.isEmpty {
                components.append(.key(String(key)))
            } else if k > 0 {
                throw refuse("'\(part)' has an index but no key (write key[N])")
            }
            while !rest.isEmpty {
                guard rest.first == "[", let close = rest.firstIndex(of: "]") else {
                    throw refuse("'\(part)': an index is written [N], N an integer")
                }
                let number = rest[rest.index(after: rest.startIndex)..<close]
                if let equals = number.firstIndex(of: "=") {
                    let (key, value) = (number[..<equals], number[number.index(after: equals)...])
                    guard !key.isEmpty, !value.isEmpty, !key.contains("["), !value.contains("[") else {
                        throw refuse("'\(part)': an element is picked as [key=value], both non-empty")
                    }
                    components.append(.match(key: String(key), value: String(value)))
                    rest = rest[rest.index(after: close)...]
                    continue
                }
                guard let index = Int(number), number.first != "+" else {
                    throw refuse("'\(part)': '[\(number)]' is not an integer index")
                }
                components.append(.index(index))
                rest = rest[rest.index(after: close)...]
            }
        }
        self.init(components, delimiter: delimiter)
    }

    /// The path as it was written.
    package var description: String {
        var out = ""
        for component in components {
            switch component {
            case .key(let key):
                if !out.isEmpty { out += delimiter }
                out += key
            case .index(let n): out += "[\(n)]"
            case .match(let key, let value): out += "[\(key)=\(value)]"
            }
        }
        return out
    }

    /// Whether every step is a key (the path has no index).
    package var isKeysOnly: Bool {
        components.allSatisfy { if case .key = $0 { true } else { false } }
    }

    /// The value at this path in `value`, or `nil` when a step finds nothing: a key absent (or
    /// not an object), an index past either end (or not an array).
    package func resolve(in value: JSONValue) -> JSONValue? {
        var current = value
        for component in components {
            switch component {
            case .key(let key):
                guard let next = current[key] else { return nil }
                current = next
            case .index(let n):
                guard current.kind == .array else { return nil }
                let count = current.count
                let position = n < 0 ? count + n : n
                guard position >= 0, position < count else { return nil }
                guard let element = current.elements.dropFirst(position).first(where: { _ in true }) else { return nil }
                current = element
            case .match(let key, let value):
                guard current.kind == .array,
                    let element = current.elements.first(where: { Component.matches($0, key: key, value: value) })
                else { return nil }
                current = element
            }
        }
        return current
    }
}
