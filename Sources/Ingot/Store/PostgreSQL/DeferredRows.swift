/// A joined job's deferred rows as bytes, and their fold (docs/scale-out.md, "Writes deferred to
/// the run's end").
///
/// A deferring job sends each batch's folded rows to the run as opaque bytes, one blob per part
/// (``part(of:parts:)``: a hash of the identity every job computes alike), in the transaction
/// that marks its units done; the server stores them and does nothing else with them. When every
/// unit is done, the jobs take the parts one by one, and the job that takes a part folds its
/// blobs here — per identity, each column the value of the largest unit that gave it, each set
/// the one of the largest unit, as the positional upsert would decide them one batch at a time —
/// and writes the result once. So the server's work is the final rows' writes, as a single run's
/// is, whatever the number of jobs: folded in SQL, tables of the run cost it four times a single
/// run's CPU at four jobs (docs/scale-out.md, "Where the server's time goes").
struct DeferredRow: Equatable {
    var identity: IdentityKey
    /// Per column: the value given (`nil`: not mentioned; a `default:` or `const:` fill has a
    /// value and unit 0).
    var values: [ScalarValue?]
    /// Per column: the unit key (``UnitOrder``) of the record that gave it, 0 where none did.
    var units: [Int]
    /// Per to-many relationship: the set given, or `nil`.
    var links: [[IdentityKey]?]
    /// Per to-many relationship: the unit key of the set, 0 where none was given.
    var linkUnits: [Int]
    /// The unit key of the row's latest mention: its latest slot's, or a stub's batch's last.
    var touched: Int

    /// Whether it gives anything but its identity (a column or a set): a row that gives nothing
    /// is a stub.
    func gives(identitySlots: [Int]) -> Bool {
        units.indices.contains { !identitySlots.contains($0) && units[$0] > 0 } || linkUnits.contains { $0 > 0 }
    }

    /// Folds `other` (the same identity's row from another batch) into this one: each column the
    /// value of the larger unit (a value without a unit, a fill, loses to any with one and wins
    /// over none), each set the larger unit's, `touched` the larger.
    mutating func fold(_ other: DeferredRow) {
        // Ranked by unit, then by holding a value: (unit, given) as one number.
        func rank(_ unit: Int, _ given: Bool) -> Int { unit &* 2 &+ (given ? 1 : 0) }
        for slot in values.indices where slot < other.values.count {
            if rank(other.units[slot], other.values[slot] != nil) > rank(units[slot], values[slot] != nil) {
                values[slot] = other.values[slot]
                units[slot] = other.units[slot]
            }
        }
        for k in links.indices where k < other.links.count {
            if rank(other.linkUnits[k], other.links[k] != nil) > rank(linkUnits[k], links[k] != nil) {
                links[k] = other.links[k]
                linkUnits[k] = other.linkUnits[k]
            }
        }
        touched = max(touched, other.touched)
    }
}

/// Deferred rows encoded (``DeferredRows/Writer``) and read back (``DeferredRows/Reader``). The
/// bytes come back from the database, where any job (or anyone) may have written them: the
/// reader checks every length and tag and throws ``DeferredRows/Damaged`` rather than trap.
enum DeferredRows {
    struct Damaged: Error, CustomStringConvertible {
        var description: String
    }

