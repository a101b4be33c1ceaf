import Foundation
import Ingot

// A partner API cached in SQLite: saved with Ingot's merge rules, read back (through
// relationships, counted, observed), changed in one transaction, encoded back.

struct Owner: IngotEntity, Codable {
    var id: Int
    var name: String?
    var country: String?
    var pets: Many<Pet>?
    enum CodingKeys: String, CodingKey { case id, name, country = "origin.country", pets }
    static let identity: [CodingKeys] = [.id]
}

struct Pet: IngotEntity, Codable {
    var id: Int
    var name: String?
    var master: Ref<Owner>?
    enum CodingKeys: String, CodingKey { case id, name, master }
    static let identity: [CodingKeys] = [.id]
    static func rule(for key: CodingKeys) -> IngotRule? { key == .id ? .coerce : nil }
}

let path = FileManager.default.temporaryDirectory.appendingPathComponent("consumer-\(UUID().uuidString).db").path

/// Removes the database and the files beside it (its WAL, shared memory and run lock).
func removeDatabase() {
    for suffix in ["", "-wal", "-shm", ".lock"] { try? FileManager.default.removeItem(atPath: path + suffix) }
}

func check(_ condition: Bool, _ what: String) {
    guard condition else {
        print("FAILED: \(what)")
        removeDatabase()
        exit(1)
    }
}

let db = try IngotDatabase.sqlite(path, entities: [Owner.self])
let page = #"{"results": [{"id": 7, "name": "Ada", "origin": {"country": "UK"}, "pets": [{"id": "3", "name": "Rex", "master": 7}, 4]}]}"#
let report = try await db.ingest([Owner].self, from: Array(page.utf8), at: "results")
let owners = try await db.fetch(Owner.self, where: #Predicate { $0.country == "UK" }, sortBy: [SortDescriptor(\.id)], including: [\.pets])
let json = String(decoding: try IngotJSONEncoder().encode(owners), as: UTF8.self)
print("inserted \(report.entities["owner"]?.inserted ?? 0) owner(s), \(report.rejections.count) rejected: \(json)")
check(json == #"[{"id":7,"name":"Ada","origin":{"country":"UK"},"pets":[3,4]}]"#, "the JSON encoded back")

// Through a relationship, and counted.
let adasPets = try await db.fetch(Pet.self, where: #Predicate { $0.master?.id == 7 }, sortBy: [SortDescriptor(\.id)])
check(adasPets.map(\.id) == [3], "pets whose master is 7 (pet 4 is a bare reference: no master)")
check(try await db.count(Owner.self, where: #Predicate { $0.pets?.contains { $0.value?.name == "Rex" } == true }) == 1, "owners of Rex")

do {
    // Observed: the owners at once, then after the transaction commits.
    var changes = db.observe(Owner.self, sortBy: [SortDescriptor(\.id)]).makeAsyncIterator()
    check(try await changes.next()?.map(\.id) == [7], "the first observed value")

    // One transaction: a new page and a delete, committed together.
    let moved = try await db.write { tx in
        let more = #"[{"id": 8, "name": "Bob", "origin": {"country": "FR"}, "pets": [{"id": 5, "name": "Tom"}]}]"#
        let report = try await tx.ingest([Owner].self, from: Array(more.utf8))
        try await tx.delete(Pet.self, id: 4)
        return report.entities["owner"]?.inserted ?? 0
    }
    check(moved == 1, "the transaction's ingest")
    check(try await changes.next()?.map(\.id) == [7, 8], "the value observed after the commit")
    check(try await db.fetch(Pet.self).map(\.id) == [3, 5], "pet 4 deleted in the transaction")
}
print("query side: relationship predicates, count, a transaction, an observation — ok")
await db.close()
removeDatabase()

// Every property type docs/library.md lists, out and back: ingested, fetched, encoded with
// IngotJSONEncoder, ingested into a second database, fetched again — equal each time.
struct Listing: IngotEntity, Codable, Equatable {
    enum Status: String, Codable, CaseIterable { case draft, live }
    enum Tier: Int, Codable { case basic = 1, pro = 2 }
    struct Dimensions: Codable, Equatable { var width: Double; var height: Double }
    var id: Int
    var sku: UUID
    var title: String
    var price: Decimal
    var weight: Double?
    var ratio: Float?
    var stock: Int32?
    var views: Int64?
    var small: Int8?
    var unsigned: UInt16?
    var active: Bool
    var listedAt: Date?
    var page: URL?
    var status: Status
    var tier: Tier?
    var dimensions: Dimensions?
    var tags: [String]?
    enum CodingKeys: String, CodingKey {
        case id, sku, title, price, weight, ratio, stock, views, small, unsigned, active, page, status, tier, dimensions, tags
        case listedAt = "listed_at"
    }
    static let identity: [CodingKeys] = [.id]
}

let listings = #"""
    [{"id": 1, "sku": "6F9619FF-8B86-D011-B42D-00C04FC964FF", "title": "Lamp", "price": "19.99", "weight": 1.25, "ratio": 0.5,
      "stock": -3, "views": 9007199254740993, "small": -8, "unsigned": 65535, "active": true, "listed_at": "2026-12-06T10:00:00Z",
      "page": "https://shop.example/lamp?ref=a%20b", "status": "live", "tier": 2, "dimensions": {"width": 10.5, "height": 30},
      "tags": ["home", "light"]},
     {"id": 2, "sku": "0f8fad5b-d9cb-469f-a165-70867728950e", "title": "Mug", "price": 4, "active": false, "status": "draft"}]
    """#
let listingPaths = (1...2).map { FileManager.default.temporaryDirectory.appendingPathComponent("consumer-listings-\($0)-\(UUID().uuidString).db").path }
func removeListings() {
    for p in listingPaths { for suffix in ["", "-wal", "-shm", ".lock"] { try? FileManager.default.removeItem(atPath: p + suffix) } }
}
do {
    let first = try IngotDatabase.sqlite(listingPaths[0], entities: [Listing.self])
    let saved = try await first.ingest([Listing].self, from: Array(listings.utf8))
    check(saved.rejections.isEmpty, "every listing ingested: \(saved.rejections)")
    let fetched = try await first.fetch(Listing.self, sortBy: [SortDescriptor(\.id)])
    check(fetched.count == 2 && fetched[0].price == Decimal(string: "19.99") && fetched[0].views == 9_007_199_254_740_993, "the listings fetched")
    check(try await first.fetch(Listing.self, id: fetched[1].id)?.sku == UUID(uuidString: "0F8FAD5B-D9CB-469F-A165-70867728950E"), "a UUID in either case")
    let encoded = try IngotJSONEncoder().encode(fetched)
    let second = try IngotDatabase.sqlite(listingPaths[1], entities: [Listing.self])
    let again = try await second.ingest([Listing].self, from: Array(encoded))
    check(again.rejections.isEmpty, "the encoded listings ingested again: \(again.rejections)")
    let refetched = try await second.fetch(Listing.self, sortBy: [SortDescriptor(\.id)])
    check(refetched == fetched, "out and back: \(refetched) against \(fetched)")
    await first.close()
    await second.close()
}
removeListings()
print("every property type out and back (ingest, fetch, encode, ingest, fetch) — ok")
