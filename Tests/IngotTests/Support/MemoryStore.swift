import Dispatch
import Foundation
import Ingot  // not @testable: this backend uses the public seam only
import Synchronization

/// A database in memory, shared by the ``MemoryStore``s of the jobs that write it: its tables,
/// its runs, and the work queues of shared runs. Short operations take its mutex; a transaction
/// holds its write lock from its first write to its commit or rollback (one writer at a time,
/// like SQLite), so a rollback restores the tables as the transaction found them.
final class MemoryDatabase: Sendable {
    struct Tables {
        /// Per entity: rows by identity (their column values).
        var rows: [[IdentityKey: [ScalarValue?]]]
        /// Rows of entities without identity.
        var anonymous: [[[ScalarValue?]]]
        /// Per entity, per to-many relationship: each owner's targets.
        var links: [[[IdentityKey: [IdentityKey]]]]
        /// Shared runs: per entity, per row, the position of the unit that last set each column,
        /// each to-many set, and the row (``WritePositions/Slots``).
        var positions: [[IdentityKey: [Int64]]]
    }

    struct Run {
        var pipeline: String
        var status: String
        var progress: RunProgress?
        var counters: RunCounters?
    }

    /// A shared run's work queue.
    struct Join {
        enum UnitStatus: Equatable {
            case pending
            case claimed
            /// Marked done in a transaction not yet committed (others see it claimed).
            case committing
            case done
        }
        struct Unit {
            var status = UnitStatus.pending
            var job: String?
            var leaseUntil: Date?
            var claims = 0
            var page: Page
        }
        var ordinal: Int64
        var runID: String
        var pipeline: String
        var spec: [String: String]
        var status = "running"
        var error: String?
        var nextSeq = 1
        var endSeq: Int?
        var fetcher: String?
        var fetchLeaseUntil: Date?
        var fetchState: String?
        var fetchFailures = 0
        var units: [Int: Unit] = [:]
        /// Per job: its status and its counters as last committed.
        var jobs: [String: (status: String, counters: RunCounters)] = [:]
        /// The values the run keeps (the incremental cursor), until it finishes.
        var kept: [String: String] = [:]
        /// The values the units' records gave each replaced entity's scope column.
        var scopeValues: [Int: Set<ScalarValue>] = [:]
        /// Until when the jobs start no request (a server's Retry-After).
        var pauseUntil: Date?
    }

    struct State {
        var tables: Tables
        var runs: [String: Run] = [:]
        var runOrder: [String] = []
        var kept: [String: String] = [:]
        var joins: [String: Join] = [:]
    }

    let model: EntityModel
    let layouts: [EntityLayout]
    let state: Mutex<State>
    /// Held by the open transaction.
    let writeLock = DispatchSemaphore(value: 1)
    /// The time leases are measured with: the tests move it instead of sleeping.
    let now: @Sendable () -> Date

    init(model: EntityModel, now: @escaping @Sendable () -> Date = { Date() }) {
        self.model = model
        let layouts = EntityLayout.layouts(of: model)
        self.layouts = layouts
        self.now = now
        state = Mutex(
            State(
                tables: Tables(
                    rows: Array(repeating: [:], count: layouts.count), anonymous: Array(repeating: [], count: layouts.count),
                    links: layouts.map { Array(repeating: [:], count: $0.toMany.count) },
                    positions: Array(repeating: [:], count: layouts.count))))
    }

    /// Every table's rows as text, the way `rows(_:_:)` prints SQLite's (booleans as 0/1), sorted:
    /// comparable with a SQLite database's.
    func dump() -> [String: [[String]]] {
        let tables = state.withLock { $0.tables }
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
            out[layout.table] = (tables.rows[e].values.map { $0.map(text) } + tables.anonymous[e].map { $0.map(text) }).sorted {
                $0.lexicographicallyPrecedes($1)
            }
            for (k, toMany) in layout.toMany.enumerated() where toMany.hasJoinTable {
                var rows: [[String]] = []
                for (owner, targets) in tables.links[e][k] {
                    for (position, target) in targets.enumerated() {
                        rows.append(owner.values.map(text) + target.values.map(text) + (toMany.isOrdered ? [String(position)] : []))
                    }
                }
                out[toMany.joinTable] = rows.sorted { $0.lexicographicallyPrecedes($1) }
            }
        }
        return out
    }

    /// Ends the lease of every unit `job` holds, as time passing would (a stalled job).
    func expireLeases(of job: String, in name: String) {
        state.withLock { state in
            for (seq, unit) in state.joins[name]?.units ?? [:] where unit.job == job && unit.status == .claimed {
                state.joins[name]?.units[seq]?.leaseUntil = .distantPast
            }
        }
    }
}

