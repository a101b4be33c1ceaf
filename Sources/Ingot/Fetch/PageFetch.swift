import Foundation
import Logging

/// What every request of an HTTP source obeys: where credentials go (and never go), which URLs
/// from responses may be followed, the retry policy and the time limit. One value per source,
/// shared by its page fetches.
struct FetchRules: Sendable {
    let config: HTTPSourceConfig
    let credentials: Credentials
    /// Where URLs from responses may lead, and which requests carry credentials.
    let policy: OriginPolicy

    /// Redirects followed per request, at most.
    static let maxRedirects = 10
    /// Longest URL taken from a response.
    static let maxURLLength = 8192

    /// `target` (a URL taken from a response, perhaps relative) resolved against `base`, if the
    /// origin policy lets Ingot go there; else a ``FetchError`` naming the rule.
    func follow(_ target: String, from base: String, what: String) throws(FetchError) -> String {
        guard target.utf8.count <= FetchRules.maxURLLength else {
            throw FetchError(url: credentials.redact(base), message: "refused: the \(what) is longer than \(FetchRules.maxURLLength) bytes")
        }
        guard let absolute = URLText.resolve(URLText.escapingInvalid(target), against: base) else {
            throw FetchError(
                url: credentials.redact(base),
                message: "refused: the \(what) '\(HTTPPageSource.shown(credentials.redact(target)))' is not a URL")
        }
        if let refusal = policy.check(absolute) {
            throw FetchError(
                url: HTTPPageSource.shown(credentials.redact(absolute)),
                message: "refused \(what) (from \(credentials.redact(base))): \(refusal)")
        }
        return absolute
    }

    /// `url` without the query key that carries a credential (URLs are kept and logged this way).
    func strippingSecrets(_ url: String) -> String {
        guard let key = credentials.query else { return url }
        return URLText.removingQuery(url) { $0 == key.name }
    }

    /// `url` with the credential's query key, as sent to a host that may receive it.
    func withSecrets(_ url: String) -> String {
        guard let key = credentials.query else { return url }
        return URLText.settingQuery(url, [(key.name, key.value)])
    }

    /// Full jitter: a random delay up to `base × 2^(attempt-1)`, capped.
    func backoff(_ attempt: Int) -> Double {
        let cap = min(Double(config.retry.maxDelayMs), Double(config.retry.baseDelayMs) * pow(2, Double(attempt - 1)))
        return Double.random(in: 0...max(cap, 0)) / 1000
    }
}

/// One page's GET as a state machine the transfer loop drives: attempts with backoff and
/// `Retry-After` (connection errors, timeouts, 408, 429, 5xx), redirects followed hop by hop —
/// each target checked by the origin policy, credentials only on hops that may receive them and
/// only while the chain has not changed origin (libcurl drops `Authorization` on such a hop, but
/// not custom headers or query keys, so Ingot does it for all of them).
///
/// A value: the loop holds one per page in flight and feeds it each transfer's outcome; it
/// answers with the next ``Step``. No I/O, no clock of its own (the loop passes `now`).
struct PageFetch {
    /// What the loop does next for this page.
    enum Step {
        /// Start this request.
        case send(HTTPRequest)
        /// Wait until then, then call ``retry()`` and send what it returns.
        case wait(until: Date)
        /// The page, or why there is none.
        case done(Result<Page, FetchError>)
    }

    /// The page's URL, without secrets.
    let url: String
    /// The same, redacted: the page's source in logs, rejects and the archive.
    let shown: String
    private(set) var attempt = 1
    /// The wait the server asked for with its last answer (`Retry-After`, capped by the retry
    /// settings), in seconds; `nil` when it asked for none.
    private(set) var serverDelay: Double?
    /// Requests sent for this page (attempts × hops).
    private(set) var requests = 0
    /// The hop the current request went to (without secrets), whether it carries credentials,
    /// and how many redirects led there.
    private var current: String
    private var trusted: Bool
    private var redirects = 0
    private let start: OriginPolicy.Origin?
    private var attemptStarted: Date
    /// What the last run kept of this request's answer: every request asks whether it changed
    /// since (docs/pipelines.md, "Conditional requests"), and a 304 is a page.
    let validators: KeptAnswers.Validators?
    /// The method and body of the current hop: a POST's, until a 301, 302 or 303 turns it into
    /// a GET (as browsers and libcurl do); a 307 or 308 keeps both.
    private var method: HTTPMethod
    private var body: [UInt8]?
    /// The body the page asks with (each attempt starts with it).
    private let asked: [UInt8]?
    /// A POST's method and body as archived (its secrets redacted).
    private let record: RequestRecord?

