import Dispatch
import Foundation
import Logging
import Synchronization

/// What decides a joined run's result, as a job runs it: the pipeline file's text (its
/// `${VAR}` unexpanded: only `source:` has any), the source it reads (secrets redacted), and
/// the options that change what is accepted. The job that creates a join records it; a job whose
/// spec differs (a rolling update of the pipeline's ConfigMap, another `--pages`) is refused,
/// exit 2, naming what differs: it would write the tables half one way, half the other.
///
/// Secret values (a token, a tenant in a URL's path) are not part of it: no digest of a secret
/// is stored in a database other jobs and people read.
struct JoinSpec: Sendable, Equatable, Codable {
    struct Part: Sendable, Equatable, Codable {
        var name: String
        var value: String
    }

    var parts: [Part]

    init(pipelineText: String, source: String, maxPageBytes: Int) {
        parts = [
            Part(name: "pipeline", value: "sha256:" + SHA256.hex(pipelineText.utf8)),
            Part(name: "source", value: source),
            Part(name: "max_page_bytes", value: "\(maxPageBytes)"),
        ]
    }

    /// The spec as stored in `_ingot_joins.spec`.
    var json: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    init?(json: String) {
        guard let spec = try? JSONDecoder().decode(JoinSpec.self, from: Data(json.utf8)) else { return nil }
        self = spec
    }

    /// SHA-256 of ``json``, shortened to 16 hex digits for messages.
    var digest: String { String(SHA256.hex(json.utf8).prefix(16)) }

    /// What differs between the run's spec and this job's, one `name: the run has …, this job
    /// has …` per part.
    func differences(from run: JoinSpec) -> [String] {
        let mine = Dictionary(parts.map { ($0.name, $0.value) }, uniquingKeysWith: { a, _ in a })
        let theirs = Dictionary(run.parts.map { ($0.name, $0.value) }, uniquingKeysWith: { a, _ in a })
        return Set(mine.keys).union(theirs.keys).sorted().compactMap { name in
            mine[name] == theirs[name] ? nil : "\(name): the run has \(theirs[name] ?? "nothing"), this job has \(mine[name] ?? "nothing")"
        }
    }
}

/// Where a shared run is (`_ingot_joins.status`). `running` → `finished` when its last unit is
/// committed; `running` → `failed` after three fetcher roles in a row failed without a page;
/// `failed` → `running` when a job joins it again (it takes the run up). Unknown text in the row
/// reads as `running`.
enum JoinStatus: String, Sendable {
    case running, finished, failed

    init(_ text: String?) { self = text.flatMap(JoinStatus.init(rawValue:)) ?? .running }
}

/// A job's membership of a run shared by several jobs (`ingot run … --join NAME`): the run's
/// work queue in the database, and this job's leases on it.
///
/// - `_ingot_joins` has one row per join: its run, the next unit to enqueue, the end of the
///   source once seen, and which job fetches (under a lease).
/// - `_ingot_units` has one row per unit (a page of the source): its payload (zstd), and who
///   holds it until when. A unit is claimed with `FOR UPDATE SKIP LOCKED` under a lease the
///   holder renews; a lease that runs out (a job killed, or stalled) hands the unit to another.
///
/// The control connection (claims, lease renewals, the queue's state) is used under a mutex, by
/// the source queue and the lease timer.
final class JoinedRun: Sendable {
    let context: JoinContext
    let runID: String
    /// Whether this job created the join (the others joined it).
    let created: Bool
    /// The join was already finished when this job joined it: there is nothing to do.
    let alreadyFinished: Bool
    /// The run had failed (why, as it was recorded) and this job took it up again.
    let revived: String?
    /// Seconds a claim lasts without renewal.
    let lease: Double
    let url: String
    private let control: Mutex<PGConnection>

    var name: String { context.name }
    var job: String { context.job }

