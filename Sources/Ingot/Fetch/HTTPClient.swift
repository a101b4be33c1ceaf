import CCurl
import Foundation

/// One HTTP response, body and headers whole.
package struct HTTPResponse: Sendable {
    /// The HTTP status code.
    package var status: Int
    /// Header names lowercased, in arrival order (of the final response, after redirects).
    package var headers: [(name: String, value: String)]
    /// The whole body (empty when ``overflowed``).
    package var body: [UInt8]
    /// The URL that answered (libcurl's effective URL).
    package var url: String
    /// The body passed the client's ``HTTPClient/maxBodyBytes``: the transfer was aborted and
    /// ``body`` is empty; ``receivedBytes`` says how far it got.
    package var overflowed = false
    /// Body bytes received before the transfer was cut off (for an overflowed response).
    package var receivedBytes = 0
    /// Seconds from the request's start to its end (the fetch-latency histogram).
    package var seconds: Double = 0

    /// The last value of header `name` (any case).
    package func header(_ name: String) -> String? {
        let lower = name.lowercased()
        return headers.last { $0.name == lower }?.value
    }
}

/// A request that got no HTTP response: connection refused or dropped, timeout, TLS, a body
/// cut short. Retryable.
package struct TransportError: Error, Sendable, CustomStringConvertible {
    /// The URL requested, as sent.
    package var url: String
    /// libcurl's `CURLcode`.
    package var code: Int
    /// libcurl's description of it, or Ingot's (a body over the limit, an abort).
    package var message: String
    /// The transfer ran out of time.
    package var isTimeout: Bool
    /// False for failures a retry cannot fix: a certificate that does not verify, a bad URL.
    package var isRetryable: Bool
    /// The transfer was cut off because the run is stopping (``HTTPClient/abortAll()``).
    package var wasAborted = false
    /// `url: message (curl code)`.
    package var description: String { "\(url): \(message) (curl \(code))" }
}

/// One request: the URL (secrets included, as sent), headers, the body a POST sends, and the
/// whole transfer's time limit.
package struct HTTPRequest: Sendable {
    /// The URL as sent, secrets included.
    package var url: String
    /// GET, or POST with ``body``.
    package var method = HTTPMethod.get
    /// A POST's body, sent as `application/json`.
    package var body: [UInt8]?
    /// Header names and values, as sent.
    package var headers: [(String, String)]
    /// Seconds for the whole transfer, connection included.
    package var timeout: Double

    /// A GET of `url` with `headers`, given `timeout` seconds in all.
    package init(url: String, headers: [(String, String)] = [], timeout: Double) {
        self.url = url
        self.headers = headers
        self.timeout = timeout
    }
}

