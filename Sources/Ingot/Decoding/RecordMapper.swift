import Foundation

/// Maps the records of a page to ``EntityRow``s following a ``MappingPlan``, applying Ingot's
/// merge rules at the level of one record: present keys set, `null` clears, absent keys are left
/// out; key paths whose root is present but whose leaf is missing become `NULL`.
///
/// A record that breaks a rule becomes a ``RecordRejection`` with its coding path; its rows are
/// dropped whole, so no partial row of it is ever written. Runs on a decode lane; a mapper is
/// owned by one ``DecodingContext``.
struct RecordMapper {
    let plan: MappingPlan
    var dates = DateConverter()
    /// Where in the current record the mapper is, outermost first; read only to name the place
    /// of a `missing: reject` reference.
    private var trail: [MappingFailure.Component] = []

    init(plan: MappingPlan) {
        self.plan = plan
    }

    /// Decodes and maps one page, as one ``DecodedPage``.
    mutating func map(bytes: [UInt8], seq: Int, source: String) -> DecodedPage {
        var whole: DecodedPage?
        map(bytes: bytes, seq: seq, source: source, partRecords: .max) { whole = $0 }
        // `emit` is called at least once, for the last part.
        return whole
            ?? DecodedPage(seq: seq, source: source, bytes: bytes.count, records: [], rejections: [], pageRejected: false, recordCount: 0)
    }

