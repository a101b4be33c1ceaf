import Foundation
import Ingot  // not @testable: this backend uses the public seam only

/// A second backend, in memory, written against the public `IngestStore` seam alone: it stores
/// what it is given and applies no merge rule of its own (those are the resolver's). The tests
/// run the same pages through it and through SQLite and compare the final states, which shows
/// that a backend needs nothing more than the seam.
final class MemoryStore: IngestStore, @unchecked Sendable {  // used from the writer queue only (lookupCommitted is nil)
    struct State {
        /// Per entity: rows by identity (their column values), in insertion order of identity.
        var rows: [[IdentityKey: [ScalarValue?]]]
        /// Rows of entities without identity.
        var anonymous: [[[ScalarValue?]]]
        /// Per entity, per to-many relationship: each owner's targets.
        var links: [[[IdentityKey: [IdentityKey]]]]
        var runs: [String: (pipeline: String, status: String, progress: RunProgress?)] = [:]
        var runOrder: [String] = []
        var kept: [String: String] = [:]
    }

    let model: EntityModel
    let layouts: [EntityLayout]
    private(set) var state: State
    /// The state when the open transaction began; `nil`: none is open.
    private var snapshot: State?

    init(model: EntityModel) {
        self.model = model
        layouts = EntityLayout.layouts(of: model)
        state = State(
            rows: Array(repeating: [:], count: layouts.count), anonymous: Array(repeating: [], count: layouts.count),
            links: layouts.map { Array(repeating: [:], count: $0.toMany.count) })
    }

    func unfinishedRun(pipeline: String) throws -> UnfinishedRun? {
        guard let id = state.runOrder.last(where: { state.runs[$0]?.pipeline == pipeline }), let run = state.runs[id],
            run.status != "finished"
        else { return nil }
        return UnfinishedRun(
            runID: id, counters: run.progress?.counters ?? RunCounters(), lastSeq: run.progress?.lastSeq ?? 0,
            resumeState: run.progress?.resumeState)
    }

    func beginRun(id: String, pipeline: String, startedAt: Date, archive: String?) throws {
        state.runs[id] = (pipeline, "running", nil)
        state.runOrder.append(id)
    }

    func reopenRun(id: String, archive: String?) throws {
        state.runs[id]?.status = "running"
    }

    func finishRun(id: String, status: RunStatus, counters: RunCounters, finishedAt: Date) throws {
        try commit()
        state.runs[id]?.status = status.rawValue
    }

    func lookup(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef] {
        var found: [IdentityKey: StoredRef] = [:]
        for key in keys where state.rows[entity][key] != nil { found[key] = .found }
        return found
    }

    func lookupCommitted(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef]? {
        nil
    }

    func write(_ batch: ResolvedBatch, then: () throws -> Void) throws {
        if snapshot == nil { snapshot = state }
        apply(batch)
        do {
            try then()
        } catch {
            try rollback()
            throw error
        }
    }

    func writeIsolated(_ batch: ResolvedBatch, then: () throws -> Void) throws {
        if snapshot == nil { snapshot = state }
        let savepoint = state
        apply(batch)
        do {
            try then()
        } catch {
            state = savepoint
            throw error
        }
    }

    private func apply(_ batch: ResolvedBatch) {
        for entity in 0..<batch.entityCount {
            for row in batch.rows(of: entity) {
                guard let identity = row.identity else {
                    state.anonymous[entity].append(row.values.map { $0 ?? .null })
                    continue
                }
                if row.stored != nil, var stored = state.rows[entity][identity] {
                    for (slot, value) in row.values.enumerated() where value != nil { stored[slot] = value }
                    state.rows[entity][identity] = stored
                } else {
                    state.rows[entity][identity] = row.values.map { $0 ?? .null }
                }
                for (k, targets) in row.links.enumerated() {
                    guard let targets else { continue }
                    var unique: [IdentityKey] = []
                    for t in targets where !unique.contains(t) { unique.append(t) }
                    state.links[entity][k][identity] = unique
                }
            }
        }
    }

    func recordProgress(_ progress: RunProgress) throws {
        state.runs[progress.runID]?.progress = progress
        for item in progress.kept { state.kept[item.pipeline + "\u{1}" + item.key] = item.value }
    }

    var hasUncommittedBatches: Bool { snapshot != nil }

    func commit() throws {
        snapshot = nil
    }

    func rollback() throws {
        if let snapshot { state = snapshot }
        snapshot = nil
    }

    func deleteUntouched(entity: Int, keeping: Set<IdentityKey>) throws -> Int {
        let gone = Set(state.rows[entity].keys).subtracting(keeping)
        for key in gone { state.rows[entity][key] = nil }
        for (e, layout) in layouts.enumerated() {
            for toOne in layout.toOne where toOne.target == entity {
                for (key, values) in state.rows[e] {
                    let target = toOne.slots.map { values[$0] ?? .null }
                    let identity: IdentityKey = target.count == 1 ? .single(target[0]) : .composite(target)
                    guard gone.contains(identity) else { continue }
                    var nulled = values
                    for slot in toOne.slots { nulled[slot] = .null }
                    state.rows[e][key] = nulled
                }
            }
            for (k, toMany) in layout.toMany.enumerated() {
                if e == entity { for key in gone { state.links[e][k][key] = nil } }
                if toMany.target == entity {
                    for (owner, targets) in state.links[e][k] { state.links[e][k][owner] = targets.filter { !gone.contains($0) } }
                }
            }
        }
        return gone.count
    }

    func unfilledStubs() throws -> [Int: Int] {
        var result: [Int: Int] = [:]
        for entity in model.entities {
            for relationship in entity.relationships where relationship.missing == .stub {
                guard let target = model.index(of: relationship.target) else { continue }
                let layout = layouts[target]
                let others = layout.columns.indices.filter { !layout.identitySlots.contains($0) }
                guard !others.isEmpty else { continue }
                result[target] = state.rows[target].values.filter { row in others.allSatisfy { row[$0] == nil || row[$0] == .null } }.count
            }
        }
        return result
    }

    func close() throws {}

    /// Every table's rows as text, the way `rows(_:_:)` prints SQLite's (booleans as 0/1), sorted:
    /// comparable with a SQLite database's.
    func dump() -> [String: [[String]]] {
        func text(_ v: ScalarValue?) -> String {
            switch v ?? .null {
            case .null: "NULL"
            case .integer(let n): String(n)
            case .real(let d): String(d)
            case .text(let s): s
            case .bool(let b): b ? "1" : "0"
            }
        }
        var out: [String: [[String]]] = [:]
        for (e, layout) in layouts.enumerated() {
            out[layout.table] = (state.rows[e].values.map { $0.map(text) } + state.anonymous[e].map { $0.map(text) }).sorted {
                $0.lexicographicallyPrecedes($1)
            }
            for (k, toMany) in layout.toMany.enumerated() {
                var rows: [[String]] = []
                for (owner, targets) in state.links[e][k] {
                    for (position, target) in targets.enumerated() {
                        rows.append(owner.values.map(text) + target.values.map(text) + (toMany.isOrdered ? [String(position)] : []))
                    }
                }
                out[toMany.joinTable] = rows.sorted { $0.lexicographicallyPrecedes($1) }
            }
        }
        return out
    }
}
