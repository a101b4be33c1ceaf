import Foundation

// The end of a job's part in a joined run (PGStore+Join.swift writes its units): recording how
// the part ended, finishing the run when every unit is committed (write: replace, the counters
// summed, the incremental cursor moved, the archive written from the work queue).
extension PGStore {
    /// Records how this job's part ended; when every unit of the run is committed and nobody
    /// finished it yet, finishes it: `write: replace` deletes the rows of each replaced entity
    /// no unit of this run touched — within the scope values its units gave, for an entity in
    /// `scopes` — when the run rejected nothing; the counters of every job are summed into
    /// `_ingot_runs`, and the units' payloads are dropped. One transaction, under the join's row lock;
    /// the job's own work is committed before (``PGSharedRun``'s `endJob`, through its store).
    func endJoinedJob(
        _ join: JoinContext, runID: String, status: RunStatus, counters: RunCounters, replacing: [Int], scopes: [Int: String],
        maxPageBytes: Int = Page.defaultMaxBytes, archive: ((_ unit: Page) throws -> [Page])? = nil
    ) throws -> SharedRunEnd {
        var end = SharedRunEnd()
        // The run's deferred rows, merged part by part beside the other jobs ending theirs.
        if status == .finished, let merged = try mergeExchangedParts(join) {
            (end.merged, end.mergeSeconds) = merged
        }
        try begin()
        do {
            try connection.execute(
                "UPDATE _ingot_join_jobs SET status = $3, finished_at = now() WHERE name = $1 AND job = $2",
                [join.name, join.job, status.rawValue])
            // The units this job still holds (it failed or was stopped) lapse now rather than at
            // the end of their leases: the other jobs take them over at once.
            let left = try connection.execute(
                "UPDATE _ingot_units SET lease_until = now() - interval '1 second' WHERE name = $1 AND job = $2 AND status = 'claimed' RETURNING seq",
                [join.name, join.job])
            if !left.isEmpty { PGSharedRun.notify(on: connection, join.name) }
            let row = try connection.execute("SELECT status, end_seq FROM _ingot_joins WHERE name = $1 FOR UPDATE", [join.name])
            let open =
                try connection.execute(
                    "SELECT count(*) FROM _ingot_units WHERE name = $1 AND status <> 'done'", [join.name]
                ).first?[0] ?? "1"
            if status == .finished, JoinStatus(row.first?[0]) == .running, row.first?[1] != nil, open == "0" {
                var total = try jobsCounters(join)
                // The deferred batches first: `write: replace` reads the positions they leave.
                if let merged = try finishExchanged(join) {
                    total.add(merged.total)
                    end.merged.add(merged.merged)
                }
                if !replacing.isEmpty {
                    if total.rejectedPages == 0 && total.rejectedRecords == 0 {
                        for entity in replacing {
                            total.deleted += try deleteUntouched(of: entity, join, scope: scopes[entity])
                        }
                    } else {
                        end.replaceSkipped =
                            "the run rejected \(total.rejectedPages) pages and \(total.rejectedRecords) records; its view of the source is incomplete, so no row is deleted"
                    }
                }
                try connection.execute("DELETE FROM _ingot_join_scopes WHERE name = $1", [join.name])
                if let archive { try archiveUnits(of: join, runID: runID, maxPageBytes: maxPageBytes, archive) }
                try keepJoinedValues(join)
                try connection.execute("UPDATE _ingot_joins SET status = 'finished', finished_at = now() WHERE name = $1", [join.name])
                try connection.execute("UPDATE _ingot_units SET payload = ''::bytea WHERE name = $1", [join.name])
                PGSharedRun.notify(on: connection, join.name)
                try finishRunRow(id: runID, status: .finished, counters: total, finishedAt: Date())
                end.finished = total
            }
            try commit()
        } catch {
            try? rollback()
            throw error
        }
        return end
    }
}