/// Concurrent HTTP transfers through libcurl's multi interface: ``start(_:tag:)`` adds requests,
/// ``poll(timeout:)`` drives them all on the calling thread and returns those that ended. As many
/// transfers are in flight as were started — the core count plays no part — over one connection
/// cache, with HTTP/2 multiplexing where the server offers it (several transfers then share one
/// connection). Easy handles are kept and reused, so connections stay alive across pages.
///
/// TLS is always verified; proxies come from the usual environment variables (`https_proxy`,
/// `no_proxy`, …), as libcurl reads them. Only `http` and `https` are spoken; redirects are
/// returned, not followed (``HTTPPageSource`` follows them, checking each hop).
///
/// Not thread-safe: one queue drives a client. The one exception is ``wakeup()``.
package final class HTTPClient {
    private let multi: UnsafeMutableRawPointer
    /// Largest body accepted; a larger one aborts the transfer. Default 64 MiB.
    package var maxBodyBytes = 64 << 20
    /// Transfers in flight, by easy handle.
    private var active: [UnsafeMutableRawPointer: (tag: Int, transfer: Transfer)] = [:]
    /// Easy handles done with, ready for the next request.
    private var idle: [Transfer] = []

    private static let globalInit: Void = {
        curl_global_init(Int(CURL_GLOBAL_DEFAULT))
    }()

    /// A client with no transfer in flight (HTTP/2 multiplexing on).
    package init() {
        _ = HTTPClient.globalInit
        guard let multi = curl_multi_init() else { preconditionFailure("curl_multi_init failed: out of memory") }
        self.multi = multi
        _ = ingot_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, CURLPIPE_MULTIPLEX)
    }

    deinit {
        for (handle, _) in active { curl_multi_remove_handle(multi, handle) }
        active = [:]
        idle = []
        curl_multi_cleanup(multi)
    }

    /// Starts `request`; its end comes out of a later ``poll(timeout:)`` under `tag`.
    package func start(_ request: HTTPRequest, tag: Int) {
        let transfer = idle.popLast() ?? Transfer()
        transfer.prepare(request, maxBodyBytes: maxBodyBytes)
        active[transfer.handle] = (tag, transfer)
        curl_multi_add_handle(multi, transfer.handle)
    }

    /// Moves every transfer along, waiting up to `timeout` seconds for something to happen (or
    /// a ``wakeup()``), and returns the transfers that ended, by tag.
    package func poll(timeout: Double) -> [(tag: Int, result: Result<HTTPResponse, TransportError>)] {
        var running: Int32 = 0
        curl_multi_perform(multi, &running)
        var ended = collect()
        if ended.isEmpty {
            let ms = Int32(max(0, min(timeout, 60)) * 1000)
            curl_multi_poll(multi, nil, 0, ms, nil)
            curl_multi_perform(multi, &running)
            ended = collect()
        }
        return ended
    }

    /// Ends every transfer in flight at once (the run is stopping); they come back failed.
    package func abortAll() -> [(tag: Int, result: Result<HTTPResponse, TransportError>)] {
        let aborted = active.map { handle, entry in
            curl_multi_remove_handle(multi, handle)
            idle.append(entry.transfer)
            let error = TransportError(
                url: entry.transfer.url, code: Int(CURLE_ABORTED_BY_CALLBACK.rawValue), message: "aborted: the run is stopping",
                isTimeout: false, isRetryable: false, wasAborted: true)
            return (entry.tag, Result<HTTPResponse, TransportError>.failure(error))
        }
        active = [:]
        return aborted
    }

    /// Ends a ``poll(timeout:)`` waiting on another thread. Safe from any thread (libcurl's
    /// `curl_multi_wakeup` is).
    package func wakeup() {
        curl_multi_wakeup(multi)
    }

    /// Performs one GET of `url` and waits for it: the blocking form, for a single request.
    /// Throws ``TransportError`` when there is no complete response.
    package func get(_ url: String, headers: [(String, String)], timeout: Double) throws(TransportError) -> HTTPResponse {
        start(HTTPRequest(url: url, headers: headers, timeout: timeout), tag: 0)
        while true {
            if let ended = poll(timeout: 1).first { return try ended.result.get() }
        }
    }

    private func collect() -> [(tag: Int, result: Result<HTTPResponse, TransportError>)] {
        var ended: [(tag: Int, result: Result<HTTPResponse, TransportError>)] = []
        var left: Int32 = 0
        while let message = curl_multi_info_read(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let handle = message.pointee.easy_handle,
                let entry = active.removeValue(forKey: handle)
            else { continue }
            let code = message.pointee.data.result
            curl_multi_remove_handle(multi, handle)
            ended.append((entry.tag, entry.transfer.finish(code)))
            idle.append(entry.transfer)
        }
        return ended
    }
}

/// One easy handle and what its current transfer collected.
private final class Transfer {
    let handle: UnsafeMutableRawPointer
    private(set) var url = ""
    private var sink = ResponseSink(limit: 0)
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var limit = 0
    private var started = Date()

    init() {
        guard let handle = curl_easy_init() else { preconditionFailure("curl_easy_init failed: out of memory") }
        self.handle = handle
    }

    deinit {
        curl_slist_free_all(headerList)
        curl_easy_cleanup(handle)
    }