    /// Joins the run named `name` in the database at `url`, creating it (and its run row) when
    /// no job did yet. A join of another pipeline is refused.
    ///
    /// A job whose ``JoinSpec`` differs from the run's is refused (``StoreError/conflict``, exit
    /// 2). A run that failed (its fetchers kept failing, say through an outage) is taken up
    /// again: like `--resume` for a single run, its committed units stay and fetching continues
    /// where the source stood (``revived``).
    init(
        url: String, name: String, pipeline: String, proposedRunID: String, startedAt: Date, lease: Double, model: EntityModel,
        spec: JoinSpec
    ) throws {
        let connection = try PGConnection(url: url)
        try PGStore.applySchema(PGStore.joinSchema(of: model), on: connection)
        let job = JoinedRun.makeJobID()
        let joined = try connection.transaction {
            () throws -> (created: Bool, finished: Bool, revived: String?, id: Int64, runID: String) in
            let created =
                !(try connection.execute(
                    """
                    INSERT INTO _ingot_joins (name, run_id, pipeline, status, spec) VALUES ($1, $2, $3, 'running', $4)
                    ON CONFLICT (name) DO NOTHING RETURNING id
                    """,
                    [name, proposedRunID, pipeline, spec.json])).isEmpty
            if created {
                try connection.execute(
                    "INSERT INTO _ingot_runs (run_id, pipeline, started_at, status, join_name) VALUES ($1, $2, $3, 'running', $4)",
                    [proposedRunID, pipeline, Store.timestamp(startedAt), name])
            }
            guard
                let row = try connection.execute(
                    "SELECT id, run_id, pipeline, status, spec, error FROM _ingot_joins WHERE name = $1 FOR UPDATE", [name]
                ).first,
                let id = row[0].flatMap({ Int64($0) }), let runID = row[1]
            else { throw StoreError.schema("the join '\(name)' vanished while joining it") }
            guard row[2] == pipeline else {
                throw StoreError.conflict(
                    "the join '\(name)' is a run of pipeline '\(row[2] ?? "?")', not '\(pipeline)': use another --join name")
            }
            if let stored = row[4].flatMap(JoinSpec.init(json:)), stored != spec {
                throw StoreError.conflict(
                    "the join '\(name)' runs with spec \(stored.digest), this job's is \(spec.digest): "
                        + spec.differences(from: stored).joined(separator: "; ")
                        + ". Every job of a join must run the same pipeline on the same source; use another --join name for this one")
            }
            let status = JoinStatus(row[3])
            let finished = status == .finished
            var revived: String?
            if status == .failed {
                revived = row[5] ?? "unknown"
                try connection.execute(
                    "UPDATE _ingot_joins SET status = 'running', fetch_failures = 0, error = NULL WHERE name = $1", [name])
                try connection.execute("UPDATE _ingot_runs SET status = 'running', finished_at = NULL WHERE run_id = $1", [runID])
            }
            if !finished {
                try connection.execute("INSERT INTO _ingot_join_jobs (name, job, status) VALUES ($1, $2, 'running')", [name, job])
            }
            return (created, finished, revived, id, runID)
        }
        created = joined.created
        alreadyFinished = joined.finished
        revived = joined.revived
        runID = joined.runID
        context = JoinContext(name: name, job: job, ordinal: joined.id)
        self.lease = lease
        self.url = url
        control = Mutex(connection)
    }

    /// `host-pid-random`: unique among the jobs of a join, and telling where a job ran.
    static func makeJobID() -> String {
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "host"
        return "\(host)-\(getpid())-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
    }

    // MARK: - Units

    /// A unit this job now holds.
    struct Unit {
        var seq: Int
        var claim: Int
        var source: String
        var bytes: [UInt8]
        var oversized: Int?
        /// The job that held it before, when its lease ran out.
        var takenFrom: String?
        /// Why its payload could not be read (the page is rejected with this reason).
        var unreadable: String?
    }

    /// Claims the first unit nobody holds (pending, or its holder's lease ran out), or `nil`.
    func claim(zstd: Zstd, maxPageBytes: Int) throws -> Unit? {
        let rows = try control.withLock { connection in
            try connection.execute(
                """
                UPDATE _ingot_units AS u SET status = 'claimed', job = $2, lease_until = now() + make_interval(secs => $3),
                  claims = u.claims + 1
                FROM (SELECT seq, job FROM _ingot_units WHERE name = $1 AND status <> 'done'
                        AND (status = 'pending' OR lease_until < now()) ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) AS c
                WHERE u.name = $1 AND u.seq = c.seq RETURNING u.seq, u.source, u.payload, u.length, u.oversized, c.job, u.claims
                """, [name, job, String(lease)])
        }
        guard let row = rows.first, let seq = row[0].flatMap({ Int($0) }) else { return nil }
        var unit = Unit(
            seq: seq, claim: row[6].flatMap { Int($0) } ?? 0, source: row[1] ?? "?", bytes: [], oversized: row[4].flatMap { Int($0) },
            takenFrom: row[5])
        // The row is input like any other: its length is believed only up to this job's
        // max_page_bytes, and a payload that cannot be read is a rejected page, not a failure.
        if unit.oversized != nil { return unit }
        guard let length = row[3].flatMap({ Int($0) }), length >= 0 else {
            unit.unreadable = "its length '\(row[3] ?? "NULL")' is not one"
            return unit
        }
        guard length <= maxPageBytes else {
            unit.oversized = length
            return unit
        }
        guard let frame = row[2].flatMap(PGConnection.bytea(fromText:)) else {
            unit.unreadable = "its payload is not readable"
            return unit
        }
        do {
            unit.bytes = frame.isEmpty && length == 0 ? [] : try zstd.decompress(frame[...], expectedLength: length, limit: maxPageBytes)
        } catch {
            unit.unreadable = "\(error)"
        }
        return unit
    }

