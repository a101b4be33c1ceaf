import Foundation
import Ingot

// README begin
struct Member: IngotEntity, Codable {
    var id: Int
    var name: String
    var country: String?
    var attributes: Set<MemberAttribute>?
    enum CodingKeys: String, CodingKey { case id, name = "fullName", country = "origin.country", attributes }
    static let identity: [CodingKeys] = [.id]
}

struct MemberAttribute: IngotEntity, Codable, Hashable {
    var id: Int
    var name: String
    enum CodingKeys: String, CodingKey { case id, name }
    static let identity: [CodingKeys] = [.id]
}
// README end

/// Coredatable's `Person`/`PersonAttribute` (here `Member`): a key-path coding key, a set of
/// related objects, updates in place.
func coredatableExample(path: String) async throws -> [Member] {
    // README begin
    let db = try IngotDatabase.sqlite(path, entities: [Member.self])
    let json = #"""
        [{"id": 1, "fullName": "Marco", "origin": {"country": "Spain"}, "attributes": [{"id": 1, "name": "funny"}]},
         {"id": 2, "fullName": "Ana", "attributes": [{"id": 1, "name": "funny"}, {"id": 2, "name": "tall"}]},
         {"id": 1, "fullName": "Marco Polo"}]
        """#
    let report = try await db.ingest([Member].self, from: Array(json.utf8))  // Marco is one row: the later record wins
    assert(report.entities["member"]?.inserted == 2)
    let members = try await db.fetch(Member.self, where: #Predicate { $0.country == "Spain" }, including: [\.attributes])
    // [Member(id: 1, name: "Marco Polo", country: "Spain", attributes: [MemberAttribute(id: 1, name: "funny")])]
    // README end
    return members
}
