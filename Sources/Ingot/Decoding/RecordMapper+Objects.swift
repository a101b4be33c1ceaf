import Foundation

// Mapping one object of a page into its entity's row (``RecordMapper/mapObject(at:entity:kind:owner:prepared:into:_:_:)``),
// step by step: the Swift hook's rewrite, each record key's targets (attributes, to-ones,
// to-manys, `fields:`), an owned row's keys, the identity, the owned children, the parent's row;
// then `fields:` targets, bare identities and references.
extension RecordMapper {
    /// Maps the object at tape index `at` as `entity`: appends its row (then its nested objects'
    /// rows) to the page's rows and their values to the page's storage, its bare references to
    /// `record`; returns its identity.
    mutating func mapObject(
        at: Int, entity e: Int, kind: String? = nil, owner: (values: [ScalarValue], position: Int)? = nil, prepared: Bool = false,
        into record: inout DecodedRecord, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) -> IdentityKey? {
        let entity = plan.entities[e]
        let node = c.nodes[at]
        guard node.kind == .object else {
            throw MappingFailure(
                reason: "expected an object for entity '\(entity.name)', got \(node.kind.jsonName)", entity: entity.name, code: .wrongShape)
        }
        if let rewrite = entity.prepare, !prepared {
            return try mapRewritten(at: at, entity: e, rewrite: rewrite, kind: kind, owner: owner, into: &record, &page, &c)
        }
        try charge()
        let rowIndex = page.rows.count
        // Reserve the row's place and slots (parent before its nested rows); filled in below.
        // (`entity.layout` is read in place throughout: a copy of the layout retained each of
        // its arrays, for every object mapped.)
        let row = page.storage.appendRow(entity: e, columns: entity.columnCount, links: entity.linkCount)
        page.rows.append(row)
        var filled = FilledRow(index: rowIndex, values: row.valueStart, links: row.linkStart)
        var member = at + 1
        for _ in 0..<node.count {
            let keyIndex = member
            let valueIndex = member + 1
            member = Int(c.nodes[valueIndex].end)
            guard let rootKey = c.match(keyAt: keyIndex, in: entity) else { continue }
            for t in entity.targetStarts[rootKey]..<entity.targetStarts[rootKey + 1] {
                try mapTarget(t, of: entity, rootKey: rootKey, value: valueIndex, row: &filled, into: &record, &page, &c)
            }
        }
        if let fieldLeaves = filled.fieldLeaves {
            try assemble(fieldLeaves, of: entity, row: rowIndex, &page, &c, mask: &filled.mask)
        }
        if let owner { completeOwnedRow(of: entity, owner: owner, &filled, &page) }
        let identity = try RecordMapper.identity(of: entity, valuesAt: filled.values, in: page)
        // Owned rows, now that the owner's identity is known: each element a row of the owned
        // entity at its position; the set replaces the stored one.
        for owned in filled.ownedLists ?? [] {
            guard let identity else {
                throw MappingFailure(
                    reason: "an owned relationship needs its owner's identity", entity: entity.name, code: .missingIdentity)
            }
            try mapOwned(owned, of: entity, owner: identity, links: filled.links, into: &record, &page, &c)
        }
        // A parent's row filled by a child's record names the child (`kind`).
        if let kind, let slot = entity.layout.kindSlot {
            page.storage.set(filled.values + slot, .text(kind))
            filled.mask.insert(slot)
        }
        page.rows[rowIndex].identity = identity
        page.rows[rowIndex].mask = filled.mask
        // A child's record fills its parent's row too (the same object, the parent's attributes
        // and relationships), with the same identity.
        if let parent = entity.parent {
            _ = try mapObject(at: at, entity: parent, kind: entity.name, into: &record, &page, &c)
        }
        return identity
    }

