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
    private var dates = DateConverter()
    /// Where in the current record the mapper is, outermost first; read only to name the place
    /// of a `missing: reject` reference.
    private var trail: [MappingFailure.Component] = []

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

    /// Decodes and maps one page, handing it to `emit` in parts of at most `partRecords` records,
    /// in order; the last part has ``DecodedPage/isLastPart`` set and carries the page's size.
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
        let document: JSONDocument
        if let parsed {
            document = parsed
        } else {
            do {
                document = try plan.framing.parse(bytes)
            } catch {
                rejectPage("", error.description, .notJSON)
                return
            }
        }
        let array: RecordFraming.Records
        switch plan.framing.records(in: document) {
        case .success(let records): array = records
        case .failure(let failure):
            rejectPage(failure.path, failure.reason, .noRecords)
            return
        }
        let path = plan.framing.codingPath
        // JSON Lines: a line that is not JSON is a rejected record; the other lines go on.
        for failure in document.lineFailures {
            let start = min(max(0, failure.error.offset), bytes.count)
            var end = start
            while end < bytes.count && bytes[end] != 0x0A { end += 1 }
            var lineStart = start
            while lineStart > 0 && bytes[lineStart - 1] != 0x0A { lineStart -= 1 }
            page.rejections.append(
                RecordRejection(
                    entity: rootName, codingPath: "line \(failure.line)", reason: failure.error.description, source: source,
                    recordIndex: failure.line - 1, raw: RecordRejection.prefix(bytes[lineStart..<end]), rawLength: end - lineStart,
                    code: .notJSON))
        }
        let partSize = max(1, partRecords)
        page.recordCount = min(array.count, partSize) + document.lineFailures.count
        page.records.reserveCapacity(page.recordCount)
        page.rows.reserveCapacity(page.recordCount * 2)

        document.nodes.withUnsafeBufferPointer { nodes in
            document.bytes.withUnsafeBufferPointer { bytes in
                var cursor = Cursor(nodes: nodes, bytes: bytes)
                var index = 0
                var element = array.first
                var partStart = 0
                var partStartByte = 0
                while index < array.count {
                    if index - partStart == partSize {
                        // This part is full: hand it on and start the next one.
                        let startByte = Int(nodes[element].start)
                        var part = DecodedPage(
                            seq: seq, source: source, bytes: startByte - partStartByte, records: [], rejections: [],
                            pageRejected: false, recordCount: min(array.count - index, partSize))
                        part.part = page.part + 1
                        part.pageBytes = page.pageBytes
                        part.records.reserveCapacity(part.recordCount)
                        page.isLastPart = false
                        page.pageBytes = 0
                        page.bytes = startByte - partStartByte
                        swap(&page, &part)
                        emit(part)
                        partStart = index
                        partStartByte = startByte
                        page.bytes = bytes.count - partStartByte
                    }
                    let firstRow = page.rows.count
                    let valueCount = page.storage.values.count
                    let textCount = page.storage.text.count
                    let linkCount = page.storage.linkSets.count
                    var record = DecodedRecord(index: index, rows: firstRow..<firstRow, references: [], raw: nil)
                    trail.removeAll(keepingCapacity: true)
                    // Records of several kinds (`root: {by: …}`): the entity its discriminator names.
                    var entity = plan.root
                    if let choice = plan.rootChoice {
                        let kind = choice.path.resolve(in: JSONValue(document: document, index: element)).flatMap {
                            $0.string ?? $0.numberText
                        }
                        if let kind, let chosen = choice.entities[kind] {
                            entity = chosen
                        } else if choice.skipsOthers {
                            page.skipped += 1
                            element = Int(nodes[element].end)
                            index += 1
                            continue
                        } else {
                            entity = -1
                        }
                    }
                    do throws(MappingFailure) {
                        if entity < 0, let choice = plan.rootChoice {
                            let kind =
                                choice.path.resolve(in: JSONValue(document: document, index: element)).map { $0.rawText } ?? "nothing"
                            throw MappingFailure(
                                reason: "'\(choice.path)' is \(kind), which names no entity (root.by; other: reject)", code: .wrongShape)
                        }
                        _ = try mapObject(at: element, entity: entity, into: &record, &page, &cursor)
                        guard page.storage.text.count <= Int(UInt32.max) else {
                            throw MappingFailure(reason: "the page's text values pass 4 GiB; split it into smaller pages", code: .tooLarge)
                        }
                        record.rows = firstRow..<page.rows.count
                        if record.references.contains(where: { $0.policy == .reject }) {
                            (record.raw, record.rawLength) = cursor.rawPrefix(element)
                            let prefix = array.prefix(index, path: path).isEmpty ? "" : array.prefix(index, path: path) + "."
                            for r in record.references.indices where record.references[r].policy == .reject {
                                record.references[r].codingPath = prefix + (record.references[r].codingPath ?? "")
                            }
                        }
                        if let path = plan.incrementalPath, let value = cursor.text(at: path, from: element),
                            page.incrementalMax.map({ $0.utf8.lexicographicallyPrecedes(value.utf8) }) ?? true
                        {
                            page.incrementalMax = value
                        }
                        page.records.append(record)
                    } catch {
                        // No partial row of a rejected record is kept.
                        page.rows.removeSubrange(firstRow...)
                        page.storage.truncate(values: valueCount, text: textCount, linkSets: linkCount)
                        let prefix = array.prefix(index, path: path)
                        let raw = cursor.rawPrefix(element)
                        page.rejections.append(
                            RecordRejection(
                                entity: error.entity ?? rootName,
                                codingPath: prefix.isEmpty && error.pathText.hasPrefix(".")
                                    ? String(error.pathText.dropFirst()) : prefix + error.pathText,
                                reason: error.reason,
                                source: source, recordIndex: array.lines.map { $0[index] - 1 } ?? index, raw: raw.text,
                                rawLength: raw.length, code: error.code))
                    }
                    element = Int(nodes[element].end)
                    index += 1
                }
            }
        }
    }

    // MARK: - Objects

    /// Maps the object at tape index `at` as `entity`: appends its row (then its nested objects'
    /// rows) to the page's rows and their values to the page's storage, its bare references to
    /// `record`; returns its identity.
    private mutating func mapObject(
        at: Int, entity e: Int, into record: inout DecodedRecord, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) -> IdentityKey? {
        let entity = plan.entities[e]
        let node = c.nodes[at]
        guard node.kind == .object else {
            throw MappingFailure(
                reason: "expected an object for entity '\(entity.name)', got \(node.kind.jsonName)", entity: entity.name, code: .wrongShape)
        }
        let layout = entity.layout
        let rowIndex = page.rows.count
        // Reserve the row's place and slots (parent before its nested rows); filled in below.
        let row = page.storage.appendRow(entity: e, layout: layout)
        page.rows.append(row)
        let v = row.valueStart
        let l = row.linkStart
        var mask = ColumnMask()

        var member = at + 1
        for _ in 0..<node.count {
            let keyIndex = member
            let valueIndex = member + 1
            member = Int(c.nodes[valueIndex].end)
            guard let rootKey = c.match(keyAt: keyIndex, in: entity) else { continue }
            for t in entity.targetStarts[rootKey]..<entity.targetStarts[rootKey + 1] {
                let kind = entity.targetKinds[t]
                do throws(MappingFailure) {
                    let found: Int?
                    if entity.targetIsDirect[t] {
                        found = c.nodes[valueIndex].kind == .null ? nil : valueIndex
                    } else {
                        found = try c.descend(from: valueIndex, along: entity.targets[t])
                    }
                    guard let leaf = found else {
                        // Root present, leaf missing or null: the column becomes NULL; a relationship is cleared.
                        switch kind {
                        case .attribute(let slot):
                            page.storage.values[v + slot] = .null
                            mask.insert(slot)
                        case .toOne(let k):
                            for s in layout.toOne[k].slots {
                                page.storage.values[v + s] = .null
                                mask.insert(s)
                            }
                        case .toMany(let k): page.storage.linkSets[l + k] = []
                        }
                        continue
                    }
                    switch kind {
                    case .attribute(let slot):
                        let rules = entity.rules[slot]
                        if rules.storesTextAsIs, c.nodes[leaf].kind == .string {
                            // Plain text: its bytes go from the page to the storage as they are.
                            page.storage.setText(v + slot, c.bytes(c.nodes[leaf]))
                        } else if rules.nullOnInvalid {
                            do {
                                page.storage.set(v + slot, try convert(leaf, rules, &c))
                            } catch  where error.code != .unstorable {
                                // `on_invalid: null`: the record is kept, the value is NULL, and it is counted.
                                page.storage.set(v + slot, .null)
                                page.invalidValues["\(entity.name).\(layout.columns[slot].name)", default: 0] += 1
                            }
                        } else {
                            page.storage.set(v + slot, try convert(leaf, rules, &c))
                        }
                        mask.insert(slot)
                    case .toOne(let k):
                        let toOne = layout.toOne[k]
                        let depth = trail.count
                        enter(entity.rootKeys[rootKey].name, entity.targets[t])
                        guard
                            let identity = try link(
                                leaf, target: toOne.target, policy: entity.toOnePolicies[k], rules: entity.toOneRules[k], row: rowIndex,
                                slot: .toOne(k), into: &record, &page, &c)
                        else {
                            trail.removeLast(trail.count - depth)
                            continue
                        }
                        trail.removeLast(trail.count - depth)
                        for (offset, value) in identity.values.enumerated() {
                            page.storage.set(v + toOne.slots.lowerBound + offset, value)
                            mask.insert(toOne.slots.lowerBound + offset)
                        }
                    case .toMany(let k):
                        let relationship = layout.toMany[k]
                        let list = c.nodes[leaf]
                        guard list.kind == .array else {
                            throw MappingFailure(
                                reason: "expected an array for to-many relationship, got \(list.kind.jsonName)", code: .wrongShape)
                        }
                        var identities: [IdentityKey] = []
                        identities.reserveCapacity(Int(list.count))
                        var element = leaf + 1
                        let depth = trail.count
                        enter(entity.rootKeys[rootKey].name, entity.targets[t])
                        for position in 0..<Int(list.count) {
                            trail.append(.index(position))
                            do throws(MappingFailure) {
                                if let identity = try link(
                                    element, target: relationship.target, policy: entity.toManyPolicies[k], rules: entity.toManyRules[k],
                                    row: rowIndex, slot: .toMany(index: k, position: identities.count), into: &record, &page, &c)
                                {
                                    identities.append(identity)
                                }
                            } catch {
                                throw error.prepending(.index(position))
                            }
                            trail.removeLast()
                            element = Int(c.nodes[element].end)
                        }
                        trail.removeLast(trail.count - depth)
                        page.storage.linkSets[l + k] = identities
                    }
                } catch {
                    throw error.prepending(entity.targets[t].restNames.reversed().map { .key($0) } + [.key(entity.rootKeys[rootKey].name)])
                }
            }
        }

        var identity: IdentityKey?
        if layout.identitySlots.count == 1, let value = page.storage.value(v + layout.identitySlots[0]), value != .null {
            identity = .single(value)  // the common case, without an array
        } else if !layout.identitySlots.isEmpty {
            var values: [ScalarValue] = []
            for slot in layout.identitySlots {
                let key = entity.attributes[slot].key
                guard let value = page.storage.value(v + slot) else {
                    throw MappingFailure(
                        reason: "identity '\(entity.attributes[slot].name)' is missing", entity: entity.name, code: .missingIdentity
                    )
                    .prepending(.key(key))
                }
                guard value != .null else {
                    throw MappingFailure(
                        reason: "identity '\(entity.attributes[slot].name)' is null", entity: entity.name, code: .missingIdentity
                    )
                    .prepending(.key(key))
                }
                values.append(value)
            }
            identity = values.count == 1 ? .single(values[0]) : .composite(values)
        }
        page.rows[rowIndex].identity = identity
        page.rows[rowIndex].mask = mask
        return identity
    }

    /// A relationship's value: a nested object (mapped as its own row) or a bare identity (a reference).
    private mutating func link(
        _ index: Int, target: Int, policy: MissingTargetPolicy, rules: AttributeRules? = nil, row: Int, slot: Reference.Slot,
        into record: inout DecodedRecord, _ page: inout DecodedPage, _ c: inout Cursor
    ) throws(MappingFailure) -> IdentityKey? {
        let node = c.nodes[index]
        switch node.kind {
        case .object:
            return try mapObject(at: index, entity: target, into: &record, &page, &c)
        case .array:
            throw MappingFailure(
                reason: "expected an object or an identity of '\(plan.entities[target].name)', got array", code: .wrongShape)
        case .null where !isToManySlot(slot):
            return nil
        default:
            let entity = plan.entities[target]
            guard entity.layout.identitySlots.count == 1 else {
                throw MappingFailure(
                    reason: "'\(entity.name)' has a composite identity; a reference must be an object with its keys", code: .wrongShape)
            }
            let identitySlot = entity.layout.identitySlots[0]
            let value = try convert(index, rules ?? entity.rules[identitySlot], &c)
            // `values: {"none": null}` on the relationship: no link.
            if value == .null, rules != nil, !isToManySlot(slot) { return nil }
            guard value != .null else {
                throw MappingFailure(reason: "null is not an identity of '\(entity.name)'", code: .missingIdentity)
            }
            let identity = IdentityKey.single(value)
            record.references.append(
                Reference(
                    target: target, identity: identity, policy: policy, row: row, slot: slot,
                    codingPath: policy == .reject ? MappingFailure.render(trail) : nil))
            return identity
        }
    }

    /// Steps into the relationship at `first` plus `target`'s key path components.
    private mutating func enter(_ first: String, _ target: MappingPlan.Target) {
        trail.append(.key(first))
        for name in target.restNames { trail.append(.key(name)) }
    }

    private func isToManySlot(_ slot: Reference.Slot) -> Bool {
        if case .toMany = slot { return true }
        return false
    }

    // MARK: - Values

    /// Converts the value at `index` to its stored form by `rules`, or throws why it cannot.
    private mutating func convert(
        _ index: Int, _ rules: AttributeRules, _ c: inout Cursor
    ) throws(MappingFailure) -> ScalarValue {
        let (type, coerce) = (rules.type, rules.coerce)
        let node = c.nodes[index]
        if node.kind == .null { return .null }
        if rules.rewritesText, node.kind != .array, node.kind != .object {
            // The value rules work on the value's text (a string's content, a number's digits).
            let text = node.kind == .string || node.kind == .escapedString ? c.string(node) : c.raw(index)
            guard let rewritten = rules.rewrite(text) else {
                throw MappingFailure(
                    reason: "\(c.preview(index)) does not match pattern '\(rules.pattern?.text ?? "")'", code: .wrongType)
            }
            guard let result = rewritten else { return .null }
            return try convert(text: result, rules, preview: c.preview(index))
        }
        func wrong() -> MappingFailure {
            MappingFailure(reason: "expected \(type.name), got \(node.kind.jsonName) \(c.preview(index))", code: .wrongType)
        }
        switch type {
        case .integer:
            switch node.kind {
            case .integer:
                guard let v = c.int64(node) else {
                    throw MappingFailure(reason: "integer \(c.preview(index)) does not fit in 64 bits", code: .outOfRange)
                }
                return .integer(v)
            case .double where coerce:
                let d = c.double(node)
                guard d.rounded() == d, abs(d) < 9.2e18 else { throw wrong() }
                return .integer(Int64(d))
            case .string where coerce:
                guard let v = Int64(c.string(node).trimmingCharacters(in: .whitespaces)) else { throw wrong() }
                return .integer(v)
            case .true where coerce: return .integer(1)
            case .false where coerce: return .integer(0)
            default: throw wrong()
            }
        case .double:
            switch node.kind {
            case .integer, .double:
                return .real(c.double(node))
            case .string where coerce:
                guard let v = Double(c.string(node).trimmingCharacters(in: .whitespaces)), v.isFinite else { throw wrong() }
                return .real(v)
            default: throw wrong()
            }
        case .string:
            switch node.kind {
            case .string: return .text(c.string(node))
            case .escapedString:
                if let failure = RecordMapper.unstorable(c.bytes(node)) { throw failure }
                return .text(c.string(node))
            case .integer, .double, .true, .false:
                guard coerce else { throw wrong() }
                return .text(c.raw(index))
            default: throw wrong()
            }
        case .bool:
            switch node.kind {
            case .true: return .bool(true)
            case .false: return .bool(false)
            case .integer where coerce:
                switch c.int64(node) {
                case 0: return .bool(false)
                case 1: return .bool(true)
                default: throw wrong()
                }
            case .string where coerce:
                switch c.string(node).lowercased() {
                case "true", "1": return .bool(true)
                case "false", "0": return .bool(false)
                default: throw wrong()
                }
            default: throw wrong()
            }
        case .date(let format):
            switch (node.kind, format) {
            case (.string, .iso8601), (.string, .pattern), (.escapedString, .iso8601), (.escapedString, .pattern):
                let converted =
                    node.kind == .string
                    ? dates.convert(c.bytes(node), format: format) : dates.convert(ArraySlice(c.string(node).utf8), format: format)
                guard let date = converted else {
                    throw MappingFailure(reason: "\(c.preview(index)) is not a date in format \(format.name)", code: .notADate)
                }
                return .text(date)
            case (.integer, .unixSeconds), (.double, .unixSeconds), (.integer, .unixMilliseconds), (.double, .unixMilliseconds):
                guard let date = dates.convert(number: c.double(node), format: format) else {
                    throw MappingFailure(reason: "\(c.preview(index)) is out of the range of dates", code: .outOfRange)
                }
                return .text(date)
            case (.string, .unixSeconds), (.string, .unixMilliseconds):
                guard coerce, let number = Double(c.string(node)),
                    let date = dates.convert(number: number, format: format)
                else { throw wrong() }
                return .text(date)
            default:
                throw wrong()
            }
        case .json:
            let raw = c.raw(index)
            if let failure = RecordMapper.unstorable(raw.utf8) { throw failure }
            return .text(raw)
        }
    }

    /// Converts `text` a value rule produced to the attribute's type, as a `coerce: true` value
    /// would be.
    private mutating func convert(text: String, _ rules: AttributeRules, preview: String) throws(MappingFailure) -> ScalarValue {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        func wrong() -> MappingFailure {
            MappingFailure(reason: "\(preview) (as '\(text)' after the value rules) is not \(rules.type.name)", code: .wrongType)
        }
        switch rules.type {
        case .integer:
            if let v = Int64(trimmed) { return .integer(v) }
            guard let d = Double(trimmed), d.rounded() == d, abs(d) < 9.2e18 else { throw wrong() }
            return .integer(Int64(d))
        case .double:
            guard let v = Double(trimmed), v.isFinite else { throw wrong() }
            return .real(v)
        case .string:
            if text.utf8.contains(0) {
                throw MappingFailure(reason: "text holding U+0000 cannot be stored alike everywhere", code: .unstorable)
            }
            return .text(text)
        case .bool:
            switch trimmed.lowercased() {
            case "true", "1": return .bool(true)
            case "false", "0": return .bool(false)
            default: throw wrong()
            }
        case .date(let format):
            switch format {
            case .iso8601, .pattern:
                guard let date = dates.convert(ArraySlice(text.utf8), format: format) else {
                    throw MappingFailure(reason: "\(preview) (as '\(text)') is not a date in format \(format.name)", code: .notADate)
                }
                return .text(date)
            case .unixSeconds, .unixMilliseconds:
                guard let number = Double(trimmed), let date = dates.convert(number: number, format: format) else { throw wrong() }
                return .text(date)
            }
        case .json:
            var quoted = ""
            JSONText.quote(text, into: &quoted)
            return .text(quoted)
        }
    }

    /// Why JSON text (a string's content with its escapes, or a whole value, keys included)
    /// cannot be stored the same way by every backend, if it cannot: the escape `\u0000` (NUL,
    /// which PostgreSQL's text and jsonb refuse) or a lone surrogate escape such as `\ud800`
    /// (which jsonb refuses, and which text could only keep as U+FFFD, merging distinct values).
    /// One rule for every backend: the same pages give the same tables in SQLite and PostgreSQL.
    static func unstorable(_ json: some Collection<UInt8>) -> MappingFailure? {
        // Only escapes matter, and most text has none.
        guard json.contains(UInt8(ascii: "\\")) else { return nil }
        let bytes = Array(json)
        func hex4(_ k: Int) -> UInt32? {
            guard k + 4 <= bytes.count else { return nil }
            var v: UInt32 = 0
            for j in k..<k + 4 {
                guard let d = JSONParser.hexValue(bytes[j]) else { return nil }
                v = v << 4 | d
            }
            return v
        }
        var i = 0
        while i + 1 < bytes.count {
            guard bytes[i] == UInt8(ascii: "\\") else {
                i += 1
                continue
            }
            guard bytes[i + 1] == UInt8(ascii: "u"), let u = hex4(i + 2) else {
                i += 2  // another escape: skip the escaped character
                continue
            }
            i += 6
            if u == 0 { return .unstorableNUL }
            if u >= 0xDC00 && u < 0xE000 { return .unstorableSurrogate }
            if u >= 0xD800 && u < 0xDC00 {
                // A high surrogate must be followed by a low one.
                guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u"),
                    let low = hex4(i + 2), low >= 0xDC00 && low < 0xE000
                else { return .unstorableSurrogate }
                i += 6
            }
        }
        return nil
    }
}

