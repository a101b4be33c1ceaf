/// When the writer commits its open transaction (docs/concurrency.md): batches share a
/// transaction until `records` records are saved in it, it has been open `interval` seconds
/// (committed then even when no further batch comes: the transaction's first batch asks for a
/// timer), or it keeps more than ``maxRetainedBytes`` of page bytes for a redo (``RedoLog``: a
/// refused value rolls the whole transaction back, and its batches are written again). A shared
/// run's job commits at the end of each unit instead (``Scope/eachUnit``). A value the writer asks
/// after each batch, tested alone (`CommitPolicyTests`).
struct CommitPolicy: Equatable {
    /// The most page bytes of batches an open transaction keeps for a redo. 32 MiB.
    static let maxRetainedBytes = 32 << 20

    /// Records saved in one transaction at most (`--commit-records`).
    let records: Int
    /// Seconds a transaction stays open at most (`--commit-interval`).
    let interval: Double
    let scope: Scope

    /// What a transaction holds.
    enum Scope: Equatable {
        /// Batches, up to its records, its age or its bytes kept for a redo (a single run).
        case batches
        /// The batches of whole units, committed with the last page of each (a shared run's job:
        /// docs/scale-out.md, "One transaction per batch of whole units").
        case eachUnit
    }

    /// When the open transaction's first batch was saved (``RunOptions/timers``' clock); `nil`:
    /// no transaction is open.
    private(set) var openedAt: Double?
    /// The open transaction's number: a timer asked for it commits only while it is still open.
    private(set) var transaction = 0

    init(records: Int, interval: Double, scope: Scope = .batches) {
        self.records = max(1, records)
        self.interval = interval
        self.scope = scope
    }

    /// What the writer does after a batch.
    enum Decision: Equatable {
        /// Commit now.
        case commit
        /// Keep the transaction open; `timer`: the transaction just opened — commit it `interval`
        /// seconds from now unless it was committed before (``isOpen(_:)``).
        case wait(timer: Int?)
    }

    /// After a batch: `records` saved in the open transaction so far, `retainedBytes` of its
    /// pages kept for a redo, at `now`; `endsUnit`: its last page is a unit's last.
    mutating func saved(records saved: Int, retainedBytes: Int = 0, now: Double, endsUnit: Bool = false) -> Decision {
        if scope == .eachUnit { return endsUnit ? .commit : .wait(timer: nil) }
        var timer: Int?
        if openedAt == nil {
            openedAt = now
            timer = transaction
        }
        let age = now - (openedAt ?? now)
        if saved >= records || age >= interval || retainedBytes >= Self.maxRetainedBytes { return .commit }
        return .wait(timer: timer)
    }

    /// The open transaction ended (committed, or rolled back by a commit that failed).
    mutating func ended() {
        transaction += 1
        openedAt = nil
    }

    /// Whether transaction `number` (a timer's) is still the open one.
    func isOpen(_ number: Int) -> Bool { number == transaction && openedAt != nil }
}
