import Foundation

/// Maps the records of a page to ``EntityRow``s following a ``MappingPlan``, applying Ingot's
/// merge rules at the level of one record: present keys set, `null` clears, absent keys are left
/// out; key paths whose root is present but whose leaf is missing become `NULL`.
///
/// A record that breaks a rule becomes a ``RecordRejection`` with its coding path; its rows are
/// dropped whole, so no partial row of it is ever written. Runs on a decode lane; a mapper is
/// owned by one ``DecodingContext``.
struct RecordMapper {
    let plan: MappingPlan
    var dates = DateConverter()
    /// Where in the current record the mapper is, outermost first; read only to name the place
    /// of a `missing: reject` reference (kept by RecordMapper+Objects.swift).
    var trail: [MappingFailure.Component] = []
    /// Mapping a nested object through a `partial: true` relationship (or within one): a key path
    /// whose leaf is missing leaves its column as stored (``Relationship/partial``).
    var partial = false
    /// Rows and links the current record made so far (``charge()``).
    private(set) var recordCost = 0

    init(plan: MappingPlan) {
        self.plan = plan
    }

    /// Decodes and maps one page, as one ``DecodedPage``.
    mutating func map(bytes: [UInt8], seq: Int, source: String) -> DecodedPage {
        var whole: DecodedPage?
        map(bytes: bytes, seq: seq, source: source, partRecords: .max) { whole = $0 }
        // `emit` is called at least once, for the last part.
        return whole
            ?? DecodedPage(seq: seq, source: source, bytes: bytes.count, records: [], rejections: [], pageRejected: false, recordCount: 0)
    }

    /// Decodes and maps one page, handing it to `emit` in parts of at most `partRecords` records
    /// (or ``MappingPlan/rowsPerRecord`` times as many rows and links: records with big arrays
    /// make smaller parts), in order; the last part has ``DecodedPage/isLastPart`` set and carries the page's size.
    /// A page of millions of tiny records is then never held decoded whole: each part goes on
    /// (to be batched and saved) while the next is mapped. The page is parsed once.
    ///
    /// `parsed`: the page's JSON when its source parsed it already (``Page/parsed``).
    mutating func map(
        bytes: [UInt8], seq: Int, source: String, parsed: JSONDocument? = nil, partRecords: Int, emit: (DecodedPage) -> Void
    ) {
        var page = DecodedPage(
            seq: seq, source: source, bytes: bytes.count, records: [], rejections: [], pageRejected: false, recordCount: 0)
        page.pageBytes = bytes.count
        defer { emit(page) }
        guard plan.storesRecords else { return }
        let rootName = plan.entities[plan.root].name
        func rejectPage(_ path: String, _ reason: String, _ code: RejectReason) {
            page.pageRejected = true
            page.rejections.append(
                RecordRejection(
                    entity: rootName, codingPath: path, reason: reason, source: source, recordIndex: nil,
                    raw: RecordRejection.prefix(bytes[...]), rawLength: bytes.count, code: code))
        }
        guard let (document, array) = records(of: bytes, parsed: parsed, rejectPage: rejectPage) else { return }
        page.recordSegments = array.segments
        let partSize = max(1, partRecords)
        let partCost = partSize.multipliedReportingOverflow(by: MappingPlan.rowsPerRecord)
        // JSON Lines: the lines that are not JSON, rejected (RecordMapper+Lines.swift).
        let rejectedLines = RecordMapper.rejectLines(
            document.lineFailures, of: bytes, entity: rootName, partSize: partSize, into: &page, emit)
        page.recordCount = min(array.count, partSize) + rejectedLines
        page.records.reserveCapacity(page.recordCount)
        page.rows.reserveCapacity(page.recordCount * 2)

        document.nodes.withUnsafeBufferPointer { nodes in
            document.bytes.withUnsafeBufferPointer { bytes in
                var cursor = Cursor(nodes: nodes, bytes: bytes)
                var index = 0
                var element = array.first
                var partStart = 0
                var partStartByte = 0
                // The rejected lines the current part holds besides its records.
                var carried = rejectedLines
                while index < array.count {
                    // A part ends after a tombstone: its deletions follow every write before them.
                    let afterTombstone = page.deletions.last.map { $0.recordIndex == index - 1 } ?? false
                    if index - partStart == partSize || (!partCost.overflow && page.cost >= partCost.partialValue) || afterTombstone {
                        // This part is full: hand it on and start the next one. It counts the
                        // records it holds (fewer than `partSize` when it ended by their rows).
                        page.recordCount = index - partStart + carried
                        carried = 0
                        let startByte = Int(nodes[element].start)
                        emit(
                            RecordMapper.nextPart(
                                of: &page, at: startByte, from: partStartByte, records: min(array.count - index, partSize),
                                total: bytes.count))
                        partStart = index
                        partStartByte = startByte
                    }
                    switch chooseEntity(at: element, in: document) {
                    case .skipped: page.skipped += 1
                    case .entity(let entity):
                        mapRecord(at: element, index: index, entity: entity, of: array, in: document, source: source, &page, &cursor)
                    }
                    element = Int(nodes[element].end)
                    index += 1
                }
                page.recordCount = array.count - partStart + carried
            }
        }
    }

