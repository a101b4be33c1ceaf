import Foundation

// A run shared by several jobs (`ingot run --join NAME`, docs/scale-out.md), as a store offers
// it: the run's work queue (units: the pages of the shared source, claimed under leases), its
// fetcher's role, and the end of a job's part. The pipeline drives it (its page source and lease
// timer live in Pipeline/SharedRunSource.swift) and never names a backend: PostgreSQL implements
// it (Store/PostgreSQL/PGSharedRun.swift), and so does the tests' memory store.

/// A store that several jobs can share one run in: each job runs the whole pipeline, the pages
/// come from the run's work queue, and whatever job commits which unit in whatever order, the
/// tables end as one job alone leaves them.
public protocol SharedRunStore: IngestStore {
    /// Takes the pipeline's run lock shared with the run's other jobs (single runs are excluded),
    /// then joins the run `request.name`, creating it when no job did yet. From then on this
    /// store writes each batch as the units it holds: it marks them done in the batch's
    /// transaction (a unit this job no longer holds throws ``StoreError/Kind/claimLost`` and rolls
    /// the transaction back), and a unit's values win over those of every earlier unit only.
    ///
    /// Refused with ``StoreError/Kind/conflict`` when the run belongs to another pipeline or its
    /// ``SharedRunRequest/spec`` differs from this job's. A run that failed is taken up again
    /// (``SharedRun/revived``).
    func joinRun(_ request: SharedRunRequest) throws -> any SharedRun
}

/// What a job asks for when it joins a shared run.
public struct SharedRunRequest: Sendable {
    /// The run's name (`--join NAME`): the jobs that give the same name share the run.
    public var name: String
    /// The pipeline's name: a run of another pipeline is refused.
    public var pipeline: String
    /// The run id this job gives the run when it creates it.
    public var proposedRunID: String
    /// When this job started.
    public var startedAt: Date
    /// Seconds a claim lasts without renewal (``SharedRun/renewLeases()``).
    public var lease: Double
    /// Seconds to wait for the run lock (a single run of the pipeline holding it).
    public var lockTimeout: Double
    /// What decides the run's result, by name (the pipeline file's digest, the source, the
    /// options that change what is accepted): every job of a run must give the same. No secret
    /// belongs here: the store keeps it where other jobs and people read it.
    public var spec: [String: String]
    /// Units are committed in the run's order (docs/scale-out.md, "Units committed in order"): a
    /// job claims the first unit not done only, so the tables take every unit's writes in the
    /// order a single run makes them. For a pipeline whose outcome depends on that order.
    public var commitsInOrder = false
    /// In a run committed in order, each unit still marks the rows it touches (their `@`
    /// position), for `write: replace` at the run's end to tell the rows no unit touched. A run
    /// in any order marks every row it writes anyway.
    public var marksTouchedRows = false
    /// Where a page's records are (`$.results`): a row the database refuses when the run's
    /// exchanged rows are written, once every unit is done, is rejected naming its record there.
    public var recordsPath = ""

    /// A request to join `name`.
    public init(
        name: String, pipeline: String, proposedRunID: String, startedAt: Date, lease: Double, lockTimeout: Double,
        spec: [String: String]
    ) {
        self.name = name
        self.pipeline = pipeline
        self.proposedRunID = proposedRunID
        self.startedAt = startedAt
        self.lease = lease
        self.lockTimeout = lockTimeout
        self.spec = spec
    }

    /// ``spec`` as a store keeps it: a JSON object, keys sorted.
    public var specJSON: String { Self.json(of: spec) }

    private static func json(of spec: [String: String]) -> String {
        var out = "{"
        for (k, (name, value)) in spec.sorted(by: { $0.key < $1.key }).enumerated() {
            if k > 0 { out += "," }
            JSONText.quote(name, into: &out)
            out += ":"
            JSONText.quote(value, into: &out)
        }
        return out + "}"
    }

    /// Reads ``specJSON`` back; `nil` when the text is not one.
    public static func spec(fromJSON text: String) -> [String: String]? {
        guard let document = try? JSONDocument(bytes: Array(text.utf8)), document.root.kind == .object else { return nil }
        var spec: [String: String] = [:]
        for (name, value) in document.root.members {
            guard let key = name.string, let text = value.string else { return nil }
            spec[key] = text
        }
        return spec
    }