/// Where a row's positions are: one per column, one per to-many set, then the row's (its
/// latest unit).
/// A second backend, in memory, written against the public `IngestStore` and `SharedRunStore`
/// seams alone: it stores what it is given and applies no merge rule of its own (those are the
/// resolver's). The tests run the same pages through it and through SQLite and compare the
/// final states, which shows that a backend needs nothing more than the seam — shared runs
/// included: several jobs, each with a store of its own on one ``MemoryDatabase``.
final class MemoryStore: SharedRunStore, @unchecked Sendable {  // used from the writer queue only (lookupCommitted is nil)
    let model: EntityModel
    let layouts: [EntityLayout]
    let database: MemoryDatabase
    /// The tables when the open transaction began; `nil`: none is open.
    private var snapshot: MemoryDatabase.Tables?
    /// This job's shared run, once joined.
    private var shared: MemorySharedRun?
    /// Units marked done in the open transaction.
    private var unitsInTransaction: [UnitRef] = []
    /// The job's counters as the open transaction records them.
    private var pendingCounters: RunCounters?
    /// What the last joined write did, per entity.
    private var sharedCounts: [EntityCounts]?
    /// Per entity, the stored rows the last single-run write found equal (a joined run: `nil`).
    private var unchanged: [[Int]] = []
    /// What the last write did.
    private var lastWrite: WriteResult {
        shared == nil || shared?.commitsInOrder == true ? WriteResult(unchanged: unchanged) : WriteResult(counts: sharedCounts)
    }

    init(model: EntityModel, database: MemoryDatabase? = nil) {
        self.model = model
        self.database = database ?? MemoryDatabase(model: model)
        layouts = self.database.layouts
    }

    var state: MemoryDatabase.State { database.state.withLock { $0 } }

    func dump() -> [String: [[String]]] { database.dump() }

    // MARK: - Runs

    func unfinishedRun(pipeline: String) throws -> UnfinishedRun? {
        let state = self.state
        guard let id = state.runOrder.last(where: { state.runs[$0]?.pipeline == pipeline }), let run = state.runs[id],
            run.status != "finished"
        else { return nil }
        return UnfinishedRun(
            runID: id, counters: run.progress?.counters ?? RunCounters(), lastSeq: run.progress?.lastSeq ?? 0,
            resumeState: run.progress?.resumeState)
    }

    func beginRun(_ run: RunBeginning) throws {
        switch run {
        case .new(let id, let pipeline, _, _):
            database.state.withLock { state in
                state.runs[id] = MemoryDatabase.Run(pipeline: pipeline, status: "running")
                state.runOrder.append(id)
            }
        case .resumed(let id, _):
            database.state.withLock { $0.runs[id]?.status = "running" }
        }
    }

    func finishRun(id: String, status: RunStatus, counters: RunCounters, finishedAt: Date) throws {
        try commit()
        database.state.withLock {
            $0.runs[id]?.status = status.rawValue
            $0.runs[id]?.counters = counters
        }
    }

    // MARK: - Batches

    func lookup(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef] {
        database.state.withLock { state in
            var found: [IdentityKey: StoredRef] = [:]
            for key in keys where state.tables.rows[entity][key] != nil { found[key] = .found }
            return found
        }
    }

    func lookupCommitted(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef]? {
        nil
    }

    /// Opens a transaction: waits for the write lock, remembers the tables.
    private func begin() {
        guard snapshot == nil else { return }
        database.writeLock.wait()
        snapshot = database.state.withLock { $0.tables }
    }

    func write(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        begin()
        do {
            try apply(batch)
            try then(lastWrite)
        } catch {
            try rollback(lost: (error as? StoreError)?.kind == .claimLost)
            throw error
        }
    }

    func writeIsolated(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        begin()
        let savepoint = database.state.withLock { $0.tables }
        let units = unitsInTransaction
        do {
            try apply(batch)
            try then(lastWrite)
        } catch let error as StoreError where error.kind == .claimLost {
            try rollback(lost: true)
            throw error
        } catch {
            database.state.withLock { $0.tables = savepoint }
            if let shared { shared.unmark(Array(unitsInTransaction.dropFirst(units.count)), lost: false) }
            unitsInTransaction = units
            throw error
        }
    }

    private func apply(_ batch: ResolvedBatch) throws {
        if let shared {
            let units = batch.units.filter { !unitsInTransaction.contains($0) }
            try shared.mark(units)
            unitsInTransaction += units
            if shared.commitsInOrder {
                // In order: a single run's writes (PGStore.writeJoinedRows).
                sharedCounts = nil
                database.state.withLock { state in
                    applySingle(batch, tables: &state.tables)
                    if shared.marksTouched {
                        markTouched(
                            batch,
                            position: UnitOrder.position(
                                ordinal: shared.ordinal, key: UnitOrder.lastKey(seq: batch.units.map(\.seq).max() ?? 0)),
                            &state.tables)
                    }
                }
                return
            }
            sharedCounts = database.state.withLock { applyShared(batch, ordinal: shared.ordinal, tables: &$0.tables) }
        } else {
            database.state.withLock { applySingle(batch, tables: &$0.tables) }
        }
    }

