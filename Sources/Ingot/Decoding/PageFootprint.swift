/// The rows a page's records touch, by entity: the rows it holds a record of (`mentioned`: values
/// or links, what a run counts) and the rows it only names (a reference, a link's target, a
/// stub). What a refresh compares pages by (``RefreshPlan``): a page whose rows no changed page
/// touches can be left out of a rerun. Kept with each page's ``PagePrint``, in a compact form
/// (``encoded()``: sorted integer identities as delta varints, a few bytes a row).
struct PageFootprint: Sendable, Equatable {
    /// One entity's rows.
    struct Rows: Sendable, Equatable {
        /// Single integer identities (the common case), sorted, distinct.
        var mentionedIntegers: [Int64] = []
        var namedIntegers: [Int64] = []
        /// Any other identity (text, real, composite), distinct.
        var mentionedOthers: [IdentityKey] = []
        var namedOthers: [IdentityKey] = []

        var isEmpty: Bool {
            mentionedIntegers.isEmpty && namedIntegers.isEmpty && mentionedOthers.isEmpty && namedOthers.isEmpty
        }

        /// Every row it mentions.
        var mentioned: [IdentityKey] { mentionedIntegers.map { .single(.integer($0)) } + mentionedOthers }
    }

    /// By entity index (the model's), only entities the page touches.
    private(set) var entities: [Int: Rows] = [:]

    init() {}

    /// The footprint of a decoded page (or part of one): its rows and what they name.
    init(of page: DecodedPage, layouts: [EntityLayout]) {
        // Per entity, by index: cheap to fill for the pages of millions of rows a run maps.
        var mentionedInts = [[Int64]](repeating: [], count: layouts.count)
        var namedInts = [[Int64]](repeating: [], count: layouts.count)
        var mentionedOthers = [Set<IdentityKey>](repeating: [], count: layouts.count)
        var namedOthers = [Set<IdentityKey>](repeating: [], count: layouts.count)
        let identityMasks = layouts.map { layout in
            var mask = ColumnMask()
            for slot in layout.identitySlots { mask.insert(slot) }
            return mask
        }
        func name(_ key: IdentityKey, _ entity: Int) {
            guard layouts.indices.contains(entity) else { return }
            if case .single(.integer(let v)) = key { namedInts[entity].append(v) } else { namedOthers[entity].insert(key) }
        }
        // Rows read in place: a copy of each would retain its identity's storage.
        page.rows.withUnsafeBufferPointer { rows in
            page.storage.linkSets.withUnsafeBufferPointer { linkSets in
                for k in rows.indices {
                    let entity = rows[k].entity
                    guard rows[k].identity != nil, layouts.indices.contains(entity) else { continue }
                    var mentions = rows[k].mask.subtracting(identityMasks[entity]) != ColumnMask()
                    let linkStart = rows[k].linkStart
                    for (l, toMany) in layouts[entity].toMany.enumerated() where linkStart + l < linkSets.count {
                        guard let targets = linkSets[linkStart + l] else { continue }
                        mentions = true
                        for target in targets { name(target, toMany.target) }
                    }
                    if case .single(.integer(let v))? = rows[k].identity {
                        if mentions { mentionedInts[entity].append(v) } else { namedInts[entity].append(v) }
                    } else if let identity = rows[k].identity {
                        if mentions { mentionedOthers[entity].insert(identity) } else { namedOthers[entity].insert(identity) }
                    }
                }
            }
        }
        for record in page.records {
            for reference in record.references { name(reference.identity, reference.target) }
        }
        for entity in layouts.indices {
            var rows = Rows()
            rows.mentionedIntegers = PageFootprint.sortedDistinct(mentionedInts[entity])
            rows.namedIntegers = PageFootprint.subtracting(PageFootprint.sortedDistinct(namedInts[entity]), rows.mentionedIntegers)
            rows.mentionedOthers = Array(mentionedOthers[entity])
            rows.namedOthers = Array(namedOthers[entity].subtracting(mentionedOthers[entity]))
            if !rows.isEmpty { entities[entity] = rows }
        }
    }

