import Foundation
import Synchronization

/// The PostgreSQL backend, through libpq: the same tables and column names as SQLite, with
/// PostgreSQL's types (bigint, double precision, text, boolean, timestamptz or date, jsonb), the
/// identity as a unique constraint, and set-based writes — each batch is copied (`COPY … FROM
/// STDIN`) into temporary staging tables, then applied with one statement per entity and
/// relationship:
///
/// ```sql
/// INSERT INTO "person" ("id", "first_name", …) SELECT … FROM "_ingot_new_person"            -- rows not stored
/// UPDATE "person" AS t SET "first_name" = CASE WHEN substr(s._present, 2, 1) = '1'
///   THEN s."first_name" ELSE t."first_name" END, … FROM "_ingot_old_person" AS s WHERE t."id" = s."id"
///   AND (substr(s._present, 2, 1) = '1' AND t."first_name" IS DISTINCT FROM s."first_name" OR …)  -- stored rows that differ
/// DELETE FROM "person_dogs" AS j USING "_ingot_own_person_dogs" AS o WHERE j."person_id" = o."person_id"
///   AND NOT EXISTS (SELECT 1 FROM "_ingot_link_person_dogs" AS l WHERE …)                           -- links no longer given
/// INSERT INTO "person_dogs" SELECT DISTINCT ON (…) … FROM "_ingot_link_person_dogs" ON CONFLICT DO NOTHING  -- new links
/// ```
///
/// Rejects, run bookkeeping and the resume state go in the same transaction. Used from the
/// writer queue, but for ``lookupCommitted(_:_:)``, which has a connection of its own and is
/// called from the assembler's queue only.
///
/// `@unchecked Sendable`: `reader` is opened and used on the assembler's queue and interrupted
/// from any, under `readerLock`; `folds` is a `Sendable` value of its own (a mutex), and
/// everything else is confined to the writer queue.
final class PGStore: IngestStore, @unchecked Sendable {  // queue-confined, as said above
    let model: EntityModel
    let layouts: [EntityLayout]
    let connection: PGConnection
    /// The database's URL (secrets included: never shown; ``PGConnection/shown`` is).
    let url: String
    /// A second connection for ``lookupCommitted(_:_:)`` on the assembler's queue: the next
    /// batch's identities are looked up while the writer writes this one. Opened by the first
    /// lookup: a load that looks nothing up — staged, or a joined job whose rows are exchanged —
    /// costs the server no backend for it.
    private var reader: PGConnection?
    private let readerLock = NSLock()
    private let stopped: StopFlag?
    /// Whether one of the store's own transactions is open: a transaction, or — while it holds
    /// its caller's (``owner``) — a savepoint in that one.
    private(set) var inTransaction = false
    /// Whose transaction the store's commits end: its own, or one it holds for its caller.
    var owner = TransactionOwner.store
    /// The open transaction's number (each ``begin()`` counts one): what a caller keeps about a
    /// transaction (a joined job's units marked done, ``PGJoinedStore``) holds for this number only.
    private(set) var transactionNumber = 0
    /// Per entity, the stored rows the last single run's write left as they were.
    private(set) var lastUnchanged: [[Int]] = []
    /// What opening the store added to a database that held the pipeline's tables already.
    private(set) var migration: [String] = []
    /// The join tables two relationships share (an inverse pair): a batch may give the same
    /// link from both sides, so their links are never copied in directly.
    let sharedJoinTables: Set<String>
    /// Staging tables made in this session (temporary tables live as long as the connection).
    private var staged: Set<String> = []
    /// The staging tables made in the open transaction, in order: a rollback (to its start or
    /// to a savepoint) drops them, so they are made again.
    private(set) var stagedInTransaction: [String] = []
    /// Where the load stands (PGStore+Staged.swift), writer queue only; moved by
    /// ``moveLoad(to:)``, which refuses a move the lifecycle does not have.
    private(set) var load = PGLoad.batchByBatch
    /// The connections a staged load's folds read on while they run, for ``interrupt()``, which
    /// runs on another thread than the writer's (a stop's): `load` itself is the writer queue's.
    let folds = FoldInterruption()
    /// The foreign keys' indexes a staged copy dropped, built again once it committed.
    var droppedIndexes: [ForeignKeyIndex] = []
    /// How the run writes its batches, decided before the store opened (``LoadPlan/decide(_:)``):
    /// whether its load may stage from the first batch, go on staged when resumed, and — a
    /// joined job's — defer its batches. The store reads it; it keeps no Boolean of its own.
    let plan: LoadPlan
    /// Where staging files go and how their rows are sent.
    var stagingFiles = PGStagingFiles()
    /// The exchange's compressor, kept from batch to batch: a context made per batch allocated
    /// and zeroed its tables again each time (page faults in a joined job's profile).
    private(set) lazy var exchangeCompressor = Zstd(level: ExchangeTable.level)
    /// The run this store writes, once begun or reopened.
    var runID: String?
    /// What ``unfinishedRun(pipeline:)`` found of a staged load for ``beginRun(_:)``:
    /// its staging file opened again, or the run to start again from its first page.
    var resumedStaging: ResumedStaging?
    var isStaging: Bool { if case .staging = load { true } else { false } }