    /// In order, the rows a batch touched get its position as their `@` (PGStore.markTouched).
    private func markTouched(_ batch: ResolvedBatch, position: Int64, _ tables: inout MemoryDatabase.Tables) {
        for entity in 0..<batch.entityCount {
            let slots = WritePositions.Slots(layouts[entity])
            for row in batch.rows(of: entity) {
                guard let identity = row.identity else { continue }
                var positions = tables.positions[entity][identity] ?? slots.unwritten
                positions[slots.touched] = position
                tables.positions[entity][identity] = positions
            }
        }
    }

    private func applySingle(_ batch: ResolvedBatch, tables: inout MemoryDatabase.Tables) {
        unchanged = Array(repeating: [], count: batch.entityCount)
        // A to-one's inverse, applied once every row is written: (entity, k, owner, targets, position).
        var foreignKeyLinks: [(Int, Int, IdentityKey, [IdentityKey], Int)] = []
        for entity in 0..<batch.entityCount {
            let layout = layouts[entity]
            for (position, row) in batch.rows(of: entity).enumerated() {
                guard let identity = row.identity else {
                    tables.anonymous[entity].append(row.values.map { $0 ?? .null })
                    continue
                }
                var changed = false
                var mentioned = false
                if row.stored != nil, var stored = tables.rows[entity][identity] {
                    for (slot, value) in row.values.enumerated() where value != nil {
                        if !layout.identitySlots.contains(slot) { mentioned = true }
                        if stored[slot] != value { changed = true }
                        stored[slot] = value
                    }
                    tables.rows[entity][identity] = stored
                } else {
                    tables.rows[entity][identity] = row.values.map { $0 ?? .null }
                }
                for (k, targets) in row.links.enumerated() {
                    guard let targets else { continue }
                    mentioned = true
                    if layout.toMany[k].isForeignKey {
                        foreignKeyLinks.append((entity, k, identity, targets, position))
                        continue
                    }
                    if layout.toMany[k].isOwned {
                        // Owned rows past the new set's end go (with theirs); the others are rows of their own.
                        if deleteOwned(layout.toMany[k].target, prefix: identity.values, from: targets.count, &tables) { changed = true }
                        continue
                    }
                    let old = tables.links[entity][k][identity] ?? []
                    let new = layout.toMany[k].keepsLinks ? Self.unique(old + targets) : Self.unique(targets)
                    if layout.toMany[k].isOrdered ? old != new : Set(old) != Set(new) { changed = true }
                    tables.links[entity][k][identity] = new
                }
                if row.stored != nil, mentioned, !changed { unchanged[entity].append(position) }
            }
        }
        for (entity, k, owner, targets, position) in foreignKeyLinks {
            let toMany = layouts[entity].toMany[k]
            let target = layouts[toMany.target]
            let slots = toMany.sourceColumns.compactMap { name in target.columns.firstIndex { $0.name == name } }
            let wanted = Set(targets)
            var changed = false
            for (key, var values) in tables.rows[toMany.target] {
                let points = slots.map { values[$0] ?? .null } == owner.values
                if points != wanted.contains(key) {
                    for (offset, slot) in slots.enumerated() { values[slot] = points ? .null : owner.values[offset] }
                    tables.rows[toMany.target][key] = values
                    changed = true
                }
            }
            if changed { unchanged[entity].removeAll { $0 == position } }
        }
    }

    /// Deletes the rows of owned `entity` whose identity starts with `prefix` (their owner's) at a
    /// position of `from` or more, and the rows they own in turn. Whether any went.
    private func deleteOwned(_ entity: Int, prefix: [ScalarValue], from: Int, _ tables: inout MemoryDatabase.Tables) -> Bool {
        let gone = tables.rows[entity].keys.filter { key in
            let values = key.values
            guard values.count == prefix.count + 1, Array(values.prefix(prefix.count)) == prefix,
                case .integer(let position) = values[prefix.count]
            else { return false }
            return position >= from
        }
        for key in gone {
            tables.rows[entity][key] = nil
            for toMany in layouts[entity].toMany where toMany.isOwned {
                _ = deleteOwned(toMany.target, prefix: key.values, from: 0, &tables)
            }
        }
        return !gone.isEmpty
    }

