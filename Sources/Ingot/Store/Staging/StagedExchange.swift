import Foundation
import GRDBSQLite

/// A joined run's rows on their way between jobs: each batch's staged rows (``StageFile/feeds(of:_:)``:
/// an identity's columns, then its ``StagedRow``), split into the run's parts by a hash of the
/// identity every job computes alike, one blob per part; once every unit is done, the job that
/// takes a part gathers the part's blobs from every job into one sorted run per entity, and
/// folds and copies it as a single job's staged load does (docs/scale-out.md, "Rows exchanged
/// between jobs").
///
/// **Why one fold is exact.** A part's blobs, from every job, hold every write the run makes to
/// the part's identities: no row of them reaches the tables before. Each blob comes from one
/// batch, whose units are consecutive (a job that defers cuts its batches where another job's
/// unit lies between), and batches of different jobs never share a unit — so ordering the blobs
/// by their batch's key, and an identity's rows by their blob then their place in it, puts them
/// in the order a single run meets them, page after page, record after record (a folded batch's
/// row stands for consecutive units, which no other job's row falls between). The fold then
/// takes the last record's value, key by key, as a single run does.
///
/// The blob of a part: per entity with rows in it, the entity (2 bytes), the rows (4), the bytes
/// (4), then the rows as ``RowFeed`` holds them, in identity order. Numbers little-endian.
enum StagedExchange {
    /// The parts a run's rows are split into: the merge's unit of work, taken by the jobs side
    /// by side once every unit is done.
    static let parts = 8

    /// The part of the identity whose values (``HeldValues/write(_:at:)``'s format) are `bytes`:
    /// FNV-1a over them, so that every job, on any machine, puts an identity in the same part.
    static func part(of bytes: UnsafeRawBufferPointer) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return Int(hash % UInt64(parts))
    }

    /// A batch's staged rows split by part: per part, its blob (empty when no row falls in it).
    static func split(_ feeds: [(entity: Int, feed: RowFeed)], _ layouts: [EntityLayout]) -> [[UInt8]] {
        var blobs = [[UInt8]](repeating: [], count: parts)
        var sections = [[UInt8]](repeating: [], count: parts)
        var counts = [Int](repeating: 0, count: parts)
        for (entity, feed) in feeds {
            let identity = layouts[entity].identitySlots.count
            for p in 0..<parts {
                sections[p].removeAll(keepingCapacity: true)
                counts[p] = 0
            }
            for r in 0..<feed.count {
                let row = feed.row(r, arity: identity + 1)
                guard let base = row.baseAddress else { continue }
                let key = UnsafeRawBufferPointer(start: base, count: RowFeed.end(of: identity, in: base, from: 0, used: row.count))
                let p = part(of: key)
                sections[p].append(contentsOf: row)
                counts[p] += 1
            }
            for p in 0..<parts where counts[p] > 0 {
                LittleEndian.appendInteger(UInt64(entity), bytes: 2, to: &blobs[p])
                LittleEndian.appendInteger(UInt64(counts[p]), bytes: 4, to: &blobs[p])
                LittleEndian.appendInteger(UInt64(sections[p].count), bytes: 4, to: &blobs[p])
                blobs[p] += sections[p]
            }
        }
        return blobs
    }

    /// A blob that is not one ``split(_:_:)`` wrote.
    struct Malformed: Error, CustomStringConvertible {
        var description: String
    }

    /// The rows of a part's `blobs` (in their batches' order), per entity, in one identity order:
    /// an identity's rows in the order of their blobs, then as each blob holds them. `nil` for an
    /// entity without rows.
    static func gather(_ blobs: [[UInt8]], _ layouts: [EntityLayout]) throws -> [RowFeed?] {
        // Per entity: each row's blob, where it starts and how long it is.
        var rows = [[(blob: Int32, start: Int32, count: Int32)]](repeating: [], count: layouts.count)
        for (b, blob) in blobs.enumerated() {
            try blob.withUnsafeBytes { bytes in
                var at = 0
                while at < bytes.count {
                    guard at + 10 <= bytes.count else { throw Malformed(description: "a section header past the blob's end") }
                    let entity = Int(LittleEndian.integer(bytes, at, 2))
                    let count = Int(LittleEndian.integer(bytes, at + 2, 4))
                    let length = Int(LittleEndian.integer(bytes, at + 6, 4))
                    at += 10
                    guard layouts.indices.contains(entity), at + length <= bytes.count, let base = bytes.baseAddress else {
                        throw Malformed(description: "a section of entity \(entity) of \(length) bytes at \(at) of \(bytes.count)")
                    }
                    let arity = layouts[entity].identitySlots.count + 1
                    var row = at
                    for _ in 0..<count {
                        let end = RowFeed.end(of: arity, in: base, from: row, used: at + length)
                        guard end > row else { throw Malformed(description: "an empty row of entity \(entity)") }
                        rows[entity].append((Int32(b), Int32(row), Int32(end - row)))
                        row = end
                    }
                    guard row == at + length else {
                        throw Malformed(description: "entity \(entity)'s rows end at \(row), not \(at + length)")
                    }
                    at += length
                }
            }
        }
        var feeds = [RowFeed?](repeating: nil, count: layouts.count)
        for (entity, list) in rows.enumerated() where !list.isEmpty {
            let identity = layouts[entity].identitySlots.count
            let order = identityOrder(list, identity: identity, blobs)
            let feed = RowFeed()
            for k in order {
                let row = list[k]
                blobs[Int(row.blob)].withUnsafeBytes { bytes in
                    feed.beginRow()
                    feed.appendEncoded(UnsafeRawBufferPointer(rebasing: bytes[Int(row.start)..<Int(row.start + row.count)]))
                }
            }
            feeds[entity] = feed
        }
        return feeds
    }

    /// The positions of `rows` in identity order, ties in their order in `rows`: by the integer
    /// when the identity is one (the usual kind), else value by value (``StageOrder``).
    private static func identityOrder(
        _ rows: [(blob: Int32, start: Int32, count: Int32)], identity: Int, _ blobs: [[UInt8]]
    ) -> [Int] {
        var keys: [Int64] = []
        keys.reserveCapacity(rows.count)
        var integers = identity == 1
        if integers {
            for row in rows {
                let key: Int64? = blobs[Int(row.blob)].withUnsafeBytes { bytes in
                    guard bytes[Int(row.start)] == UInt8(SQLITE_INTEGER) else { return nil }
                    return Int64(bitPattern: LittleEndian.integer(bytes, Int(row.start) + 1, 8))
                }
                guard let key else {
                    integers = false
                    break
                }
                keys.append(key)
            }
        }
        if integers {
            return rows.indices.sorted { keys[$0] != keys[$1] ? keys[$0] < keys[$1] : $0 < $1 }
        }
        return rows.indices.sorted { a, b in
            let (x, y) = (rows[a], rows[b])
            let c = blobs[Int(x.blob)].withUnsafeBytes { xb in
                blobs[Int(y.blob)].withUnsafeBytes { yb in
                    StageOrder.compare(
                        encoded: UnsafeRawBufferPointer(rebasing: xb[Int(x.start)..<Int(x.start + x.count)]),
                        UnsafeRawBufferPointer(rebasing: yb[Int(y.start)..<Int(y.start + y.count)]), count: identity)
                }
            }
            return c != 0 ? c < 0 : a < b
        }
    }
}
