import Foundation

/// A cursor on one value of a ``JSONDocument``: a document and a tape index. Cheap to copy.
///
/// Reading a value converts it on demand: `string` decodes escapes, `int64` and `double` convert
/// digits. Nothing is cached; read each value once.
package struct JSONValue: Sendable {
    package let document: JSONDocument
    let index: Int

    init(document: JSONDocument, index: Int) {
        self.document = document
        self.index = index
    }

    var node: JSONNode { document.nodes[index] }

    /// The JSON type of the value.
    package enum Kind: String, Sendable {
        case null, bool, number, string, array, object
    }

    package var kind: Kind {
        switch node.kind {
        case .null: .null
        case .true, .false: .bool
        case .integer, .double: .number
        case .string, .escapedString: .string
        case .array: .array
        case .object: .object
        }
    }

    package var isNull: Bool { node.kind == .null }

    /// The value's exact JSON text, as it appears in the document (strings with their quotes).
    package var rawBytes: ArraySlice<UInt8> {
        let n = node
        switch n.kind {
        case .string, .escapedString:
            return document.bytes[Int(n.start) - 1..<Int(n.start + n.length) + 1]
        default:
            return document.bytes[Int(n.start)..<Int(n.start + n.length)]
        }
    }

    /// The value's exact JSON text.
    package var rawText: String { String(decoding: rawBytes, as: UTF8.self) }

    // MARK: - Scalars

    package var bool: Bool? {
        switch node.kind {
        case .true: true
        case .false: false
        default: nil
        }
    }

    /// The string, escapes decoded; `nil` when the value is not a string.
    package var string: String? {
        let n = node
        switch n.kind {
        case .string:
            return document.bytes.withUnsafeBufferPointer {
                String(decoding: UnsafeBufferPointer(rebasing: $0[Int(n.start)..<Int(n.start + n.length)]), as: UTF8.self)
            }
        case .escapedString:
            let decoded = document.bytes.withUnsafeBufferPointer { JSONValue.unescape($0, Int(n.start), Int(n.length)) }
            return String(decoding: decoded, as: UTF8.self)
        default:
            return nil
        }
    }

    /// The number as an exact integer; `nil` when it is not a number without fraction and exponent,
    /// or does not fit in 64 bits.
    package var int64: Int64? {
        let n = node
        guard n.kind == .integer else { return nil }
        return document.bytes.withUnsafeBufferPointer { JSONNumber.int64($0, Int(n.start), Int(n.length)) }
    }

    /// The number as the nearest `Double`; `nil` when the value is not a number.
    package var double: Double? {
        let n = node
        guard n.kind == .integer || n.kind == .double else { return nil }
        return document.bytes.withUnsafeBufferPointer { JSONNumber.double($0, Int(n.start), Int(n.length)) }
    }

    /// The number's digits as written; `nil` when the value is not a number.
    package var numberText: String? {
        let n = node
        guard n.kind == .integer || n.kind == .double else { return nil }
        return rawText
    }

    // MARK: - Containers

    /// The number of elements (arrays) or members (objects); 0 otherwise.
    package var count: Int { Int(node.count) }

    /// The elements of an array, in order; empty for anything else.
    package var elements: JSONElements { JSONElements(value: self) }

    /// The members of an object, in order; empty for anything else.
    package var members: JSONMembers { JSONMembers(value: self) }

    /// The member named `key` (the last one, when the object repeats the key), or `nil`.
    package subscript(key: String) -> JSONValue? {
        var key = key
        return key.withUTF8 { member(named: $0) }
    }

    /// The member whose key's UTF-8 is `key`. Keys are compared as bytes; escaped keys decoded first.
    func member(named key: UnsafeBufferPointer<UInt8>) -> JSONValue? {
        guard node.kind == .object else { return nil }
        var found: JSONValue?
        for (k, v) in members where k.keyEquals(key) { found = v }
        return found
    }

    /// Whether this string node (a key) is exactly `key`.
    func keyEquals(_ key: UnsafeBufferPointer<UInt8>) -> Bool {
        let n = node
        if n.kind == .string {
            guard Int(n.length) == key.count else { return false }
            return document.bytes.withUnsafeBufferPointer { b in
                UnsafeBufferPointer(rebasing: b[Int(n.start)..<Int(n.start + n.length)]).elementsEqual(key)
            }
        }
        guard n.kind == .escapedString else { return false }
        return document.bytes.withUnsafeBufferPointer { JSONValue.unescape($0, Int(n.start), Int(n.length)) }.elementsEqual(key)
    }

    /// Decodes the escapes of the string content at `start..<start+length`. Lone surrogates become U+FFFD.
    static func unescape(_ bytes: UnsafeBufferPointer<UInt8>, _ start: Int, _ length: Int) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(length)
        var i = start
        let end = start + length
        func hex4(_ k: Int) -> UInt32 {
            var v: UInt32 = 0
            for j in k..<k + 4 { v = v << 4 | (JSONParser.hexValue(bytes[j]) ?? 0) }
            return v
        }
        func append(_ scalar: UInt32) {
            let s = Unicode.Scalar(scalar) ?? "\u{FFFD}"
            UTF8.encode(s) { out.append($0) }
        }
        while i < end {
            let c = bytes[i]
            guard c == UInt8(ascii: "\\") else {
                out.append(c)
                i += 1
                continue
            }
            let e = bytes[i + 1]
            i += 2
            switch e {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                let u = hex4(i)
                i += 4
                if u >= 0xD800 && u < 0xDC00, i + 6 <= end, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") {
                    let low = hex4(i + 2)
                    if low >= 0xDC00 && low < 0xE000 {
                        append(0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00))
                        i += 6
                        continue
                    }
                }
                append(u >= 0xD800 && u < 0xE000 ? 0xFFFD : u)
            default: out.append(e)  // \" \\ \/
            }
        }
        return out
    }
}

/// The elements of a JSON array, as ``JSONValue``s.
package struct JSONElements: Sequence, Sendable {
    let value: JSONValue

    package struct Iterator: IteratorProtocol {
        let document: JSONDocument
        var position: Int
        var remaining: Int
        package mutating func next() -> JSONValue? {
            guard remaining > 0 else { return nil }
            remaining -= 1
            let v = JSONValue(document: document, index: position)
            position = Int(document.nodes[position].end)
            return v
        }
    }

    package func makeIterator() -> Iterator {
        let n = value.node
        return Iterator(document: value.document, position: value.index + 1, remaining: n.kind == .array ? Int(n.count) : 0)
    }

    package var underestimatedCount: Int { value.node.kind == .array ? value.count : 0 }
}

/// The members of a JSON object, as (key, value) pairs in document order.
package struct JSONMembers: Sequence, Sendable {
    let value: JSONValue

    package struct Iterator: IteratorProtocol {
        let document: JSONDocument
        var position: Int
        var remaining: Int
        package mutating func next() -> (key: JSONValue, value: JSONValue)? {
            guard remaining > 0 else { return nil }
            remaining -= 1
            let k = JSONValue(document: document, index: position)
            let v = JSONValue(document: document, index: position + 1)
            position = Int(document.nodes[position + 1].end)
            return (k, v)
        }
    }

    package func makeIterator() -> Iterator {
        let n = value.node
        return Iterator(document: value.document, position: value.index + 1, remaining: n.kind == .object ? Int(n.count) : 0)
    }
}
