import Foundation

/// Drafts entities from sample records: per key, what every record says there decides its type;
/// nested objects and arrays of objects that carry an identity become entities of their own,
/// linked; anything else is kept as JSON.
struct EntityBuilder {
    private(set) var entities: [DraftEntity] = []
    /// Each drafted entity with an identity, and its kind (`integer` or `text`).
    private(set) var identityKinds: [String: String] = [:]
    /// The identities each drafted entity with a one-key identity has in the sample
    /// (``JSONValue/identityText``): what a reference found by its values must be among.
    private(set) var identityValues: [String: Set<String>] = [:]
    /// The attributes whose values could name records (DraftReferences.swift).
    private(set) var hints: [ReferenceHint] = []
    /// The entities whose identity is a URL of one collection, and that collection.
    private var urlIdentities: [String: URLCollection] = [:]

    /// The keys an identity is looked for under, in order of preference.
    static let identityKeys = [
        "id", "uuid", "_id", "key", "number", "login", "accountId", "slug", "url", "name", "version", "time", "date", "timestamp",
        "ts",
    ]

    /// Each nested entity's keys and identity: objects of the same shape under another key (an
    /// issue's `author` and `assignees`) are records of the same entity.
    private var shapes: [(name: String, keys: Set<String>, identity: [String])] = []

    /// Adds the entity `name` drafted from `objects`; returns the name it got (made unique) and
    /// its identity's attributes (none when it has no identity).
    @discardableResult
    mutating func add(_ name: String, _ objects: [JSONValue], depth: Int = 0) -> (name: String, identity: [String]) {
        let (identityKeys, why, identityKind) = Self.identity(of: objects)
        let keySet = Set(Self.keys(of: objects))
        if depth > 0, !identityKeys.isEmpty,
            let same = shapes.first(where: { $0.keys == keySet && $0.identity == identityKeys }),
            let drafted = entities.first(where: { $0.name == same.name })
        {
            return (same.name, drafted.identity)
        }
        var unique = name
        var n = 2
        while entities.contains(where: { $0.name == unique }) {
            unique = name + "_\(n)"
            n += 1
        }
        let index = entities.count
        entities.append(DraftEntity(name: unique, identity: [], identityWhy: "", attributes: [], relationships: []))
        var entity = DraftEntity(name: unique, identity: [], identityWhy: "", attributes: [], relationships: [])
        // A single key's kind: what references to the entity must be (a composite has none).
        let identityKey = identityKeys.count == 1 ? identityKeys[0] : nil
        entity.identityWhy = why
        if let identityKind { identityKinds[unique] = identityKind }
        if let identityKey {
            let values = Self.values(of: objects, at: identityKey)
            identityValues[unique] = Set(values.compactMap(\.identityText))
            if identityKind == "text" { urlIdentities[unique] = URLCollection.of(values.compactMap(\.string)) }
        }
        var used: Set<String> = []
        var named: [String: String] = [:]
        let own = OwnKind(name: unique, keys: keySet, identity: identityKeys)
        addMembers(of: objects, path: [], own: own, into: &entity, named: &named, used: &used, depth: depth)
        entity.identity = identityKeys.compactMap { named[$0] }
        entities[index] = entity
        if depth > 0 { shapes.append((unique, keySet, identityKeys)) }
        return (unique, entity.identity)
    }

