import Foundation
import GRDBSQLite

/// A joined run's rows on their way between jobs: each batch's staged rows (``StageFile/feeds(of:_:)``:
/// an identity's columns, then its ``StagedRow``), split into the run's parts by a hash of the
/// identity every job computes alike, one blob per part; once every unit is done, the job that
/// takes a part appends the part's blobs from every job to a stage file as sorted runs, and
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

    /// The sorted runs of a part's `blobs` (in their batches' order): per blob, each entity's rows
    /// as the blob holds them — in identity order, an identity's rows in the order their records
    /// came — to be appended to a stage file as a staged load appends a batch's
    /// (``StageFile/appendRun(of:_:)``). The fold merges the runs, an identity's rows in the
    /// order their runs were staged (``RunHeap``): the blobs' order.
    static func runs(of blobs: [[UInt8]], _ layouts: [EntityLayout]) throws -> [(entity: Int, feed: RowFeed)] {
        var runs: [(entity: Int, feed: RowFeed)] = []
        for blob in blobs {
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
                    let feed = RowFeed()
                    var row = at
                    for _ in 0..<count {
                        let end = RowFeed.end(of: arity, in: base, from: row, used: at + length)
                        guard end > row else { throw Malformed(description: "an empty row of entity \(entity)") }
                        feed.beginRow()
                        feed.appendEncoded(UnsafeRawBufferPointer(rebasing: bytes[row..<end]))
                        row = end
                    }
                    guard row == at + length else {
                        throw Malformed(description: "entity \(entity)'s rows end at \(row), not \(at + length)")
                    }
                    runs.append((entity, feed))
                    at += length
                }
            }
        }
        return runs
    }
}
