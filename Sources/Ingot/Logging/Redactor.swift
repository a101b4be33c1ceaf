import Foundation

/// Replaces secret values in text that is about to be shown (a log line, an error, a reject's
/// source, `--dry-run`), and finds the secrets of a database URL. One place for both backends
/// and the fetch side.
///
/// A secret is replaced whole, by `REDACTED`. A secret of 8 bytes or more is replaced wherever it
/// occurs; a shorter one only where it stands as a token of its own (no letter or digit right
/// before or after it): replacing every `h` of a one-letter token turned `http://` into
/// `hREDACTEDREDACTEDp://`, which also told the token.
struct Redactor: Sendable {
    /// The secret values, longest first (a secret holding a shorter one is replaced whole).
    private(set) var secrets: [String] = []

    init(_ secrets: [String] = []) {
        for secret in secrets { add(secret) }
    }

    /// Adds `secret` and the forms a URL holds it in (``URLText/forms(of:)``), so that a value
    /// written into a URL, or echoed URL-encoded by a server, is hidden too.
    mutating func add(_ secret: String) {
        guard !secret.isEmpty else { return }
        for form in URLText.forms(of: secret) where !secrets.contains(form) { secrets.append(form) }
        secrets.sort { $0.utf8.count > $1.utf8.count }
    }

    /// The shortest secret replaced wherever it occurs; shorter ones only as whole tokens.
    static let anywhereLength = 8

    /// `text` with every secret replaced by `REDACTED`.
    func scrub(_ text: String) -> String {
        var out = text
        for secret in secrets where out.contains(secret) {
            out =
                secret.utf8.count >= Redactor.anywhereLength
                ? out.replacingOccurrences(of: secret, with: "REDACTED") : Redactor.replacingTokens(secret, in: out)
        }
        return out
    }

    /// Replaces the occurrences of `secret` in `text` that have no letter or digit beside them.
    private static func replacingTokens(_ secret: String, in text: String) -> String {
        let hay = Array(text.utf8)
        let needle = Array(secret.utf8)
        func isWord(_ c: UInt8) -> Bool {
            c >= 0x80 || (c | 0x20 >= UInt8(ascii: "a") && c | 0x20 <= UInt8(ascii: "z"))
                || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
        }
        var out: [UInt8] = []
        out.reserveCapacity(hay.count)
        var k = 0
        while k < hay.count {
            if k + needle.count <= hay.count, hay[k..<k + needle.count].elementsEqual(needle),
                k == 0 || !isWord(hay[k - 1]), k + needle.count == hay.count || !isWord(hay[k + needle.count])
            {
                out += Array("REDACTED".utf8)
                k += needle.count
            } else {
                out.append(hay[k])
                k += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    // MARK: - Database URLs

    /// The password of a database URL or libpq connection string, in every form libpq reads it:
    /// the user info of the URL (a multi-host URL too, any case of the scheme, percent-encoded),
    /// a `password=` query parameter, a `password=` keyword of a `key=value` string. Each
    /// value is given raw and decoded.
    static func databaseSecrets(_ url: String) -> [String] {
        var found: [String] = []
        func add(_ value: Substring) {
            guard !value.isEmpty else { return }
            found.append(String(value))
            if let decoded = String(value).removingPercentEncoding, decoded != String(value) { found.append(decoded) }
        }
        if let scheme = url.range(of: "://") {
            let rest = url[scheme.upperBound...]
            let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
            let authority = rest[..<authorityEnd]
            if let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") {
                add(authority[authority.index(after: colon)..<at])
            }
            if let query = rest.firstIndex(of: "?") {
                for pair in rest[rest.index(after: query)...].split(separator: "&") {
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    if parts.count == 2, parts[0].lowercased().hasSuffix("password") { add(parts[1]) }
                }
            }
        } else {
            // key=value pairs: password=secret or password='sec ret'
            var rest = Substring(url)
            while let range = rest.range(of: "password", options: .caseInsensitive) {
                var tail = rest[range.upperBound...].drop { $0 == " " }
                guard tail.first == "=" else { rest = rest[range.upperBound...]; continue }
                tail = tail.dropFirst().drop { $0 == " " }
                let value: Substring
                if tail.first == "'" {
                    let body = tail.dropFirst()
                    value = body.prefix { $0 != "'" }
                } else {
                    value = tail.prefix { $0 != " " }
                }
                add(value)
                rest = tail.dropFirst(value.count)
            }
        }
        return found
    }

    /// `url` (a database URL or connection string) with its password in every form replaced.
    static func redactingDatabase(_ url: String) -> String {
        Redactor(databaseSecrets(url)).scrub(url)
    }
}
