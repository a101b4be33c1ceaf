import Foundation

/// Where a pipeline may send requests, and which of them may carry its credentials.
///
/// A response can name the next URL (a `next` field, a `Link` header, a redirect's `Location`).
/// A hostile or compromised server could use that to point Ingot at `file:///etc/passwd`, at a
/// local service, or at another host that would then receive the credentials. The rules:
///
/// - Requests and redirects speak `http` and `https` only (libcurl is restricted to them too).
/// - A URL that comes from a response is followed only on the configured URL's origin (scheme,
///   host, port) or on a host listed in `source.http.allowed_hosts`.
/// - Credentials (the auth header or query key, and every configured header) go only to the
///   configured origin and the allowed hosts, never over plain `http` when the configured URL is
///   `https`, and never after a redirect that changed origin.
package struct OriginPolicy: Sendable, Equatable {
    /// The configured URL's origin.
    package let origin: Origin
    /// `host` or `host:port` entries, lowercased.
    package let allowedHosts: [String]

    /// A URL's origin: scheme, host and port (the scheme's default when the URL has none).
    package struct Origin: Sendable, Hashable, CustomStringConvertible {
        /// `http` or `https`, lowercased.
        package var scheme: String
        /// Lowercased.
        package var host: String
        package var port: Int

        /// The origin of `url`, or `nil` when it is not an absolute `http`/`https` URL with a host.
        package init?(_ url: String) {
            let parts = URLText.Parts(url[...])
            guard let scheme = parts.scheme?.lowercased(), scheme == "http" || scheme == "https", let host = parts.host, !host.isEmpty
            else { return nil }
            let port: Int
            switch parts.port {
            case .none: port = scheme == "https" ? 443 : 80
            case .number(let n): port = n
            case .invalid: return nil
            }
            self.scheme = scheme
            self.host = host
            self.port = port
        }

        /// An origin from its parts, as given.
        package init(scheme: String, host: String, port: Int) {
            self.scheme = scheme
            self.host = host
            self.port = port
        }

        /// `scheme://host:port`.
        package var description: String { "\(scheme)://\(host):\(port)" }
    }

    /// Why a URL is refused.
    package enum Refusal: Sendable, Equatable, CustomStringConvertible {
        /// Not `http` or `https` (or not an absolute URL at all).
        case scheme
        /// Another origin, not among the allowed hosts.
        case origin(OriginPolicy.Origin)

        /// The rule that refused the URL, as error messages say it.
        package var description: String {
            switch self {
            case .scheme: "only http and https URLs are followed"
            case .origin(let o): "\(o.host) is not the pipeline's origin and not in source.http.allowed_hosts"
            }
        }
    }

    /// The policy of a source whose configured URL is `url`, with its `allowed_hosts`.
    package init(url: String, allowedHosts: [String] = []) {
        // The configured URL is validated at load time; an invalid one refuses everything.
        origin = Origin(url) ?? Origin(scheme: "", host: "", port: 0)
        self.allowedHosts = allowedHosts.map { $0.lowercased() }
    }

    /// Whether `candidate` is on an allowed host (by `host` or `host:port`).
    func isAllowedHost(_ candidate: Origin) -> Bool {
        allowedHosts.contains { entry in
            entry == candidate.host || entry == "\(candidate.host):\(candidate.port)"
        }
    }

    /// `nil` when a URL taken from a response may be requested, else why not.
    package func check(_ url: String) -> Refusal? {
        guard let target = Origin(url) else { return .scheme }
        if target == origin || isAllowedHost(target) { return nil }
        return .origin(target)
    }

    /// `nil` when a request the pipeline makes itself (a `for_each` request) may go to `url` with
    /// the source's credentials: an allowed origin, reached without a downgrade (else `.scheme`).
    package func refusal(ofRequest url: String) -> Refusal? {
        check(url) ?? (mayReceiveCredentials(url) ? nil : .scheme)
    }

    /// Whether a request to `url` may carry credentials: the configured origin, or an allowed host
    /// reached without a downgrade from https to http.
    package func mayReceiveCredentials(_ url: String) -> Bool {
        guard let target = Origin(url) else { return false }
        if target == origin { return true }
        return isAllowedHost(target) && !(origin.scheme == "https" && target.scheme == "http")
    }
}
