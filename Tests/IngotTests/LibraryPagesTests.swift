import Foundation
import Testing

@testable import Ingot

private struct GitHubUser: IngotEntity, Codable, Hashable {
    var id: Int
    var login: String?
    enum CodingKeys: String, CodingKey { case id, login }
    static let identity: [CodingKeys] = [.id]
    static let entityName = "user"
}

private struct GitHubIssue: IngotEntity, Codable {
    var id: Int
    var number: Int?
    var title: String?
    var user: GitHubUser?
    enum CodingKeys: String, CodingKey { case id, number, title, user }
    static let identity: [CodingKeys] = [.id]
    static let entityName = "ticket"
}

private struct Film: IngotEntity, Codable {
    var url: String
    var title: String?
    enum CodingKeys: String, CodingKey { case url, title }
    static let identity: [CodingKeys] = [.url]
}

private struct Broken: Error {}

/// Ingests from more than one buffer of bytes (docs/library.md, "Saving: `ingest`"): a URL with the
/// service's HTTP source and its pagination, and an `AsyncSequence` of pages — each one run; and
/// the report read by type and printed in one line, `IngotJSONDecoder` taking `Data`.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct LibraryPagesTests {
    @Test func aURLIsFetchedPageByPageAsOneRun() async throws {
        let server = try FixtureServer()
        let (db, at) = try libraryDatabase("sqlite", "url", entities: [GitHubIssue.self, Film.self])
        // GitHub's issues, three a page, the next page in a Link header.
        let url = try #require(URL(string: server.base + "/github/repos/octocat/hello-world/issues?per_page=3"))
        let report = try await db.ingest(
            [GitHubIssue].self, from: url, paginate: .linkHeader, headers: ["Authorization": "Bearer not-a-real-token"])
        #expect(report.records == 7 && report[GitHubIssue.self]?.inserted == 7 && report[GitHubUser.self]?.inserted == 2)
        #expect(try await db.count(GitHubIssue.self, where: #Predicate { $0.user?.login == "hubot" }) == 4)
        #expect(try StoreLocation("sqlite:" + at).runs().map(\.counters.pages) == [3])
        // The Star Wars API: records under `results`, the next page's URL at `next`.
        let films = try await db.ingest(
            [Film].self, from: try #require(URL(string: server.base + "/api/films/")), at: "results",
            paginate: .nextURL(at: "next"))
        #expect(films.records == 6 && films.rejections.isEmpty)
        // A server that answers 404: the run fails, nothing of it is saved.
        await #expect(throws: IngestError.self) {
            _ = try await db.ingest([Film].self, from: try #require(URL(string: server.base + "/no/such/list")), at: "results")
        }
        #expect(try await db.count(Film.self) == 6)
        await db.close()
    }

    @Test(arguments: ["sqlite", "postgres"])
    func anAsyncSequenceOfPagesIsOneRun(backend: String) async throws {
        let (db, at) = try libraryDatabase(backend, "pages", entities: [GitHubIssue.self])
        let pages = AsyncStream<[UInt8]> { continuation in
            for page in 0..<3 {
                let issues = (1...4).map { n in #"{"id": \#(page * 4 + n), "title": "t\#(page * 4 + n)", "user": {"id": \#(n % 2)}}"# }
                continuation.yield(Array("[\(issues.joined(separator: ","))]".utf8))
            }
            continuation.yield(Array(#"[{"id": "twelve"}]"#.utf8))
            continuation.finish()
        }
        let report = try await db.ingest([GitHubIssue].self, pages: pages)
        #expect(report.records == 13 && report[GitHubIssue.self]?.inserted == 12 && report.rejections.map(\.codingPath) == ["[0].id"])
        let runs = try StoreLocation(backend == "sqlite" ? "sqlite:" + at : at).runs()
        #expect(runs.count == 1 && runs.first?.counters.pages == 4)
        // The report in one line: the run, the records, each entity's counts, the rejections.
        #expect(report.description.hasPrefix("run \(report.runID): 13 records; ticket 12 inserted, 1 rejected; user 2 inserted, "))
        #expect(report.description.contains("1 rejected ([0].id: "))

        // A sequence that throws fails the run: nothing of it is saved.
        let failing = AsyncThrowingStream<[UInt8], any Error> { continuation in
            continuation.yield(Array(#"[{"id": 100}]"#.utf8))
            continuation.finish(throwing: Broken())
        }
        await #expect(throws: IngestError.self) { _ = try await db.ingest([GitHubIssue].self, pages: failing) }
        let ids = try await db.fetch(GitHubIssue.self).map(\.id)
        #expect(ids.count == 12, "\(ids)")
        await db.close()
    }

    @Test func theDecoderTakesData() throws {
        let data = Data(#"{"id": 3, "login": "ada"}"#.utf8)
        var decoder = IngotJSONDecoder()
        decoder.userInfo[.ingotContext] = DecodingContext(name: "data")
        #expect(try decoder.decode(GitHubUser.self, from: data) == GitHubUser(id: 3, login: "ada"))
    }
}