    private static func unique(_ targets: [IdentityKey]) -> [IdentityKey] {
        var unique: [IdentityKey] = []
        for t in targets where !unique.contains(t) { unique.append(t) }
        return unique
    }

    /// A shared run's batch: units commit in any order, so each column, each link set and each
    /// row carries the position of the unit that set it, and a value replaces a stored one only
    /// when its unit is not older — the rule of ``WritePositions``, which PostgreSQL applies in
    /// SQL. Rows written by single runs (no position) lose to every unit.
    private func applyShared(_ batch: ResolvedBatch, ordinal: Int64, tables: inout MemoryDatabase.Tables) -> [EntityCounts] {
        let fallback = batch.lastUnitKey
        var counts = [EntityCounts](repeating: EntityCounts(), count: layouts.count)
        for entity in 0..<batch.entityCount {
            let layout = layouts[entity]
            let slots = WritePositions.Slots(layout)
            for row in batch.rows(of: entity) {
                guard let identity = row.identity else {
                    tables.anonymous[entity].append(row.values.map { $0 ?? .null })
                    counts[entity].inserted += 1
                    continue
                }
                let write = WritePositions(row, layout, ordinal: ordinal, fallback: fallback)
                var stored = tables.rows[entity][identity]
                var positions = tables.positions[entity][identity] ?? slots.unwritten
                if stored == nil {
                    stored = row.values.map { $0 ?? .null }
                    counts[entity].inserted += 1
                    if !write.gives { counts[entity].stubs += 1 }
                } else if write.gives {
                    counts[entity].updated += 1
                }
                let taken = write.apply(over: &positions)
                for slot in taken.columns { stored?[slot] = row.values[slot] ?? .null }
                for k in taken.sets { tables.links[entity][k][identity] = Self.unique(row.links[k] ?? []) }
                tables.rows[entity][identity] = stored
                tables.positions[entity][identity] = positions
            }
        }
        // Owned rows no set at least as new as their owner's wrote go, as in PostgreSQL's
        // `deleteStaleOwned`: rows past the newest set's end, whichever unit committed first.
        for entity in 0..<batch.entityCount {
            let slots = WritePositions.Slots(layouts[entity])
            for (k, toMany) in layouts[entity].toMany.enumerated() where toMany.isOwned {
                for row in batch.rows(of: entity) {
                    guard let identity = row.identity, row.links[k] != nil else { continue }
                    let newest = tables.positions[entity][identity]?[slots.set(k)] ?? 0
                    let target = WritePositions.Slots(layouts[toMany.target])
                    let stale = tables.rows[toMany.target].keys.filter { key in
                        Array(key.values.prefix(identity.values.count)) == identity.values && key.values.count == identity.values.count + 1
                            && (tables.positions[toMany.target][key]?[target.touched] ?? 0) < newest
                    }
                    for key in stale {
                        tables.rows[toMany.target][key] = nil
                        tables.positions[toMany.target][key] = nil
                        for owned in layouts[toMany.target].toMany where owned.isOwned {
                            _ = deleteOwned(owned.target, prefix: key.values, from: 0, &tables)
                        }
                    }
                }
            }
        }
        return counts
    }

    func recordProgress(_ progress: RunProgress) throws {
        if shared != nil {
            pendingCounters = progress.counters
        } else {
            database.state.withLock { $0.runs[progress.runID]?.progress = progress }
        }
        database.state.withLock { [shared] state in
            if let name = shared?.name {
                for (entity, values) in progress.scopeValues { state.joins[name]?.scopeValues[entity, default: []].formUnion(values) }
            }
            for item in progress.kept {
                let key = item.pipeline + "\u{1}" + item.key
                guard let name = shared?.name else {
                    state.kept[key] = item.value
                    continue
                }
                // Jobs of a shared run commit in any order: the run keeps the greatest cursor
                // its jobs saw, and it moves once, when the run finishes.
                if state.joins[name]?.kept[key].map({ Array($0.utf8).lexicographicallyPrecedes(Array(item.value.utf8)) }) ?? true {
                    state.joins[name]?.kept[key] = item.value
                }
            }
        }
    }

    var hasUncommittedBatches: Bool { snapshot != nil }

    var undoesBatchesAlone: Bool { false }

    @discardableResult func commit() throws -> Bool {
        guard snapshot != nil else { return false }
        if let shared {
            shared.commit(unitsInTransaction, counters: pendingCounters)
            unitsInTransaction = []
            pendingCounters = nil
        }
        snapshot = nil
        database.writeLock.signal()
        return true
    }

    func rollback() throws { try rollback(lost: false) }

