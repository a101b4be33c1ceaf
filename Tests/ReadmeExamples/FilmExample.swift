import Dispatch
import Foundation
import Ingot

// README begin
struct Film: IngotEntity, Codable {
    var id: Int
    var title: String?
    var episodeID: Int?
    var director: String?
    var releaseDate: String?
    enum CodingKeys: String, CodingKey {
        case id = "pk", title = "fields.title", episodeID = "fields.episode_id", director = "fields.director",
            releaseDate = "fields.release_date"
    }
    static let identity: [CodingKeys] = [.id]
}
// README end

/// The Star Wars films (SWAPI's fixture), decoded on a background queue that holds its own
/// decoding context, saved, and read back in episode order.
func filmExample(path: String, filmsJSON: [UInt8]) async throws -> (decoded: [Film], stored: [Film]) {
    // README begin
    let background = DispatchQueue(label: "films")
    try DecodingContext.bind(DecodingContext(name: "films"), to: background)  // found through DispatchSpecificKey
    let decoded = try background.sync { try IngotJSONDecoder().decode([Film].self, from: filmsJSON) }

    let db = try IngotDatabase.sqlite(path, entities: [Film.self])
    _ = try await db.ingest([Film].self, from: filmsJSON)
    let byEpisode = try await db.fetch(Film.self, sortBy: [SortDescriptor(\.episodeID)])
    // README end
    return (decoded, byEpisode)
}