    /// The staged load's file and store, while it stages or its rows are copied.
    var staging: PGStaging? {
        switch load {
        case .staging(let s), .copied(let s), .published(let s): s
        case .batchByBatch, .stagedWithTheRun, .declined: nil
        }
    }

    /// Where the load stands (``IngestStore/loadState``).
    var loadState: LoadState {
        switch load {
        case .staging: .staging
        case .declined(let reason): .declined(reason)
        case .batchByBatch, .stagedWithTheRun, .copied, .published: .batchByBatch
        }
    }

    /// Moves the load to `next`, refusing a move its lifecycle does not have: batch by batch (or
    /// declined, or staged with the run once it begins) → staging → copied in the open transaction → published once that commits, or
    /// staging again when it is rolled back; batch by batch → declined, with why.
    func moveLoad(to next: PGLoad) throws(StoreError) {
        switch (load, next) {
        case (.batchByBatch, .staging), (.declined, .staging), (.batchByBatch, .declined), (.declined, .declined),
            (.batchByBatch, .stagedWithTheRun), (.stagedWithTheRun, .staging),
            (.staging, .copied), (.copied, .published), (.copied, .staging):
            load = next
        default:
            throw StoreError.schema("a PostgreSQL load cannot go from \(load) to \(next)")
        }
    }

    init(url: String, model: EntityModel, plan: LoadPlan = .batchByBatch, stopped: StopFlag? = nil) throws {
        self.model = model
        self.plan = plan
        self.layouts = EntityLayout.layouts(of: model)
        let joinTables = layouts.flatMap { $0.toMany.filter(\.hasJoinTable).map(\.joinTable) }
        self.sharedJoinTables = Set(Dictionary(grouping: joinTables, by: { $0 }).filter { $0.value.count > 1 }.keys)
        self.url = url
        let connection = try PGConnection(url: url, role: .writer, stopped: stopped)
        self.connection = connection
        // A joined job's store makes the work queue's tables with the model's, in one step.
        let modelSchema = PGStore.schema(of: model)
        let schema = modelSchema + (plan.isJoined ? PGStore.joinSchema(of: model) : [])
        let tables = Set(layouts.map(\.table))
        let step = try PGStore.applySchema(schema, on: connection) { catalog in
            // A database whose tables disagree with the pipeline is refused before anything is written.
            let conflicts = try PGStore.schemaConflicts(model, catalog, connection)
            if !conflicts.isEmpty {
                throw StoreError.conflict(
                    "the database's tables disagree with the pipeline; nothing was written:\n  " + conflicts.joined(separator: "\n  "))
            }
        }
        let existed = !step.before.tables.isDisjoint(with: tables)
        // What a reader of the log is told was migrated: the pipeline's tables, not the queue's.
        let applied = step.applied.filter(Set(modelSchema).contains)
        migration = existed ? applied : []
        self.stopped = stopped
    }