    /// Restores the tables; a shared run's units go back to this job (or, when a claim was lost,
    /// to the queue).
    private func rollback(lost: Bool) throws {
        guard let snapshot else { return }
        database.state.withLock { $0.tables = snapshot }
        shared?.unmark(unitsInTransaction, lost: lost)
        unitsInTransaction = []
        pendingCounters = nil
        self.snapshot = nil
        database.writeLock.signal()
    }

    // MARK: - write: replace

    func delete(_ rows: RowsToDelete, of entity: Int, sparing: [Int: Set<IdentityKey>]) throws -> Int {
        database.state.withLock { state in
            var gone: Set<IdentityKey>
            switch rows {
            case .listed(let identities):
                gone = Set(state.tables.rows[entity].keys).intersection(identities)
            case .untouched(let keeping, let scope):
                gone = Set(state.tables.rows[entity].keys).subtracting(keeping)
                if let scope, let slot = layouts[entity].columns.firstIndex(where: { $0.name == scope.column }) {
                    gone = gone.filter { key in state.tables.rows[entity][key].map { scope.values.contains($0[slot] ?? .null) } ?? false }
                }
            }
            let sets = cascade(from: entity, gone, in: state.tables) { target, key in sparing[target]?.contains(key) ?? false }
            for (e, rows) in sets.sorted(by: { $0.key < $1.key }) { delete(rows, of: e, tables: &state.tables) }
            return sets.values.reduce(0) { $0 + $1.count }
        }
    }

    /// `delete: cascade`: the rows `gone` of `entity`, and what they link to through a cascading
    /// relationship, in turn — but the rows `spares` keeps (the ones the run wrote).
    func cascade(
        from entity: Int, _ gone: Set<IdentityKey>, in tables: MemoryDatabase.Tables, spares: (Int, IdentityKey) -> Bool
    ) -> [Int: Set<IdentityKey>] {
        var sets: [Int: Set<IdentityKey>] = [entity: gone]
        var grew = true
        while grew {
            grew = false
            for (e, layout) in layouts.enumerated() {
                guard let rows = sets[e] else { continue }
                let relationships = model.entities[e].relationships
                var found: [(Int, IdentityKey)] = []
                for toOne in layout.toOne where relationships[toOne.relationship].cascadesDeletes {
                    for key in rows {
                        guard let values = tables.rows[e][key] else { continue }
                        let target = toOne.slots.map { values[$0] ?? .null }
                        if !target.contains(.null) {
                            found.append((toOne.target, target.count == 1 ? .single(target[0]) : .composite(target)))
                        }
                    }
                }
                for (k, toMany) in layout.toMany.enumerated()
                where !toMany.isOwned && relationships[toMany.relationship].cascadesDeletes {
                    for key in rows { for target in tables.links[e][k][key] ?? [] { found.append((toMany.target, target)) } }
                }
                for (target, key) in found
                where tables.rows[target][key] != nil && !(sets[target]?.contains(key) ?? false)
                    && !spares(target, key)
                {
                    sets[target, default: []].insert(key)
                    grew = true
                }
            }
        }
        return sets
    }

    /// Deletes rows `gone` of `entity`, nullifying what pointed at them.
    func delete(_ gone: Set<IdentityKey>, of entity: Int, tables: inout MemoryDatabase.Tables) {
        for key in gone {
            tables.rows[entity][key] = nil
            tables.positions[entity][key] = nil
        }
        for (e, layout) in layouts.enumerated() {
            for toOne in layout.toOne where toOne.target == entity {
                for (key, values) in tables.rows[e] {
                    let target = toOne.slots.map { values[$0] ?? .null }
                    let identity: IdentityKey = target.count == 1 ? .single(target[0]) : .composite(target)
                    guard gone.contains(identity) else { continue }
                    var nulled = values
                    for slot in toOne.slots { nulled[slot] = .null }
                    tables.rows[e][key] = nulled
                }
            }
            for (k, toMany) in layout.toMany.enumerated() {
                if toMany.isOwned {
                    if e == entity { for key in gone { _ = deleteOwned(toMany.target, prefix: key.values, from: 0, &tables) } }
                    continue
                }
                if e == entity { for key in gone { tables.links[e][k][key] = nil } }
                if toMany.target == entity {
                    for (owner, targets) in tables.links[e][k] { tables.links[e][k][owner] = targets.filter { !gone.contains($0) } }
                }
            }
        }
    }

    func unfilledStubs() throws -> [Int: Int] {
        let tables = database.state.withLock { $0.tables }
        var result: [Int: Int] = [:]
        for entity in model.entities {
            for relationship in entity.relationships where relationship.missing == .stub {
                guard let target = model.index(of: relationship.target) else { continue }
                let layout = layouts[target]
                let others = layout.columns.indices.filter { !layout.identitySlots.contains($0) }
                guard !others.isEmpty else { continue }
                result[target] = tables.rows[target].values.filter { row in others.allSatisfy { row[$0] == nil || row[$0] == .null } }.count
            }
        }
        return result
    }

