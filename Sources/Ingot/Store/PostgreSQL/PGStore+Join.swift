import Foundation

/// A job's part in a run shared by several jobs (`--join NAME`), as its store writes it.
struct JoinContext: Sendable {
    /// The join's name (`--join NAME`).
    var name: String
    /// This job's id (host, process, random suffix): who claimed a unit.
    var job: String
    /// The join's number in the database (`_ingot_joins.id`, increasing): a write's position is
    /// `ordinal << 43 | key` (``UnitOrder``: its unit and part), so any page of a later joined
    /// run wins over every page of an earlier one, and rows written by single runs (no position)
    /// lose to every page.
    var ordinal: Int64
    /// How this job writes its batches.
    var writes: JoinedWrites
    /// Where a page's records are (``SharedRunRequest/recordsPath``).
    var recordsPath = ""

    /// Units are committed in the run's order: each batch is written as a single run writes it.
    var inOrder: Bool { if case .inOrder = writes { true } else { false } }

    /// The position of a write of this run whose key (``UnitOrder``) is `key`.
    func position(_ key: Int) -> Int64 { UnitOrder.position(ordinal: ordinal, key: key) }
    /// The smallest position of this run.
    var firstPosition: Int64 { position(0) }
}

/// How a joined job writes its batches, decided when it joins (``PGSharedRun``) from the run and
/// the job's plan. It moves once: from ``positions(_:)`` direct to careful, when a row copied
/// straight in meets one another job made since the lookup.
enum JoinedWrites: Sendable, Equatable, CustomStringConvertible {
    /// Units committed in the run's order (``SharedRunRequest/commitsInOrder``): each batch
    /// written as a single run writes it, no positions needed; `marksTouched`: each also marks the
    /// rows it touched (``SharedRunRequest/marksTouchedRows``, for `write: replace`).
    case inOrder(marksTouched: Bool)
    /// Exchanged between the jobs through the run's parts, written once every unit is done
    /// (``LoadPlan/defersJoinedBatches``, PGStore+Exchange.swift).
    case deferred
    /// Into the entities' tables, with positions (below).
    case positions(Inserts)

    /// How a positional batch writes rows no job had at its lookup.
    enum Inserts: Sendable, Equatable {
        /// Copied straight in, under a savepoint.
        case direct
        /// Upserted with the rest, one statement per table in identity order: once one direct copy
        /// met a row another job made (the run shares rows), or a deadlock was written again.
        case careful
    }

    var description: String {
        switch self {
        case .inOrder(let marks): marks ? "in order, marking touched rows" : "in order"
        case .deferred: "deferred to the run's end"
        case .positions(.direct): "with positions, new rows copied straight in"
        case .positions(.careful): "with positions, new rows upserted"
        }
    }
}

/// Writes of a joined job: every row carries, per column, the position of the unit whose value it
/// holds (`_ingot_pos`, a `bigint[]`: one slot per column, per to-many set, and `@`), and a unit
/// overwrites a column only when its position is not older. Units are committed in any order by
/// several jobs; the result is the single job's (the argument is in docs/scale-out.md).
///
/// ```sql
/// INSERT INTO "person" AS t (…, "_ingot_pos") SELECT … FROM "_ingot_up_person"
/// ON CONFLICT ON CONSTRAINT "person_identity" DO UPDATE SET
///   "email" = CASE WHEN excluded._ingot_pos[5] >= coalesce(t._ingot_pos[5], 0) THEN excluded."email" ELSE t."email" END, …,
///   "_ingot_pos" = ARRAY[greatest(t._ingot_pos[1], excluded._ingot_pos[1]), …]
/// ```
///
/// The staged row's positions are NULL exactly for the columns its records did not mention:
/// presence travels in `excluded`, which `ON CONFLICT` can read. Slots follow the pipeline's
/// column order; when a pipeline changes, a new run's positions are all larger than an older
/// run's, so a slot read under another meaning only ever loses to the new run.
extension PGStore {
    /// The hidden column of positions, added to an entity's table when a joined run first writes it.
    static let positionColumn = "_ingot_pos"
    /// Units' payloads stored as they come (`pglz` tried each zstd frame in vain: 2 % of a joined
    /// job's time at people-200k).
    static let externalPayloads = "ALTER TABLE _ingot_units ALTER COLUMN payload SET STORAGE EXTERNAL"