    // MARK: - Schema

    /// The PostgreSQL column type that stores `type`.
    static func columnType(_ type: AttributeType) -> String {
        switch type {
        case .integer: "bigint"
        case .double: "double precision"
        case .decimal: "numeric"
        case .string: "text"
        case .bool: "boolean"
        case .date(.pattern(let pattern, _)) where DatePattern(pattern)?.hasTime == false: "date"
        case .date: "timestamptz"
        case .json: "jsonb"
        }
    }

    static func quote(_ identifier: String) -> String { "\"\(identifier)\"" }

    // MARK: - Lookups

    func lookup(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef] {
        if isStaging { return [:] }
        return try lookup(entity, keys, on: connection)
    }

    /// The reader connection, opened by the first lookup.
    private func readerConnection() throws -> PGConnection {
        try readerLock.withLock {
            if let reader { return reader }
            let made = try PGConnection(url: url, role: .reader, stopped: stopped)
            reader = made
            return made
        }
    }

    /// On the reader connection, which sees committed rows only.
    func lookupCommitted(_ entity: Int, _ keys: some Collection<IdentityKey>) throws -> [IdentityKey: StoredRef]? {
        // The reader would miss what the held transaction wrote: the writer looks them up.
        if owner == .caller { return nil }
        return try lookup(entity, keys, on: try readerConnection())
    }

    private func lookup(_ entity: Int, _ keys: some Collection<IdentityKey>, on connection: PGConnection) throws -> [IdentityKey: StoredRef]
    {
        let layout = layouts[entity]
        let keys = Array(keys)
        guard !keys.isEmpty, !layout.identitySlots.isEmpty else { return [:] }
        // The keys go in as arrays, one per identity column; the rows found come back as their
        // positions in those arrays, so no value is parsed back.
        let k = PGStore.keyArrays(layout, keys, firstParameter: 1)
        let sql =
            "SELECT k.i FROM unnest(\(k.unnest)) WITH ORDINALITY AS k(\(k.names), i) JOIN \(PGStore.quote(layout.table)) AS t ON \(k.on)"
        var found: [IdentityKey: StoredRef] = [:]
        for row in try connection.execute(sql, k.parameters) {
            if let text = row[0], let i = Int(text), keys.indices.contains(i - 1) { found[keys[i - 1]] = .found }
        }
        return found
    }

    /// `keys` of `layout`'s entity as `unnest` arguments (one `$n::type[]` per identity column,
    /// from `$firstParameter`), their aliases `k0, k1, …` (`names`), the condition matching them
    /// to the table aliased `t` (`on`, against the unnest aliased `k`), and the array parameters.
    static func keyArrays(
        _ layout: EntityLayout, _ keys: [IdentityKey], firstParameter: Int
    ) -> (unnest: String, names: String, on: String, parameters: [String?]) {
        let columns = layout.identitySlots.map { layout.columns[$0] }
        let names = columns.indices.map { "k\($0)" }
        let unnest = columns.enumerated().map { "$\($0 + firstParameter)::\(columnType($1.type))[]" }.joined(separator: ", ")
        let on = zip(columns, names).map { "t.\(quote($0.name)) = k.\($1)" }.joined(separator: " AND ")
        let parameters = columns.indices.map { k in arrayLiteral(keys.map { $0.values[safe: k] ?? .null }) }
        return (unnest, names.joined(separator: ", "), on, parameters)
    }

    // MARK: - Writes

    /// A single run's batch is written under a savepoint (two round trips; a subtransaction is
    /// cheap here): when it fails, only its work is undone, and the writer stage keeps no batch
    /// to redo (``undoesBatchesAlone``). A joined job's store writes its own way
    /// (``PGJoinedStore``).
    func write(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        if let staging, isStaging { return try staging.write(batch, then: then) }
        try writeIsolated(batch, then: then)
    }

