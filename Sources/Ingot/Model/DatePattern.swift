/// A fixed date pattern such as `yyyy-MM-dd`, `dd/MM/yyyy HH:mm:ss` or Twitter's
/// `EEE MMM dd HH:mm:ss Z yyyy`: fields of fixed width and literal characters. `EEE` and `MMM` are
/// English day and month abbreviations (`Fri`, `Aug`), `Z` a numeric offset (`+0000`); text in
/// single quotes is literal (`yyyy-MM-dd'T'HH:mm`, Open-Meteo's hours; `''` is a quote), as in
/// Unicode's date patterns. Locale-free: the same text means the same date on every machine.
package struct DatePattern: Sendable, Equatable {
    package enum Token: Sendable, Equatable {
        case year, month, day, hour, minute, second, millisecond
        /// `EEE`: an English day abbreviation (`Mon` … `Sun`), read and checked as a name.
        case dayName
        /// `MMM`: an English month abbreviation (`Jan` … `Dec`).
        case monthName
        /// `Z`: a numeric offset, `+HHMM` or `-HHMM`.
        case offset
        case literal(UInt8)

        var width: Int {
            switch self {
            case .year: 4
            case .millisecond, .dayName, .monthName: 3
            case .offset: 5
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
            return "use yyyy, MM (or MMM), dd, HH, mm, ss, SSS, EEE, Z, punctuation and 'quoted' ASCII text only"
        }
        if !tokens.contains(.year) || !(tokens.contains(.month) || tokens.contains(.monthName)) || !tokens.contains(.day) {
            return "needs yyyy, MM (or MMM) and dd"
        }
        if tokens.contains(.month) && tokens.contains(.monthName) { return "a field appears twice" }
        if tokens.contains(.offset) && !tokens.contains(.hour) { return "Z needs HH" }
        if tokens.contains(.minute) && !tokens.contains(.hour) { return "mm needs HH" }
        for token in [Token.year, .month, .day, .hour, .minute, .second, .millisecond, .dayName, .monthName, .offset]
        where tokens.filter({ $0 == token }).count > 1 {
            return "a field appears twice"
        }
        return nil
    }

    private static func tokenize(_ pattern: String) -> [Token]? {
        let fields: [(String, Token)] = [
            ("yyyy", .year), ("EEE", .dayName), ("MMM", .monthName), ("MM", .month), ("dd", .day), ("HH", .hour), ("mm", .minute),
            ("ss", .second), ("SSS", .millisecond), ("Z", .offset),
        ]
        var tokens: [Token] = []
        var rest = Substring(pattern)
        outer: while let c = rest.first {
            if c == "'" {
                // 'T' is a T; '' is a quote.
                rest = rest.dropFirst()
                guard let close = rest.firstIndex(of: "'") else { return nil }
                let quoted = rest[..<close]
                if quoted.isEmpty { tokens.append(.literal(UInt8(ascii: "'"))) }
                for q in quoted {
                    guard let byte = q.asciiValue else { return nil }
                    tokens.append(.literal(byte))
                }
                rest = rest[rest.index(after: close)...]
                continue
            }
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
