import Foundation

/// A joined job's batches written to the run's own tables, merged once when the run ends
/// (docs/scale-out.md, "Writes deferred to the run's end").
///
/// Written batch by batch with positions (PGStore+Join.swift), every batch of every job is an
/// upsert into the entities' tables: a person re-sent by forty pages is a new row version forty
/// times, and the server's work per row grew with the number of jobs. Deferred, a batch's folded
/// rows — their values and positions, exactly what the positional upsert would stage — and its
/// link sets are copied into tables of the run without indexes (`_ingot_run<join>_e<entity>`,
/// `…_l<k>` for the links of relationship `k`'s sets; which owners gave a set, and at what
/// position, is the rows' own slot for it), in the
/// transaction that marks its units done. Once every unit is done, the jobs fold each table once,
/// part by part — per identity, each column the value at its largest position, the positions
/// slot by slot the largest — and write the result with the same positional rules (new rows
/// inserted, stored ones upserted, sets replaced where they are the newest), so the argument of
/// "Later pages win, across jobs" holds unchanged: the merge offers, for each column and set,
/// the value of the largest unit that mentioned it.
///
/// The run's tables are ordinary (logged) tables: a unit marked done has its rows there, through
/// a crash of the job or of the server. They are made when a deferring job joins (under the
/// join's row lock) and dropped by the transaction that finishes the run. Each is partitioned
/// by hash of its identity (an owner's, for sets) into ``parts`` parts, which the jobs merge
/// side by side once every unit is done (``PGStore/mergeDeferredParts(_:)``): a part holds every
/// row of its identities, so two parts never write one row.
struct DeferredTables {
    let ordinal: Int64
    /// The parts the run's rows are merged in, by several jobs at once.
    static let parts = 8

    /// Entity `entity`'s folded rows: its columns and `_ingot_pos` (part `part` of them).
    func rows(_ entity: Int, part: Int? = nil) -> String { name("e\(entity)", part) }
    /// The owners given a set of relationship `k` of `entity`, with the set's position: a table
    /// of runs deferred by earlier versions, dropped with their run (the owners are read from
    /// the rows' positions now).
    func legacyOwners(_ entity: Int, _ k: Int) -> String { name("e\(entity)_o\(k)", nil) }
    /// The links of those sets: the join table's columns and the set's position (`_pos`).
    func links(_ entity: Int, _ k: Int, part: Int? = nil) -> String { name("e\(entity)_l\(k)", part) }

    /// The first entity's rows table, unquoted: whether the run's tables exist.
    var marker: String { plainName("e0", nil) }

    private func name(_ table: String, _ part: Int?) -> String { PGStore.quote(plainName(table, part)) }

    private func plainName(_ table: String, _ part: Int?) -> String {
        "_ingot_run\(ordinal)_\(table)" + (part.map { "_p\($0)" } ?? "")
    }

    /// Whether a model's batches can be deferred: every entity with an identity, every to-many
    /// set in a join table of its own (owned rows and a to-one's inverse are written batch by
    /// batch; a staged load refuses them too).
    static func fit(_ layouts: [EntityLayout]) -> Bool {
        layouts.allSatisfy { !$0.identitySlots.isEmpty && $0.toMany.allSatisfy(\.hasJoinTable) }
    }

    /// Every table of the run, as `(name, columns, key)`: `key` the columns it is partitioned by.
    func tables(
        _ layouts: [EntityLayout], model: EntityModel
    ) -> [(name: String, columns: [(name: String, type: String)], key: [String])] {
        var tables: [(String, [(name: String, type: String)], [String])] = []
        for (entity, layout) in layouts.enumerated() {
            tables.append((rows(entity), PGStore.joinedColumns(layout), layout.identitySlots.map { layout.columns[$0].name }))
            for (k, toMany) in layout.toMany.enumerated() {
                let types = PGStore.joinColumns(toMany, owner: entity, model: model)
                tables.append((links(entity, k), types + [("_pos", "bigint")], toMany.sourceColumns))
            }
        }
        return tables
    }

