import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Ingot

private func page(_ records: String) -> String { #"{"results": [\#(records)]}"# }

private let eventYAML = """
    version: 1
    name: events
    records: results
    root: event
    entities:
      event:
        identity: id
        attributes:
          id: integer
          at: {type: date, format: unix}
          at_ms: {type: date, format: unix_ms}
          iso: {type: date, format: iso8601}
          local: {type: date, format: "yyyy-MM-dd HH:mm", timezone: "Etc/GMT-14"}
    """

/// No trap reachable from input (docs/reliability.md, hostile input): dates, archives, Swift types.
struct NoTrapTests {
    @Test(arguments: [
        (#""at": -1e11"#, "at"), (#""at": -62167219201"#, "at"), (#""at_ms": -1e14"#, "at_ms"),
        (#""at": 253402300800"#, "at"), (#""at": 253402300799.9999996"#, "at"), (#""at_ms": 253402300799999.9996"#, "at_ms"),
        (#""at": 1e300"#, "at"), (#""at": -9223372036854775808"#, "at"),
        (#""iso": "9999-12-31T23:30:00-01:00""#, "iso"), (#""iso": "0000-01-01T00:30:00+01:00""#, "iso"),
        (#""local": "0000-01-01 00:30""#, "local"), (#""iso": "0000-06-01T00:00:00Z""#, "iso"), (#""at": -62135596801"#, "at"),
    ])
    func aDateOutsideTheStoredRangeIsARejectedRecord(field: String, key: String) throws {
        // Twice into the same database: a rejected record is committed, so a rerun (or a
        // resume) gets past it instead of failing on it again.
        let db = temporaryDirectory().appendingPathComponent("d.db").path
        for _ in 0..<2 {
            let (summary, _) = try ingest(eventYAML, [page(#"{"id": 1, \#(field)}, {"id": 2, "at": 0}"#)], db: db)
            #expect(summary.status == .finished)
            #expect(summary.counters.rejectedRecords == 1)
        }
        #expect(try rows(db, "SELECT id FROM event") == [["2"]])
        let reject = try rows(db, "SELECT coding_path, reason FROM _ingot_rejects LIMIT 1")
        #expect(reject.first?.first == "results[0].\(key)", "\(reject)")
    }

    @Test func theEdgesOfTheStoredRangeAreStored() throws {
        let (_, db) = try ingest(
            eventYAML,
            [
                page(
                    #"""
                    {"id": 1, "at": -62135596800, "at_ms": 253402300799999, "iso": "9999-12-31T23:59:59.999Z"}
                    """#)
            ])
        #expect(
            try rows(db, "SELECT at, at_ms, iso FROM event") == [
                ["0001-01-01T00:00:00.000000Z", "9999-12-31T23:59:59.999000Z", "9999-12-31T23:59:59.999000Z"]
            ])
    }

    struct Narrow: IngotEntity {
        var id: Int8
        var a: UInt32
        var b: Int16?
        var c: UInt8
        var d: UInt
        var e: UInt16
        enum CodingKeys: String, CodingKey { case id, a, b, c, d, e }
        static let identity: [CodingKeys] = [.id]
    }

    @Test func swiftEntitiesWithEveryIntegerTypeAreModelled() throws {
        let model = try EntityModel(root: Narrow.self)
        let entity = try #require(model.entities.first)
        #expect(entity.attributes.map(\.name) == ["id", "a", "b", "c", "d", "e"])
        #expect(entity.attributes.allSatisfy { $0.type == .integer })
    }
}

/// Archives from an attacker: every number validated, damage reported, never a crash.
struct HostileArchiveTests {
    private func archive(entries: Int = 3) throws -> (path: String, bytes: [UInt8]) {
        let path = temporaryDirectory().appendingPathComponent("a.ingot").path
        let writer = try ArchiveWriter(
            path: path,
            header: ArchiveHeader(
                formatVersion: ArchiveFormat.version, runID: "r", pipelineName: "p", pipelineText: "", pipelinePath: "p.yml",
                createdAt: "now"))
        for k in 1...entries { try writer.append(Array(#"{"results": [{"id": \#(k)}]}"#.utf8), seq: k, source: "s\(k)") }
        try writer.close()
        return (path, try [UInt8](Data(contentsOf: URL(fileURLWithPath: path))))
    }

    private func write(_ bytes: [UInt8]) throws -> String {
        let path = temporaryDirectory().appendingPathComponent("x.ingot").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Opens, lists, verifies and reads every entry: any damage must surface as an error.
    private func exercise(_ path: String) -> (opened: Bool, verified: Bool) {
        guard let reader = try? ArchiveReader(path: path) else { return (false, false) }
        for entry in reader.entries { _ = try? reader.payload(of: entry) }
        return (true, (try? reader.verify()) != nil)
    }

    @Test func everyBitOfTheTrailerAndIndexFlippedIsDamageNotACrash() throws {
        let (_, bytes) = try archive()
        let indexLength = 8 + 8 * 3 + 4 + 16
        for offset in (bytes.count - indexLength)..<bytes.count {
            for bit in 0..<8 {
                var copy = bytes
                copy[offset] ^= UInt8(1 << bit)
                let result = exercise(try write(copy))
                #expect(result.opened && !result.verified, "byte \(offset) bit \(bit) went unnoticed")
            }
        }
    }

    @Test func bit63OfTheIndexOffsetIsCaught() throws {
        var (_, bytes) = try archive()
        bytes[bytes.count - 9] ^= 0x80  // the high byte of u64 indexStart
        let reader = try ArchiveReader(path: try write(bytes))
        #expect(throws: ArchiveError.self) { try reader.verify() }
    }

    @Test(arguments: [-1, Int.min, 1 << 40])
    func checksummedMetadataClaimingAnImpossibleLengthIsDamage(rawLength: Int) throws {
        // An entry whose metadata checksum is right but whose numbers are not.
        let path = temporaryDirectory().appendingPathComponent("m.ingot").path
        let writer = try ArchiveWriter(
            path: path,
            header: ArchiveHeader(formatVersion: 2, runID: "r", pipelineName: "p", pipelineText: "", pipelinePath: "", createdAt: ""))
        try writer.append(Array("[]".utf8), seq: 1, source: "ok")
        try writer.close()
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        let metadata = ArchiveEntryMetadata(
            seq: 2, source: "evil", fetchedAt: "", httpStatus: nil, headers: nil, rawLength: rawLength, crc32c: 0)
        let json = Array(try JSONEncoder.archive.encode(metadata))
        let frame = try Zstd().compress(Array("[]".utf8))
        // Replace the index by a second entry with these metadata (the archive then has no index).
        let indexStart = Int(bytes.u64(at: bytes.count - 16))
        bytes.removeSubrange(indexStart...)
        bytes +=
            ArchiveFormat.entryMagic + UInt32(json.count).littleEndianBytes + CRC32C.checksum(json).littleEndianBytes
            + UInt64(frame.count).littleEndianBytes + json + frame
        let reader = try ArchiveReader(path: try write(bytes))
        #expect(reader.entries.count == 1, "the invalid entry is not listed")
        #expect(reader.tornReason?.contains("raw_length") == true, "\(reader.tornReason ?? "")")
        #expect(throws: ArchiveError.self) { try reader.verify() }
    }

    @Test func everyByteOfAnArchiveFlippedNeverCrashes() throws {
        // A small archive, every byte flipped: decoding may fail, it must not trap.
        let (_, bytes) = try archive(entries: 2)
        for offset in bytes.indices {
            var copy = bytes
            copy[offset] ^= 0xFF
            _ = exercise(try write(copy))
        }
    }

    @Test func aVersion1ArchiveStillReads() throws {
        let reader = try ArchiveReader(path: packageRoot.appendingPathComponent("pipelines/samples/people.ingot").path)
        #expect(reader.header.formatVersion == 1)
        #expect(reader.hasIndex)
        try reader.verify()
    }
}

/// What a run writes, replay reads; memory and disk bounded by settings.
struct BoundsTests {
    private let yaml = """
        version: 1
        name: items
        records: results
        root: item
        max_page_bytes: 4096
        entities:
          item:
            identity: id
            attributes: {id: integer, name: string}
        """

    @Test func aFileOverMaxPageBytesIsRejectedUnreadAndTheArchiveReplays() throws {
        let dir = temporaryDirectory()
        let pages = dir.appendingPathComponent("pages")
        try FileManager.default.createDirectory(at: pages, withIntermediateDirectories: true)
        try Data(page(#"{"id": 1}"#).utf8).write(to: pages.appendingPathComponent("p1.json"))
        let big = page(#"{"id": 2, "name": "\#(String(repeating: "x", count: 10_000))"}"#)
        try Data(big.utf8).write(to: pages.appendingPathComponent("p2.json"))
        try Data(page(#"{"id": 3}"#).utf8).write(to: pages.appendingPathComponent("p3.json"))
        let config = try PipelineConfig.parse(text: yaml, path: "items.yml")
        #expect(config.maxPageBytes == 4096)
        var options = RunOptions()
        options.databasePath = dir.appendingPathComponent("i.db").path
        options.archiveDirectory = dir.appendingPathComponent("archives").path
        options.progressInterval = 0
        let source = try DirectoryPageSource(directory: pages.path, glob: "*.json", maxPageBytes: 4096)
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: source)
        #expect(summary.status == .finished)
        #expect(summary.counters.rejectedPages == 1)
        #expect(try rows(options.databasePath, "SELECT id FROM item ORDER BY id") == [["1"], ["3"]])
        #expect(try rows(options.databasePath, "SELECT raw_length, length(raw) FROM _ingot_rejects") == [["\(big.utf8.count)", "0"]])
        // The archive holds the accepted pages only, and replays to the same state.
        let reader = try ArchiveReader(path: try #require(summary.archive))
        try reader.verify()
        #expect(reader.entries.map { String($0.metadata.source.suffix(7)) } == ["p1.json", "p3.json"])
        var again = RunOptions()
        again.databasePath = dir.appendingPathComponent("again.db").path
        again.progressInterval = 0
        let replay = PipelineRunner(config: config, options: again, logger: LogCapture().logger).run(
            source: ArchivePageSource(reader: reader))
        #expect(replay.status == .finished)
        #expect(try rows(again.databasePath, "SELECT id FROM item ORDER BY id") == [["1"], ["3"]])
    }

    @Test func aRejectedPageStoresABoundedPrefixOfItsText() throws {
        // 1 MB of invalid JSON: the database keeps 16 KiB of it and its length.
        let invalid = "{" + String(repeating: "é", count: 500_000)
        let (summary, db) = try ingest(yaml.replacingOccurrences(of: "max_page_bytes: 4096", with: ""), [invalid, page(#"{"id": 1}"#)])
        #expect(summary.counters.rejectedPages == 1)
        // At most the limit, cut between two characters (é is two bytes).
        let stored = try rows(db, "SELECT length(CAST(raw AS BLOB)), raw_length, substr(raw, -1) FROM _ingot_rejects")
        #expect(stored == [["\(RecordRejection.rawLimit - 1)", "\(invalid.utf8.count)", "é"]])
    }

    @Test func aRejectedRecordStoresABoundedPrefixToo() throws {
        let record = #"{"id": "not a number", "name": "\#(String(repeating: "y", count: 100_000))"}"#
        let (_, db) = try ingest(yaml.replacingOccurrences(of: "max_page_bytes: 4096", with: ""), [page(record)])
        let stored = try rows(db, "SELECT length(raw) = \(RecordRejection.rawLimit), raw_length FROM _ingot_rejects")
        #expect(stored == [["1", "\(record.utf8.count)"]])
    }

    @Test(.hangGuard) func theByteBudgetHoldsTheSourceBackUntilPagesAreFolded() throws {
        let budget = PageBudget(maxPages: 10, maxBytes: 100)
        let charged = Mutex(0)
        let third = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            for _ in 0..<3 {
                budget.acquireSlot()
                budget.charge(40)
                charged.withLock { $0 += 1 }
            }
            third.signal()
        }
        // Two pages (80 bytes) fit; the third (120 > 100) waits until one is folded.
        waitUntil { charged.withLock { $0 } == 2 }
        #expect(budget.inFlight == (pages: 3, bytes: 80), "the third page has its slot, not its bytes")
        #expect(charged.withLock { $0 } == 2)
        budget.release(40)
        third.wait()
        #expect(budget.inFlight == (pages: 2, bytes: 80))
    }

    @Test func aPageBiggerThanTheWholeBudgetStillGoesThroughAlone() {
        let budget = PageBudget(maxPages: 2, maxBytes: 10)
        budget.acquireSlot()
        budget.charge(1000)  // nothing else in flight: it must not wait forever
        #expect(budget.inFlight == (pages: 1, bytes: 1000))
        budget.release(1000)
        #expect(budget.inFlight == (pages: 0, bytes: 0))
    }
}

/// Relations stay whole: `write: replace` nullifies what pointed at a deleted row.
struct NullifyTests {
    private func yaml(root: String, write: String) -> String {
        """
        version: 1
        name: \(root)s
        records: results
        root: \(root)
        write: \(write)
        entities:
          planet:
            identity: id
            attributes: {id: integer, name: string}
            relationships:
              moons: {to: planet, many: true}
              residents: {to: person, many: true}
          person:
            identity: id
            attributes: {id: integer, name: string}
            relationships:
              homeworld: {to: planet}
              visited: {to: planet, many: true}
        """
    }

    @Test func deletingARowNullifiesToOneReferencesAndRemovesJoinRowsOnBothSides() throws {
        let (_, db) = try ingest(
            yaml(root: "person", write: "merge"),
            [
                page(
                    #"""
                    {"id": 1, "homeworld": {"id": 10, "moons": [11, 12]}, "visited": [10, 11, 12]},
                    {"id": 2, "homeworld": 11, "visited": [12]}
                    """#)
            ])
        _ = try ingest(yaml(root: "planet", write: "merge"), [page(#"{"id": 12, "residents": [1, 2]}"#)], db: db)
        #expect(try rows(db, "SELECT count(*) FROM planet") == [["3"]])
        // A complete replace run of planets that no longer lists 11 and 12.
        let (summary, _) = try ingest(yaml(root: "planet", write: "replace"), [page(#"{"id": 10, "name": "Home"}"#)], db: db)
        #expect(summary.counters.deleted == 2)
        #expect(try rows(db, "SELECT id FROM planet") == [["10"]])
        #expect(try rows(db, "SELECT id, coalesce(homeworld_id, 'NULL') FROM person ORDER BY id") == [["1", "10"], ["2", "NULL"]])
        #expect(try rows(db, "SELECT person_id, planet_id FROM person_visited") == [["1", "10"]])
        #expect(try rows(db, "SELECT count(*) FROM planet_moons") == [["0"]], "join rows naming a deleted planet on either side")
        #expect(try rows(db, "SELECT count(*) FROM planet_residents") == [["0"]], "join rows owned by a deleted planet")
    }
}

/// Names that cannot collide.
struct NameTests {
    private func problems(_ entities: String) -> String { modelProblems(entities) }

    @Test(arguments: ["_INGOT_RUNS", "_Ingot_x", "SQLITE_master", "sqlite_stat1"])
    func reservedNamesAreRefusedInAnyCase(table: String) {
        let message = problems("  a:\n    table: \(table)\n    identity: id\n    attributes: {id: integer}\n")
        #expect(message.contains("is reserved"), "\(message)")
    }

    @Test func joinTablesThatCollideAreRefusedWithBothNames() {
        let message = problems(
            """
              a:
                identity: id
                attributes: {id: integer}
                relationships: {b_c: {to: a, many: true}}
              a_b:
                identity: id
                attributes: {id: integer}
                relationships: {c: {to: a, many: true}}

            """)
        #expect(message.contains("'a_b_c'") && message.contains("a.b_c") && message.contains("a_b.c"), "\(message)")
    }

    @Test func aTableNamedLikeAJoinTableOrAnIndexIsRefused() {
        let join = problems(
            """
              a:
                identity: id
                attributes: {id: integer}
                relationships: {items: {to: b, many: true}}
              b:
                table: A_Items
                identity: id
                attributes: {id: integer}

            """)
        #expect(join.contains("a_items") || join.contains("A_Items"), "\(join)")
        let index = problems(
            """
              a:
                identity: id
                attributes: {id: integer}
              b:
                table: a_identity
                identity: id
                attributes: {id: integer}

            """)
        #expect(index.contains("identity index"), "\(index)")
    }

    @Test func aDatabaseThatDisagreesWithThePipelineIsRefusedBeforeAnythingIsWritten() throws {
        let yaml = """
            version: 1
            name: items
            records: results
            root: item
            entities:
              item:
                identity: id
                attributes: {id: integer, code: string, score: double}
            """
        let (_, db) = try ingest(yaml, [page(#"{"id": 1, "code": "a"}"#)])
        // Another identity.
        let other = try ingest(
            yaml.replacingOccurrences(of: "identity: id", with: "identity: code"), [page(#"{"id": 2, "code": "b"}"#)], db: db)
        #expect(other.summary.status == .failed)
        #expect(
            other.summary.error?.contains("table 'item': its identity is (id), the pipeline's is (code)") == true,
            "\(other.summary.error ?? "")")
        // Another type.
        let typed = try ingest(yaml.replacingOccurrences(of: "score: double", with: "score: string"), [page(#"{"id": 3}"#)], db: db)
        #expect(typed.summary.status == .failed)
        #expect(
            typed.summary.error?.contains("table 'item', column 'score': stored as REAL, the pipeline wants TEXT") == true,
            "\(typed.summary.error ?? "")")
        #expect(try rows(db, "SELECT id FROM item") == [["1"]], "nothing was written")
        #expect(try rows(db, "SELECT count(*) FROM _ingot_runs") == [["1"]], "not even a run row")
    }
}
