import Foundation
import GRDBSQLite
import Synchronization

/// What a staged load does with its stage file, whatever the backend: what it may stage, the
/// batches appended, the kept values held until the rows reach the tables, and the folds that
/// read the staged rows back per identity.
///
/// What needs a stored row to decide (`insert_only`/`update_only`/`replace`, `missing:
/// reject|ignore`, relationship `operations:`, owned rows, parent entities, inverse
/// relationships, entities without identity) cannot be staged: a backend refuses it before the
/// run starts (``obstacles(_:_:)``).
extension StageFile {
    /// Why `model` cannot be loaded staged; empty when it can.
    static func obstacles(_ model: EntityModel, _ layouts: [EntityLayout]) -> [String] {
        var reasons: [String] = []
        for (entity, layout) in zip(model.entities, layouts) {
            if entity.identityAttributes.isEmpty { reasons.append("entity \(entity.name) has no identity") }
            if entity.parent != nil { reasons.append("entity \(entity.name) has a parent") }
            if model.entities.contains(where: { $0.parent == entity.name }) { reasons.append("entity \(entity.name) is a parent") }
            for relationship in entity.relationships {
                if relationship.missing != .stub { reasons.append("\(entity.name).\(relationship.name) does not stub missing targets") }
                if !relationship.insertsTargets || !relationship.updatesTargets || !relationship.deletesLinks {
                    reasons.append("\(entity.name).\(relationship.name) limits its operations")
                }
            }
            for toMany in layout.toMany {
                let name = "\(entity.name).\(entity.relationships[toMany.relationship].name)"
                if toMany.isOwned { reasons.append("\(name) is owned") }
                if toMany.isInverse || toMany.isForeignKey { reasons.append("\(name) has an inverse") }
                if toMany.keepsLinks { reasons.append("\(name) only adds links") }
            }
            if layout.toMany.count > 255 { reasons.append("entity \(entity.name) has more than 255 to-many relationships") }
        }
        return reasons
    }

    /// The page cache of a staged load, in KiB.
    static let cacheKiB = 8192

    /// The columns of `layout`'s staging table: its identity's, then the staged row
    /// (``StagedRow``).
    static func stagedColumns(of layout: EntityLayout) -> [String] {
        layout.identitySlots.map { quote(layout.columns[$0].name) } + [StagedRow.column]
    }

    /// The staging table of entity `layout`.
    static func table(of layout: EntityLayout) -> String { "_ingot_stage_\(layout.table)" }

    /// `identifier` as a SQLite identifier (model names are validated: no quote in them).
    static func quote(_ identifier: String) -> String { "\"\(identifier)\"" }

    /// Appends a batch's rows to the staging tables, in the file's open transaction (one it
    /// begins): per row its identity and the ``StagedRow`` — the mask of the columns its records
    /// gave, the record that gave it last (``RecordOrigin``), its to-many sets and its values.
    /// Each entity's rows are appended in identity order, a sorted run whose rowids are noted in
    /// `_ingot_stage_runs` (StagedRuns.swift): the batch's folded rows, or its rows as their
    /// records came (``ResolvedBatch/unfolded``; the merge folds them).
    func append(_ batch: ResolvedBatch) throws {
        try begin()
        for (entity, feed) in try StageFile.feeds(of: batch, layouts) { try appendRun(of: layouts[entity], feed) }
    }

    /// A batch's staged rows per entity (those with any), each entity's in identity order: its
    /// identity's columns, then the ``StagedRow`` — what ``append(_:)`` appends as a sorted run,
    /// and what a joined job exchanges through the run's parts (``StagedExchange``).
    static func feeds(of batch: ResolvedBatch, _ layouts: [EntityLayout]) throws -> [(entity: Int, feed: RowFeed)] {
        var feeds: [(entity: Int, feed: RowFeed)] = []
        if let unfolded = batch.unfolded {
            for (entity, rows) in unfolded.entities.enumerated() where rows.count > 0 && layouts.indices.contains(entity) {
                feeds.append((entity, try feed(of: rows, layouts[entity], batch.pages)))
            }
            return feeds
        }
        for (entity, rows) in batch.rows.merged.enumerated() where !rows.rows.isEmpty && layouts.indices.contains(entity) {
            let layout = layouts[entity]
            let feed = RowFeed()
            var sets: [UInt8] = []
            rows.rows.withUnsafeBufferPointer { all in
                rows.storage.linkSets.withUnsafeBufferPointer { linkSets in
                    rows.storage.withView { values in
                        for position in StageOrder.sorted(all, slots: layout.identitySlots, in: values) {
                            let origin = rows.origins.indices.contains(position) ? rows.origins[position] : 0
                            StageFile.stage(
                                all[position], origin: origin, layout, values: values, linkSets: linkSets, sets: &sets, into: feed)
                        }
                    }
                }
            }
            feeds.append((entity, feed))
        }
        return feeds
    }

