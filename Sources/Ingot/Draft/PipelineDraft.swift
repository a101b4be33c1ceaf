import Foundation

/// A pipeline drafted from sample pages (`ingot init`, docs/pipelines.md, "A first draft"):
/// where the records sit, how the pages follow each other, the entities with their identities,
/// types and relationships — each guess with the reason for it, as a YAML comment beside it.
/// A value: made from pages, printed as text; ``PipelineConfig/parse(text:path:environment:)``
/// checks it like any file.
package struct PipelineDraft: Sendable {
    /// One page read: its JSON, and for a fetched page its URL and response headers (names
    /// lowercased).
    package struct Sample: Sendable {
        package var document: JSONDocument
        package var url: String?
        package var headers: [String: String]
        /// The query parameter a cursor was confirmed as (the next page read by it differed).
        package var cursorParam: String?
        /// The files it was read from, for a directory's draft.
        package var files: FilesShape?

        package init(document: JSONDocument, url: String? = nil, headers: [String: String] = [:]) {
            self.document = document
            self.url = url
            self.headers = headers
        }
    }

    /// Why no pipeline can be drafted from the pages, naming the page and what was found.
    package struct Failure: Error, Sendable, CustomStringConvertible {
        package var description: String
    }

    /// Where the source comes from: a URL (with the paginator drafted for it) or a directory.
    package enum Origin: Sendable {
        case url(String, bearerEnv: String?)
        case directory(String)
    }

    package var name: String
    package var origin: Origin
    /// `records:` (`"."`: the page itself).
    package var recordsPath: String
    /// How the value there holds the records (a dictionary's values, columns).
    package var layout = RecordsLayout.array
    package var recordsWhy: String
    /// `paginate:` as YAML flow text, with why; `nil`: one request.
    package var paginate: (yaml: String, why: String)?
    /// `sync_url:` and why, when the last page read names where a next sync starts.
    package var syncURL: (path: String, why: String)?
    /// Arrays beside the records that hold what they name (``DraftSideload``): each page key and
    /// its entity, read as `records: {paths: …}` before the records.
    package var sideloads: [(path: String, entity: String)] = []
    /// The files a directory's draft read (their glob, and whether they are JSON Lines).
    package var files: FilesShape?
    /// `error_when:` as YAML flow text, with why, when the pages say whether they succeeded.
    package var errorWhen: (yaml: String, why: String)?
    package var root: String
    package var entities: [DraftEntity]
    /// The detail pages the list's entries link to, when the root entity is drafted from them.
    package var details: DraftDetails?

    /// The YAML text of the pipeline.
    package var yaml: String {
        var out = "# Drafted by `ingot init` from sample pages: check each guess (the comments say why it was made).\n"
        out += "version: 1\nname: \(name)\n"
        if let details, case .url(let url, let bearer) = origin { return out + resourcesYAML(url, bearer, details) }
        out += "source:\n"
        switch origin {
        case .url(let url, let bearer):
            out += "  http:\n    url: \(Self.quoted(url))\n"
            if let bearer { out += "    auth: {bearer_env: \(bearer)}\n" }
            if let paginate { out += "    paginate: \(paginate.yaml)   # \(paginate.why)\n" }
            if let syncURL { out += "    sync_url: \(syncURL.path)   # \(syncURL.why)\n" }
            if let errorWhen { out += "    error_when: \(errorWhen.yaml)   # \(errorWhen.why)\n" }
        case .directory(let dir):
            let shape = files ?? FilesShape(glob: "*.json", jsonLines: false)
            out += "  files: {dir: \(Self.quoted(dir)), glob: \(Self.quoted(shape.glob))\(shape.jsonLines ? ", format: jsonl" : "")}\n"
        }
        if !sideloads.isEmpty {
            let paths = (sideloads + [(recordsPath, root)]).map { "\(Self.quoted($0.path)): \($0.entity)" }
            return out + "records: {paths: {\(paths.joined(separator: ", "))}}   # \(recordsWhy)\n" + entitiesYAML
        }
        switch layout {
        case .values(let key, _): out += "records: {values: \(Self.quoted(recordsPath)), key: \(key)}   # \(recordsWhy)\n"
        case .columns: out += "records: {columns: \(Self.quoted(recordsPath))}   # \(recordsWhy)\n"
        default: out += "records: \(Self.quoted(recordsPath))   # \(recordsWhy)\n"
        }
        return out + "root: \(root)\n" + entitiesYAML
    }

    /// `entities:` and each drafted entity.
    private var entitiesYAML: String { "entities:\n" + entities.map(\.yaml).joined() }

    /// A list of links and its detail pages as two resources: the list read for its links (no
    /// root), and a `for_each` over its entries fetching each detail page, one record each.
    private func resourcesYAML(_ url: String, _ bearer: String?, _ details: DraftDetails) -> String {
        // The list's folder: a template's path is relative to it (`item/{.}.json` beside
        // `topstories.json`), and the detail requests go to its origin only.
        let parts = URLText.Parts(url[...])
        let origin = (parts.scheme.map { "\($0)://" } ?? "") + (parts.authority.map(String.init) ?? "") + "/"
        let folder = URL(string: "./", relativeTo: URL(string: url))?.absoluteString ?? origin
        let list = root + "_list"
        var out =
            "defaults:\n  http:\n    url: \(Self.quoted(folder))   # the list's folder: the detail pages' requests go to its origin only\n"
        if let bearer { out += "    auth: {bearer_env: \(bearer)}\n" }
        out += "resources:\n  - name: \(list)   # the list's entries name detail pages: read for them, not stored\n"
        out += "    source:\n      http:\n        url: \(Self.quoted(url))\n"
        if let paginate { out += "        paginate: \(paginate.yaml)   # \(paginate.why)\n" }
        out += "    records: \(Self.quoted(recordsPath))   # \(recordsWhy)\n"
        out += "  - name: \(root)   # each entry's detail page (\(details.samples.count) read for this draft), one \(root) each\n"
        switch details.link {
        case .key(let key): out += "    for_each: {resource: \(list), url: \(Self.quoted("{\(key)}"))}\n"
        case .template(let path): out += "    for_each: {resource: \(list), path: \(Self.quoted(path))}\n"
        }
        return out + "    records: \".\"\n    root: \(root)\n" + entitiesYAML
    }

    /// `text` as a YAML scalar: double-quoted (JSON's escapes are YAML's).
    static func quoted(_ text: String) -> String {
        var out = ""
        JSONText.quote(text, into: &out)
        return out
    }
}

