import Foundation

/// Credentials resolved from the environment, and what must never be shown: the header names
/// and query parameters that carry them. Every URL that reaches a log, an error, the archive
/// or `_ingot_rejects` goes through ``redact(_:)``.
struct Credentials: Sendable {
    /// Headers sent with every request (auth included).
    var headers: [(String, String)]
    /// A query parameter added to every request (API key in the query).
    var query: (name: String, value: String)?
    /// Parameters whose values are redacted wherever a URL is shown.
    var secretParams = Credentials.defaultSecretParams
    static let defaultSecretParams: Set<String> = ["access_token", "api_key", "apikey", "key", "token", "password", "secret"]
    /// The secret values themselves (and the forms they are sent in), scrubbed from any text shown:
    /// a server may echo a credential back in an error body.
    private(set) var redactor = Redactor()

    /// Reads `config`'s credentials from `environment`; throws naming the missing variable.
    ///
    /// A value that goes into a request header (a header, a token, an API key) may end with one
    /// newline, which is dropped (a mounted secret file ends with one); any other control
    /// character is refused (exit 2, naming the variable or header, never the value): a CR or LF
    /// would end the header and inject others.
    init(config: HTTPSourceConfig, environment: [String: String]) throws(FetchError) {
        for secret in config.urlSecrets + config.bodySecrets { redactor.add(secret) }
        let shownURL = redactor.scrub(Credentials.redact(config.url, secretParams))
        func clean(_ value: String, _ what: String) throws(FetchError) -> String {
            var scalars = Substring(value).unicodeScalars
            if scalars.last == "\n" { scalars.removeLast() }
            if scalars.last == "\r" { scalars.removeLast() }
            let v = String(scalars)
            guard !v.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                var error = FetchError(
                    url: shownURL, message: "\(what) holds a control character (a CR or LF would inject request headers); refused")
                error.isConfiguration = true
                throw error
            }
            return v
        }
        headers = []
        for header in config.headers {
            let value = try clean(header.value, "the value of header '\(header.name)'")
            headers.append((header.name, value))
            if header.isSecret { redactor.add(value) }
        }
        func value(_ name: String) throws(FetchError) -> String {
            guard let raw = environment[name], !raw.isEmpty else {
                throw FetchError(url: shownURL, message: "the environment variable \(name) (auth) is not set")
            }
            let v = try clean(raw, "the environment variable \(name)")
            redactor.add(v)
            return v
        }
        switch config.auth {
        case .bearer(let env)?:
            headers.append(("Authorization", "Bearer \(try value(env))"))
        case .basic(let user, let env)?:
            let token = Data("\(user):\(try value(env))".utf8).base64EncodedString()
            redactor.add(token)
            headers.append(("Authorization", "Basic \(token)"))
        case .apiKeyHeader(let header, let env)?:
            headers.append((header, try value(env)))
        case .apiKeyQuery(let param, let env)?:
            query = (param, try value(env))
            secretParams.insert(param.lowercased())
        case nil:
            break
        }
    }

    /// `url` with the values of secret query parameters and any password replaced by `REDACTED`,
    /// and any secret value that appears elsewhere in it scrubbed.
    func redact(_ url: String) -> String { scrub(Credentials.redact(url, secretParams)) }

    /// `text` with every secret value replaced by `REDACTED`, whole (``Redactor``): a short
    /// secret only where it stands as a token, so that redaction never spells it out.
    func scrub(_ text: String) -> String { redactor.scrub(text) }

    static func redact(_ url: String, _ secrets: Set<String>) -> String {
        var parts = URLText.Parts(url[...])
        if let authority = parts.authority, let at = authority.lastIndex(of: "@"), let colon = authority[..<at].firstIndex(of: ":") {
            parts.authority = Substring(authority[...colon] + "REDACTED" + authority[at...])
        }
        return URLText.replacingQueryValues(parts.text, with: "REDACTED") { secrets.contains($0.lowercased()) }
    }

    /// The response headers worth archiving: never credentials or cookies.
    static let archivedHeaders: Set<String> = [
        "content-type", "content-length", "etag", "last-modified", "date", "link", "retry-after", "x-total-count",
        "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "cache-control",
    ]
}

extension HTTPSourceConfig {
    /// `url` as shown (`--dry-run`, `check`): passwords, secret query values and the parts that
    /// came from the environment replaced by `REDACTED`.
    package var shownURL: String {
        let secrets = Credentials.redact(url, Credentials.defaultSecretParams)
        return Redactor(urlSecrets).scrub(secrets)
    }
}

/// A page that could not be fetched: the run stops (exit 1) after everything before it is committed.
package struct FetchError: Error, Sendable, CustomStringConvertible {
    /// The URL, redacted.
    package var url: String
    package var status: Int?
    package var message: String
    /// The source kept failing in a way that can pass (unreachable, timeouts, 5xx, 429) until the
    /// retries ran out: a later run may succeed (exit 75). `false` for what no retry fixes.
    package var isTemporary = false
    /// The source's settings are wrong (a secret that cannot be sent): no retry fixes it (exit 2).
    package var isConfiguration = false
    /// The answer said, in its body, that what was asked for is not there (`error_when`'s
    /// `not_found:` reasons), though its status was 2xx.
    package var isNotFound = false

    /// What was asked for is not there: answered 404 or 410, or a reason `error_when` lists as
    /// not found. A `for_each` skips such a request (`not_found: skip`).
    package var meansNotFound: Bool { isNotFound || status == 404 || status == 410 }

    /// A fetch failure at `url` (already redacted), with the HTTP status when there was one.
    package init(url: String, status: Int? = nil, message: String, isTemporary: Bool = false) {
        self.url = url
        self.status = status
        self.message = message
        self.isTemporary = isTemporary
    }

    package var description: String { "\(url): \(status.map { "HTTP \($0): " } ?? "")\(message)" }
}