    /// The statements that make the run's tables (when a deferring job joins), and their
    /// indexes. The run's tables are left out of autovacuum: they are written once, read once by
    /// the merge and dropped with the run, and autovacuum's passes over them cost the server
    /// while the jobs copy in (four jobs 10.11 s against 9.52 s, docs/scale-out.md). Their
    /// indexes: the run's tables mirror each index of the entities' tables that a value can be
    /// too long for (a key of `text` or `numeric`: "index row size … exceeds btree maximum"), so
    /// that such a value is refused when its batch is copied — rejected with its record, as batch
    /// by batch — never at the run's end. Keys of fixed width need none.
    func schema(_ layouts: [EntityLayout], model: EntityModel) -> [String] {
        var statements: [String] = []
        for (name, columns, key) in tables(layouts, model: model) {
            let definitions = columns.map { "\(PGStore.quote($0.name)) \($0.type)" }.joined(separator: ", ")
            statements.append(
                "CREATE TABLE IF NOT EXISTS \(name) (\(definitions)) PARTITION BY HASH (\(key.map(PGStore.quote).joined(separator: ", ")))")
            for part in 0..<Self.parts {
                let partition = PGStore.quote(String(name.dropFirst().dropLast()) + "_p\(part)")
                statements.append(
                    "CREATE TABLE IF NOT EXISTS \(partition) PARTITION OF \(name) FOR VALUES WITH (MODULUS \(Self.parts), REMAINDER \(part))"
                        + " WITH (autovacuum_enabled = false)"
                )
            }
        }
        func index(_ table: String, _ suffix: String, _ columns: [String], types: [(name: String, type: String)]) {
            let widths = columns.compactMap { column in types.first { $0.name == column }?.type }
            guard widths.contains(where: { $0 == "text" || $0 == "numeric" }) else { return }
            let name = PGStore.quote(String(table.dropFirst().dropLast()) + suffix)
            statements.append("CREATE INDEX IF NOT EXISTS \(name) ON \(table) (\(columns.map(PGStore.quote).joined(separator: ", ")))")
        }
        for (entity, layout) in layouts.enumerated() {
            let types = PGStore.joinedColumns(layout)
            index(rows(entity), "_i", layout.identitySlots.map { layout.columns[$0].name }, types: types)
            for (n, foreign) in layout.foreignKeyIndexes(of: layouts).filter({ $0.table == layout.table }).enumerated() {
                index(rows(entity), "_f\(n)", foreign.columns, types: types)
            }
            for (k, toMany) in layout.toMany.enumerated() {
                let types = PGStore.joinColumns(toMany, owner: entity, model: model)
                index(links(entity, k), "_i", toMany.sourceColumns + toMany.targetColumns, types: types)
            }
        }
        return statements
    }
}

extension PGStore {
    /// A joined job writes its batches deferred: its plan says so (a first load from local pages,
    /// ``LoadPlan/defersJoinedBatches``) and the model fits (``DeferredTables/fit(_:)``).
    var defersJoinedBatches: Bool { plan.defersJoinedBatches && DeferredTables.fit(layouts) }

    /// A joined batch's rows and link sets copied into the run's tables (``DeferredTables``), in
    /// the open transaction that marked its units done. Nothing reaches the entities' tables, so
    /// nothing is counted yet: the merge counts what it writes.
    func writeDeferred(_ batch: ResolvedBatch, _ join: JoinContext, fallback: Int) throws -> [EntityCounts] {
        let tables = DeferredTables(ordinal: join.ordinal)
        var seen: Set<IdentityKey> = []
        for (entity, layout) in layouts.enumerated() {
            let rows = batch.rows(of: entity)
            guard !rows.isEmpty else { continue }
            if let data = PGStore.binaryJoinedRows(rows, layout, join, fallback: fallback) {
                try connection.copy("COPY \(tables.rows(entity)) FROM STDIN (FORMAT binary)", data: data)
            } else {
                var data: [UInt8] = []
                for row in rows { PGStore.appendJoinedRow(row, layout, join, fallback: fallback, to: &data) }
                try connection.copy("COPY \(tables.rows(entity)) FROM STDIN", data: data)
            }
            for (k, toMany) in layout.toMany.enumerated() {
                var links: [UInt8] = []
                for row in rows {
                    guard let identity = row.identity, let targets = row.links[k],
                        let position = WritePositions(row, layout, ordinal: join.ordinal, fallback: fallback).sets[k]
                    else { continue }
                    // A target once per set, at its first place (as the positional replace keeps it).
                    seen.removeAll(keepingCapacity: true)
                    for (index, target) in targets.enumerated() where seen.insert(target).inserted {
                        PGStore.appendCopyFields(identity, first: true, to: &links)
                        PGStore.appendCopyFields(target, first: false, to: &links)
                        if toMany.isOrdered {
                            links.append(UInt8(ascii: "\t"))
                            PGStore.appendDecimal(Int64(index), to: &links)
                        }
                        links.append(UInt8(ascii: "\t"))
                        PGStore.appendDecimal(position, to: &links)
                        links.append(UInt8(ascii: "\n"))
                    }
                }
                if !links.isEmpty { try connection.copy("COPY \(tables.links(entity, k)) FROM STDIN", data: links) }
            }
        }
        return [EntityCounts](repeating: EntityCounts(), count: layouts.count)
    }

