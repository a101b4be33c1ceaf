import Foundation

/// A list whose entries are links to detail pages (PokeAPI's `{name, url}`, a list of
/// `{id, href}`): the draft reads the list for its links, fetches a few of them, and drafts the
/// entity from the detail pages — a `for_each` over the list's entries, as docs/cookbook.md's
/// PokeAPI recipe has it by hand — rather than an entity of names and URLs.
///
/// A list of bare ids (Hacker News's `topstories.json`) names its detail pages through a template
/// the user gives (`ingot init URL --for-each "item/{.}.json"`): the same, the template as the
/// `for_each`'s `path:`.
package struct DraftDetails: Sendable {
    /// How each entry names its detail page: the key of the entry that holds its URL, or a path
    /// template that makes it from the entry itself (`{.}`).
    package enum Link: Sendable, Equatable {
        case key(String)
        case template(String)
    }
    package var link: Link
    /// The entity the detail pages are (`pokemon`: the collection their URLs name; `item`: the
    /// template's word before `{.}`).
    package var entity: String
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
    /// The detail pages of a list of links (``DraftDetails``), or of a list of bare ids through
    /// `template`: the first few entries' URLs, on the list's origin only (the headers,
    /// credentials among them, go nowhere else), each read as one record. `nil` when the list's
    /// entries are records of their own.
    package static func details(
        of samples: [Sample], headers: [(String, String)], forEach template: String? = nil, timeout: Double = 30
    ) throws(Failure) -> DraftDetails? {
        guard let first = samples.first, let listURL = first.url else { return nil }
        let (path, layout, _) = try recordsPath(of: first)
        guard case .array = layout else { return nil }
        let entries = records(of: samples, path: path, layout: layout)
        let link: DraftDetails.Link
        let entity: String
        let urls: [String]
        if let template {
            // Bare ids, each the `{.}` of the template, resolved against the list's URL.
            let ids = entries.compactMap { entry in (entry.kind == .number ? entry.numberText : entry.string) }
            guard template.contains("{.}"), !ids.isEmpty, let base = URL(string: listURL) else {
                throw Failure(
                    description: "\(listURL): --for-each \(template) needs a list of bare ids and a path with {.} (item/{.}.json)")
            }
            link = .template(template)
            let word = template.components(separatedBy: "{.}")[0].split(separator: "/").last.map(String.init) ?? "item"
            entity = identifier(singular(word))
            urls = ids.compactMap { id in
                let segment = id.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? id
                return URL(string: template.replacingOccurrences(of: "{.}", with: segment), relativeTo: base)?.absoluteString
            }
        } else {
            guard let (key, collection) = DraftDetails.linkKey(of: entries) else { return nil }
            link = .key(key)
            entity = identifier(singular(collection.collection))
            urls = entries.compactMap { $0[key]?.string }
        }
        let policy = OriginPolicy(url: listURL, allowedHosts: [])
        let client = HTTPClient()
        var details: [Sample] = []
        for url in urls.prefix(DraftDetails.pages) {
            guard policy.check(url) == nil else { continue }
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
                // A detail that is not an object (Hacker News answers `null` for an item it lost)
                // is no record to draft from; the run rejects its page.
                let document = try JSONDocument(bytes: response.body)
                if document.root.kind == .object { details.append(Sample(document: document, url: url)) }
            } catch {
                throw Failure(description: "\(url), a detail page the list links to: not JSON (\(error.description))")
            }
        }
        return details.isEmpty ? nil : DraftDetails(link: link, entity: entity, samples: details)
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