    /// The part of the run an identity's rows go to: FNV-1a over its encoded values, the same in
    /// every job (Swift's `Hasher` is seeded per process).
    static func part(of identity: IdentityKey, parts: Int) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        var bytes: [UInt8] = []
        for value in identity.values { Writer.append(value, to: &bytes) }
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return Int(hash % UInt64(max(parts, 1)))
    }

    /// Rows of several entities, appended one after another.
    struct Writer {
        private(set) var bytes: [UInt8] = []
        private(set) var rows = 0

        mutating func append(_ row: DeferredRow, entity: Int) {
            rows += 1
            Self.appendCount(entity, to: &bytes)
            Self.append(row.identity, to: &bytes)
            Self.appendCount(row.touched, to: &bytes)
            Self.appendCount(row.values.count, to: &bytes)
            for (value, unit) in zip(row.values, row.units) {
                if let value {
                    Self.append(value, to: &bytes)
                    Self.appendCount(unit, to: &bytes)
                } else {
                    bytes.append(0)
                }
            }
            Self.appendCount(row.links.count, to: &bytes)
            for (set, unit) in zip(row.links, row.linkUnits) {
                guard let set else {
                    bytes.append(0)
                    continue
                }
                Self.appendCount(set.count + 1, to: &bytes)
                Self.appendCount(unit, to: &bytes)
                for target in set { Self.append(target, to: &bytes) }
            }
        }

        static func appendCount(_ n: Int, to out: inout [UInt8]) {
            var v = UInt64(max(n, 0))
            while v >= 0x80 {
                out.append(UInt8(v & 0x7F) | 0x80)
                v >>= 7
            }
            out.append(UInt8(v))
        }

        static func append(_ identity: IdentityKey, to out: inout [UInt8]) {
            let values = identity.values
            appendCount(values.count, to: &out)
            for value in values { append(value, to: &out) }
        }

        /// A value: its tag (1 null, 2 integer, 3 real, 4 text, 5 false, 6 true; 0 is "not
        /// given"), then its payload.
        static func append(_ value: ScalarValue, to out: inout [UInt8]) {
            switch value {
            case .null: out.append(1)
            case .integer(let v):
                out.append(2)
                let zigzag = UInt64(bitPattern: (v << 1) ^ (v >> 63))
                var u = zigzag
                while u >= 0x80 {
                    out.append(UInt8(u & 0x7F) | 0x80)
                    u >>= 7
                }
                out.append(UInt8(u))
            case .real(let v):
                out.append(3)
                var bits = v.bitPattern
                for _ in 0..<8 {
                    out.append(UInt8(bits & 0xFF))
                    bits >>= 8
                }
            case .text(let s):
                out.append(4)
                appendCount(s.utf8.count, to: &out)
                out.append(contentsOf: s.utf8)
            case .bool(let b): out.append(b ? 6 : 5)
            }
        }
    }

    /// Reads rows back, checking each against the entities' shapes (`columns`, `links` per entity).
    struct Reader {
        private let bytes: [UInt8]
        private var at = 0
        private let shapes: [(columns: Int, links: Int)]

        init(_ bytes: [UInt8], shapes: [(columns: Int, links: Int)]) {
            self.bytes = bytes
            self.shapes = shapes
        }

        var atEnd: Bool { at >= bytes.count }

        /// The next row and its entity.
        mutating func next() throws(Damaged) -> (entity: Int, row: DeferredRow) {
            let entity = try count()
            guard shapes.indices.contains(entity) else { throw Damaged(description: "an entity \(entity) the model does not have") }
            let identity = try identityKey()
            let touched = try count()
            let columns = try count()
            guard columns == shapes[entity].columns else {
                throw Damaged(description: "\(columns) columns where the entity has \(shapes[entity].columns)")
            }
            var values: [ScalarValue?] = []
            var units: [Int] = []
            values.reserveCapacity(columns)
            units.reserveCapacity(columns)
            for _ in 0..<columns {
                if let value = try valueOrAbsent() {
                    values.append(value)
                    units.append(try count())
                } else {
                    values.append(nil)
                    units.append(0)
                }
            }
            let linkCount = try count()
            guard linkCount == shapes[entity].links else {
                throw Damaged(description: "\(linkCount) sets where the entity has \(shapes[entity].links)")
            }
            var links: [[IdentityKey]?] = []
            var linkUnits: [Int] = []
            for _ in 0..<linkCount {
                let n = try count()
                guard n > 0 else {
                    links.append(nil)
                    linkUnits.append(0)
                    continue
                }
                linkUnits.append(try count())
                guard n - 1 <= bytes.count - at else { throw Damaged(description: "a set longer than its bytes") }
                var set: [IdentityKey] = []
                set.reserveCapacity(n - 1)
                for _ in 0..<(n - 1) { set.append(try identityKey()) }
                links.append(set)
            }
            return (entity, DeferredRow(identity: identity, values: values, units: units, links: links, linkUnits: linkUnits, touched: touched))
        }

        private mutating func byte() throws(Damaged) -> UInt8 {
            guard at < bytes.count else { throw Damaged(description: "the bytes end inside a row") }
            defer { at += 1 }
            return bytes[at]
        }

        private mutating func count() throws(Damaged) -> Int {
            var v: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let b = try byte()
                guard shift < 63 else { throw Damaged(description: "a number too long") }
                v |= UInt64(b & 0x7F) << shift
                if b < 0x80 { break }
                shift += 7
            }
            guard v <= UInt64(Int.max) else { throw Damaged(description: "a number too large") }
            return Int(v)
        }

        private mutating func identityKey() throws(Damaged) -> IdentityKey {
            let n = try count()
            guard n >= 1, n <= 64 else { throw Damaged(description: "an identity of \(n) values") }
            var values: [ScalarValue] = []
            for _ in 0..<n {
                guard let value = try valueOrAbsent() else { throw Damaged(description: "an identity value not given") }
                values.append(value)
            }
            return n == 1 ? .single(values[0]) : .composite(values)
        }

        private mutating func valueOrAbsent() throws(Damaged) -> ScalarValue? {
            switch try byte() {
            case 0: return nil
            case 1: return .null
            case 2:
                var u: UInt64 = 0
                var shift: UInt64 = 0
                while true {
                    let b = try byte()
                    guard shift < 64 else { throw Damaged(description: "an integer too long") }
                    u |= UInt64(b & 0x7F) << shift
                    if b < 0x80 { break }
                    shift += 7
                }
                return .integer(Int64(bitPattern: u >> 1) ^ -Int64(bitPattern: u & 1))
            case 3:
                var bits: UInt64 = 0
                for k in 0..<8 { bits |= UInt64(try byte()) << (8 * UInt64(k)) }
                return .real(Double(bitPattern: bits))
            case 4:
                let n = try count()
                guard n <= bytes.count - at else { throw Damaged(description: "a text longer than its bytes") }
                defer { at += n }
                guard let text = String(validating: bytes[at..<(at + n)], as: UTF8.self) else {
                    throw Damaged(description: "a text that is not UTF-8")
                }
                return .text(text)
            case 5: return .bool(false)
            case 6: return .bool(true)
            case let tag: throw Damaged(description: "a value of unknown tag \(tag)")
            }
        }
    }

    /// One part's rows folded, per entity: one row per identity, in first-seen order.
    struct Fold {
        private(set) var rows: [[DeferredRow]]
        private var index: [[IdentityKey: Int]]

        init(entities: Int) {
            rows = Array(repeating: [], count: entities)
            index = Array(repeating: [:], count: entities)
        }

        mutating func add(_ row: DeferredRow, entity: Int) {
            if let at = index[entity][row.identity] {
                rows[entity][at].fold(row)
            } else {
                index[entity][row.identity] = rows[entity].count
                rows[entity].append(row)
            }
        }
    }
}