    /// Decodes and maps one page, handing it to `emit` in parts of at most `partRecords` records,
    /// in order; the last part has ``DecodedPage/isLastPart`` set and carries the page's size.
    /// A page of millions of tiny records is then never held decoded whole: each part goes on
    /// (to be batched and saved) while the next is mapped. The page is parsed once.
    ///
    /// `parsed`: the page's JSON when its source parsed it already (``Page/parsed``).
    mutating func map(
        bytes: [UInt8], seq: Int, source: String, parsed: JSONDocument? = nil, partRecords: Int, emit: (DecodedPage) -> Void
    ) {
        var page = DecodedPage(
            seq: seq, source: source, bytes: bytes.count, records: [], rejections: [], pageRejected: false, recordCount: 0)
        page.pageBytes = bytes.count
        defer { emit(page) }
        guard plan.storesRecords else { return }
        let rootName = plan.entities[plan.root].name
        func rejectPage(_ path: String, _ reason: String, _ code: RejectReason) {
            page.pageRejected = true
            page.rejections.append(
                RecordRejection(
                    entity: rootName, codingPath: path, reason: reason, source: source, recordIndex: nil,
                    raw: RecordRejection.prefix(bytes[...]), rawLength: bytes.count, code: code))
        }
        let document: JSONDocument
        if let parsed {
            document = parsed
        } else {
            do {
                document = try plan.framing.parse(bytes)
            } catch {
                rejectPage("", error.description, .notJSON)
                return
            }
        }
        let array: RecordFraming.Records
        switch plan.framing.records(in: document) {
        case .success(let records): array = records
        case .failure(let failure):
            rejectPage(failure.path, failure.reason, .noRecords)
            return
        }
        let path = plan.framing.codingPath
        let partSize = max(1, partRecords)
        // JSON Lines: the lines that are not JSON, rejected (RecordMapper+Lines.swift).
        let rejectedLines = RecordMapper.rejectLines(
            document.lineFailures, of: bytes, entity: rootName, partSize: partSize, into: &page, emit)
        page.recordCount = min(array.count, partSize) + rejectedLines
        page.records.reserveCapacity(page.recordCount)
        page.rows.reserveCapacity(page.recordCount * 2)

        document.nodes.withUnsafeBufferPointer { nodes in
            document.bytes.withUnsafeBufferPointer { bytes in
                var cursor = Cursor(nodes: nodes, bytes: bytes)
                var index = 0
                var element = array.first
                var partStart = 0
                var partStartByte = 0
                while index < array.count {
                    if index - partStart == partSize {
                        // This part is full: hand it on and start the next one.
                        let startByte = Int(nodes[element].start)
                        var part = DecodedPage(
                            seq: seq, source: source, bytes: startByte - partStartByte, records: [], rejections: [],
                            pageRejected: false, recordCount: min(array.count - index, partSize))
                        part.part = page.part + 1
                        part.pageBytes = page.pageBytes
                        part.records.reserveCapacity(part.recordCount)
                        page.isLastPart = false
                        page.pageBytes = 0
                        page.bytes = startByte - partStartByte
                        swap(&page, &part)
                        emit(part)
                        partStart = index
                        partStartByte = startByte
                        page.bytes = bytes.count - partStartByte
                    }
                    let firstRow = page.rows.count
                    let valueCount = page.storage.values.count
                    let textCount = page.storage.text.count
                    let linkCount = page.storage.linkSets.count
                    var record = DecodedRecord(index: index, rows: firstRow..<firstRow, references: [], raw: nil)
                    trail.removeAll(keepingCapacity: true)
                    // Records of several kinds (`root: {by: …}`): the entity its discriminator names.
                    var entity = plan.root
                    if let choice = plan.rootChoice {
                        let kind = choice.path.resolve(in: JSONValue(document: document, index: element)).flatMap {
                            $0.string ?? $0.numberText
                        }
                        if let kind, let chosen = choice.entities[kind] {
                            entity = chosen
                        } else if choice.skipsOthers {
                            page.skipped += 1
                            element = Int(nodes[element].end)
                            index += 1
                            continue
                        } else {
                            entity = -1
                        }
                    }
                    do throws(MappingFailure) {
                        if entity < 0, let choice = plan.rootChoice {
                            let kind =
                                choice.path.resolve(in: JSONValue(document: document, index: element)).map { $0.rawText } ?? "nothing"
                            throw MappingFailure(
                                reason: "'\(choice.path)' is \(kind), which names no entity (root.by; other: reject)", code: .wrongShape)
                        }
                        switch nodes[element].kind {
                        case .object, .array, .null: _ = try mapObject(at: element, entity: entity, into: &record, &page, &cursor)
                        default: try mapBareIdentity(at: element, entity: entity, &page, &cursor)  // `[1, 2, 3]`: stubs
                        }
                        guard page.storage.text.count <= Int(UInt32.max) else {
                            throw MappingFailure(reason: "the page's text values pass 4 GiB; split it into smaller pages", code: .tooLarge)
                        }
                        record.rows = firstRow..<page.rows.count
                        if plan.keepsRecords {
                            (record.raw, record.rawLength) = cursor.rawPrefix(element)
                            record.path = array.prefix(index, path: path)
                        }
                        if record.references.contains(where: { $0.policy == .reject }) {
                            if record.raw == nil { (record.raw, record.rawLength) = cursor.rawPrefix(element) }
                            let prefix = array.prefix(index, path: path).isEmpty ? "" : array.prefix(index, path: path) + "."
                            for r in record.references.indices where record.references[r].policy == .reject {
                                record.references[r].codingPath = prefix + (record.references[r].codingPath ?? "")
                            }
                        }
                        if let path = plan.incrementalPath, let value = cursor.text(at: path, from: element),
                            page.incrementalMax.map({ $0.utf8.lexicographicallyPrecedes(value.utf8) }) ?? true
                        {
                            page.incrementalMax = value
                        }
                        page.records.append(record)
                    } catch {
                        // No partial row of a rejected record is kept.
                        page.rows.removeSubrange(firstRow...)
                        page.storage.truncate(values: valueCount, text: textCount, linkSets: linkCount)
                        let prefix = array.prefix(index, path: path)
                        let raw = cursor.rawPrefix(element)
                        page.rejections.append(
                            RecordRejection(
                                entity: error.entity ?? rootName,
                                codingPath: prefix.isEmpty && error.pathText.hasPrefix(".")
                                    ? String(error.pathText.dropFirst()) : prefix + error.pathText,
                                reason: error.reason,
                                source: source, recordIndex: array.lines.map { $0[index] - 1 } ?? index, raw: raw.text,
                                rawLength: raw.length, code: error.code))
                    }
                    element = Int(nodes[element].end)
                    index += 1
                }
            }
        }
    }