    func close() throws {
        try rollback()
    }

    // MARK: - Shared runs

    /// The memory store writes a joined job batch by batch: no stretch to break.

    func joinRun(_ request: SharedRunRequest) throws -> any SharedRun {
        let run = try MemorySharedRun(store: self, request: request)
        shared = run
        return run
    }

    /// Ends a job's part (``MemorySharedRun/endJob(status:counters:replacing:scopes:maxPageBytes:archive:)``).
    fileprivate func endJob(
        _ run: MemorySharedRun, status: RunStatus, counters: RunCounters, replacing: [Int], scopes: [Int: String],
        archive: ((_ unit: Page) throws -> [Page])?
    ) throws -> SharedRunEnd {
        try commit()
        begin()
        defer { _ = try? commit() }
        let name = run.name
        let (finishing, join) = database.state.withLock { state -> (Bool, MemoryDatabase.Join?) in
            state.joins[name]?.jobs[run.job]?.status = status.rawValue
            // The units the job still holds lapse now, as in PostgreSQL's `endJoinedJob`.
            for (seq, unit) in state.joins[name]?.units ?? [:] where unit.status == .claimed && unit.job == run.job {
                state.joins[name]?.units[seq]?.leaseUntil = .distantPast
            }
            guard let join = state.joins[name] else { return (false, nil) }
            let open = join.units.values.contains { $0.status != .done }
            return (status == .finished && join.status == "running" && join.endSeq != nil && !open, join)
        }
        guard finishing, var join else { return SharedRunEnd() }
        var total = RunCounters()
        for (_, job) in join.jobs { total.add(job.counters) }
        var skipped: String?
        if !replacing.isEmpty {
            if total.rejectedPages == 0 && total.rejectedRecords == 0 {
                let first = UnitOrder.position(ordinal: join.ordinal, key: 0)
                for entity in replacing {
                    total.deleted += database.state.withLock { state in
                        func touched(_ e: Int, _ key: IdentityKey) -> Int64 {
                            state.tables.positions[e][key]?[WritePositions.Slots(layouts[e]).touched] ?? 0
                        }
                        var gone = Set(state.tables.rows[entity].keys.filter { touched(entity, $0) < first })
                        if let scope = scopes[entity], let slot = layouts[entity].columns.firstIndex(where: { $0.name == scope }) {
                            let seen = join.scopeValues[entity] ?? []
                            gone = gone.filter { key in state.tables.rows[entity][key].map { seen.contains($0[slot] ?? .null) } ?? false }
                        }
                        // A cascade spares the rows a unit of this run touched, as a single run's does.
                        let sets = cascade(from: entity, gone, in: state.tables) { touched($0, $1) >= first }
                        for (e, rows) in sets.sorted(by: { $0.key < $1.key }) { delete(rows, of: e, tables: &state.tables) }
                        return sets.values.reduce(0) { $0 + $1.count }
                    }
                }
            } else {
                skipped =
                    "the run rejected \(total.rejectedPages) pages and \(total.rejectedRecords) records; its view of the source is incomplete, so no row is deleted"
            }
        }
        if let archive {
            for seq in join.units.keys.sorted() {
                guard let unit = join.units[seq], unit.page.oversized == nil, unit.page.unreadable == nil else { continue }
                var page = unit.page
                page.seq = seq
                _ = try archive(page)
            }
        }
        join.status = "finished"
        for seq in join.units.keys { join.units[seq]?.page.bytes = [] }
        database.state.withLock { [join, total] state in
            state.kept.merge(state.joins[name]?.kept ?? [:]) { _, run in run }
            state.joins[name] = join
            state.joins[name]?.kept = [:]
            state.runs[join.runID]?.status = "finished"
            state.runs[join.runID]?.counters = total
        }
        return SharedRunEnd(finished: total, replaceSkipped: skipped)
    }
}

/// A job's membership of a shared run in a ``MemoryDatabase``: the same queue PostgreSQL keeps
/// in `_ingot_units`, in memory, with leases measured by the database's clock.
final class MemorySharedRun: SharedRun, @unchecked Sendable {  // mutable state in `database.state`; `store` is used on the writer's queue
    let runID: String
    let name: String
    let job: String
    let created: Bool
    let alreadyFinished: Bool
    let revived: String?
    let lease: Double
    let commitsInOrder: Bool
    let marksTouched: Bool
    let ordinal: Int64
    private let database: MemoryDatabase
    private unowned let store: MemoryStore
    private static let jobs = Mutex(0)

