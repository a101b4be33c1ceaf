import Foundation

/// A list whose entries are links to detail pages (PokeAPI's `{name, url}`, a list of
/// `{id, href}`): the draft reads the list for its links, fetches a few of them, and drafts the
/// entity from the detail pages — a `for_each` over the list's entries, as docs/cookbook.md's
/// PokeAPI recipe has it by hand — rather than an entity of names and URLs.
package struct DraftDetails: Sendable {
    /// The key of each entry that holds its detail page's URL.
    package var linkKey: String
    /// The collection the links name (`pokemon`, under `…/api/v2/pokemon`).
    var collection: URLCollection
    /// The detail pages read, one record each.
    package var samples: [PipelineDraft.Sample]

    /// How many detail pages a draft reads.
    package static let pages = 3

    /// The key whose values are the detail URLs, when `entries` are links: every entry an object
    /// of three keys at most, one of them a URL of one collection (a different one each), the
    /// others short values (a name, an id) — nothing a record of its own would hold (no object,
    /// no array). `nil` otherwise.
    static func linkKey(of entries: [JSONValue]) -> (key: String, collection: URLCollection)? {
        guard !entries.isEmpty, entries.allSatisfy({ $0.kind == .object && $0.count <= 3 }) else { return nil }
        let keys = EntityBuilder.keys(of: entries)
        for key in keys {
            let texts = entries.compactMap { $0[key]?.string }
            guard texts.count == entries.count, Set(texts).count == texts.count, let collection = URLCollection.of(texts) else {
                continue
            }
            let others = keys.filter { $0 != key }
            let short = others.allSatisfy { other in
                entries.allSatisfy { entry in entry[other].map { $0.kind != .object && $0.kind != .array } ?? true }
            }
            return short ? (key, collection) : nil
        }
        return nil
    }
}

extension PipelineDraft {
    /// The detail pages of a list of links (``DraftDetails``): the first few entries' URLs, on
    /// the list's origin only (the headers, credentials among them, go nowhere else), each read
    /// as one record. `nil` when the list's entries are records of their own.
    package static func details(
        of samples: [Sample], headers: [(String, String)], timeout: Double = 30
    ) throws(Failure) -> DraftDetails? {
        guard let first = samples.first, let listURL = first.url else { return nil }
        let (path, layout, _) = try recordsPath(of: first)
        guard case .array = layout else { return nil }
        let entries = records(of: samples, path: path, layout: layout)
        guard let (key, collection) = DraftDetails.linkKey(of: entries) else { return nil }
        let policy = OriginPolicy(url: listURL, allowedHosts: [])
        let client = HTTPClient()
        var details: [Sample] = []
        for entry in entries.prefix(DraftDetails.pages) {
            guard let url = entry[key]?.string, policy.check(url) == nil else { continue }
            let response: HTTPResponse
            do {
                response = try client.get(url, headers: headers, timeout: timeout)
            } catch {
                throw Failure(description: "\(url): \(error)")
            }
            guard (200..<300).contains(response.status) else {
                throw Failure(description: "\(url), a detail page the list links to: HTTP \(response.status)")
            }
            do {
                let document = try JSONDocument(bytes: response.body)
                guard document.root.kind == .object else { return nil }
                details.append(Sample(document: document, url: url))
            } catch {
                throw Failure(description: "\(url), a detail page the list links to: not JSON (\(error.description))")
            }
        }
        return details.isEmpty ? nil : DraftDetails(linkKey: key, collection: collection, samples: details)
    }

    /// The records of `samples` at `path`, laid out as `layout` says, in the order read.
    static func records(of samples: [Sample], path: String, layout: RecordsLayout) -> [JSONValue] {
        let framing = RecordFraming.of(recordsPath: path == "." ? [] : path.components(separatedBy: "."), jsonLines: false, layout: layout)
        var records: [JSONValue] = []
        for sample in samples {
            guard let document = try? framing.parse(sample.document.bytes), case .success(let found) = framing.records(in: document) else {
                continue
            }
            var node = found.first
            for _ in 0..<found.count {
                records.append(JSONValue(document: document, index: node))
                node = Int(document.nodes[node].end)
            }
        }
        return records
    }
}
