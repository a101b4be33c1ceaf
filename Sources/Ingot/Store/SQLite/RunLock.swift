import Foundation

/// One run at a time per SQLite database: an exclusive `flock` on `<database>.lock`, held for
/// the whole run and released by the kernel when the process ends, however it ends (`kill -9`
/// included). The file says who holds it (`run_id`, `pid`), so a second run that gives up can
/// name the holder.
///
/// The lock covers the database itself, not its spelling: a second `flock` is taken on the
/// database file (created empty when missing, which SQLite reads as a new database), so a run
/// through a symbolic link, a hard link or another relative path to the same file is excluded
/// too. `flock` locks are independent of the POSIX locks SQLite takes on the same file (Linux).
/// Closing a descriptor of a file drops every POSIX lock the process holds on it, so the lock
/// must be released only after the store is closed: the runner closes the store first.
///
/// The lock file is opened without following a symbolic link (`O_NOFOLLOW`): a link planted at
/// `<database>.lock` is refused, never followed, truncated and written through.
final class RunLock {
    let path: String
    private let fd: Int32
    private let databaseFD: Int32

    /// Waits up to `timeout` seconds for the lock of the database at `databasePath`.
    ///
    /// The descriptors are locals until the lock is held: a throw after every stored property
    /// is set runs `deinit`, whose `close` calls would then close them a second time — by then
    /// possibly another thread's newly opened files (seen as a test writing a page with
    /// `EBADF` while another test's run gave up waiting for a lock).
    init(databasePath: String, timeout: Double) throws(RunLockError) {
        let path = databasePath + ".lock"
        self.path = path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else {
            let reason = errno == ELOOP ? "it is a symbolic link; refusing to follow it" : String(cString: strerror(errno))
            throw RunLockError(path: path, holder: nil, isHeld: false, message: "cannot open the lock file: \(reason)")
        }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw RunLockError(path: path, holder: nil, isHeld: false, message: "cannot use the lock file: it is not a regular file")
        }
        // The database file itself (following links: the database may be a link on purpose).
        let databaseFD = open(databasePath, O_RDONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard databaseFD >= 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw RunLockError(path: path, holder: nil, isHeld: false, message: "cannot open the database \(databasePath): \(reason)")
        }
        let deadline = Date().addingTimeInterval(max(0, timeout))
        for (descriptor, alias) in [(fd, false), (databaseFD, true)] {
            while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
                guard errno == EWOULDBLOCK || errno == EINTR, Date() < deadline else {
                    let holder = alias ? nil : RunLock.holder(fd)
                    close(fd)
                    close(databaseFD)
                    throw RunLockError(
                        path: path, holder: holder, isHeld: true,
                        message: alias
                            ? "the database is held by another run that opened it through another path (a link to the same file); gave up after \(timeout) s (--lock-timeout)"
                            : "the database is held by another run; gave up after \(timeout) s (--lock-timeout)")
                }
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
        self.fd = fd
        self.databaseFD = databaseFD
        describe(runID: nil)
    }

    deinit {
        close(databaseFD)
        close(fd)  // releases the lock
    }

    /// Writes who holds the lock into the file.
    func describe(runID: String?) {
        let text = "pid=\(getpid())" + (runID.map { " run_id=\($0)" } ?? "") + "\n"
        _ = ftruncate(fd, 0)
        _ = text.withCString { pwrite(fd, $0, strlen($0), 0) }
    }

    private static func holder(_ fd: Int32) -> String? {
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return nil }
        let text = String(decoding: buffer[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.isEmpty ? nil : JSONText.escapingControlCharacters(text)
    }
}