    init(store: MemoryStore, request: SharedRunRequest) throws {
        self.store = store
        database = store.database
        name = request.name
        lease = request.lease
        commitsInOrder = request.commitsInOrder
        marksTouched = request.marksTouchedRows
        job = "memory-job-\(Self.jobs.withLock { $0 += 1; return $0 })"
        let job = self.job
        let joined = try database.state.withLock { state throws -> (Bool, Bool, String?, Int64, String) in
            var created = false
            if state.joins[request.name] == nil {
                created = true
                state.joins[request.name] = MemoryDatabase.Join(
                    ordinal: Int64(state.joins.count + 1), runID: request.proposedRunID, pipeline: request.pipeline, spec: request.spec)
                state.runs[request.proposedRunID] = MemoryDatabase.Run(pipeline: request.pipeline, status: "running")
                state.runOrder.append(request.proposedRunID)
            }
            guard var join = state.joins[request.name] else { throw StoreError.schema("the join '\(request.name)' vanished") }
            guard join.pipeline == request.pipeline else {
                throw StoreError.conflict(
                    "the join '\(request.name)' is a run of pipeline '\(join.pipeline)', not '\(request.pipeline)': use another --join name"
                )
            }
            if let refusal = request.refusal(joining: join.spec) { throw StoreError.conflict(refusal) }
            var revived: String?
            if join.status == "failed" {
                revived = join.error ?? "unknown"
                join.status = "running"
                join.fetchFailures = 0
                join.error = nil
                state.runs[join.runID]?.status = "running"
            }
            let finished = join.status == "finished"
            if !finished { join.jobs[job] = ("running", RunCounters()) }
            state.joins[request.name] = join
            return (created, finished, revived, join.ordinal, join.runID)
        }
        (created, alreadyFinished, revived, ordinal, runID) = joined
    }

    private func withJoin<T>(_ body: (inout MemoryDatabase.Join, Date) throws -> T) throws -> T {
        let now = database.now()
        return try database.state.withLock { state in
            guard var join = state.joins[name] else { throw StoreError.schema("the join '\(name)' vanished") }
            defer { state.joins[name] = join }
            return try body(&join, now)
        }
    }

    func claim(maxPageBytes: Int, before: Int?) throws -> (page: Page, takenFrom: String?)? {
        try withJoin { join, now in
            let open = join.units.keys.sorted().filter { join.units[$0]?.status != .done && $0 < (before ?? .max) }
            guard
                let seq = (commitsInOrder ? Array(open.prefix(1)) : open).first(where: { seq in
                    guard let unit = join.units[seq] else { return false }
                    return unit.status == .pending || (unit.status == .claimed && (unit.leaseUntil ?? .distantPast) < now)
                }), var unit = join.units[seq]
            else { return nil }
            let previous = unit.status == .claimed ? unit.job : nil
            unit.status = .claimed
            unit.job = job
            unit.leaseUntil = now.addingTimeInterval(lease)
            unit.claims += 1
            join.units[seq] = unit
            var page = unit.page
            page.unit = UnitRef(seq: seq, claim: unit.claims)
            if page.bytes.count > maxPageBytes {
                page.oversized = page.bytes.count
                page.bytes = []
            }
            return (page, previous)
        }
    }

    func state() throws -> SharedRunState {
        try withJoin { join, now in
            switch join.status {
            case "finished": return .finished
            case "failed": return .failed(join.error ?? "unknown")
            default:
                let open = join.units.values.filter { $0.status != .done }
                return .running(
                    endSeq: join.endSeq, fetching: join.fetcher != nil && (join.fetchLeaseUntil ?? .distantPast) >= now,
                    openElsewhere: open.filter { $0.job != job }.count, pending: open.filter { $0.status == .pending }.count)
            }
        }
    }

    func renewLeases() throws {
        try withJoin { join, now in
            for (seq, unit) in join.units where unit.job == job && unit.status == .claimed {
                join.units[seq]?.leaseUntil = now.addingTimeInterval(lease)
            }
            if join.fetcher == job { join.fetchLeaseUntil = now.addingTimeInterval(lease) }
        }
    }

    func takeFetcherRole() throws -> (nextSeq: Int, resumeState: String?)? {
        try withJoin { join, now in
            guard join.status == "running", join.endSeq == nil, join.fetcher == nil || (join.fetchLeaseUntil ?? .distantPast) < now
            else { return nil }
            join.fetcher = job
            join.fetchLeaseUntil = now.addingTimeInterval(lease)
            return (join.nextSeq, join.fetchState)
        }
    }

