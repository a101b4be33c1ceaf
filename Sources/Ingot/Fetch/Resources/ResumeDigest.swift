import Foundation

/// A digest chained over the identities of a for_each's requests, in order (SHA-256 of the
/// previous digest and the request's URL and injected values), advanced as the requests are
/// made: what a resume state says of the requests before it (ResourcesPageSource).
struct ResumeDigest {
    /// The requests it covers: `items[0..<count]`.
    private(set) var count = 0
    private var digest = [UInt8](repeating: 0, count: 32)

    /// The digest over `items[0..<n]` (hex, 24 digits), advancing from where it stands (or from
    /// the start, for a shorter prefix).
    mutating func advance(over items: RequestList, through n: Int) -> String {
        let n = min(n, items.count)
        if n < count { self = ResumeDigest() }
        while count < n {
            var bytes = digest
            bytes += items[count].url.utf8
            for value in items[count].injected {
                bytes.append(0)
                bytes += value.key.utf8
                bytes.append(0)
                bytes += value.json.utf8
            }
            digest = SHA256.digest(bytes)
            count += 1
        }
        return SHA256.hex(digest.prefix(12))
    }
}
