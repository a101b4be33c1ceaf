/// Turns decoded pages into a ``ResolvedBatch``, the same for every backend: records folded per
/// identity in page order (later values win, key by key), bare references checked against what
/// is stored or created earlier in the batch and handled by their relationship's policy
/// (`stub`, `ignore`, `reject` — with the rejection), identities looked up once per entity per
/// batch. What writing it did is counted once it is written (``RunLedger``).
///
/// Two steps, on two queues: ``prepare(_:uncommitted:store:)`` on the assembler's, while the
/// writer saves the batch before (when every relationship stubs, folding needs no database, and
/// the lookups use the store's reader of committed rows); ``resolve(_:store:)`` on the writer's,
/// finishing what `prepare` could not.
struct BatchResolver: Sendable {
    let model: EntityModel
    let layouts: [EntityLayout]
    /// Some relationship rejects or ignores missing targets: whether a target exists decides how
    /// a record folds, so the batch is looked up before it is folded, on the writer's queue.
    let checksReferences: Bool
    /// Per entity, the columns `default:` and `const:` fill: slot, value, and whether it is a
    /// const (every row) rather than a default (rows inserted without it).
    let fills: [[(slot: Int, value: ScalarValue, always: Bool)]]
    /// Per root entity written `insert_only` or `update_only`: whether a record is written
    /// depends on whether its root row exists, so those batches are looked up before folding.
    let rootRules: [Int: RootWriteRule]
    /// Per entity, its parent (index), if it has one.
    let parents: [Int?]

    init(model: EntityModel, layouts: [EntityLayout], rootRules: [Int: RootWriteRule] = [:]) {
        self.model = model
        self.layouts = layouts
        self.rootRules = rootRules
        parents = model.entities.map { $0.parent.flatMap { model.index(of: $0) } }
        checksReferences =
            !rootRules.isEmpty
            || model.entities.contains { $0.relationships.contains { $0.missing != .stub || !$0.insertsTargets || !$0.updatesTargets } }
        fills = BatchResolver.fills(of: model, layouts)
    }

    /// Per entity, the columns `default:` and `const:` fill (``fills``).
    static func fills(of model: EntityModel, _ layouts: [EntityLayout]) -> [[(slot: Int, value: ScalarValue, always: Bool)]] {
        zip(model.entities, layouts).map { entity, layout in
            entity.attributes.compactMap { attribute in
                guard let slot = layout.columns.firstIndex(where: { $0.name == attribute.name }) else { return nil }
                if let text = attribute.constValue, let value = AttributeRules.storedValue(text, type: attribute.type) {
                    return (slot, value, true)
                }
                if let text = attribute.defaultValue, let value = AttributeRules.storedValue(text, type: attribute.type) {
                    return (slot, value, false)
                }
                return nil
            }
        }
    }

    /// Fills the `const:` columns of every row and the `default:` columns of rows inserted
    /// without them (stubs included), after the batch is counted: a stub stays a stub.
    private func fill(_ folder: inout RowFolder, _ refs: [[StoredRef?]]) {
        for (entity, columns) in fills.enumerated() where !columns.isEmpty {
            folder.fill(entity, columns, inserting: { position in refs[entity].isEmpty || refs[entity][position] == nil })
        }
    }

    // MARK: - Assembler queue

