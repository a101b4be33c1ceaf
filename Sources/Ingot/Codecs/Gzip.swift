import CZlib

/// gzip (RFC 1952) and zlib (RFC 1950) streams inflated through zlib, up to a limit.
enum Gzip {
    /// Why a stream cannot be inflated.
    struct Failure: Error, CustomStringConvertible {
        var message: String
        var description: String { "gzip: \(message)" }
    }

    /// Every member of `input` inflated (a `.gz` file; concatenated members as `gzip -d` reads
    /// them), up to `limit` bytes: past it, nothing is kept and `oversized` says how many bytes
    /// were seen (a gzip bomb never has to fit in memory to be refused).
    static func inflate(_ input: [UInt8], limit: Int) throws(Failure) -> (bytes: [UInt8], oversized: Int?) {
        var stream = z_stream()
        // 15 + 32: the largest window, and a gzip or zlib header detected automatically.
        guard inflateInit2_(&stream, 15 + 32, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            throw Failure(message: "cannot start inflating")
        }
        defer { inflateEnd(&stream) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var failure: Failure?
        var oversized: Int?
        var ended = false
        input.withUnsafeBufferPointer { src in
            stream.next_in = UnsafeMutablePointer(mutating: src.baseAddress)
            stream.avail_in = UInt32(src.count)
            while failure == nil && oversized == nil {
                let (produced, status) = chunk.withUnsafeMutableBufferPointer { dst in
                    stream.next_out = dst.baseAddress
                    stream.avail_out = UInt32(dst.count)
                    let status = CZlib.inflate(&stream, Z_NO_FLUSH)
                    return (dst.count - Int(stream.avail_out), status)
                }
                if out.count + produced > limit {
                    oversized = out.count + produced
                    break
                }
                out.append(contentsOf: chunk[0..<produced])
                switch status {
                case Z_STREAM_END:
                    // Another member may follow (`cat a.gz b.gz`).
                    if stream.avail_in == 0 {
                        ended = true
                        return
                    }
                    inflateReset(&stream)
                case Z_OK:
                    if stream.avail_in == 0 && produced == 0 { return }
                case Z_BUF_ERROR where stream.avail_in == 0:
                    return
                default:
                    failure = Failure(message: stream.msg.map { String(cString: $0) } ?? "a damaged stream (zlib \(status))")
                }
            }
        }
        if let failure { throw failure }
        if let oversized { return ([], oversized) }
        guard ended else { throw Failure(message: "the file ends inside the stream") }
        return (out, nil)
    }
}