    /// A POST's body, copied by libcurl (COPYPOSTFIELDS), its size given first: JSON text holds
    /// no NUL, but the size is never taken from one.
    private func setBody(_ body: [UInt8]) {
        _ = ingot_curl_setopt_long(handle, CURLOPT_POSTFIELDSIZE, body.count)
        _ = body.withUnsafeBufferPointer { buffer in
            ingot_curl_setopt_pointer(
                handle, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: buffer.baseAddress ?? UnsafePointer(bitPattern: 1)))
        }
    }

    func prepare(_ request: HTTPRequest, maxBodyBytes: Int) {
        url = request.url
        limit = maxBodyBytes
        started = Date()
        sink = ResponseSink(limit: maxBodyBytes)
        curl_slist_free_all(headerList)
        headerList = nil
        for (name, value) in request.headers { headerList = curl_slist_append(headerList, "\(name): \(value)") }
        if request.method == .post, !request.headers.contains(where: { $0.0.lowercased() == "content-type" }) {
            headerList = curl_slist_append(headerList, "Content-Type: application/json")
        }

        curl_easy_reset(handle)
        _ = ingot_curl_setopt_string(handle, CURLOPT_URL, request.url)
        _ = ingot_curl_setopt_slist(handle, CURLOPT_HTTPHEADER, headerList)
        _ = ingot_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        // Redirects are followed by the caller, which checks each target against its origin
        // policy and decides which hop carries credentials. libcurl itself speaks http(s) only.
        _ = ingot_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        _ = ingot_curl_setopt_string(handle, CURLOPT_PROTOCOLS_STR, "http,https")
        _ = ingot_curl_setopt_string(handle, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        let timeoutMs = request.timeout.isFinite ? Int(min(max(request.timeout, 0.001), 86_400) * 1000) : 86_400_000
        _ = ingot_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, timeoutMs)
        _ = ingot_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, min(timeoutMs, 10_000))
        _ = ingot_curl_setopt_long(handle, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        if request.method == .post { setBody(request.body ?? []) }
        // Over https, wait for a connection being set up (ALPN tells whether it speaks HTTP/2)
        // rather than open a second one: with HTTP/2 the transfers then share it. Not over plain
        // http, where only the first response would tell, so every transfer would wait for it.
        if request.url.utf8.starts(with: "https:".utf8) {
            _ = ingot_curl_setopt_long(handle, CURLOPT_PIPEWAIT, 1)
        }
        _ = ingot_curl_setopt_long(handle, CURLOPT_SSL_VERIFYPEER, 1)
        _ = ingot_curl_setopt_long(handle, CURLOPT_SSL_VERIFYHOST, 2)
        _ = ingot_curl_setopt_long(handle, CURLOPT_TCP_NODELAY, 1)
        _ = ingot_curl_setopt_string(handle, CURLOPT_ACCEPT_ENCODING, "")  // every encoding libcurl decodes
        _ = ingot_curl_setopt_string(handle, CURLOPT_USERAGENT, "ingot/1")
        let context = Unmanaged.passUnretained(sink).toOpaque()  // `sink` lives until the next prepare
        _ = ingot_curl_setopt_callback(handle, CURLOPT_WRITEFUNCTION) { data, size, count, context in
            guard let context, let data else { return 0 }
            let sink = Unmanaged<ResponseSink>.fromOpaque(context).takeUnretainedValue()
            return sink.appendBody(data, size * count) ? size * count : 0
        }
        _ = ingot_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, context)
        _ = ingot_curl_setopt_callback(handle, CURLOPT_HEADERFUNCTION) { data, size, count, context in
            guard let context, let data else { return 0 }
            let sink = Unmanaged<ResponseSink>.fromOpaque(context).takeUnretainedValue()
            sink.appendHeader(data, size * count)
            return size * count
        }
        _ = ingot_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, context)
    }

    /// The transfer's outcome, given libcurl's result code.
    func finish(_ code: CURLcode) -> Result<HTTPResponse, TransportError> {
        var status = 0
        _ = ingot_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        let seconds = Date().timeIntervalSince(started)
        if sink.overflowed && status > 0 {
            // The server answered, with more than we take: the caller decides (a rejected page).
            return .success(
                HTTPResponse(
                    status: status, headers: sink.headers, body: [], url: url, overflowed: true, receivedBytes: sink.received,
                    seconds: seconds))
        }
        guard code == CURLE_OK else {
            let message = sink.overflowed ? "the body is larger than \(limit) bytes" : String(cString: curl_easy_strerror(code))
            let permanent: [CURLcode] = [
                CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CACERT_BADFILE, CURLE_URL_MALFORMAT,
                CURLE_UNSUPPORTED_PROTOCOL,
            ]
            return .failure(
                TransportError(
                    url: url, code: Int(code.rawValue), message: message, isTimeout: code == CURLE_OPERATION_TIMEDOUT,
                    isRetryable: !permanent.contains(code) && !sink.overflowed))
        }
        var effective: UnsafeMutablePointer<CChar>?
        _ = ingot_curl_getinfo_string(handle, CURLINFO_EFFECTIVE_URL, &effective)
        let response = HTTPResponse(
            status: status, headers: sink.headers, body: sink.body, url: effective.map { String(cString: $0) } ?? url,
            seconds: seconds)
        sink = ResponseSink(limit: 0)  // the body now belongs to the response alone
        return .success(response)
    }
}

/// Collects one transfer's body and headers from libcurl's callbacks (on the polling thread).
private final class ResponseSink {
    var body: [UInt8] = []
    var headers: [(name: String, value: String)] = []
    let limit: Int
    var overflowed = false
    /// Body bytes offered by libcurl, kept or not.
    var received = 0

    init(limit: Int) {
        self.limit = limit
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