    /// Folds `pages` and looks their identities up where that needs no write. The identities of
    /// batches saved but not committed (`uncommitted`) count as stored (``StoredRef/pending``):
    /// a reader of committed rows does not see them. A batch the store will stage (`staged`,
    /// ``LoadState/staging``) is looked up by nothing: its merge sorts and looks up.
    /// A batch for a stage (`unfolded`: the store stages its batches) whose identities are one
    /// integer each is not folded at all: the merge folds (``UnfoldedRows``).
    func prepare(
        _ pages: [DecodedPage], uncommitted: UncommittedIdentities, store: any IdentityLookups, staged: Bool = false,
        unfolded: Bool = false
    ) -> PreparedBatch {
        guard !checksReferences else { return PreparedBatch(pages: pages) }
        if unfolded, let rows = UnfoldedRows.make(pages, layouts: layouts) {
            // The pages keep their rows until they are staged.
            return PreparedBatch(pages: pages, folded: nil, unfolded: rows)
        }
        var folder = RowFolder.foldingWithStubs(pages, layouts: layouts, parents: parents)
        if staged {
            // Every row goes to staging as it is.
            return PreparedBatch(
                pages: BatchResolver.stripped(pages), folded: folder,
                refs: folder.merged.map { [StoredRef?](repeating: nil, count: $0.rows.count) })
        }
        folder.sortByIdentity()
        let pages = BatchResolver.stripped(pages)
        var refs = [[StoredRef?]](repeating: [], count: layouts.count)
        do {
            for (entity, rows) in folder.merged.enumerated() where !rows.index.isEmpty {
                // The writer looks them up itself when the store has no reader of its own.
                guard var found = try store.lookupCommitted(entity, rows.index.keys) else {
                    return PreparedBatch(pages: pages, folded: folder)
                }
                for key in rows.index.keys where found[key] == nil && uncommitted.contains(key, entity: entity) {
                    found[key] = .pending
                }
                refs[entity] = rows.refs(found)
            }
        } catch {
            return PreparedBatch(pages: pages, folded: folder)
        }
        return PreparedBatch(pages: pages, folded: folder, refs: refs)
    }

    /// Whether each record's own row came with an identity not below the one before it, page
    /// after page (records without identity, or of another kind of identity, are passed over).
    static func arrivedInIdentityOrder(_ pages: [DecodedPage]) -> Bool {
        var last: IdentityKey?
        for page in pages {
            for record in page.records where page.rows.indices.contains(record.rows.lowerBound) {
                guard let identity = page.rows[record.rows.lowerBound].identity else { continue }
                if let last, IdentityKey.precedes(identity, last) { return false }
                last = identity
            }
        }
        return true
    }

    // MARK: - Writer queue

    /// Finishes `batch`: looks up what `prepare` did not (on the store's writer, which sees the
    /// batches saved before), folds it when it was not folded, and counts what writing it does.
    /// `staging` (the store stages it: a staged load) leaves `default:` and `const:` to the
    /// merge, which knows which rows it inserts, and a batch prepared unfolded as it is; one the
    /// store writes batch by batch is folded here (a load whose staging the store gave up).
    func resolve(_ batch: PreparedBatch, store: any IdentityLookups, staging: Bool = false) throws -> ResolvedBatch {
        var outcome = BatchOutcome()
        outcome.entities = Array(repeating: EntityCounts(), count: layouts.count)
        var folder: RowFolder
        var refs: [[StoredRef?]]
        var pages = batch.pages
        if let unfolded = batch.unfolded, staging {
            return ResolvedBatch(
                number: batch.number, pages: pages, rows: RowFolder(layouts: layouts, parents: parents),
                refs: Array(repeating: [], count: layouts.count), outcome: outcome, unfolded: unfolded)
        }
        var folded = batch.folded
        if folded == nil, batch.unfolded != nil {
            // Prepared for a stage, written batch by batch after all: folded here, looked up below.
            var late = RowFolder.foldingWithStubs(pages, layouts: layouts, parents: parents)
            late.sortByIdentity()
            folded = late
            pages = BatchResolver.stripped(pages)
        }
        if let folded {
            folder = folded
            if let known = batch.refs {
                refs = known
            } else {
                refs = try folder.merged.enumerated().map { entity, rows in
                    rows.index.isEmpty ? [] : rows.refs(try store.lookup(entity, rows.index.keys))
                }
            }
        } else {
            let existing = try lookUpAll(pages, store: store)
            folder = foldCheckingReferences(pages, existing: existing, into: &outcome)
            folder.sortByIdentity()
            pages = BatchResolver.stripped(pages)
            refs = folder.merged.enumerated().map { entity, rows in rows.refs(existing[entity]) }
        }
        if !staging { fill(&folder, refs) }
        return ResolvedBatch(number: batch.number, pages: pages, rows: folder, refs: refs, outcome: outcome)
    }

