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

private struct CountedShow: IngotEntity, Codable, Equatable {
    enum Status: String, Codable, CaseIterable { case running, ended }
    var id: Int
    var status: Status
    enum CodingKeys: String, CodingKey { case id, status }
    static let identity: [CodingKeys] = [.id]
}

/// An enum that cannot list its cases (not `CaseIterable`), optional as such an enum must be,
/// with text raw values and with integer ones.
private struct CountedTicket: IngotEntity, Codable, Equatable {
    enum State: String, Codable { case open, closed }
    enum Priority: Int, Codable { case low = 1, high = 3 }
    var id: Int
    var state: State?
    var priority: Priority?
    enum CodingKeys: String, CodingKey { case id, state, priority }
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
        #expect(try await db.fetch(CountedVendor.self, id: Int64(2)) == CountedVendor(id: 2, name: "Acme"))
        // A literal of another type than the identity's is refused, not answered nil.
        await #expect(throws: IngotQueryError.self) { try await db.fetch(CountedVendor.self, id: "2") }
        await #expect(throws: IngotQueryError.self) { try await db.fetch(CountedVendor.self, id: 2.0) }
        #expect(try await db.count(CountedItem.self) == 4)
    }

    /// A value that is none of an enum's cases is rejected at ingest, naming the record and the
    /// cases — never a row `count` sees and `fetch` cannot decode.
    @Test func aValueNoCaseNamesIsRejected() async throws {
        let db = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("shows.db").path, entities: [CountedShow.self])
        let page = #"[{"id": 1, "status": "running"}, {"id": 2, "status": "scheduled"}, {"id": 3, "status": "ended"}]"#
        let report = try await db.ingest([CountedShow].self, from: Array(page.utf8))
        #expect(report.rejections.count == 1, "\(report.rejections)")
        let rejection = try #require(report.rejections.first)
        #expect(
            rejection.codingPath.contains("[1]") && rejection.reason.contains("\"scheduled\"")
                && rejection.reason.contains("ended, running"))
        #expect(try await db.fetch(CountedShow.self).map(\.id) == [1, 3])
        #expect(try await db.count(CountedShow.self) == 2)
    }

    /// The same for an enum that is not `CaseIterable`: the enum itself is asked whether a
    /// value is one of its raw values, text or integer; `nil` stays `nil`. An in-memory database
    /// reports the rejections as a file does (it used to report none).
    @Test func aValueNoCaseOfAnEnumThatCannotListThemIsRejected() async throws {
        let db = try IngotDatabase.sqlite(temporaryDirectory().appendingPathComponent("tickets.db").path, entities: [CountedTicket.self])
        let page =
            #"[{"id": 1, "state": "open", "priority": 3}, {"id": 2, "state": "reopened"}, {"id": 3, "priority": 2}, "#
            + #"{"id": 4, "state": null, "priority": 1}]"#
        let report = try await db.ingest([CountedTicket].self, from: Array(page.utf8))
        #expect(report.rejections.count == 2, "\(report.rejections)")
        #expect(report.rejections.map(\.codingPath).sorted() == ["[1].state", "[2].priority"], "\(report.rejections)")
        #expect(
            report.rejections.map(\.reason).sorted() == [
                "\"reopened\" is the raw value of no case of State", "2 is the raw value of no case of Priority",
            ], "\(report.rejections)")
        #expect(
            try await db.fetch(CountedTicket.self) == [
                CountedTicket(id: 1, state: .open, priority: .high), CountedTicket(id: 4, state: nil, priority: .low),
            ])
        #expect(try await db.count(CountedTicket.self) == 2)
        // An in-memory database reports them as a file does.
        let memory = try IngotDatabase.inMemory(entities: [CountedTicket.self])
        let inMemory = try await memory.ingest([CountedTicket].self, from: Array(page.utf8))
        #expect(inMemory.rejections.map(\.codingPath).sorted() == ["[1].state", "[2].priority"], "\(inMemory.rejections)")
    }
}
