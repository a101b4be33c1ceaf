import Foundation
import Synchronization

/// Where a shared run is (`_ingot_joins.status`). `running` → `finished` when its last unit is
/// committed; `running` → `failed` after three fetcher roles in a row failed without a page;
/// `failed` → `running` when a job joins it again (it takes the run up). Unknown text in the row
/// reads as `running`.
enum JoinStatus: String, Sendable {
    case running, finished, failed
    /// A run of its pipeline began that was not one of its jobs, before it finished: what that
    /// run stored is newer than anything of the join, so the join never writes again
    /// (``PGStore/overtakeUnfinishedJoins(of:by:)``).
    case overtaken

    init(_ text: String?) { self = text.flatMap(JoinStatus.init(rawValue:)) ?? .running }
}

extension PGJoinedStore: SharedRunStore {
    /// Takes the run lock shared, joins (or creates) the run, and writes this store's batches as
    /// the run's units from then on (PGJoinedStore, PGStore+Join.swift).
    func joinRun(_ request: SharedRunRequest) throws -> any SharedRun {
        try tables.lockRuns(of: request.pipeline, timeout: request.lockTimeout, shared: true)
        let run = try PGSharedRun(store: self, request: request)
        joined = run.context
        tables.runID = run.runID
        return run
    }
}

/// A job's membership of a run shared by several jobs (`ingot run … --join NAME`), in
/// PostgreSQL: the run's work queue in the database, and this job's leases on it.
///
/// - `_ingot_joins` has one row per join: its run, the next unit to enqueue, the end of the
///   source once seen, and which job fetches (under a lease).
/// - `_ingot_units` has one row per unit (a page of the source): its payload (zstd), and who
///   holds it until when. A unit is claimed with `FOR UPDATE SKIP LOCKED` under a lease the
///   holder renews; a lease that runs out (a job killed, or stalled) hands the unit to another.
///
/// The control connection (claims, lease renewals, the queue's state, waits for work) is used
/// under a mutex, by the source queue and the lease timer; the fetcher's thread enqueues on a
/// connection of its own (opened when this job takes the role), under another.
final class PGSharedRun: SharedRun {
    let context: JoinContext
    let runID: String
    let created: Bool
    let alreadyFinished: Bool
    let revived: String?
    let lease: Double
    /// Only the first unit not done may be claimed (``SharedRunRequest/commitsInOrder``).
    let commitsInOrder: Bool
    /// The store that joined: its writer connection holds the job's open transaction, and ends
    /// the job's part (``endJob(status:counters:replacing:scopes:maxPageBytes:archive:)``).
    let store: PGJoinedStore
    /// `listening`: the connection `LISTEN`s on ``channel`` (from the first wait for work).
    /// Not private: the tests read the session's prepared statements through it.
    let control: Mutex<(connection: PGConnection, zstd: Zstd, listening: Bool)>
    private let fetcher = Mutex<FetcherLink?>(nil)

    /// The channel every job of every join is told on (its payload: the join's name).
    static let channel = "ingot_units"

    /// The fetcher's connection and compressor.
    private final class FetcherLink: @unchecked Sendable {  // used under `fetcher`'s mutex only
        let connection: PGConnection
        let zstd = Zstd(level: 1)
        init(_ connection: PGConnection) { self.connection = connection }
    }

    var name: String { context.name }
    var job: String { context.job }