    /// Why a job with this request cannot join a run whose spec is `stored`, or `nil` when it
    /// can: the digests of both, and per part `NAME: the run has …, this job has …`.
    public func refusal(joining stored: [String: String]) -> String? {
        guard stored != spec else { return nil }
        let differences = Set(spec.keys).union(stored.keys).sorted().compactMap { name in
            spec[name] == stored[name] ? nil : "\(name): the run has \(stored[name] ?? "nothing"), this job has \(spec[name] ?? "nothing")"
        }
        func digest(_ spec: [String: String]) -> String { String(SHA256.hex(Self.json(of: spec).utf8).prefix(16)) }
        return "the join '\(name)' runs with spec \(digest(stored)), this job's is \(digest(spec)): "
            + differences.joined(separator: "; ")
            + ". Every job of a join must run the same pipeline on the same source; use another --join name for this one"
    }
}

/// Where a shared run stands, as a job deciding what to do next sees it.
public enum SharedRunState: Sendable, Equatable {
    /// Jobs are still at work. `endSeq`: the first unit past the source's end, once the fetcher
    /// saw it; `fetching`: a job holds the fetcher's role under a live lease; `openElsewhere`:
    /// units not done and not held by this job; `pending`: units nobody claimed yet.
    case running(endSeq: Int?, fetching: Bool, openElsewhere: Int, pending: Int)
    /// Every unit is committed and a job finished the run.
    case finished
    /// The run failed (its source failed three fetcher roles in a row), and why.
    case failed(String)
}

/// Whether an empty numbered page a job fetched ends a shared run's source
/// (``SharedRun/settleEnd(of:)``).
public enum SourceEndSettlement: Sendable, Equatable {
    /// It does: the source ends just past it, and the page is committed as a single run's last.
    case ends
    /// An earlier page ended the source: this one is let go, neither counted nor archived.
    case pastTheEnd
    /// Units before it are still open and held by other jobs: ask again once they are done.
    case earlierUnitsOpen
}

/// A job's membership of a shared run (``SharedRunStore/joinRun(_:)``): the run's work queue and
/// this job's leases on it. Every method may be called from any thread; the store serialises
/// what needs it.
public protocol SharedRun: AnyObject, Sendable {
    /// The run's id (the one its creator proposed).
    var runID: String { get }
    /// The run's name (`--join NAME`).
    var name: String { get }
    /// This job's id among the run's jobs (host, process, random suffix): who holds a unit.
    var job: String { get }
    /// Whether this job created the run (the others joined it).
    var created: Bool { get }
    /// The run was finished before this job joined it: there is nothing to do.
    var alreadyFinished: Bool { get }
    /// The run had failed (why, as it was recorded) and this job took it up again.
    var revived: String? { get }
    /// Seconds a claim lasts without renewal.
    var lease: Double { get }

    // MARK: Units

    /// Claims the first unit nobody holds (pending, or its holder's lease ran out) and returns
    /// it as a page with its ``Page/unit`` set, and the job that held it before when its lease
    /// ran out; `nil` when none is open. `before`: only a unit before that one (a job whose empty
    /// page waits for the units before it takes them over, and none after it). A unit's stored
    /// length is believed only up to `maxPageBytes` (beyond: ``Page/oversized``), and a payload
    /// that cannot be read is a page with ``Page/unreadable`` set: the unit is input like any other.
    func claim(maxPageBytes: Int, before: Int?) throws -> (page: Page, takenFrom: String?)?
    /// Where the run stands.
    func state() throws -> SharedRunState
    /// Renews this job's leases: the units it holds and the fetcher's role.
    func renewLeases() throws

    // MARK: The fetcher's role

