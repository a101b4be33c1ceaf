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