    /// A batch's rows of one entity in binary `COPY` form — their values, then their positions —
    /// or `nil` when a value does not fit its column's binary form (the text form then goes:
    /// the server reads and refuses it as it would batch by batch). Binary, the server does not
    /// parse each row's text and position array: the person rows' text was most of the copies'
    /// time at two jobs (docs/scale-out.md, "Measured").
    static func binaryJoinedRows(
        _ rows: [ResolvedBatch.Row], _ layout: EntityLayout, _ join: JoinContext, fallback: Int
    ) -> [UInt8]? {
        let kinds = layout.columns.map { PGBinaryCopy.Kind(sqlType: columnType($0.type)) ?? .text }
        var out = PGBinaryCopy.header
        do throws(PGBinaryCopy.Unfit) {
            for row in rows {
                PGBinaryCopy.appendRowStart(fields: kinds.count + 1, to: &out)
                for (slot, kind) in kinds.enumerated() {
                    if let value = row.values[safe: slot] ?? nil {
                        try PGBinaryCopy.append(value, kind, to: &out)
                    } else {
                        PGBinaryCopy.appendNull(to: &out)
                    }
                }
                PGBinaryCopy.appendBigintArray(positions(row, layout, join, fallback: fallback), to: &out)
            }
        } catch {
            return nil
        }
        return out + PGBinaryCopy.trailer
    }

    /// Whether the run's deferred tables exist (a job of the run deferred), as committed when
    /// the statement starts (``PGConnection/tableExists(_:)``: the job that finishes the run
    /// drops them while others may be between two parts).
    func hasDeferredTables(_ join: JoinContext) throws -> Bool {
        try connection.tableExists(DeferredTables(ordinal: join.ordinal).marker)
    }

    /// Merges the parts of the run's deferred rows no job merged or is merging, each in a
    /// transaction of its own under an advisory lock of the part, once every unit is done and
    /// the source ended (before that, nothing). Returns what it wrote, counted as this job's.
    ///
    /// Every job that ends its part this way merges parts side by side with the others; a part
    /// merged is recorded in `_ingot_join_merged` with its counts (the run's end sums them), and a
    /// part whose job died is merged by the next (its transaction, lock included, went with it).
    func mergeDeferredParts(_ join: JoinContext) throws -> (counts: RunCounters, seconds: Double)? {
        guard try hasDeferredTables(join) else { return nil }
        let ready = try connection.execute(
            """
            SELECT j.end_seq IS NOT NULL AND j.status = 'running' AND NOT EXISTS (SELECT 1 FROM _ingot_units u WHERE u.name = j.name AND u.status <> 'done')
              FROM _ingot_joins AS j WHERE j.name = $1
            """, [join.name])
        guard ready.first?[0] == "t" else { return nil }
        let started = Date()
        try dropForeignKeyIndexesForMerge(join)
        var merged = RunCounters()
        for part in 0..<DeferredTables.parts {
            try begin()
            do {
                // The part's lock first; then whether the run's tables are still there: the job
                // that finished the run may have merged the rest and dropped them since this
                // loop began (its transaction held each part's lock until it committed). The
                // check reads the catalog as committed now, not this backend's cache of it.
                guard try lockDeferredPart(join, part, waiting: false) else {
                    try commit()
                    continue
                }
                guard try hasDeferredTables(join) else {
                    try commit()
                    break
                }
                if try !deferredPartMerged(join, part) { merged.add(try mergeDeferredPart(join, part: part)) }
                try commit()
            } catch let error as StoreError where error.sqlState == PGStore.undefinedTable {
                // Defence in depth: the tables cannot go while this part's lock is held, but if
                // they are gone the run was finished by another job, which merged what was
                // left. Nothing of this part was written.
                try? rollback()
                break
            } catch {
                try? rollback()
                throw error
            }
        }
        return (merged, Date().timeIntervalSince(started))
    }