    /// The row an object is being mapped into: where it is, the columns the object gave, and what
    /// is mapped once its keys are read.
    private struct FilledRow {
        /// The row's index in the page, its first value slot and its first link set.
        let index: Int
        let values: Int
        let links: Int
        var mask = ColumnMask()
        /// `fields:`: the leaves (nil: null or missing) of the target attributes read from this
        /// record's keys. (Optional, like `ownedLists`: most objects have none, and `nil` costs
        /// nothing to drop.)
        var fieldLeaves: [(toOne: Int, slot: Int, leaf: Int?, path: [MappingFailure.Component])]?
        /// Owned to-manys given as arrays: mapped once this row's identity is known.
        var ownedLists: [OwnedList]?

        init(index: Int, values: Int, links: Int) {
            self.index = index
            self.values = values
            self.links = links
        }
    }

    /// An owned to-many given as an array: its relationship, the array's node, the record key and
    /// the target that led to it.
    private typealias OwnedList = (k: Int, list: Int, rootKey: Int, target: Int)

    /// The entity's Swift hook rewrites the object; what it returns is mapped instead.
    private mutating func mapRewritten(
        at: Int, entity e: Int, rewrite: RecordRewrite, kind: String?, owner: (values: [ScalarValue], position: Int)?,
        into record: inout DecodedRecord, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) -> IdentityKey? {
        let entity = plan.entities[e]
        let node = c.nodes[at]
        let rewritten: JSONDocument
        do {
            let object = try JSONDocument(bytes: Array(c.bytes[Int(node.start)..<Int(node.start + node.length)]))
            rewritten = try rewrite.apply(to: object.root, delimiter: entity.keyDelimiter)
        } catch {
            throw MappingFailure(reason: "prepare: \(error)", entity: entity.name, code: .prepareFailed)
        }
        return try rewritten.nodes.withUnsafeBufferPointer { (nodes) throws(MappingFailure) -> IdentityKey? in
            try rewritten.bytes.withUnsafeBufferPointer { (bytes) throws(MappingFailure) -> IdentityKey? in
                var inner = Cursor(nodes: nodes, bytes: bytes)
                return try mapObject(at: 0, entity: e, kind: kind, owner: owner, prepared: true, into: &record, &page, &inner)
            }
        }
    }

    /// Target `t` of record key `rootKey`, whose value is at `valueIndex`: its leaf found along
    /// the key path, then stored as the target's kind says (a NULL for a null or missing leaf).
    private mutating func mapTarget(
        _ t: Int, of entity: MappingPlan.EntityPlan, rootKey: Int, value valueIndex: Int, row: inout FilledRow,
        into record: inout DecodedRecord, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) {
        let kind = entity.targetKinds[t]
        let found: Cursor.Descent
        if entity.targetIsDirect[t] {
            found = c.nodes[valueIndex].kind == .null ? .null : .leaf(valueIndex)
        } else {
            do throws(MappingFailure) {
                found = try c.descend(from: valueIndex, along: entity.targets[t])
            } catch {
                throw error.prepending(.key(entity.rootKeys[rootKey].name))
            }
        }
        do throws(MappingFailure) {
            let leaf: Int
            switch found {
            case .leaf(let index): leaf = index
            case .absent: return  // an index past the end: the column is left as it is
            case .missing where { if case .field = kind { true } else { false } }():
                return  // a `fields:` key absent: as if the record did not name it
            case .missing where partial:
                return  // a partial copy (`partial: true`) lacks the leaf: the column stays as stored
            case .null, .missing:
                // Root present, leaf missing or null: the column becomes NULL; a relationship is cleared.
                clear(kind, of: entity, path: entity.targetPaths[t], &row, &page)
                return
            }
            switch kind {
            case .attribute(let slot):
                try setAttribute(slot, of: entity, leaf: leaf, &row, &page, &c)
            case .toOne(let k):
                try mapToOne(k, of: entity, leaf: leaf, rootKey: rootKey, target: t, row: &row, into: &record, &page, &c)
            case .toMany(let k):
                let list = c.nodes[leaf]
                guard list.kind == .array else {
                    throw MappingFailure(reason: "expected an array for to-many relationship, got \(list.kind.jsonName)", code: .wrongShape)
                }
                if entity.ownedToMany[k] {
                    row.ownedLists = (row.ownedLists ?? []) + [(k, leaf, rootKey, t)]
                    return
                }
                try mapLinks(k, of: entity, list: leaf, rootKey: rootKey, target: t, row: row, into: &record, &page, &c)
            case .field(let k, let slot):
                row.fieldLeaves = (row.fieldLeaves ?? []) + [(k, slot, leaf, entity.targetPaths[t])]
            }
        } catch {
            throw error.prepending(entity.targetPaths[t])
        }
    }

