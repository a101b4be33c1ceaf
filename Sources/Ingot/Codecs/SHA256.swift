import CCrypto

/// SHA-256 (FIPS 180-4) through libcrypto (`EVP_Digest`; the CPU's SHA extensions where it has
/// them, about 2 GB/s here): digests that name content — a joined run's spec, a page a refresh
/// compares with the last run's. Never used on a secret.
enum SHA256 {
    /// The 32-byte digest of `bytes`.
    static func digest(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let done = out.withUnsafeMutableBufferPointer { md in
            // An empty buffer may have no base address; libcrypto wants a pointer all the same.
            withUnsafeBytes(of: 0) { empty in
                EVP_Digest(bytes.baseAddress ?? empty.baseAddress, bytes.count, md.baseAddress, &length, EVP_sha256(), nil)
            }
        }
        // EVP_Digest fails only without memory for its context: libcrypto's own abort would follow.
        precondition(done == 1 && length == 32, "libcrypto's SHA-256 failed")
        return out
    }

    /// The digest of `bytes`.
    static func digest(_ bytes: [UInt8]) -> [UInt8] {
        bytes.withUnsafeBytes { digest($0) }
    }

    /// The digest of `bytes`, as 64 lowercase hex digits.
    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let message = Array(bytes)
        return hex(digest: digest(message))
    }

    /// `digest` as lowercase hex digits.
    static func hex(digest: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(digest.count * 2)
        for byte in digest {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
