import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Writing to standard error and standard output without ever ending the process.
///
/// `FileHandle.write(_:)` raises when the write fails — stderr on a full disk
/// (`ingot run … 2>>/var/log/ingot.log`), a pipe whose reader died (a log shipper restarted) —
/// and the raise is a trap: the run died mid-transaction. Here a line that cannot be written is
/// dropped and counted (``droppedLines``: the run summary's `log_dropped`, the metric
/// `ingot_log_lines_dropped_total`), and the run goes on. SIGPIPE is ignored by the executable,
/// so a closed pipe is an `EPIPE` here, not a signal.
package enum StandardStream {
    private static let dropped = Atomic<Int>(0)

    /// Lines (log lines, output chunks) dropped because their stream refused them, since the
    /// process started.
    package static var droppedLines: Int { dropped.load(ordering: .relaxed) }

    /// Writes `bytes` whole to `fd`, retrying interrupted and partial writes; whether it could.
    /// A failure counts one dropped line.
    @discardableResult
    package static func write(_ bytes: some Collection<UInt8>, to fd: Int32) -> Bool {
        let ok = Array(bytes).withUnsafeBytes { raw -> Bool in
            guard let base = raw.baseAddress else { return true }
            var written = 0
            while written < raw.count {
                #if canImport(Glibc)
                    let n = Glibc.write(fd, base + written, raw.count - written)
                #else
                    let n = Darwin.write(fd, base + written, raw.count - written)
                #endif
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return false }
                written += n
            }
            return true
        }
        if !ok { dropped.add(1, ordering: .relaxed) }
        return ok
    }

    /// Writes `text` to standard error (see ``write(_:to:)``).
    @discardableResult
    package static func standardError(_ text: String) -> Bool { write(text.utf8, to: 2) }

    /// Writes `text` to standard output (see ``write(_:to:)``).
    @discardableResult
    package static func standardOutput(_ text: String) -> Bool { write(text.utf8, to: 1) }
}