    /// The DDL of the work queue of joined runs and of the position columns.
    static func joinSchema(of model: EntityModel) -> [String] {
        var statements = [
            """
            CREATE TABLE IF NOT EXISTS _ingot_joins (name text PRIMARY KEY, id bigserial UNIQUE, run_id text NOT NULL,
              pipeline text NOT NULL, status text NOT NULL, next_seq bigint NOT NULL DEFAULT 1, end_seq bigint, fetcher text,
              fetch_lease_until timestamptz, fetch_state text, fetch_failures int NOT NULL DEFAULT 0, error text,
              created_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz)
            """,
            """
            CREATE TABLE IF NOT EXISTS _ingot_units (name text NOT NULL, seq bigint NOT NULL, status text NOT NULL, job text,
              lease_until timestamptz, claims int NOT NULL DEFAULT 0, source text NOT NULL, payload bytea NOT NULL,
              length bigint NOT NULL, oversized bigint, finished_at timestamptz, PRIMARY KEY (name, seq))
            """,
            "ALTER TABLE _ingot_joins ADD COLUMN IF NOT EXISTS spec text",
            // A unit's page as the fetcher read it: a compressed file is inflated by the job that
            // decodes it, as a single run's lane does (gzip, zstd; NULL: plain).
            "ALTER TABLE _ingot_units ADD COLUMN IF NOT EXISTS compression text",
            // What the unit carries besides its payload: its resource, for_each values (UnitLabels).
            "ALTER TABLE _ingot_units ADD COLUMN IF NOT EXISTS labels text",
            // Until when the jobs start no request: a server's Retry-After one job met.
            "ALTER TABLE _ingot_joins ADD COLUMN IF NOT EXISTS pause_until timestamptz",
            // The values a joined run keeps (the incremental cursor), until it finishes.
            "CREATE TABLE IF NOT EXISTS _ingot_join_kept (name text NOT NULL, pipeline text NOT NULL, key text NOT NULL, value text NOT NULL, PRIMARY KEY (name, pipeline, key))",
            // The values each job's units gave a replaced entity's scope column, until the run
            // finishes (a job's own rows: jobs never wait on each other's).
            "CREATE TABLE IF NOT EXISTS _ingot_join_scopes (name text NOT NULL, job text NOT NULL, entity int NOT NULL, value text NOT NULL, PRIMARY KEY (name, job, entity, value))",
            // The parts of a run's exchanged rows written, and what each wrote (PGStore+Exchange.swift).
            "CREATE TABLE IF NOT EXISTS _ingot_join_merged (name text NOT NULL, part int NOT NULL, inserted bigint NOT NULL, updated bigint NOT NULL, entity_counts text, PRIMARY KEY (name, part))",
            // Payloads are zstd frames already: the server does not try to compress them again.
            PGStore.externalPayloads,
            "CREATE INDEX IF NOT EXISTS _ingot_units_open ON _ingot_units (name, seq) WHERE status <> 'done'",
            """
            CREATE TABLE IF NOT EXISTS _ingot_join_jobs (name text NOT NULL, job text NOT NULL, status text NOT NULL,
              started_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz, pages bigint NOT NULL DEFAULT 0,
              records bigint NOT NULL DEFAULT 0, inserted bigint NOT NULL DEFAULT 0, updated bigint NOT NULL DEFAULT 0,
              rejected_records bigint NOT NULL DEFAULT 0, rejected_pages bigint NOT NULL DEFAULT 0, bytes bigint NOT NULL DEFAULT 0,
              entity_counts text, reject_counts text, PRIMARY KEY (name, job))
            """,
            // The rows a job's tombstones deleted (delete_when).
            "ALTER TABLE _ingot_join_jobs ADD COLUMN IF NOT EXISTS deleted bigint NOT NULL DEFAULT 0",
        ]
        for layout in EntityLayout.layouts(of: model) {
            statements.append("ALTER TABLE \(quote(layout.table)) ADD COLUMN IF NOT EXISTS \(positionColumn) bigint[]")
        }
        return statements
    }

    // MARK: - Writes

