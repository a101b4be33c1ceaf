import Foundation

/// A joined job's batches sent to the run as blobs, merged once when the run ends, by the jobs
/// (docs/scale-out.md, "Writes deferred to the run's end").
///
/// Written batch by batch with positions (PGStore+Join.swift), every batch of every job is an
/// upsert into the entities' tables: a person re-sent by forty pages is a new row version forty
/// times. Deferred, a batch's folded rows — their values and the unit of each value and set,
/// exactly what the positional upsert would offer — are encoded (``DeferredRows``), split by
/// part (a hash of the identity), compressed, and stored as one `bytea` per part in
/// `_ingot_join_rows`, in the transaction that marks the batch's units done. The server stores
/// them and does nothing else with them. Once every unit is done, the jobs take the parts one
/// by one; the job that takes a part folds its blobs (per identity, each column the value of the
/// largest unit that gave it, each set the largest unit's) and writes the result: rows no one
/// stored copied straight in, in binary, as a single run's are; those stored before (an earlier
/// run's, a stretch's, a job's that wrote with positions) upserted by position. So the argument
/// of "Later pages win, across jobs" holds unchanged, and the server's work is the final rows'
/// writes whatever the number of jobs: when tables of the run were folded in SQL, four jobs cost
/// the server four times a single run's CPU.
///
/// The blobs are rows of an ordinary (logged) table: a unit marked done has its rows there,
/// through a crash of the job or of the server. The transaction that finishes the run deletes
/// them.
enum DeferredParts {
    /// The parts the run's rows are merged in, by several jobs at once: a job folds one part in
    /// memory (a sixteenth of the run's deferred rows).
    static let parts = 16

    /// The longest text (in UTF-8 bytes) a deferred row may hold in an indexed column: far below
    /// the 2,704 bytes a b-tree entry may take, so that no index refuses a merged row. A batch
    /// with a longer one is written batch by batch, where the server's refusal rejects its
    /// record (docs/reliability.md).
    static let longestIndexedText = 2_000

    /// Whether a model's batches can be deferred: every entity with an identity, every to-many
    /// set in a join table of its own (owned rows and a to-one's inverse are written batch by
    /// batch; a staged load refuses them too).
    static func fit(_ layouts: [EntityLayout]) -> Bool {
        layouts.allSatisfy { !$0.identitySlots.isEmpty && $0.toMany.allSatisfy(\.hasJoinTable) }
    }
}

extension PGStore {
    /// A joined job writes its batches deferred: its plan says so (a first load from local pages,
    /// ``LoadPlan/defersJoinedBatches``) and the model fits (``DeferredParts/fit(_:)``).
    var defersJoinedBatches: Bool { stagingRules.defersJoined && DeferredParts.fit(layouts) }

    /// A joined batch's rows sent to the run (``DeferredParts``), in the open transaction that
    /// marked its units done; nothing reaches the entities' tables, so nothing is counted yet
    /// (the merge counts what it writes). `nil` when a value could be refused by the server (not
    /// certain in binary, or a long indexed text): the caller writes that batch with positions,
    /// batch by batch, where a refusal rejects its record.
    func writeDeferred(_ batch: ResolvedBatch, _ join: JoinContext, fallback: Int) throws -> [EntityCounts]? {
        var writers = [DeferredRows.Writer](repeating: DeferredRows.Writer(), count: DeferredParts.parts)
        for (entity, layout) in layouts.enumerated() {
            let rows = batch.rows(of: entity)
            guard !rows.isEmpty else { continue }
            guard PGStore.binaryJoinedRows(rows, layout, join, fallback: fallback) != nil, !hasLongIndexedText(rows, layout) else {
                return nil
            }
            for row in rows {
                guard let deferred = PGStore.deferredRow(row, layout, fallback: fallback) else { continue }
                writers[DeferredRows.part(of: deferred.identity, parts: DeferredParts.parts)].append(deferred, entity: entity)
            }
        }
        // One statement for the batch's parts: a blob per part that has rows.
        var columns: [[ScalarValue]] = [[], [], []]
        var frames: [[UInt8]] = []
        for (part, writer) in writers.enumerated() where writer.rows > 0 {
            columns[0].append(.integer(Int64(part)))
            columns[1].append(.integer(Int64(writer.rows)))
            columns[2].append(.integer(Int64(writer.bytes.count)))
            frames.append(try deferredZstd.compress(writer.bytes))
        }
        if !frames.isEmpty {
            try connection.execute(
                """
                INSERT INTO _ingot_join_rows (name, part, rows, length, data)
                  SELECT $1, * FROM unnest($2::int[], $3::bigint[], $4::bigint[], $5::bytea[])
                """, [join.name] + columns.map { PGStore.arrayLiteral($0) } + [PGStore.byteaArrayLiteral(frames)])
        }
        return [EntityCounts](repeating: EntityCounts(), count: layouts.count)
    }