    /// In the transaction that finishes the run: merges any part still unmerged (waiting for a
    /// job merging one), sums every part's counts, and drops the run's tables. `nil` when no
    /// job of the run deferred; else the run's merge counts, and what this call merged itself.
    func finishDeferred(_ join: JoinContext) throws -> (total: RunCounters, merged: RunCounters)? {
        guard try hasDeferredTables(join) else { return nil }
        // The schema's lock before any row of the merge: this transaction makes the foreign
        // keys' indexes again at its end (``createIndexes(_:)``), and a job starting meanwhile
        // that finds one missing waits here rather than make it too. Taken later, it would wait
        // for that job while the job's index waits for this transaction's rows: a deadlock.
        try connection.execute(PGStore.schemaLock)
        var counts = RunCounters()
        var mine = RunCounters()
        for part in 0..<DeferredTables.parts {
            _ = try lockDeferredPart(join, part, waiting: true)
            if try !deferredPartMerged(join, part) { mine.add(try mergeDeferredPart(join, part: part)) }
        }
        for row in try connection.execute(
            "SELECT inserted, updated, entity_counts FROM _ingot_join_merged WHERE name = $1", [join.name])
        {
            var c = RunCounters()
            c.inserted = row[0].flatMap { Int($0) } ?? 0
            c.updated = row[1].flatMap { Int($0) } ?? 0
            c.readEntities(fromJSON: row[2])
            counts.add(c)
        }
        try connection.execute("DELETE FROM _ingot_join_merged WHERE name = $1", [join.name])
        // The foreign keys' indexes a merging job dropped, built once now that every row is in.
        try createIndexes(layouts.flatMap { $0.foreignKeyIndexes(of: layouts) })
        try dropDeferredTables(ordinal: join.ordinal)
        return (counts, mine)
    }

    /// Drops the run's own tables of join `ordinal` (its deferred rows): its end merged them, or
    /// a single run overtook it.
    func dropDeferredTables(ordinal: Int64) throws {
        let tables = DeferredTables(ordinal: ordinal)
        for table in tables.tables(layouts, model: model) {
            try connection.execute("DROP TABLE IF EXISTS \(table.name)")
        }
        for (entity, layout) in layouts.enumerated() {
            for k in layout.toMany.indices { try connection.execute("DROP TABLE IF EXISTS \(tables.legacyOwners(entity, k))") }
        }
    }

    /// Before this job merges parts: each foreign key's index (`person_dogs_dog_id`) on a table
    /// that holds fewer rows than the run's tables will merge into it — a first load's — is
    /// dropped, in a short transaction of its own, and the transaction that finishes the run
    /// builds it again (``finishDeferred(_:)``): one sorted build, where the merge inserted an
    /// entry per row, as a single job's staged copy does. No statement of the merge reads these
    /// indexes. A drop that would wait for another job's merge (its part holds the table) is
    /// left out: the index stays, and costs time only. Jobs killed before the run finishes leave
    /// it missing until a job finishes the run, or the next run's schema makes it again.
    private func dropForeignKeyIndexesForMerge(_ join: JoinContext) throws {
        let tables = DeferredTables(ordinal: join.ordinal)
        // An entity's indexes are on its own table (a to-one's columns) or its sets' join tables.
        let indexes = layouts.enumerated().flatMap { entity, layout in
            layout.foreignKeyIndexes(of: layouts).compactMap {
                index -> (index: ForeignKeyIndex, merged: String)? in
                if index.table == layout.table { return (index, tables.rows(entity)) }
                return layout.toMany.firstIndex { $0.joinTable == index.table }.map { (index, tables.links(entity, $0)) }
            }
        }
        for (index, merged) in indexes {
            let target = PGStore.quote(index.table)
            let smaller = try connection.execute(
                """
                WITH n AS (SELECT count(*) AS n FROM \(merged))
                SELECT (SELECT count(*) FROM (SELECT 1 FROM \(target) LIMIT (SELECT n FROM n)) AS t) < (SELECT n FROM n)
                """)
            guard smaller.first?[0] == "t" else { continue }
            try begin()
            do {
                try connection.execute("SET LOCAL lock_timeout = '200ms'")
                try connection.execute("DROP INDEX IF EXISTS \(PGStore.quote(index.name))")
                try commit()
            } catch let error as StoreError where error.sqlState == PGStore.lockNotAvailable {
                try? rollback()
            } catch {
                try? rollback()
                throw error
            }
        }
    }