    /// Sets the `@` position of every row `batch` touched (records, nested objects and stubs) to
    /// its last unit's, in a run committed in order (whose writes carry no positions): the rows
    /// `write: replace` at the run's end keeps, and a cascade from the others spares.
    func markTouched(_ batch: ResolvedBatch, _ join: JoinContext) throws {
        let position = join.position(UnitOrder.lastKey(seq: batch.units.map(\.seq).max() ?? 0))
        for (entity, rows) in batch.rows.merged.enumerated() where !rows.index.isEmpty {
            let layout = layouts[entity]
            let k = PGStore.keyArrays(layout, Array(rows.index.keys), firstParameter: 2)
            try connection.execute(
                """
                UPDATE \(PGStore.quote(layout.table)) AS t SET \(PGStore.positionColumn)[\(PositionSlots(layout).touched)] = $1::bigint
                  FROM unnest(\(k.unnest)) AS k(\(k.names)) WHERE \(k.on)
                """, [String(position)] + k.parameters)
        }
    }

    /// Every entity's rows and links of a joined batch; `direct`: its new rows copied straight in.
    func writeJoinedEntities(_ batch: ResolvedBatch, _ join: JoinContext, fallback: Int, direct: Bool) throws -> [EntityCounts] {
        var counts = [EntityCounts](repeating: EntityCounts(), count: layouts.count)
        for (entity, layout) in layouts.enumerated() {
            // Rows copied straight in are written from the folded storage: no values of theirs made.
            let copies = direct && !layout.identitySlots.isEmpty
            let rows = copies ? batch.rows(of: entity, valuesWhere: { $0 != nil }) : batch.rows(of: entity)
            guard !rows.isEmpty else { continue }
            counts[entity] = try upsert(rows, layout, join, fallback: fallback, direct: copies ? batch.storage(of: entity) : nil)
            for (k, toMany) in layout.toMany.enumerated() where !toMany.isOwned {
                try replaceLinksJoined(
                    rows, k, toMany, owner: entity, layout: layout, join,
                    direct: direct && !layout.identitySlots.isEmpty && !sharedJoinTables.contains(toMany.joinTable))
            }
        }
        // Owned rows once every entity's rows are written: the batch's children carry their
        // positions by then.
        for (entity, layout) in layouts.enumerated() {
            for (k, toMany) in layout.toMany.enumerated() where toMany.isOwned {
                try deleteStaleOwned(batch.rows(of: entity), k, toMany, owner: entity, layout: layout)
            }
        }
        return counts
    }

    /// The owned rows of relationship `k` that the owner's newest set does not hold, for every
    /// owner in `rows` that gave a set — with what they own in turn. An owned row is a row of
    /// its own entity, upserted column by column with positions like any other; what a joined
    /// write adds is its end: a row goes when no set at least as new as the owner's (its
    /// `_ingot_pos` slot for `k`, after this batch's upsert) wrote it — a row past the newest
    /// set's end, written by an older set, whichever job committed first.
    private func deleteStaleOwned(
        _ rows: [ResolvedBatch.Row], _ k: Int, _ toMany: EntityLayout.ToMany, owner: Int, layout: EntityLayout
    ) throws {
        var owners: [UInt8] = []
        for row in rows {
            guard let identity = row.identity, row.links[k] != nil else { continue }
            PGStore.appendCopyRow(identity.values, to: &owners)
        }
        guard !owners.isEmpty else { return }
        let types = PGStore.joinColumns(toMany, owner: owner, model: model)
        let stage = try staging("_ingot_ownedj_\(toMany.joinTable)", Array(types.prefix(toMany.sourceColumns.count)))
        try connection.copy("COPY \(stage) FROM STDIN", data: owners)
        let table = PGStore.quote(toMany.joinTable)
        let identity = layout.identitySlots.map { PGStore.quote(layout.columns[$0].name) }
        let source = toMany.sourceColumns.map(PGStore.quote)
        let owns = zip(source, identity).map { "t.\($1) = o.\($0) AND \(table).\($0) = o.\($0)" }.joined(separator: " AND ")
        let touched = "coalesce(\(table).\(PGStore.positionColumn)[\(PositionSlots(layouts[toMany.target]).touched)], 0)"
        let condition =
            "EXISTS (SELECT 1 FROM \(stage) AS o JOIN \(PGStore.quote(layout.table)) AS t ON true WHERE \(owns) AND \(touched) < coalesce(t.\(PGStore.positionColumn)[\(PositionSlots(layout).link(k))], 0))"
        for sql in OwnedRows.deletes(of: toMany.target, where: condition, layouts: layouts, quote: PGStore.quote) {
            try connection.execute(sql)
        }
        try connection.execute("TRUNCATE \(stage)")
    }