    func enqueue(_ pages: [Page], from seq: Int) throws -> Bool {
        try withJoin { join, now in
            guard join.fetcher == job, join.nextSeq == seq else { return false }
            join.nextSeq = seq + pages.count
            join.fetchState = pages.last?.resumeState ?? join.fetchState
            join.fetchLeaseUntil = now.addingTimeInterval(lease)
            join.fetchFailures = 0
            for (k, page) in pages.enumerated() {
                var stored = page
                stored.seq = seq + k
                stored.archive = nil
                join.units[seq + k] = MemoryDatabase.Join.Unit(page: stored)
            }
            return true
        }
    }

    func keepFetched(_ page: Page) throws -> Bool {
        guard let ref = page.unit else { return false }
        return try withJoin { join, _ in
            guard var unit = join.units[ref.seq], unit.status == .claimed, unit.job == job, unit.claims == ref.claim else { return false }
            var kept = page
            kept.unit = nil
            kept.seq = ref.seq
            unit.page = kept
            join.units[ref.seq] = unit
            return true
        }
    }

    func settleEnd(of unit: UnitRef) throws -> SourceEndSettlement {
        try withJoin { join, _ in
            if let end = join.endSeq, end <= unit.seq {
                if let held = join.units[unit.seq], held.status == .claimed, held.job == job, held.claims == unit.claim {
                    join.units[unit.seq] = nil
                }
                return .pastTheEnd
            }
            let open = join.units.contains { seq, held in seq < unit.seq && held.status != .done && held.job != job }
            if open { return .earlierUnitsOpen }
            join.endSeq = unit.seq + 1
            join.fetcher = nil
            join.fetchLeaseUntil = nil
            for (seq, held) in join.units where seq > unit.seq && held.status == .pending { join.units[seq] = nil }
            return .ends
        }
    }

    func pauseRequests(for seconds: Double) throws {
        guard seconds > 0, seconds.isFinite else { return }
        try withJoin { join, now in
            let until = now.addingTimeInterval(seconds)
            join.pauseUntil = max(join.pauseUntil ?? until, until)
        }
    }

    func requestPause() throws -> Double {
        try withJoin { join, now in max(0, join.pauseUntil?.timeIntervalSince(now) ?? 0) }
    }

    func endSource(at seq: Int) throws -> Bool {
        try withJoin { join, _ in
            guard join.fetcher == job, join.nextSeq == seq else { return false }
            join.endSeq = seq
            join.fetcher = nil
            return true
        }
    }

    func releaseFetcherRole() {
        _ = try? withJoin { join, _ in
            if join.fetcher == job {
                join.fetcher = nil
                join.fetchLeaseUntil = nil
            }
        }
    }

    func recordFetchFailure(_ message: String) {
        _ = try? withJoin { join, _ in
            guard join.fetcher == job else { return }
            join.fetcher = nil
            join.fetchLeaseUntil = nil
            join.fetchFailures += 1
            join.error = message
            if join.fetchFailures >= 3 { join.status = "failed" }
        }
    }

    func endJob(
        status: RunStatus, counters: RunCounters, replacing: [Int], scopes: [Int: String], maxPageBytes: Int,
        archive: ((_ unit: Page) throws -> [Page])?
    ) throws -> SharedRunEnd {
        try store.endJob(self, status: status, counters: counters, replacing: replacing, scopes: scopes, archive: archive)
    }

    // MARK: - The store's transaction

    /// Marks `units` done in the open transaction: this job must still hold each claim.
    func mark(_ units: [UnitRef]) throws {
        try withJoin { join, _ in
            let lost = units.filter { join.units[$0.seq]?.job != job || join.units[$0.seq]?.claims != $0.claim }
            guard lost.isEmpty else {
                // The batch's other units go back to the queue with the transaction's.
                for unit in units where !lost.contains(unit) {
                    join.units[unit.seq]?.status = .pending
                    join.units[unit.seq]?.job = nil
                }
                throw StoreError.claimLost(lost.map(\.seq).sorted())
            }
            for unit in units { join.units[unit.seq]?.status = .committing }
        }
    }

    /// Units of a transaction rolled back: this job holds them again, or — a claim was lost —
    /// they go back to the queue.
    func unmark(_ units: [UnitRef], lost: Bool) {
        _ = try? withJoin { join, _ in
            for unit in units where join.units[unit.seq]?.job == job && join.units[unit.seq]?.claims == unit.claim {
                join.units[unit.seq]?.status = lost ? .pending : .claimed
                if lost { join.units[unit.seq]?.job = nil }
            }
        }
    }

    /// The transaction committed: its units are done, and the job's counters are its own.
    func commit(_ units: [UnitRef], counters: RunCounters?) {
        _ = try? withJoin { join, _ in
            for unit in units { join.units[unit.seq]?.status = .done }
            if let counters { join.jobs[job]?.counters = counters }
        }
    }
}