    /// Adds what `objects` hold below `path` (their own members at the top) to `entity`: values as
    /// attributes, objects and arrays of objects with an identity as relationships to entities of
    /// their own, objects without one flattened into attributes (`fields.summary` as
    /// `fields_summary`, two levels at most), anything else as JSON.
    private mutating func addMembers(
        of objects: [JSONValue], path: [String], own: OwnKind, into entity: inout DraftEntity,
        named identityAttributes: inout [String: String], used: inout Set<String>, depth: Int
    ) {
        let identityKeys = own.identity
        let holders = path.isEmpty ? objects : objects.compactMap { JSONKeyPath(keys: path).resolve(in: $0) }.filter { $0.kind == .object }
        for key in Self.keys(of: holders) {
            guard !key.contains("."), !key.contains("["), !key.isEmpty else { continue }  // not a key path part
            let keyPath = path + [key]
            let values = holders.compactMap { $0[key] }
            var attribute = PipelineDraft.identifier(keyPath.joined(separator: "_"))
            if EntityModel.reservedColumn(attribute) != nil || used.contains(attribute) { attribute += "_value" }
            used.insert(attribute)
            let written = keyPath.joined(separator: ".")
            let keyPart = attribute == written ? "" : ", key: \(PipelineDraft.quoted(written))"
            if identityKeys.contains(written) { identityAttributes[written] = attribute }
            // The object that holds the record's own identity is the record's: flattened.
            let holdsIdentity = identityKeys.contains { $0.hasPrefix(written + ".") }
            switch holdsIdentity ? .other : Self.nested(values) {
            case .entity(let many, let members, let identity) where own.isCopied(by: members, identifiedBy: identity):
                // A partial copy of a record of the entity's own kind (Jira's `fields.parent`).
                let yaml = "{to: \(own.name)\(many ? ", many: true" : ""), key: \(PipelineDraft.quoted(written)), partial: true}"
                let why =
                    "objects with the records' own identity and only keys they have: \(many ? "partial copies" : "a partial copy") of \(own.name), erasing nothing it lacks"
                entity.relationships.append((attribute, yaml, why, false))
                continue
            case .entity(let many, let members, _) where depth < 3:
                let wanted = PipelineDraft.singular(PipelineDraft.identifier(key))
                let target = add(wanted, members, depth: depth + 1)
                if !target.identity.isEmpty {
                    let yaml = "{to: \(target.name)\(many ? ", many: true" : ""), key: \(PipelineDraft.quoted(written))}"
                    let shared =
                        target.name.hasPrefix(wanted) ? "" : " (the keys and identity of \(target.name)'s: records of the one entity)"
                    let why =
                        (many
                            ? "arrays of objects with an identity: a to-many, linked by identity" : "an object with an identity: a to-one")
                        + shared
                    entity.relationships.append((attribute, yaml, why, false))
                    continue
                }
                entities.removeAll { $0.name == target.name }
                entity.attributes.append((attribute, "{type: json\(keyPart)}", "objects without an identity: kept as JSON"))
            default:
                let present = values.filter { !$0.isNull }
                if !present.isEmpty, present.allSatisfy({ $0.kind == .object }), path.count < 2 {
                    addMembers(
                        of: holders, path: keyPath, own: own, into: &entity, named: &identityAttributes, used: &used, depth: depth)
                    continue
                }
                let (type, why) = Self.type(of: values, named: key)
                if !identityKeys.contains(written),
                    let hint = ReferenceHint.of(values, key: written, attribute: attribute, entity: entity.name)
                {
                    hints.append(hint)
                }
                entity.attributes.append((attribute, keyPart.isEmpty && !Self.isMapping(type) ? type : Self.merge(type, keyPart), why))
            }
        }
    }

    /// Turns the attributes that name other records (``ReferenceHint``) into relationships,
    /// once every entity is drafted.
    mutating func linkReferences() {
        let sampled = Dictionary(
            uniqueKeysWithValues: identityKinds.compactMap { name, kind in identityValues[name].map { (name, (kind: kind, values: $0)) } })
        for hint in hints {
            let named = hint.urls.map { urlTarget($0, namedBy: hint) } ?? hint.target(among: identityKinds)
            let byValues = named == nil ? hint.targetByValues(among: sampled) : nil
            guard let target = named ?? byValues,
                let e = entities.firstIndex(where: { $0.name == hint.entity }),
                !entities[e].identity.contains(hint.attribute),
                let a = entities[e].attributes.firstIndex(where: { $0.name == hint.attribute })
            else { continue }
            entities[e].attributes.remove(at: a)
            let yaml =
                "{to: \(target)\(hint.many ? ", many: true" : ""), key: \(PipelineDraft.quoted(hint.key))\(hint.many ? ", ordered: true" : "")}"
            let (one, values) =
                hint.urls.map { ("a URL (\($0.base)/ID)", "URLs (\($0.base)/ID)") }
                ?? (hint.kind == "integer" ? ("an integer id", "integer ids") : ("an id", "ids"))
            let by = hint.urls == nil ? "by the key's name" : hint.many ? "by the collection they name" : "by the collection it names"
            let why =
                byValues != nil
                ? "the \(hint.seen.count) \(values) the sample holds here are all ids of \(target) records, though the key's name does not say so: check it; \(hint.many ? "an ordered to-many, stubs until they load" : "a to-one, a stub until it loads")"
                : hint.many
                    ? "\(values) of \(target), \(by): an ordered to-many, stubs until they load"
                    : "\(one) of one \(target), \(by): a to-one, a stub until it loads"
            entities[e].relationships.append((hint.attribute, yaml, why, true))
        }
    }

