import Foundation

/// A `for_each`'s URL template made ready once, so that a list of millions of parent records
/// becomes requests at the speed of string concatenation: 2M parent ids took 25 s before the
/// first request when each one parsed its URL, resolved it against the base and built the
/// origin rules again (Foundation's URL parser and `CharacterSet` were nine tenths of it).
///
/// A `path:` template whose values all come after a `/` or `?` of its literal text is resolved
/// once, with a placeholder for each value: the values are percent-encoded so that they cannot
/// add a segment, a query, a fragment or a dot segment (``ResourcesPageSource/encoded(_:inQuery:)``),
/// so putting them in the resolved URL gives what resolving each rendered URL would, and its
/// origin is the resolved skeleton's. A `url:` template, or a path whose first value could reach
/// the scheme or host (`{id}/detail`), is resolved and checked record by record.
struct ForEachTemplate {
    /// The template's parts in order, each value with whether it sits in the query.
    let parts: [(literal: String?, value: JSONKeyPath?, inQuery: Bool)]
    let isURL: Bool
    /// The source's configured URL, that relative templates resolve against.
    let base: String?
    let policy: OriginPolicy
    /// The resolved URL around the values (one more piece than values), when values cannot reach
    /// its scheme or host and the skeleton may be requested; `nil`: each URL is resolved and
    /// checked alone.
    let pieces: [String]?

    /// The URL a record's request goes to, or why it has none.
    enum Request: Equatable {
        case url(String)
        /// The record has no value (or `null`) at a key the template reads.
        case missing(JSONKeyPath)
        case notAURL(String)
        case refused(String, OriginPolicy.Refusal)
    }

    /// The request `record` makes.
    func request(for record: JSONValue) -> Request {
        var rendered = ""
        var values: [String] = []
        for part in parts {
            if let literal = part.literal {
                if pieces == nil { rendered += literal }
                continue
            }
            guard let path = part.value else { continue }
            guard let value = path.resolve(in: record), !value.isNull, let text = value.string ?? value.numberText else {
                return .missing(path)
            }
            let piece = isURL ? text : ResourcesPageSource.encoded(text, inQuery: part.inQuery)
            if pieces == nil { rendered += piece } else { values.append(piece) }
        }
        if let pieces {
            // Values cannot reach the scheme or host: the skeleton resolved once, filled in.
            var url = pieces[0]
            for (value, piece) in zip(values, pieces.dropFirst()) {
                url += value
                url += piece
            }
            return .url(url)
        }
        guard let base, let resolved = URLText.resolve(URLText.escapingInvalid(rendered), against: base) else { return .notAURL(rendered) }
        if let refusal = policy.refusal(ofRequest: resolved) {
            return .refused(resolved, refusal)
        }
        return .url(resolved)
    }

    /// `resolvingEach`: resolve and check every URL alone, as a template whose values could reach
    /// the host is (for tests, to compare both ways).
    init(_ forEach: ResourceConfig.ForEach, resolvingEach: Bool = false) {
        var parts: [(literal: String?, value: JSONKeyPath?, inQuery: Bool)] = []
        var inQuery = false
        var beforeFirstValue = ""
        var valueCount = 0
        for part in forEach.template.parts {
            switch part {
            case .literal(let text):
                parts.append((text, nil, inQuery))
                if text.contains("?") { inQuery = true }
                if valueCount == 0 { beforeFirstValue += text }
            case .value(let path):
                parts.append((nil, path, inQuery))
                valueCount += 1
            }
        }
        self.parts = parts
        isURL = forEach.isURL
        base = forEach.http.url
        policy = OriginPolicy(url: forEach.http.url, allowedHosts: forEach.http.allowedHosts)
        pieces = Self.skeleton(
            parts, base: base, policy: policy, valueCount: valueCount,
            fixed: !resolvingEach && !forEach.isURL && (beforeFirstValue.contains("/") || beforeFirstValue.contains("?")))
    }

    /// The resolved URL split at its values, or `nil` (see ``pieces``).
    private static func skeleton(
        _ parts: [(literal: String?, value: JSONKeyPath?, inQuery: Bool)], base: String?, policy: OriginPolicy, valueCount: Int,
        fixed: Bool
    ) -> [String]? {
        guard fixed, let base else { return nil }
        // Placeholders of unreserved characters: resolution leaves them as they are.
        let marks = (0..<valueCount).map { "IngotValue\($0)x7Q" }
        var rendered = ""
        var k = 0
        for part in parts {
            if let literal = part.literal {
                rendered += literal
            } else {
                rendered += marks[k]
                k += 1
            }
        }
        guard let resolved = URLText.resolve(URLText.escapingInvalid(rendered), against: base),
            policy.refusal(ofRequest: resolved) == nil
        else { return nil }
        var pieces: [String] = []
        var rest = Substring(resolved)
        for mark in marks {
            guard let range = rest.range(of: mark) else { return nil }
            pieces.append(String(rest[..<range.lowerBound]))
            rest = rest[range.upperBound...]
        }
        pieces.append(String(rest))
        return marks.allSatisfy({ mark in pieces.allSatisfy { !$0.contains(mark) } }) ? pieces : nil
    }
}

extension ResourcesPageSource {
    /// A record's value as one part of a `path:` template: percent-encoded so that it stays the
    /// one segment (or query value) the template puts it in — `/`, `?`, `#`, `;` and `%` always,
    /// `&`, `=` and `+` in the query, and a value that is all dots (`.`, `..`) as `%2E`s, which URL
    /// resolution does not remove (`items/{id}/detail` with `..` asked for `/api/detail`). Kept as
    /// they are: letters, digits and `-._~!$'()*,:@`, with `&=+` in a path segment. Byte by byte
    /// (UTF-8, uppercase hex).
    static func encoded(_ text: String, inQuery: Bool) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        var allDots = true
        let hex = Array("0123456789ABCDEF".utf8)
        for byte in text.utf8 {
            if byte != UInt8(ascii: ".") { allDots = false }
            if keeps(byte, inQuery: inQuery) {
                out.append(byte)
            } else {
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 15)]]
            }
        }
        if allDots && !out.isEmpty { return String(repeating: "%2E", count: out.count) }
        return String(decoding: out, as: UTF8.self)
    }

    /// Whether `byte` stands as itself in a path segment (or a query value).
    private static func keeps(_ byte: UInt8, inQuery: Bool) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "!"), UInt8(ascii: "$"),
            UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: "*"), UInt8(ascii: ","), UInt8(ascii: ":"),
            UInt8(ascii: "@"):
            true
        case UInt8(ascii: "&"), UInt8(ascii: "="), UInt8(ascii: "+"): !inQuery
        default: false
        }
    }
}
