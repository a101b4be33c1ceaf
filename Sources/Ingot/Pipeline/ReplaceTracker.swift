import Logging

/// What `write: replace` needs of the rows a run wrote (docs/pipelines.md, "write: replace"): per
/// replaced entity the identities its batches held (kept at the run's end), the identities of the
/// entities its `delete: cascade` reaches (a cascade from an untouched row spares them), and per
/// replaced entity with a `scope:` the values its records gave the scope column (the delete stays
/// within them). A value the writer stage keeps and asks (``WriterStage``).
struct ReplaceTracker {
    /// What the run does at its end.
    let atEnd: ReplaceAtEnd
    /// The root entities whose untouched rows the run deletes at its end (one for a pipeline;
    /// each replacing resource's, with `resources:`).
    let entities: [Int]
    /// The entities a replaced entity's `delete: cascade` reaches.
    let cascadeTargets: [Int]
    /// Per replaced entity with a scope, the entities a scope value it saw counts for too (the
    /// kinds of one `root: {by: …}`; ``PipelineConfig/replaceScopePeers``).
    let scopePeers: [Int: [Int]]
    /// Per replaced entity, the identities the run's batches held.
    private(set) var touched: [Int: Set<IdentityKey>] = [:]
    /// Per entity a cascade reaches, the identities the run wrote.
    private(set) var written: [Int: Set<IdentityKey>] = [:]
    /// Per replaced entity with a `scope:`: its scope column's slot, and the values the run saw there.
    private(set) var scopes: [Int: (column: String, slot: Int, seen: Set<ScalarValue>)] = [:]

    init(config: PipelineConfig, layouts: [EntityLayout], atEnd: ReplaceAtEnd) {
        self.atEnd = atEnd
        entities = config.replacedEntities
        cascadeTargets = ReplaceTracker.reached(from: config.replacedEntities, model: config.model, layouts: layouts)
        scopePeers = config.replaceScopePeers
        for (entity, column) in config.replaceScopes {
            if let slot = layouts[entity].columns.firstIndex(where: { $0.name == column }) { scopes[entity] = (column, slot, []) }
        }
    }

    /// Per replaced entity with a `scope:`, the values `batch`'s records gave its scope column,
    /// every record's (read before folding: a record that moves a row from one scope to another
    /// within a batch shows both, as it would across batches).
    func scopeValues(of batch: PreparedBatch) -> [Int: Set<ScalarValue>] {
        guard !scopes.isEmpty else { return [:] }
        var seen: [Int: Set<ScalarValue>] = [:]
        for page in batch.decoded ?? batch.pages {
            for row in page.rows {
                guard let scope = scopes[row.entity], row.mask.contains(scope.slot),
                    let value = page.storage.value(row.valueStart + scope.slot), value != .null
                else { continue }
                seen[row.entity, default: []].insert(value)
            }
        }
        return seen
    }

    /// Notes a batch written, and the scope values its records gave. Only a run that deletes at
    /// its end keeps them (a joined run's last job reads positions instead).
    mutating func note(_ resolved: ResolvedBatch, scopeValues: [Int: Set<ScalarValue>]) {
        guard atEnd == .deleteUntouched else { return }
        for entity in entities { touched[entity, default: []].formUnion(resolved.rows.merged[entity].index.keys) }
        for entity in cascadeTargets { written[entity, default: []].formUnion(resolved.rows.merged[entity].index.keys) }
        for (entity, values) in scopeValues {
            for peer in scopePeers[entity] ?? [entity] { scopes[peer]?.seen.formUnion(values) }
        }
    }

    /// The deletes at the run's end, per replaced entity: every row but those the run touched,
    /// within the scope values it saw.
    var deletes: [(entity: Int, rows: RowsToDelete)] {
        entities.map { entity in
            (entity, .untouched(keeping: touched[entity] ?? [], scope: scopes[entity].map { (column: $0.column, values: Array($0.seen)) }))
        }
    }

    /// The entities `delete: cascade` relationships reach from `roots` (the roots too, when a
    /// cascade comes back to them).
    static func reached(from roots: [Int], model: EntityModel, layouts: [EntityLayout]) -> [Int] {
        let edges = CascadeEdge.edges(model, layouts)
        var seen = Set<Int>()
        var frontier = roots
        while let next = frontier.popLast() {
            for edge in edges where edge.from == next && seen.insert(edge.to).inserted { frontier.append(edge.to) }
        }
        return seen.sorted()
    }

    /// `write: replace` when the source ended — `exhausted`, or stopped before — with the run
    /// not failed: deletes what ``deleteUntouched(from:after:logger:)`` does, or says why it
    /// deletes nothing. Returns how many rows it deleted.
    func sourceEnded(exhausted: Bool, store: any IngestStore, after counters: RunCounters, logger: Logger) throws -> Int {
        switch (atEnd, exhausted) {
        case (.nothing, _): return 0
        case (.deleteUntouched, true): return try deleteUntouched(from: store, after: counters, logger: logger)
        case (.skipAfterResume, true):
            logger.warning(
                "replace.skipped", metadata: [LogKey.reason: "a resumed run cannot know every row its source holds; no row is deleted"])
        case (_, false):
            logger.warning("replace.skipped", metadata: [LogKey.reason: "the run was interrupted; no row is deleted"])
        }
        return 0
    }

    /// `write: replace` at the run's end: deletes the root rows this run did not touch, only
    /// after a complete view of the source — `counters` rejected no page or record (else it says
    /// why not and deletes nothing). Returns how many rows it deleted.
    func deleteUntouched(from store: any IngestStore, after counters: RunCounters, logger: Logger) throws -> Int {
        guard counters.rejectedPages == 0 && counters.rejectedRecords == 0 else {
            logger.warning(
                "replace.skipped",
                metadata: [
                    LogKey.reason:
                        "the run rejected \(counters.rejectedPages) pages and \(counters.rejectedRecords) records; its view of the source is incomplete, so no row is deleted"
                ])
            return 0
        }
        var deleted = 0
        for (entity, rows) in deletes { deleted += try store.delete(rows, of: entity, sparing: written) }
        return deleted
    }
}

/// What `write: replace` does when a run's source is exhausted.
enum ReplaceAtEnd: Sendable {
    /// `write: merge`.
    case nothing
    /// Delete the root rows the run did not touch (when it rejected nothing).
    case deleteUntouched
    /// A resumed run: it cannot know what the earlier process touched, so it deletes nothing and says so.
    case skipAfterResume
}
