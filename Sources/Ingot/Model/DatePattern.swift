/// A fixed date pattern such as `yyyy-MM-dd` or `dd/MM/yyyy HH:mm:ss`: fields of fixed width
/// and literal characters. Locale-free: the same text means the same date on every machine.
package struct DatePattern: Sendable, Equatable {
    package enum Token: Sendable, Equatable {
        case year, month, day, hour, minute, second, millisecond
        case literal(UInt8)

        var width: Int {
            switch self {
            case .year: 4
            case .millisecond: 3
            case .literal: 1
            default: 2
            }
        }
    }

    package var tokens: [Token]

    /// Whether the pattern has a time of day (else the stored value is `yyyy-MM-dd`).
    package var hasTime: Bool { tokens.contains(.hour) }

    package init?(_ pattern: String) {
        guard DatePattern.problem(in: pattern) == nil else { return nil }
        tokens = DatePattern.tokenize(pattern) ?? []
    }

    /// Why `pattern` is not a usable pattern, or `nil` when it is.
    package static func problem(in pattern: String) -> String? {
        guard let tokens = tokenize(pattern) else {
            return "use yyyy, MM, dd, HH, mm, ss, SSS and punctuation only"
        }
        for required in [Token.year, .month, .day] where !tokens.contains(required) {
            return "needs yyyy, MM and dd"
        }
        if tokens.contains(.minute) && !tokens.contains(.hour) { return "mm needs HH" }
        for token in [Token.year, .month, .day, .hour, .minute, .second, .millisecond]
        where tokens.filter({ $0 == token }).count > 1 {
            return "a field appears twice"
        }
        return nil
    }

    private static func tokenize(_ pattern: String) -> [Token]? {
        let fields: [(String, Token)] = [
            ("yyyy", .year), ("MM", .month), ("dd", .day), ("HH", .hour), ("mm", .minute), ("ss", .second),
            ("SSS", .millisecond),
        ]
        var tokens: [Token] = []
        var rest = Substring(pattern)
        outer: while let c = rest.first {
            for (text, token) in fields where rest.hasPrefix(text) {
                tokens.append(token)
                rest = rest.dropFirst(text.count)
                continue outer
            }
            guard c.isASCII, !c.isLetter, let byte = c.asciiValue else { return nil }
            tokens.append(.literal(byte))
            rest = rest.dropFirst()
        }
        return tokens
    }
}
