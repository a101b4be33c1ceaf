import Foundation
import Testing

@testable import Ingot

/// `ingot export`'s walk over a table: keyset pages in identity order, composite identities too.
struct RecordExporterTests {
    static let yaml = """
        version: 1
        name: vets
        records: results
        root: vet
        entities:
          vet:
            identity: [city, license]
            attributes: {city: string, license: integer, name: string}
            relationships:
              patients: {to: pet, many: true}
          pet:
            identity: id
            attributes: {id: integer, name: string}
        """

    /// A composite identity is walked column by column (`city > x OR (city = x AND license > y)`),
    /// across pages smaller than the table: every row once, in identity order, and the records
    /// ingest back into the same tables.
    @Test func compositeIdentitiesExportInKeysetPages() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "vets.yml")
        let cities = ["Oslo", "Rome", "Ås", "Bergen"]
        var records: [String] = []
        for k in 0..<23 {
            let patients = k % 3 == 0 ? #", "patients": [\#(k), {"id": \#(k + 100), "name": "P\#(k)"}]"# : ""
            records.append(#"{"city": "\#(cities[k % 4])", "license": \#(k % 5), "name": "V\#(k)"\#(patients)}"#)
        }
        let page = #"{"results": [\#(records.joined(separator: ", "))]}"#
        let dir = temporaryDirectory()
        let db = dir.appendingPathComponent("vets.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        let summary = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource([page]))
        #expect(summary.status == .finished && summary.counters.rejectedRecords == 0)
        let stored = try rows(db, "SELECT city, license FROM vet ORDER BY city, license")
        #expect(stored.count == 20)  // 23 records, 3 of them the same vet again

        var exporter = try RecordExporter(config: config, location: try StoreLocation(db), entity: nil, filters: [], depth: 1)
        exporter.chunk = 3
        var exported: [String] = []
        try exporter.forEachRecord { exported.append($0) }
        let keys = try exported.map { text -> [String] in
            let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
            return ["\(object["city"] ?? "")", "\(object["license"] ?? "")"]
        }
        #expect(keys == stored)

        let copy = dir.appendingPathComponent("copy.db").path
        options.databasePath = copy
        let again = PipelineRunner(config: config, options: options, logger: LogCapture().logger)
            .run(source: MemoryPageSource([#"{"results": [\#(exported.joined(separator: ","))]}"#]))
        #expect(again.status == .finished && again.counters.rejectedRecords == 0)
        for sql in [
            "SELECT * FROM vet ORDER BY city, license", "SELECT * FROM vet_patients ORDER BY 1, 2, 3",
            "SELECT * FROM pet WHERE id IN (SELECT pet_id FROM vet_patients) ORDER BY id",
        ] {
            #expect(try rows(db, sql) == (try rows(copy, sql)), "\(sql)")
        }
    }

    /// An owned entity is exported inside its owners' records, not alone.
    @Test func anOwnedEntityIsNotARoot() throws {
        let yaml = """
            version: 1
            name: poke
            root: pokemon
            entities:
              pokemon:
                identity: id
                attributes: {id: integer}
                relationships:
                  types: {to: type_slot, many: true, owned: true}
              type_slot:
                attributes: {slot: integer}
            """
        let config = try PipelineConfig.parse(text: yaml, path: "poke.yml")
        let db = temporaryDirectory().appendingPathComponent("poke.db").path
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        _ = PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(["[]"]))
        #expect(throws: RecordExporter.Problem.self) {
            try RecordExporter(config: config, location: try StoreLocation(db), entity: "type_slot", filters: [], depth: 1)
        }
    }
}