extension PGStore {
    /// The counters of every job of the run, summed.
    private func jobsCounters(_ join: JoinContext) throws -> RunCounters {
        var total = RunCounters()
        for job in try connection.execute(
            """
            SELECT pages, records, inserted, updated, rejected_records, rejected_pages, bytes, entity_counts, reject_counts, deleted
              FROM _ingot_join_jobs WHERE name = $1
            """, [join.name])
        {
            func int(_ k: Int) -> Int { job[k].flatMap { Int($0) } ?? 0 }
            var c = RunCounters()
            (c.pages, c.records, c.inserted, c.updated) = (int(0), int(1), int(2), int(3))
            (c.rejectedRecords, c.rejectedPages, c.bytes, c.deleted) = (int(4), int(5), int(6), int(9))
            c.readEntities(fromJSON: job[7])
            c.rejectsByReason = RunCounters.rejects(fromJSON: job[8])
            total.add(c)
        }
        return total
    }

    /// The values the run's units kept (the greatest of each: an incremental cursor's maximum)
    /// moved into the pipeline's kept state.
    private func keepJoinedValues(_ join: JoinContext) throws {
        try connection.execute(
            """
            INSERT INTO _ingot_state (pipeline, key, value) SELECT pipeline, key, value FROM _ingot_join_kept WHERE name = $1
              ON CONFLICT (pipeline, key) DO UPDATE SET value = excluded.value
            """, [join.name])
        try connection.execute("DELETE FROM _ingot_join_kept WHERE name = $1", [join.name])
    }

    /// `write: replace` at a joined run's end, for `entity`: deletes its rows no unit touched
    /// (their `_ingot_pos` touched slot is older than the run's first position) — with a
    /// `scope` column, only those holding a value some unit's records gave it — cascading as a
    /// single run's replace does, sparing every row a unit touched. Returns the rows deleted.
    private func deleteUntouched(of entity: Int, _ join: JoinContext, scope: String?) throws -> Int {
        var condition =
            "coalesce(t.\(PGStore.positionColumn)[\(PositionSlots(layouts[entity]).touched)], 0) < \(join.firstPosition)"
        if let scope {
            // The values every job's units gave, cast from their text form to the column's type.
            condition += try withinScope(of: entity, column: scope) { seen, type in
                try connection.execute(
                    "INSERT INTO \(seen) SELECT DISTINCT value::\(type) FROM _ingot_join_scopes WHERE name = $1 AND entity = $2",
                    [join.name, String(entity)])
            }
        }
        return try delete(entity: entity, where: condition, sparing: .touchedSince(position: join.firstPosition))
    }

    /// Every page of the joined run, in source order, from the work queue (oversized pages, which
    /// were never kept, are left out, and so are units this job could not read or that claim
    /// more than `maxPageBytes`: the jobs rejected them): 64 units per query.
    /// Gives `archive` every unit's page (``forEachPage(of:maxPageBytes:_:)``), then names the
    /// archive entries of the run's rejections from the pages it archived.
    private func archiveUnits(
        of join: JoinContext, runID: String, maxPageBytes: Int, _ archive: (_ unit: Page) throws -> [Page]
    ) throws {
        var archived: [Page] = []
        try forEachPage(of: join, maxPageBytes: maxPageBytes) { archived += try archive($0) }
        try nameArchiveEntries(of: runID, archived)
    }

    /// Names the archive entry of each rejection of run `runID` that came from a unit
    /// (``RecordRejection/unit``): the entry of the page it came from among `archived` (each with
    /// its unit's seq and its ``Page/archive``) — the one with its source, else the unit's first.
    /// A unit not archived (its page over the size limit, unreadable) leaves its rejections
    /// without an entry, as a single run's are.
    func nameArchiveEntries(of runID: String, _ archived: [Page]) throws {
        let entries = archived.compactMap { page in page.archive.map { (seq: page.seq, source: page.source, entry: $0) } }
        guard let path = entries.first?.entry.path else { return }
        let seqs = PGStore.arrayLiteral(entries.map { .integer(Int64($0.seq)) })
        let numbers = PGStore.arrayLiteral(entries.map { .integer(Int64($0.entry.entry)) })
        let sources = PGStore.arrayLiteral(entries.map { RecordRejection.storable($0.source) })
        try connection.execute(
            """
            UPDATE _ingot_rejects AS r SET archive = $2, archive_entry = m.entry
              FROM (SELECT seq, source, min(entry) AS entry FROM unnest($3::bigint[], $4::text[], $5::bigint[]) AS e(seq, source, entry)
                    GROUP BY seq, source) AS m
              WHERE r.run_id = $1 AND r.archive IS NULL AND r.unit = m.seq AND r.source = m.source
            """, [runID, path, seqs, sources, numbers])
        try connection.execute(
            """
            UPDATE _ingot_rejects AS r SET archive = $2, archive_entry = m.entry
              FROM (SELECT seq, min(entry) AS entry FROM unnest($3::bigint[], $4::bigint[]) AS e(seq, entry) GROUP BY seq) AS m
              WHERE r.run_id = $1 AND r.archive IS NULL AND r.unit = m.seq
            """, [runID, path, seqs, numbers])
    }

