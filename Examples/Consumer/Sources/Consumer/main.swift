import Foundation
import Ingot

// A partner API cached in SQLite: saved with Ingot's merge rules, read back, encoded back.

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
let db = try IngotDatabase.sqlite(path, entities: [Owner.self])
let page = #"{"results": [{"id": 7, "name": "Ada", "origin": {"country": "UK"}, "pets": [{"id": "3", "name": "Rex", "master": 7}, 4]}]}"#
let report = try await db.ingest([Owner].self, from: Array(page.utf8), at: "results")
let owners = try await db.fetch(Owner.self, where: #Predicate { $0.country == "UK" }, sortBy: [SortDescriptor(\.id)], including: [\.pets])
let json = String(decoding: try IngotJSONEncoder().encode(owners), as: UTF8.self)
print("inserted \(report.entities["owner"]?.inserted ?? 0) owner(s), \(report.rejections.count) rejected: \(json)")
guard json == #"[{"id":7,"name":"Ada","origin":{"country":"UK"},"pets":[3,4]}]"# else { exit(1) }