    /// To-one `k`'s value at `leaf` (a nested object or a bare identity): its target's identity
    /// set in the row's key columns — or, when `on_invalid: null` found it unreadable, cleared.
    private mutating func mapToOne(
        _ k: Int, of entity: MappingPlan.EntityPlan, leaf: Int, rootKey: Int, target t: Int, row: inout FilledRow,
        into record: inout DecodedRecord, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) {
        let toOne = (target: entity.layout.toOne[k].target, slots: entity.layout.toOne[k].slots)
        let depth = trail.count
        enter(entity.rootKeys[rootKey].name, entity.targets[t])
        defer { trail.removeLast(trail.count - depth) }
        let linked = try link(
            leaf, target: toOne.target, policy: entity.toOnePolicies[k], rules: entity.toOneRules[k],
            guarding: entity.toOneGuards[k], partial: entity.toOnePartial[k], invalidCount: entity.toOneInvalidCounts[k],
            row: row.index, slot: .toOne(k), into: &record, &page, &c)
        let identity: IdentityKey
        switch linked {
        case .to(let target): identity = target
        case .none: return
        case .unreadable:
            // `on_invalid: null`: an identity its rules cannot read makes the link NULL.
            clear(entity.targetKinds[t], of: entity, path: entity.targetPaths[t], &row, &page)
            return
        }
        for (offset, value) in identity.values.enumerated() {
            page.storage.set(row.values + toOne.slots.lowerBound + offset, value)
            row.mask.insert(toOne.slots.lowerBound + offset)
        }
    }

    /// A null or missing leaf: an attribute or a to-one's columns become NULL, a to-many's set is
    /// emptied, a `fields:` attribute is noted as absent.
    private func clear(
        _ kind: MappingPlan.Target.Kind, of entity: MappingPlan.EntityPlan, path: [MappingFailure.Component], _ row: inout FilledRow,
        _ page: inout DecodedPage
    ) {
        switch kind {
        case .attribute(let slot):
            page.storage.values[row.values + slot] = .null
            row.mask.insert(slot)
        case .toOne(let k):
            for s in entity.layout.toOne[k].slots {
                page.storage.values[row.values + s] = .null
                row.mask.insert(s)
            }
        case .toMany(let k): page.storage.linkSets[row.links + k] = []
        case .field(let k, let slot): row.fieldLeaves = (row.fieldLeaves ?? []) + [(k, slot, nil, path)]
        }
    }

    /// An attribute's value at `leaf`, converted by its rules (plain text copied as it is; a value
    /// `on_invalid: null` refuses stored as NULL and counted).
    private mutating func setAttribute(
        _ slot: Int, of entity: MappingPlan.EntityPlan, leaf: Int, _ row: inout FilledRow, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) {
        let at = row.values + slot
        if entity.storesTextAsIs[slot], c.nodes[leaf].kind == .string {
            // Plain text: its bytes go from the page to the storage as they are.
            page.storage.setText(at, c.bytes(c.nodes[leaf]))
            row.mask.insert(slot)
            return
        }
        let rules = entity.rules[slot]
        if rules.nullOnInvalid {
            do {
                page.storage.set(at, try convert(leaf, rules, &c))
            } catch  where error.code != .unstorable {
                // `on_invalid: null`: the record is kept, the value is NULL, and it is counted.
                page.storage.set(at, .null)
                page.invalidValues["\(entity.name).\(entity.layout.columns[slot].name)", default: 0] += 1
            }
        } else {
            page.storage.set(at, try convert(leaf, rules, &c))
        }
        row.mask.insert(slot)
    }