    /// The feed of an entity's unfolded rows: encoded page after page as their records came,
    /// then put in identity order (``UnfoldedRows/Entity/order``).
    private static func feed(of rows: UnfoldedRows.Entity, _ layout: EntityLayout, _ pages: [DecodedPage]) throws -> RowFeed {
        let feed = RowFeed()
        var sets: [UInt8] = []
        try pages.withUnsafeBufferPointer { pages in
            var at = 0
            while at < rows.rows.count {
                let p = Int(rows.pages[at])
                guard pages.indices.contains(p) else { throw StageFile.notHeld(layout) }
                var end = at + 1
                while end < rows.rows.count && rows.pages[end] == rows.pages[at] { end += 1 }
                try pages[p].rows.withUnsafeBufferPointer { all in
                    try pages[p].storage.linkSets.withUnsafeBufferPointer { linkSets in
                        try pages[p].storage.withView { values in
                            for k in at..<end {
                                let r = Int(rows.rows[k])
                                guard all.indices.contains(r) else { throw StageFile.notHeld(layout) }
                                StageFile.stage(
                                    all[r], origin: rows.origins[k], layout, values: values, linkSets: linkSets, sets: &sets, into: feed)
                            }
                        }
                    }
                }
                at = end
            }
        }
        // A stub: its identity alone.
        if let slot = layout.identitySlots.first, !rows.stubs.isEmpty {
            var values = [StoredValue?](repeating: nil, count: layout.columns.count)
            let stub = EntityRow(entity: layout.entity, identity: nil, valueStart: 0, linkStart: 0)
            for (key, origin) in zip(rows.stubs, rows.stubOrigins) {
                values[slot] = .integer(key)
                values.withUnsafeBufferPointer { values in
                    StageFile.stage(
                        stub, origin: origin, layout, values: StorageView(values: values, text: UnsafeBufferPointer(start: nil, count: 0)),
                        linkSets: UnsafeBufferPointer(start: nil, count: 0), sets: &sets, into: feed)
                }
            }
        }
        guard feed.reorder(rows.order) else {
            throw StoreError.schema(
                "the staged rows of \(layout.table) are not in one identity order (\(rows.order.count) for \(feed.count) rows)")
        }
        return feed
    }

    private static func notHeld(_ layout: EntityLayout) -> StoreError {
        StoreError.schema("a batch's unfolded rows of \(layout.table) name a page or row the batch does not hold")
    }

    /// Encodes `row` (its values in `values`, its sets in `linkSets`) into `feed` as a staged
    /// row: its identity's columns, then its ``StagedRow`` (`sets` is scratch space).
    private static func stage(
        _ row: EntityRow, origin: Int64, _ layout: EntityLayout, values: StorageView, linkSets: UnsafeBufferPointer<[IdentityKey]?>,
        sets: inout [UInt8], into feed: RowFeed
    ) {
        // The identity is always given (a stub's row too): the fold groups by it.
        var mask = row.mask
        for slot in layout.identitySlots { mask.insert(slot) }
        feed.beginRow()
        for slot in layout.identitySlots { feed.append(values, row.valueStart + slot) }
        sets.removeAll(keepingCapacity: true)
        for k in layout.toMany.indices where linkSets.indices.contains(row.linkStart + k) {
            guard let targets = linkSets[row.linkStart + k] else { continue }
            StagedSets.append(k, targets, to: &sets)
        }
        sets.withUnsafeBytes { sets in
            let columns = layout.columns.count
            let count = StagedRow.encodedCount(mask: mask, sets: sets.count, columns: columns, values: values, start: row.valueStart)
            feed.appendBlob(count: count) { out in
                StagedRow.encode(
                    mask: mask, origin: origin, sets: sets, columns: columns, values: values, start: row.valueStart, into: out)
            }
        }
    }