    /// Hands the units of a rolled-back transaction back to the queue (those this job still
    /// holds under the same claim), so that a job claims them again.
    func releaseUnits(_ units: Set<UnitRef>, _ join: JoinContext) {
        guard !units.isEmpty else { return }
        _ = try? connection.execute(
            """
            UPDATE _ingot_units AS u SET status = 'pending', job = NULL, lease_until = NULL FROM unnest($3::bigint[], $4::int[]) AS c(seq, claims)
            WHERE u.name = $1 AND u.job = $2 AND u.seq = c.seq AND u.claims = c.claims AND u.status = 'claimed'
            """,
            [join.name, join.job] + PGStore.unitArrays(Array(units)))
        PGSharedRun.notify(on: connection, join.name)
    }

    /// `units` as two array parameters, their seqs and their claims, for `unnest($n::bigint[], $m::int[])`.
    static func unitArrays(_ units: [UnitRef]) -> [String?] {
        [arrayLiteral(units.map { .integer(Int64($0.seq)) }), arrayLiteral(units.map { .integer(Int64($0.claim)) })]
    }

    /// Where an entity's positions are in its `_ingot_pos` array: ``WritePositions/Slots``,
    /// counted from 1 as SQL arrays are — one per column, one per to-many set, then `@` (the row
    /// was touched, at its latest unit).
    struct PositionSlots {
        private let slots: WritePositions.Slots
        var columns: Int { slots.columns }
        var links: Int { slots.sets }
        func column(_ slot: Int) -> Int { slot + 1 }
        func link(_ k: Int) -> Int { slots.set(k) + 1 }
        var touched: Int { slots.touched + 1 }
        var count: Int { slots.count }

        init(_ layout: EntityLayout) { slots = WritePositions.Slots(layout) }
    }

    /// The positions a staged row carries, as an array literal: each column its records set and
    /// each link set given, at the position of the unit that set it (NULL where none did), and
    /// `@` at its latest unit.
    private static func appendPositions(_ positions: WritePositions, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        for (k, position) in positions.slots.enumerated() {
            if k > 0 { out.append(UInt8(ascii: ",")) }
            if let position {
                appendDecimal(position, to: &out)
            } else {
                out.append(contentsOf: [UInt8(ascii: "N"), UInt8(ascii: "U"), UInt8(ascii: "L"), UInt8(ascii: "L")])
            }
        }
        out.append(UInt8(ascii: "}"))
    }

    /// The positions a staged row carries (``PositionSlots``): each column its records set and
    /// each link set given, at the position of the unit that set it (`nil` where none did), and
    /// `@` at its latest unit (`fallback` when no unit set anything: a stub).
    static func positions(_ row: ResolvedBatch.Row, _ layout: EntityLayout, _ join: JoinContext, fallback: Int) -> [Int64?] {
        WritePositions(row, layout, ordinal: join.ordinal, fallback: fallback).slots
    }

    /// A staged row of a joined batch as a COPY row: its values, then its positions.
    static func appendJoinedRow(
        _ row: ResolvedBatch.Row, _ layout: EntityLayout, _ join: JoinContext, fallback: Int, to out: inout [UInt8]
    ) {
        appendCopyFields(row.values, to: &out)
        out.append(UInt8(ascii: "\t"))
        appendPositions(WritePositions(row, layout, ordinal: join.ordinal, fallback: fallback), to: &out)
        out.append(UInt8(ascii: "\n"))
    }

