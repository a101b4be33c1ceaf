import Foundation
import Testing

@testable import Ingot

private struct CountedVendor: IngotEntity, Codable, Equatable {
    var id: Int
    var name: String
    enum CodingKeys: String, CodingKey { case id, name }
    static let identity: [CodingKeys] = [.id]
}

private struct CountedItem: IngotEntity, Codable, Equatable {
    var id: Int
    var vendor: Ref<CountedVendor>?
    enum CodingKeys: String, CodingKey { case id, vendor }
    static let identity: [CodingKeys] = [.id]
}

/// `count` and `fetch` apply one rule: a row that holds no value for a non-optional property (a
/// stub an item's bare vendor id made) is not a `Vendor` — neither fetched nor counted, and a
/// page of `limit` rows is full of vendors.
@Suite struct LibraryCountTests {
    @Test func countAndFetchLeaveTheSameRowsOut() async throws {
        let db = try IngotDatabase.sqlite(
            temporaryDirectory().appendingPathComponent("shop.db").path, entities: [CountedItem.self, CountedVendor.self])
        // Items naming vendors 1–4 by id (stubs), then vendors 2 and 4 given whole.
        let items = #"[{"id": 1, "vendor": 1}, {"id": 2, "vendor": 2}, {"id": 3, "vendor": 3}, {"id": 4, "vendor": 4}]"#
        _ = try await db.ingest([CountedItem].self, from: Array(items.utf8))
        _ = try await db.ingest([CountedVendor].self, from: Array(#"[{"id": 2, "name": "Acme"}, {"id": 4, "name": "Globex"}]"#.utf8))
        let vendors = try await db.fetch(CountedVendor.self)
        #expect(vendors == [CountedVendor(id: 2, name: "Acme"), CountedVendor(id: 4, name: "Globex")])
        #expect(try await db.count(CountedVendor.self) == vendors.count)
        #expect(try await db.count(CountedVendor.self, where: #Predicate { $0.id < 4 }) == 1)
        #expect(try await db.fetch(CountedVendor.self, limit: 1) == [CountedVendor(id: 2, name: "Acme")])
        #expect(try await db.fetch(CountedVendor.self, limit: 1, offset: 1) == [CountedVendor(id: 4, name: "Globex")])
        #expect(try await db.fetch(CountedVendor.self, id: 1) == nil)
        #expect(try await db.count(CountedItem.self) == 4)
    }
}
