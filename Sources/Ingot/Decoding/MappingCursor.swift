import Foundation

/// Unsafe views of one parsed page, valid while the mapper works on it.
struct Cursor {
    let nodes: UnsafeBufferPointer<JSONNode>
    let bytes: UnsafeBufferPointer<UInt8>

    /// The member of `rootKeys` whose name is the key at `keyIndex`.
    @inline(__always)
    func match(keyAt keyIndex: Int, in entity: MappingPlan.EntityPlan) -> Int? {
        let key = nodes[keyIndex]
        if key.kind == .escapedString {
            let decoded = JSONValue.unescape(bytes, Int(key.start), Int(key.length))
            return entity.rootKeys.firstIndex { $0.bytes == decoded }
        }
        let length = Int(key.length)
        return entity.keyBytes.withUnsafeBufferPointer { names in
            guard let page = bytes.baseAddress, let names = names.baseAddress else { return nil }
            let starts = entity.keyStarts
            for k in 0..<starts.count - 1 where starts[k + 1] - starts[k] == length {
                if memcmp(page + Int(key.start), names + starts[k], length) == 0 { return k }
            }
            return nil
        }
    }

    /// What a key path finds below a present root key.
    enum Descent {
        /// The leaf's tape index (not null).
        case leaf(Int)
        /// A step is null: the column becomes NULL, a relationship is cleared.
        case null
        /// A key step is missing below a present root: as `null` for a column or a relationship
        /// (the record's object is there and lacks it), absent for a `fields:` value.
        case missing
        /// An index past either end of its array: the column is left as it is.
        case absent
    }

    /// Follows the rest of a key path from the value at `index`. Throws when a key step meets
    /// something other than an object, or an index step something other than an array.
    func descend(from index: Int, along target: MappingPlan.Target) throws(MappingFailure) -> Descent {
        var current = index
        if nodes[current].kind == .null { return .null }
        for (step, component) in target.rest.enumerated() {
            let node = nodes[current]
            switch component {
            case .key(let key):
                guard node.kind == .object else {
                    throw MappingFailure(reason: "expected an object, got \(node.kind.jsonName)", code: .wrongShape)
                        .prepending(target.restTrail[..<step].reversed())
                }
                var found: Int?
                var member = current + 1
                for _ in 0..<node.count {
                    if keyEquals(member, key) { found = member + 1 }
                    member = Int(nodes[member + 1].end)
                }
                guard let next = found else { return .missing }
                current = next
            case .index(let n):
                guard node.kind == .array else {
                    throw MappingFailure(reason: "expected an array, got \(node.kind.jsonName)", code: .wrongShape)
                        .prepending(target.restTrail[..<step].reversed())
                }
                let count = Int(node.count)
                let position = n < 0 ? count + n : n
                guard position >= 0, position < count else { return .absent }
                var element = current + 1
                for _ in 0..<position { element = Int(nodes[element].end) }
                current = element
            case .match(let key, let value):
                guard node.kind == .array else {
                    throw MappingFailure(reason: "expected an array, got \(node.kind.jsonName)", code: .wrongShape)
                        .prepending(target.restTrail[..<step].reversed())
                }
                guard let element = firstElement(of: current, whose: key, is: value) else { return .absent }
                current = element
            }
            if nodes[current].kind == .null { return .null }
        }
        return .leaf(current)
    }

    /// The first element of the array at `array` that is an object whose member `key` is `value`:
    /// a string of that text (escapes decoded) or a number of those digits.
    func firstElement(of array: Int, whose key: [UInt8], is value: [UInt8]) -> Int? {
        var element = array + 1
        for _ in 0..<nodes[array].count {
            defer { element = Int(nodes[element].end) }
            guard nodes[element].kind == .object else { continue }
            var member = element + 1
            var found: Int?
            for _ in 0..<nodes[element].count {
                if keyEquals(member, key) { found = member + 1 }
                member = Int(nodes[member + 1].end)
            }
            guard let found else { continue }
            switch nodes[found].kind {
            case .string, .integer, .double: if keyEquals(found, value) { return element }
            case .escapedString: if JSONValue.unescape(bytes, Int(nodes[found].start), Int(nodes[found].length)) == value { return element }
            default: continue
            }
        }
        return nil
    }

