import Foundation
import GRDBSQLite

/// The copy side of a staged PostgreSQL load, for one entity: each folded row appended to its
/// table's `COPY` text and each of its sets to its join table's.
///
/// Two ways. **Streaming** (a load's first try), in binary `COPY` (PGBinaryCopy): sent a few
/// hundred kilobytes at a time while the fold goes on, so the server inserts while the job
/// folds; one `COPY` at a time runs on a connection, so the rows' copy is ended and begun again
/// whenever the links held reach `copyBytes`. A value the server refuses fails the whole
/// transaction, and so does one the binary format cannot carry (``PGBinaryCopy/Unfit``: its
/// copy is abandoned). **Careful** (the try after either, in text `COPY`,
/// ``PGStore/mergeStaged(fills:stored:refused:)``): the rows held and their
/// links are copied together under a savepoint, `copyBytes` at a time; a piece the server refuses
/// is rolled back and halved until the refused row is alone, and that row is left out with its
/// links (``refusals``) — as SQLite's merge leaves out a row it refuses.
///
/// **At a position** (``Positioned``: a joined run's part written over rows stored before the run,
/// PGStore+Exchange.swift): every row also carries its positions (`_ingot_pos`: the one position
/// for each column and set the fold gives, and `@`), as a joined batch's rows do; carefully,
/// each piece is upserted through the staging tables a joined batch uses, and its sets replaced
/// where they win (``PGStore/upsertJoined(copied:rows:_:)``,
/// ``PGStore/replaceLinksJoined(owners:links:_:_:owner:layout:)``).
struct PGStagedCopy: FoldedRowWriter {
    /// Rows written at a position: the store whose joined writes upsert them, and the position
    /// their every value takes.
    struct Positioned {
        let store: PGStore
        let position: Int64
    }

    let layout: EntityLayout
    var values: HeldValues
    var given = ColumnMask()
    var sets: HeldValues
    var origin: Int64 = 0
    private(set) var counts = EntityCounts()
    /// The rows the server refused (careful only): identity, the server's message, and the
    /// record that gave the row last (``RecordOrigin``).
    private(set) var refusals: [(identity: IdentityKey, reason: String, origin: Int64)] = []
    private let connection: PGConnection
    private let fills: [(slot: Int, value: ScalarValue, always: Bool)]
    private let isBool: [Bool]
    /// Streaming: each column's binary form, and each to-many's join columns'.
    private let kinds: [PGBinaryCopy.Kind]
    private let linkKinds: [[PGBinaryCopy.Kind]]
    private let rowsCopy: String
    /// Per to-many: its join table's `COPY`, `nil` for one without a join table.
    private let linksCopy: [String?]
    private let careful: Bool
    private let entity: Int
    /// Where rows are written at a position, or `nil`: straight in (a single job's load, a part into empty tables).
    private let positioned: Positioned?
    /// Careful at a position only, per to-many: the held owners whose set is given (identity and
    /// position), and where each held row's end.
    private var owners: [[UInt8]]
    private var ownerEnds: [[Int]]
    private var rows: [UInt8] = []
    private var rowsOpen = false
    private var links: [[UInt8]]
    private var heldLinks = 0
    /// Careful only, per held row: where its text ends in `rows` and, per to-many, in `links`;
    /// its identity; whether it is a stub.
    private var rowEnds: [Int] = []
    private var linkEnds: [[Int]]
    private var keys: [IdentityKey] = []
    private var origins: [Int64] = []
    private var stubs: [Bool] = []
    /// Scratch for ``appendSet(_:)``: the owner's join columns, and the integer targets met in a set.
    private var ownerScratch: [UInt8] = []
    private var seenTargets = SeenIntegers()
    /// The bytes of `COPY` text held before they are sent (``PGStaging/copyBytes``).
    private let copyBytes: Int

