import Foundation

/// References between drafted entities given as bare values: a key whose values are all
/// integers or all strings (one a record, or an array of them), named for what it refers to —
/// `parent`, `kids` (the record's own entity), `owner_id`, `label_ids`, `owners` (an entity
/// drafted as `owner`) — whose kind is the target's identity's, is a relationship: a to-one for
/// one value, an ordered to-many for an array, the rows it names stubs until their records load.
struct ReferenceHint {
    /// The entity that holds it, its attribute and the key it is read from.
    var entity: String
    var attribute: String
    var key: String
    /// Its values' kind: `integer` or `text`.
    var kind: String
    /// An array of values in each record.
    var many: Bool
    /// Where its values point, when they are URLs of one collection (``URLCollection``).
    var urls: URLCollection?
    /// The distinct values the sample holds there (an integer's digits, a string's text).
    var seen: Set<String> = []

    /// The names that refer to the record's own entity: a parent, and its children.
    static let ownKind: Set<String> = ["parent", "parent_id", "parentid", "kids", "children", "child_ids", "replies", "subtasks"]

    /// The hint for `values` held at `key` (attribute `attribute` of `entity`), if they can name
    /// records: integers, or strings, alone or in arrays, one kind throughout.
    static func of(_ values: [JSONValue], key: String, attribute: String, entity: String) -> ReferenceHint? {
        let present = values.filter { !$0.isNull }
        guard !present.isEmpty else { return nil }
        let many = present.allSatisfy { $0.kind == .array }
        let scalars = many ? present.flatMap { Array($0.elements) } : present
        let kind: String
        if scalars.allSatisfy({ $0.kind == .number && $0.int64 != nil }) {
            kind = "integer"
        } else if scalars.allSatisfy({ $0.kind == .string }) {
            kind = "text"
        } else {
            return nil
        }
        // A record's own address is not a reference to another.
        let urls = kind == "text" && !Self.ownAddress.contains(attribute) ? URLCollection.of(scalars.compactMap(\.string)) : nil
        return ReferenceHint(
            entity: entity, attribute: attribute, key: key, kind: kind, many: many, urls: urls,
            seen: Set(scalars.compactMap(\.identityText)))
    }

    /// Whether its name says it holds ids (`requester_id`, `label_ids`, `assigneeId`), whatever
    /// it names: the names a reference found by its values may have.
    var isNamedAsIDs: Bool { Self.namesIDs(attribute) }

    /// Whether a key's name says it holds ids (ends in `_id` or `_ids`).
    static func namesIDs(_ name: String) -> Bool {
        let lower = name.lowercased()
        return ["_id", "_ids"].contains { lower.hasSuffix($0) && lower.count > $0.count }
    }

    /// The one entity among `identities` whose sampled identities (``EntityBuilder/identityValues``,
    /// of the hint's kind) hold every value the hint's do, when its name says it holds ids but not
    /// whose (Zendesk's `requester_id`, `assignee_id`: users): at least two distinct values, so that
    /// a lone `1` does not make a link. `nil` when none, or more than one, does.
    func targetByValues(among identities: [String: (kind: String, values: Set<String>)]) -> String? {
        guard isNamedAsIDs, urls == nil, seen.count >= 2 else { return nil }
        let holding = identities.filter { $0.value.kind == kind && seen.isSubset(of: $0.value.values) }.map(\.key)
        return holding.count == 1 ? holding[0] : nil
    }

    /// Names under which a record gives its own URL.
    static let ownAddress: Set<String> = ["url", "self", "href", "uri", "link", "html_url", "web_url", "permalink"]

    /// The entity it names, among `identities` (each entity with an identity, and its kind): its
    /// own for ``ownKind`` names, else the one the name says (`owner_id`, `owners`, `label_ids`);
    /// `nil` when none does or the kinds differ.
    func target(among identities: [String: String]) -> String? {
        let name = attribute.lowercased()
        let entityNamed: String?
        if Self.ownKind.contains(name) {
            entityNamed = entity
        } else {
            var base = name
            for suffix in ["_ids", "_id", "ids", "id"] where base.hasSuffix(suffix) && base.count > suffix.count {
                base = String(base.dropLast(suffix.count))
                break
            }
            base = base.hasSuffix("_") ? String(base.dropLast()) : base
            let candidates = [base, PipelineDraft.singular(base)]
            entityNamed = candidates.first { identities[$0] != nil && $0 != entity }
            // A plain name (`owner`) with one value is a reference only by its `_id`: `name` is not.
            if entityNamed != nil, !many, base == name { return nil }
        }
        guard let target = entityNamed, let identityKind = identities[target], identityKind == kind else { return nil }
        return target
    }
}

/// What URLs name: the collection their path ends in before an id (`…/api/planets/1/`:
/// `planets`, under `http://host/api/planets`). References given as URLs (the Star Wars API's
/// `homeworld`, `films`) are relationships to the entity of that collection, whose identity is
/// its URL.
struct URLCollection: Hashable {
    /// Scheme, host and port, and the path up to the collection: what the URLs share.
    var base: String
    /// The collection's own segment (`planets`).
    var collection: String

    /// The one collection every text names, if each is an http(s) URL whose last segment is an
    /// id (digits, or a UUID) after the collection's.
    static func of(_ texts: [String]) -> URLCollection? {
        var found: URLCollection?
        for text in texts {
            guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
                let host = url.host, !host.isEmpty
            else { return nil }
            let segments = url.path.split(separator: "/")
            guard segments.count >= 2, let last = segments.last, isID(last) else { return nil }
            let port = url.port.map { ":\($0)" } ?? ""
            let here = URLCollection(
                base: "\(scheme)://\(host)\(port)/" + segments.dropLast().joined(separator: "/"),
                collection: String(segments[segments.count - 2]))
            if let found, found != here { return nil }
            found = here
        }
        return found
    }

    /// Digits, or a UUID's hex digits and dashes.
    private static func isID(_ segment: Substring) -> Bool {
        if segment.allSatisfy({ $0.isASCII && $0.isNumber }) { return true }
        return segment.count >= 32 && segment.allSatisfy { $0.isHexDigit || $0 == "-" }
    }
}

extension JSONValue {
    /// The text an identity is compared by across the sample: an integer's digits, a string's
    /// text; `nil` for anything else.
    var identityText: String? {
        switch kind {
        case .number: int64.map { String($0) }
        case .string: string
        default: nil
        }
    }
}
