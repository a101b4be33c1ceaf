import Foundation

// The record mapper's values: a JSON value converted to an attribute's stored form, through the
// attribute's rules; and the failures mapping reports.
extension RecordMapper {
    // MARK: - Values

    /// Converts the value at `index` to its stored form by `rules`, or throws why it cannot —
    /// among them a value that is not one of the attribute's cases (a Swift enum's raw values):
    /// stored, it would be a row `count` sees and `fetch` cannot decode.
    mutating func convert(
        _ index: Int, _ rules: AttributeRules, _ c: inout Cursor
    ) throws(MappingFailure) -> ScalarValue {
        var value = try convertValue(index, rules, &c)
        if rules.foldsCase, case .text(let s) = value { value = .text(s.lowercased()) }
        guard rules.checksValues else { return value }
        let text: String? =
            switch value {
            case .text(let s): s
            case .integer(let i): String(i)
            default: nil
            }
        guard let text else { return value }
        if let cases = rules.cases, !cases.contains(text) {
            throw MappingFailure(
                reason: "\(c.preview(index)) is none of the attribute's cases (\(cases.sorted().prefix(12).joined(separator: ", ")))",
                code: .wrongType)
        }
        if let check = rules.rawValues, !check.accepts(text) {
            throw MappingFailure(reason: "\(c.preview(index)) is the raw value of no case of \(check.name)", code: .wrongType)
        }
        return value
    }

    private mutating func convertValue(
        _ index: Int, _ rules: AttributeRules, _ c: inout Cursor
    ) throws(MappingFailure) -> ScalarValue {
        let node = c.nodes[index]
        if node.kind == .null { return .null }
        if rules.rewritesText, node.kind != .array, node.kind != .object { return try convertRewritten(index, rules, &c) }
        let coerce = rules.coerce
        let converted: ScalarValue?
        switch rules.type {
        case .integer: converted = try RecordMapper.integer(index, coerce: coerce, c)
        case .double: converted = RecordMapper.double(node, coerce: coerce, c)
        case .decimal:
            // A number's digits or a string's text (decimals are often sent as strings), exact.
            converted =
                switch node.kind {
                case .integer, .double: DecimalText.canonical(c.raw(index)).map(ScalarValue.text)
                case .string, .escapedString: DecimalText.canonical(c.string(node)).map(ScalarValue.text)
                default: nil
                }
        case .string: converted = try RecordMapper.string(index, coerce: coerce, c)
        case .bool: converted = RecordMapper.bool(node, coerce: coerce, c)
        case .date(let format): converted = try date(index, format: format, coerce: coerce, c)
        case .json:
            let raw = c.compactJSON(index)
            if let failure = RecordMapper.unstorable(raw.utf8) { throw failure }
            converted = .text(raw)
        }
        guard let converted else {
            throw MappingFailure(reason: "expected \(rules.type.name), got \(node.kind.jsonName) \(c.preview(index))", code: .wrongType)
        }
        return converted
    }

    /// The value rules (`pattern:`, `values:`) work on the value's text (a string's content, a
    /// number's digits); what they produce is converted as a `coerce: true` value would be.
    private mutating func convertRewritten(
        _ index: Int, _ rules: AttributeRules, _ c: inout Cursor
    ) throws(MappingFailure) -> ScalarValue {
        let node = c.nodes[index]
        let text = node.kind == .string || node.kind == .escapedString ? c.string(node) : c.raw(index)
        if let pattern = rules.pattern, text.utf8.count > AttributeRules.Pattern.maxInput {
            throw MappingFailure(
                reason:
                    "\(c.preview(index)) is \(text.utf8.count) bytes, longer than pattern '\(pattern.text)' reads (\(AttributeRules.Pattern.maxInput))",
                code: .tooLarge)
        }
        guard let rewritten = rules.rewrite(text) else {
            throw MappingFailure(reason: "\(c.preview(index)) does not match pattern '\(rules.pattern?.text ?? "")'", code: .wrongType)
        }
        guard let result = rewritten else { return .null }
        return try convert(text: result, rules, preview: c.preview(index))
    }

    // Each type's conversion: `nil` is the wrong type (the caller says what was expected).

    private static func integer(_ index: Int, coerce: Bool, _ c: Cursor) throws(MappingFailure) -> ScalarValue? {
        let node = c.nodes[index]
        switch node.kind {
        case .integer:
            guard let v = c.int64(node) else {
                throw MappingFailure(reason: "integer \(c.preview(index)) does not fit in 64 bits", code: .outOfRange)
            }
            return .integer(v)
        case .double where coerce:
            let d = c.double(node)
            guard d.rounded() == d, abs(d) < 9.2e18 else { return nil }
            return .integer(Int64(d))
        case .string where coerce: return Int64(c.string(node).trimmingCharacters(in: .whitespaces)).map { .integer($0) }
        case .true where coerce: return .integer(1)
        case .false where coerce: return .integer(0)
        default: return nil
        }
    }

