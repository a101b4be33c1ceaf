import CCurl
import Foundation

/// One HTTP response, body and headers whole.
public struct HTTPResponse: Sendable {
    public var status: Int
    /// Header names lowercased, in arrival order (of the final response, after redirects).
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    public var url: String
    /// The body passed the client's ``HTTPClient/maxBodyBytes``: the transfer was aborted and
    /// ``body`` is empty; ``receivedBytes`` says how far it got.
    public var overflowed = false
    /// Body bytes received before the transfer was cut off (for an overflowed response).
    public var receivedBytes = 0

    public func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.last { $0.name == lower }?.value
    }
}

/// A request that got no HTTP response: connection refused or dropped, timeout, TLS, a body
/// cut short. Retryable.
public struct TransportError: Error, Sendable, CustomStringConvertible {
    public var url: String
    public var code: Int
    public var message: String
    public var isTimeout: Bool
    /// False for failures a retry cannot fix: a certificate that does not verify, a bad URL.
    public var isRetryable: Bool
    public var description: String { "\(url): \(message) (curl \(code))" }
}

/// A libcurl easy handle, reused request after request so connections stay alive (and HTTP/2 is
/// used where the server offers it). TLS is always verified; proxies come from the usual
/// environment variables (`https_proxy`, `no_proxy`, …), as libcurl reads them. Only `http` and
/// `https` are spoken; redirects are returned, not followed (see ``HTTPPageSource``).
///
/// Not thread-safe: one client per thread or queue.
public final class HTTPClient {
    private let handle: UnsafeMutableRawPointer
    /// Largest body accepted; a larger one aborts the transfer. Default 64 MiB.
    public var maxBodyBytes = 64 << 20
    /// Asked about once a second (and on every chunk) during a transfer; `true` aborts it: a run
    /// that is stopping does not wait for a request that hangs. Called on the requesting thread.
    public var shouldAbort: (@Sendable () -> Bool)?

    private static let globalInit: Void = {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
    }()

    public init() {
        _ = HTTPClient.globalInit
        guard let handle = curl_easy_init() else { preconditionFailure("curl_easy_init failed") }
        self.handle = handle
    }

    deinit {
        curl_easy_cleanup(handle)
    }