    /// A to-many given as an array of references (nested objects or bare identities): each element
    /// linked (or stubbed, or rejected by its policy), the set replacing the stored one.
    private mutating func mapLinks(
        _ k: Int, of entity: MappingPlan.EntityPlan, list leaf: Int, rootKey: Int, target t: Int, row: FilledRow,
        into record: inout DecodedRecord, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) {
        let relationshipTarget = entity.layout.toMany[k].target
        let count = Int(c.nodes[leaf].count)
        var identities: [IdentityKey] = []
        identities.reserveCapacity(count)
        var element = leaf + 1
        let depth = trail.count
        enter(entity.rootKeys[rootKey].name, entity.targets[t])
        for position in 0..<count {
            trail.append(.index(position))
            do throws(MappingFailure) {
                try charge()
                let linked = try link(
                    element, target: relationshipTarget, policy: entity.toManyPolicies[k], rules: entity.toManyRules[k],
                    guarding: entity.toManyGuards[k], partial: entity.toManyPartial[k], invalidCount: entity.toManyInvalidCounts[k],
                    row: row.index, slot: .toMany(index: k, position: identities.count), into: &record, &page, &c)
                if case .to(let identity) = linked { identities.append(identity) }
            } catch {
                throw error.prepending(.index(position))
            }
            trail.removeLast()
            element = Int(c.nodes[element].end)
        }
        trail.removeLast(trail.count - depth)
        page.storage.linkSets[row.links + k] = identities
    }

    /// An owned row: keyed by its owner and position, and replaced whole — what its object does
    /// not give is NULL (or no links), not what an earlier version stored.
    private func completeOwnedRow(
        of entity: MappingPlan.EntityPlan, owner: (values: [ScalarValue], position: Int), _ row: inout FilledRow,
        _ page: inout DecodedPage
    ) {
        let v = row.values
        for (offset, value) in owner.values.enumerated() { page.storage.set(v + offset, value) }
        page.storage.set(v + owner.values.count, .integer(Int64(owner.position)))
        for slot in 0..<entity.layout.columns.count where !row.mask.contains(slot) {
            if slot >= entity.ownerSlots { page.storage.set(v + slot, .null) }
            row.mask.insert(slot)
        }
        let owned = row.ownedLists ?? []
        for k in entity.layout.toMany.indices where page.storage.linkSets[row.links + k] == nil && !owned.contains(where: { $0.k == k }) {
            page.storage.linkSets[row.links + k] = []
        }
    }

    /// The identity of the row whose values start at `v`; `nil` for an entity without one. A
    /// missing or null identity value is the record's rejection.
    private static func identity(
        of entity: MappingPlan.EntityPlan, valuesAt v: Int, in page: DecodedPage
    ) throws(MappingFailure) -> IdentityKey? {
        if let slot = entity.singleIdentitySlot, let value = page.storage.value(v + slot), value != .null {
            return .single(value)  // the common case, without an array
        }
        guard !entity.layout.identitySlots.isEmpty else { return nil }
        var values: [ScalarValue] = []
        for slot in entity.layout.identitySlots {
            let key = entity.attributes[slot].key
            guard let value = page.storage.value(v + slot) else {
                throw MappingFailure(
                    reason: "identity '\(entity.attributes[slot].name)' is missing", entity: entity.name, code: .missingIdentity
                )
                .prepending(.key(key))
            }
            guard value != .null else {
                throw MappingFailure(
                    reason: "identity '\(entity.attributes[slot].name)' is null", entity: entity.name, code: .missingIdentity
                )
                .prepending(.key(key))
            }
            values.append(value)
        }
        return values.count == 1 ? .single(values[0]) : .composite(values)
    }