    init(url: String, rules: FetchRules, body: String? = nil, validators: KeptAnswers.Validators? = nil, now: Date = Date()) {
        self.url = url
        self.method = body == nil ? .get : .post
        self.body = body.map { Array($0.utf8) }
        self.asked = self.body
        self.record = body.map { RequestRecord(method: HTTPMethod.post.rawValue, body: rules.credentials.scrub($0)) }
        self.validators = body == nil ? validators : nil
        self.shown = rules.credentials.redact(url)
        self.current = url
        self.trusted = rules.policy.mayReceiveCredentials(url)
        self.start = OriginPolicy.Origin(url)
        self.attemptStarted = now
    }

    /// The request for the current hop.
    mutating func request(_ rules: FetchRules) -> HTTPRequest {
        requests += 1
        // As written, but for the bytes a URL cannot carry (a space, non-ASCII, a brace).
        var request = HTTPRequest(
            url: URLText.escapingInvalid(trusted ? rules.withSecrets(current) : current),
            headers: (trusted ? rules.credentials.headers : []) + (validators?.conditions ?? []), timeout: rules.config.timeout)
        request.method = method
        request.body = body
        return request
    }

    /// After a wait: the next attempt starts over at the page's URL.
    mutating func retry(_ rules: FetchRules, now: Date = Date()) -> HTTPRequest {
        attempt += 1
        current = url
        (method, body) = (asked == nil ? .get : .post, asked)
        trusted = rules.policy.mayReceiveCredentials(url)
        redirects = 0
        attemptStarted = now
        return request(rules)
    }

    /// The next step after the current request ended with `result`. A retry is logged
    /// (`fetch.retry`) with `logger`.
    mutating func received(
        _ result: Result<HTTPResponse, TransportError>, rules: FetchRules, logger: Logger, now: Date = Date()
    ) -> Step {
        let retry = rules.config.retry
        let reason: String
        var delay: Double
        serverDelay = nil
        switch result {
        case .success(let response):
            if [301, 302, 303, 307, 308].contains(response.status), let location = response.header("location") {
                return redirected(to: location, status: response.status, rules: rules)
            }
            switch verdict(on: response, rules: rules) {
            case .finished(let step): return step
            case .retried(let why): reason = why
            }
            delay = rules.backoff(attempt)
            if let after = response.header("retry-after").flatMap({ HTTPPageSource.retryAfter($0, now: now) }) {
                delay = min(after, Double(retry.maxDelayMs) / 1000)
                serverDelay = delay
            }
        case .failure(let error):
            if error.wasAborted {
                return .done(.failure(FetchError(url: shown, message: "stopped: the run is stopping")))
            }
            let message = rules.credentials.scrub(error.message)
            guard error.isRetryable else { return .done(.failure(FetchError(url: shown, message: message))) }
            if attempt >= retry.attempts {
                return .done(
                    .failure(
                        FetchError(
                            url: shown, message: "\(message) (gave up after \(attempt) attempts)", isTemporary: true)))
            }
            reason = message
            delay = rules.backoff(attempt)
        }
        logger.warning(
            "fetch.retry",
            metadata: [
                LogKey.url: "\(shown)", LogKey.reason: "\(reason)", "attempt": .int(attempt), "delay_s": .seconds(delay),
            ])
        return .wait(until: now.addingTimeInterval(delay))
    }