    /// Upserts `rows` and returns what it did: rows inserted (the database says which: `xmax`
    /// is 0 for a row this statement created), stubs among them (no column or link given), and
    /// stored rows given a column or a link. `direct`: the rows not stored at the lookup are
    /// copied straight into the table (a unique violation if another job made one since).
    private func upsert(
        _ rows: [ResolvedBatch.Row], _ layout: EntityLayout, _ join: JoinContext, fallback: Int,
        direct: (rows: [EntityRow], storage: RowStorage)?
    ) throws -> EntityCounts {
        if let direct, !layout.identitySlots.isEmpty, rows.contains(where: { $0.stored == nil }) {
            var data: [UInt8] = []
            var counts = EntityCounts()
            for (position, row) in rows.enumerated() where row.stored == nil {
                PGStore.appendCopyFields(direct.storage, direct.rows[position], columns: layout.columns.count, to: &data)
                data.append(UInt8(ascii: "\t"))
                let positions = WritePositions(row, layout, ordinal: join.ordinal, fallback: fallback)
                PGStore.appendPositions(positions, to: &data)
                data.append(UInt8(ascii: "\n"))
                counts.inserted += 1
                if !positions.gives { counts.stubs += 1 }
            }
            let all = PGStore.joinedColumns(layout).map { PGStore.quote($0.name) }.joined(separator: ", ")
            try connection.copy("COPY \(PGStore.quote(layout.table)) (\(all)) FROM STDIN", data: data)
            let stored = rows.filter { $0.stored != nil }
            guard !stored.isEmpty else { return counts }
            let rest = try upsert(stored, layout, join, fallback: fallback, direct: nil)
            return EntityCounts(inserted: counts.inserted + rest.inserted, updated: rest.updated, stubs: counts.stubs + rest.stubs)
        }
        var data: [UInt8] = []
        for row in rows { PGStore.appendJoinedRow(row, layout, join, fallback: fallback, to: &data) }
        return try upsertJoined(copied: data, rows: rows.count, layout)
    }

    /// An entity's columns and their types, then its positions: a joined row as `COPY` sends it.
    static func joinedColumns(_ layout: EntityLayout) -> [(name: String, type: String)] {
        layout.columns.map { ($0.name, PGStore.columnType($0.type)) } + [(positionColumn, "bigint[]")]
    }

    /// Upserts rows given as `COPY` text (each row's values, then its positions) through the
    /// entity's staging table, and returns what it did (``upsert(_:_:_:fallback:direct:)``).
    func upsertJoined(copied data: [UInt8], rows: Int, _ layout: EntityLayout) throws -> EntityCounts {
        let columns = PGStore.joinedColumns(layout)
        let all = columns.map { PGStore.quote($0.name) }.joined(separator: ", ")
        let stage = try staging("_ingot_up_\(layout.table)", columns)
        try connection.copy("COPY \(stage) (\(all)) FROM STDIN", data: data)
        return try upsertStaged(stage, rows: rows, layout)
    }

    /// Whether the staged row `alias` gives something: any of its column and link slots is set
    /// (its `@` slot, the last, aside).
    static func givesSomething(_ alias: String, _ slots: PositionSlots) -> String {
        "array_remove(\(alias).\(positionColumn)[1:\(slots.count - 1)], NULL) <> '{}'"
    }

    /// Upserts the rows staged in `stage` (an entity's ``joinedColumns(_:)``) by position, then
    /// empties it; what it did (``upsert(_:_:_:fallback:direct:)``).
    func upsertStaged(_ stage: String, rows: Int, _ layout: EntityLayout) throws -> EntityCounts {
        let table = PGStore.quote(layout.table)
        let pos = PGStore.positionColumn
        let slots = PositionSlots(layout)
        let all = PGStore.joinedColumns(layout).map { PGStore.quote($0.name) }.joined(separator: ", ")
        var sql = "INSERT INTO \(table) AS t (\(all)) SELECT \(all) FROM \(stage)"
        guard !layout.identitySlots.isEmpty else {
            try connection.execute(sql + "; TRUNCATE \(stage)")
            return EntityCounts(inserted: rows)
        }
        do {
            // A column takes the staged value when the staged position is set and not older; the
            // positions merge slot by slot (the newest wins).
            let set =
                layout.columns.indices.filter { !layout.identitySlots.contains($0) }.map { slot in
                    let c = PGStore.quote(layout.columns[slot].name)
                    let k = slots.column(slot)
                    return "\(c) = CASE WHEN excluded.\(pos)[\(k)] >= coalesce(t.\(pos)[\(k)], 0) THEN excluded.\(c) ELSE t.\(c) END"
                } + [
                    "\(pos) = ARRAY[\((1...slots.count).map { "greatest(t.\(pos)[\($0)], excluded.\(pos)[\($0)])" }.joined(separator: ", "))]::bigint[]"
                ]
            sql += " ON CONFLICT ON CONSTRAINT \(PGStore.quote(layout.table + "_identity")) DO UPDATE SET \(set.joined(separator: ", "))"
        }
        // The staged row gives something when any of its column and link slots is set.
        let identity = layout.identitySlots.map { PGStore.quote(layout.columns[$0].name) }
        let match = identity.map { "u.\($0) = s.\($0)" }.joined(separator: " AND ")
        let gives = PGStore.givesSomething("s", slots)
        let counted = try connection.execute(
            """
            SET LOCAL enable_hashjoin = on;
            WITH u AS (\(sql) RETURNING \(identity.map { "t.\($0)" }.joined(separator: ", ")), (t.xmax = 0) AS fresh)
            SELECT count(*) FILTER (WHERE u.fresh), count(*) FILTER (WHERE u.fresh AND NOT \(gives)),
              count(*) FILTER (WHERE NOT u.fresh AND \(gives)) FROM u JOIN \(stage) AS s ON \(match)
            """)
        try connection.execute("SET LOCAL enable_hashjoin = off; TRUNCATE \(stage)")
        let numbers = counted.last.map { $0.map { $0.flatMap { Int($0) } ?? 0 } } ?? [0, 0, 0]
        return EntityCounts(inserted: numbers[0], updated: numbers[2], stubs: numbers[1])
    }