    /// Takes part `part`'s advisory lock for the open transaction (`waiting`: until the job that
    /// holds it ends its transaction); whether it has it.
    private func lockDeferredPart(_ join: JoinContext, _ part: Int, waiting: Bool) throws -> Bool {
        let keys = [String(Int32(truncatingIfNeeded: join.ordinal)), String(part)]
        guard !waiting else {
            try connection.execute("SELECT pg_advisory_xact_lock($1::int, $2::int)", keys)
            return true
        }
        return try connection.execute("SELECT pg_try_advisory_xact_lock($1::int, $2::int)", keys).first?[0] == "t"
    }

    /// Whether part `part` is merged, as committed when this statement starts (a statement of its
    /// own after the lock: one snapshot taken before the lock was granted would miss the merge
    /// of the job that held it).
    private func deferredPartMerged(_ join: JoinContext, _ part: Int) throws -> Bool {
        try connection.execute(
            "SELECT EXISTS (SELECT 1 FROM _ingot_join_merged WHERE name = $1 AND part = $2::int)", [join.name, String(part)]
        ).first?[0] == "t"
    }

    /// Part `part` of the run's deferred rows merged into the entities' tables, in the open
    /// transaction, and recorded merged with its counts.
    ///
    /// Every unit is done by then, and no other part holds these identities, so no other job
    /// writes these rows while it runs: the rows and sets of identities not stored yet go in
    /// with plain `INSERT`s, and only those stored before (an earlier run's, a stretch's, a
    /// job's that wrote with positions) take the positional upsert and link replacement.
    private func mergeDeferredPart(_ join: JoinContext, part: Int) throws -> RunCounters {
        let tables = DeferredTables(ordinal: join.ordinal)
        try connection.execute("SET LOCAL work_mem = '64MB'")
        var merged = RunCounters()
        for (entity, layout) in layouts.enumerated() {
            let counts = try mergeDeferredRows(entity, layout, tables, part: part, runsFirst: join.firstPosition)
            if counts != EntityCounts() { merged.entities[model.entities[entity].name] = counts }
            merged.inserted += counts.inserted
            merged.updated += counts.updated
        }
        // The sets once every owner's row holds its merged positions.
        for (entity, layout) in layouts.enumerated() {
            for (k, toMany) in layout.toMany.enumerated() where toMany.hasJoinTable {
                try mergeDeferredSets(entity, k, toMany, layout, tables, part: part)
            }
        }
        try connection.execute(
            "INSERT INTO _ingot_join_merged (name, part, inserted, updated, entity_counts) VALUES ($1, $2, $3, $4, $5)",
            [join.name, String(part), String(merged.inserted), String(merged.updated), merged.entitiesJSON])
        return merged
    }

    /// The staging table of the identities of `layout` a part's merge found stored (their rows
    /// upserted by position, their sets replaced by position).
    static func knownStage(_ layout: EntityLayout) -> String { "_ingot_known_\(layout.table)" }