    /// Appends `feed`'s rows (in identity order) to `layout`'s staging table as one sorted run,
    /// in the open transaction (one it begins), and notes its rowids.
    func appendRun(of layout: EntityLayout, _ feed: RowFeed) throws {
        guard feed.count > 0 else { return }
        let table = StageFile.table(of: layout)
        let columns = StageFile.stagedColumns(of: layout)
        // The batch's rows in one statement (a RowFeed), not one each: appends only.
        let insert = try statement(
            "INSERT INTO \(StageFile.quote(table)) (\(columns.joined(separator: ", "))) \(RowFeed.select(arity: columns.count))")
        let before = try lastRowid(of: table)
        feed.bind(to: insert.handle, at: 1)
        try insert.execute()
        let last = sqlite3_last_insert_rowid(handle)
        guard last - before == Int64(feed.count) else {
            throw StoreError.schema(
                "the staged rows of \(layout.table) did not take consecutive rowids (\(before + 1)...\(last) for \(feed.count) rows)")
        }
        let run = try statement("INSERT INTO \(StagedRun.table) (stage, first, last) VALUES (?1, ?2, ?3)")
        run.bind(.text(table), at: 1)
        run.bind(.integer(before + 1), at: 2)
        run.bind(.integer(last), at: 3)
        try run.execute()
    }

    /// The highest rowid of staging table `table`, 0 when it is empty.
    private func lastRowid(of table: String) throws -> Int64 {
        var last: Int64 = 0
        try statement("SELECT max(rowid) FROM \(StageFile.quote(table))").query { row in last = sqlite3_column_int64(row, 0) }
        return last
    }

    /// Runs `body` under a savepoint of the file's open transaction (one it begins): when it
    /// throws, only what it appended is undone, and the transaction stays open.
    func isolated<R>(_ body: () throws -> R) throws -> R {
        try begin()
        return try Savepoint.run("ingot_isolated", execute: execute, body)
    }

    /// The staging tables that hold rows.
    func filledTables() throws -> [String] {
        try layouts.map(StageFile.table).filter { table in
            var held = false
            try statement("SELECT EXISTS (SELECT 1 FROM \(StageFile.quote(table)))").query { row in
                held = sqlite3_column_int64(row, 0) != 0
            }
            return held
        }
    }

    // MARK: - Kept values

    /// Holds a kept value (the incremental cursor) with the staged rows, in the open transaction
    /// (one it begins): it reaches the store's tables with the rows, so that a later run never
    /// reads a cursor past rows not merged. A store that keeps its values beside the stage in a
    /// database of its own (SQLite) need not.
    func keep(pipeline: String, key: String, value: String?) throws {
        try begin()
        let upsert = try statement("INSERT OR REPLACE INTO _ingot_stage_kept (pipeline, key, value) VALUES (?, ?, ?)")
        upsert.bind(.text(pipeline), at: 1)
        upsert.bind(.text(key), at: 2)
        upsert.bind(value.map { .text($0) } ?? .null, at: 3)
        try upsert.execute()
    }

    /// The kept values held (``keep(pipeline:key:value:)``), committed or not.
    func keptValues() throws -> [(pipeline: String, key: String, value: String)] {
        var kept: [(pipeline: String, key: String, value: String)] = []
        try statement("SELECT pipeline, key, value FROM _ingot_stage_kept WHERE value IS NOT NULL").query { row in
            func text(_ column: Int32) -> String { sqlite3_column_text(row, column).map { String(cString: $0) } ?? "" }
            kept.append((text(0), text(1), text(2)))
        }
        return kept
    }
}

/// The connections a stage's folds read on while they run, for a stop on another thread to
/// interrupt them (``StageFile/fold(settings:interruption:_:)``): a merge can take minutes.
/// Owned by the store, which outlives its stage files.
final class FoldInterruption: Sendable {
    /// As addresses: a pointer is not `Sendable`.
    private let connections = Mutex<[UInt]>([])