    /// The page's document (`parsed`, or `bytes` parsed) and its records, or `nil` once the page
    /// is rejected: not JSON, or no records where the pipeline says they are.
    private func records(
        of bytes: [UInt8], parsed: JSONDocument?, rejectPage: (String, String, RejectReason) -> Void
    ) -> (JSONDocument, RecordFraming.Records)? {
        let document: JSONDocument
        if let parsed {
            document = parsed
        } else {
            do {
                document = try plan.framing.parse(bytes)
            } catch {
                rejectPage("", error.description, .notJSON)
                return nil
            }
        }
        switch plan.framing.records(in: document) {
        case .success(let records): return (document, records)
        case .failure(let failure):
            rejectPage(failure.path, failure.reason, .noRecords)
            return nil
        }
    }

    /// Hands the part mapped so far on: `page` becomes the next part (its records from byte
    /// `startByte` of the page, `records` of them at most), and the full part is returned.
    /// Counts one row or link of the current record; past ``MappingPlan/maxRecordRows`` the
    /// record is rejected (its rows so far dropped with it), before it can take more memory.
    mutating func charge() throws(MappingFailure) {
        recordCost += 1
        guard recordCost <= plan.maxRecordRows else {
            throw MappingFailure(
                reason:
                    "the record makes more than \(plan.maxRecordRows) rows and links (--max-record-rows); split it at the source or raise the limit",
                code: .tooLarge)
        }
    }

    private static func nextPart(
        of page: inout DecodedPage, at startByte: Int, from partStartByte: Int, records: Int, total: Int
    ) -> DecodedPage {
        var part = DecodedPage(
            seq: page.seq, source: page.source, bytes: startByte - partStartByte, records: [], rejections: [], pageRejected: false,
            recordCount: records)
        part.part = page.part + 1
        part.pageBytes = page.pageBytes
        part.recordSegments = page.recordSegments
        part.records.reserveCapacity(part.recordCount)
        page.isLastPart = false
        page.pageBytes = 0
        page.bytes = startByte - partStartByte
        swap(&page, &part)
        page.bytes = total - startByte
        return part
    }

    /// Which entity the record at `element` is: the root, or, for records of several kinds
    /// (`root: {by: …}`), the entity its discriminator names (`-1`: none, rejected when mapped),
    /// or none to skip (`other: skip`).
    private enum Chosen {
        case entity(Int)
        case skipped
    }

    /// Keeps `record`'s raw text and place (`place`: its coding path prefix) where the run keeps
    /// records, and where a `missing: reject` reference may reject it later.
    /// `place` is made only when it is kept: most runs keep neither text, and building every
    /// record's `results[3]` was 1.2 % of people-20k's instructions.
    private func keepText(of record: inout DecodedRecord, at element: Int, place: () -> String, _ cursor: Cursor) {
        let keepsReferences = record.references.contains(where: { $0.policy == .reject })
        guard plan.keepsRecords || keepsReferences else { return }
        let place = place()
        if plan.keepsRecords {
            (record.raw, record.rawLength) = cursor.rawPrefix(element)
            record.path = place
        }
        guard keepsReferences else { return }
        if record.raw == nil { (record.raw, record.rawLength) = cursor.rawPrefix(element) }
        let prefix = place.isEmpty ? "" : place + "."
        for r in record.references.indices where record.references[r].policy == .reject {
            record.references[r].codingPath = prefix + (record.references[r].codingPath ?? "")
        }
    }

