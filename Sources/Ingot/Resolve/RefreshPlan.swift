import Foundation

/// What a finished run keeps of one page, so that the next run over the same pages can leave out
/// the pages that cannot change anything (``RefreshPlan``).
struct PagePrint: Sendable, Equatable {
    /// The page's number in its run (1, 2, …): pages are compared by position.
    var seq: Int
    /// SHA-256 of the page's bytes, as the source read them.
    var digest: [UInt8]
    /// Records in the page (a left-out page still counts them as read).
    var records: Int
    /// Nothing of the page was rejected, skipped, stored as NULL for being invalid or refused by
    /// the database: leaving it out of a rerun loses no line, count or reject.
    var clean: Bool
    /// The rows its records touched, as ``PageFootprint/encoded()`` writes them (a few bytes a
    /// row: a run holds its pages' prints until it ends).
    var footprint: [UInt8]

    /// The rows its records touched (a stored print was read back whole before it is used, so
    /// this cannot fail on one; a footprint that did not decode would stand for no row).
    var rows: PageFootprint { (try? PageFootprint(decoding: footprint)) ?? PageFootprint() }
}

/// The prints of the last run of a pipeline into a database, given back by the store only while
/// they still describe the database: the run finished, nothing ran since (a run that begins —
/// any pipeline, any job — forgets them) and the pipeline file is the same.
struct PreviousPrints: Sendable {
    var runID: String
    /// By position: `prints[k]` is page `k + 1`; their footprints are read when a page needs
    /// them (``footprint``): a run of millions of records does not hold them all.
    var prints: [PagePrint]
    /// The stored footprint of page `seq` (checked readable when the prints were read).
    var footprint: @Sendable (_ seq: Int) throws -> [UInt8]
}

/// Which pages of a rerun can be left out, decided page by page as the source reads them, so that
/// the database ends exactly as a full rerun leaves it.
///
/// The merge rules make a run idempotent: each column and each link set ends with the value of
/// the last record that gives it, so applying a run's records twice in order leaves what applying
/// them once left. A page can therefore be left out when it is byte for byte a page of the last
/// run (same pipeline, nothing written since — ``PreviousPrints``), the unchanged pages coming in
/// the same order as then (``matching(_:_:)``: a file added early in a directory, or one taken
/// out, moves the pages after it without changing them), and none of its rows is *dirty*. Dirty rows are those of the last run's pages that differ now (their
/// old footprints, known before the run from the source's listing) and of this run's changed pages
/// (their new footprints, known once decoded). A dirty row takes every record the run has for it,
/// in order; a row that is not saw only unchanged pages' records, the same as last time: it is
/// already what they make of it. So an unchanged page that holds dirty rows is decoded and its
/// dirty rows alone applied (``Decision/apply(only:)``); one that holds none is left out.
///
/// Thread-safe: the source queue asks ``decide(seq:digest:)``, the assembler reports decoded
/// pages (``absorb(_:)``); a page that is the same waits until every changed page before it has
/// been decoded (their rows decide).
final class RefreshPlan: @unchecked Sendable {  // every field below `condition` is read and written under it
    enum Decision: Sendable, Equatable {
        /// Decode and apply the page: all of it (`nil`), or only these rows (an unchanged page
        /// that shares rows with a change: its other rows are already what it makes of them).
        case apply(only: PageFootprint?)
        /// Leave it out: the last run's print stands for it.
        case leaveOut(PagePrint)
    }

    /// A page the listing found unchanged was read back different, after pages sharing its rows
    /// were left out: the run cannot end exact and stops (the next run reads every page).
    struct ChangedWhileRead: Error, CustomStringConvertible {
        var seq: Int
        var description: String {
            "page \(seq) changed between the refresh's listing and its reading, after pages sharing its rows were left out; run again"
        }
    }

    private let previous: [PagePrint]
    private let footprint: @Sendable (Int) throws -> [UInt8]
    /// For each listed page (by position), the last run's page it is, if it is one.
    private let matches: [Int?]
    private let roots: [Int]
    /// Whether an unchanged page that shares rows with a change may be applied in part (its dirty
    /// rows only): not when rows own others (owned children are replaced with their owner).
    private let appliesInPart: Bool
    /// Pages the listing found the same as the last run's, and the others.
    let samePages: Int
    let changedPages: Int
    private let condition = NSCondition()
    private var dirty = RowSet()
    private var leftOut = RowSet()
    /// Changed pages applied but not yet decoded whole: their rows so far.
    private var pending: [Int: PageFootprint.Gatherer] = [:]

    /// A plan for a run whose source lists `listed` (a digest per page, in order) after the run
    /// `previous`; `roots` maps each entity to the root of its hierarchy (a child entity shares its
    /// parent's rows).
    init(previous: PreviousPrints, listed: [[UInt8]], roots: [Int], appliesInPart: Bool = true) throws {
        self.previous = previous.prints
        self.footprint = previous.footprint
        self.roots = roots
        self.appliesInPart = appliesInPart
        let matches = RefreshPlan.matching(previous.prints, listed)
        self.matches = matches
        var dirty = RowSet()
        let matched = Set(matches.compactMap { $0 })
        for k in previous.prints.indices where !matched.contains(k) {
            dirty.formUnion(try PageFootprint(decoding: previous.footprint(k + 1)), roots: roots)
        }
        self.dirty = dirty
        samePages = matched.count
        changedPages = listed.count - matched.count
    }