    /// Waits on the control connection, which `LISTEN`s from the first wait: woken by
    /// ``notify(on:)`` of any job (a spurious wake only costs a look at the queue); a connection
    /// that cannot listen sleeps instead. The wait holds the connection a slice at a time
    /// (``waitSlice``), so that the lease timer and the job's fetches wait that long at most.
    /// A listener of its own cost the server a backend per job for nothing else (docs/scale-out.md,
    /// "Where the server's time goes now").
    func waitForWork(upTo seconds: Double) {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            let left = deadline.timeIntervalSinceNow
            guard left > 0 else { return }
            let woke = control.withLock { control -> Bool? in
                do {
                    if !control.listening {
                        try control.connection.execute("LISTEN \(PGSharedRun.channel)")
                        control.listening = true
                    }
                    return control.connection.waitForNotification(timeout: min(left, PGSharedRun.waitSlice))
                } catch {
                    return nil
                }
            }
            switch woke {
            case true?: return
            case false?: continue
            case nil:
                Thread.sleep(forTimeInterval: left)
                return
            }
        }
    }

    /// How long a wait for work holds the control connection at a time.
    static let waitSlice = 0.02

    /// Long: waiting jobs are told of new work; they look again this often for leases that
    /// ran out.
    var longestWait: Double { 0.25 }

    /// Tells the waiting jobs there may be work (on `connection`, inside its transaction if it
    /// has one: delivered when it commits).
    static func notify(on connection: PGConnection, _ name: String) {
        _ = try? connection.execute("SELECT pg_notify($1, $2)", [channel, name])
    }

    /// Joins the run `request.name` in the database at `url`, creating it (and its run row) when
    /// no job did yet (``SharedRunStore/joinRun(_:)``).
    init(store: PGJoinedStore, request: SharedRunRequest) throws {
        let tables = store.tables
        let connection = try PGConnection(url: tables.url, role: .queue)
        // A store opened for a joined plan made the work queue's tables with its own.
        if !tables.plan.isJoined { try PGStore.applySchema(PGStore.joinSchema(of: tables.model), on: connection) }
        let job = PGSharedRun.makeJobID()
        let name = request.name
        // Its plan exchanges the rows (a first load from local pages, or `--bulk`; only a model
        // a staged load can write gets such a plan).
        let defers = tables.plan.defersJoinedBatches
        let joined = try connection.transaction {
            try PGSharedRun.join(request, as: job, on: connection) { ordinal in
                // Made by the first job: `ALTER TABLE` locks the table whole even when it
                // changes nothing, so a job joining later waited for every job's open batch (and
                // held the next ones) and told every session to read the table's catalog again.
                let exchange = ExchangeTable(ordinal: ordinal)
                guard defers, try !connection.tableExists(exchange.plainName) else { return [] }
                return exchange.schema
            }
        }
        guard joined.id <= UnitOrder.lastOrdinal else {
            throw StoreError.unsupported(
                "this database has held \(UnitOrder.lastOrdinal) joins, the most its positions can order (UnitOrder): join in a new database"
            )
        }
        created = joined.created
        alreadyFinished = joined.finished
        revived = joined.revived
        runID = joined.runID
        let writes: JoinedWrites =
            request.commitsInOrder ? .inOrder(marksTouched: request.marksTouchedRows) : defers ? .deferred : .positions(.direct)
        context = JoinContext(name: name, job: job, ordinal: joined.id, writes: writes, recordsPath: request.recordsPath)
        lease = request.lease
        commitsInOrder = request.commitsInOrder
        self.store = store
        // Claims, lease renewals and the fetcher's role need not wait for their own flush to
        // disk: a claim a crash loses is a claim whose lease ran out (the holder's commit of the
        // unit then finds it lost), and any commit that depends on one — the unit's rows, marked
        // done — flushes the write-ahead log up to itself, the claim included (the log is
        // written in order). With the flush, each claim took 2 ms, on the source's thread:
        // people-200k's 240 claims were half of a joined job's staging (docs/performance-notes.md).
        try connection.execute("SET synchronous_commit = off")
        // The queue's statements are few and the same all run long: each is planned once, as
        // generic, rather than five times with its values first (the server's rule, then kept
        // generic only if no worse), in every job's session. Their plans never depend on the
        // values: the statuses they compare with are in their text, which the open units'
        // partial index needs. Planning them took about 0.12 of the eight queue sessions' 0.39
        // CPU-seconds at people-200k (docs/scale-out.md, "Where the server's time goes now").
        try connection.execute("SET plan_cache_mode = force_generic_plan")
        control = Mutex((connection, Zstd(), false))
    }

    /// In one transaction: the run `request.name` created when no job did (with its run row),
    /// else found and checked (the same pipeline, the same spec), and taken up again when it had
    /// failed; this job's row added unless the run is finished, and the run's tables for
    /// deferred batches (`making`, given the join's number) made under the join's row lock.
    private static func join(
        _ request: SharedRunRequest, as job: String, on connection: PGConnection, making: (Int64) throws -> [String]
    ) throws -> (created: Bool, finished: Bool, revived: String?, id: Int64, runID: String) {
        let name = request.name
        let created =
            !(try connection.execute(
                """
                INSERT INTO _ingot_joins (name, run_id, pipeline, status, spec) VALUES ($1, $2, $3, 'running', $4)
                ON CONFLICT (name) DO NOTHING RETURNING id
                """,
                [name, request.proposedRunID, request.pipeline, request.specJSON])).isEmpty
        if created {
            try connection.execute(
                "INSERT INTO _ingot_runs (run_id, pipeline, started_at, status, join_name) VALUES ($1, $2, $3, 'running', $4)",
                [request.proposedRunID, request.pipeline, request.startedAt.runTimestamp, name])
            try PGStore.forgetPrints(on: connection)
        }
        guard
            let row = try connection.execute(
                "SELECT id, run_id, pipeline, status, spec, error FROM _ingot_joins WHERE name = $1 FOR UPDATE", [name]
            ).first,
            let id = row[0].flatMap({ Int64($0) }), let runID = row[1]
        else { throw StoreError.schema("the join '\(name)' vanished while joining it") }
        guard row[2] == request.pipeline else {
            throw StoreError.conflict(
                "the join '\(name)' is a run of pipeline '\(row[2] ?? "?")', not '\(request.pipeline)': use another --join name")
        }
        // A spec the store cannot read is one that differs.
        if let refusal = request.refusal(joining: row[4].flatMap(SharedRunRequest.spec(fromJSON:)) ?? [:]) {
            throw StoreError.conflict(refusal)
        }
        let status = JoinStatus(row[3])
        if status == .overtaken {
            throw StoreError.conflict(
                "the join '\(name)' can no longer be joined: \(row[5] ?? "a later run of its pipeline overtook it"). Its deferred rows were dropped; join under another name to run the pipeline again"
            )
        }
        let finished = status == .finished
        var revived: String?
        if status == .failed {
            revived = row[5] ?? "unknown"
            try connection.execute(
                "UPDATE _ingot_joins SET status = 'running', fetch_failures = 0, error = NULL WHERE name = $1", [name])
            try connection.execute("UPDATE _ingot_runs SET status = 'running', finished_at = NULL WHERE run_id = $1", [runID])
            try PGStore.forgetPrints(on: connection)
        }
        if !finished {
            try connection.execute("INSERT INTO _ingot_join_jobs (name, job, status) VALUES ($1, $2, 'running')", [name, job])
            for sql in try making(id) { try connection.execute(sql) }
        }
        return (created, finished, revived, id, runID)
    }

    /// `host-pid-random`: unique among the jobs of a join, and telling where a job ran.
    static func makeJobID() -> String {
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "host"
        return "\(host)-\(getpid())-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
    }

    // MARK: - Units

    func claim(maxPageBytes: Int, before: Int?) throws -> (page: Page, takenFrom: String?)? {
        try control.withLock { control in
            // The unit is chosen once, in a materialized CTE. As a subquery in `FROM`, a plan that
            // rescans it (a nested loop with it inside) runs `LIMIT 1 FOR UPDATE SKIP LOCKED`
            // again for each row, skips the unit it just claimed and claims the next: one
            // statement claimed every pending unit, and the job lost all but the first.
            // The row is then found by its key, `seq = (SELECT seq FROM c)` (evaluated once):
            // joined to the CTE instead, the plan the statement kept from the run's first claims,
            // made while the queue held a few units, scanned all of the join's units at every
            // claim — each claim's cost grew with the run (people-1M, four jobs: 1,275 claims,
            // about 1.5 s of the server's CPU; docs/scale-out.md, "Where the server's time goes now").
            // In order: the first unit not done, or none (it is held, or its job is writing it).
            let first = commitsInOrder ? "AND seq = (SELECT min(seq) FROM _ingot_units WHERE name = $1 AND status <> 'done')" : ""
            let rows = try control.connection.execute(
                """
                WITH c AS MATERIALIZED (SELECT seq, job FROM _ingot_units WHERE name = $1 AND status <> 'done'
                        AND (status = 'pending' OR lease_until < now()) AND ($4::bigint IS NULL OR seq < $4) \(first)
                        ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
                UPDATE _ingot_units AS u SET status = 'claimed', job = $2, lease_until = now() + make_interval(secs => $3),
                  claims = u.claims + 1
                WHERE u.name = $1 AND u.seq = (SELECT seq FROM c)
                RETURNING u.seq, u.source, u.payload, u.length, u.oversized, (SELECT job FROM c), u.claims, u.compression, u.labels
                """, [name, job, String(lease), before.map(String.init)])
            guard let row = rows.first, let seq = row[0].flatMap({ Int($0) }) else { return nil }
            // Never more than one; if a server ever returned more, they go back to the queue
            // rather than stay held by a job that will not decode them.
            let extra = rows.dropFirst().compactMap { row in
                row[0].flatMap { Int($0) }.map { UnitRef(seq: $0, claim: row[6].flatMap { Int($0) } ?? 0) }
            }
            if !extra.isEmpty {
                try control.connection.execute(
                    """
                    UPDATE _ingot_units AS u SET status = 'pending', job = NULL, lease_until = NULL
                    FROM unnest($3::bigint[], $4::int[]) AS c(seq, claims)
                    WHERE u.name = $1 AND u.job = $2 AND u.seq = c.seq AND u.claims = c.claims AND u.status = 'claimed'
                    """, [name, job] + PGStore.unitArrays(extra))
            }
            var page = Page(seq: seq, source: row[1] ?? "?", bytes: [])
            page.unit = UnitRef(seq: seq, claim: row[6].flatMap { Int($0) } ?? 0)
            page.oversized = row[4].flatMap { Int($0) }
            // Inflated on the lane that decodes it, bounded by max_page_bytes, as in a single run.
            page.compression = row.count > 7 ? row[7].flatMap(Compression.init(rawValue:)) : nil
            page.unreadable = Self.read(row[2], length: row[3], into: &page, zstd: control.zstd, maxPageBytes: maxPageBytes).map {
                "unit \(seq) of join '\(name)' cannot be read: \($0)"
            }
            if row.count > 8 { UnitLabels.apply(row[8], to: &page) }
            return (page, row[5])
        }
    }

    /// Fills `page` from a unit's row. The row is input like any other: its length is believed
    /// only up to `maxPageBytes`, and a payload that cannot be read is a rejected page (why it
    /// cannot), not a failure.
    private static func read(_ payload: String?, length: String?, into page: inout Page, zstd: Zstd, maxPageBytes: Int) -> String? {
        if page.oversized != nil { return nil }
        guard let length = length.flatMap({ Int($0) }), length >= 0 else { return "its length '\(length ?? "NULL")' is not one" }
        guard length <= maxPageBytes else {
            page.oversized = length
            return nil
        }
        guard let frame = payload.flatMap(PGConnection.bytea(fromText:)) else { return "its payload is not readable" }
        do {
            page.bytes = frame.isEmpty && length == 0 ? [] : try zstd.decompress(frame[...], expectedLength: length, limit: maxPageBytes)
        } catch {
            return "\(error)"
        }
        return nil
    }

    func state() throws -> SharedRunState {
        let rows = try control.withLock { control in
            try control.connection.execute(
                """
                SELECT j.status, j.error, j.end_seq, j.fetcher IS NOT NULL AND j.fetch_lease_until >= now(),
                  (SELECT count(*) FROM _ingot_units u WHERE u.name = j.name AND u.status <> 'done' AND u.job IS DISTINCT FROM $2),
                  (SELECT count(*) FROM _ingot_units u WHERE u.name = j.name AND u.status = 'pending')
                FROM _ingot_joins j WHERE j.name = $1
                """, [name, job])
        }
        guard let row = rows.first else { throw StoreError.schema("the join '\(name)' vanished") }
        switch JoinStatus(row[0]) {
        case .finished: return .finished
        case .failed, .overtaken: return .failed(row[1] ?? "unknown")
        case .running:
            return .running(
                endSeq: row[2].flatMap { Int($0) }, fetching: row[3] == "t", openElsewhere: row[4].flatMap { Int($0) } ?? 0,
                pending: row[5].flatMap { Int($0) } ?? 0)
        }
    }

    /// Units being committed (locked by the writer's transaction) are skipped, not waited for.
    func renewLeases() throws {
        try control.withLock { control in
            try control.connection.execute(
                """
                UPDATE _ingot_units SET lease_until = now() + make_interval(secs => $3)
                WHERE (name, seq) IN (SELECT name, seq FROM _ingot_units WHERE name = $1 AND job = $2 AND status = 'claimed'
                                      FOR UPDATE SKIP LOCKED)
                """, [name, job, String(lease)])
            try control.connection.execute(
                "UPDATE _ingot_joins SET fetch_lease_until = now() + make_interval(secs => $3) WHERE name = $1 AND fetcher = $2",
                [name, job, String(lease)])
        }
    }

    // MARK: - The fetcher's role

    func takeFetcherRole() throws -> (nextSeq: Int, resumeState: String?)? {
        let rows = try control.withLock { control in
            try control.connection.execute(
                """
                UPDATE _ingot_joins SET fetcher = $2, fetch_lease_until = now() + make_interval(secs => $3)
                WHERE name = $1 AND status = 'running' AND end_seq IS NULL AND (fetcher IS NULL OR fetch_lease_until < now())
                RETURNING next_seq, fetch_state
                """, [name, job, String(lease)])
        }
        guard let row = rows.first, let next = row[0].flatMap({ Int($0) }) else { return nil }
        return (next, row[1])
    }

    /// Runs `body` on the fetcher's connection, opening it the first time.
    private func withFetcher<T>(_ body: (PGConnection, Zstd) throws -> T) throws -> T {
        try fetcher.withLock { fetcher in
            let link: FetcherLink
            if let fetcher {
                link = fetcher
            } else {
                let connection = try PGConnection(url: store.tables.url, role: .fetcher)
                // An enqueue need not wait for its own flush to disk: a job that commits a unit
                // flushes the write-ahead log up to its commit, the enqueue included (the log is
                // written in order), and an enqueue a crash loses is one that did not happen —
                // the unit, the source's next position and the fetcher's state go together.
                // With the flush, the fetcher fell behind a job decoding local pages (people-200k:
                // 240 flushes, 0.9 s).
                try connection.execute("SET synchronous_commit = off")
                link = FetcherLink(connection)
            }
            fetcher = link
            return try body(link.connection, link.zstd)
        }
    }

    /// One statement: the join moves on only if this job still fetches, and the units are
    /// enqueued with it; one notification for them all.
    func enqueue(_ pages: [Page], from seq: Int) throws -> Bool {
        guard !pages.isEmpty else { return true }
        return try withFetcher { connection, zstd in
            var payloads: [ScalarValue] = []
            for page in pages {
                payloads.append(.text(PGConnection.byteaText(page.bytes.isEmpty ? [] : try zstd.compress(page.bytes))))
            }
            func texts(_ value: (Page) -> String?) -> String {
                PGStore.arrayLiteral(pages.map { value($0).map(ScalarValue.text) ?? .null })
            }
            let enqueued =
                try connection.changes(
                    """
                    WITH j AS (UPDATE _ingot_joins SET next_seq = $3 + $12, fetch_state = coalesce($4, fetch_state),
                                 fetch_lease_until = now() + make_interval(secs => $5), fetch_failures = 0
                               WHERE name = $1 AND fetcher = $2 AND next_seq = $3 RETURNING name)
                    INSERT INTO _ingot_units (name, seq, status, source, payload, length, oversized, compression, labels)
                      SELECT $1, $3 + u.k - 1, 'pending', u.source, u.payload, u.length, u.oversized, u.compression, u.labels
                      FROM j, unnest($6::text[], $7::bytea[], $8::bigint[], $9::bigint[], $10::text[], $11::text[])
                        WITH ORDINALITY AS u(source, payload, length, oversized, compression, labels, k)
                    """,
                    [
                        name, job, String(seq), pages.last?.resumeState, String(lease), texts(\.source), PGStore.arrayLiteral(payloads),
                        texts { String($0.bytes.count) }, texts { $0.oversized.map(String.init) }, texts { $0.compression?.rawValue },
                        texts { UnitLabels(of: $0).json }, String(pages.count),
                    ]) == pages.count
            if enqueued { PGSharedRun.notify(on: connection, name) }
            return enqueued
        }
    }

    func keepFetched(_ page: Page) throws -> Bool {
        guard let unit = page.unit else { return false }
        return try control.withLock { control in
            let payload = page.bytes.isEmpty ? [] : try control.zstd.compress(page.bytes)
            return try control.connection.changes(
                """
                UPDATE _ingot_units SET payload = $5, length = $6, oversized = $7, compression = $8, source = $9, labels = $10
                  WHERE name = $1 AND seq = $2 AND job = $3 AND claims = $4 AND status = 'claimed'
                """,
                [
                    name, String(unit.seq), job, String(unit.claim), PGConnection.byteaText(payload), String(page.bytes.count),
                    page.oversized.map(String.init), page.compression?.rawValue, page.source, UnitLabels(of: page).json,
                ]) == 1
        }
    }

    func pauseRequests(for seconds: Double) throws {
        guard seconds > 0, seconds.isFinite else { return }
        _ = try control.withLock { control in
            try control.connection.execute(
                """
                UPDATE _ingot_joins SET pause_until = greatest(pause_until, now() + make_interval(secs => $2::float8))
                  WHERE name = $1
                """, [name, String(seconds)])
        }
    }

    func requestPause() throws -> Double {
        let rows = try control.withLock { control in
            try control.connection.execute(
                "SELECT greatest(0, extract(epoch FROM pause_until - now())) FROM _ingot_joins WHERE name = $1", [name])
        }
        guard let text = rows.first?[0] ?? nil else { return 0 }
        return Double(text) ?? 0
    }

    /// Under the join's row lock, so that two jobs settling empty pages take turns: the end
    /// only ever moves down, and a page past it leaves the queue.
    func settleEnd(of unit: UnitRef) throws -> SourceEndSettlement {
        try control.withLock { control in
            let connection = control.connection
            return try connection.transaction {
                let end = try connection.execute("SELECT end_seq FROM _ingot_joins WHERE name = $1 FOR UPDATE", [name]).first?[0]
                    .flatMap { Int($0) }
                let keys = [name, String(unit.seq), job]
                if let end, end <= unit.seq {
                    try connection.execute(
                        "DELETE FROM _ingot_units WHERE name = $1 AND seq = $2 AND job = $3 AND claims = $4 AND status = 'claimed'",
                        keys + [String(unit.claim)])
                    return .pastTheEnd
                }
                let open = try connection.execute(
                    """
                    SELECT EXISTS (SELECT 1 FROM _ingot_units WHERE name = $1 AND seq < $2 AND status <> 'done'
                                     AND job IS DISTINCT FROM $3)
                    """, keys)
                if open.first?[0] == "t" { return .earlierUnitsOpen }
                try connection.execute(
                    """
                    UPDATE _ingot_joins SET end_seq = $2::bigint + 1, fetcher = NULL, fetch_lease_until = NULL WHERE name = $1
                    """, [name, String(unit.seq)])
                try connection.execute(
                    "DELETE FROM _ingot_units WHERE name = $1 AND seq > $2 AND status = 'pending'", [name, String(unit.seq)])
                PGSharedRun.notify(on: connection, name)
                return .ends
            }
        }
    }

    func endSource(at seq: Int) throws -> Bool {
        try withFetcher { connection, _ in
            let ended =
                try connection.changes(
                    "UPDATE _ingot_joins SET end_seq = $3, fetcher = NULL WHERE name = $1 AND fetcher = $2 AND next_seq = $3",
                    [name, job, String(seq)]) == 1
            if ended { PGSharedRun.notify(on: connection, name) }
            return ended
        }
    }

    func releaseFetcherRole() {
        _ = try? control.withLock { control in
            try control.connection.execute(
                "UPDATE _ingot_joins SET fetcher = NULL, fetch_lease_until = NULL WHERE name = $1 AND fetcher = $2", [name, job])
            PGSharedRun.notify(on: control.connection, name)
        }
    }

    /// A page enqueued resets the count of failed roles; a job joining a failed run later takes
    /// it up again, as `--resume` does for a single run.
    func recordFetchFailure(_ message: String) {
        _ = try? control.withLock { control in
            try control.connection.execute(
                """
                UPDATE _ingot_joins SET fetcher = NULL, fetch_lease_until = NULL, fetch_failures = fetch_failures + 1, error = $3,
                  status = CASE WHEN fetch_failures + 1 >= 3 THEN 'failed' ELSE status END
                WHERE name = $1 AND fetcher = $2
                """, [name, job, message])
            PGSharedRun.notify(on: control.connection, name)
        }
    }

    // MARK: - The end

    func endJob(
        status: RunStatus, counters: RunCounters, replacing: [Int], scopes: [Int: String], maxPageBytes: Int,
        archive: ((_ unit: Page) throws -> [Page])?
    ) throws -> SharedRunEnd {
        // What the job still holds uncommitted is committed first, as the job's own.
        try store.commit()
        return try store.tables.endJoinedJob(
            context, runID: runID, status: status, counters: counters, replacing: replacing, scopes: scopes,
            maxPageBytes: maxPageBytes, archive: archive)
    }
}