    /// Takes the fetcher's role when nobody holds it under a live lease and the source is not
    /// finished: the unit to enqueue next, and where the source continues (`nil`: its start).
    func takeFetcherRole() throws -> (nextSeq: Int, resumeState: String?)?
    /// Enqueues `pages` as units `seq`, `seq + 1`, … in one step (with where the source
    /// continues after the last), and renews the fetcher's lease; `false` when this job no
    /// longer holds the role (nothing is enqueued).
    func enqueue(_ pages: [Page], from seq: Int) throws -> Bool
    /// Keeps the payload this job fetched for a request unit it holds (``Page/request``, `page.unit`
    /// says which claim): the run's archive is written from the work queue, and a job that takes
    /// the unit over decodes what was fetched instead of asking again. `false` when the claim is
    /// no longer this job's.
    func keepFetched(_ page: Page) throws -> Bool
    /// Asks every job of the run to start no request for `seconds` from now: a server answered
    /// one job's request with `Retry-After` (docs/scale-out.md, "Requests any job makes"). A
    /// longer pause asked before stands.
    func pauseRequests(for seconds: Double) throws
    /// How long the run's jobs are still to start no request, in seconds (0: they may), by the
    /// store's clock.
    func requestPause() throws -> Double
    /// Settles whether `unit`, a numbered page this job fetched and found with no record, is
    /// where the run's source ends (docs/scale-out.md, "Numbered pages any job fetches"): only
    /// once every unit before it is done or held by this job, for an earlier empty page ends it
    /// first. When it is the end, the source ends just past it (the fetcher's role is given
    /// back and no job takes it again) and the units after it nobody claimed leave the queue;
    /// when an earlier page ended the source, `unit` leaves the queue (it is neither counted
    /// nor archived, as a single run never asks for it).
    func settleEnd(of unit: UnitRef) throws -> SourceEndSettlement
    /// Records that the source ended before unit `seq` and gives the role back; `false` when
    /// this job no longer held it.
    func endSource(at seq: Int) throws -> Bool
    /// Gives the fetcher's role back (this job stops), so that another job takes it at once.
    func releaseFetcherRole()
    /// Records that this job's fetching failed with `message` and gives the role back. Three
    /// fetcher roles in a row that failed without enqueuing a unit fail the run.
    func recordFetchFailure(_ message: String)

    // MARK: The end

    /// Commits what is open, records how this job's part ended, and — when every unit is
    /// committed and nobody finished the run yet — finishes it: `write: replace` deletes the
    /// rows of each of `replacing` (the replaced entities, by index) no unit touched — within
    /// the values the units' records gave its column in `scopes`, for an entity with a `scope:`
    /// (``RunProgress/scopeValues``) — unless the run rejected something (then says why not),
    /// the jobs' counters are summed into the run's, and `archive` is given every unit's page
    /// in source order before the payloads are dropped; the pages it archived, with their
    /// ``Page/archive``, name the entries of the run's rejections. Says what ending found.
    func endJob(
        status: RunStatus, counters: RunCounters, replacing: [Int], scopes: [Int: String], maxPageBytes: Int,
        archive: ((_ unit: Page) throws -> [Page])?
    ) throws -> SharedRunEnd
    /// Waits for work, up to `seconds`: a unit enqueued or handed back, the source's end, a
    /// job's units committed, the fetcher's role free. A store that can be told (PostgreSQL's
    /// `LISTEN`) returns as soon as that happens; the default sleeps.
    func waitForWork(upTo seconds: Double)
    /// The longest ``waitForWork(upTo:)`` worth asking for: long when the store wakes the job
    /// (leases run out unannounced: a waiting job looks again at least this often), short when
    /// it polls.
    var longestWait: Double { get }
}

/// What a unit of a shared run carries besides its payload, as a work queue keeps it (one JSON
/// text, `nil` when there is nothing): the page's resource by name (``Page/resourceName``: the
/// job that decodes it finds its index, and a name the pipeline lacks makes a rejected page), the
/// values its records take from a `for_each` parent (``Page/injected``), and why the fetcher could
/// not read it (``Page/unreadable``: a detail request answered 404, counted as a single run counts
/// it). A stored text that cannot be read is input like any other: the unit is a rejected page.
struct UnitLabels: Codable, Equatable {
    var resource: String?
    var injected: [InjectedValue]?
    var unreadable: String?
    /// A request the claiming job makes (``Page/request``).
    var request: String?
    /// A numbered page the claiming job fetches (``Page/cursor``).
    var cursor: String?
    /// The pages of a paginated request kept in the unit (``Page/requestPages``).
    var pages: [RequestPage]?
    /// Where the next sync starts, said by the delta's last page (``Page/syncState``): the job
    /// that commits the unit keeps it with the run.
    var sync: String?

    init(of page: Page) {
        resource = page.resourceName
        injected = page.injected.isEmpty ? nil : page.injected
        unreadable = page.unreadable
        request = page.request
        cursor = page.cursor
        pages = page.requestPages
        sync = page.syncState
    }