/// One entity of a draft: its attributes, identity and relationships, with the reasons.
package struct DraftEntity: Sendable {
    package var name: String
    /// Its identity's attributes: one, several (a composite identity), or none.
    package var identity: [String]
    package var identityWhy: String
    /// Attributes in first-seen order: name, the YAML of its declaration, and why.
    package var attributes: [(name: String, yaml: String, why: String?)]
    /// Relationships: name, the YAML of its declaration, why, and whether its key holds bare
    /// identities (``ReferenceHint``) rather than the target's records.
    package var relationships: [(name: String, yaml: String, why: String, byReference: Bool)]

    var yaml: String {
        var out = "  \(name):\n"
        switch identity.count {
        case 0: out += "    # no identity: \(identityWhy)\n"
        case 1: out += "    identity: \(identity[0])   # \(identityWhy)\n"
        default: out += "    identity: [\(identity.joined(separator: ", "))]   # \(identityWhy)\n"
        }
        out += "    attributes:\n"
        for a in attributes { out += "      \(a.name): \(a.yaml)" + (a.why.map { "   # \($0)" } ?? "") + "\n" }
        if !relationships.isEmpty {
            out += "    relationships:\n"
            for r in relationships { out += "      \(r.name): \(r.yaml)   # \(r.why)\n" }
        }
        return out
    }
}
