import Foundation
import Ingot

// README begin
struct Person: IngotEntity, Codable {
    var id: Int
    var name: String?
    var dogs: [Dog]?
    enum CodingKeys: String, CodingKey { case id, name, dogs }
    static let identity: [CodingKeys] = [.id]
}

struct Dog: IngotEntity, Codable {
    var id: Int
    var name: String?
    var master: Person?  // Person ↔ Dog: a loop for a naive encoder, none here
    enum CodingKeys: String, CodingKey { case id, name, master }
    static let identity: [CodingKeys] = [.id]
}
// README end

/// Person ↔ Dog, saved, read back with the dogs, and encoded without a loop.
func personDogExample(path: String) async throws -> String {
    // README begin
    let db = try IngotDatabase.sqlite(path, entities: [Person.self])
    let page = #"[{"id": 7, "name": "Ada", "dogs": [{"id": 3, "name": "Rex", "master": 7}]}]"#
    _ = try await db.ingest([Person].self, from: Array(page.utf8))
    let people = try await db.fetch(Person.self, including: [\.dogs])
    let json = try IngotJSONEncoder().encode(people)  // [{"id":7,"name":"Ada","dogs":[{"id":3,"name":"Rex"}]}]
    // README end
    return String(decoding: json, as: UTF8.self)
}
