import Foundation

/// The counters of a run, as the summary line and `_ingot_runs` show them.
public struct RunCounters: Sendable, Equatable {
    /// Pages applied (a page in parts counts once).
    public var pages = 0
    /// Of ``pages``, those a refresh left out: byte for byte the last run's, and no row of theirs
    /// touched by a change (their records count as read, their rows as unchanged).
    public var unchangedPages = 0
    /// HTTP requests answered `304 Not Modified`: the body the last run kept was read again
    /// (docs/pipelines.md, "Conditional requests").
    public var notModifiedPages = 0
    /// Records read, rejected ones included.
    public var records = 0
    /// Rows inserted, stubs included.
    public var inserted = 0
    /// Stored rows a record changed (each counted once per run).
    public var updated = 0
    /// Stored rows the run's records mentioned and found equal: not written (each counted once
    /// per run, and not at all once the run changes them).
    public var unchanged = 0
    /// Rows `write: replace` and tombstones (`delete_when:`) deleted.
    public var deleted = 0
    /// Records rejected.
    public var rejectedRecords = 0
    /// Pages rejected whole.
    public var rejectedPages = 0
    /// Records skipped: of a kind the pipeline maps to no entity (`root: {by: …, other: skip}`).
    public var skippedRecords = 0
    /// `on_invalid: null`: values stored as NULL because they could not be converted, per
    /// `entity.attribute`.
    public var invalidValues: [String: Int] = [:]
    /// A pipeline with several resources: pages applied per resource (by name).
    public var resourcePages: [String: Int] = [:]
    /// The same: records read per resource.
    public var resourceRecords: [String: Int] = [:]
    /// Raw page bytes read.
    public var bytes = 0
    /// The same, per entity (by name): rows inserted and updated, stubs created, records rejected.
    public var entities: [String: EntityCounts] = [:]
    /// Rejected records and pages per ``RejectReason`` code.
    public var rejectsByReason: [String: Int] = [:]

    /// Zero counters.
    public init() {}

    /// ``rejectsByReason`` as stored in `_ingot_runs.reject_counts`: a JSON object, keys sorted.
    var rejectsJSON: String {
        "{" + rejectsByReason.sorted { $0.key < $1.key }.map { #""\#($0.key)":\#($0.value)"# }.joined(separator: ",") + "}"
    }

    static func rejects(fromJSON text: String?) -> [String: Int] {
        guard let text, let document = try? JSONDocument(bytes: Array(text.utf8)) else { return [:] }
        var result: [String: Int] = [:]
        for (name, value) in document.root.members {
            if let key = name.string, let n = value.int64 { result[key] = Int(n) }
        }
        return result
    }

    /// ``entities`` as stored in `_ingot_runs.entity_counts`: a JSON object, keys sorted.
    var entitiesJSON: String {
        var out = "{"
        for (k, (name, c)) in entities.sorted(by: { $0.key < $1.key }).enumerated() {
            if k > 0 { out += "," }
            JSONText.quote(name, into: &out)
            out += #":{"inserted":\#(c.inserted),"updated":\#(c.updated),"unchanged":\#(c.unchanged),"stubs":\#(c.stubs)"#
            out += #","rejected":\#(c.rejected)"#
            if let unfilled = c.unfilled { out += #","unfilled":\#(unfilled)"# }
            out += "}"
        }
        return out + "}"
    }

    /// ``resourcePages`` and ``resourceRecords`` as stored in `_ingot_runs.resource_counts`:
    /// `{"films":{"pages":1,"records":6},…}`, keys sorted; `nil` for a pipeline without resources.
    var resourcesJSON: String? {
        guard !resourcePages.isEmpty || !resourceRecords.isEmpty else { return nil }
        var out = "{"
        for (k, name) in Set(resourcePages.keys).union(resourceRecords.keys).sorted().enumerated() {
            if k > 0 { out += "," }
            JSONText.quote(name, into: &out)
            out += #":{"pages":\#(resourcePages[name] ?? 0),"records":\#(resourceRecords[name] ?? 0)}"#
        }
        return out + "}"
    }

    /// Reads ``resourcesJSON`` back.
    mutating func readResources(fromJSON text: String?) {
        guard let text, let document = try? JSONDocument(bytes: Array(text.utf8)) else { return }
        for (name, value) in document.root.members {
            guard let key = name.string else { continue }
            resourcePages[key] = value["pages"]?.int64.map { Int($0) } ?? 0
            resourceRecords[key] = value["records"]?.int64.map { Int($0) } ?? 0
        }
    }

    /// Reads ``entitiesJSON`` back into ``entities``, and ``unchanged`` (kept only there) with it.
    mutating func readEntities(fromJSON text: String?) {
        entities = RunCounters.entities(fromJSON: text)
        unchanged = entities.values.reduce(0) { $0 + $1.unchanged }
    }

    /// Reads ``entitiesJSON`` back (a resumed run continues its counts).
    static func entities(fromJSON text: String?) -> [String: EntityCounts] {
        guard let text, let document = try? JSONDocument(bytes: Array(text.utf8)) else { return [:] }
        var result: [String: EntityCounts] = [:]
        for (name, value) in document.root.members {
            guard let key = name.string else { continue }
            func field(_ f: String) -> Int { value[f]?.int64.map { Int($0) } ?? 0 }
            result[key] = EntityCounts(
                inserted: field("inserted"), updated: field("updated"), unchanged: field("unchanged"), stubs: field("stubs"),
                rejected: field("rejected"), unfilled: value["unfilled"]?.int64.map { Int($0) })
        }
        return result
    }
}

extension RunCounters {
    /// Adds what saving a batch did (rows written, per entity too, and the store's rejections).
    mutating func add(_ outcome: BatchOutcome, model: EntityModel) {
        inserted += outcome.inserted
        updated += outcome.updated
        unchanged += outcome.unchanged
        skippedRecords += outcome.skipped
        deleted += outcome.deleted
        rejectedRecords += outcome.rejections.count
        for (k, counts) in outcome.entities.enumerated() where counts != EntityCounts() {
            let name = model.entities[k].name
            entities[name] = (entities[name] ?? EntityCounts()) + counts
        }
        for r in outcome.rejections {
            entities[r.entity, default: EntityCounts()].rejected += 1
            rejectsByReason[r.code.rawValue, default: 0] += 1
        }
    }
}