    /// An owned to-many's array: each element a row of the owned entity at its position, keyed by
    /// `owner`; the set of children replaces the stored one.
    private mutating func mapOwned(
        _ owned: OwnedList, of entity: MappingPlan.EntityPlan, owner identity: IdentityKey, links l: Int,
        into record: inout DecodedRecord, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) {
        let target = entity.layout.toMany[owned.k].target
        let count = Int(c.nodes[owned.list].count)
        var children: [IdentityKey] = []
        children.reserveCapacity(count)
        var element = owned.list + 1
        let depth = trail.count
        enter(entity.rootKeys[owned.rootKey].name, entity.targets[owned.target])
        for position in 0..<count {
            trail.append(.index(position))
            do throws(MappingFailure) {
                try charge()
                guard c.nodes[element].kind == .object else {
                    throw MappingFailure(
                        reason: "expected an object of owned entity '\(plan.entities[target].name)', got \(c.nodes[element].kind.jsonName)",
                        code: .wrongShape)
                }
                if let child = try mapObject(at: element, entity: target, owner: (identity.values, position), into: &record, &page, &c) {
                    children.append(child)
                }
            } catch {
                throw error.prepending([.index(position)] + entity.targetPaths[owned.target])
            }
            trail.removeLast()
            element = Int(c.nodes[element].end)
        }
        trail.removeLast(trail.count - depth)
        page.storage.linkSets[l + owned.k] = children
    }

    /// `fields:`: each to-one whose target is assembled from the record's own keys gets a row of
    /// its target holding those values — when the target's identity keys are present; when one
    /// is null, the link is cleared; when one is absent, the relationship is left as it is.
    private mutating func assemble(
        _ leaves: [(toOne: Int, slot: Int, leaf: Int?, path: [MappingFailure.Component])], of entity: MappingPlan.EntityPlan, row: Int,
        _ page: inout DecodedPage, _ c: inout Cursor, mask: inout ColumnMask
    ) throws(MappingFailure) {
        guard !leaves.isEmpty else { return }
        let v = page.rows[row].valueStart
        for (k, toOne) in entity.layout.toOne.enumerated() {
            let mine = leaves.filter { $0.toOne == k }
            guard !mine.isEmpty else { continue }
            let target = plan.entities[toOne.target]
            let identitySlots = target.layout.identitySlots
            // Absent identity: no link read; a null one: the link is cleared.
            guard identitySlots.allSatisfy({ slot in mine.contains { $0.slot == slot } }) else { continue }
            if identitySlots.contains(where: { slot in mine.contains { $0.slot == slot && $0.leaf == nil } }) {
                for s in toOne.slots {
                    page.storage.values[v + s] = .null
                    mask.insert(s)
                }
                continue
            }
            var targetRow = page.storage.appendRow(entity: toOne.target, columns: target.columnCount, links: target.linkCount)
            var targetMask = ColumnMask()
            for field in mine {
                do throws(MappingFailure) {
                    let value =
                        try field.leaf.map { leaf throws(MappingFailure) in try convert(leaf, target.rules[field.slot], &c) } ?? .null
                    page.storage.set(targetRow.valueStart + field.slot, value)
                    targetMask.insert(field.slot)
                } catch {
                    throw error.prepending(field.path)
                }
            }
            var values: [ScalarValue] = []
            for slot in identitySlots {
                guard let value = page.storage.value(targetRow.valueStart + slot), value != .null else {
                    throw MappingFailure(reason: "null is not an identity of '\(target.name)'", entity: entity.name, code: .missingIdentity)
                        .prepending(mine.first { $0.slot == slot }?.path ?? [])
                }
                values.append(value)
            }
            targetRow.identity = values.count == 1 ? .single(values[0]) : .composite(values)
            targetRow.mask = targetMask
            page.rows.append(targetRow)
            for (offset, value) in values.enumerated() {
                page.storage.set(v + toOne.slots.lowerBound + offset, value)
                mask.insert(toOne.slots.lowerBound + offset)
            }
        }
    }