    var undoesBatchesAlone: Bool { !isStaging }

    /// ``write(_:then:)`` under a savepoint: when it fails, only this batch's work is undone and
    /// the transaction stays open (a statement that failed aborts it up to the savepoint).
    func writeIsolated(_ batch: ResolvedBatch, then: (WriteResult) throws -> Void) throws {
        if let staging, isStaging { return try staging.writeIsolated(batch, then: then) }
        try begin()
        let stagedBefore = stagedInTransaction.count
        do {
            try connection.inSavepoint("ingot_isolated") {
                var result = WriteResult()
                // A row or link this batch took for new is there after all (another writer made
                // it since the lookup): the batch again, the careful way.
                try connection.optimistically(
                    "ingot_direct", { try writeEntities(of: batch, direct: true) },
                    fallingBackWhen: { PGStore.isUniqueViolation($0) },
                    carefully: {
                        forgetStaging(after: stagedBefore)
                        try writeEntities(of: batch, direct: false)
                    })
                result.unchanged = lastUnchanged
                try then(result)
            }
        } catch {
            forgetStaging(after: stagedBefore)
            throw error
        }
    }

    /// SQLSTATE `unique_violation`.
    static let uniqueViolation = "23505"
    /// Whether `error` is a `unique_violation`: another writer made a row since the lookup.
    static func isUniqueViolation(_ error: any Error) -> Bool { (error as? StoreError)?.sqlState == uniqueViolation }
    /// SQLSTATE `deadlock_detected`: the server aborted this transaction to break a cycle of waits.
    static let deadlockDetected = "40P01"
    /// `undefined_table`: a table dropped by another transaction since a statement named it.
    static let undefinedTable = "42P01"
    /// `lock_not_available`: a lock not granted within the transaction's `lock_timeout`.
    static let lockNotAvailable = "55P03"

    /// Writes each entity's rows, then its links. `direct`: the rows the lookup did not find,
    /// and the links of those new owners, are copied straight into their tables (`COPY`, no
    /// staging table, no `ON CONFLICT`) — a batch that meets a row or link already there fails
    /// with a unique violation, and ``writeIsolated(_:then:)`` writes it again with `direct`
    /// off.
    func writeEntities(of batch: ResolvedBatch, direct: Bool) throws {
        lastUnchanged = Array(repeating: [], count: layouts.count)
        for (entity, layout) in layouts.enumerated() {
            // Rows copied straight in are written from the folded storage: no values of theirs made.
            let rows = direct ? batch.rows(of: entity, valuesWhere: { $0 != nil }) : batch.rows(of: entity)
            guard !rows.isEmpty else { continue }
            do {
                var changed = try writeRows(rows, layout, direct: direct ? batch.storage(of: entity) : nil)
                for (k, toMany) in layout.toMany.enumerated() where !toMany.isForeignKey {
                    if toMany.isOwned {
                        changed.formUnion(try deleteOwned(rows, k, toMany, owner: entity))
                    } else {
                        let direct = direct && !sharedJoinTables.contains(toMany.joinTable)
                        changed.formUnion(try replaceLinks(rows, k, toMany, owner: entity, direct: direct))
                    }
                }
                lastUnchanged[entity] = rows.indices.filter { position in
                    let row = rows[position]
                    guard row.stored != nil, !changed.contains(position) else { return false }
                    let mentions = row.values.indices.contains { row.values[$0] != nil && !layout.identitySlots.contains($0) }
                    return mentions || row.links.contains { $0 != nil }
                }
            } catch var error as StoreError {
                error.entity = model.entities[entity].name
                throw error
            }
        }
        // A to-one's inverse, once every row (stubs included) is written.
        for (entity, layout) in layouts.enumerated() where layout.toMany.contains(where: \.isForeignKey) {
            let rows = batch.rows(of: entity)
            do {
                var changed: Set<Int> = []
                for (k, toMany) in layout.toMany.enumerated() where toMany.isForeignKey {
                    changed.formUnion(try writeForeignKeyLinks(rows, k, toMany, owner: entity))
                }
                lastUnchanged[entity].removeAll { changed.contains($0) }
            } catch var error as StoreError {
                error.entity = model.entities[entity].name
                throw error
            }
        }
    }