    /// Looks up, per entity, which of the batch's identities (rows and references) are stored.
    private func lookUpAll(_ pages: [DecodedPage], store: any IdentityLookups) throws -> [[IdentityKey: StoredRef]] {
        var identities = [Set<IdentityKey>](repeating: [], count: layouts.count)
        for page in pages {
            for row in page.rows {
                if let identity = row.identity { identities[row.entity].insert(identity) }
            }
            for record in page.records {
                for reference in record.references {
                    identities[reference.target].insert(reference.identity)
                    // A child's stub stubs its parent's row too: whether that one is stored matters.
                    if let parent = parents[reference.target] { identities[parent].insert(reference.identity) }
                }
            }
        }
        var existing = [[IdentityKey: StoredRef]](repeating: [:], count: layouts.count)
        for (entity, keys) in identities.enumerated() where !keys.isEmpty {
            existing[entity] = try store.lookup(entity, keys)
        }
        return existing
    }

    /// Folds the batch's records, in order, into one row per identity. References are checked
    /// against what is stored or created earlier in the batch: `reject` rejects the record,
    /// `ignore` drops the link, `stub` creates a row holding only the identity.
    private func foldCheckingReferences(
        _ pages: [DecodedPage], existing: [[IdentityKey: StoredRef]], into outcome: inout BatchOutcome
    ) -> RowFolder {
        var folder = RowFolder(layouts: layouts, parents: parents)
        var known = existing.map { Set($0.keys) }
        folder.reserve(for: pages)
        for var page in pages {
            for record in page.records {
                // `insert_only` / `update_only`: the record is written only when its root row does
                // (not) exist — stored, or made by an earlier record.
                if !rootRules.isEmpty, let first = record.rows.first, let rule = rootRules[page.rows[first].entity],
                    let identity = page.rows[first].identity
                {
                    let exists = known[page.rows[first].entity].contains(identity)
                    if rule.mode == .insertOnly ? exists : !exists {
                        if rule.mode == .updateOnly && rule.rejectsUnknown {
                            outcome.rejections.append(
                                RecordRejection(
                                    entity: model.entities[page.rows[first].entity].name, codingPath: record.path ?? "",
                                    reason:
                                        "no '\(model.entities[page.rows[first].entity].name)' with identity \(identity) (write: update_only)",
                                    source: page.source, recordIndex: record.index, raw: record.raw ?? "", rawLength: record.rawLength,
                                    code: .unknownIdentity))
                        } else {
                            outcome.skipped += 1
                        }
                        continue
                    }
                }
                // Links to drop (row, to-many, position), removed last position first at the end.
                var dropped: [(row: Int, index: Int, position: Int)] = []
                // `operations:` without insert or update: nested objects decided by what is stored.
                var excluded: [Range<Int>] = []
                if !record.guarded.isEmpty {
                    decide(record.guarded, &page, known: known, excluded: &excluded, dropped: &dropped)
                }
                func kept(_ r: Int) -> Bool { excluded.isEmpty || !excluded.contains { $0.contains(r) } }
                for r in record.rows where kept(r) { if let id = page.rows[r].identity { known[page.rows[r].entity].insert(id) } }
                if !record.references.isEmpty {
                    if let missing = record.references.first(where: {
                        $0.policy == .reject && kept($0.row) && !known[$0.target].contains($0.identity)
                    }) {
                        outcome.rejections.append(
                            RecordRejection(
                                entity: model.entities[page.rows[record.rows.lowerBound].entity].name,
                                codingPath: missing.codingPath ?? "",
                                reason: "no '\(model.entities[missing.target].name)' with identity \(missing.identity)",
                                source: page.source, recordIndex: record.index, raw: record.raw ?? "", rawLength: record.rawLength,
                                code: .missingReference))
                        continue
                    }
                    for reference in record.references where kept(reference.row) {
                        switch reference.policy {
                        case .stub:
                            // A stored target too, as ``RowFolder/foldingWithStubs(_:layouts:parents:)``
                            // makes it: the batch touched it (`write: replace` keeps it, a cascade spares it).
                            folder.addStub(reference.target, reference.identity)
                            known[reference.target].insert(reference.identity)
                        case .ignore where !known[reference.target].contains(reference.identity):
                            dropLink(of: reference.row, at: reference.slot, &page, &dropped)
                        case .ignore, .reject:
                            break
                        }
                    }
                }
                // Remove dropped to-many links, last position first so earlier positions stay valid.
                for drop in dropped.sorted(by: { $0.position > $1.position }) {
                    page.storage.linkSets[page.rows[drop.row].linkStart + drop.index]?.remove(at: drop.position)
                }
                for r in record.rows where kept(r) { folder.merge(page.rows[r], from: page.storage, unit: page.unitKey) }
            }
        }
        return folder
    }