    /// The queue as a job deciding what to do next sees it.
    struct QueueState {
        var status: JoinStatus
        var error: String?
        /// The first seq past the source's end, once the fetcher saw it.
        var endSeq: Int?
        /// A job holds the fetcher's role under a live lease.
        var fetching: Bool
        /// Units not done and not held by this job.
        var openElsewhere: Int
        /// Units not yet claimed by anyone.
        var pending: Int
    }

    func state() throws -> QueueState {
        let rows = try control.withLock { connection in
            try connection.execute(
                """
                SELECT j.status, j.error, j.end_seq, j.fetcher IS NOT NULL AND j.fetch_lease_until >= now(),
                  (SELECT count(*) FROM _ingot_units u WHERE u.name = j.name AND u.status <> 'done' AND u.job IS DISTINCT FROM $2),
                  (SELECT count(*) FROM _ingot_units u WHERE u.name = j.name AND u.status = 'pending')
                FROM _ingot_joins j WHERE j.name = $1
                """, [name, job])
        }
        guard let row = rows.first else { throw StoreError.schema("the join '\(name)' vanished") }
        return QueueState(
            status: JoinStatus(row[0]), error: row[1], endSeq: row[2].flatMap { Int($0) }, fetching: row[3] == "t",
            openElsewhere: row[4].flatMap { Int($0) } ?? 0, pending: row[5].flatMap { Int($0) } ?? 0)
    }

    /// Takes the fetcher's role when nobody holds it under a live lease and the source is not
    /// finished: returns the seq to enqueue next and where the source continues.
    func takeFetcherRole() throws -> (nextSeq: Int, state: String?)? {
        let rows = try control.withLock { connection in
            try connection.execute(
                """
                UPDATE _ingot_joins SET fetcher = $2, fetch_lease_until = now() + make_interval(secs => $3)
                WHERE name = $1 AND status = 'running' AND end_seq IS NULL AND (fetcher IS NULL OR fetch_lease_until < now())
                RETURNING next_seq, fetch_state
                """, [name, job, String(lease)])
        }
        guard let row = rows.first, let next = row[0].flatMap({ Int($0) }) else { return nil }
        return (next, row[1])
    }

    /// Renews this job's leases: the units it holds and the fetcher's role. Units being
    /// committed (locked by the writer's transaction) are skipped, not waited for.
    func renewLeases() throws {
        try control.withLock { connection in
            try connection.execute(
                """
                UPDATE _ingot_units SET lease_until = now() + make_interval(secs => $3)
                WHERE (name, seq) IN (SELECT name, seq FROM _ingot_units WHERE name = $1 AND job = $2 AND status = 'claimed'
                                      FOR UPDATE SKIP LOCKED)
                """, [name, job, String(lease)])
            try connection.execute(
                "UPDATE _ingot_joins SET fetch_lease_until = now() + make_interval(secs => $3) WHERE name = $1 AND fetcher = $2",
                [name, job, String(lease)])
        }
    }

    /// Gives the fetcher's role back (this job stops), so that another job takes it at once.
    func releaseFetcherRole() {
        _ = try? control.withLock { connection in
            try connection.execute(
                "UPDATE _ingot_joins SET fetcher = NULL, fetch_lease_until = NULL WHERE name = $1 AND fetcher = $2", [name, job])
        }
    }

