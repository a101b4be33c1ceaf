/// A URL as the text it is, never decoded and encoded again: the one place Ingot reads a URL's
/// parts, sets a query value, resolves a reference or hides a secret in one.
///
/// Foundation's `URLComponents.queryItems` decodes every escape and encodes again with its own
/// rules, so a URL that went through it came out changed: `%2B` and `%2F` went out as `+` and `/`
/// (a bare `+` is a space to a server), an escape beside raw brackets was escaped twice
/// (`page[after]=abc%3D%3D` → `%253D%253D`), a value's `=` was escaped and its `+` not. Here a
/// URL taken from a response, a header or the pipeline file keeps every byte it has; only a value
/// Ingot puts into a URL is escaped, as form data in a query (``formEncoded(_:)``: `+` → `%2B`)
/// and as one segment in a path (the `for_each` template's encoding). docs/reliability.md,
/// "URLs sent as written".
package enum URLText {
    /// The parts of `url` as written (RFC 3986, appendix B): the scheme (without `:`), the
    /// authority (without `//`), the path, the query (without `?`) and the fragment (without `#`).
    package struct Parts: Equatable, Sendable {
        package var scheme: Substring?
        package var authority: Substring?
        package var path: Substring
        package var query: Substring?
        package var fragment: Substring?

        package init(_ url: Substring) {
            var rest = url[...]
            if let colon = rest.firstIndex(where: { $0 == ":" || $0 == "/" || $0 == "?" || $0 == "#" }), rest[colon] == ":",
                URLText.isScheme(rest[..<colon])
            {
                scheme = rest[..<colon]
                rest = rest[rest.index(after: colon)...]
            }
            if rest.hasPrefix("//") {
                let start = rest.index(rest.startIndex, offsetBy: 2)
                let end = rest[start...].firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
                authority = rest[start..<end]
                rest = rest[end...]
            }
            if let hash = rest.firstIndex(of: "#") {
                fragment = rest[rest.index(after: hash)...]
                rest = rest[..<hash]
            }
            if let question = rest.firstIndex(of: "?") {
                query = rest[rest.index(after: question)...]
                rest = rest[..<question]
            }
            path = rest
        }

        /// The URL again (RFC 3986, 5.3): the parts joined, each as it is.
        package var text: String {
            var out = ""
            if let scheme { out += scheme + ":" }
            if let authority { out += "//" + authority }
            out += path
            if let query { out += "?" + query }
            if let fragment { out += "#" + fragment }
            return out
        }

        /// The host of the authority, lowercased, without user info, port or IPv6 brackets.
        package var host: String? {
            guard var hostPort = authority else { return nil }
            if let at = hostPort.lastIndex(of: "@") { hostPort = hostPort[hostPort.index(after: at)...] }
            if hostPort.hasPrefix("[") {
                guard let close = hostPort.firstIndex(of: "]") else { return nil }
                return hostPort[hostPort.index(after: hostPort.startIndex)..<close].lowercased()
            }
            return (hostPort.firstIndex(of: ":").map { hostPort[..<$0] } ?? hostPort).lowercased()
        }

        /// The port of the authority: `nil` when none is written, `.invalid` when it is not a port.
        package var port: Port {
            guard var hostPort = authority else { return .none }
            if let at = hostPort.lastIndex(of: "@") { hostPort = hostPort[hostPort.index(after: at)...] }
            if hostPort.hasPrefix("["), let close = hostPort.firstIndex(of: "]") { hostPort = hostPort[hostPort.index(after: close)...] }
            guard let colon = hostPort.lastIndex(of: ":") else { return .none }
            let digits = hostPort[hostPort.index(after: colon)...]
            if digits.isEmpty { return .none }
            guard digits.utf8.count <= 5, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = Int(digits), n <= 65535 else {
                return .invalid
            }
            return .number(n)
        }

        /// A written port.
        package enum Port: Equatable, Sendable {
            case none
            case number(Int)
            case invalid
        }
    }

    /// Whether `text` is a scheme: a letter, then letters, digits, `+`, `-` or `.`.
    static func isScheme(_ text: Substring) -> Bool {
        guard let first = text.utf8.first, isLetter(first) else { return false }
        return text.utf8.allSatisfy { isLetter($0) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2B || $0 == 0x2D || $0 == 0x2E }
    }

    private static func isLetter(_ c: UInt8) -> Bool { (c | 0x20) >= 0x61 && (c | 0x20) <= 0x7A }

    // MARK: - Resolution

    /// `reference` resolved against `base` (RFC 3986, 5.2): every byte of both kept, only dot
    /// segments removed. `nil` when `base` has no scheme (nothing absolute to resolve against).
    package static func resolve(_ reference: String, against base: String) -> String? {
        let r = Parts(reference[...])
        let b = Parts(base[...])
        guard b.scheme != nil else { return r.scheme != nil ? reference : nil }
        // 5.2.2: the reference's own parts from the first it gives (scheme, authority, path),
        // the base's before that; its path merged with the base's when relative (5.2.3).
        if r.scheme != nil || r.authority != nil {
            return Parts(
                scheme: r.scheme ?? b.scheme, authority: r.authority, path: removingDotSegments(String(r.path)), query: r.query,
                fragment: r.fragment
            ).text
        }
        let path: String
        if r.path.isEmpty {
            path = String(b.path)
        } else if r.path.hasPrefix("/") {
            path = removingDotSegments(String(r.path))
        } else if b.authority != nil && b.path.isEmpty {
            path = removingDotSegments("/" + r.path)
        } else {
            path = removingDotSegments((b.path.lastIndex(of: "/").map { String(b.path[...$0]) } ?? "") + r.path)
        }
        let query = r.path.isEmpty ? r.query ?? b.query : r.query
        return Parts(scheme: b.scheme, authority: b.authority, path: path, query: query, fragment: r.fragment).text
    }

    /// `path` without `.` and `..` segments (RFC 3986, 5.2.4).
    static func removingDotSegments(_ path: String) -> String {
        guard path.contains(".") else { return path }
        var input = Substring(path)
        var output: [Substring] = []
        while !input.isEmpty {
            if input.hasPrefix("../") {
                input = input.dropFirst(3)
            } else if input.hasPrefix("./") {
                input = input.dropFirst(2)
            } else if input.hasPrefix("/./") {
                input = input.dropFirst(2)
            } else if input == "/." {
                input = "/"
            } else if input.hasPrefix("/../") {
                input = input.dropFirst(3)
                if !output.isEmpty { output.removeLast() }
            } else if input == "/.." {
                input = "/"
                if !output.isEmpty { output.removeLast() }
            } else if input == "." || input == ".." {
                input = ""
            } else {
                // The first segment, with its leading "/" if any, up to the next "/".
                let start = input.hasPrefix("/") ? input.index(after: input.startIndex) : input.startIndex
                let end = input[start...].firstIndex(of: "/") ?? input.endIndex
                output.append(input[..<end])
                input = input[end...]
            }
        }
        return output.joined()
    }

    // MARK: - The query

    /// `url` with each of `items` set as `name=value` (the name and value form-encoded), replacing
    /// the pairs of that name (compared decoded: `page%5Bsize%5D` is `page[size]`), appended after
    /// the others. Every other byte of `url` is kept.
    package static func settingQuery(_ url: String, _ items: [(name: String, value: String)]) -> String {
        guard !items.isEmpty else { return url }
        let names = Set(items.map(\.name))
        var pairs = queryPairs(of: url).filter { !names.contains(decoded($0.name)) }.map { String($0.whole) }
        for item in items { pairs.append(formEncoded(item.name) + "=" + formEncoded(item.value)) }
        return replacingQuery(of: url, with: pairs)
    }

    /// `url` without the query pairs whose (decoded) name `drop` says, every other byte kept; the
    /// `?` goes too when no pair is left.
    package static func removingQuery(_ url: String, where drop: (String) -> Bool) -> String {
        let pairs = queryPairs(of: url)
        guard pairs.contains(where: { drop(decoded($0.name)) }) else { return url }
        return replacingQuery(of: url, with: pairs.filter { !drop(decoded($0.name)) }.map { String($0.whole) })
    }

    /// `url` with the value of every query pair whose (decoded) name `hide` says replaced by
    /// `replacement`, every other byte kept.
    package static func replacingQueryValues(_ url: String, with replacement: String, where hide: (String) -> Bool) -> String {
        let pairs = queryPairs(of: url)
        guard pairs.contains(where: { hide(decoded($0.name)) }) else { return url }
        return replacingQuery(
            of: url, with: pairs.map { hide(decoded($0.name)) ? String($0.name) + "=" + replacement : String($0.whole) })
    }

    /// The (decoded) value of the first query pair named `name`.
    package static func queryValue(_ url: String, named name: String) -> String? {
        queryPairs(of: url).first { decoded($0.name) == name }.map { decoded($0.value) }
    }

    /// The query's `&`-separated pairs as written, each split at its first `=`.
    static func queryPairs(of url: String) -> [(whole: Substring, name: Substring, value: Substring)] {
        guard let query = Parts(url[...]).query, !query.isEmpty else { return [] }
        return query.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            if let eq = pair.firstIndex(of: "=") { return (pair, pair[..<eq], pair[pair.index(after: eq)...]) }
            return (pair, pair, pair[pair.endIndex...])
        }
    }

    private static func replacingQuery(of url: String, with pairs: [String]) -> String {
        var parts = Parts(url[...])
        let joined = pairs.joined(separator: "&")
        parts.query = pairs.isEmpty ? nil : Substring(joined)
        return parts.text
    }

    // MARK: - Encoding

    /// `url` as written, with only the bytes a URL cannot hold percent-encoded (a space, a quote,
    /// a control byte, non-ASCII, a `%` that starts no escape): its escapes, brackets and `+`
    /// are kept as they are. Foundation's `URL(string:)`, given a string it must encode, encodes
    /// every `%` too, so `%2F` became `%252F` as soon as the URL also held a space or a bracket.
    package static func escapingInvalid(_ url: String) -> String {
        func allowed(_ c: UInt8) -> Bool { isUnreserved(c) || "%:/?#[]@!$&'()*+,;=".utf8.contains(c) }
        guard !url.utf8.allSatisfy(allowed) || url.utf8.contains(0x25) else { return url }
        let bytes = Array(url.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 16)
        let digits = Array("0123456789ABCDEF".utf8)
        for (k, c) in bytes.enumerated() {
            let isEscape = c == 0x25 && k + 2 < bytes.count && hexValue(bytes[k + 1]) != nil && hexValue(bytes[k + 2]) != nil
            if (allowed(c) && c != 0x25) || isEscape {
                out.append(c)
            } else {
                out += [UInt8(ascii: "%"), digits[Int(c >> 4)], digits[Int(c & 15)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// `text` as a query name or value: letters, digits and `-._~` kept, every other UTF-8 byte
    /// percent-encoded in upper-case hex (`+` → `%2B`, a space → `%20`, `=` → `%3D`).
    package static func formEncoded(_ text: String) -> String { percentEncoded(text, keeping: isUnreserved) }

    /// `text` percent-encoded (UTF-8, upper- or lower-case hex), keeping the bytes `keep` says.
    package static func percentEncoded(_ text: String, lowercaseHex: Bool = false, keeping keep: (UInt8) -> Bool) -> String {
        guard !text.utf8.allSatisfy(keep) else { return text }
        let hex = Array((lowercaseHex ? "0123456789abcdef" : "0123456789ABCDEF").utf8)
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count + 16)
        for byte in text.utf8 {
            if keep(byte) { out.append(byte) } else { out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 15)]] }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Every form a URL may hold `text` in: as written, with only what a URL cannot carry
    /// escaped (a non-ASCII tenant in a path), and percent-encoded as RFC 3986 says (unreserved
    /// characters kept, UTF-8) with upper- and with lower-case hex (a value written into a query,
    /// or echoed URL-encoded by a server). Each once, in that order.
    package static func forms(of text: String) -> [String] {
        var forms: [String] = []
        for form in [
            text, escapingInvalid(text), percentEncoded(text, keeping: isUnreserved),
            percentEncoded(text, lowercaseHex: true, keeping: isUnreserved),
        ] where !forms.contains(form) {
            forms.append(form)
        }
        return forms
    }

    /// RFC 3986's unreserved characters: letters, digits, `-`, `.`, `_`, `~`.
    package static func isUnreserved(_ c: UInt8) -> Bool {
        isLetter(c) || (c >= 0x30 && c <= 0x39) || c == 0x2D || c == 0x2E || c == 0x5F || c == 0x7E
    }

    /// `text` with its escapes decoded and, as form data reads it, `+` as a space; an escape that
    /// is not one (`%zz`, or bytes that are not UTF-8) is kept as written.
    package static func decoded(_ text: Substring) -> String {
        guard text.utf8.contains(where: { $0 == 0x25 || $0 == 0x2B }) else { return String(text) }
        let bytes = Array(text.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var k = 0
        while k < bytes.count {
            let c = bytes[k]
            if c == 0x25, k + 2 < bytes.count, let hi = hexValue(bytes[k + 1]), let lo = hexValue(bytes[k + 2]) {
                out.append(hi << 4 | lo)
                k += 3
            } else {
                out.append(c == 0x2B ? 0x20 : c)
                k += 1
            }
        }
        return String(validating: out, as: UTF8.self) ?? String(text)
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case 0x30...0x39: c - 0x30
        case 0x41...0x46: c - 0x41 + 10
        case 0x61...0x66: c - 0x61 + 10
        default: nil
        }
    }
}

extension URLText.Parts {
    /// Parts as given.
    package init(scheme: Substring?, authority: Substring?, path: String, query: Substring?, fragment: Substring?) {
        self.scheme = scheme
        self.authority = authority
        self.path = Substring(path)
        self.query = query
        self.fragment = fragment
    }
}
