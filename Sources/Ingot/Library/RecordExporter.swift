import Foundation

/// Writes stored rows back out as the records they came from (`ingot export`): each attribute at
/// its key path (nested objects and arrays rebuilt), relationships as their targets' identities,
/// or as nested objects at `depth` 1. Ingesting the output with the same pipeline gives the same
/// tables. A `pattern:` keeps part of the source's text, so what it read is rebuilt — by its
/// `template:`, or from another attribute that keeps the same key's whole text (SWAPI's `url`
/// beside the `id` read from it) — and an export that cannot rebuild it is refused, naming it
/// (``Rebuild``); `values:` and `grouping:` read their own output back.
package struct RecordExporter {
    let model: EntityModel
    let layouts: [EntityLayout]
    let location: StoreLocation
    let entity: Int
    /// Columns that must equal these values.
    let filters: [(column: String, value: ScalarValue)]
    /// 0: relationships as identities; 1: as objects (their own relationships left out).
    let depth: Int
    /// `root: {by: PATH, entities: …}`: the value at PATH that routes a record to the exported
    /// entity, written into each record so that the output is read as that entity again.
    let discriminator: (path: [JSONKeyPath.Component], value: String)?
    /// Rows read, loaded and written at a time.
    var chunk = 2_000
    /// Per entity: where each attribute's value goes (its slot, its key path parsed once, its
    /// type, how its source text is rebuilt) and each relationship's key path and how a bare
    /// identity of it is written.
    private let paths: [EntityPaths]

    /// Where one entity's attributes and relationships go in its record (``paths``).
    typealias EntityPaths = (
        attributes: [(slot: Int, path: [JSONKeyPath.Component], type: AttributeType, rebuild: Rebuild)],
        relationships: [(name: String, key: String, path: [JSONKeyPath.Component], identity: Rebuild, sharesItsKey: Bool)]
    )

    /// How a value read through a `pattern:` is written back so that the pattern reads it again.
    enum Rebuild: Equatable {
        /// As stored: no pattern read it.
        case stored
        /// Through the `template:` beside the pattern.
        case template(String)
        /// Not written: another attribute keeps the same key's whole text (an identity's; for a
        /// bare identity, the target row's column at this slot).
        case elsewhere(slot: Int)
        /// It cannot be: the export is refused, naming it.
        case impossible(String)
    }

    /// What cannot be exported as asked, said before anything is read.
    package struct Problem: Error, CustomStringConvertible {
        package var description: String
    }

    /// An exporter of `entity` (`nil`: the pipeline's root) with `filters` given as
    /// `attribute=value` texts.
    package init(config: PipelineConfig, location: StoreLocation, entity name: String?, filters: [String], depth: Int) throws {
        model = config.model
        layouts = EntityLayout.layouts(of: model)
        self.location = location
        let wanted = name ?? config.root
        guard let index = model.index(of: wanted) else {
            throw Problem(
                description:
                    "no entity '\(wanted)' in pipeline \(config.name) (it has \(model.entities.map(\.name).joined(separator: ", ")))")
        }
        entity = index
        if let owner = model.entities[index].owner {
            throw Problem(description: "entity '\(wanted)' is owned by '\(owner)': its rows are exported inside their owners' records")
        }
        guard (0...1).contains(depth) else { throw Problem(description: "--depth is 0 (identities) or 1 (nested objects)") }
        self.depth = depth
        discriminator =
            config.resources.lazy.compactMap(\.rootChoice).compactMap { choice in
                choice.entities.first { $0.entity == wanted }.map { (choice.path.components, $0.value) }
            }.first
        let layout = layouts[index]
        self.filters = try filters.map { try RecordExporter.filter($0, of: wanted, layout) }
        guard !layout.identitySlots.isEmpty else {
            throw Problem(description: "entity '\(wanted)' has no identity: its rows cannot be exported one by one")
        }
        paths = try RecordExporter.paths(config.model, layouts)
        // What the output would not read back as stored is refused before anything is written.
        let impossible = RecordExporter.refusals(exporting: index, depth: depth, model: config.model, paths: paths)
        if !impossible.isEmpty {
            throw Problem(description: "export cannot write back what a pattern read: " + Set(impossible).sorted().joined(separator: "; "))
        }
    }

    /// `--where ATTRIBUTE=VALUE` on `entity`'s column, its value as the column's type stores it.
    private static func filter(_ text: String, of entity: String, _ layout: EntityLayout) throws -> (column: String, value: ScalarValue) {
        guard let equals = text.firstIndex(of: "="), equals > text.startIndex else {
            throw Problem(description: "--where \(text): expected ATTRIBUTE=VALUE")
        }
        let name = String(text[..<equals])
        let raw = String(text[text.index(after: equals)...])
        guard let column = layout.columns.first(where: { $0.name == name }) else {
            throw Problem(
                description:
                    "--where \(text): '\(name)' is not a column of \(entity) (\(layout.columns.map(\.name).joined(separator: ", ")))")
        }
        let value: ScalarValue? =
            switch column.type {
            case .integer: Int64(raw).map(ScalarValue.integer)
            case .double: Double(raw).map(ScalarValue.real)
            case .decimal: DecimalText.canonical(raw).map(ScalarValue.text)
            case .bool: raw == "true" ? .bool(true) : raw == "false" ? .bool(false) : nil
            default: .text(raw)
            }
        guard let value else { throw Problem(description: "--where \(text): '\(raw)' is not a \(column.type)") }
        return (name, value)
    }

    /// Per entity of `model`, where its attributes and relationships go, and how each is written back.
    private static func paths(_ model: EntityModel, _ layouts: [EntityLayout]) throws -> [EntityPaths] {
        try zip(model.entities, layouts).map { entity, layout in
            func path(_ key: String) throws -> [JSONKeyPath.Component] {
                do {
                    return try JSONKeyPath(parsing: key, delimiter: entity.keyDelimiter).components
                } catch {
                    throw Problem(description: "\(entity.name): key '\(key)': \(error)")
                }
            }
            let attributes = try entity.attributes.compactMap { attribute -> (Int, [JSONKeyPath.Component], AttributeType, Rebuild)? in
                // An owned entity's identity (its owner's key and its position) comes from where
                // it sits in its owner's record, not from a key of its own.
                if entity.owner != nil, entity.identity.contains(attribute.name) { return nil }
                guard let slot = layout.columns.firstIndex(where: { $0.name == attribute.name }) else { return nil }
                return (slot, try path(attribute.key), attribute.type, rebuild(attribute, of: entity, layout))
            }
            let relationships = try entity.relationships.map { relationship in
                (
                    relationship.name, relationship.key, try path(relationship.key), rebuild(relationship, model: model, layouts: layouts),
                    entity.relationships.contains { $0.key == relationship.key && $0.name != relationship.name }
                )
            }
            return (attributes, relationships)
        }
    }

    /// Why exporting `entity` at `depth` would write what does not read back as stored: a
    /// pattern without its way back, a key counting from an array's end, a kind of a parent
    /// nested at depth 1. Empty when nothing does.
    private static func refusals(exporting entity: Int, depth: Int, model: EntityModel, paths: [EntityPaths]) -> [String] {
        let lineage = self.lineage(of: entity, in: model)
        let exported =
            lineage + (depth > 0 ? lineage.flatMap { model.entities[$0].relationships.compactMap { model.index(of: $0.target) } } : [])
        let kinds = exported.dropFirst(lineage.count).filter { model.entities[$0].parent != nil }.map {
            "\(model.entities[$0].name), nested at --depth 1 (a kind of \(model.entities[$0].parent ?? ""): nested, its record would lack the parent's attributes; use --depth 0)"
        }
        return kinds
            + exported.flatMap { e in
                paths[e].attributes.compactMap { if case .impossible(let why) = $0.rebuild { why } else { nil } }
                    + paths[e].relationships.compactMap { if case .impossible(let why) = $0.identity { why } else { nil } }
                    + model.entities[e].attributes.filter { countsFromTheEnd($0.key, model.entities[e].keyDelimiter) }.map {
                        "\(model.entities[e].name).\($0.name) (key '\($0.key)' counts from an array's end: where it sat is not stored)"
                    }
            }
    }

    /// `entity`, then its parent, its parent's parent… (`parent:`).
    static func lineage(of entity: Int, in model: EntityModel) -> [Int] {
        var lineage = [entity]
        while let name = model.entities[lineage[lineage.count - 1]].parent, let parent = model.index(of: name), !lineage.contains(parent) {
            lineage.append(parent)
        }
        return lineage
    }

    /// Whether `key` has an index counting from an array's end (`data[-1].id`).
    static func countsFromTheEnd(_ key: String, _ delimiter: String) -> Bool {
        let components = (try? JSONKeyPath(parsing: key, delimiter: delimiter).components) ?? []
        return components.contains { if case .index(let n) = $0 { n < 0 } else { false } }
    }

    /// How `attribute` of `entity` is written back (``Rebuild``).
    static func rebuild(_ attribute: Attribute, of entity: Entity, _ layout: EntityLayout) -> Rebuild {
        guard attribute.pattern != nil else { return .stored }
        if let template = attribute.template { return .template(template) }
        // An identity needs its template: a stub row (only its identity stored) has no text beside it.
        if !entity.identityAttributes.contains(where: { $0.name == attribute.name }),
            let whole = entity.attributes.first(where: { $0.key == attribute.key && !$0.rewritesText && $0.type == .string }),
            let slot = layout.columns.firstIndex(where: { $0.name == whole.name })
        {
            return .elsewhere(slot: slot)
        }
        return .impossible(
            "\(entity.name).\(attribute.name) (pattern '\(attribute.pattern ?? "")', no template: add template: beside it, \"…{}…\" rebuilding the text)"
        )
    }

    /// How a bare identity of `relationship` is written back: through its own template, else
    /// as its target's identity is (``Rebuild``).
    static func rebuild(_ relationship: Relationship, model: EntityModel, layouts: [EntityLayout]) -> Rebuild {
        if let template = relationship.template { return .template(template) }
        guard let target = model[relationship.target], let index = model.index(of: relationship.target) else { return .stored }
        let layout = layouts[index]
        if relationship.pattern != nil {
            return .impossible(
                "\(relationship.name)'s identities (pattern '\(relationship.pattern ?? "")', no template: add template: beside it)")
        }
        guard target.identityAttributes.count == 1, let identity = target.identityAttributes.first else { return .stored }
        return rebuild(identity, of: target, layout)
    }

    /// Calls `body` with each record's JSON text, in identity order; returns the relationships
    /// left out (owned children, composite identities), for the caller to say so.
    @discardableResult
    package func forEachRecord(_ body: (String) throws -> Void) throws -> [String] {
        let layout = layouts[entity]
        let identity = layout.identitySlots.map { layout.columns[$0].name }
        let reader = try location.reader()
        let loader = RelationshipLoader(model: model, layouts: layouts, reader: reader)
        var skipped: [String] = []
        var last: [ScalarValue]?
        while true {
            var query = RowQuery(layout)
            let conditions =
                filters.map { RowExpression.compare(.column($0.column), .equal, .value($0.value)) }
                + (last.map { [RecordExporter.after(identity, $0)] } ?? [])
            query.filter = conditions.reduce(nil) { (all: RowExpression?, next) in all.map { .and($0, next) } ?? next }
            query.limit = chunk
            let rows = try reader.select(query)
            guard !rows.isEmpty else { return skipped }
            var decoders = rows.map { RowDecoder(shape: loader.shapes[entity], row: $0) }
            try load(entity, &decoders, loader: loader, skipped: &skipped)
            let ancestors = try self.ancestors(of: rows, loader: loader, skipped: &skipped)
            for (k, decoder) in decoders.enumerated() {
                let made = try record(decoder, depth: depth)
                // A kind of a parent entity: the parents' attributes and relationships too.
                if case .object(let object) = made {
                    if let discriminator {
                        try JSONKeyPath.place(JSONTree.string(discriminator.value), along: discriminator.path[...], in: made)
                    }
                    for level in ancestors {
                        guard let parent = level[k], case .object(let inherited) = try record(parent, depth: depth) else { continue }
                        // A key both give (the shared identity's): the parent's stored text, when it
                        // keeps one, over what the child's template rebuilt.
                        for (key, value) in inherited.members {
                            if case .scalar("null") = value, object[key] != nil { continue }
                            object.set(key, value)
                        }
                    }
                }
                var out = ""
                JSONTree.write(made, to: &out)
                try body(out)
            }
            last = rows.last.map { row in layout.identitySlots.map { row[$0] } }
        }
    }

    /// For a kind of a parent entity (`parent:`): per ancestor, nearest first, each of `rows`'
    /// parent row (by the shared identity), its relationships loaded; `nil` where none is stored.
    private func ancestors(of rows: [[ScalarValue]], loader: RelationshipLoader, skipped: inout [String]) throws -> [[RowDecoder?]] {
        let layout = layouts[entity]
        let identities = rows.map { row in layout.identitySlots.map { row[$0] } }
        return try RecordExporter.lineage(of: entity, in: model).dropFirst().map { parent in
            let found = try loader.rows(of: parent, identities: identities)
            var present = identities.compactMap { found[$0].map { RowDecoder(shape: loader.shapes[parent], row: $0) } }
            try load(parent, &present, loader: loader, skipped: &skipped)
            var next = present.makeIterator()
            return identities.map { found[$0] == nil ? nil : next.next() }
        }
    }

    /// The rows whose identity (`columns`, in the order rows are read) comes after `values`: the
    /// next page of a keyset walk. A composite identity compares column by column:
    /// `a > x OR (a = x AND b > y) …`.
    static func after(_ columns: [String], _ values: [ScalarValue]) -> RowExpression {
        var any: RowExpression?
        for k in columns.indices {
            var term = RowExpression.compare(.column(columns[k]), .greater, .value(values[k]))
            for j in (0..<k).reversed() { term = .and(.compare(.column(columns[j]), .equal, .value(values[j])), term) }
            any = any.map { .or($0, term) } ?? term
        }
        return any ?? .value(.bool(true))
    }

    /// Loads every relationship of `decoders` (rows of `entity`); the owned children's own
    /// relationships too, whatever the depth: they are part of their owner's record.
    private func load(_ entity: Int, _ decoders: inout [RowDecoder], loader: RelationshipLoader, skipped: inout [String]) throws {
        guard !decoders.isEmpty else { return }
        let rows = decoders.map(\.row)
        for (r, relationship) in model.entities[entity].relationships.enumerated() {
            let loaded: [RowDecoder.Loaded]
            do {
                loaded = try loader.load(r, of: entity, owners: rows)
            } catch let error as IngotQueryError {
                if !skipped.contains(error.message) { skipped.append(error.message) }
                continue
            }
            // Loaded by relationship, not by key: two relationships may read one key (a reference
            // of several kinds, Reddit's `parent_id`), each with its own targets.
            guard relationship.owned else {
                for (k, value) in loaded.enumerated() { decoders[k].loaded[relationship.name] = value }
                continue
            }
            // All the owners' children at once, then handed back to their owners in order.
            var children: [RowDecoder] = []
            var counts: [Int] = []
            for value in loaded {
                guard case .many(let targets) = value else {
                    counts.append(0)
                    continue
                }
                children += targets
                counts.append(targets.count)
            }
            if let target = model.index(of: relationship.target) { try load(target, &children, loader: loader, skipped: &skipped) }
            var start = 0
            for (k, count) in counts.enumerated() {
                decoders[k].loaded[relationship.name] = .many(Array(children[start..<start + count]))
                start += count
            }
        }
    }

    /// One row (and what was loaded of its relationships) as a record.
    private func record(_ row: RowDecoder, depth: Int) throws -> JSONTree {
        let object = ObjectNode()
        let paths = self.paths[row.layout.entity]
        // Two attributes may read one key (a `url` kept whole beside the id its template
        // rebuilds): a null never replaces what the other wrote (a stub's `url` is not stored).
        var placed: Set<[JSONKeyPath.Component]> = []
        func place(_ value: JSONTree, at path: [JSONKeyPath.Component]) throws {
            if case .scalar("null") = value, placed.contains(path) { return }
            placed.insert(path)
            if path.count == 1, case .key(let key) = path[0] { return object.set(key, value) }
            try JSONKeyPath.place(value, along: path[...], in: .object(object))
        }
        for attribute in paths.attributes {
            switch attribute.rebuild {
            case .stored, .impossible: try place(RecordExporter.json(row.row[attribute.slot], attribute.type), at: attribute.path)
            case .template(let template): try place(RecordExporter.filled(template, row.row[attribute.slot]), at: attribute.path)
            case .elsewhere: continue  // the attribute keeping the whole text writes it
            }
        }
        for relationship in paths.relationships {
            // A key two relationships read holds a bare identity at every depth: each one's
            // pattern routes an identity, and a nested object would be read back by both.
            let depth = relationship.sharesItsKey ? 0 : depth
            switch row.loaded[relationship.name] {
            case .one(let target)?:
                try place(
                    try target.map { try self.target($0, depth: depth, as: relationship.identity) } ?? .scalar("null"),
                    at: relationship.path)
            case .many(let targets)?:
                let array = ArrayNode()
                let owned = model.entities[row.layout.entity].relationships.first { $0.name == relationship.name }?.owned ?? false
                // Owned children are part of the record: whole, whatever the depth.
                array.items = try targets.map {
                    owned ? try record($0, depth: depth) : try self.target($0, depth: depth, as: relationship.identity)
                }
                try place(.array(array), at: relationship.path)
            case nil:
                continue
            }
        }
        return .object(object)
    }

    /// A related row: its identity (depth 0) as the relationship reads it back (`identity`), or
    /// its attributes.
    private func target(_ row: RowDecoder, depth: Int, as identity: Rebuild) throws -> JSONTree {
        if depth > 0 { return try record(row, depth: depth - 1) }
        let slots = row.layout.identitySlots
        let entity = model.entities[row.layout.entity]
        guard slots.count == 1, let attribute = entity.attributes.first(where: { $0.name == row.layout.columns[slots[0]].name }) else {
            return try record(row, depth: 0)
        }
        switch identity {
        case .stored, .impossible: return RecordExporter.json(row.row[slots[0]], attribute.type)
        case .template(let template): return RecordExporter.filled(template, row.row[slots[0]])
        case .elsewhere(let slot): return RecordExporter.json(row.row[slot], .string)
        }
    }

    /// `template` with the stored `value`'s text in its `{}`, as a JSON string (null stays null).
    static func filled(_ template: String, _ value: ScalarValue) -> JSONTree {
        let text: String
        switch value {
        case .null: return .scalar("null")
        case .integer(let v): text = String(v)
        case .real(let v): text = JSONTree.number(v)
        case .bool(let v): text = v ? "true" : "false"
        case .text(let s): text = s
        }
        return JSONTree.string(template.replacingOccurrences(of: "{}", with: text))
    }

    /// A stored value as JSON: JSON attributes as their text, dates as text, the rest as typed.
    static func json(_ value: ScalarValue, _ type: AttributeType) -> JSONTree {
        switch value {
        case .null: return .scalar("null")
        case .integer(let v): return type == .bool ? .scalar(v != 0 ? "true" : "false") : .scalar(String(v))
        case .real(let v): return v.isFinite ? .scalar(JSONTree.number(v)) : .scalar("null")
        case .bool(let v): return .scalar(v ? "true" : "false")
        case .text(let s): return type == .json ? .scalar(s) : JSONTree.string(s)
        }
    }
}
