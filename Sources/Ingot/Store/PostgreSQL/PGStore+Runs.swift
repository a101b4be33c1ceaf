import Foundation

/// A run's bookkeeping in PostgreSQL (`_ingot_runs`, `_ingot_rejects`, `_ingot_state`), written in
/// the batch's transaction so that a commit always describes its last batch: the run's row, its
/// progress (counters, resume point, rejects, kept values), its end, and the unfinished run
/// `--resume` continues.
extension PGStore {
    func beginRun(_ run: RunBeginning) throws {
        switch run {
        case .new(let id, let pipeline, let startedAt, let archive):
            try beginNewRun(id: id, pipeline: pipeline, startedAt: startedAt, archive: archive)
        case .resumed(let id, let archive):
            try reopenRun(id: id, archive: archive)
        }
    }

    private func beginNewRun(id: String, pipeline: String, startedAt: Date, archive: String?) throws {
        try forgetUnfinishedStagedLoads(of: pipeline)
        try overtakeUnfinishedJoins(of: pipeline, by: id)
        try connection.execute(
            "INSERT INTO _ingot_runs (run_id, pipeline, started_at, status, archive) VALUES ($1, $2, $3, 'running', $4)",
            [id, pipeline, startedAt.runTimestamp, archive])
        try PGStore.forgetPrints(on: connection)
        runID = id
        if case .stagedWithTheRun = load { try makeStaging() }
    }

    private func reopenRun(id: String, archive: String?) throws {
        runID = id
        try takeUpStagedLoad(of: id)
        // Resumed, it writes the source as it is now: newer than any join left unfinished meanwhile.
        if let pipeline = try connection.execute("SELECT pipeline FROM _ingot_runs WHERE run_id = $1", [id]).first?[0] ?? nil {
            try overtakeUnfinishedJoins(of: pipeline, by: id)
        }
        try connection.execute(
            "UPDATE _ingot_runs SET status = 'running', finished_at = NULL, archive = coalesce($1, archive) WHERE run_id = $2",
            [archive, id])
        try PGStore.forgetPrints(on: connection)
    }

    func recordProgress(_ p: RunProgress) throws {
        // A staged load's progress is written when its staging file commits (PGStaging).
        if case .staging(let staging) = load { return try staging.hold(p) }
        try writeProgress(p)
    }

    /// Writes a batch's progress, rejects and kept values, in the open transaction.
    func writeProgress(_ p: RunProgress) throws {
        try recordRejectsAndKept(p, join: nil)
        let c = p.counters
        try connection.execute(
            """
            UPDATE _ingot_runs SET pages = $1, records = $2, inserted = $3, updated = $4, rejected_records = $5, rejected_pages = $6,
              last_seq = coalesce($7, last_seq), resume_state = coalesce($8, resume_state), entity_counts = $9, reject_counts = $10,
              resource_counts = $12
              WHERE run_id = $11
            """,
            [
                String(c.pages), String(c.records), String(c.inserted), String(c.updated), String(c.rejectedRecords),
                String(c.rejectedPages), p.lastSeq.map(String.init), p.resumeState, c.entitiesJSON, c.rejectsJSON, p.runID,
                c.resourcesJSON,
            ])
    }