    /// `values` sorted, each once.
    private static func sortedDistinct(_ values: consuming [Int64]) -> [Int64] {
        guard values.count > 1 else { return values }
        radixSort(&values)
        var kept = 1
        for k in 1..<values.count where values[k] != values[kept - 1] {
            values[kept] = values[k]
            kept += 1
        }
        values.removeLast(values.count - kept)
        return values
    }

    /// Sorts `values` (``RadixSort``): ordered as unsigned words with the sign bit flipped, in
    /// place and back.
    static func radixSort(_ values: inout [Int64]) {
        values.withUnsafeMutableBufferPointer { values in
            values.withMemoryRebound(to: UInt64.self) { words in
                for k in words.indices { words[k] ^= 1 << 63 }
                RadixSort.sort(words)
                for k in words.indices { words[k] ^= 1 << 63 }
            }
        }
    }

    /// The members of sorted `values` that sorted `other` does not hold.
    private static func subtracting(_ values: [Int64], _ other: [Int64]) -> [Int64] {
        guard !values.isEmpty, !other.isEmpty else { return values }
        var out: [Int64] = []
        out.reserveCapacity(values.count)
        var j = 0
        for v in values {
            while j < other.count && other[j] < v { j += 1 }
            if j == other.count || other[j] != v { out.append(v) }
        }
        return out
    }

    /// The rows of a page decoded in parts: gathers the parts' footprints as they come, then
    /// sorts them once (``finish()``); a row mentioned by any part is mentioned.
    /// Merging each part into the union so far sorted it again at every part: a page of 4M
    /// records in 800 parts (`make bench`'s dense pages) took minutes instead of a second; and
    /// keeping the parts until the last one held them twice.
    struct Gatherer: Sendable {
        private var gathered: [Int: Rows] = [:]

        /// Adds a part's rows.
        mutating func add(_ part: PageFootprint) {
            for (entity, theirs) in part.entities {
                // In place: the dictionary's value is not copied per part.
                gathered[entity, default: Rows()].mentionedIntegers.append(contentsOf: theirs.mentionedIntegers)
                gathered[entity, default: Rows()].namedIntegers.append(contentsOf: theirs.namedIntegers)
                gathered[entity, default: Rows()].mentionedOthers.append(contentsOf: theirs.mentionedOthers)
                gathered[entity, default: Rows()].namedOthers.append(contentsOf: theirs.namedOthers)
            }
        }

        /// The page's footprint: each row once, mentioned if any part mentioned it.
        consuming func finish() -> PageFootprint {
            var union = PageFootprint()
            for entity in Array(gathered.keys) {
                // Taken out, so that sorting them does not copy them.
                var all = gathered.removeValue(forKey: entity) ?? Rows()
                var mentioned: [Int64] = []
                var named: [Int64] = []
                swap(&mentioned, &all.mentionedIntegers)
                swap(&named, &all.namedIntegers)
                var rows = Rows()
                let mentionedOthers = Set(all.mentionedOthers)
                rows.mentionedIntegers = sortedDistinct(consume mentioned)
                rows.namedIntegers = subtracting(sortedDistinct(consume named), rows.mentionedIntegers)
                rows.mentionedOthers = Array(mentionedOthers)
                rows.namedOthers = Array(Set(all.namedOthers).subtracting(mentionedOthers))
                union.entities[entity] = rows
            }
            return union
        }
    }

    /// The rows `keep` keeps (by entity and identity), each still mentioned or named.
    func filter(_ keep: (Int, IdentityKey) -> Bool) -> PageFootprint {
        var out = PageFootprint()
        for (entity, rows) in entities {
            var kept = Rows()
            kept.mentionedIntegers = rows.mentionedIntegers.filter { keep(entity, .single(.integer($0))) }
            kept.namedIntegers = rows.namedIntegers.filter { keep(entity, .single(.integer($0))) }
            kept.mentionedOthers = rows.mentionedOthers.filter { keep(entity, $0) }
            kept.namedOthers = rows.namedOthers.filter { keep(entity, $0) }
            if !kept.isEmpty { out.entities[entity] = kept }
        }
        return out
    }