    /// `frames` as a `bytea[]` literal (`{"\\\\x0a1b",…}`: hex needs no quoting, the
    /// backslash), built byte by byte: a run's deferred rows are megabytes.
    static func byteaArrayLiteral(_ frames: [[UInt8]]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(frames.reduce(2) { $0 + 2 * $1.count + 6 })
        for (k, frame) in frames.enumerated() {
            if k > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: [UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "\\"), UInt8(ascii: "x")])
            for byte in frame {
                out.append(digits[Int(byte >> 4)])
                out.append(digits[Int(byte & 15)])
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    /// A batch's row as the merge folds it: its values, the unit of each column and set (none in
    /// the identity's columns), and its latest unit (`fallback`, the batch's last, for a stub).
    static func deferredRow(_ row: ResolvedBatch.Row, _ layout: EntityLayout, fallback: Int) -> DeferredRow? {
        guard let identity = row.identity else { return nil }
        var units = row.valueUnits.isEmpty ? Array(repeating: 0, count: layout.columns.count) : Array(row.valueUnits)
        for slot in layout.identitySlots where units.indices.contains(slot) { units[slot] = 0 }
        let linkUnits = row.linkUnits.isEmpty ? Array(repeating: 0, count: layout.toMany.count) : Array(row.linkUnits)
        let latest = max(units.max() ?? 0, linkUnits.max() ?? 0)
        var values = row.values
        if values.count < layout.columns.count { values += Array(repeating: nil, count: layout.columns.count - values.count) }
        return DeferredRow(
            identity: identity, values: values, units: units, links: row.links, linkUnits: linkUnits,
            touched: latest > 0 ? latest : fallback)
    }

    /// Whether a row holds a text longer than ``DeferredParts/longestIndexedText`` in a column an
    /// index holds: its identity, a foreign key's columns, a set's targets.
    private func hasLongIndexedText(_ rows: [ResolvedBatch.Row], _ layout: EntityLayout) -> Bool {
        let indexed = Set(
            layout.foreignKeyIndexes(of: layouts).filter { $0.table == layout.table }.flatMap(\.columns).compactMap { name in
                layout.columns.firstIndex { $0.name == name }
            }
        ).union(layout.identitySlots)
        func long(_ values: [ScalarValue?]) -> Bool {
            values.reduce(0) { total, value in
                if case .text(let s)? = value { return total + s.utf8.count }
                return total
            } > DeferredParts.longestIndexedText
        }
        return rows.contains { row in
            long(indexed.map { row.values[safe: $0] ?? nil })
                || row.links.contains { set in set?.contains { long($0.values) } ?? false }
        }
    }

    /// Whether the run has deferred rows (a job of the run deferred a batch), as committed when
    /// the statement starts: the job that finishes the run deletes them while others may be
    /// between two parts.
    func hasDeferredRows(_ join: JoinContext) throws -> Bool {
        try connection.execute("SELECT EXISTS (SELECT 1 FROM _ingot_join_rows WHERE name = $1)", [join.name]).first?[0] == "t"
    }

    /// Merges the parts of the run's deferred rows no job merged or is merging, each in a
    /// transaction of its own under an advisory lock of the part, once every unit is done and
    /// the source ended (before that, nothing). Returns what it wrote, counted as this job's.
    ///
    /// Every job that ends its part this way merges parts side by side with the others; a part
    /// merged is recorded in `_ingot_join_merged` with its counts (the run's end sums them), and a
    /// part whose job died is merged by the next (its transaction, lock included, went with it).
    func mergeDeferredParts(_ join: JoinContext) throws -> (counts: RunCounters, seconds: Double)? {
        guard try hasDeferredRows(join) else { return nil }
        let ready = try connection.execute(
            """
            SELECT j.end_seq IS NOT NULL AND j.status = 'running' AND NOT EXISTS (SELECT 1 FROM _ingot_units u WHERE u.name = j.name AND u.status <> 'done')
              FROM _ingot_joins AS j WHERE j.name = $1
            """, [join.name])
        guard ready.first?[0] == "t" else { return nil }
        let started = Date()
        try dropForeignKeyIndexesForMerge(join)
        var merged = RunCounters()
        for part in 0..<DeferredParts.parts {
            try begin()
            do {
                // The part's lock first; then whether the run's rows are still there: the job
                // that finished the run may have merged the rest and deleted them since this
                // loop began (its transaction held each part's lock until it committed).
                guard try lockDeferredPart(join, part, waiting: false) else {
                    try commit()
                    continue
                }
                guard try hasDeferredRows(join) else {
                    try commit()
                    break
                }
                if try !deferredPartMerged(join, part) { merged.add(try mergeDeferredPart(join, part: part)) }
                try commit()
            } catch {
                try? rollback()
                throw error
            }
        }
        return (merged, Date().timeIntervalSince(started))
    }

    /// In the transaction that finishes the run: merges any part still unmerged (waiting for a
    /// job merging one), sums every part's counts, and deletes the run's rows. `nil` when no
    /// job of the run deferred; else the run's merge counts, and what this call merged itself.
    func finishDeferred(_ join: JoinContext) throws -> (total: RunCounters, merged: RunCounters)? {
        guard try hasDeferredRows(join) else { return nil }
        // The schema's lock before any row of the merge: this transaction makes the foreign
        // keys' indexes again at its end (``createIndexes(_:)``), and a job starting meanwhile
        // that finds one missing waits here rather than make it too. Taken later, it would wait
        // for that job while the job's index waits for this transaction's rows: a deadlock.
        try connection.execute(PGStore.schemaLock)
        var counts = RunCounters()
        var mine = RunCounters()
        for part in 0..<DeferredParts.parts {
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
        try dropDeferredRows(of: join.name)
        return (counts, mine)
    }

    /// Deletes join `name`'s deferred rows: its end merged them, or a single run overtook it.
    func dropDeferredRows(of name: String) throws {
        try connection.execute("DELETE FROM _ingot_join_rows WHERE name = $1", [name])
    }

    /// Before this job merges parts: each foreign key's index (`person_dogs_dog_id`) on a table
    /// that holds fewer rows than the run has deferred — a first load's — is dropped, in a short
    /// transaction of its own, and the transaction that finishes the run builds it again
    /// (``finishDeferred(_:)``): one sorted build, where the merge inserted an entry per row, as
    /// a single job's staged copy does. No statement of the merge reads these indexes. A drop
    /// that would wait for another job's merge (its part holds the table) is left out: the index
    /// stays, and costs time only. Jobs killed before the run finishes leave it missing until a
    /// job finishes the run, or the next run's schema makes it again.
    private func dropForeignKeyIndexesForMerge(_ join: JoinContext) throws {
        let deferred = try connection.execute("SELECT coalesce(sum(rows), 0) FROM _ingot_join_rows WHERE name = $1", [join.name])
        guard let rows = deferred.first?[0].flatMap({ Int($0) }), rows > 0 else { return }
        for index in layouts.flatMap({ $0.foreignKeyIndexes(of: layouts) }) {
            let smaller = try connection.execute(
                "SELECT (SELECT count(*) FROM (SELECT 1 FROM \(PGStore.quote(index.table)) LIMIT $1::bigint) AS t) < $1::bigint", [String(rows)])
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

    /// Part `part` of the run's deferred rows folded and written into the entities' tables, in
    /// the open transaction, and recorded merged with its counts.
    ///
    /// Every unit is done by then, and no other part holds these identities, so no other job
    /// writes these rows while it runs: the rows and sets of identities not stored yet are copied
    /// straight in, and only those stored before take the positional upsert and link replacement.
    private func mergeDeferredPart(_ join: JoinContext, part: Int) throws -> RunCounters {
        var fold = DeferredRows.Fold(entities: layouts.count)
        let shapes = layouts.map { (columns: $0.columns.count, links: $0.toMany.count) }
        var last: Int64 = 0
        while true {
            // One blob at a time: the fold holds the part's rows, not every blob's bytes too.
            let blob = try connection.execute(
                "SELECT id, length, data FROM _ingot_join_rows WHERE name = $1 AND part = $2::int AND id > $3::bigint ORDER BY id LIMIT 1",
                [join.name, String(part), String(last)])
            guard let row = blob.first, let id = row[0].flatMap({ Int64($0) }) else { break }
            last = id
            guard let length = row[1].flatMap({ Int($0) }), let frame = row[2].flatMap(PGConnection.bytea(fromText:)) else {
                throw StoreError.schema("join \(join.name): deferred rows \(id) of part \(part) are not readable")
            }
            do {
                let bytes = try deferredZstd.decompress(frame[...], expectedLength: length, limit: length)
                var reader = DeferredRows.Reader(bytes, shapes: shapes)
                while !reader.atEnd {
                    let (entity, row) = try reader.next()
                    fold.add(row, entity: entity)
                }
            } catch {
                throw StoreError.schema("join \(join.name): deferred rows \(id) of part \(part) are damaged: \(error)")
            }
        }
        var merged = RunCounters()
        var stored: [Set<IdentityKey>] = []
        for (entity, layout) in layouts.enumerated() {
            let (counts, found) = try writeMerged(fold.rows[entity], layout, join)
            stored.append(found)
            if counts != EntityCounts() { merged.entities[model.entities[entity].name] = counts }
            merged.inserted += counts.inserted
            merged.updated += counts.updated
        }
        // The sets once every owner's row holds its merged positions.
        for (entity, layout) in layouts.enumerated() {
            for (k, toMany) in layout.toMany.enumerated() where toMany.hasJoinTable {
                try writeMergedSets(fold.rows[entity], k, toMany, owner: entity, layout: layout, stored: stored[entity], join)
            }
        }
        try connection.execute(
            "INSERT INTO _ingot_join_merged (name, part, inserted, updated, entity_counts) VALUES ($1, $2, $3, $4, $5)",
            [join.name, String(part), String(merged.inserted), String(merged.updated), merged.entitiesJSON])
        return merged
    }

    /// An entity's folded rows written: those not stored copied straight in (binary where every
    /// value fits), the stored ones upserted by position. Returns what it did, and the identities
    /// that were stored (their sets are replaced by position, the others' inserted).
    private func writeMerged(_ rows: [DeferredRow], _ layout: EntityLayout, _ join: JoinContext) throws -> (EntityCounts, Set<IdentityKey>) {
        guard !rows.isEmpty else { return (EntityCounts(), []) }
        let slots = PositionSlots(layout)
        // The stored identities, and whether this run made each (its latest position is this run's).
        let keys = rows.map(\.identity)
        let k = PGStore.keyArrays(layout, keys, firstParameter: 2)
        var ours: [IdentityKey: Bool] = [:]
        for found in try connection.execute(
            """
            SELECT k.i, coalesce(t.\(PGStore.positionColumn)[\(slots.touched)] >= $1::bigint, false)
              FROM unnest(\(k.unnest)) WITH ORDINALITY AS k(\(k.names), i) JOIN \(PGStore.quote(layout.table)) AS t ON \(k.on)
            """, [String(join.firstPosition)] + k.parameters)
        {
            if let i = found[0].flatMap({ Int($0) }), keys.indices.contains(i - 1) { ours[keys[i - 1]] = found[1] == "t" }
        }
        let fresh = rows.filter { ours[$0.identity] == nil }
        var counts = EntityCounts()
        if !fresh.isEmpty {
            let all = PGStore.joinedColumns(layout).map { PGStore.quote($0.name) }.joined(separator: ", ")
            if let data = PGStore.binaryMergedRows(fresh, layout, join) {
                try connection.copy("COPY \(PGStore.quote(layout.table)) (\(all)) FROM STDIN (FORMAT binary)", data: data)
            } else {
                var data: [UInt8] = []
                for row in fresh { PGStore.appendMergedRow(row, layout, join, to: &data) }
                try connection.copy("COPY \(PGStore.quote(layout.table)) (\(all)) FROM STDIN", data: data)
            }
            counts.inserted = fresh.count
            counts.stubs = fresh.count { !$0.gives(identitySlots: layout.identitySlots) }
        }
        if !ours.isEmpty {
            var data: [UInt8] = []
            var oursGiving = 0
            for row in rows where ours[row.identity] != nil {
                PGStore.appendMergedRow(row, layout, join, to: &data)
                if ours[row.identity] == true && row.gives(identitySlots: layout.identitySlots) { oursGiving += 1 }
            }
            let upserted = try upsertJoined(copied: data, rows: ours.count, layout)
            counts.inserted += upserted.inserted
            counts.stubs += upserted.stubs
            // A stored row this run made (a stretch's, a batch's with positions) is not an update
            // of the run: the run inserted it, as a single load counts it.
            counts.updated += upserted.updated - oursGiving
        }
        return (counts, Set(ours.keys))
    }

    /// Relationship `k`'s folded sets written: an owner not stored before the merge has no links
    /// yet, and its set's links are copied straight in (a target once, at its first place); a
    /// stored owner's set replaces its links where its position is the owner's newest.
    private func writeMergedSets(
        _ rows: [DeferredRow], _ k: Int, _ toMany: EntityLayout.ToMany, owner: Int, layout: EntityLayout, stored: Set<IdentityKey>,
        _ join: JoinContext
    ) throws {
        var owners: [UInt8] = []
        var links: [UInt8] = []
        var newLinks: [UInt8] = []
        var seen: Set<IdentityKey> = []
        for row in rows {
            guard let targets = row.links[safe: k] ?? nil else { continue }
            if !stored.contains(row.identity) {
                seen.removeAll(keepingCapacity: true)
                for (index, target) in targets.enumerated() where seen.insert(target).inserted {
                    PGStore.appendLinkRow(row.identity, target, position: toMany.isOrdered ? index : nil, to: &newLinks)
                }
                continue
            }
            PGStore.appendCopyRow(row.identity.values + [.integer(join.position(row.linkUnits[k]))], to: &owners)
            for (index, target) in targets.enumerated() {
                PGStore.appendLinkRow(row.identity, target, position: toMany.isOrdered ? index : nil, to: &links)
            }
        }
        if !newLinks.isEmpty {
            let types = PGStore.joinColumns(toMany, owner: owner, model: model)
            try connection.copy(
                "COPY \(PGStore.quote(toMany.joinTable)) (\(types.map { PGStore.quote($0.name) }.joined(separator: ", "))) FROM STDIN",
                data: newLinks)
        }
        guard !owners.isEmpty else { return }
        try replaceLinksJoined(owners: owners, links: links, k, toMany, owner: owner, layout: layout)
    }

    /// A folded row's positions (``PositionSlots``): each column and set at its unit's position
    /// (NULL where no unit gave it), then `@` at its latest unit.
    static func positions(_ row: DeferredRow, _ join: JoinContext) -> [Int64?] {
        row.units.map { $0 > 0 ? join.position($0) : nil } + row.linkUnits.map { $0 > 0 ? join.position($0) : nil }
            + [join.position(row.touched)]
    }

    /// A folded row as a `COPY` text row: its values, then its positions.
    static func appendMergedRow(_ row: DeferredRow, _ layout: EntityLayout, _ join: JoinContext, to out: inout [UInt8]) {
        appendCopyFields(row.values, to: &out)
        out.append(UInt8(ascii: "\t"))
        appendPositionArray(positions(row, join), to: &out)
        out.append(UInt8(ascii: "\n"))
    }

    /// Folded rows in binary `COPY` form, or `nil` when a value does not fit its column's binary
    /// form (the text form goes then).
    static func binaryMergedRows(_ rows: [DeferredRow], _ layout: EntityLayout, _ join: JoinContext) -> [UInt8]? {
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
                PGBinaryCopy.appendBigintArray(positions(row, join), to: &out)
            }
        } catch {
            return nil
        }
        return out + PGBinaryCopy.trailer
    }

    /// A batch's rows of one entity in binary `COPY` form — their values, then their positions —
    /// or `nil` when a value does not fit its column's binary form.
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
}
