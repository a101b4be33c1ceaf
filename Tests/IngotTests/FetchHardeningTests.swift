import Foundation
import Testing

@testable import Ingot

/// URLs and secrets on the fetch side (hardening round 2, items 6 and 11).
struct FetchHardeningTests {
    /// A redirect or next URL is used as the server sent it: escapes kept, only what a URL
    /// cannot hold encoded (once).
    @Test(arguments: [
        ("/a%2Fb c?q=%20x y", "http://h.test/a%2Fb%20c?q=%20x%20y"),
        ("/files/100%?p=%2", "http://h.test/files/100%25?p=%252"),
        ("/caf\u{E9}%2F", "http://h.test/caf%C3%A9%2F"),
        ("https://h.test/plain?a=1&b=%7E", "https://h.test/plain?a=1&b=%7E"),
    ])
    func aURLFromAResponseIsEscapedOnce(target: String, expected: String) throws {
        let escaped = FetchRules.escapingInvalid(target)
        let absolute = URL(string: escaped, relativeTo: URL(string: "http://h.test/start"))?.absoluteString
        #expect(absolute == expected)
    }
}