    /// Interrupts the folds running, if any (`sqlite3_interrupt`, safe from any thread).
    func interrupt() {
        connections.withLock { folds in for fold in folds { sqlite3_interrupt(OpaquePointer(bitPattern: fold)) } }
    }

    fileprivate func set(_ handles: [OpaquePointer]) {
        connections.withLock { $0 = handles.map { UInt(bitPattern: $0) } }
    }
}

extension StageFile {
    /// Folds the staged load, entity after entity, and hands each entity's folded rows to
    /// `write` on the calling (writer's) queue: from fold threads on two read connections of the
    /// committed file (the staged rows are committed first: ahead of the store's resume point,
    /// which is harmless), else — an in-memory stage — folded on the file's connection as they are
    /// written. `settings` say how each table is read (``StagedReadPlan``) and when one is folded in
    /// two parts at once (``FoldPart``).
    /// `interruption` can stop the folds from another thread; a `write` that throws stops them.
    func fold(settings: FoldSettings, interruption: FoldInterruption, _ write: (_ entity: Int, _ rows: FoldedRows) throws -> Void) throws {
        try commit()
        // How each table is read, as the folds decide it: said in the merge's log line.
        reads = layouts.map { StagedReading.plan(of: $0, on: handle, settings: settings) }
        var readers: [OpaquePointer] = []
        if isFile {
            // The merge's memory: the stage's own cache is not read again (the folds read on
            // connections of their own), and the stage phase's pages and batches are freed —
            // their heap given back before the folds and the writer take theirs. people-10M's
            // peak came a few seconds into its merge (docs/performance-notes.md, "The deferred index's
            // sort, the merge's writer and its memory").
            sqlite3_db_release_memory(handle)
            _ = glibcMallocTrim(0)
            for _ in 0..<2 {
                var reader: OpaquePointer?
                if sqlite3_open_v2(path, &reader, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nil) == SQLITE_OK, let reader {
                    readers.append(reader)
                } else {
                    sqlite3_close_v2(reader)
                }
            }
        }
        var lanes: FoldLanes?
        if readers.count == 2 {
            for fold in readers {
                // The sorter spills to temporary files; a small cache (half a staged load's:
                // two folds sort at once; people-10M peaked 5 MiB lower, the merge as fast).
                sqlite3_exec(fold, "PRAGMA temp_store = FILE; PRAGMA cache_size = -\(StageFile.cacheKiB / 2)", nil, nil, nil)
            }
            interruption.set(readers)
            let parts = layouts.map { FoldPart.parts(of: $0, on: readers[0], settings: settings) }
            lanes = FoldLanes(layouts: layouts, parts: parts, connections: readers.map(ReadConnection.init(handle:)), settings: settings)
        } else {
            // In memory: folded on the staging connection, as the rows are written.
            interruption.set([handle])
        }
        var completed = false
        defer {
            if let lanes {
                if !completed {
                    // The writer failed: the folds still running stop (cancelled, their statements interrupted).
                    lanes.cancel()
                    interruption.interrupt()
                }
                lanes.wait()
            }
            interruption.set([])
            for reader in readers { sqlite3_close_v2(reader) }
        }
        for entity in layouts.indices {
            try write(entity, lanes.map { .channels($0.channels(of: entity)) } ?? .folding(handle, settings))
        }
        completed = true
    }
}

extension RowFeed {
    /// The arities of the feeds a load of `layouts` reads (``RowFeed/register(on:arities:)``):
    /// every count of columns up to the widest row — a batch inserts the columns its rows give —
    /// or link, and a staging row's (its identity and the staged row).
    static func arities(for layouts: [EntityLayout]) -> Set<Int> {
        var widest = 1
        for layout in layouts {
            widest = max(widest, layout.columns.count, StageFile.stagedColumns(of: layout).count)
            for toMany in layout.toMany {
                widest = max(widest, toMany.sourceColumns.count + toMany.targetColumns.count + (toMany.isOrdered ? 1 : 0))
            }
        }
        return Set(1...widest)
    }
}