    init(
        connection: PGConnection, entity: Int, model: EntityModel, layout: EntityLayout,
        fills: [(slot: Int, value: ScalarValue, always: Bool)], copyBytes: Int, careful: Bool = false, positioned: Positioned? = nil
    ) {
        self.connection = connection
        self.copyBytes = copyBytes
        self.careful = careful
        self.entity = entity
        self.positioned = positioned
        self.layout = layout
        self.fills = fills
        isBool = layout.columns.map { $0.type == .bool }
        values = HeldValues(count: layout.columns.count)
        sets = HeldValues(count: layout.toMany.count)
        kinds = layout.columns.map { PGBinaryCopy.Kind(sqlType: PGStore.columnType($0.type)) ?? .text }
        linkKinds = layout.toMany.map { toMany in
            PGStore.joinColumns(toMany, owner: entity, model: model).map { PGBinaryCopy.Kind(sqlType: $0.type) ?? .text }
        }
        let format = careful ? "" : " (FORMAT binary)"
        let names = (layout.columns.map(\.name) + (positioned == nil ? [] : [PGStore.positionColumn])).map(PGStore.quote)
        rowsCopy = "COPY \(PGStore.quote(layout.table)) (\(names.joined(separator: ", "))) FROM STDIN" + format
        linksCopy = layout.toMany.map { toMany in
            guard toMany.hasJoinTable else { return nil }
            let columns = PGStore.joinColumns(toMany, owner: entity, model: model).map { PGStore.quote($0.name) }
            return "COPY \(PGStore.quote(toMany.joinTable)) (\(columns.joined(separator: ", "))) FROM STDIN" + format
        }
        links = Array(repeating: [], count: layout.toMany.count)
        linkEnds = Array(repeating: [], count: layout.toMany.count)
        owners = Array(repeating: [], count: layout.toMany.count)
        ownerEnds = Array(repeating: [], count: layout.toMany.count)
    }

    mutating func finalize() {
        values.deallocate()
        sets.deallocate()
    }

    /// Appends the held row (`default:` and `const:` filled as an insert fills them) and its sets.
    mutating func flush(stored: (_ identity: IdentityKey, _ changed: Bool) -> Void) throws {
        if careful {
            for slot in layout.columns.indices {
                if slot > 0 { rows.append(UInt8(ascii: "\t")) }
                if let fill = fills.first(where: { $0.slot == slot }), fill.always || !values.holds(slot) {
                    PGStore.appendCopyValue(fill.value, to: &rows)
                } else {
                    appendValue(slot, bool: isBool[slot], from: values, to: &rows)
                }
            }
            if positioned != nil {
                rows.append(UInt8(ascii: "\t"))
                appendPositions(binary: false)
            }
            rows.append(UInt8(ascii: "\n"))
        } else {
            do {
                PGBinaryCopy.appendRowStart(fields: layout.columns.count + (positioned == nil ? 0 : 1), to: &rows)
                for slot in layout.columns.indices {
                    if let fill = fills.first(where: { $0.slot == slot }), fill.always || !values.holds(slot) {
                        try PGBinaryCopy.append(fill.value, kinds[slot], to: &rows)
                    } else {
                        try PGBinaryCopy.append(slot, kinds[slot], from: values, to: &rows)
                    }
                }
                if positioned != nil { appendPositions(binary: true) }
            } catch {
                // The copy goes again in text: this one is abandoned (the transaction with it).
                abandonRows()
                throw error
            }
        }
        for k in layout.toMany.indices where sets.holds(k) && linksCopy[k] != nil {
            do {
                try appendSet(k)
            } catch {
                abandonRows()
                throw error
            }
        }
        if careful {
            rowEnds.append(rows.count)
            for k in links.indices { linkEnds[k].append(links[k].count) }
            for k in owners.indices { ownerEnds[k].append(owners[k].count) }
            keys.append(identity())
            origins.append(origin)
            stubs.append(holdsStub)
        } else {
            counts.inserted += 1
            if holdsStub { counts.stubs += 1 }
        }
        values.clear()
        sets.clear()
        given = ColumnMask()
        if careful {
            if rows.count + heldLinks >= copyBytes { try sendHeld() }
            return
        }
        if heldLinks >= copyBytes {
            try endRows()
            try sendLinks()
        }
        if rows.count >= copyBytes { try sendRows() }
    }