    /// A batch's rejects and kept values (the incremental cursor), in the open transaction: a
    /// single run's, or (`join`) those of a job of a joined run.
    func recordRejectsAndKept(_ p: RunProgress, join joined: JoinContext?) throws {
        for item in p.kept {
            if let joined {
                // Jobs of a joined run commit their units in any order: the run's cursor is the
                // greatest its jobs saw (compared byte by byte, as the writer compares it), and it
                // moves once, when the run finishes (endJoinedJob) — never past a unit another
                // job has not committed yet. A sync's next URL is said by the delta's last page
                // alone: the greatest of one value.
                try connection.execute(
                    """
                    INSERT INTO _ingot_join_kept (name, pipeline, key, value) VALUES ($1, $2, $3, $4) ON CONFLICT (name, pipeline, key)
                      DO UPDATE SET value = greatest(_ingot_join_kept.value COLLATE "C", excluded.value COLLATE "C")
                    """, [joined.name, item.pipeline, item.key, item.value])
            } else {
                try connection.execute(
                    "INSERT INTO _ingot_state (pipeline, key, value) VALUES ($1, $2, $3) ON CONFLICT (pipeline, key) DO UPDATE SET value = excluded.value",
                    [item.pipeline, item.key, item.value])
            }
        }
        if let joined {
            for (entity, values) in p.scopeValues.sorted(by: { $0.key < $1.key }) where !values.isEmpty {
                try connection.execute(
                    """
                    INSERT INTO _ingot_join_scopes (name, job, entity, value) SELECT $1, $2, $3, v FROM unnest($4::text[]) AS v
                      ON CONFLICT DO NOTHING
                    """,
                    [joined.name, joined.job, String(entity), PGStore.arrayLiteral(values.compactMap(PostgresBackend.parameter).sorted())])
            }
        }
        if !p.rejections.isEmpty {
            var data: [UInt8] = []
            for r in p.rejections {
                let values: [ScalarValue] = [
                    .text(p.runID), .text(r.entity), .text(r.codingPath), .text(r.reason), .text(r.source),
                    r.recordIndex.map { .integer(Int64($0)) } ?? .null, .text(r.raw), r.archive.map { .text($0.path) } ?? .null,
                    r.archive.map { .integer(Int64($0.entry)) } ?? .null, .integer(Int64(r.rawLength)), .text(r.code.rawValue),
                    r.unit.map { .integer(Int64($0)) } ?? .null,
                ]
                PGStore.appendCopyRow(values, to: &data)
            }
            try connection.copy(
                "COPY _ingot_rejects (run_id, entity, coding_path, reason, source, record_index, raw, archive, archive_entry, raw_length, reason_code, unit) FROM STDIN",
                data: data)
        }
    }

    func finishRun(id: String, status: RunStatus, counters c: RunCounters, finishedAt: Date) throws {
        try commit()
        try finishRunRow(id: id, status: status, counters: c, finishedAt: finishedAt)
    }

    /// Records how run `id` ended, in the open transaction if there is one.
    func finishRunRow(id: String, status: RunStatus, counters c: RunCounters, finishedAt: Date) throws {
        try connection.execute(
            """
            UPDATE _ingot_runs SET status = $1, finished_at = $2, pages = $3, records = $4, inserted = $5, updated = $6, deleted = $7,
              rejected_records = $8, rejected_pages = $9, entity_counts = $10, reject_counts = $11, resource_counts = $13
              WHERE run_id = $12
            """,
            [
                status.rawValue, finishedAt.runTimestamp, String(c.pages), String(c.records), String(c.inserted), String(c.updated),
                String(c.deleted), String(c.rejectedRecords), String(c.rejectedPages), c.entitiesJSON, c.rejectsJSON, id,
                c.resourcesJSON,
            ])
    }

    func unfinishedRun(pipeline: String) throws -> UnfinishedRun? {
        let rows = try connection.execute(
            """
            SELECT run_id, status, pages, records, inserted, updated, rejected_records, rejected_pages, last_seq, resume_state,
              entity_counts, reject_counts, resource_counts FROM _ingot_runs WHERE pipeline = $1 AND join_name IS NULL ORDER BY started_at DESC, run_id DESC LIMIT 1
            """, [pipeline])
        guard let row = rows.first, row[1] != "finished", let id = row[0] else { return nil }
        func int(_ k: Int) -> Int { row[k].flatMap { Int($0) } ?? 0 }
        var counters = RunCounters()
        (counters.pages, counters.records, counters.inserted, counters.updated) = (int(2), int(3), int(4), int(5))
        (counters.rejectedRecords, counters.rejectedPages) = (int(6), int(7))
        counters.readEntities(fromJSON: row[10])
        counters.rejectsByReason = RunCounters.rejects(fromJSON: row[11])
        counters.readResources(fromJSON: row[12])
        // A staged load that cannot go on starts again from its first page (PGStaging, "Resume").
        if try !findStagedLoad(of: id) { return UnfinishedRun(runID: id, counters: RunCounters(), lastSeq: 0, resumeState: nil) }
        return UnfinishedRun(runID: id, counters: counters, lastSeq: int(8), resumeState: row[9])
    }
}