    private static func double(_ node: JSONNode, coerce: Bool, _ c: Cursor) -> ScalarValue? {
        switch node.kind {
        case .integer, .double: return .real(c.double(node))
        case .string where coerce:
            guard let v = Double(c.string(node).trimmingCharacters(in: .whitespaces)), v.isFinite else { return nil }
            return .real(v)
        default: return nil
        }
    }

    private static func string(_ index: Int, coerce: Bool, _ c: Cursor) throws(MappingFailure) -> ScalarValue? {
        let node = c.nodes[index]
        switch node.kind {
        case .string: return .text(c.string(node))
        case .escapedString:
            if let failure = RecordMapper.unstorable(c.bytes(node)) { throw failure }
            return .text(c.string(node))
        case .integer, .double, .true, .false: return coerce ? .text(c.raw(index)) : nil
        default: return nil
        }
    }

    private static func bool(_ node: JSONNode, coerce: Bool, _ c: Cursor) -> ScalarValue? {
        switch node.kind {
        case .true: return .bool(true)
        case .false: return .bool(false)
        case .integer where coerce:
            switch c.int64(node) {
            case 0: return .bool(false)
            case 1: return .bool(true)
            default: return nil
            }
        case .string where coerce:
            switch c.string(node).lowercased() {
            case "true", "1": return .bool(true)
            case "false", "0": return .bool(false)
            default: return nil
            }
        default: return nil
        }
    }

    private mutating func date(_ index: Int, format: DateFormat, coerce: Bool, _ c: Cursor) throws(MappingFailure) -> ScalarValue? {
        let node = c.nodes[index]
        switch (node.kind, format) {
        case (.string, .iso8601), (.string, .pattern), (.escapedString, .iso8601), (.escapedString, .pattern):
            let converted =
                node.kind == .string
                ? dates.convert(c.bytes(node), format: format) : dates.convert(ArraySlice(c.string(node).utf8), format: format)
            guard let date = converted else {
                let why = dates.zoneProblem.map { ": " + $0 } ?? ""
                throw MappingFailure(reason: "\(c.preview(index)) is not a date in format \(format.name)\(why)", code: .notADate)
            }
            return .text(date)
        case (.integer, .unixSeconds), (.double, .unixSeconds), (.integer, .unixMilliseconds), (.double, .unixMilliseconds):
            guard let date = dates.convert(numberText: c.raw(index), format: format) else {
                throw MappingFailure(reason: "\(c.preview(index)) is out of the range of dates", code: .outOfRange)
            }
            return .text(date)
        case (.string, .unixSeconds), (.string, .unixMilliseconds):
            let text = c.string(node).trimmingCharacters(in: .whitespaces)
            guard coerce, Double(text) != nil, let date = dates.convert(numberText: text, format: format) else { return nil }
            return .text(date)
        default: return nil
        }
    }

    /// Converts `text` a value rule produced to the attribute's type, as a `coerce: true` value
    /// would be.
    mutating func convert(text: String, _ rules: AttributeRules, preview: String) throws(MappingFailure) -> ScalarValue {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        func wrong() -> MappingFailure {
            MappingFailure(reason: "\(preview) (as '\(text)' after the value rules) is not \(rules.type.name)", code: .wrongType)
        }
        switch rules.type {
        case .integer:
            if let v = Int64(trimmed) { return .integer(v) }
            guard let d = Double(trimmed), d.rounded() == d, abs(d) < 9.2e18 else { throw wrong() }
            return .integer(Int64(d))
        case .double:
            guard let v = Double(trimmed), v.isFinite else { throw wrong() }
            return .real(v)
        case .decimal:
            guard let v = DecimalText.canonical(trimmed) else { throw wrong() }
            return .text(v)
        case .string:
            if text.utf8.contains(0) {
                throw MappingFailure(reason: "text holding U+0000 cannot be stored alike everywhere", code: .unstorable)
            }
            return .text(text)
        case .bool:
            switch trimmed.lowercased() {
            case "true", "1": return .bool(true)
            case "false", "0": return .bool(false)
            default: throw wrong()
            }
        case .date(let format):
            switch format {
            case .iso8601, .pattern:
                guard let date = dates.convert(ArraySlice(text.utf8), format: format) else {
                    let why = dates.zoneProblem.map { ": " + $0 } ?? ""
                    throw MappingFailure(
                        reason: "\(preview) (as '\(text)') is not a date in format \(format.name)\(why)", code: .notADate)
                }
                return .text(date)
            case .unixSeconds, .unixMilliseconds:
                guard Double(trimmed) != nil, let date = dates.convert(numberText: trimmed, format: format) else { throw wrong() }
                return .text(date)
            }
        case .json:
            var quoted = ""
            JSONText.quote(text, into: &quoted)
            return .text(quoted)
        }
    }