    /// Inserts the rows not stored (`direct`: copied straight into the table); updates the
    /// stored ones where a present column differs (`IS DISTINCT FROM`). Returns the positions in
    /// `rows` of the stored rows it changed.
    private func writeRows(
        _ rows: [ResolvedBatch.Row], _ layout: EntityLayout, direct: (rows: [EntityRow], storage: RowStorage)?
    ) throws -> Set<Int> {
        let table = PGStore.quote(layout.table)
        let all = layout.columns.map { PGStore.quote($0.name) }.joined(separator: ", ")
        let (inserts, insertCount, updates) = PGStore.copyText(of: rows, layout, direct: direct)
        let stageColumns = layout.columns.map { ($0.name, PGStore.columnType($0.type)) } + [("_present", "text"), ("_row", "bigint")]
        // Present columns only: `s` is a staging table with `_present`, `t` the entity's table.
        let set = layout.columns.indices.filter { !layout.identitySlots.contains($0) }.map { slot in
            let c = PGStore.quote(layout.columns[slot].name)
            return "\(c) = CASE WHEN substr(s._present, \(slot + 1), 1) = '1' THEN s.\(c) ELSE t.\(c) END"
        }
        let identity = layout.identitySlots.map { PGStore.quote(layout.columns[$0].name) }
        let update =
            set.isEmpty || identity.isEmpty
            ? nil
            : { (stage: String) in
                "UPDATE \(table) AS t SET \(set.joined(separator: ", ")) FROM \(stage) AS s WHERE "
                    + identity.map { "t.\($0) = s.\($0)" }.joined(separator: " AND ") + "; "
            }
        if !inserts.isEmpty, direct != nil {
            try connection.copy("COPY \(table) (\(all)) FROM STDIN", data: inserts)
        } else if !inserts.isEmpty {
            let stage = try staging("_ingot_new_\(layout.table)", stageColumns)
            try connection.copy("COPY \(stage) (\(all), \"_present\") FROM STDIN", data: inserts)
            if identity.isEmpty {
                // One round trip for the statement and the staging table's reset.
                try connection.execute("INSERT INTO \(table) (\(all)) SELECT \(all) FROM \(stage); TRUNCATE \(stage)")
            } else {
                // Another writer (another pipeline on the same tables) may have created some of
                // these rows since they were looked up: they are not inserted twice (no
                // duplicate-key failure) but updated with this batch's present keys, as a row
                // found by the lookup would be — the later commit wins, key by key.
                let inserted = try connection.changes(
                    "INSERT INTO \(table) (\(all)) SELECT \(all) FROM \(stage) ON CONFLICT (\(identity.joined(separator: ", "))) DO NOTHING"
                )
                try connection.execute((inserted < insertCount ? update?(stage) ?? "" : "") + "TRUNCATE \(stage)")
            }
        }
        guard !updates.isEmpty else { return [] }
        let stage = try staging("_ingot_old_\(layout.table)", stageColumns)
        try connection.copy("COPY \(stage) (\(all), \"_present\", \"_row\") FROM STDIN", data: updates)
        guard let update = update?(stage) else {
            try connection.execute("TRUNCATE \(stage)")
            return []
        }
        // Only rows where a present column differs are written (and returned).
        let differs = layout.columns.indices.filter { !layout.identitySlots.contains($0) }.map { slot in
            let c = PGStore.quote(layout.columns[slot].name)
            return "(substr(s._present, \(slot + 1), 1) = '1' AND t.\(c) IS DISTINCT FROM s.\(c))"
        }
        let changed = try connection.execute(
            String(update.dropLast(2)) + " AND (\(differs.joined(separator: " OR "))) RETURNING s._row")
        try connection.execute("TRUNCATE \(stage)")
        return Set(changed.compactMap { ($0.first ?? nil).flatMap { Int($0) } })
    }

