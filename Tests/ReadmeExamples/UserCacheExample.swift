import Foundation
import Ingot

// The README's examples are these files' regions between `// README begin` and `// README end`,
// word for word (ReadmeExamplesTests compares them); the tests run them.

// README begin
struct User: IngotEntity, Codable {
    var id: Int
    var username: String?
    var avatar: String?
    var role: String?
    enum CodingKeys: String, CodingKey { case id, username = "login", avatar = "avatar_url", role = "type" }
    static let identity: [CodingKeys] = [.id]
}
// README end

/// A cache of GitHub's users, cleared and refilled by each refresh.
func userCacheExample(path: String, firstPage: [UInt8], laterPage: [UInt8]) async throws -> ([User], IngestReport) {
    // README begin
    let cache = try IngotDatabase.sqlite(path, entities: [User.self])
    _ = try await cache.ingest([User].self, from: firstPage, write: .replace)
    // A later refresh: users still listed are updated, new ones inserted, the others deleted.
    let refresh = try await cache.ingest([User].self, from: laterPage, write: .replace)
    let users = try await cache.fetch(User.self, sortBy: [SortDescriptor(\.username)])
    // README end
    return (users, refresh)
}