// MARK: - Cursor

/// Why a record cannot be mapped, and where: a path built from the inside out as the failure
/// travels up to the record.
struct MappingFailure: Error {
    enum Component {
        case key(String)
        case index(Int)
    }
    var reason: String
    var entity: String?
    var code: RejectReason
    /// Innermost component last.
    var path: [Component] = []

    init(reason: String, entity: String? = nil, code: RejectReason) {
        self.reason = reason
        self.entity = entity
        self.code = code
    }

    /// Text holding U+0000, which PostgreSQL cannot store (refused in every backend alike).
    static let unstorableNUL = MappingFailure(
        reason: "the text holds a NUL character (\\u0000), which a database cannot store in text or JSON", code: .unstorable)
    /// Text holding a lone UTF-16 surrogate escape, which is no character at all.
    static let unstorableSurrogate = MappingFailure(
        reason: "the text holds a lone surrogate escape (\\ud800–\\udfff without its pair), which is no Unicode character",
        code: .unstorable)

    func prepending(_ component: Component) -> MappingFailure { prepending([component]) }

    /// `components` are given innermost first.
    func prepending(_ components: [Component]) -> MappingFailure {
        var copy = self
        copy.path = components.reversed() + path
        return copy
    }

    /// `.dogs[1].id`
    var pathText: String {
        path.map {
            switch $0 {
            case .key(let k): "." + k
            case .index(let i): "[\(i)]"
            }
        }.joined()
    }

    /// `dogs[1].vet`: `components` outermost first, without a leading dot.
    static func render(_ components: [Component]) -> String {
        var text = ""
        for component in components {
            switch component {
            case .key(let k): text += text.isEmpty ? k : "." + k
            case .index(let i): text += "[\(i)]"
            }
        }
        return text
    }
}

extension JSONNode.Kind {
    var jsonName: String {
        switch self {
        case .null: "null"
        case .true, .false: "bool"
        case .integer, .double: "number"
        case .string, .escapedString: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

extension AttributeType {
    var name: String {
        switch self {
        case .integer: "integer"
        case .double: "double"
        case .string: "string"
        case .bool: "bool"
        case .date: "date"
        case .json: "json"
        }
    }
}

extension DateFormat {
    var name: String {
        switch self {
        case .iso8601: "iso8601"
        case .pattern(let p, _): p
        case .unixSeconds: "unix"
        case .unixMilliseconds: "unix_ms"
        }
    }
}
