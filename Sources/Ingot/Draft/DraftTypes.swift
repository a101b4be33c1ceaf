import Foundation

extension EntityBuilder {
    /// The attribute type `values` (what the records hold at key `name`) fit, as the pipeline
    /// file writes it, and why — or, for a guess to check, what to check.
    static func type(of values: [JSONValue], named name: String) -> (String, String?) {
        let present = values.filter { !$0.isNull }
        guard !present.isEmpty else { return ("string", "null in every record of the sample: check its type") }
        if present.allSatisfy({ $0.kind == .bool }) { return ("bool", nil) }
        let numbers = present.filter { $0.kind == .number }
        let strings = present.filter { $0.kind == .string }.compactMap(\.string)
        if numbers.count == present.count { return numberType(numbers, named: name) }
        if strings.count == present.count {
            // Numbers written as text beside a few words (SWAPI's "172" and "unknown").
            let numeric = strings.filter { Double($0) != nil }
            if numeric.count * 2 >= strings.count, let none = noneWords(strings) {
                let base = numeric.allSatisfy { Int64($0) != nil } ? "integer" : "double"
                return ("{type: \(base), coerce: true, values: {\(none.rules)}}", "numbers as text, and \(none.list) for none")
            }
            if !numeric.isEmpty, numeric.count == strings.count, strings.allSatisfy({ Int64($0) != nil }) {
                return ("string", "integers written as text: kept as text (say integer with coerce: true to store numbers)")
            }
            return stringType(strings)
        }
        // Numbers beside a few words ("unknown", "n/a"): the words are null.
        if numbers.count + strings.count == present.count, !numbers.isEmpty {
            if let none = noneWords(strings) {
                let (base, _) = numberType(numbers, named: name)
                let numeric = strings.contains { Double($0) != nil } ? ", coerce: true" : ""
                return (
                    "{type: \(base == "integer" ? base : "double"), values: {\(none.rules)}\(numeric)}",
                    "numbers, and \(none.list) for none"
                )
            }
        }
        if present.allSatisfy({ $0.kind == .array || $0.kind == .object }) { return ("json", nil) }
        return ("json", "of several kinds (\(Set(present.map(\.kind.rawValue)).sorted().joined(separator: ", "))): kept as JSON")
    }

    /// The words among `strings` that are no number, when they are a few short ones without
    /// digits ("unknown", "n/a": what stands for none beside numbers), as a `values:` rule's
    /// text and a list; `nil` otherwise (`"1,358"` is a number written otherwise, not a word).
    static func noneWords(_ strings: [String]) -> (rules: String, list: String)? {
        let words = Set(strings.filter { Double($0) == nil }).sorted()
        guard !words.isEmpty, words.count <= 3, words.allSatisfy({ $0.count <= 12 && !$0.contains(where: \.isNumber) }) else { return nil }
        return (words.map { "\(PipelineDraft.quoted($0)): null" }.joined(separator: ", "), words.joined(separator: ", "))
    }

    /// Integers (a date when the name says one and the values are Unix seconds or milliseconds of
    /// the years 2000–2100), or doubles.
    static func numberType(_ numbers: [JSONValue], named name: String) -> (String, String?) {
        let integers = numbers.compactMap(\.int64)
        guard integers.count == numbers.count else { return ("double", nil) }
        let lower = name.lowercased()
        let datelike = ["_at", "time", "date", "created", "updated", "modified", "timestamp", "_ts"].contains { lower.hasSuffix($0) }
        if datelike {
            if integers.allSatisfy({ (946_684_800...4_102_444_800).contains($0) }) {
                return ("{type: date, format: unix}", "Unix seconds, by its name and values")
            }
            if integers.allSatisfy({ (946_684_800_000...4_102_444_800_000).contains($0) }) {
                return ("{type: date, format: unix_ms}", "Unix milliseconds, by its name and values")
            }
        }
        return ("integer", nil)
    }

    /// A date in a format the sample's texts all have, a decimal (money: `"199.00"`), or text.
    static func stringType(_ strings: [String]) -> (String, String?) {
        for format in DateShape.allCases where strings.allSatisfy({ format.matches($0) }) { return (format.yaml, format.why) }
        if strings.allSatisfy({ isMoney($0) }) { return ("decimal", "numbers written as text with two decimals: exact as decimal") }
        return ("string", nil)
    }

    /// The date formats a draft recognises.
    enum DateShape: CaseIterable {
        case isoWithOffset, isoWithoutOffset, dateOnly, twitter, rfc2822

        var yaml: String {
            switch self {
            case .isoWithOffset, .isoWithoutOffset: "{type: date, format: iso8601}"
            case .dateOnly: "{type: date, format: \"yyyy-MM-dd\"}"
            case .twitter: "{type: date, format: \"EEE MMM dd HH:mm:ss Z yyyy\"}"
            case .rfc2822: "{type: date, format: \"EEE, dd MMM yyyy HH:mm:ss Z\"}"
            }
        }

        var why: String {
            switch self {
            case .isoWithOffset: "ISO 8601 times with their offset"
            case .isoWithoutOffset: "ISO 8601 times without offset: read as UTC (say timezone: for another)"
            case .dateOnly: "dates without a time"
            case .twitter: "Twitter's created_at"
            case .rfc2822: "RFC 2822 dates"
            }
        }

        func matches(_ text: String) -> Bool {
            let bytes = Array(text.utf8)
            func digits(_ range: Range<Int>) -> Bool {
                range.upperBound <= bytes.count && bytes[range].allSatisfy { (48...57).contains($0) }
            }
            func at(_ i: Int, _ c: Character) -> Bool { i < bytes.count && bytes[i] == c.asciiValue }
            let isoDate = bytes.count >= 10 && digits(0..<4) && at(4, "-") && digits(5..<7) && at(7, "-") && digits(8..<10)
            let isoTime = isoDate && bytes.count >= 16 && at(10, "T") && digits(11..<13) && at(13, ":") && digits(14..<16)
            let tail = text.utf8.dropFirst(16)
            let hasOffset = text.hasSuffix("Z") || tail.contains(UInt8(ascii: "+")) || tail.contains(UInt8(ascii: "-"))
            switch self {
            case .isoWithOffset: return isoTime && hasOffset
            case .isoWithoutOffset: return isoTime && !hasOffset
            case .dateOnly: return isoDate && bytes.count == 10
            case .twitter: return bytes.count == 30 && at(3, " ") && at(7, " ") && at(10, " ") && at(19, " ") && at(25, " ")
            case .rfc2822: return bytes.count >= 29 && at(3, ",") && at(4, " ") && digits(5..<7)
            }
        }
    }

    private static func isMoney(_ text: String) -> Bool {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[1].count == 2, parts[1].allSatisfy(\.isNumber) else { return false }
        let whole = parts[0].hasPrefix("-") ? parts[0].dropFirst() : parts[0]
        return !whole.isEmpty && whole.allSatisfy(\.isNumber)
    }
}
