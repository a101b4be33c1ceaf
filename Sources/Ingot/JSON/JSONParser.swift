/// The byte-level JSON parser behind ``JSONDocument``: one pass, no recursion, no allocation
/// per value beyond the tape.
///
/// It accepts exactly RFC 8259: UTF-8 text (invalid sequences, overlong forms and encoded
/// surrogates are refused), no trailing commas, no leading zeros, no control characters inside
/// strings, and nesting up to `maxDepth`. A single leading UTF-8 byte order mark is skipped
/// (RFC 8259 §8.1 lets a parser ignore it; exports from some tools start with one): offsets
/// still count it, and the page's bytes are kept as they came.
///
/// ``parseLines(_:)`` reads JSON Lines (one value per line) into the same tape, under a root
/// array of the lines' values; a line that is not JSON is left out and reported, the others kept.
struct JSONParser {
    let maxDepth: Int
    private var nodes: [JSONNode] = []
    private var stack: [Int] = []

    init(maxDepth: Int) {
        self.maxDepth = maxDepth
    }

    mutating func parse(_ bytes: [UInt8]) throws(JSONSyntaxError) -> [JSONNode] {
        guard bytes.count < Int(UInt32.max) else {
            throw JSONSyntaxError(offset: 0, reason: "document larger than 4 GiB")
        }
        nodes.reserveCapacity(bytes.count / 6 + 4)
        let result: Result<Void, JSONSyntaxError> = bytes.withUnsafeBufferPointer { buffer in
            do throws(JSONSyntaxError) {
                try run(buffer, from: JSONParser.bomLength(buffer), to: buffer.count)
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
        return nodes
    }

    /// One line of JSON Lines that is not JSON: its number (1-based) and why.
    struct LineFailure: Sendable {
        var line: Int
        var error: JSONSyntaxError
    }

    /// JSON Lines (https://jsonlines.org): each line one value, lines ending in `\n` (a `\r`
    /// before it is whitespace), blank lines skipped. The tape's root (node 0) is an array of the
    /// lines' values, spanning the whole text; `lines[k]` is the line number of element `k`.
    mutating func parseLines(_ bytes: [UInt8]) throws(JSONSyntaxError) -> (nodes: [JSONNode], lines: [Int], failures: [LineFailure]) {
        guard bytes.count < Int(UInt32.max) else {
            throw JSONSyntaxError(offset: 0, reason: "document larger than 4 GiB")
        }
        nodes.reserveCapacity(bytes.count / 6 + 4)
        nodes.append(JSONNode(kind: .array, start: 0, length: UInt32(bytes.count), count: 0, end: 0))
        var lines: [Int] = []
        var failures: [LineFailure] = []
        // The lines' reasons, each text once: a million lines that are not JSON share a few
        // strings instead of holding a million (32 bytes a failure, not 100).
        var reasons: [String: String] = [:]
        bytes.withUnsafeBufferPointer { p in
            var start = JSONParser.bomLength(p)
            var line = 1
            while start < p.count {
                var end = start
                while end < p.count && p[end] != 0x0A { end += 1 }
                var blank = true
                for k in start..<end where !(p[k] == 0x20 || p[k] == 0x09 || p[k] == 0x0D) {
                    blank = false
                    break
                }
                if !blank {
                    let mark = nodes.count
                    do throws(JSONSyntaxError) {
                        try run(p, from: start, to: end)
                        nodes[0].count += 1
                        lines.append(line)
                    } catch {
                        nodes.removeSubrange(mark...)
                        stack.removeAll(keepingCapacity: true)
                        var error = error
                        if let shared = reasons[error.reason] {
                            error.reason = shared
                        } else if reasons.count < 4096 {
                            reasons[error.reason] = error.reason
                        }
                        failures.append(LineFailure(line: line, error: error))
                    }
                }
                start = end + 1
                line += 1
            }
        }
        nodes[0].end = UInt32(nodes.count)
        return (nodes, lines, failures)
    }

    /// 3 when `p` starts with a UTF-8 byte order mark, else 0.
    static func bomLength(_ p: UnsafeBufferPointer<UInt8>) -> Int {
        p.count >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF ? 3 : 0
    }

    // MARK: - Internals

    /// Parses one value spanning `p[start..<end]` (whitespace around it allowed); offsets in the
    /// tape are offsets in `p`.
    private mutating func run(_ p: UnsafeBufferPointer<UInt8>, from start: Int, to end: Int) throws(JSONSyntaxError) {
        let n = end
        var i = start

        // Not a closure over `i`: `i` is also passed inout below, and a captured var would be
        // boxed and checked for exclusive access at run time on every token.
        @inline(__always) func skipWhitespace(_ i: inout Int) {
            while i < n {
                let c = p[i]
                if c == 0x20 || c == 0x0A || c == 0x0D || c == 0x09 { i += 1 } else { break }
            }
        }

        valueLoop: while true {
            skipWhitespace(&i)
            guard i < n else { throw fail(i, "unexpected end of input, expected a value") }
            switch p[i] {
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                let isObject = p[i] == UInt8(ascii: "{")
                guard stack.count < maxDepth else { throw fail(i, "nesting deeper than \(maxDepth)") }
                stack.append(nodes.count)
                nodes.append(JSONNode(kind: isObject ? .object : .array, start: UInt32(i), length: 0, count: 0, end: 0))
                i += 1
                skipWhitespace(&i)
                guard i < n else { throw fail(i, "unexpected end of input inside \(isObject ? "object" : "array")") }
                if p[i] == (isObject ? UInt8(ascii: "}") : UInt8(ascii: "]")) {
                    i += 1
                    close(at: i)
                } else if isObject {
                    try parseKey(p, &i)
                    continue valueLoop
                } else {
                    continue valueLoop
                }
            case UInt8(ascii: "\""):
                try parseString(p, &i)
            case UInt8(ascii: "t"):
                try literal(p, &i, "true", .true)
            case UInt8(ascii: "f"):
                try literal(p, &i, "false", .false)
            case UInt8(ascii: "n"):
                try literal(p, &i, "null", .null)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                try parseNumber(p, &i)
            default:
                throw fail(i, "unexpected character \(describe(p[i])), expected a value")
            }

            // A value is complete: count it in its container, then close containers as far as
            // the text says, or go back for the next value.
            while let top = stack.last {
                nodes[top].count += 1
                skipWhitespace(&i)
                guard i < n else { throw fail(i, "unexpected end of input, container not closed") }
                let c = p[i]
                if c == UInt8(ascii: ",") {
                    i += 1
                    if nodes[top].kind == .object {
                        skipWhitespace(&i)
                        try parseKey(p, &i)
                    }
                    continue valueLoop
                }
                let closing = nodes[top].kind == .object ? UInt8(ascii: "}") : UInt8(ascii: "]")
                guard c == closing else {
                    throw fail(i, "unexpected character \(describe(c)), expected ',' or '\(Character(Unicode.Scalar(closing)))'")
                }
                i += 1
                close(at: i)
            }
            skipWhitespace(&i)
            guard i == n else { throw fail(i, "unexpected character \(describe(p[i])) after the value") }
            return
        }
    }

    /// Closes the innermost open container, whose closing bracket ends just before `offset`.
    @inline(__always) private mutating func close(at offset: Int) {
        let top = stack.removeLast()
        nodes[top].length = UInt32(offset) - nodes[top].start
        nodes[top].end = UInt32(nodes.count)
    }

    private mutating func parseKey(_ p: UnsafeBufferPointer<UInt8>, _ i: inout Int) throws(JSONSyntaxError) {
        guard i < p.count, p[i] == UInt8(ascii: "\"") else {
            throw fail(
                i, i < p.count ? "unexpected character \(describe(p[i])), expected a string key" : "unexpected end of input, expected a key"
            )
        }
        try parseString(p, &i)
        while i < p.count, p[i] == 0x20 || p[i] == 0x0A || p[i] == 0x0D || p[i] == 0x09 { i += 1 }
        guard i < p.count, p[i] == UInt8(ascii: ":") else { throw fail(i, "expected ':' after an object key") }
        i += 1
    }

    private mutating func literal(
        _ p: UnsafeBufferPointer<UInt8>, _ i: inout Int, _ word: StaticString, _ kind: JSONNode.Kind
    ) throws(JSONSyntaxError) {
        let count = word.utf8CodeUnitCount
        guard i + count <= p.count else { throw fail(i, "invalid literal") }
        let w = word.utf8Start
        for k in 0..<count where p[i + k] != w[k] { throw fail(i + k, "invalid literal") }
        nodes.append(JSONNode(kind: kind, start: UInt32(i), length: UInt32(count), count: 0, end: UInt32(nodes.count + 1)))
        i += count
    }

    private mutating func parseNumber(_ p: UnsafeBufferPointer<UInt8>, _ i: inout Int) throws(JSONSyntaxError) {
        let n = p.count
        let start = i
        var isInteger = true
        @inline(__always) func isDigit(_ k: Int) -> Bool { k < n && p[k] &- UInt8(ascii: "0") < 10 }

        if p[i] == UInt8(ascii: "-") { i += 1 }
        guard isDigit(i) else { throw fail(i, "expected a digit") }
        if p[i] == UInt8(ascii: "0") {
            i += 1
            if isDigit(i) { throw fail(i, "leading zero in a number") }
        } else {
            while isDigit(i) { i += 1 }
        }
        if i < n, p[i] == UInt8(ascii: ".") {
            isInteger = false
            i += 1
            guard isDigit(i) else { throw fail(i, "expected a digit after '.'") }
            while isDigit(i) { i += 1 }
        }
        if i < n, p[i] | 0x20 == UInt8(ascii: "e") {
            isInteger = false
            i += 1
            if i < n, p[i] == UInt8(ascii: "+") || p[i] == UInt8(ascii: "-") { i += 1 }
            guard isDigit(i) else { throw fail(i, "expected a digit in the exponent") }
            while isDigit(i) { i += 1 }
        }
        nodes.append(
            JSONNode(
                kind: isInteger ? .integer : .double, start: UInt32(start), length: UInt32(i - start),
                count: 0, end: UInt32(nodes.count + 1)))
    }

    private mutating func parseString(_ p: UnsafeBufferPointer<UInt8>, _ i: inout Int) throws(JSONSyntaxError) {
        let n = p.count
        i += 1  // opening quote
        let start = i
        var escaped = false
        let base = UnsafeRawPointer(p.baseAddress)
        while true {
            // Fast path: eight bytes at a time while none is a quote, a backslash, a control
            // character or non-ASCII (SWAR: each test sets the high bit of a byte that matches).
            if let base {
                while i + 8 <= n {
                    let x = base.loadUnaligned(fromByteOffset: i, as: UInt64.self)
                    let quote = x ^ 0x2222_2222_2222_2222
                    let backslash = x ^ 0x5C5C_5C5C_5C5C_5C5C
                    let zeroInQuote = (quote &- 0x0101_0101_0101_0101) & ~quote
                    let zeroInBackslash = (backslash &- 0x0101_0101_0101_0101) & ~backslash
                    let control = (x &- 0x2020_2020_2020_2020) & ~x
                    if (x | zeroInQuote | zeroInBackslash | control) & 0x8080_8080_8080_8080 != 0 { break }
                    i += 8
                }
            }
            // Then byte by byte: plain printable ASCII.
            while i < n {
                let c = p[i]
                if c >= 0x20 && c < 0x80 && c != UInt8(ascii: "\"") && c != UInt8(ascii: "\\") { i += 1 } else { break }
            }
            guard i < n else { throw fail(start - 1, "unterminated string") }
            let c = p[i]
            if c == UInt8(ascii: "\"") { break }
            if c == UInt8(ascii: "\\") {
                escaped = true
                guard i + 1 < n else { throw fail(i, "unterminated escape") }
                switch p[i + 1] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                    UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    i += 2
                case UInt8(ascii: "u"):
                    guard i + 5 < n else { throw fail(i, "incomplete \\u escape") }
                    for k in 2...5 where JSONParser.hexValue(p[i + k]) == nil {
                        throw fail(i + k, "invalid hex digit in \\u escape")
                    }
                    i += 6
                default:
                    throw fail(i, "invalid escape \\\(describe(p[i + 1]))")
                }
            } else if c < 0x20 {
                throw fail(i, "control character \(describe(c)) in a string")
            } else {
                i = try validateUTF8Sequence(p, i)
            }
        }
        nodes.append(
            JSONNode(
                kind: escaped ? .escapedString : .string, start: UInt32(start), length: UInt32(i - start),
                count: 0, end: UInt32(nodes.count + 1)))
        i += 1  // closing quote
    }

    /// Validates the multi-byte UTF-8 sequence at `i` (RFC 3629) and returns the offset after it.
    private func validateUTF8Sequence(_ p: UnsafeBufferPointer<UInt8>, _ i: Int) throws(JSONSyntaxError) -> Int {
        let n = p.count
        let b0 = p[i]
        @inline(__always) func cont(_ k: Int, _ lo: UInt8 = 0x80, _ hi: UInt8 = 0xBF) -> Bool {
            k < n && p[k] >= lo && p[k] <= hi
        }
        switch b0 {
        case 0xC2...0xDF:
            if cont(i + 1) { return i + 2 }
        case 0xE0:
            if cont(i + 1, 0xA0) && cont(i + 2) { return i + 3 }
        case 0xE1...0xEC, 0xEE...0xEF:
            if cont(i + 1) && cont(i + 2) { return i + 3 }
        case 0xED:
            if cont(i + 1, 0x80, 0x9F) && cont(i + 2) { return i + 3 }
        case 0xF0:
            if cont(i + 1, 0x90) && cont(i + 2) && cont(i + 3) { return i + 4 }
        case 0xF1...0xF3:
            if cont(i + 1) && cont(i + 2) && cont(i + 3) { return i + 4 }
        case 0xF4:
            if cont(i + 1, 0x80, 0x8F) && cont(i + 2) && cont(i + 3) { return i + 4 }
        default:
            break
        }
        throw fail(i, "invalid UTF-8 byte \(describe(b0)) in a string")
    }

    static func hexValue(_ c: UInt8) -> UInt32? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): UInt32(c - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(c - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(c - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    private func fail(_ offset: Int, _ reason: String) -> JSONSyntaxError {
        JSONSyntaxError(offset: offset, reason: reason)
    }

    private func describe(_ c: UInt8) -> String {
        c >= 0x20 && c < 0x7F ? "'\(Character(Unicode.Scalar(c)))'" : "0x" + String(c, radix: 16, uppercase: true)
    }
}