    /// The `COPY` text of ``writeRows(_:_:direct:)``'s rows: the rows to insert (straight from
    /// the folded storage when `direct`, else with their `_present` digits) and how many, and the
    /// stored rows to update, with their `_present` digits and position.
    private static func copyText(
        of rows: [ResolvedBatch.Row], _ layout: EntityLayout, direct: (rows: [EntityRow], storage: RowStorage)?
    ) -> (inserts: [UInt8], count: Int, updates: [UInt8]) {
        var inserts: [UInt8] = []
        var insertCount = 0
        var updates: [UInt8] = []
        for (position, row) in rows.enumerated() {
            if row.stored == nil, let direct {
                PGStore.appendCopyFields(direct.storage, direct.rows[position], columns: layout.columns.count, to: &inserts)
                inserts.append(UInt8(ascii: "\n"))
                insertCount += 1
                continue
            }
            // `_present`: one digit per column, 1 where the records gave it.
            func appendPresent(to out: inout [UInt8]) {
                out.append(UInt8(ascii: "\t"))
                for value in row.values { out.append(value == nil ? UInt8(ascii: "0") : UInt8(ascii: "1")) }
            }
            if row.stored == nil {
                PGStore.appendCopyFields(row.values, to: &inserts)
                appendPresent(to: &inserts)
                inserts.append(UInt8(ascii: "\n"))
                insertCount += 1
            } else {
                PGStore.appendCopyFields(row.values, to: &updates)
                appendPresent(to: &updates)
                updates.append(UInt8(ascii: "\t"))
                PGStore.appendDecimal(Int64(position), to: &updates)
                updates.append(UInt8(ascii: "\n"))
            }
        }
        return (inserts, insertCount, updates)
    }

    /// The columns of a join table and their types: the owner's identity, the target's, and the
    /// position of an ordered relationship. For the schema and the staging tables alike.
    static func joinColumns(_ toMany: EntityLayout.ToMany, owner: Int, model: EntityModel) -> [(name: String, type: String)] {
        let source = model.entities[owner].identityAttributes.map { columnType($0.type) }
        let target = model.entities[toMany.target].identityAttributes.map { columnType($0.type) }
        return Array(zip(toMany.sourceColumns, source)) + Array(zip(toMany.targetColumns, target))
            + (toMany.isOrdered ? [("position", "bigint")] : [])
    }

    /// A temporary table `name` with `columns`, made once per connection.
    func staging(_ name: String, _ columns: [(name: String, type: String)]) throws -> String {
        let quoted = PGStore.quote(name)
        if staged.insert(name).inserted {
            let defs = columns.map { "\(PGStore.quote($0.name)) \($0.type)" }.joined(separator: ", ")
            try connection.execute("CREATE TEMP TABLE IF NOT EXISTS \(quoted) (\(defs))")
            if inTransaction { stagedInTransaction.append(name) }
        }
        return quoted
    }

    // MARK: - Transactions

    func begin() throws {
        guard !inTransaction else { return }
        try connection.execute(owner == .caller ? "SAVEPOINT ingot_held" : "BEGIN")
        inTransaction = true
        transactionNumber += 1
    }

    var hasUncommittedBatches: Bool { isStaging ? staging?.hasUncommittedBatches ?? false : inTransaction }

    @discardableResult func commit() throws -> Bool {
        let written = hasUncommittedBatches
        if let staging, isStaging {
            // The staging file first, then the run's progress here (PGStaging, "Resume").
            guard let progress = try staging.commit() else { return written }
            try begin()
            try writeProgress(progress)
            try commitTransaction()
            return written
        }
        try commitTransaction()
        // The copy is in the tables once its transaction committed; its file goes when the store
        // closes (PGStaging, "Resume").
        if case .copied(let copied) = load {
            copied.published = true
            load = .published(copied)
            try buildForeignKeyIndexes()
        }
        return written
    }