    /// The rows it holds a record of, that `other` does not.
    func mentioned(subtracting other: PageFootprint) -> PageFootprint {
        var out = PageFootprint()
        for (entity, rows) in entities {
            let theirs = other.entities[entity]
            var kept = Rows()
            kept.mentionedIntegers = PageFootprint.subtracting(rows.mentionedIntegers, theirs?.mentionedIntegers ?? [])
            kept.mentionedOthers = Array(Set(rows.mentionedOthers).subtracting(theirs?.mentionedOthers ?? []))
            if !kept.isEmpty { out.entities[entity] = kept }
        }
        return out
    }

    /// Whether it holds the row `key` of `entity` (mentioned or named).
    func contains(_ key: IdentityKey, entity: Int) -> Bool {
        guard let rows = entities[entity] else { return false }
        if case .single(.integer(let v)) = key {
            return PageFootprint.search(rows.mentionedIntegers, v) || PageFootprint.search(rows.namedIntegers, v)
        }
        return rows.mentionedOthers.contains(key) || rows.namedOthers.contains(key)
    }

    private static func search(_ sorted: [Int64], _ value: Int64) -> Bool {
        var (low, high) = (0, sorted.count)
        while low < high {
            let middle = (low + high) / 2
            if sorted[middle] < value { low = middle + 1 } else { high = middle }
        }
        return low < sorted.count && sorted[low] == value
    }

    // MARK: - Stored form

    /// Version 1: `1`, the entity count, then per entity (ascending): its index, then mentioned
    /// and named rows, each as a count and zigzag varint deltas of the sorted integers, then a
    /// count and the other identities (``IdentityKey``: 0 single / 1 composite with a count, each
    /// value a type byte: 0 null, 1 integer (zigzag varint), 2 real (8 bytes), 3 text (length,
    /// UTF-8), 4 bool).
    func encoded() -> [UInt8] {
        var out: [UInt8] = [1]
        Varint.append(UInt64(entities.count), to: &out)
        for entity in entities.keys.sorted() {
            guard let rows = entities[entity] else { continue }
            Varint.append(UInt64(entity), to: &out)
            for (ints, others) in [(rows.mentionedIntegers, rows.mentionedOthers), (rows.namedIntegers, rows.namedOthers)] {
                Varint.append(UInt64(ints.count), to: &out)
                var previous: Int64 = 0
                for v in ints {
                    Varint.append(Varint.zigzag(v &- previous), to: &out)
                    previous = v
                }
                Varint.append(UInt64(others.count), to: &out)
                for key in others { PageFootprint.append(key, to: &out) }
            }
        }
        return out
    }

    /// A stored footprint; throws ``Malformed`` on anything ``encoded()`` does not write (a
    /// damaged or foreign blob: the refresh then reads every page).
    init(decoding bytes: [UInt8]) throws {
        var reader = Varint.Reader(bytes: bytes)
        guard try reader.byte() == 1 else { throw Malformed() }
        let count = try reader.count(limit: 1 << 16)
        for _ in 0..<count {
            let entity = try reader.count(limit: 1 << 16)
            var rows = Rows()
            for named in [false, true] {
                let n = try reader.count(limit: bytes.count)
                var ints: [Int64] = []
                ints.reserveCapacity(n)
                var previous: Int64 = 0
                for _ in 0..<n {
                    previous = previous &+ Varint.unzigzag(try reader.varint())
                    ints.append(previous)
                }
                let m = try reader.count(limit: bytes.count)
                var others: [IdentityKey] = []
                for _ in 0..<m { others.append(try PageFootprint.key(&reader)) }
                if named {
                    (rows.namedIntegers, rows.namedOthers) = (ints, others)
                } else {
                    (rows.mentionedIntegers, rows.mentionedOthers) = (ints, others)
                }
            }
            entities[entity] = rows
        }
        guard reader.atEnd else { throw Malformed() }
    }