    /// What an answer that is not a redirect comes to: the request finished (a page, or a
    /// failure), or it is tried again, and why.
    private enum Verdict {
        case finished(Step)
        case retried(String)
    }

    /// 2xx: a page — unless `error_when` says the body is an error (never a page: tried again
    /// when its reason is temporary, else a failure naming it); 304 to a conditional request: a
    /// page without a body (status 304: its source puts the kept body in); 408, 429 and 5xx:
    /// tried again until the attempts run out; any other status: a failure with the body's start.
    private func verdict(on response: HTTPResponse, rules: FetchRules) -> Verdict {
        let attempts = rules.config.retry.attempts
        if response.status == 304, validators != nil {
            return .finished(.done(.success(page(of: response, keeping: rules.config.paginationHeader))))
        }
        if (200..<300).contains(response.status) {
            guard let rule = rules.config.errorWhen, !response.overflowed, let document = try? JSONDocument(bytes: response.body),
                let bodyError = rule.error(in: document)
            else { return .finished(.done(.success(page(of: response, keeping: rules.config.paginationHeader)))) }
            let said = "the answer is an error (error_when): " + rules.credentials.scrub(bodyError)
            if rule.meansNotFound(bodyError) {
                var error = FetchError(url: shown, status: response.status, message: said + " (not found)")
                error.isNotFound = true
                return .finished(.done(.failure(error)))
            }
            guard rule.retries(bodyError) else {
                return .finished(.done(.failure(FetchError(url: shown, status: response.status, message: said))))
            }
            guard attempt < attempts else {
                return .finished(
                    .done(
                        .failure(
                            FetchError(
                                url: shown, status: response.status, message: "\(said); gave up after \(attempt) attempts",
                                isTemporary: true))))
            }
            return .retried(said)
        }
        guard response.status == 408 || response.status == 429 || response.status >= 500 else {
            return .finished(
                .done(
                    .failure(
                        FetchError(
                            url: shown, status: response.status, message: rules.credentials.scrub(HTTPPageSource.preview(response.body))))))
        }
        guard attempt < attempts else {
            return .finished(
                .done(
                    .failure(
                        FetchError(url: shown, status: response.status, message: "gave up after \(attempt) attempts", isTemporary: true))))
        }
        return .retried("HTTP \(response.status)")
    }

    /// A redirect to `location`: followed under the origin rules (credentials only where they
    /// may go), at most ``FetchRules/maxRedirects`` times.
    private mutating func redirected(to location: String, status: Int, rules: FetchRules) -> Step {
        redirects += 1
        guard redirects <= FetchRules.maxRedirects else {
            return .done(.failure(FetchError(url: shown, message: "more than \(FetchRules.maxRedirects) redirects")))
        }
        let next: String
        do {
            next = try rules.follow(location, from: current, what: "redirect")
        } catch {
            return .done(.failure(error))
        }
        if OriginPolicy.Origin(next) != start || !rules.policy.mayReceiveCredentials(next) { trusted = false }
        if ![307, 308].contains(status) { (method, body) = (.get, nil) }
        current = rules.strippingSecrets(next)
        return .send(request(rules))
    }

    /// The page a 2xx response gives: its body and the headers the archive keeps (and the header
    /// a numbered paginator reads its total from, whatever its name), or, past the
    /// size limit, an oversized page (rejected later, with its size).
    private func page(of response: HTTPResponse, keeping paginationHeader: String?) -> Page {
        if response.overflowed {
            var page = Page(
                seq: 0, source: shown, bytes: [], http: HTTPExchange(status: response.status, headers: [:], fetchedAt: attemptStarted))
            page.oversized = response.receivedBytes
            return page
        }
        var headers: [String: String] = [:]
        for (name, value) in response.headers where Credentials.archivedHeaders.contains(name) || name == paginationHeader {
            headers[name] = value
        }
        return Page(
            seq: 0, source: shown, bytes: response.body,
            http: HTTPExchange(status: response.status, headers: headers, fetchedAt: attemptStarted, request: record))
    }
}
