import Foundation
import Testing

@testable import Ingot

/// One range and one canonical form for every backend, checked where a value is decoded:
/// the same pages give the same tables and the same counts
/// in SQLite and PostgreSQL, at any batch size, and no value that one database refuses can fail
/// a batch.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct StorableValueTests {
    static let yaml = """
        version: 1
        name: storable
        records: results
        root: event
        entities:
          event:
            identity: id
            attributes:
              id: string
              at: {type: date, format: iso8601}
              day: {type: date, format: "yyyy-MM-dd"}
              note: string
              meta: json
        """

    /// Same pipeline, the instant as identity.
    static let instantYAML = """
        version: 1
        name: instants
        records: results
        root: tick
        entities:
          tick:
            identity: at
            attributes:
              at: {type: date, format: iso8601}
              n: integer
        """

    private static func page(_ records: String) -> String { #"{"results": [\#(records)]}"# }

    /// Runs `yaml` over `pages` into a fresh SQLite database and a fresh PostgreSQL database;
    /// both must finish with the same counters and tables.
    private func both(_ yaml: String, _ pages: [String], batchRecords: Int? = nil) throws -> (RunSummary, sqlite: String, postgres: String)
    {
        let config = try PipelineConfig.parse(text: yaml, path: "storable.yml")
        let (sqlite, db) = try ingest(yaml, pages, batchRecords: batchRecords)
        let url = try PostgresServer.freshDatabase()
        var options = RunOptions()
        options.databasePath = url
        options.batchRecords = batchRecords
        options.progressInterval = 0
        let postgres = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(pages))
        #expect(sqlite.status == .finished, "\(sqlite.error ?? "")")
        #expect(postgres.status == .finished, "\(postgres.error ?? "")")
        #expect(postgres.counters == sqlite.counters)
        #expect(try PostgresTests.postgresDump(url, config.model) == (try PostgresTests.sqliteDump(db, config.model)))
        return (sqlite, db, url)
    }

    @Test func aDateInYearZeroIsRejectedInEveryBackend() throws {
        let pages = [
            Self.page(
                #"""
                {"id": "a", "at": "0000-06-01T00:00:00Z"}, {"id": "b", "day": "0000-02-29"}, {"id": "c", "at": "0001-01-01T00:00:00Z", "day": "0001-01-01"}
                """#)
        ]
        let (summary, db, _) = try both(Self.yaml, pages)
        #expect(summary.counters.rejectedRecords == 2 && summary.counters.rejectsByReason == ["not_a_date": 2])
        #expect(try rows(db, "SELECT id, at, day FROM event") == [["c", "0001-01-01T00:00:00.000000Z", "0001-01-01"]])
        #expect(try rows(db, "SELECT coding_path FROM _ingot_rejects ORDER BY record_index") == [["results[0].at"], ["results[1].day"]])
    }

    @Test func aDateIdentityIsComparedAsItsInstant() throws {
        // Three spellings of one instant, and the microsecond PostgreSQL keeps: one row each.
        let pages = [
            Self.page(#"{"at": "2024-05-01T10:00:00Z", "n": 1}, {"at": "2024-05-01T12:00:00.000+02:00", "n": 2}"#),
            Self.page(#"{"at": "2024-05-01T10:00:00.0000009Z", "n": 3}, {"at": "2024-05-01T10:00:00.120Z", "n": 4}"#),
        ]
        for batch in [1, 5000] {
            let (summary, db, _) = try both(Self.instantYAML, pages, batchRecords: batch)
            #expect(summary.counters.inserted == 2, "batch \(batch)")
            let stored = try rows(db, "SELECT at, n FROM tick ORDER BY n")
            #expect(stored == [["2024-05-01T10:00:00.000000Z", "3"], ["2024-05-01T10:00:00.120000Z", "4"]], "\(stored)")
        }
    }

    @Test func loneSurrogatesAndNULsAreUnstorableWithTheirCodingPath() throws {
        let pages = [
            Self.page(
                #"""
                {"id": "1", "meta": {"k": "\ud800"}}, {"id": "2", "meta": {"\udfff": 1}}, {"id": "3", "note": "x\ud83d"},
                {"id": "4", "note": "a\u0000b"}, {"id": "5", "meta": ["\\ud800", "\ud83d\ude00"], "note": "\ud83d\ude00"}
                """#)
        ]
        let (summary, db, url) = try both(Self.yaml, pages)
        #expect(summary.counters.rejectsByReason == ["unstorable": 4])
        #expect(try rows(db, "SELECT id, note FROM event") == [["5", "😀"]])
        #expect(
            try rows(db, "SELECT coding_path FROM _ingot_rejects ORDER BY record_index")
                == [["results[0].meta"], ["results[1].meta"], ["results[2].note"], ["results[3].note"]])
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT meta->>0 FROM event") == [["\\ud800"]])
    }

    @Test func aPageWithNULBytesIsARejectedPageInEveryBackend() throws {
        let pages = ["not json\u{0} at all", Self.page(#"{"id": "1"}"#)]
        let (summary, _, url) = try both(Self.yaml, pages)
        #expect(summary.counters.rejectedPages == 1 && summary.counters.inserted == 1)
        let connection = try PGConnection(url: url)
        #expect(try connection.execute("SELECT raw FROM _ingot_rejects") == [["not json\\u0000 at all"]])
    }

    /// Identities (and every value used as a key) compare by their UTF-8 bytes, as the databases
    /// do: "café" in NFC and NFD are two rows whatever the batch size, counted the same.
    @Test func textIdentitiesCompareByTheirBytesAtAnyBatchSize() throws {
        let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
        #expect(nfc == nfd)  // Swift's own comparison folds them
        #expect(ScalarValue.text(nfc) != ScalarValue.text(nfd))
        #expect(IdentityKey.single(.text(nfc)) != IdentityKey.single(.text(nfd)))
        let pages = [
            Self.page(#"{"id": "\#(nfc)", "note": "first"}, {"id": "\#(nfd)", "note": "second"}"#),
            Self.page(#"{"id": "\#(nfd)", "note": "third"}"#),
        ]
        var results: [[[String]]] = []
        var counts: [RunCounters] = []
        for batch in [1, 2, 5000] {
            let (summary, db, _) = try both(Self.yaml, pages, batchRecords: batch)
            #expect(summary.counters.inserted == 2, "batch \(batch)")
            results.append(try rows(db, "SELECT hex(id), note FROM event ORDER BY hex(id)"))
            counts.append(summary.counters)
        }
        #expect(results.allSatisfy { $0 == results[0] } && results[0].count == 2)
        #expect(results[0].map(\.[1]) == ["third", "first"])
        #expect(Set(counts.map(\.inserted)).count == 1 && Set(counts.map(\.rejectedRecords)).count == 1)
    }
}