    /// Sends what is held and ends the copies.
    mutating func finish() throws {
        if careful { return try sendHeld() }
        try sendRows()
        try endRows()
        try sendLinks()
    }

    /// The held set of to-many `k` as join rows: the owner's identity, each target once (at its
    /// first position, for an ordered one), as the SQLite merge's `INSERT OR IGNORE` keeps them.
    /// Binary when streaming, text when careful.
    ///
    /// A set of bare integer identities — a person's dogs, the common case — is walked in a
    /// plain loop, its targets kept once by ``SeenIntegers``: through the general walk's closures,
    /// an array and a hash of values per target, people-200k's 300,339 links cost 1,087 M
    /// instructions under callgrind, 319 M this way (docs/performance-notes.md, "One PostgreSQL
    /// job against its COPY floor, paired").
    private mutating func appendSet(_ k: Int) throws(PGBinaryCopy.Unfit) {
        let bytes = sets.bytes(k)
        let binary = !careful
        let kinds = linkKinds[k]
        // The scratch buffers are taken out and put back (a copy of `links[k]` would copy the
        // held links at every row).
        var owner: [UInt8] = []
        var out: [UInt8] = []
        swap(&owner, &ownerScratch)
        swap(&out, &links[k])
        defer {
            swap(&out, &links[k])
            swap(&owner, &ownerScratch)
        }
        owner.removeAll(keepingCapacity: true)
        if binary { PGBinaryCopy.appendRowStart(fields: kinds.count, to: &owner) }
        for (index, slot) in layout.identitySlots.enumerated() {
            if binary {
                try PGBinaryCopy.append(slot, kinds[index], from: values, to: &owner)
            } else {
                if index > 0 { owner.append(UInt8(ascii: "\t")) }
                appendValue(slot, bool: isBool[slot], from: values, to: &owner)
            }
        }
        if careful, let positioned {
            // The owner, whose stored set this one replaces where it wins.
            owners[k] += owner
            owners[k].append(UInt8(ascii: "\t"))
            PGStore.appendDecimal(positioned.position, to: &owners[k])
            owners[k].append(UInt8(ascii: "\n"))
        }
        let before = out.count
        var next = 0
        while let set = StagedSets.set(in: bytes, at: next) {
            next = set.targets.upperBound
            guard set.k == k else { continue }
            if StagedSets.holdsSingleIntegers(bytes, set.targets) {
                seenTargets.removeAll()
                var position: Int64 = 0
                for at in stride(from: set.targets.lowerBound, to: set.targets.upperBound, by: StagedSets.singleIntegerBytes) {
                    let value = StagedSets.singleInteger(in: bytes, at: at)
                    if seenTargets.insert(value) {
                        try appendLink(owner, CollectionOfOne(.integer(value)), at: position, kinds: kinds, k, to: &out)
                    }
                    position += 1
                }
            } else {
                try appendLinks(of: set.targets, in: bytes, owner, kinds: kinds, k, to: &out)
            }
        }
        heldLinks += out.count - before
    }

    /// The join rows of a set whose targets are not all one integer each (``appendSet(_:)``):
    /// each target's values gathered, a target kept once by its values (a boolean as 0 or 1).
    private func appendLinks(
        of targets: Range<Int>, in bytes: UnsafeRawBufferPointer, _ owner: [UInt8], kinds: [PGBinaryCopy.Kind], _ k: Int,
        to out: inout [UInt8]
    ) throws(PGBinaryCopy.Unfit) {
        var seen: Set<[ScalarValue]> = []
        var gathered: [[ScalarValue]] = []
        var target: [ScalarValue] = []
        StagedSets.forEachTarget(
            in: bytes, targets,
            value: { value, _ in
                if case .bool(let b) = value { target.append(.integer(b ? 1 : 0)) } else { target.append(value) }
            },
            end: {
                gathered.append(target)
                target.removeAll(keepingCapacity: true)
            })
        for (position, target) in gathered.enumerated() where seen.insert(target).inserted {
            try appendLink(owner, target, at: Int64(position), kinds: kinds, k, to: &out)
        }
    }