    // MARK: - Objects

    /// Maps the object at tape index `at` as `entity`: appends its row (then its nested objects'
    /// rows) to the page's rows and their values to the page's storage, its bare references to
    /// `record`; returns its identity.
    private mutating func mapObject(
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
            // The entity's Swift hook rewrites the object; what it returns is mapped instead.
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
        let rowIndex = page.rows.count
        // Reserve the row's place and slots (parent before its nested rows); filled in below.
        // (`entity.layout` is read in place throughout: a copy of the layout retained each of
        // its arrays, for every object mapped.)
        let row = page.storage.appendRow(entity: e, columns: entity.columnCount, links: entity.linkCount)
        page.rows.append(row)
        let v = row.valueStart
        let l = row.linkStart
        var mask = ColumnMask()
        /// `fields:`: the leaves (nil: null or missing) of the target attributes read from this record's keys.
        /// (Optional, like `ownedLists`: most objects have none, and `nil` costs nothing to drop.)
        var fieldLeaves: [(toOne: Int, slot: Int, leaf: Int?, path: [MappingFailure.Component])]?
        /// Owned to-manys given as arrays: mapped once this row's identity is known.
        var ownedLists: [(k: Int, list: Int, rootKey: Int, target: Int)]?

        var member = at + 1
        for _ in 0..<node.count {
            let keyIndex = member
            let valueIndex = member + 1
            member = Int(c.nodes[valueIndex].end)
            guard let rootKey = c.match(keyAt: keyIndex, in: entity) else { continue }
            for t in entity.targetStarts[rootKey]..<entity.targetStarts[rootKey + 1] {
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
                    case .absent: continue  // an index past the end: the column is left as it is
                    case .missing where { if case .field = kind { true } else { false } }():
                        continue  // a `fields:` key absent: as if the record did not name it
                    case .null, .missing:
                        // Root present, leaf missing or null: the column becomes NULL; a relationship is cleared.
                        switch kind {
                        case .attribute(let slot):
                            page.storage.values[v + slot] = .null
                            mask.insert(slot)
                        case .toOne(let k):
                            for s in entity.layout.toOne[k].slots {
                                page.storage.values[v + s] = .null
                                mask.insert(s)
                            }
                        case .toMany(let k): page.storage.linkSets[l + k] = []
                        case .field(let k, let slot):
                            fieldLeaves =
                                (fieldLeaves ?? []) + [
                                    (k, slot, nil, entity.targetPaths[t])
                                ]
                        }
                        continue
                    }
                    switch kind {
                    case .attribute(let slot):
                        let rules = entity.rules[slot]
                        if rules.storesTextAsIs, c.nodes[leaf].kind == .string {
                            // Plain text: its bytes go from the page to the storage as they are.
                            page.storage.setText(v + slot, c.bytes(c.nodes[leaf]))
                        } else if rules.nullOnInvalid {
                            do {
                                page.storage.set(v + slot, try convert(leaf, rules, &c))
                            } catch  where error.code != .unstorable {
                                // `on_invalid: null`: the record is kept, the value is NULL, and it is counted.
                                page.storage.set(v + slot, .null)
                                page.invalidValues["\(entity.name).\(entity.layout.columns[slot].name)", default: 0] += 1
                            }
                        } else {
                            page.storage.set(v + slot, try convert(leaf, rules, &c))
                        }
                        mask.insert(slot)
                    case .toOne(let k):
                        let toOne = (target: entity.layout.toOne[k].target, slots: entity.layout.toOne[k].slots)
                        let depth = trail.count
                        enter(entity.rootKeys[rootKey].name, entity.targets[t])
                        guard
                            let identity = try link(
                                leaf, target: toOne.target, policy: entity.toOnePolicies[k], rules: entity.toOneRules[k],
                                guarding: entity.toOneGuards[k], row: rowIndex, slot: .toOne(k), into: &record, &page, &c)
                        else {
                            trail.removeLast(trail.count - depth)
                            continue
                        }
                        trail.removeLast(trail.count - depth)
                        for (offset, value) in identity.values.enumerated() {
                            page.storage.set(v + toOne.slots.lowerBound + offset, value)
                            mask.insert(toOne.slots.lowerBound + offset)
                        }
                    case .toMany(let k):
                        let relationshipTarget = entity.layout.toMany[k].target
                        let list = c.nodes[leaf]
                        guard list.kind == .array else {
                            throw MappingFailure(
                                reason: "expected an array for to-many relationship, got \(list.kind.jsonName)", code: .wrongShape)
                        }
                        if entity.ownedToMany[k] {
                            ownedLists = (ownedLists ?? []) + [(k, leaf, rootKey, t)]
                            continue
                        }
                        var identities: [IdentityKey] = []
                        identities.reserveCapacity(Int(list.count))
                        var element = leaf + 1
                        let depth = trail.count
                        enter(entity.rootKeys[rootKey].name, entity.targets[t])
                        for position in 0..<Int(list.count) {
                            trail.append(.index(position))
                            do throws(MappingFailure) {
                                if let identity = try link(
                                    element, target: relationshipTarget, policy: entity.toManyPolicies[k], rules: entity.toManyRules[k],
                                    guarding: entity.toManyGuards[k], row: rowIndex, slot: .toMany(index: k, position: identities.count),
                                    into: &record, &page, &c)
                                {
                                    identities.append(identity)
                                }
                            } catch {
                                throw error.prepending(.index(position))
                            }
                            trail.removeLast()
                            element = Int(c.nodes[element].end)
                        }
                        trail.removeLast(trail.count - depth)
                        page.storage.linkSets[l + k] = identities
                    case .field(let k, let slot):
                        fieldLeaves =
                            (fieldLeaves ?? []) + [
                                (k, slot, leaf, entity.targetPaths[t])
                            ]
                    }
                } catch {
                    throw error.prepending(entity.targetPaths[t])
                }
            }
        }

        if let fieldLeaves {
            try assemble(fieldLeaves, of: entity, row: rowIndex, &page, &c, mask: &mask)
        }
        if let owner {
            // An owned row: keyed by its owner and position, and replaced whole — what its object
            // does not give is NULL (or no links), not what an earlier version stored.
            for (offset, value) in owner.values.enumerated() { page.storage.set(v + offset, value) }
            page.storage.set(v + owner.values.count, .integer(Int64(owner.position)))
            for slot in 0..<entity.layout.columns.count where !mask.contains(slot) {
                if slot >= entity.ownerSlots { page.storage.set(v + slot, .null) }
                mask.insert(slot)
            }
            for k in entity.layout.toMany.indices
            where page.storage.linkSets[l + k] == nil && !(ownedLists ?? []).contains(where: { $0.k == k }) {
                page.storage.linkSets[l + k] = []
            }
        }

        var identity: IdentityKey?
        if let slot = entity.singleIdentitySlot, let value = page.storage.value(v + slot), value != .null {
            identity = .single(value)  // the common case, without an array
        } else if !entity.layout.identitySlots.isEmpty {
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
            identity = values.count == 1 ? .single(values[0]) : .composite(values)
        }
        // Owned rows, now that the owner's identity is known: each element a row of the owned
        // entity at its position; the set replaces the stored one.
        for owned in ownedLists ?? [] {
            guard let identity else {
                throw MappingFailure(
                    reason: "an owned relationship needs its owner's identity", entity: entity.name, code: .missingIdentity)
            }
            let target = entity.layout.toMany[owned.k].target
            let list = c.nodes[owned.list]
            var children: [IdentityKey] = []
            children.reserveCapacity(Int(list.count))
            var element = owned.list + 1
            let depth = trail.count
            enter(entity.rootKeys[owned.rootKey].name, entity.targets[owned.target])
            for position in 0..<Int(list.count) {
                trail.append(.index(position))
                do throws(MappingFailure) {
                    guard c.nodes[element].kind == .object else {
                        throw MappingFailure(
                            reason:
                                "expected an object of owned entity '\(plan.entities[target].name)', got \(c.nodes[element].kind.jsonName)",
                            code: .wrongShape)
                    }
                    if let child = try mapObject(
                        at: element, entity: target, owner: (identity.values, position), into: &record, &page, &c)
                    {
                        children.append(child)
                    }
                } catch {
                    throw error.prepending(
                        [.index(position)] + entity.targetPaths[owned.target]
                    )
                }
                trail.removeLast()
                element = Int(c.nodes[element].end)
            }
            trail.removeLast(trail.count - depth)
            page.storage.linkSets[l + owned.k] = children
        }
        // A parent's row filled by a child's record names the child (`kind`).
        if let kind, let slot = entity.layout.kindSlot {
            page.storage.set(v + slot, .text(kind))
            mask.insert(slot)
        }
        page.rows[rowIndex].identity = identity
        page.rows[rowIndex].mask = mask
        // A child's record fills its parent's row too (the same object, the parent's attributes
        // and relationships), with the same identity.
        if let parent = entity.parent {
            _ = try mapObject(at: at, entity: parent, kind: entity.name, into: &record, &page, &c)
        }
        return identity
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
    private mutating func mapBareIdentity(
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
        var row = page.storage.appendRow(entity: e, layout: layout)
        page.storage.set(row.valueStart + slot, value)
        row.mask.insert(slot)
        row.identity = .single(value)
        page.rows.append(row)
    }

    /// A relationship's value: a nested object (mapped as its own row) or a bare identity (a reference).
    private mutating func link(
        _ index: Int, target: Int, policy: MissingTargetPolicy, rules: AttributeRules? = nil, guarding: MappingPlan.Guard? = nil,
        row: Int, slot: Reference.Slot, into record: inout DecodedRecord, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) -> IdentityKey? {
        let node = c.nodes[index]
        switch node.kind {
        case .object:
            let first = page.rows.count
            let identity = try mapObject(at: index, entity: target, into: &record, &page, &c)
            if let guarding {
                record.guarded.append(
                    DecodedRecord.Guarded(
                        rows: first..<page.rows.count, parent: row, slot: slot, inserts: guarding.inserts, updates: guarding.updates))
            }
            return identity
        case .array:
            throw MappingFailure(
                reason: "expected an object or an identity of '\(plan.entities[target].name)', got array", code: .wrongShape)
        case .null where !isToManySlot(slot):
            return nil
        default:
            let entity = plan.entities[target]
            guard let identitySlot = entity.singleIdentitySlot else {
                throw MappingFailure(
                    reason: "'\(entity.name)' has a composite identity; a reference must be an object with its keys", code: .wrongShape)
            }
            let value = try convert(index, rules ?? entity.rules[identitySlot], &c)
            // `values: {"none": null}` on the relationship: no link.
            if value == .null, rules != nil, !isToManySlot(slot) { return nil }
            guard value != .null else {
                throw MappingFailure(reason: "null is not an identity of '\(entity.name)'", code: .missingIdentity)
            }
            let identity = IdentityKey.single(value)
            record.references.append(
                Reference(
                    target: target, identity: identity, policy: policy, row: row, slot: slot,
                    codingPath: policy == .reject ? MappingFailure.render(trail) : nil))
            return identity
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
