import Foundation
import Synchronization

/// A source that can ask conditionally (HTTP, a pipeline's resources): given what the last
/// finished run kept, before its first page.
package protocol AnswerReusing: PageSource {
    func reuseAnswers(_ answers: KeptAnswers)
}

/// Conditional requests (docs/pipelines.md, "Conditional requests"): what the last finished run
/// of a pipeline kept of each request whose answer came with a validator (`ETag`,
/// `Last-Modified`) — the validators and the answer's body — so that this run asks with
/// `If-None-Match` / `If-Modified-Since` and takes a `304 Not Modified` as that body again, byte
/// for byte; and the answers this run gets, kept for the next once it has finished.
///
/// The sources of a run share one value (a pipeline's resources fetch one after another). All
/// its state is under one mutex, the spool file included: `Sendable` by that.
package final class KeptAnswers: Sendable {
    /// A request's validators, as the server gave them.
    package struct Validators: Sendable, Equatable {
        package var etag: String?
        package var lastModified: String?

        package init?(etag: String?, lastModified: String?) {
            guard etag != nil || lastModified != nil else { return nil }
            self.etag = etag
            self.lastModified = lastModified
        }

        /// An answer's validators, from its headers (lower-case names); `nil` when it has none.
        init?(headers: [String: String]) {
            self.init(etag: headers["etag"], lastModified: headers["last-modified"])
        }

        /// The request headers that ask whether the answer changed since it was kept.
        var conditions: [(String, String)] {
            var headers: [(String, String)] = []
            if let etag { headers.append(("If-None-Match", etag)) }
            if let lastModified { headers.append(("If-Modified-Since", lastModified)) }
            return headers
        }
    }

    /// A kept answer's body, zstd-compressed, with its size and the headers the archive keeps
    /// (a 304 need not send `Link` again: the kept ones stand in).
    package struct Body: Sendable {
        package var compressed: [UInt8]
        package var size: Int
        package var headers: [String: String]

        package init(compressed: [UInt8], size: Int, headers: [String: String]) {
            self.compressed = compressed
            self.size = size
            self.headers = headers
        }

        /// The headers as stored: a JSON object.
        package var headersJSON: String {
            (try? JSONEncoder().encode(headers)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        }

        /// Headers read back from ``headersJSON``; none when the text is not such an object.
        package static func headers(fromJSON text: String?) -> [String: String] {
            text.flatMap { try? JSONDecoder().decode([String: String].self, from: Data($0.utf8)) } ?? [:]
        }
    }

    /// An answer kept for the next run: its request (the URL without secrets), validators, and
    /// body, or `nil` when a 304 said the stored one stands.
    package struct Answer: Sendable {
        package var request: String
        package var validators: Validators
        package var body: Body?
    }

    private struct State {
        var spool: UnsafeMutablePointer<FILE>?
        var answers: [(request: String, validators: Validators, offset: Int, compressed: Int, size: Int, headers: [String: String])] = []
        var offset = 0
        var notModified = 0
        var failure: String?
    }

    /// The last run's validators, by request.
    private let previous: [String: Validators]
    /// The stored body of a request (compressed, and its size), read when a 304 asks for it.
    private let storedBody: @Sendable (String) throws -> Body?
    private let state = Mutex(State())
    private let path = FileManager.default.temporaryDirectory.appendingPathComponent("ingot-answers-\(UUID().uuidString).bin").path

    /// - Parameters:
    ///   - previous: the validators the last run kept, by request.
    ///   - body: reads the body kept for a request (on a connection of its own: asked from the
    ///     source queue while the writer writes).
    package init(previous: [String: Validators], body: @escaping @Sendable (String) throws -> Body?) {
        self.previous = previous
        self.storedBody = body
    }

    deinit {
        state.withLock { state in
            if let file = state.spool { fclose(file) }
        }
        unlink(path)
    }

    /// The validators kept for `request` (its URL without secrets); `nil` when none were.
    func validators(for request: String) -> Validators? { previous[request] }

    /// The body kept for `request`, as it was received, and its headers; `nil` when it cannot be
    /// read back.
    func keptBody(for request: String) -> (bytes: [UInt8], headers: [String: String])? {
        guard let kept = try? storedBody(request), kept.size >= 0, kept.size <= 1 << 30,
            let bytes = try? Zstd().decompress(kept.compressed[...], expectedLength: kept.size, limit: kept.size)
        else { return nil }
        return (bytes, kept.headers)
    }

    /// A 304 answered `request`: the stored answer stands for the next run too.
    func reused(_ request: String, _ validators: Validators) {
        state.withLock { state in
            state.notModified += 1
            state.answers.append((request, validators, 0, -1, 0, [:]))
        }
    }

    /// A fresh answer to `request` came with `validators`: its body, compressed, goes to the
    /// spool for the next run. A spool that cannot take it only means the next run asks again.
    func received(_ request: String, _ validators: Validators, body: [UInt8], headers: [String: String]) {
        guard let compressed = try? Zstd().compress(body) else { return }
        state.withLock { state in
            guard state.failure == nil else { return }
            if state.spool == nil { state.spool = fopen(path, "w+") }
            guard let file = state.spool,
                compressed.withUnsafeBytes({ fwrite($0.baseAddress, 1, $0.count, file) }) == compressed.count
            else {
                state.failure = "cannot write the answers spool \(path): \(String(cString: strerror(errno)))"
                return
            }
            state.answers.append((request, validators, state.offset, compressed.count, body.count, headers))
            state.offset += compressed.count
        }
    }

    /// The requests a 304 answered.
    package var notModified: Int { state.withLock { $0.notModified } }

    /// Why the answers cannot be kept (the spool failed); `nil` when they can.
    package var failure: String? { state.withLock { $0.failure } }

    /// Each answer to keep, in the order they came (a request answered twice: its last answer).
    package func answers(_ each: (Answer) throws -> Void) throws {
        try state.withLock { state in
            if let failure = state.failure { throw FetchError(url: path, message: failure) }
            var last: [String: Int] = [:]
            for (k, answer) in state.answers.enumerated() { last[answer.request] = k }
            if let file = state.spool { fflush(file) }
            for (k, answer) in state.answers.enumerated() {
                guard last[answer.request] == k else { continue }
                var body: Body?
                if answer.compressed >= 0, let file = state.spool {
                    var bytes = [UInt8](repeating: 0, count: answer.compressed)
                    fseek(file, answer.offset, SEEK_SET)
                    guard bytes.isEmpty || bytes.withUnsafeMutableBytes({ fread($0.baseAddress, 1, $0.count, file) }) == bytes.count
                    else { throw FetchError(url: path, message: "the answers spool is cut short") }
                    body = Body(compressed: bytes, size: answer.size, headers: answer.headers)
                }
                try each(Answer(request: answer.request, validators: answer.validators, body: body))
            }
            if let file = state.spool { fseek(file, 0, SEEK_END) }
        }
    }
}