    /// Records that this job's fetching failed: the role is given back for another job to retry
    /// from where the source stood. Three fetcher roles in a row that failed without enqueuing a
    /// page fail the run (a page enqueued resets the count); a job joining it later takes it up
    /// again, as `--resume` does for a single run.
    func recordFetchFailure(_ error: any Error) {
        _ = try? control.withLock { connection in
            try connection.execute(
                """
                UPDATE _ingot_joins SET fetcher = NULL, fetch_lease_until = NULL, fetch_failures = fetch_failures + 1, error = $3,
                  status = CASE WHEN fetch_failures + 1 >= 3 THEN 'failed' ELSE status END
                WHERE name = $1 AND fetcher = $2
                """, [name, job, "\(error)"])
        }
    }
}

/// The pages of a joined run, as one job's pipeline reads them: each ``next()`` claims a unit
/// from the queue. When nobody fetches and the source is not finished, this job takes the
/// fetcher's role: a thread of its own reads `upstream` (the pipeline's source), compresses each
/// page and enqueues it, one transaction per page, with where the source continues (so that a
/// job taking the role over resumes there). ``next()`` returns `nil` once the source is finished
/// and every unit is done or held by this job; it waits while other jobs hold units (their
/// leases may run out and hand them over).
final class JoinedPageSource: PageSource, @unchecked Sendable {  // `next()` on the source queue; shared state under `fetch`'s mutex
    let run: JoinedRun
    private let upstream: any PageSource
    private let maxPageBytes: Int
    private let cancelled = StopFlag()
    private let zstd = Zstd(level: 1)
    private let logger = Mutex(Logger(label: "ingot"))
    /// Pages enqueued ahead of the jobs at most, before the fetcher waits.
    private let ahead: Int
    private let fetchQueue = DispatchQueue(label: "ingot.join.fetch", qos: .userInitiated)
    private let fetch = Mutex(FetchState.idle)
    private let renewal: any DispatchSourceTimer
    /// Called before ``next()`` waits for work: the pipeline hands its open batch to the writer
    /// (other jobs may be waiting for the units in it).
    private let idleHandler = Mutex<(@Sendable () -> Void)?>(nil)

    /// Sets what ``next()`` calls before it waits.
    func whenIdle(_ handler: @escaping @Sendable () -> Void) {
        idleHandler.withLock { $0 = handler }
    }

    enum FetchState {
        case idle
        case fetching
        case failed(any Error)
    }

