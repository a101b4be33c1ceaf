import Foundation

/// A `for_each`'s requests (URL and injected values), kept in a temporary file as they are
/// collected, with only their offsets in memory: 2M parent ids held every request as Swift
/// strings (450 MB before the first request); here they take 8 bytes each, plus a 1 MiB write
/// buffer. Read back one at a time, in any order (a resume starts mid-list). The file is
/// unlinked as soon as it is made: nothing is left behind, whatever ends the process.
///
/// Used from the pipeline's source queue only (ResourcesPageSource, HTTPPageSource's list mode).
final class RequestList: @unchecked Sendable {  // confined to the source queue
    private var fd: Int32 = -1
    /// Where each request starts in the file (and where the next one will).
    private var offsets: [Int] = [0]
    private var pending: [UInt8] = []
    private var written = 0

    /// The requests collected so far.
    var count: Int { offsets.count - 1 }
    var isEmpty: Bool { count == 0 }
    var indices: Range<Int> { 0..<count }

    init() {}

    deinit { if fd >= 0 { close(fd) } }

    func append(_ item: ResourcesPageSource.Item) {
        func put(_ text: String) {
            let bytes = Array(text.utf8)
            withUnsafeBytes(of: UInt32(truncatingIfNeeded: bytes.count).littleEndian) { pending += $0 }
            pending += bytes
        }
        put(item.url)
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: item.depth).littleEndian) { pending += $0 }
        withUnsafeBytes(of: UInt32(truncatingIfNeeded: item.injected.count).littleEndian) { pending += $0 }
        for value in item.injected {
            put(value.key)
            put(value.json)
        }
        offsets.append(written + pending.count)
        if pending.count >= 1 << 20 { flush() }
    }

    /// Request `k`; an empty one when the file cannot be read back (a full temporary disk: its
    /// request then fails as a URL that is not one, named in the log).
    subscript(k: Int) -> ResourcesPageSource.Item {
        let start = offsets[k]
        let length = offsets[k + 1] - start
        var bytes: [UInt8]
        if start >= written {
            bytes = Array(pending[(start - written)..<(start - written + length)])
        } else {
            flush()
            bytes = [UInt8](repeating: 0, count: length)
            let read = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, length, off_t(start)) }
            if read != length { return ResourcesPageSource.Item(url: "", injected: []) }
        }
        var at = 0
        func integer() -> Int {
            guard at + 4 <= bytes.count else { return 0 }
            var v: UInt32 = 0
            for i in 0..<4 { v |= UInt32(bytes[at + i]) << UInt32(8 * i) }
            at += 4
            return Int(v)
        }
        func text() -> String {
            let n = min(integer(), bytes.count - at)
            defer { at += n }
            return String(decoding: bytes[at..<(at + n)], as: UTF8.self)
        }
        let url = text()
        let depth = integer()
        var injected: [InjectedValue] = []
        for _ in 0..<integer() {
            let key = text()
            injected.append(InjectedValue(key: key, json: text()))
        }
        return ResourcesPageSource.Item(url: url, injected: injected, depth: depth)
    }

    /// The URLs from request `start` on, for a list source (read one at a time).
    func urls(from start: Int) -> HTTPPageSource.URLs {
        HTTPPageSource.URLs(count: count - start) { [self] k in self[start + k].url }
    }

    /// Writes the buffer to the file (made, and unlinked, on first use).
    private func flush() {
        guard !pending.isEmpty else { return }
        if fd < 0 {
            var template = Array((FileManager.default.temporaryDirectory.path + "/ingot-requests-XXXXXX").utf8CString)
            fd = template.withUnsafeMutableBufferPointer { buffer in buffer.baseAddress.map { mkstemp($0) } ?? -1 }
            let path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if fd >= 0 { unlink(path) }
        }
        var done = 0
        pending.withUnsafeBytes { raw in
            while fd >= 0, done < raw.count {
                let n = pwrite(fd, raw.baseAddress.map { $0 + done }, raw.count - done, off_t(written + done))
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                done += n
            }
        }
        // What could not be written stays in memory (a full temporary disk costs memory, not requests).
        pending.removeFirst(done)
        written += done
    }
}