    /// Performs a GET of `url` with `headers`, waiting at most `timeout` seconds for the whole
    /// transfer. Throws ``TransportError`` when there is no complete response.
    public func get(_ url: String, headers: [(String, String)], timeout: Double) throws(TransportError) -> HTTPResponse {
        let sink = ResponseSink(limit: maxBodyBytes, shouldAbort: shouldAbort)
        let unmanaged = Unmanaged.passRetained(sink)
        defer { unmanaged.release() }

        var list: UnsafeMutablePointer<curl_slist>?
        for (name, value) in headers { list = curl_slist_append(list, "\(name): \(value)") }
        // No "Expect: 100-continue" and no default Accept override surprises.
        defer { curl_slist_free_all(list) }

        curl_easy_reset(handle)
        _ = ingot_curl_setopt_string(handle, CURLOPT_URL, url)
        _ = ingot_curl_setopt_slist(handle, CURLOPT_HTTPHEADER, list)
        _ = ingot_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        // Redirects are followed by the caller, which checks each target against its origin
        // policy and decides which hop carries credentials. libcurl itself speaks http(s) only.
        _ = ingot_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        _ = ingot_curl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, "http,https")
        _ = ingot_curl_setopt_string(handle, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        let timeoutMs = timeout.isFinite ? Int(min(max(timeout, 0.001), 86_400) * 1000) : 86_400_000
        _ = ingot_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, timeoutMs)
        _ = ingot_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, min(timeoutMs, 10_000))
        _ = ingot_curl_setopt_long(handle, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        _ = ingot_curl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 1)
        _ = ingot_curl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 2)
        _ = ingot_curl_setopt_long(handle, CURLOPT_TCP_NODELAY, 1)
        _ = ingot_curl_setopt_string(handle, CURLOPT_ACCEPT_ENCODING, "")  // every encoding libcurl decodes
        _ = ingot_curl_setopt_string(handle, CURLOPT_USERAGENT, "ingot/1")
        _ = ingot_curl_setopt_callback(handle, CURLOPT_WRITEFUNCTION) { data, size, count, context in
            guard let context, let data else { return 0 }
            let sink = Unmanaged<ResponseSink>.fromOpaque(context).takeUnretainedValue()
            return sink.appendBody(data, size * count) ? size * count : 0
        }
        _ = ingot_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, unmanaged.toOpaque())
        _ = ingot_curl_setopt_callback(handle, CURLOPT_HEADERFUNCTION) { data, size, count, context in
            guard let context, let data else { return 0 }
            let sink = Unmanaged<ResponseSink>.fromOpaque(context).takeUnretainedValue()
            sink.appendHeader(data, size * count)
            return size * count
        }
        _ = ingot_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, unmanaged.toOpaque())
        if shouldAbort != nil {
            // libcurl calls this about once a second even while nothing arrives.
            _ = ingot_curl_setopt_long(handle, CURLOPT_NOPROGRESS, 0)
            _ = ingot_curl_setopt_xferinfo(handle) { context, _, _, _, _ in
                guard let context else { return 0 }
                let sink = Unmanaged<ResponseSink>.fromOpaque(context).takeUnretainedValue()
                return sink.aborted() ? 1 : 0
            }
            _ = ingot_curl_setopt_pointer(handle, CURLOPT_XFERINFODATA, unmanaged.toOpaque())
        }

        let code = curl_easy_perform(handle)
        var status = 0
        _ = ingot_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        if sink.overflowed && status > 0 {
            // The server answered, with more than we take: the caller decides (a rejected page).
            return HTTPResponse(
                status: status, headers: sink.headers, body: [], url: url, overflowed: true, receivedBytes: sink.received)
        }
        guard code == CURLE_OK else {
            if sink.wasAborted {
                throw TransportError(url: url, code: Int(code.rawValue), message: "aborted: the run is stopping", isTimeout: false, isRetryable: false)
            }
            let message = sink.overflowed ? "the body is larger than \(maxBodyBytes) bytes" : String(cString: curl_easy_strerror(code))
            let permanent: [CURLcode] = [
                CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE, CURLE_URL_MALFORMAT,
                CURLE_UNSUPPORTED_PROTOCOL,
            ]
            throw TransportError(
                url: url, code: Int(code.rawValue), message: message, isTimeout: code == CURLE_OPERATION_TIMEDOUT,
                isRetryable: !permanent.contains(code) && !sink.overflowed)
        }
        var effective: UnsafeMutablePointer<CChar>?
        _ = ingot_curl_getinfo_string(handle, CURLINFO_EFFECTIVE_URL, &effective)
        return HTTPResponse(
            status: status, headers: sink.headers, body: sink.body, url: effective.map { String(cString: $0) } ?? url)
    }
}

/// Collects one transfer's body and headers from libcurl's callbacks (on the calling thread).
private final class ResponseSink {
    var body: [UInt8] = []
    var headers: [(name: String, value: String)] = []
    let limit: Int
    var overflowed = false
    /// Body bytes offered by libcurl, kept or not.
    var received = 0
    let shouldAbort: (@Sendable () -> Bool)?
    private(set) var wasAborted = false

    init(limit: Int, shouldAbort: (@Sendable () -> Bool)? = nil) {
        self.limit = limit
        self.shouldAbort = shouldAbort
    }

    func aborted() -> Bool {
        if shouldAbort?() == true { wasAborted = true }
        return wasAborted
    }

    func appendBody(_ data: UnsafeMutablePointer<CChar>, _ count: Int) -> Bool {
        received += count
        guard body.count + count <= limit else {
            body = []
            overflowed = true
            return false
        }
        data.withMemoryRebound(to: UInt8.self, capacity: count) { body.append(contentsOf: UnsafeBufferPointer(start: $0, count: count)) }
        return true
    }

    func appendHeader(_ data: UnsafeMutablePointer<CChar>, _ count: Int) {
        let line = data.withMemoryRebound(to: UInt8.self, capacity: count) {
            String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self)
        }.trimmingCharacters(in: .whitespacesAndNewlines)
        if line.hasPrefix("HTTP/") {
            headers = []  // a new response (after a redirect or 100 Continue)
            return
        }
        guard let colon = line.firstIndex(of: ":") else { return }
        let name = line[..<colon].lowercased()
        let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        headers.append((name, value))
    }
}