    /// One join row: the owner, the target's values, and its position in an ordered set.
    private func appendLink(
        _ owner: [UInt8], _ target: some Collection<ScalarValue>, at position: Int64, kinds: [PGBinaryCopy.Kind], _ k: Int,
        to out: inout [UInt8]
    ) throws(PGBinaryCopy.Unfit) {
        let ordered = layout.toMany[k].isOrdered
        out += owner
        if !careful {
            let sourceColumns = layout.identitySlots.count
            for (index, value) in target.enumerated() {
                try PGBinaryCopy.append(value, kinds[sourceColumns + index], to: &out)
            }
            if ordered { try PGBinaryCopy.append(.integer(position), .bigint, to: &out) }
        } else {
            for value in target {
                out.append(UInt8(ascii: "\t"))
                PGStore.appendCopyValue(value, to: &out)
            }
            if ordered {
                out.append(UInt8(ascii: "\t"))
                PGStore.appendDecimal(position, to: &out)
            }
            out.append(UInt8(ascii: "\n"))
        }
    }

    /// The held row's identity, as the mapper makes it.
    private func identity() -> IdentityKey {
        let key = layout.identitySlots.map { slot in values.scalar(slot, bool: isBool[slot]) }
        return key.count == 1 ? .single(key[0]) : .composite(key)
    }

    // MARK: Streaming

    private mutating func sendRows() throws {
        guard !rows.isEmpty else { return }
        if !rowsOpen {
            try connection.beginCopy(rowsCopy)
            rowsOpen = true
            try connection.putCopyData(PGBinaryCopy.header, sql: rowsCopy)
        }
        try connection.putCopyData(rows, sql: rowsCopy)
        rows.removeAll(keepingCapacity: true)
    }

    private mutating func endRows() throws {
        guard rowsOpen else { return }
        rowsOpen = false
        try connection.putCopyData(PGBinaryCopy.trailer, sql: rowsCopy)
        try connection.endCopy(rowsCopy)
    }

    /// Ends the rows' copy, if one is open, as failed (the transaction fails with it).
    private mutating func abandonRows() {
        guard rowsOpen else { return }
        rowsOpen = false
        connection.abandonCopy()
    }

    /// Copies the held links, join table after join table (the rows' copy ended first).
    private mutating func sendLinks() throws {
        for k in links.indices where !links[k].isEmpty {
            guard let sql = linksCopy[k] else { continue }
            try connection.beginCopy(sql)
            try connection.putCopyData(PGBinaryCopy.header, sql: sql)
            try connection.putCopyData(links[k], sql: sql)
            try connection.putCopyData(PGBinaryCopy.trailer, sql: sql)
            try connection.endCopy(sql)
            links[k].removeAll(keepingCapacity: true)
        }
        heldLinks = 0
    }

    // MARK: Careful

    /// Copies the held rows with their links, the refused ones left out (``RefusalSearch``), and
    /// forgets them.
    private mutating func sendHeld() throws {
        if !rowEnds.isEmpty {
            try RefusalSearch.run(
                0..<rowEnds.count,
                attempt: { range in
                    do {
                        try connection.inSavepoint("ingot_copy") { try copyHeld(range) }
                        return nil
                    } catch {
                        guard let reason = StoreError.refusedValue(error) else { throw error }
                        return reason
                    }
                },
                refused: { row, reason in refusals.append((keys[row], reason, origins[row])) })
        }
        rows.removeAll(keepingCapacity: true)
        rowEnds.removeAll(keepingCapacity: true)
        keys.removeAll(keepingCapacity: true)
        origins.removeAll(keepingCapacity: true)
        stubs.removeAll(keepingCapacity: true)
        for k in links.indices {
            links[k].removeAll(keepingCapacity: true)
            linkEnds[k].removeAll(keepingCapacity: true)
            owners[k].removeAll(keepingCapacity: true)
            ownerEnds[k].removeAll(keepingCapacity: true)
        }
        heldLinks = 0
    }