    /// Which page of the last run each listed page is: the first clean page with its digest after
    /// the one matched before it, so that the pages matched keep the last run's order (the rows
    /// they alone touch then end as last time). A page matched to none is changed; a last-run
    /// page matched by none is gone or changed: its rows are dirty.
    static func matching(_ previous: [PagePrint], _ listed: [[UInt8]]) -> [Int?] {
        var positions: [[UInt8]: [Int]] = [:]
        for (k, print) in previous.enumerated() where print.clean && !print.digest.isEmpty {
            positions[print.digest, default: []].append(k)
        }
        var next: [[UInt8]: Int] = [:]  // per digest, the first candidate not yet passed
        var last = -1
        return listed.map { digest in
            guard let candidates = positions[digest] else { return nil }
            var c = next[digest, default: 0]
            while c < candidates.count && candidates[c] <= last { c += 1 }
            next[digest] = c
            guard c < candidates.count else { return nil }
            last = candidates[c]
            next[digest] = c + 1
            return last
        }
    }

    /// Whether page `seq`, read with `digest`, is applied or left out. May wait for changed pages
    /// before it to be decoded (``absorb(_:)``); gives up waiting (and applies the page) once
    /// `abandon` says the run is stopping.
    func decide(seq: Int, digest: [UInt8], abandon: () -> Bool) throws -> Decision {
        condition.lock()
        defer { condition.unlock() }
        guard let k = matches[safe: seq - 1] ?? nil, var old = previous[safe: k] else {
            pending[seq] = PageFootprint.Gatherer()
            return .apply(only: nil)
        }
        old.footprint = try footprint(k + 1)
        guard old.digest == digest else {
            // Read back different from its listing: its old rows are dirty from now on, which is
            // too late if pages sharing them were left out already.
            if leftOut.intersects(old.rows, roots: roots) { throw ChangedWhileRead(seq: seq) }
            dirty.formUnion(old.rows, roots: roots)
            pending[seq] = PageFootprint.Gatherer()
            return .apply(only: nil)
        }
        while !pending.isEmpty {
            if abandon() {
                dirty.formUnion(old.rows, roots: roots)
                return .apply(only: nil)
            }
            _ = condition.wait(until: Date(timeIntervalSinceNow: 0.25))
        }
        let rows = old.rows
        if dirty.intersects(rows, roots: roots) {
            // Its dirty rows take all their records, in order: this page's too. Its other rows
            // saw only unchanged pages last time and this time alike: left as they are — or,
            // where rows own others, applied too, and dirty from here on.
            guard appliesInPart else {
                dirty.formUnion(rows, roots: roots)
                return .apply(only: nil)
            }
            // Its rows left as stored count as left out (a page read back changed later must not
            // have needed them).
            leftOut.formUnion(rows.filter { entity, key in !dirty.contains(key, entity: entity, roots: roots) }, roots: roots)
            return .apply(only: dirty.members(of: rows, roots: roots))
        }
        leftOut.formUnion(rows, roots: roots)
        return .leaveOut(old)
    }

    /// A decoded page (or part of one) reached the assembler: a changed page's rows become dirty
    /// once its last part is in. Every page the source read reaches the assembler (rejected ones
    /// too), so no wait in ``decide(seq:digest:abandon:)`` lasts.
    func absorb(_ page: DecodedPage) {
        condition.lock()
        defer { condition.unlock() }
        guard pending[page.seq] != nil else { return }
        if let footprint = page.footprint { pending[page.seq, default: PageFootprint.Gatherer()].add(footprint) }
        if page.isLastPart {
            let rows = pending.removeValue(forKey: page.seq)?.finish() ?? PageFootprint()
            dirty.formUnion(rows, roots: roots)
            condition.broadcast()
        }
    }
}

/// Rows by (entity hierarchy root, identity), as a refresh's dirty set holds them: integer
/// identities in compact sets (``IntegerSet``), others hashed. A child entity's row and its
/// parent's are one row here (they share the identity and the parent's table).
struct RowSet: Sendable {
    private var integers: [Int: IntegerSet] = [:]
    private var others: Set<RowKey> = []
    private(set) var isEmpty = true

    private struct RowKey: Hashable, Sendable {
        var root: Int
        var key: IdentityKey
    }

    /// Adds every row of `footprint`, each under `roots[entity]`.
    mutating func formUnion(_ footprint: PageFootprint, roots: [Int]) {
        for (entity, rows) in footprint.entities {
            let root = roots[safe: entity] ?? entity
            for ints in [rows.mentionedIntegers, rows.namedIntegers] where !ints.isEmpty {
                var set = integers.removeValue(forKey: root) ?? IntegerSet()
                for v in ints { set.insert(v) }
                integers[root] = set
                isEmpty = false
            }
            for key in rows.mentionedOthers + rows.namedOthers {
                others.insert(RowKey(root: root, key: key))
                isEmpty = false
            }
        }
    }

    /// Whether the row `key` of `entity` is in the set.
    func contains(_ key: IdentityKey, entity: Int, roots: [Int]) -> Bool {
        let root = roots[safe: entity] ?? entity
        if case .single(.integer(let v)) = key { return integers[root]?.contains(v) ?? false }
        return others.contains(RowKey(root: root, key: key))
    }

    /// The rows of `footprint` that are in the set.
    func members(of footprint: PageFootprint, roots: [Int]) -> PageFootprint {
        footprint.filter { entity, key in contains(key, entity: entity, roots: roots) }
    }

    /// Whether any row of `footprint` is in the set.
    func intersects(_ footprint: PageFootprint, roots: [Int]) -> Bool {
        guard !isEmpty else { return false }
        for (entity, rows) in footprint.entities {
            let root = roots[safe: entity] ?? entity
            if let set = integers[root] {
                for v in rows.mentionedIntegers where set.contains(v) { return true }
                for v in rows.namedIntegers where set.contains(v) { return true }
            }
            for key in rows.mentionedOthers + rows.namedOthers where others.contains(RowKey(root: root, key: key)) { return true }
        }
        return false
    }
}