    init(run: JoinedRun, upstream: any PageSource, maxPageBytes: Int, ahead: Int = 64) {
        self.run = run
        self.upstream = upstream
        self.maxPageBytes = maxPageBytes
        self.ahead = max(1, ahead)
        renewal = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "ingot.join.lease"))
        let interval = max(0.05, run.lease / 3)
        renewal.schedule(deadline: .now() + interval, repeating: interval)
        renewal.setEventHandler { [weak self] in
            guard let self else { return }
            do {
                try self.run.renewLeases()
            } catch {
                self.logger.withLock { $0 }.warning("join.lease_failed", metadata: [LogKey.error: "\(error)"])
            }
        }
        renewal.resume()
    }

    func useLogger(_ logger: Logger) {
        self.logger.withLock { $0 = logger }
        upstream.useLogger(logger)
    }

    func useMetrics(_ metrics: any FetchObserver) { upstream.useMetrics(metrics) }

    func cancel() {
        cancelled.value.withLock { $0 = true }
        upstream.cancel()
    }

    /// Stops renewing leases and waits for the fetcher thread; gives the fetcher's role back if
    /// this job still holds it.
    func close() {
        cancel()
        fetchQueue.sync {}
        renewal.cancel()
        run.releaseFetcherRole()
    }

    private var isCancelled: Bool { cancelled.value.withLock { $0 } }

    func next() throws -> Page? {
        var idle = 0.002
        while true {
            if isCancelled { throw SourceError(source: "join \(run.name)", message: "stopped") }
            if case .failed(let error) = fetch.withLock({ $0 }) { throw error }
            if let unit = try run.claim(zstd: zstd, maxPageBytes: maxPageBytes) {
                let logger = self.logger.withLock { $0 }
                if let previous = unit.takenFrom {
                    logger.notice("unit.taken_over", metadata: [LogKey.seq: .int(unit.seq), "from_job": "\(previous)"])
                } else if logger.logLevel <= .debug {
                    logger.debug("unit.claimed", metadata: [LogKey.seq: .int(unit.seq)])
                }
                var page = Page(seq: unit.seq, source: unit.source, bytes: unit.bytes)
                page.unit = UnitRef(seq: unit.seq, claim: unit.claim)
                page.oversized = unit.oversized
                page.unreadable = unit.unreadable.map { "unit \(unit.seq) of join '\(run.name)' cannot be read: \($0)" }
                return page
            }
            let state = try run.state()
            switch state.status {
            case .finished: return nil
            case .failed: throw JoinError.runFailed(state.error ?? "unknown")
            case .running: break
            }
            if state.endSeq != nil && state.openElsewhere == 0 { return nil }
            if state.endSeq == nil && !state.fetching, case .idle = fetch.withLock({ $0 }), let role = try run.takeFetcherRole() {
                startFetching(from: role.nextSeq, state: role.state)
                idle = 0.002
                continue
            }
            // Pages still being decoded reach the batch later: ask at every wait.
            idleHandler.withLock { $0 }?()
            Thread.sleep(forTimeInterval: idle)
            idle = min(idle * 2, 0.02)
        }
    }

    // MARK: - The fetcher

    private func startFetching(from first: Int, state: String?) {
        fetch.withLock { $0 = .fetching }
        let logger = self.logger.withLock { $0 }
        logger.info("join.fetching", metadata: [LogKey.seq: .int(first), "resume_state": "\(state ?? "start")"])
        fetchQueue.async { [self] in
            do {
                let ended = try fetchAll(from: first, state: state)
                if let ended { logger.info("join.fetched", metadata: [LogKey.pages: .int(ended - 1)]) }
                fetch.withLock { $0 = .idle }
            } catch {
                if isCancelled {
                    fetch.withLock { $0 = .idle }
                    return
                }
                logger.error("join.fetch_failed", metadata: [LogKey.error: "\(error)"])
                run.recordFetchFailure(error)
                fetch.withLock { $0 = .failed(error) }
            }
        }
    }

    private func pendingUnits(_ connection: PGConnection) throws -> Int {
        try connection.execute(
            "SELECT count(*) FROM _ingot_units WHERE name = $1 AND status = 'pending'", [run.name]
        ).first?[0].flatMap { Int($0) } ?? 0
    }

    /// Reads the source from `state`, enqueuing pages from `first`; returns the end seq when the
    /// source ended, `nil` when the role was lost or the job stops.
    private func fetchAll(from first: Int, state: String?) throws -> Int? {
        let connection = try PGConnection(url: run.url)
        if let state { try upstream.resume(from: state) }
        let compressor = Zstd(level: 1)
        var seq = first
        var checked = first - ahead
        while !isCancelled {
            // Every quarter of `ahead` pages, wait while the jobs are that far behind.
            if seq - checked >= ahead / 4 {
                var idle = 0.002
                while !isCancelled, try pendingUnits(connection) >= ahead {
                    Thread.sleep(forTimeInterval: idle)
                    idle = min(idle * 2, 0.05)
                }
                checked = seq
            }
            guard let page = try upstream.next() else {
                let held = try connection.changes(
                    "UPDATE _ingot_joins SET end_seq = $3, fetcher = NULL WHERE name = $1 AND fetcher = $2 AND next_seq = $3",
                    [run.name, run.job, String(seq)])
                return held == 1 ? seq : nil
            }
            let payload = page.bytes.isEmpty ? [] : try compressor.compress(page.bytes)
            // One statement: the join moves on only if this job still fetches, and the unit is
            // enqueued with it.
            let enqueued = try connection.changes(
                """
                WITH j AS (UPDATE _ingot_joins SET next_seq = $3 + 1, fetch_state = coalesce($4, fetch_state),
                             fetch_lease_until = now() + make_interval(secs => $5), fetch_failures = 0
                           WHERE name = $1 AND fetcher = $2 AND next_seq = $3 RETURNING name)
                INSERT INTO _ingot_units (name, seq, status, source, payload, length, oversized)
                  SELECT $1, $3, 'pending', $6, $7, $8, $9 FROM j
                """,
                [
                    run.name, run.job, String(seq), page.resumeState, String(run.lease), page.source, PGConnection.byteaText(payload),
                    String(page.bytes.count), page.oversized.map(String.init),
                ])
            guard enqueued == 1 else {
                logger.withLock { $0 }.warning("join.fetch_lost", metadata: [LogKey.seq: .int(seq)])
                return nil
            }
            seq += 1
        }
        return nil
    }
}