    /// Replaces the link sets of relationship `k` this batch wins: after the upsert, an owner
    /// whose `~join_table` position is the one this batch staged for it was given no newer set by
    /// another job.
    /// `direct`: the owners the upsert copied straight in (not stored at the lookup) have no links
    /// yet, and their rows are this transaction's until it commits — a job that meets one waits,
    /// then finds its position: their links are copied straight into the join table, each pair
    /// once at its first position, as a single job's are.
    private func replaceLinksJoined(
        _ rows: [ResolvedBatch.Row], _ k: Int, _ toMany: EntityLayout.ToMany, owner: Int, layout: EntityLayout, _ join: JoinContext,
        direct: Bool
    ) throws {
        var owners: [UInt8] = []
        var links: [UInt8] = []
        var newLinks: [UInt8] = []
        var seen: Set<IdentityKey> = []
        for row in rows {
            guard let identity = row.identity, let targets = row.links[k] else { continue }
            if direct, row.stored == nil {
                seen.removeAll(keepingCapacity: true)
                for (index, target) in targets.enumerated() where seen.insert(target).inserted {
                    PGStore.appendLinkRow(identity, target, position: toMany.isOrdered ? index : nil, to: &newLinks)
                }
                continue
            }
            let position = ScalarValue.integer(join.position(row.linkUnits[row.linkUnits.startIndex + k]))
            PGStore.appendCopyRow(identity.values + [position], to: &owners)
            for (index, target) in targets.enumerated() {
                PGStore.appendLinkRow(identity, target, position: toMany.isOrdered ? index : nil, to: &links)
            }
        }
        let types = PGStore.joinColumns(toMany, owner: owner, model: model)
        if !newLinks.isEmpty {
            try connection.copy(
                "COPY \(PGStore.quote(toMany.joinTable)) (\(types.map { PGStore.quote($0.name) }.joined(separator: ", "))) FROM STDIN",
                data: newLinks)
        }
        guard !owners.isEmpty else { return }
        try replaceLinksJoined(owners: owners, links: links, k, toMany, owner: owner, layout: layout)
    }

    /// Replaces the link sets of relationship `k` given as `COPY` text — `owners`: each owner's
    /// identity and the position of the set it was given; `links`: the set's links — where the
    /// owner's row holds that position after its upsert (no newer set was written by another
    /// job): the owner's stored links are deleted, the given ones inserted.
    func replaceLinksJoined(
        owners: [UInt8], links: [UInt8], _ k: Int, _ toMany: EntityLayout.ToMany, owner: Int, layout: EntityLayout
    ) throws {
        let stages = try linkStages(toMany, owner: owner)
        try connection.copy("COPY \(stages.owners) FROM STDIN", data: owners)
        if !links.isEmpty { try connection.copy("COPY \(stages.links) FROM STDIN", data: links) }
        try replaceStagedLinks(stages, hasLinks: !links.isEmpty, k, toMany, owner: owner, layout: layout)
    }

    /// The staging tables of relationship `toMany`'s link sets: its owners with the position of
    /// the set each was given (`_pos`), and the sets' links.
    func linkStages(_ toMany: EntityLayout.ToMany, owner: Int) throws -> (owners: String, links: String) {
        let types = PGStore.joinColumns(toMany, owner: owner, model: model)
        return (
            try staging("_ingot_own_\(toMany.joinTable)", Array(types.prefix(toMany.sourceColumns.count)) + [("_pos", "bigint")]),
            try staging("_ingot_link_\(toMany.joinTable)", types)
        )
    }