    /// Why JSON text (a string's content with its escapes, or a whole value, keys included)
    /// cannot be stored the same way by every backend, if it cannot: the escape `\u0000` (NUL,
    /// which PostgreSQL's text and jsonb refuse) or a lone surrogate escape such as `\ud800`
    /// (which jsonb refuses, and which text could only keep as U+FFFD, merging distinct values).
    /// One rule for every backend: the same pages give the same tables in SQLite and PostgreSQL.
    static func unstorable(_ json: some Collection<UInt8>) -> MappingFailure? {
        // Only escapes matter, and most text has none (memchr where the bytes are contiguous: a
        // `json` attribute's whole text is searched for every record).
        let backslash = UInt8(ascii: "\\")
        let escapes =
            json.withContiguousStorageIfAvailable { bytes in
                bytes.baseAddress.map { memchr($0, Int32(backslash), bytes.count) != nil } ?? false
            }
            ?? json.contains(backslash)
        guard escapes else { return nil }
        let bytes = Array(json)
        func hex4(_ k: Int) -> UInt32? {
            guard k + 4 <= bytes.count else { return nil }
            var v: UInt32 = 0
            for j in k..<k + 4 {
                guard let d = JSONParser.hexValue(bytes[j]) else { return nil }
                v = v << 4 | d
            }
            return v
        }
        var i = 0
        while i + 1 < bytes.count {
            guard bytes[i] == UInt8(ascii: "\\") else {
                i += 1
                continue
            }
            guard bytes[i + 1] == UInt8(ascii: "u"), let u = hex4(i + 2) else {
                i += 2  // another escape: skip the escaped character
                continue
            }
            i += 6
            if u == 0 { return .unstorableNUL }
            if u >= 0xDC00 && u < 0xE000 { return .unstorableSurrogate }
            if u >= 0xD800 && u < 0xDC00 {
                // A high surrogate must be followed by a low one.
                guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u"),
                    let low = hex4(i + 2), low >= 0xDC00 && low < 0xE000
                else { return .unstorableSurrogate }
                i += 6
            }
        }
        return nil
    }
}

// MARK: - Cursor

/// Why a record cannot be mapped, and where: a path built from the inside out as the failure
/// travels up to the record.
struct MappingFailure: Error {
    enum Component {
        case key(String)
        case index(Int)
        /// `[key=value]`: the element picked by a member's value.
        case match(String, String)
    }
    var reason: String
    var entity: String?
    var code: RejectReason
    /// Innermost component last.
    var path: [Component] = []

    init(reason: String, entity: String? = nil, code: RejectReason) {
        self.reason = reason
        self.entity = entity
        self.code = code
    }

    /// Text holding U+0000, which PostgreSQL cannot store (refused in every backend alike).
    static let unstorableNUL = MappingFailure(
        reason: "the text holds a NUL character (\\u0000), which a database cannot store in text or JSON", code: .unstorable)
    /// Text holding a lone UTF-16 surrogate escape, which is no character at all.
    static let unstorableSurrogate = MappingFailure(
        reason: "the text holds a lone surrogate escape (\\ud800–\\udfff without its pair), which is no Unicode character",
        code: .unstorable)

    func prepending(_ component: Component) -> MappingFailure { prepending([component]) }

    /// `components` are given innermost first.
    func prepending(_ components: [Component]) -> MappingFailure {
        var copy = self
        copy.path = components.reversed() + path
        return copy
    }

    /// `.dogs[1].id`
    var pathText: String {
        path.map {
            switch $0 {
            case .key(let k): "." + k
            case .index(let i): "[\(i)]"
            case .match(let k, let v): "[\(k)=\(v)]"
            }
        }.joined()
    }

    /// `dogs[1].vet`: `components` outermost first, without a leading dot.
    static func render(_ components: [Component]) -> String {
        var text = ""
        for component in components {
            switch component {
            case .key(let k): text += text.isEmpty ? k : "." + k
            case .index(let i): text += "[\(i)]"
            case .match(let k, let v): text += "[\(k)=\(v)]"
            }
        }
        return text
    }
}

extension JSONNode.Kind {
    var jsonName: String {
        switch self {
        case .null: "null"
        case .true, .false: "bool"
        case .integer, .double: "number"
        case .string, .escapedString: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

extension AttributeType {
    var name: String {
        switch self {
        case .integer: "integer"
        case .double: "double"
        case .decimal: "decimal"
        case .string: "string"
        case .bool: "bool"
        case .date: "date"
        case .json: "json"
        }
    }
}

extension DateFormat {
    var name: String {
        switch self {
        case .iso8601: "iso8601"
        case .pattern(let p, _): p
        case .unixSeconds: "unix"
        case .unixMilliseconds: "unix_ms"
        }
    }
}
