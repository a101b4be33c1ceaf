import Foundation
import Testing

@testable import Ingot

/// A `for_each`'s template is made ready once (Fetch/Resources/ForEachTemplate.swift): its URLs are
/// what resolving and checking each one alone gives, for every template shape and hostile value.
struct ForEachTemplateTests {
    /// Foundation's percent-encoding, as the source used it before it encoded byte by byte.
    static func foundationEncoded(_ text: String, inQuery: Bool) -> String {
        var allowed = inQuery ? CharacterSet.urlQueryAllowed : CharacterSet.urlPathAllowed
        allowed.remove(charactersIn: inQuery ? "/;?#&=+" : "/;?#")
        let encoded = text.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
        if !encoded.isEmpty && encoded.allSatisfy({ $0 == "." }) { return String(repeating: "%2E", count: encoded.count) }
        return encoded
    }

    static let values: [String] =
        (0x20...0x7E).map { String(UnicodeScalar(UInt8($0))) } + [
            "", "..", ".", "...", "a.b", "a/b c?d", "a#b", "é", "日本", "100%", "%41", "&admin=1+b", "-._~!$'()*,:@", "\u{7F}",
            "\u{1}", "evil.com:80", "//evil.example/x", "http://evil.example/", "a;b", "\u{1F600}",
        ]

    @Test(arguments: [false, true])
    func byteEncodingIsFoundations(inQuery: Bool) {
        for value in Self.values {
            #expect(ResourcesPageSource.encoded(value, inQuery: inQuery) == Self.foundationEncoded(value, inQuery: inQuery), "\(value)")
        }
    }

    /// The `for_each` of a pipeline whose detail requests are `path: template` below
    /// `https://api.example.org/v1/`.
    static func forEach(_ template: String) throws -> ResourceConfig.ForEach {
        let yaml = """
            version: 1
            name: t
            defaults: {http: {url: "https://api.example.org/v1/"}}
            resources:
              - {name: list, source: {http: {url: items}}, records: "."}
              - {name: each, for_each: {resource: list, path: "\(template)"}, records: ".", root: a}
            entities: {a: {identity: id, attributes: {id: integer}}}
            """
        return try #require(try PipelineConfig.parse(text: yaml, path: "t.yml").resources[1].forEach)
    }

    static let templates = [
        "items/{key}", "items/{key}/detail?q={key}&page=1", "/abs/{key}", "../up/{key}/x", "./a/{key}?n={n}", "items?id={key}&n={n}",
        "{key}/detail", "x{key}/detail",
    ]

    @Test(arguments: templates)
    func aSkeletonGivesWhatResolvingEachURLGives(template: String) throws {
        let forEach = try Self.forEach(template)
        let fast = ForEachTemplate(forEach)
        let slow = ForEachTemplate(forEach, resolvingEach: true)
        #expect(slow.pieces == nil)
        // Values that could reach the scheme or host are resolved one by one.
        #expect((fast.pieces == nil) == (template.hasPrefix("{") || template.hasPrefix("x{")), "\(template)")
        for value in Self.values {
            let text = try JSONEncoder().encode(["key": value, "n": value + "1"])
            let record = try JSONDocument(bytes: Array(text)).root
            #expect(fast.request(for: record) == slow.request(for: record), "\(template) with \(value)")
        }
        let number = try JSONDocument(bytes: Array(#"{"key": 5, "n": 2.5}"#.utf8)).root
        #expect(fast.request(for: number) == slow.request(for: number))
        #expect(fast.request(for: try JSONDocument(bytes: Array(#"{"n": 1}"#.utf8)).root) == .missing(JSONKeyPath(keys: ["key"])))
    }

    /// A literal part that is not valid in a URL (a space) is encoded once, and the values are
    /// not encoded again: resolving each rendered URL alone turned `é` into `%25C3%25A9`.
    @Test func aLiteralWithASpaceDoesNotEncodeValuesTwice() throws {
        let forEach = try Self.forEach("a b/{key}")
        let record = try JSONDocument(bytes: Array(#"{"key": "é/.."}"#.utf8)).root
        #expect(ForEachTemplate(forEach).request(for: record) == .url("https://api.example.org/v1/a%20b/%C3%A9%2F.."))
    }
}

/// A `for_each`'s requests are kept in a temporary file as they are collected, their offsets in
/// memory (Fetch/Resources/RequestList.swift); the peak memory of 300,000 of them is `make bench`'s
/// `bounds` case.
struct RequestListTests {
    /// 30,000 requests (about 2.6 MB: the file takes them past two 1 MiB flushes, the last ones
    /// still in the buffer) read back whole, in a seeded random order and in order from a resume's
    /// start.
    @Test func requestsReadBackFromTheFileAndTheBufferAlike() {
        let list = RequestList()
        func item(_ k: Int) -> ResourcesPageSource.Item {
            ResourcesPageSource.Item(
                url: "https://api.example.com/items/\(k)?expand=owner",
                injected: [InjectedValue(key: "listed_as", json: "\"item-\(k)\""), InjectedValue(key: "n", json: "\(k)")],
                depth: 1 + k % 3)
        }
        for k in 0..<30_000 { list.append(item(k)) }
        #expect(list.count == 30_000)
        var rng = SeededGenerator(seed: 7)
        for k in (0..<500).map({ _ in Int.random(in: 0..<30_000, using: &rng) }) + [0, 29_999] {
            let got = list[k]
            let want = item(k)
            #expect(got.url == want.url && got.injected == want.injected && got.depth == want.depth, "request \(k)")
        }
        let urls = list.urls(from: 29_990)
        #expect(urls.count == 10 && (0..<10).map { urls[$0] } == (29_990..<30_000).map { item($0).url })
    }
}