    /// ``replaceLinksJoined(owners:links:_:_:owner:layout:)`` from its staging tables, filled
    /// (``linkStages(_:owner:)``; `hasLinks`: the links' table holds any), which it empties.
    func replaceStagedLinks(
        _ stages: (owners: String, links: String), hasLinks: Bool, _ k: Int, _ toMany: EntityLayout.ToMany, owner: Int,
        layout: EntityLayout
    ) throws {
        let join = PGStore.quote(toMany.joinTable)
        let types = PGStore.joinColumns(toMany, owner: owner, model: model)
        let ownerTable = PGStore.quote(layout.table)
        let identity = layout.identitySlots.map { PGStore.quote(layout.columns[$0].name) }
        func owns(_ alias: String) -> String {
            zip(toMany.sourceColumns, identity).map { "t.\($1) = \(alias).\(PGStore.quote($0))" }.joined(separator: " AND ")
        }
        let ownerStage = stages.owners
        // The owners whose set this batch wins: their rows are locked by the upsert until the commit.
        let winners = try staging("_ingot_win_\(toMany.joinTable)", Array(types.prefix(toMany.sourceColumns.count)))
        let ownerColumns = toMany.sourceColumns.map { "o.\(PGStore.quote($0))" }.joined(separator: ", ")
        let match = toMany.sourceColumns.map { "j.\(PGStore.quote($0)) = w.\(PGStore.quote($0))" }.joined(separator: " AND ")
        try connection.execute(
            """
            TRUNCATE \(winners); INSERT INTO \(winners) SELECT \(ownerColumns) FROM \(ownerStage) AS o JOIN \(ownerTable) AS t ON \(owns("o"))
              WHERE t.\(PGStore.positionColumn)[\(PositionSlots(layout).link(k))] = o._pos;
            DELETE FROM \(join) AS j USING \(winners) AS w WHERE \(match); TRUNCATE \(ownerStage)
            """)
        guard hasLinks else { return }
        let linkStage = stages.links
        let key = (toMany.sourceColumns + toMany.targetColumns).map { "l.\(PGStore.quote($0))" }.joined(separator: ", ")
        let columns = types.map { PGStore.quote($0.name) }.joined(separator: ", ")
        let order = toMany.isOrdered ? "\(key), l.\"position\"" : key
        let won = toMany.sourceColumns.map { "w.\(PGStore.quote($0)) = l.\(PGStore.quote($0))" }.joined(separator: " AND ")
        // Two small staging tables: a hash join, for this statement only (the session turns them
        // off for staging-to-table joins, PGConnection).
        try connection.execute(
            """
            SET LOCAL enable_hashjoin = on;
            INSERT INTO \(join) (\(columns)) SELECT DISTINCT ON (\(key)) \(types.map { "l.\(PGStore.quote($0.name))" }.joined(separator: ", "))
              FROM \(linkStage) AS l JOIN \(winners) AS w ON \(won) ORDER BY \(order) ON CONFLICT DO NOTHING;
            SET LOCAL enable_hashjoin = off; TRUNCATE \(linkStage)
            """)
    }

    /// A joined job's counters, in its own row of `_ingot_join_jobs` (each unit's transaction
    /// writes it: the jobs never wait on one row).
    func recordJobProgress(_ p: RunProgress, _ join: JoinContext) throws {
        let c = p.counters
        try connection.execute(
            """
            INSERT INTO _ingot_join_jobs (name, job, status, pages, records, inserted, updated, rejected_records, rejected_pages, bytes,
              entity_counts, reject_counts, deleted) VALUES ($1, $2, 'running', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
            ON CONFLICT (name, job) DO UPDATE SET pages = excluded.pages, records = excluded.records, inserted = excluded.inserted,
              updated = excluded.updated, rejected_records = excluded.rejected_records, rejected_pages = excluded.rejected_pages,
              bytes = excluded.bytes, entity_counts = excluded.entity_counts, reject_counts = excluded.reject_counts,
              deleted = excluded.deleted
            """,
            [
                join.name, join.job, String(c.pages), String(c.records), String(c.inserted), String(c.updated), String(c.rejectedRecords),
                String(c.rejectedPages), String(c.bytes), c.entitiesJSON, c.rejectsJSON, String(c.deleted),
            ])
    }
}
