import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Serves a run's metrics over HTTP while the run lasts (`--metrics-port`): `GET /metrics` (the
/// Prometheus text exposition) and `GET /healthz` (`ok`). Anything else is 404 or 405.
///
/// Listens on 127.0.0.1 unless told otherwise (`--metrics-listen 0.0.0.0:9464` in a container,
/// where the scraper comes from outside). Connections are served concurrently, at most
/// ``maxConnections`` at once (more are closed at once), each within ``deadline`` seconds for the
/// whole exchange — not per read: a client sending a byte a second is cut off after 2 s. No
/// client can delay the run or its exit: ``stop()`` waits only for the accepting thread.
package final class MetricsServer: Sendable {
    /// Seconds a connection may take, from accept to the last byte of the answer.
    static let deadline: Double = 2
    /// Connections served at once.
    static let maxConnections = 16
    /// The port listened on (the one asked for, or the one the system chose for 0).
    package let port: Int
    private let socket: Int32
    private let metrics: RunMetrics
    private let stopped = Mutex(false)
    private let finished = DispatchSemaphore(value: 0)

    /// Listens on `host`:`port` (port 0: any free port) and starts serving `metrics`.
    package init(port: Int, host: String = "127.0.0.1", metrics: RunMetrics) throws(MetricsServerError) {
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
    package func stop() {
        let already = stopped.withLock { s in
            defer { s = true }
            return s
        }
        guard !already else { return }
        finished.wait()
        close(socket)
    }

    /// One connection's state in the serving loop.
    private struct Client {
        let fd: Int32
        let deadline: UInt64
        var request: [UInt8] = []
        /// The answer, once the request is read; `sent` bytes of it are out.
        var response: [UInt8]?
        var sent = 0
    }

    /// One thread, one `poll` over the listening socket and every client: non-blocking reads and
    /// writes, each client cut off at its deadline, so no client holds up another, and none
    /// holds up ``stop()`` (the loop checks it every 100 ms).
    private func serve() {
        defer { finished.signal() }
        var clients: [Client] = []
        defer { for client in clients { close(client.fd) } }
        while !stopped.withLock({ $0 }) {
            var fds = [pollfd(fd: socket, events: Int16(POLLIN), revents: 0)]
            for client in clients {
                fds.append(pollfd(fd: client.fd, events: Int16(client.response == nil ? POLLIN : POLLOUT), revents: 0))
            }
            _ = poll(&fds, nfds_t(fds.count), 100)
            let now = DispatchTime.now().uptimeNanoseconds
            var kept: [Client] = []
            for (k, var client) in clients.enumerated() {
                let events = Int32(fds[k + 1].revents)
                var done = now >= client.deadline
                if !done && events != 0 {
                    done = client.response == nil ? read(&client) : write(&client)
                }
                if done { close(client.fd) } else { kept.append(client) }
            }
            clients = kept
            if fds[0].revents & Int16(POLLIN) != 0 {
                let fd = accept(socket, nil, nil)
                if fd >= 0 {
                    if clients.count >= MetricsServer.maxConnections {
                        close(fd)
                    } else {
                        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
                        clients.append(Client(fd: fd, deadline: now + UInt64(MetricsServer.deadline * 1e9)))
                    }
                }
            }
        }
    }

    /// Reads what `client` sent; once the request is whole (or over 8 KiB, or the client hung
    /// up) prepares the answer. Returns whether the connection is finished.
    private func read(_ client: inout Client) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 2048)
        let n = chunk.withUnsafeMutableBytes { recv(client.fd, $0.baseAddress, $0.count, 0) }
        if n < 0 { return !(errno == EAGAIN || errno == EINTR) }
        if n > 0 { client.request += chunk[0..<n] }
        let end: [UInt8] = Array("\r\n\r\n".utf8)
        if n == 0 || client.request.count >= 8192 || client.request[max(0, client.request.count - n - 3)...].contains(bytes: end) {
            client.response = answer(client.request)
        }
        return false
    }

    /// Sends what is left of the answer. Returns whether the connection is finished.
    private func write(_ client: inout Client) -> Bool {
        guard let response = client.response else { return true }
        let n = response[client.sent...].withUnsafeBytes { send(client.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if n < 0 { return !(errno == EAGAIN || errno == EINTR) }
        client.sent += n
        return client.sent >= response.count
    }

    /// The answer to `request`.
    private func answer(_ request: [UInt8]) -> [UInt8] {
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
        var response = Array(
            "HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8)
        if parts.first != "HEAD" { response += body }
        return response
    }
}

/// The metrics server could not start.
package struct MetricsServerError: Error, Sendable, CustomStringConvertible {
    /// Why: a bad port or address, or the socket call that failed.
    package var message: String
    /// `metrics server: message`.
    package var description: String { "metrics server: \(message)" }
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