    /// Copies held rows `range` and their links (at a position: upserted, and the sets they win
    /// replaced, as a joined batch is merged), and counts them.
    private mutating func copyHeld(_ range: Range<Int>) throws {
        func start(_ ends: [Int]) -> Int { range.lowerBound == 0 ? 0 : ends[range.lowerBound - 1] }
        let piece = rows[start(rowEnds)..<rowEnds[range.upperBound - 1]]
        guard let positioned else {
            try connection.copy(rowsCopy, data: piece)
            for k in links.indices {
                guard let sql = linksCopy[k] else { continue }
                let (from, to) = (start(linkEnds[k]), linkEnds[k][range.upperBound - 1])
                if from < to { try connection.copy(sql, data: links[k][from..<to]) }
            }
            counts.inserted += range.count
            counts.stubs += stubs[range].reduce(0) { $0 + ($1 ? 1 : 0) }
            return
        }
        let merged = try positioned.store.upsertJoined(copied: Array(piece), rows: range.count, layout)
        for k in links.indices where linksCopy[k] != nil {
            let (from, to) = (start(ownerEnds[k]), ownerEnds[k][range.upperBound - 1])
            guard from < to else { continue }
            try positioned.store.replaceLinksJoined(
                owners: Array(owners[k][from..<to]), links: Array(links[k][start(linkEnds[k])..<linkEnds[k][range.upperBound - 1]]),
                k, layout.toMany[k], owner: entity, layout: layout)
        }
        counts = counts + merged
    }

    /// The held row's positions (`_ingot_pos`), written at a position: that position for each
    /// column the fold gives (not the identity's) and each set, NULL for the rest, then `@`.
    private mutating func appendPositions(binary: Bool) {
        guard let position = positioned?.position else { return }
        var slots: [Int64?] = layout.columns.indices.map { slot in
            given.contains(slot) && !layout.identitySlots.contains(slot) ? position : nil
        }
        slots += layout.toMany.indices.map { sets.holds($0) ? position : nil }
        slots.append(position)
        if binary {
            PGBinaryCopy.appendBigintArray(slots, to: &rows)
            return
        }
        rows.append(UInt8(ascii: "{"))
        for (k, slot) in slots.enumerated() {
            if k > 0 { rows.append(UInt8(ascii: ",")) }
            if let slot { PGStore.appendDecimal(slot, to: &rows) } else { rows += Array("NULL".utf8) }
        }
        rows.append(UInt8(ascii: "}"))
    }
}

/// Appends held value `i` as a `COPY` text field (a boolean column's 0/1 as `f`/`t`).
private func appendValue(_ i: Int, bool: Bool, from values: HeldValues, to out: inout [UInt8]) {
    switch values.type(i) {
    case SQLITE_INTEGER:
        if bool {
            out.append(values.integer(i) != 0 ? UInt8(ascii: "t") : UInt8(ascii: "f"))
        } else {
            PGStore.appendDecimal(values.integer(i), to: &out)
        }
    case SQLITE_FLOAT:
        PGStore.appendCopyValue(.real(values.real(i)), to: &out)
    case SQLITE_TEXT, SQLITE_BLOB:
        PGConnection.appendCopyText(values.bytes(i).bindMemory(to: UInt8.self), to: &out)
    default:
        out.append(UInt8(ascii: "\\"))
        out.append(UInt8(ascii: "N"))
    }
}