    /// An entity's deferred rows, folded, written: those not stored inserted, the stored ones
    /// upserted by position. Leaves the identities that were stored in `_ingot_known_<table>`,
    /// for the sets.
    ///
    /// The fold takes each identity's latest row (largest `@` position) as it is when that row
    /// gave every column and set at that one position (a whole record, the usual case): no other
    /// row can then hold a larger position in any slot, so the full fold
    /// (``foldDeferred(_:from:where:)``, an ordered aggregate per column) would return that very
    /// row — only the other identities take it. The stored identities are found by probing the
    /// table's unique index (a hash join would read the whole table for each part).
    private func mergeDeferredRows(
        _ entity: Int, _ layout: EntityLayout, _ tables: DeferredTables, part: Int, runsFirst: Int64
    ) throws -> EntityCounts {
        let columns = PGStore.joinedColumns(layout)
        let all = columns.map { PGStore.quote($0.name) }.joined(separator: ", ")
        let identity = layout.identitySlots.map { layout.columns[$0].name }
        let identityTypes = identity.compactMap { name in columns.first { $0.name == name } }
        func match(_ a: String, _ b: String) -> String {
            identity.map { "\(a).\(PGStore.quote($0)) = \(b).\(PGStore.quote($0))" }.joined(separator: " AND ")
        }
        let idList = identity.map(PGStore.quote).joined(separator: ", ")
        let run = tables.rows(entity, part: part)
        let fresh = try staging("_ingot_up_\(layout.table)", columns)
        let stored = try staging("_ingot_ups_\(layout.table)", columns)
        let known = try staging(PGStore.knownStage(layout), identityTypes)
        let table = PGStore.quote(layout.table)
        let slots = PositionSlots(layout)
        let pos = PGStore.positionColumn
        let latest = "r.\(pos)[\(slots.touched)]"
        // Whole: every slot but the identity's (always NULL) at the row's `@` position.
        let whole = "cardinality(array_remove(r.\(pos), \(latest))) = \(layout.identitySlots.count)"
        let partial =
            "(\(identity.map { "r.\(PGStore.quote($0))" }.joined(separator: ", "))) IN (SELECT \(idList) FROM l WHERE NOT l._whole)"
        try connection.execute(
            """
            SET LOCAL enable_hashjoin = on;
            TRUNCATE \(known);
            WITH l AS MATERIALIZED (SELECT DISTINCT ON (\(idList)) r.*, \(whole) AS _whole FROM \(run) AS r ORDER BY \(idList), \(latest) DESC)
            INSERT INTO \(fresh) (\(all)) SELECT \(all) FROM l WHERE l._whole
              UNION ALL \(PGStore.foldDeferred(layout, from: "\(run) AS r", where: partial));
            SET LOCAL enable_hashjoin = off
            """)
        // The stored identities, and how many of them this run made and now gives something.
        let gives = PGStore.givesSomething("e", slots)
        let probed =
            try connection.execute(
                """
                WITH e AS (DELETE FROM \(fresh) AS s USING \(table) AS t WHERE \(match("t", "s"))
                    RETURNING s.*, t.\(pos)[\(slots.touched)] >= \(runsFirst) AS _ours),
                  k AS (INSERT INTO \(stored) (\(all)) SELECT \(all) FROM e)
                SELECT count(*), count(*) FILTER (WHERE e._ours AND \(gives)) FROM e
                """
            ).first.map { $0.map { $0.flatMap { Int($0) } ?? 0 } } ?? [0, 0]
        let counted = try connection.execute(
            """
            INSERT INTO \(known) SELECT \(idList) FROM \(stored);
            WITH i AS (INSERT INTO \(table) (\(all)) SELECT \(all) FROM \(fresh) RETURNING \(PGStore.positionColumn) AS p)
            SELECT count(*), count(*) FILTER (WHERE array_remove(p[1:\(slots.count - 1)], NULL) = '{}') FROM i
            """)
        try connection.execute("TRUNCATE \(fresh)")
        let numbers = counted.last.map { $0.map { $0.flatMap { Int($0) } ?? 0 } } ?? [0, 0]
        var counts = probed[0] > 0 ? try upsertStaged(stored, rows: 0, layout) : EntityCounts()
        counts.inserted += numbers[0]
        counts.stubs += numbers[1]
        // A stored row this run made (a stretch's, a batch's with positions: its latest position
        // is this run's) is not an update of the run: the run inserted it, as a single load
        // counts it.
        counts.updated -= probed[1]
        return counts
    }