    /// A record given as its bare identity (`[1, 2, 3]`, `["luke", "leia"]`): a row holding only
    /// its identity — a stub when no row has it yet, nothing when one does.
    mutating func mapBareIdentity(
        at index: Int, entity e: Int, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) {
        let entity = plan.entities[e]
        let layout = entity.layout
        guard layout.identitySlots.count == 1 else {
            throw MappingFailure(
                reason:
                    "expected an object for entity '\(entity.name)' (a bare identity needs a single identity attribute), got \(c.nodes[index].kind.jsonName)",
                entity: entity.name, code: .wrongShape)
        }
        let slot = layout.identitySlots[0]
        let value = try convert(index, entity.rules[slot], &c)
        guard value != .null else {
            throw MappingFailure(reason: "null is not an identity of '\(entity.name)'", entity: entity.name, code: .missingIdentity)
        }
        try charge()
        var row = page.storage.appendRow(entity: e, layout: layout)
        page.storage.set(row.valueStart + slot, value)
        row.mask.insert(slot)
        row.identity = .single(value)
        page.rows.append(row)
    }

    /// What a relationship's value links to (``link``).
    private enum Linked {
        /// The target of this identity.
        case to(IdentityKey)
        /// Nothing: a null, a value `values:` maps to null, a nested object without identity.
        case none
        /// Nothing: a bare identity its rules cannot read, under `on_invalid: null` (counted).
        case unreadable
    }

    /// A relationship's value: a nested object (mapped as its own row) or a bare identity (a reference).
    private mutating func link(
        _ index: Int, target: Int, policy: MissingTargetPolicy, rules: AttributeRules? = nil, guarding: MappingPlan.Guard? = nil,
        partial: Bool = false, invalidCount: String? = nil, row: Int, slot: Reference.Slot, into record: inout DecodedRecord,
        _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) -> Linked {
        let node = c.nodes[index]
        switch node.kind {
        case .object:
            let first = page.rows.count
            let outer = self.partial
            self.partial = outer || partial
            defer { self.partial = outer }
            let identity = try mapObject(at: index, entity: target, into: &record, &page, &c)
            if let guarding {
                record.guarded.append(
                    DecodedRecord.Guarded(
                        rows: first..<page.rows.count, parent: row, slot: slot, inserts: guarding.inserts, updates: guarding.updates))
            }
            return identity.map(Linked.to) ?? .none
        case .array:
            throw MappingFailure(
                reason: "expected an object or an identity of '\(plan.entities[target].name)', got array", code: .wrongShape)
        case .null where !isToManySlot(slot):
            return .none
        default:
            let entity = plan.entities[target]
            guard let identitySlot = entity.singleIdentitySlot else {
                throw MappingFailure(
                    reason: "'\(entity.name)' has a composite identity; a reference must be an object with its keys", code: .wrongShape)
            }
            let value: ScalarValue
            do {
                value = try convert(index, rules ?? entity.rules[identitySlot], &c)
            } catch  where invalidCount != nil && error.code == .wrongType {
                // `on_invalid: null`: no link, counted; the record is kept.
                page.invalidValues[invalidCount ?? "", default: 0] += 1
                return .unreadable
            }
            // `values: {"none": null}` on the relationship: no link.
            if value == .null, rules != nil, !isToManySlot(slot) { return .none }
            guard value != .null else {
                throw MappingFailure(reason: "null is not an identity of '\(entity.name)'", code: .missingIdentity)
            }
            let identity = IdentityKey.single(value)
            record.references.append(
                Reference(
                    target: target, identity: identity, policy: policy, row: row, slot: slot,
                    codingPath: policy == .reject ? MappingFailure.render(trail) : nil))
            return .to(identity)
        }
    }

    /// Steps into the relationship at `first` plus `target`'s key path components.
    private mutating func enter(_ first: String, _ target: MappingPlan.Target) {
        trail.append(.key(first))
        trail.append(contentsOf: target.restTrail)
    }

    private func isToManySlot(_ slot: Reference.Slot) -> Bool {
        if case .toMany = slot { return true }
        return false
    }
}
