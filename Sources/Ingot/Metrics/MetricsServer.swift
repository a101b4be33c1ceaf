import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Serves a run's metrics over HTTP while the run lasts (`--metrics-port`): `GET /metrics` (the
/// Prometheus text exposition) and `GET /healthz` (`ok`). Anything else is 404 or 405.
///
/// One connection at a time on one thread: a scraper asks every few seconds, nothing more. Each
/// request is read with a 2 s limit and at most 8 KiB; the connection closes after the answer.
public final class MetricsServer: Sendable {
    /// The port listened on (the one asked for, or the one the system chose for 0).
    public let port: Int
    private let socket: Int32
    private let metrics: RunMetrics
    private let stopped = Mutex(false)
    private let finished = DispatchSemaphore(value: 0)

    /// Listens on `host`:`port` (port 0: any free port) and starts serving `metrics`.
    public init(port: Int, host: String = "0.0.0.0", metrics: RunMetrics) throws(MetricsServerError) {
        guard (0...65535).contains(port) else { throw MetricsServerError(message: "port \(port) is not 0-65535") }
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw MetricsServerError(message: "socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
            close(fd)
            throw MetricsServerError(message: "'\(host)' is not an IPv4 address")
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw MetricsServerError(message: "cannot listen on \(host):\(port): \(reason)")
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.port = Int(UInt16(bigEndian: actual.sin_port))
        self.socket = fd
        self.metrics = metrics
        Thread.detachNewThread { [self] in serve() }
    }

    /// Stops listening and waits for the serving thread to end (at most one request's time).
    /// The thread holds the server until then: call it when the run is over.
    public func stop() {
        let already = stopped.withLock { s in
            defer { s = true }
            return s
        }
        guard !already else { return }
        finished.wait()
        close(socket)
    }

    private func serve() {
        defer { finished.signal() }
        while !stopped.withLock({ $0 }) {
            var waiting = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            guard poll(&waiting, 1, 100) > 0 else { continue }
            let client = accept(socket, nil, nil)
            guard client >= 0 else { continue }
            answer(client)
            close(client)
        }
    }

    private func answer(_ client: Int32) {
        var limit = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var request: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 2048)
        let end: [UInt8] = Array("\r\n\r\n".utf8)
        while request.count < 8192 {
            let n = chunk.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { break }
            request += chunk[0..<n]
            if request.count >= 4, request[max(0, request.count - n - 3)...].contains(bytes: end) { break }
        }
        let line = request.prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }
        let parts = line.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true).map { String(decoding: $0, as: UTF8.self) }
        let (status, type, body): (String, String, [UInt8])
        if parts.count < 2 {
            (status, type, body) = ("400 Bad Request", "text/plain", Array("bad request\n".utf8))
        } else if parts[0] != "GET" && parts[0] != "HEAD" {
            (status, type, body) = ("405 Method Not Allowed", "text/plain", Array("GET only\n".utf8))
        } else {
            switch parts[1].split(separator: "?", maxSplits: 1).first.map(String.init) ?? "" {
            case "/metrics": (status, type, body) = ("200 OK", "text/plain; version=0.0.4; charset=utf-8", metrics.exposition())
            case "/healthz": (status, type, body) = ("200 OK", "text/plain", Array("ok\n".utf8))
            default: (status, type, body) = ("404 Not Found", "text/plain", Array("not found\n".utf8))
            }
        }
        var response = Array("HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8)
        if parts.first != "HEAD" { response += body }
        var sent = 0
        while sent < response.count {
            let n = response[sent...].withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return }
            sent += n
        }
    }
}

/// The metrics server could not start.
public struct MetricsServerError: Error, Sendable, CustomStringConvertible {
    /// Why: a bad port or address, or the socket call that failed.
    public var message: String
    /// `metrics server: message`.
    public var description: String { "metrics server: \(message)" }
}

extension ArraySlice where Element == UInt8 {
    /// Whether `pattern` occurs in the slice.
    fileprivate func contains(bytes pattern: [UInt8]) -> Bool {
        guard count >= pattern.count else { return false }
        var i = startIndex
        while i + pattern.count <= endIndex {
            if self[i..<(i + pattern.count)].elementsEqual(pattern) { return true }
            i += 1
        }
        return false
    }
}
