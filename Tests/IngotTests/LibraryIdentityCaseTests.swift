import Foundation
import Testing

@testable import Ingot

private struct Device: IngotEntity, Codable, Equatable {
    var id: UUID
    var name: String?
    var owner: Ref<DeviceOwner>?
    enum CodingKeys: String, CodingKey { case id, name, owner }
    static let identity: [CodingKeys] = [.id]
}

private struct DeviceOwner: IngotEntity, Codable, Equatable {
    var id: UUID
    enum CodingKeys: String, CodingKey { case id }
    static let identity: [CodingKeys] = [.id]
}

/// One UUID is one identity whatever its case: stored in lower case, found by `fetch(id:)` and by
/// a predicate given a Swift `UUID`, and a bare reference in upper case links to the same row.
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool) struct LibraryIdentityCaseTests {
    @Test(arguments: ["sqlite", "postgres"])
    func aUUIDIsOneIdentityInEitherCase(backend: String) async throws {
        let id = try #require(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F"))
        let owner = try #require(UUID(uuidString: "0B0B0B0B-0000-4000-8000-00000000000A"))
        let db =
            backend == "sqlite"
            ? try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("devices.db").path, entities: [Device.self])
            : try IngotDatabase.postgres(try PostgresServer.freshDatabase(), entities: [Device.self])
        let page = """
            [{"id": "\(id.uuidString)", "name": "first", "owner": "\(owner.uuidString.lowercased())"},
             {"id": "\(id.uuidString.lowercased())", "name": "second", "owner": "\(owner.uuidString)"}]
            """
        let report = try await db.ingest([Device].self, from: Array(page.utf8))
        #expect(report.rejections.isEmpty && report.entities["device"]?.inserted == 1, "\(report.entities)")
        #expect(report.entities["device_owner"]?.inserted == 1, "one owner stub, whatever the case")
        #expect(try await db.fetch(Device.self, id: id)?.name == "second")
        #expect(try await db.count(Device.self, where: #Predicate { $0.id == id }) == 1)
        #expect(try await db.fetch(DeviceOwner.self, id: owner)?.id == owner)
        struct Stored: Decodable, Equatable { var id: String }
        #expect(try await db.query(Stored.self, sql: "SELECT id FROM device") == [Stored(id: id.uuidString.lowercased())])
    }
}