    /// Relationship `k`'s deferred sets: per owner, the set at its largest position; an owner not
    /// stored before the merge has no links yet, and its set's links go in as they are (each set
    /// holds a target once, ``writeDeferred(_:_:fallback:)``); a stored owner's set replaces its
    /// links where its position is the owner's newest (``replaceStagedLinks``).
    private func mergeDeferredSets(
        _ entity: Int, _ k: Int, _ toMany: EntityLayout.ToMany, _ layout: EntityLayout, _ tables: DeferredTables, part: Int
    ) throws {
        let stages = try linkStages(toMany, owner: entity)
        let owner = toMany.sourceColumns.map(PGStore.quote)
        let types = PGStore.joinColumns(toMany, owner: entity, model: model)
        let linkColumns = types.map { "l.\(PGStore.quote($0.name))" }.joined(separator: ", ")
        let match = owner.map { "l.\($0) = o.\($0)" }.joined(separator: " AND ")
        let identity = layout.identitySlots.map { PGStore.quote(layout.columns[$0].name) }
        let identityList = identity.map { "r.\($0)" }.joined(separator: ", ")
        let stored =
            "EXISTS (SELECT 1 FROM \(PGStore.quote(PGStore.knownStage(layout))) AS x WHERE \(zip(owner, identity).map { "x.\($1) = o.\($0)" }.joined(separator: " AND ")))"
        // The owners given a set, each at its newest: the rows' slot for the set.
        let set = "r.\(PGStore.positionColumn)[\(PositionSlots(layout).link(k))]"
        // Hash joins (the session turns them off for staging-to-table joins, PGConnection): the
        // run's links have no index, and a nested loop over them is quadratic.
        try connection.execute(
            """
            SET LOCAL enable_hashjoin = on;
            INSERT INTO \(stages.owners) SELECT DISTINCT ON (\(identityList)) \(identityList), \(set) FROM \(tables.rows(entity, part: part)) AS r
              WHERE \(set) IS NOT NULL ORDER BY \(identityList), \(set) DESC;
            INSERT INTO \(PGStore.quote(toMany.joinTable)) (\(types.map { PGStore.quote($0.name) }.joined(separator: ", ")))
              SELECT \(linkColumns) FROM \(tables.links(entity, k, part: part)) AS l JOIN \(stages.owners) AS o ON \(match) AND l._pos = o._pos
              WHERE NOT \(stored) ORDER BY \(linkColumns);
            DELETE FROM \(stages.owners) AS o WHERE NOT \(stored);
            INSERT INTO \(stages.links) SELECT \(linkColumns)
              FROM \(tables.links(entity, k, part: part)) AS l JOIN \(stages.owners) AS o ON \(match) AND l._pos = o._pos;
            SET LOCAL enable_hashjoin = off
            """)
        try replaceStagedLinks(stages, hasLinks: true, k, toMany, owner: entity, layout: layout)
    }

    /// The `SELECT` that folds an entity's deferred rows (`from`, aliased `r`, those `where`
    /// says): one row per identity, each column the value at its largest position, each position
    /// slot the largest. A value without a position (`default:` and `const:` fill them, for rows
    /// the resolver inserts) loses to any value with one, and is kept where no unit mentioned the
    /// column — as the positional upsert inserts it and never lets it overwrite.
    static func foldDeferred(_ layout: EntityLayout, from table: String, where condition: String = "true") -> String {
        let pos = "r.\(positionColumn)"
        let slots = PositionSlots(layout)
        let identity = layout.identitySlots.map { "r.\(quote(layout.columns[$0].name))" }
        let columns = layout.columns.indices.map { slot -> String in
            let c = "r.\(quote(layout.columns[slot].name))"
            if layout.identitySlots.contains(slot) { return c }
            let k = slots.column(slot)
            return "(array_agg(\(c) ORDER BY \(pos)[\(k)] DESC NULLS LAST, \(c) IS NULL))[1]"
        }
        let positions = (1...slots.count).map { "max(\(pos)[\($0)])" }.joined(separator: ", ")
        return
            "SELECT \(columns.joined(separator: ", ")), ARRAY[\(positions)]::bigint[] FROM \(table) WHERE \(condition) GROUP BY \(identity.joined(separator: ", "))"
    }
}