    func keyEquals(_ keyIndex: Int, _ key: [UInt8]) -> Bool {
        let node = nodes[keyIndex]
        if node.kind == .escapedString {
            return JSONValue.unescape(bytes, Int(node.start), Int(node.length)) == key
        }
        guard Int(node.length) == key.count else { return false }
        return equalBytes(Int(node.start), key)
    }

    /// Whether the page's bytes at `start` begin with `key`.
    @inline(__always)
    func equalBytes(_ start: Int, _ key: [UInt8]) -> Bool {
        key.withUnsafeBufferPointer { k in
            guard let a = bytes.baseAddress, let b = k.baseAddress else { return k.isEmpty }
            return memcmp(a + start, b, k.count) == 0
        }
    }

    func int64(_ node: JSONNode) -> Int64? { JSONNumber.int64(bytes, Int(node.start), Int(node.length)) }

    func double(_ node: JSONNode) -> Double { JSONNumber.double(bytes, Int(node.start), Int(node.length)) }

    /// The value's bytes in the page (valid while the page is).
    func bytes(_ node: JSONNode) -> UnsafeBufferPointer<UInt8> {
        UnsafeBufferPointer(rebasing: bytes[Int(node.start)..<Int(node.start + node.length)])
    }

    func string(_ node: JSONNode) -> String {
        if node.kind == .escapedString {
            return String(decoding: JSONValue.unescape(bytes, Int(node.start), Int(node.length)), as: UTF8.self)
        }
        return String(decoding: UnsafeBufferPointer(rebasing: bytes[Int(node.start)..<Int(node.start + node.length)]), as: UTF8.self)
    }

    /// At most ``RecordRejection/rawLimit`` bytes of the JSON text of the value at `index`, and
    /// the length of the whole.
    func rawPrefix(_ index: Int) -> (text: String, length: Int) {
        let range = rawRange(index)
        return (RecordRejection.prefix(ArraySlice(UnsafeBufferPointer(rebasing: bytes[range]))), range.count)
    }

    /// The exact JSON text of the value at `index`.
    func raw(_ index: Int) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: bytes[rawRange(index)]), as: UTF8.self)
    }

    /// The JSON text of the value at `index` in compact form: its keys, values and their order as
    /// sent, without the whitespace between tokens (a `json` attribute's stored text, so that
    /// equal JSON is equal text whatever the server's indentation).
    func compactJSON(_ index: Int) -> String {
        let range = rawRange(index)
        let text = UnsafeBufferPointer(rebasing: bytes[range])
        func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 }
        guard text.contains(where: isSpace) else { return String(decoding: text, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        var inString = false
        var escaped = false
        for byte in text {
            if inString {
                out.append(byte)
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
            } else if !isSpace(byte) {
                out.append(byte)
                if byte == UInt8(ascii: "\"") { inString = true }
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Where the JSON text of the value at `index` lies in the page (quotes included).
    private func rawRange(_ index: Int) -> Range<Int> {
        let node = nodes[index]
        let quoted = node.kind == .string || node.kind == .escapedString
        return (Int(node.start) - (quoted ? 1 : 0))..<(Int(node.start + node.length) + (quoted ? 1 : 0))
    }

    /// The string (or number text) at `path` in the object at `index`, if any.
    func text(at path: [String], from index: Int) -> String? {
        var current = index
        for key in path {
            let node = nodes[current]
            guard node.kind == .object else { return nil }
            var found: Int?
            var member = current + 1
            for _ in 0..<node.count {
                if keyEquals(member, Array(key.utf8)) { found = member + 1 }
                member = Int(nodes[member + 1].end)
            }
            guard let next = found else { return nil }
            current = next
        }
        let node = nodes[current]
        switch node.kind {
        case .string, .escapedString: return string(node)
        case .integer, .double: return raw(current)
        default: return nil
        }
    }

    /// A short quote of a value for messages.
    func preview(_ index: Int) -> String {
        let text = raw(index)
        return text.count <= 40 ? text : String(text.prefix(37)) + "…"
    }
}

// MARK: - Failures
