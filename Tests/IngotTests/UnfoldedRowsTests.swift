import Foundation
import Testing

@testable import Ingot

/// A staged load's batches go to the stage unfolded (``UnfoldedRows``): each entity's rows in
/// identity order, rows of one identity as their records came, a stub only for an identity the
/// batch gives no row for; the merge folds them to what folding each batch first gave.
struct UnfoldedRowsTests {
    private let shelter = personPipeline("shelter", dogAttributes: ["breed: string"])

    private func decoded(_ yaml: String, _ pages: [String]) throws -> (pages: [DecodedPage], layouts: [EntityLayout]) {
        let config = try PipelineConfig.parse(text: yaml, path: "test.yml")
        var mapper = RecordMapper(plan: MappingPlan(model: config.model, root: config.root, framing: config.framing))
        let decoded = pages.enumerated().map { k, page in mapper.map(bytes: Array(page.utf8), seq: k + 1, source: "page-\(k + 1)") }
        return (decoded, EntityLayout.layouts(of: config.model))
    }

    /// The identities of `entity`'s unfolded rows in their order, each with its page's seq and
    /// its record's index (a stub: its identity and "stub").
    private func identities(_ unfolded: UnfoldedRows, _ entity: Int, _ pages: [DecodedPage], _ layout: EntityLayout) -> [String] {
        let rows = unfolded.entities[entity]
        return rows.order.map { position in
            guard position < rows.rows.count else { return "\(rows.stubs[position - rows.rows.count]) stub" }
            let page = pages[Int(rows.pages[position])]
            let row = page.rows[Int(rows.rows[position])]
            let origin = RecordOrigin.decode(rows.origins[position]).map { "\($0.seq).\($0.index)" } ?? "?"
            return "\(page.storage.value(row.valueStart + layout.identitySlots[0]) ?? .null) @\(origin)"
        }
    }

    @Test func rowsComeInIdentityOrderThenArrivalWithAStubPerIdentityOnlyReferredTo() throws {
        let (pages, layouts) = try decoded(
            shelter,
            [
                bulkPage(
                    #"{"id": 3, "dogs": [{"id": 10, "name": "Rex"}, 11]}, {"id": 1, "best_friend": 12}, {"id": 3, "name": "again"}"#),
                bulkPage(#"{"id": 2, "dogs": [{"id": 11, "breed": "pug"}, 13, 13]}, {"id": 1, "dogs": [12, 14]}"#),
            ])
        let unfolded = try #require(UnfoldedRows.make(pages, layouts: layouts))
        #expect(
            identities(unfolded, 0, pages, layouts[0]) == [
                "1 @1.1", "1 @2.1", "2 @2.0", "3 @1.0", "3 @1.2",
            ])
        // 11 is referred to, then given: no stub. 12 is referred to twice, 13 twice in one set: one
        // stub each, from the first record that referred to it.
        #expect(
            identities(unfolded, 1, pages, layouts[1]) == ["10 @1.0", "11 @2.0", "12 stub", "13 stub", "14 stub"])
        #expect(unfolded.entities[1].stubOrigins.map { RecordOrigin.decode($0).map { "\($0.seq).\($0.index)" } } == ["1.1", "2.0", "2.1"])
    }