    /// Commits this connection's open transaction, if any.
    func commitTransaction() throws {
        guard inTransaction else { return }
        inTransaction = false
        stagedInTransaction = []
        try connection.execute(owner == .caller ? "RELEASE SAVEPOINT ingot_held" : "COMMIT")
    }

    func rollback() throws {
        // A copy rolled back stages again: its file and its key stay, and a resume copies it.
        if case .copied(let copied) = load { load = .staging(copied) }
        if let staging, isStaging {
            // A copy that failed half-way left this connection's transaction open (and aborted).
            defer { try? rollbackTransaction() }
            return staging.rollback()
        }
        try rollbackTransaction()
    }

    /// Rolls back this connection's open transaction, if any.
    func rollbackTransaction() throws {
        guard inTransaction else { return }
        inTransaction = false
        forgetStaging(after: 0)
        try connection.execute(owner == .caller ? "ROLLBACK TO SAVEPOINT ingot_held; RELEASE SAVEPOINT ingot_held" : "ROLLBACK")
    }

    /// The staging tables made in the open transaction after the first `count` are gone (rolled back).
    func forgetStaging(after count: Int) {
        for name in stagedInTransaction.dropFirst(count) { staged.remove(name) }
        stagedInTransaction.removeSubrange(min(count, stagedInTransaction.count)...)
    }

    /// Commits, and lets go of the pipeline's run lock at once (the connections end when the
    /// store is released): a library process opens one store per ingest.
    func close() throws {
        // A held transaction outlives the runs it is handed to: only its end closes the store.
        if owner == .caller {
            try commit()
            return
        }
        try closeSession()
    }

    /// Commits, removes what a staged load left, and lets go of the session's advisory locks.
    func closeSession() throws {
        defer {
            staging?.close()
            load = .batchByBatch  // closed: the store is not used any more
            if case .staging(let resumed) = resumedStaging { resumed.close() }
            resumedStaging = nil
        }
        try commit()
        if case .published(let staging) = load {
            // The copy committed: the file goes, then the key that named it (PGStaging).
            staging.close()
            load = .batchByBatch
            try forgetStagingKey(staging.key)
        }
        _ = try connection.execute("SELECT pg_advisory_unlock_all()")
    }

    /// Ends both connections' sockets (``PGConnection/interrupt()``).
    func interrupt() {
        folds.interrupt()
        connection.interrupt()
        readerLock.withLock { reader?.interrupt() }
    }

    /// A session advisory lock per pipeline on the writer connection: released when the run's
    /// connection ends, even after `kill -9` (the server drops the session). The holder's run id
    /// is named from `_ingot_runs`.
    /// Shared by the jobs of a joined run (`--join`): they exclude single runs of the pipeline,
    /// and single runs exclude them.
    func lockRuns(of pipeline: String, timeout: Double, shared: Bool) throws {
        let key = "ingot run: " + pipeline
        let deadline = Date().addingTimeInterval(max(0, timeout))
        let function = shared ? "pg_try_advisory_lock_shared" : "pg_try_advisory_lock"
        while true {
            if try connection.execute("SELECT \(function)(hashtext($1))", [key]).first?[0] == "t" { return }
            if Date() >= deadline { break }
            Thread.sleep(forTimeInterval: 0.1)
        }
        let holder = try? connection.execute(
            "SELECT run_id FROM _ingot_runs WHERE pipeline = $1 AND status = 'running' ORDER BY started_at DESC LIMIT 1", [pipeline])
        throw RunLockError(
            path: connection.shown, holder: holder?.first?[0].map { "run_id=\($0)" }, isHeld: true,
            message: "another run of pipeline '\(pipeline)' holds this database (waited \(timeout) s)")
    }
}
