import CZstd

/// A zstd compressor and decompressor with reused contexts. Not thread-safe: each owner (the
/// archive writer's queue, a reader) has its own.
final class Zstd {
    private let cctx: OpaquePointer?
    private let dctx: OpaquePointer?
    let level: Int32

    init(level: Int32 = 3) {
        self.level = level
        cctx = ZSTD_createCCtx()
        dctx = ZSTD_createDCtx()
    }

    deinit {
        ZSTD_freeCCtx(cctx)
        ZSTD_freeDCtx(dctx)
    }

    /// One zstd frame holding `bytes`, its content size declared in the frame header.
    func compress(_ bytes: [UInt8]) throws(ZstdError) -> [UInt8] {
        let bound = ZSTD_compressBound(bytes.count)
        var failure: ZstdError?
        let out = [UInt8](unsafeUninitializedCapacity: bound) { buffer, count in
            let written = bytes.withUnsafeBytes { src in
                ZSTD_compressCCtx(cctx, buffer.baseAddress, bound, src.baseAddress, src.count, level)
            }
            if ZSTD_isError(written) != 0 {
                failure = ZstdError(message: String(cString: ZSTD_getErrorName(written)))
                count = 0
            } else {
                count = written
            }
        }
        if let failure { throw failure }
        return out
    }

    /// The frame's content, refusing frames that do not declare their size, declare more than
    /// `limit` bytes, or differ from `expectedLength`. Nothing is allocated before the checks.
    func decompress(_ frame: ArraySlice<UInt8>, expectedLength: Int, limit: Int) throws(ZstdError) -> [UInt8] {
        try frame.withUnsafeBytes { bytes in
            Result { () throws(ZstdError) in try decompress(bytes, expectedLength: expectedLength, limit: limit) }
        }.get()
    }

    /// ``decompress(_:expectedLength:limit:)`` of a frame held anywhere (a row libpq holds, a
    /// mapped file).
    func decompress(_ frame: UnsafeRawBufferPointer, expectedLength: Int, limit: Int) throws(ZstdError) -> [UInt8] {
        let declared = ZSTD_getFrameContentSize(frame.baseAddress, frame.count)
        if declared == ZSTD_CONTENTSIZE_ERROR { throw ZstdError(message: "not a zstd frame") }
        if declared == ZSTD_CONTENTSIZE_UNKNOWN { throw ZstdError(message: "the frame does not declare its size") }
        guard expectedLength >= 0, limit >= 0 else { throw ZstdError(message: "a negative length (\(expectedLength)) was expected") }
        guard declared <= UInt64(limit) else {
            throw ZstdError(message: "the frame declares \(declared) bytes, over the limit of \(limit)")
        }
        guard declared == UInt64(expectedLength) else {
            throw ZstdError(message: "the frame declares \(declared) bytes, the metadata \(expectedLength)")
        }
        let size = Int(declared)
        var failure: ZstdError?
        let out = [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            let written = ZSTD_decompressDCtx(dctx, buffer.baseAddress, size, frame.baseAddress, frame.count)
            if ZSTD_isError(written) != 0 {
                failure = ZstdError(message: String(cString: ZSTD_getErrorName(written)))
                count = 0
            } else if written != size {
                failure = ZstdError(message: "the frame inflates to \(written) bytes, not \(size)")
                count = 0
            } else {
                count = written
            }
        }
        if let failure { throw failure }
        return out
    }
}

struct ZstdError: Error, CustomStringConvertible {
    var message: String
    var description: String { "zstd: \(message)" }
}

extension Zstd {
    /// Every frame of `input` decompressed (a `.zst` file, whatever its frames declare), up to
    /// `limit` bytes: past it, nothing is kept and `oversized` says how many bytes were seen
    /// (a zstd bomb never has to fit in memory to be refused).
    func decompressStream(_ input: [UInt8], limit: Int) throws(ZstdError) -> (bytes: [UInt8], oversized: Int?) {
        guard let dctx else { throw ZstdError(message: "no decompression context") }
        ZSTD_DCtx_reset(dctx, ZSTD_reset_session_only)
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var failure: ZstdError?
        var oversized: Int?
        var last = 0
        input.withUnsafeBytes { src in
            var inBuffer = ZSTD_inBuffer(src: src.baseAddress, size: src.count, pos: 0)
            while failure == nil && oversized == nil {
                let (produced, result) = chunk.withUnsafeMutableBytes { dst in
                    var outBuffer = ZSTD_outBuffer(dst: dst.baseAddress, size: dst.count, pos: 0)
                    let result = ZSTD_decompressStream(dctx, &outBuffer, &inBuffer)
                    return (outBuffer.pos, result)
                }
                if ZSTD_isError(result) != 0 {
                    failure = ZstdError(message: String(cString: ZSTD_getErrorName(result)))
                    break
                }
                if out.count + produced > limit {
                    oversized = out.count + produced
                    break
                }
                out.append(contentsOf: chunk[0..<produced])
                last = result
                // Done when the input is used and nothing is left in the context's buffers.
                if inBuffer.pos == inBuffer.size && produced < chunk.count { break }
            }
        }
        if let failure { throw failure }
        if let oversized { return ([], oversized) }
        if last != 0 { throw ZstdError(message: "the file ends inside a frame") }
        return (out, nil)
    }
}