    /// The entity URLs of `urls`' collection name: the drafted one whose identity is such a URL,
    /// else one drafted for them (`planets` → `planet`, its identity the URL), stubs until its
    /// records load. `nil` when an entity of that name is drafted with another identity.
    private mutating func urlTarget(_ urls: URLCollection, namedBy hint: ReferenceHint) -> String? {
        if let drafted = urlIdentities.keys.sorted().first(where: { urlIdentities[$0] == urls }) { return drafted }
        let name = PipelineDraft.singular(PipelineDraft.identifier(urls.collection))
        guard !name.isEmpty, !entities.contains(where: { $0.name == name }) else { return nil }
        let why = "the URLs \(hint.entity).\(hint.attribute) holds: stubs until their records load (draft from \(urls.base)/ to fill them)"
        entities.append(
            DraftEntity(name: name, identity: ["url"], identityWhy: why, attributes: [("url", "string", nil)], relationships: []))
        identityKinds[name] = "text"
        urlIdentities[name] = urls
        return name
    }

    /// The entity whose records are being read: its name, the keys its records have, its identity.
    struct OwnKind {
        var name: String
        var keys: Set<String>
        var identity: [String]

        /// Whether nested `members`, identified by the keys `theirs`, are copies of such records:
        /// the same identity, something besides it (an object of an id alone names a record of any
        /// kind), and no key the records lack.
        func isCopied(by members: [JSONValue], identifiedBy theirs: [String]) -> Bool {
            let memberKeys = Set(EntityBuilder.keys(of: members))
            return !identity.isEmpty && theirs == identity && memberKeys.count > identity.count && memberKeys.isSubset(of: keys)
        }
    }

    /// What `objects` hold at the key path `key` (`data.name`), where they hold anything.
    static func values(of objects: [JSONValue], at key: String) -> [JSONValue] {
        let path = JSONKeyPath(keys: key.components(separatedBy: "."))
        return objects.compactMap { path.resolve(in: $0) }
    }

    /// Whether a type's YAML is a flow mapping (`{type: date, …}`) rather than a word.
    static func isMapping(_ type: String) -> Bool { type.first == "\u{7B}" }

    /// `{type: T}` with `, key: "k"` added (or `T` written as a mapping first).
    static func merge(_ type: String, _ keyPart: String) -> String {
        if isMapping(type) { return String(type.dropLast()) + keyPart + "}" }
        return "{type: \(type)\(keyPart)}"
    }

    /// Every key of `objects`, in the order first seen.
    static func keys(of objects: [JSONValue]) -> [String] {
        var seen: Set<String> = []
        var keys: [String] = []
        for object in objects {
            for (key, _) in object.members {
                if let name = key.string, seen.insert(name).inserted { keys.append(name) }
            }
        }
        return keys
    }

