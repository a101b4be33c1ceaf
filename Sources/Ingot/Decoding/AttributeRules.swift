import Foundation

/// What a value of one attribute goes through before it is stored: its text rewritten by the
/// value rules (`values`, `pattern`, `grouping`), its conversion to the attribute's type (strict,
/// or as `coerce: true` for text a rule produced), and what a value that cannot be converted does
/// (`on_invalid`): docs/pipelines.md. One per
/// attribute slot of a ``MappingPlan/EntityPlan``; the record mapper asks it for every value, and
/// takes the plain-text fast path (a JSON string's bytes stored as they are) only when it says no
/// rule would change the text.
///
/// Immutable, and a class: the mapper hands an attribute's rules to the conversion for every
/// value it converts, and a struct of them was copied each time — a retain and a release of each
/// reference it holds (about 1.5 % of a people run's instructions); a reference is one.
final class AttributeRules: Sendable {
    /// The stored type.
    let type: AttributeType
    /// `coerce: true`: text is converted to the type (`"42"` → 42).
    let coerce: Bool
    /// The text rules (`values`, `pattern`, `grouping`), when the attribute has any: one reference,
    /// so that asking an attribute's rules for every value copies no dictionary or string.
    let text: TextRules?
    /// `on_invalid: null`: a value that cannot be converted is stored as NULL.
    let nullOnInvalid: Bool
    /// The only values the attribute holds (a Swift enum's raw values, ``Attribute/cases``), as
    /// text; `nil`: any.
    let cases: Set<String>?
    /// The values a Swift enum that is not `CaseIterable` holds, asked of the enum
    /// (``Attribute/rawValues``).
    let rawValues: RawValueCheck?
    /// Text stored in lower case (``Attribute/foldsCase``).
    let foldsCase: Bool
    /// The values are checked against a closed set (``cases`` or ``rawValues``): asked for every
    /// value converted, without copying either out.
    let checksValues: Bool

    /// `values:`, `pattern:` and `grouping:`, as the mapper applies them.
    final class TextRules: Sendable {
        /// `values:`: replacements of a value's text (`nil`: NULL), before conversion.
        let values: [String: String?]
        /// `pattern:`, compiled: the text becomes its one capture group.
        let pattern: Pattern?
        /// `grouping:`: removed from the text before conversion.
        let grouping: String?

        init(values: [String: String?], pattern: Pattern?, grouping: String?) {
            self.values = values
            self.pattern = pattern
            self.grouping = grouping
        }
    }

    var values: [String: String?] { text?.values ?? [:] }
    var pattern: Pattern? { text?.pattern }
    var grouping: String? { text?.grouping }

    /// A compiled `pattern:`.
    ///
    /// ICU's engine backtracks with no bound: `(\d+)$` is quadratic in the value's length (60 KB
    /// took 50 s), and a repetition of a repetition (`^(\d+)+$`) exponential. So a pattern reads
    /// values of at most ``maxInput`` bytes (a longer one is a rejected record, `too_large`), and
    /// nested repetitions are refused at validation (``nestedRepetition(in:)``): each match then
    /// takes at most milliseconds, and a stopped run never waits on a lane.
    final class Pattern: @unchecked Sendable {  // NSRegularExpression is immutable and thread-safe (Foundation's documentation)
        /// The longest value a pattern reads, in bytes. SWAPI's URLs and Slack's timestamps are
        /// under 100.
        static let maxInput = 4096