    @Test func aBatchWithAnIdentityThatIsNotOneIntegerIsFolded() throws {
        let composite = personPipeline(
            "shelter", relationships: ["visits: {to: visit, many: true}"],
            entities: ["visit:\n  identity: [clinic, day]\n  attributes: {clinic: string, day: string}"])
        let (pages, layouts) = try decoded(composite, [bulkPage(#"{"id": 1, "visits": [{"clinic": "north", "day": "mon"}]}"#)])
        #expect(UnfoldedRows.make(pages, layouts: layouts) == nil)
        let text = try decoded(
            "version: 1\nname: t\nrecords: results\nroot: tag\nentities:\n  tag:\n    identity: slug\n    attributes: {slug: string}",
            [bulkPage(#"{"slug": "a"}"#)])
        #expect(UnfoldedRows.make(text.pages, layouts: text.layouts) == nil)
        // Without any of them, the batch is left unfolded for the stage.
        let model = try PipelineConfig.parse(text: shelter, path: "t.yml").model
        let plain = try decoded(shelter, [bulkPage(#"{"id": 1, "dogs": [2]}"#)])
        let resolver = BatchResolver(model: model, layouts: plain.layouts)
        let store = MemoryStore(model: model)
        let prepared = resolver.prepare(plain.pages, uncommitted: UncommittedIdentities(), store: store, staged: true, unfolded: true)
        #expect(prepared.unfolded != nil && prepared.folded == nil)
        // Staged, it stays so; written batch by batch after all, it is folded then.
        #expect(try resolver.resolve(prepared, store: store, staging: true).unfolded != nil)
        let folded = try resolver.resolve(prepared, store: store)
        #expect(folded.unfolded == nil)
        #expect(folded.rows.merged.map { $0.rows.compactMap(\.identity) } == [[.single(.integer(1))], [.single(.integer(2))]])
        #expect(resolver.prepare(plain.pages, uncommitted: UncommittedIdentities(), store: store, staged: true).folded != nil)
    }

    /// Records that repeat identities within a batch, a bare id referred to before and after its
    /// object, sets replaced and cleared within a batch, nulls over values: staged in batches of
    /// four or five (the first folded, the third on unfolded), the tables are batch by batch's.
    @Test(arguments: [4, 5])
    func unfoldedBatchesMergeToWhatBatchByBatchWrites(batchRecords: Int) throws {
        let pages = [
            bulkPage(
                #"""
                {"id": 5, "name": "A", "dogs": [1, 2]}, {"id": 6, "name": "B"}, {"id": 7, "best_friend": 3},
                {"id": 8, "name": "C", "score": 1}, {"id": 9, "dogs": [{"id": 4, "name": "Rex"}]}
                """#),
            bulkPage(
                #"""
                {"id": 5, "name": "A2", "score": 2, "dogs": [{"id": 2, "name": "Two"}, 3]}, {"id": 6, "dogs": [1]},
                {"id": 5, "score": null, "dogs": [2]}, {"id": 10, "best_friend": 1}, {"id": 6, "name": null, "dogs": []}
                """#),
            bulkPage(
                #"""
                {"id": 3, "name": "not a dog"}, {"id": 11, "dogs": [{"id": 3, "breed": "pug"}, {"id": 3, "name": "Three"}]},
                {"id": 11, "best_friend": 4}, {"id": 8, "origin": {"country": {"name": "Chile"}}}, {"id": 12, "dogs": [5, 5]}
                """#),
        ]
        let (plain, plainDB) = try ingest(shelter, pages, batchRecords: batchRecords)
        let (staged, stagedDB) = try ingest(shelter, pages, batchRecords: batchRecords, bulk: true)
        #expect(plain.status == .finished && staged.status == .finished, "\(staged.error ?? "")")
        for sql in [
            "SELECT * FROM person ORDER BY id", "SELECT * FROM dog ORDER BY id", "SELECT * FROM person_dogs ORDER BY person_id, dog_id",
        ] {
            #expect(try rows(stagedDB, sql) == rows(plainDB, sql), "\(sql)")
        }
        for entity in ["person", "dog"] {
            #expect(staged.counters.entities[entity]?.inserted == plain.counters.entities[entity]?.inserted, "\(entity)")
            #expect(staged.counters.entities[entity]?.stubs == plain.counters.entities[entity]?.stubs, "\(entity)")
        }
        #expect(
            try rows(stagedDB, "SELECT id, name, score FROM person WHERE id IN (5, 6) ORDER BY id") == [
                ["5", "A2", "NULL"], ["6", "NULL", "NULL"],
            ])
        #expect(
            try rows(stagedDB, "SELECT person_id, dog_id FROM person_dogs WHERE person_id IN (5, 6, 11, 12) ORDER BY 1, 2") == [
                ["5", "2"], ["11", "3"], ["12", "5"],
            ])
        #expect(
            try rows(stagedDB, "SELECT id, name, breed FROM dog WHERE id IN (1, 3) ORDER BY id") == [
                ["1", "NULL", "NULL"], ["3", "Three", "pug"],
            ])
    }

    @Test func aFeedReadsItsRowsInTheOrderGiven() throws {
        let feed = RowFeed()
        for v in [30, 10, 20] {
            feed.beginRow()
            feed.append(.integer(Int64(v)))
        }
        #expect(!feed.reorder([0, 0, 1]) && !feed.reorder([0, 1]) && !feed.reorder([0, 1, 3]))
        #expect((0..<3).map { feed.value(row: $0, column: 0, bool: false) } == [.integer(30), .integer(10), .integer(20)])
        #expect(feed.reorder([1, 2, 0]))
        #expect((0..<3).map { feed.value(row: $0, column: 0, bool: false) } == [.integer(10), .integer(20), .integer(30)])
    }
}