    /// Record `index`, just mapped from row `firstRow` on, is a tombstone (`delete_when:`): its
    /// rows are dropped and the identity of its root row kept as the row it deletes.
    private func keepTombstone(of entity: Int, index: Int, from firstRow: Int, _ page: inout DecodedPage) throws(MappingFailure) {
        guard firstRow < page.rows.count, page.rows[firstRow].entity == entity, let identity = page.rows[firstRow].identity else {
            throw MappingFailure(
                reason: "the record is a tombstone (delete_when) without the identity of the row it deletes", code: .wrongShape)
        }
        page.rows.removeSubrange(firstRow...)
        page.deletions.append(Tombstone(entity: entity, identity: identity, recordIndex: index))
    }

    private func chooseEntity(at element: Int, in document: JSONDocument) -> Chosen {
        guard let choice = plan.rootChoice else { return .entity(plan.root) }
        let kind = choice.path.resolve(in: JSONValue(document: document, index: element)).flatMap { $0.string ?? $0.numberText }
        if let kind, let chosen = choice.entities[kind] { return .entity(chosen) }
        return choice.skipsOthers ? .skipped : .entity(-1)
    }

    /// Maps the record at `element` (the `index`th of `array`) as `entity` into `page`: its rows,
    /// its references, its raw text where the run keeps it, the incremental cursor — or, when it
    /// breaks a rule, its rejection with its coding path, and none of its rows.
    private mutating func mapRecord(
        at element: Int, index: Int, entity: Int, of array: RecordFraming.Records, in document: JSONDocument, source: String,
        _ page: inout DecodedPage, _ cursor: inout Cursor
    ) {
        let firstRow = page.rows.count
        let valueCount = page.storage.values.count
        let textCount = page.storage.text.count
        let linkCount = page.storage.linkSets.count
        let path = plan.framing.codingPath
        var record = DecodedRecord(index: index, rows: firstRow..<firstRow, references: [], raw: nil)
        trail.removeAll(keepingCapacity: true)
        recordCost = 0
        do throws(MappingFailure) {
            if entity < 0, let choice = plan.rootChoice {
                let kind = choice.path.resolve(in: JSONValue(document: document, index: element)).map { $0.rawText } ?? "nothing"
                throw MappingFailure(
                    reason: "'\(choice.path)' is \(kind), which names no entity (root.by; other: reject)", code: .wrongShape)
            }
            switch cursor.nodes[element].kind {
            case .object, .array, .null: _ = try mapObject(at: element, entity: entity, into: &record, &page, &cursor)
            default: try mapBareIdentity(at: element, entity: entity, &page, &cursor)  // `[1, 2, 3]`: stubs
            }
            guard page.storage.text.count <= Int(UInt32.max) else {
                throw MappingFailure(reason: "the page's text values pass 4 GiB; split it into smaller pages", code: .tooLarge)
            }
            record.rows = firstRow..<page.rows.count
            if let rule = plan.deleteWhen, rule.matches(JSONValue(document: document, index: element)) {
                // A tombstone: the row it names is deleted where it stands; nothing of it is written.
                try keepTombstone(of: entity, index: index, from: firstRow, &page)
                page.storage.truncate(values: valueCount, text: textCount, linkSets: linkCount)
                return
            }
            keepText(of: &record, at: element, place: { array.prefix(index, path: path) }, cursor)
            if let path = plan.incrementalPath, let value = cursor.text(at: path, from: element),
                page.incrementalMax.map({ $0.utf8.lexicographicallyPrecedes(value.utf8) }) ?? true
            {
                page.incrementalMax = value
            }
            page.records.append(record)
            page.cost += recordCost
        } catch {
            // No partial row of a rejected record is kept.
            page.rows.removeSubrange(firstRow...)
            page.storage.truncate(values: valueCount, text: textCount, linkSets: linkCount)
            let prefix = array.prefix(index, path: path)
            let raw = cursor.rawPrefix(element)
            page.rejections.append(
                RecordRejection(
                    entity: error.entity ?? plan.entities[plan.root].name,
                    codingPath: prefix.isEmpty && error.pathText.hasPrefix(".")
                        ? String(error.pathText.dropFirst()) : prefix + error.pathText,
                    reason: error.reason, source: source, recordIndex: array.lines.map { $0[index] - 1 } ?? index, raw: raw.text,
                    rawLength: raw.length, code: error.code))
        }
    }
}