    /// The identity of records `objects`: the first key of ``identityKeys`` every record holds
    /// as a string or an integer, different in each; else the first two keys that look like
    /// identifying ones (``compositeIdentity(of:)``), different together; why; and a single key's
    /// kind (`integer` or `text`).
    static func identity(of objects: [JSONValue]) -> ([String], String, kind: String?) {
        // Its own keys first, then those of an object every record wraps (Reddit's `data`).
        let wrappers = keys(of: objects).filter { key in objects.allSatisfy { $0[key]?.kind == .object } }
        for key in identityKeys + wrappers.flatMap({ w in identityKeys.map { w + "." + $0 } }) {
            let values = objects.compactMap { JSONKeyPath(keys: key.components(separatedBy: ".")).resolve(in: $0) }
            guard values.count == objects.count else { continue }
            let texts = values.compactMap { v -> String? in v.kind == .string ? v.string : (v.int64.map(String.init)) }
            guard texts.count == values.count, Set(texts).count == texts.count else { continue }
            let kind = values.allSatisfy { $0.kind == .number } ? "integer" : "text"
            let weak = ["name", "slug", "url"].contains(key) ? "; check it names one record for good" : ""
            return ([key], "\(objects.count) of \(objects.count) records have a unique \(kind) \(key)\(weak)", kind)
        }
        if let pair = compositeIdentity(of: objects) {
            let why =
                "no one key is unique in the \(objects.count) records; \(pair[0]) and \(pair[1]) together are: check that they name one record for good"
            return (pair, why, nil)
        }
        return (
            [],
            "no key names each of the \(objects.count) records alone (tried \(identityKeys.joined(separator: ", "))): every run inserts them again; give one",
            nil
        )
    }

    /// Two keys every record holds as a string or an integer, named as identifying keys are
    /// (``identityKeys``, or ending in `id`, `key`, `code`, `date`, `day`, `time`), that no two
    /// of at least two records share together: the first such pair in the records' key order
    /// (a star's `repo_id` and `user_id`, a daily figure's `station` code and `date`).
    static func compositeIdentity(of objects: [JSONValue]) -> [String]? {
        guard objects.count >= 2 else { return nil }
        let suffixes = ["id", "key", "code", "date", "day", "time"]
        let candidates = keys(of: objects).filter { key in
            let lower = key.lowercased()
            guard identityKeys.contains(key) || suffixes.contains(where: { lower.hasSuffix($0) }) else { return false }
            return objects.allSatisfy { $0[key].map { $0.kind == .string || $0.int64 != nil } ?? false }
        }
        func text(_ value: JSONValue?) -> String { value.map { $0.string ?? $0.int64.map(String.init) ?? "" } ?? "" }
        for (i, first) in candidates.enumerated() {
            for second in candidates[(i + 1)...] {
                let pairs = objects.map { text($0[first]) + "\u{1}" + text($0[second]) }
                if Set(pairs).count == pairs.count { return [first, second] }
            }
        }
        return nil
    }

    enum Nested {
        /// Objects with an identity of one key (`identity`), distinct.
        case entity(many: Bool, members: [JSONValue], identity: [String])
        case other
    }

    /// Whether `values` are objects (or arrays of objects) that could be an entity's records.
    static func nested(_ values: [JSONValue]) -> Nested {
        let present = values.filter { !$0.isNull }
        guard !present.isEmpty else { return .other }
        if present.allSatisfy({ $0.kind == .object }) {
            // The same object in several records is one row (an issue's author): told apart by
            // its text, not its place.
            let distinct = dedup(present)
            // One key, not a composite: a nested object's pair of keys is too weak a guess.
            let keys = identity(of: distinct).0
            return keys.count == 1 ? .entity(many: false, members: distinct, identity: keys) : .other
        }
        if present.allSatisfy({ $0.kind == .array }) {
            let members = dedup(present.flatMap { Array($0.elements) })
            guard !members.isEmpty, members.allSatisfy({ $0.kind == .object }) else { return .other }
            let keys = identity(of: members).0
            return keys.count == 1 ? .entity(many: true, members: members, identity: keys) : .other
        }
        return .other
    }

    /// Objects with the same text once (a tag every record lists).
    static func dedup(_ objects: [JSONValue]) -> [JSONValue] {
        var seen: Set<String> = []
        return objects.filter { seen.insert($0.rawText).inserted }
    }
}