    func forEachPage(
        of join: JoinContext, maxPageBytes: Int, _ body: (_ unit: Page) throws -> Void
    ) throws {
        let zstd = Zstd()
        var after = 0
        while true {
            let rows = try connection.execute(
                """
                SELECT seq, source, payload, length, compression, labels FROM _ingot_units WHERE name = $1 AND seq > $2 AND oversized IS NULL
                ORDER BY seq LIMIT 64
                """, [join.name, String(after)])
            guard !rows.isEmpty else { return }
            for row in rows {
                guard let seq = row[0].flatMap({ Int($0) }) else {
                    throw StoreError.schema("unit after \(after) of join '\(join.name)' has no seq")
                }
                after = seq
                guard let length = row[3].flatMap({ Int($0) }), (0...maxPageBytes).contains(length),
                    let frame = row[2].flatMap(PGConnection.bytea(fromText:)),
                    let bytes = length == 0 ? [] : try? zstd.decompress(frame[...], expectedLength: length, limit: maxPageBytes)
                else { continue }
                var page = Page(seq: seq, source: row[1] ?? "", bytes: bytes)
                page.compression = row[4].flatMap(Compression.init(rawValue:))
                UnitLabels.apply(row[5], to: &page)
                guard page.unreadable == nil else { continue }
                try body(page)
            }
        }
    }
}

extension PGStore {
    /// A single run of `pipeline` (run `runID`) begins or resumes: every unfinished join of the pipeline is
    /// overtaken. No job of it is running (a single run takes the pipeline's run lock whole, a
    /// job shares it), so its units and deferred rows are older than what this run will store:
    /// applied later, by position, they would write older values over newer ones (a join stopped
    /// before its end merge, joined again after a single run, reverted hundreds of rows). Its
    /// deferred tables and queue are dropped, its run marked failed, and a job that joins its
    /// name again is refused, saying so (docs/scale-out.md, "The end of a run"). Returns the
    /// names of the joins overtaken.
    @discardableResult
    func overtakeUnfinishedJoins(of pipeline: String, by runID: String) throws -> [String] {
        let reason = "run \(runID) of pipeline '\(pipeline)' began before it finished and stored newer values"
        let overtaken =
            try connection.execute("SELECT to_regclass('_ingot_joins') IS NOT NULL").first?[0] == "t"
            ? try connection.execute(
                """
                UPDATE _ingot_joins SET status = 'overtaken', error = $2, finished_at = now()
                  WHERE pipeline = $1 AND status IN ('running', 'failed') RETURNING name, id, run_id
                """, [pipeline, reason]) : []
        guard !overtaken.isEmpty else {
            // Keys the merge of a join of another pipeline, or of one overtaken before, dropped:
            // built before this run writes. Under the schema's lock, which a merge takes to drop
            // them: either it sees this run running and drops nothing, or this run sees them.
            try connection.execute(PGStore.schemaLock)
            if try !PGStore.keysToBuild(connection).isEmpty { try buildKeysDropped() }
            return []
        }
        for row in overtaken {
            guard let name = row[0], let ordinal = row[1].flatMap({ Int64($0) }) else { continue }
            try dropExchange(ordinal: ordinal)
            for table in ["_ingot_units", "_ingot_join_kept", "_ingot_join_scopes", "_ingot_join_merged"] {
                try connection.execute("DELETE FROM \(table) WHERE name = $1", [name])
            }
            if let joinRun = row[2] {
                try connection.execute(
                    "UPDATE _ingot_runs SET status = 'failed', finished_at = now() WHERE run_id = $1 AND status <> 'finished'", [joinRun])
            }
        }
        // A merge stopped past dropping a key or a foreign key's index leaves it to be made again.
        try buildKeysDropped()
        return overtaken.compactMap { $0[0] }
    }
}