        /// Where `pattern` repeats a group that itself repeats without bound (`(a+)+`, `(a*)*`,
        /// `(a|b+){2,}`): the group's text, or `nil`. Escapes and character classes are skipped.
        static func nestedRepetition(in pattern: String) -> String? {
            let chars = Array(pattern)
            var groups: [(start: Int, repeats: Bool)] = []
            var i = 0
            func unbounded(at k: Int) -> Bool {
                guard k < chars.count else { return false }
                if chars[k] == "+" || chars[k] == "*" { return true }
                guard chars[k] == "{", let close = chars[k...].firstIndex(of: "}") else { return false }
                let body = String(chars[(k + 1)..<close])
                return body.hasSuffix(",") || (body.split(separator: ",").last.flatMap { Int($0) } ?? 0) > 1
            }
            while i < chars.count {
                switch chars[i] {
                case "\\":
                    i += 1
                case "[":
                    // A class: skip to its closing bracket (a leading ] or an escaped one is literal).
                    var k = i + 1
                    if k < chars.count && chars[k] == "^" { k += 1 }
                    if k < chars.count && chars[k] == "]" { k += 1 }
                    while k < chars.count && chars[k] != "]" { k += chars[k] == "\\" ? 2 : 1 }
                    i = k
                case "(":
                    groups.append((i, false))
                case ")":
                    guard let group = groups.popLast() else { break }
                    if group.repeats && unbounded(at: i + 1) { return String(chars[group.start...i]) }
                    // A group that repeats makes its enclosing group repeat too.
                    if (group.repeats || unbounded(at: i + 1)) && !groups.isEmpty { groups[groups.count - 1].repeats = true }
                default:
                    if unbounded(at: i) && !groups.isEmpty { groups[groups.count - 1].repeats = true }
                }
                i += 1
            }
            return nil
        }

        let text: String
        let regex: NSRegularExpression
        init?(_ text: String) {
            guard let regex = try? NSRegularExpression(pattern: text), regex.numberOfCaptureGroups == 1 else { return nil }
            self.text = text
            self.regex = regex
        }

        /// What the capture group matched in `value`, or `nil` when the pattern does not match.
        func capture(in value: String) -> String? {
            let range = NSRange(value.startIndex..., in: value)
            guard let match = regex.firstMatch(in: value, range: range), let captured = Range(match.range(at: 1), in: value) else {
                return nil
            }
            return String(value[captured])
        }
    }

    init(_ attribute: Attribute) {
        type = attribute.type
        coerce = attribute.coerce
        nullOnInvalid = attribute.nullOnInvalid
        cases = attribute.cases.map(Set.init)
        rawValues = attribute.rawValues
        foldsCase = attribute.foldsCase
        checksValues = attribute.cases != nil || attribute.rawValues != nil
        text =
            attribute.rewritesText
            ? TextRules(values: attribute.values, pattern: attribute.pattern.flatMap(Pattern.init), grouping: attribute.grouping) : nil
        rewritesText = text != nil
    }

    /// `text` (a `default:` or `const:` of the pipeline file) as the stored value of `type`, or
    /// `nil` when it is not one.
    static func storedValue(_ text: String, type: AttributeType) -> ScalarValue? {
        switch type {
        case .integer: Int64(text).map(ScalarValue.integer)
        case .double: Double(text).flatMap { $0.isFinite ? ScalarValue.real($0) : nil }
        case .decimal: DecimalText.canonical(text).map(ScalarValue.text)
        case .string: .text(text)
        case .bool: ["true": ScalarValue.bool(true), "false": .bool(false)][text.lowercased()]
        case .date(let format):
            {
                var dates = DateConverter()
                switch format {
                case .unixSeconds, .unixMilliseconds:
                    return Double(text).flatMap { dates.convert(number: $0, format: format) }.map(ScalarValue.text)
                default: return dates.convert(ArraySlice(text.utf8), format: format).map(ScalarValue.text)
                }
            }()
        case .json: (try? JSONDocument(bytes: Array(text.utf8))) != nil ? .text(text) : nil
        }
    }

    /// Whether a rule rewrites a value's text before conversion (asked for every value: kept).
    let rewritesText: Bool

    /// Whether a JSON string is stored exactly as the page spells it: a string attribute that no
    /// rule rewrites. A rule added here must make this `false` when it applies.
    var storesTextAsIs: Bool {
        if case .string = type { !rewritesText && cases == nil && rawValues == nil && !foldsCase } else { false }
    }

    /// The text the rules make of a value's `text`: `.some(nil)` for NULL, `.some(text)` to
    /// convert, or `nil` when the pattern does not match.
    func rewrite(_ text: String) -> String?? {
        if let replaced = values[text] { return .some(replaced) }
        var out = text
        if let pattern {
            guard let captured = pattern.capture(in: out) else { return nil }
            out = captured
        }
        if let grouping { out = out.replacingOccurrences(of: grouping, with: "") }
        return .some(out)
    }
}
