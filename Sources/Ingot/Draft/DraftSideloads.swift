import Foundation

/// Arrays beside the records that hold what the records name by id — Zendesk's `users` and
/// `groups` beside `tickets` (`?include=users,groups`), Discourse's `users` beside `topics`, a
/// JSON:API document's `included` when it holds one type: drafted as `records: {paths: …}`, each
/// array its entity, the records' ids of them relationships (docs/pipelines.md, "Records that
/// are not an array").
struct DraftSideload {
    /// The page's key of the array, and the entity drafted for it.
    var path: String
    var entity: String
    var objects: [JSONValue]

    /// The arrays of objects at the page's top level besides `main` (the records, `records`)
    /// whose one-key identities hold every value of some key of the records named as ids
    /// (`requester_id`, `group_id`, `watcher_ids`), in the pages `samples`. Empty when the records
    /// are not a top-level array of a page object, or nothing beside them is named so.
    static func of(_ samples: [PipelineDraft.Sample], main: String, records: [JSONValue]) -> [DraftSideload] {
        guard let first = samples.first, first.document.root.kind == .object, !main.contains("."), main != "." else { return [] }
        // The values under each key of the records named as ids.
        var idValues: [String: Set<String>] = [:]
        for key in EntityBuilder.keys(of: records) where ReferenceHint.namesIDs(key) {
            let values = records.compactMap { $0[key] }.flatMap { $0.kind == .array ? Array($0.elements) : [$0] }
            let texts = values.filter { !$0.isNull }.compactMap(\.identityText)
            if !texts.isEmpty { idValues[key] = Set(texts) }
        }
        guard !idValues.isEmpty else { return [] }
        var found: [DraftSideload] = []
        for (key, value) in first.document.root.members {
            guard let name = key.string, name != main, !name.contains("."), value.kind == .array, value.count > 0,
                value.elements.allSatisfy({ $0.kind == .object })
            else { continue }
            // Each page sideloads what its own records name: the same user comes again on the
            // next page, kept once.
            var seen: Set<String> = []
            let objects = samples.flatMap { sample in
                sample.document.root[name].map { Array($0.elements).filter { $0.kind == .object } } ?? []
            }.filter { seen.insert($0.rawText).inserted }
            let (identity, _, _) = EntityBuilder.identity(of: objects)
            guard identity.count == 1 else { continue }
            let identities = Set(EntityBuilder.values(of: objects, at: identity[0]).compactMap(\.identityText))
            guard idValues.values.contains(where: { $0.isSubset(of: identities) }) else { continue }
            found.append(DraftSideload(path: name, entity: PipelineDraft.identifier(PipelineDraft.singular(name)), objects: objects))
        }
        return found
    }
}