    /// A stored footprint that ``init(decoding:)`` cannot read.
    struct Malformed: Error {}

    private static func append(_ key: IdentityKey, to out: inout [UInt8]) {
        switch key {
        case .single(let v):
            out.append(0)
            append(v, to: &out)
        case .composite(let vs):
            out.append(1)
            Varint.append(UInt64(vs.count), to: &out)
            for v in vs { append(v, to: &out) }
        }
    }

    private static func append(_ value: ScalarValue, to out: inout [UInt8]) {
        switch value {
        case .null: out.append(0)
        case .integer(let v):
            out.append(1)
            Varint.append(Varint.zigzag(v), to: &out)
        case .real(let v):
            out.append(2)
            withUnsafeBytes(of: v.bitPattern.littleEndian) { out.append(contentsOf: $0) }
        case .text(let s):
            out.append(3)
            Varint.append(UInt64(s.utf8.count), to: &out)
            out.append(contentsOf: s.utf8)
        case .bool(let b): out.append(contentsOf: [4, b ? 1 : 0])
        }
    }

    private static func key(_ reader: inout Varint.Reader) throws -> IdentityKey {
        switch try reader.byte() {
        case 0: return .single(try value(&reader))
        case 1:
            let n = try reader.count(limit: 64)
            var vs: [ScalarValue] = []
            for _ in 0..<n { vs.append(try value(&reader)) }
            return .composite(vs)
        default: throw Malformed()
        }
    }

    private static func value(_ reader: inout Varint.Reader) throws -> ScalarValue {
        switch try reader.byte() {
        case 0: return .null
        case 1: return .integer(Varint.unzigzag(try reader.varint()))
        case 2:
            var bits: UInt64 = 0
            for k in 0..<8 { bits |= UInt64(try reader.byte()) << UInt64(8 * k) }
            return .real(Double(bitPattern: bits))
        case 3:
            let n = try reader.count(limit: 1 << 20)
            return .text(String(decoding: try reader.bytes(n), as: UTF8.self))
        case 4: return .bool(try reader.byte() != 0)
        default: throw Malformed()
        }
    }
}

/// LEB128 varints, as the stored footprints use them.
enum Varint {
    static func append(_ value: UInt64, to out: inout [UInt8]) {
        var v = value
        while v >= 0x80 {
            out.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        out.append(UInt8(v))
    }

    static func zigzag(_ v: Int64) -> UInt64 { UInt64(bitPattern: (v << 1) ^ (v >> 63)) }
    static func unzigzag(_ u: UInt64) -> Int64 { Int64(bitPattern: u >> 1) ^ -Int64(bitPattern: u & 1) }

    /// Reads varints and bytes off a buffer, throwing ``PageFootprint/Malformed`` past its end.
    struct Reader {
        let bytes: [UInt8]
        var offset = 0

        var atEnd: Bool { offset == bytes.count }

        mutating func byte() throws -> UInt8 {
            guard offset < bytes.count else { throw PageFootprint.Malformed() }
            offset += 1
            return bytes[offset - 1]
        }

        mutating func varint() throws -> UInt64 {
            var result: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let b = try byte()
                guard shift < 64 else { throw PageFootprint.Malformed() }
                result |= UInt64(b & 0x7F) << shift
                if b < 0x80 { return result }
                shift += 7
            }
        }

        /// A count no bigger than `limit` (a damaged count must not reserve gigabytes).
        mutating func count(limit: Int) throws -> Int {
            let v = try varint()
            guard v <= UInt64(limit) else { throw PageFootprint.Malformed() }
            return Int(v)
        }

        mutating func bytes(_ n: Int) throws -> ArraySlice<UInt8> {
            guard n <= bytes.count - offset else { throw PageFootprint.Malformed() }
            offset += n
            return bytes[(offset - n)..<offset]
        }
    }
}
