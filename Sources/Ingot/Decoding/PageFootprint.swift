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
        var mentioned: [Int: (ints: [Int64], others: Set<IdentityKey>)] = [:]
        var named: [Int: (ints: [Int64], others: Set<IdentityKey>)] = [:]
        func add(_ key: IdentityKey, _ entity: Int, to set: inout [Int: (ints: [Int64], others: Set<IdentityKey>)]) {
            if case .single(.integer(let v)) = key {
                set[entity, default: ([], [])].ints.append(v)
            } else {
                set[entity, default: ([], [])].others.insert(key)
            }
        }
        for row in page.rows {
            guard let identity = row.identity, layouts.indices.contains(row.entity) else { continue }
            let layout = layouts[row.entity]
            var identityMask = ColumnMask()
            for slot in layout.identitySlots { identityMask.insert(slot) }
            var mentions = row.mask.subtracting(identityMask) != ColumnMask()
            for (k, toMany) in layout.toMany.enumerated() {
                guard let set = page.storage.linkSets[safe: row.linkStart + k], let targets = set else { continue }
                mentions = true
                for target in targets { add(target, toMany.target, to: &named) }
            }
            if mentions { add(identity, row.entity, to: &mentioned) } else { add(identity, row.entity, to: &named) }
        }
        for record in page.records {
            for reference in record.references { add(reference.identity, reference.target, to: &named) }
        }
        for (entity, set) in mentioned {
            entities[entity, default: Rows()].mentionedIntegers = Array(Set(set.ints)).sorted()
            entities[entity, default: Rows()].mentionedOthers = Array(set.others)
        }
        for (entity, set) in named {
            var rows = entities[entity, default: Rows()]
            let mentionedInts = Set(rows.mentionedIntegers)
            let mentionedOthers = Set(rows.mentionedOthers)
            rows.namedIntegers = Array(Set(set.ints).subtracting(mentionedInts)).sorted()
            rows.namedOthers = Array(set.others.subtracting(mentionedOthers))
            entities[entity] = rows
        }
    }

    /// Adds another part's rows (a page decoded in parts): a row mentioned by either is mentioned.
    mutating func formUnion(_ other: PageFootprint) {
        for (entity, theirs) in other.entities {
            guard let ours = entities[entity] else {
                entities[entity] = theirs
                continue
            }
            let mentionedInts = Set(ours.mentionedIntegers).union(theirs.mentionedIntegers)
            let mentionedOthers = Set(ours.mentionedOthers).union(theirs.mentionedOthers)
            var rows = Rows()
            rows.mentionedIntegers = mentionedInts.sorted()
            rows.mentionedOthers = Array(mentionedOthers)
            rows.namedIntegers = Set(ours.namedIntegers).union(theirs.namedIntegers).subtracting(mentionedInts).sorted()
            rows.namedOthers = Array(Set(ours.namedOthers).union(theirs.namedOthers).subtracting(mentionedOthers))
            entities[entity] = rows
        }
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