    /// Leaves a link of row `row` out: a to-one's key columns are no longer mentioned; a to-many
    /// position is queued in `dropped` (removed last position first, once the record is decided).
    private func dropLink(
        of row: Int, at slot: Reference.Slot, _ page: inout DecodedPage, _ dropped: inout [(row: Int, index: Int, position: Int)]
    ) {
        switch slot {
        case .toOne(let k):
            let owner = page.rows[row]
            for column in layouts[owner.entity].toOne[k].slots {
                page.storage.values[owner.valueStart + column] = nil
                page.rows[row].mask = page.rows[row].mask.removing(column)
            }
        case .toMany(let k, let position):
            dropped.append((row, k, position))
        }
    }

    /// `operations:` without `insert` or `update`: a nested object no row has, through a
    /// relationship that may not insert, is left out with what was mapped within it, and its
    /// link dropped; one that exists, through a relationship that may not update, keeps only its
    /// identity (its link stays). Outer objects first: what is inside a left-out one goes with it.
    private func decide(
        _ guarded: [DecodedRecord.Guarded], _ page: inout DecodedPage, known: [Set<IdentityKey>], excluded: inout [Range<Int>],
        dropped: inout [(row: Int, index: Int, position: Int)]
    ) {
        for object in guarded.sorted(by: { $0.rows.lowerBound < $1.rows.lowerBound }) {
            let at = object.rows.lowerBound
            guard !excluded.contains(where: { $0.contains(at) }), let identity = page.rows[at].identity else { continue }
            let entity = page.rows[at].entity
            let exists = known[entity].contains(identity)
            if !exists && !object.inserts {
                excluded.append(object.rows)
                dropLink(of: object.parent, at: object.slot, &page, &dropped)
            } else if exists && !object.updates {
                var mask = ColumnMask()
                for slot in layouts[entity].identitySlots { mask.insert(slot) }
                page.rows[at].mask = mask
                for k in layouts[entity].toMany.indices { page.storage.linkSets[page.rows[at].linkStart + k] = nil }
            }
        }
    }

    /// The pages without their records: those live on in the folded rows; the pages keep only
    /// what the writer stage counts.
    private static func stripped(_ pages: [DecodedPage]) -> [DecodedPage] {
        var pages = pages
        for k in pages.indices {
            pages[k].records = []
            pages[k].rows = []
            pages[k].storage = RowStorage()
        }
        return pages
    }
}

/// What the resolver needs from a store: which identities are stored, and where. ``IngestStore``
/// refines it (the resolver never writes).
public protocol IdentityLookups: AnyObject, Sendable {
    /// Which of `keys` (identities of `entity`) are stored, and where, as the writer sees them
    /// (batches saved in the open transaction included).
    func lookup(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef]
    /// The same as a reader of committed rows sees them, on the assembler's queue while the writer
    /// saves; `nil` when the store has no such reader (the writer then looks them up).
    func lookupCommitted(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef]?
}