    /// The labels as stored, or `nil` when the page has none.
    var json: String? {
        guard resource != nil || injected != nil || unreadable != nil || request != nil || cursor != nil || pages != nil || sync != nil,
            let data = try? JSONEncoder().encode(self)
        else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// Sets `page`'s labels from their stored text (`nil`: none); text that cannot be read makes
    /// the page unreadable, saying so.
    static func apply(_ json: String?, to page: inout Page) {
        guard let json else { return }
        guard let labels = try? JSONDecoder().decode(UnitLabels.self, from: Data(json.utf8)) else {
            page.unreadable = "its labels (resource, for_each values) cannot be read"
            return
        }
        page.resourceName = labels.resource
        page.injected = labels.injected ?? []
        page.request = labels.request
        page.cursor = labels.cursor
        page.requestPages = labels.pages
        page.syncState = labels.sync
        if let reason = labels.unreadable { page.unreadable = reason }
    }
}

extension StoreError {
    /// Units `seqs` of a shared run were taken over by other jobs after their leases ran out.
    public static func claimLost(_ seqs: [Int]) -> StoreError {
        var error = StoreError(
            .claimLost,
            message: "units \(seqs.map(String.init).joined(separator: ", ")) were taken over by other jobs after their leases ran out")
        error.units = seqs
        return error
    }
}

extension ResolvedBatch {
    /// In a shared run: the units whose records the batch holds, in order.
    public var units: [UnitRef] { pages.units }
    /// In a shared run: the order key of the batch's last part (``UnitOrder``), where a row no
    /// record of the batch set (a stub) stands; 0 outside one.
    package var lastUnitKey: Int { pages.map(\.unitKey).max() ?? 0 }
}

extension [DecodedPage] {
    /// In a shared run: the pages' units, in order, each once.
    var units: [UnitRef] {
        var seen = Set<UnitRef>()
        return compactMap(\.unit).filter { seen.insert($0).inserted }
    }
}

/// What ending a job's part of a shared run found (``SharedRun/endJob(status:counters:replacing:scopes:maxPageBytes:archive:)``).
public struct SharedRunEnd: Sendable {
    /// This job finished the run: the run's counters, every job's summed (with what the merge of
    /// deferred batches wrote and what `write: replace` deleted).
    public var finished: RunCounters?
    /// Why `write: replace` deleted nothing, when it did not.
    public var replaceSkipped: String?
    /// What this job wrote ending the run: the merge of the run's deferred batches (rows
    /// inserted and updated, per entity too; docs/scale-out.md), and how long it took.
    public var merged = RunCounters()
    /// How long that merge took; `nil` when nothing was deferred.
    public var mergeSeconds: Double?

    /// An end that found what it is given.
    public init(finished: RunCounters? = nil, replaceSkipped: String? = nil) {
        self.finished = finished
        self.replaceSkipped = replaceSkipped
    }
}

extension RunCounters {
    /// Adds another job's counters (a shared run's total).
    public mutating func add(_ other: RunCounters) {
        pages += other.pages
        records += other.records
        inserted += other.inserted
        updated += other.updated
        unchanged += other.unchanged
        deleted += other.deleted
        rejectedRecords += other.rejectedRecords
        rejectedPages += other.rejectedPages
        skippedRecords += other.skippedRecords
        for (name, n) in other.resourcePages { resourcePages[name, default: 0] += n }
        for (name, n) in other.invalidValues { invalidValues[name, default: 0] += n }
        for (name, n) in other.resourceRecords { resourceRecords[name, default: 0] += n }
        bytes += other.bytes
        for (name, counts) in other.entities { entities[name] = (entities[name] ?? EntityCounts()) + counts }
        for (code, count) in other.rejectsByReason { rejectsByReason[code, default: 0] += count }
    }
}

extension SharedRun {
    /// Claims the first unit nobody holds (``claim(maxPageBytes:before:)``).
    func claim(maxPageBytes: Int) throws -> (page: Page, takenFrom: String?)? {
        try claim(maxPageBytes: maxPageBytes, before: nil)
    }

    /// Enqueues `page` alone as unit `seq` (``enqueue(_:from:)``).
    func enqueue(_ page: Page, as seq: Int) throws -> Bool {
        try enqueue([page], from: seq)
    }

    /// Sleeps `seconds`: a store that cannot wake a waiting job polls.
    public func waitForWork(upTo seconds: Double) { Thread.sleep(forTimeInterval: seconds) }
    /// 20 ms: a polling store's longest sleep.
    public var longestWait: Double { 0.02 }
}
