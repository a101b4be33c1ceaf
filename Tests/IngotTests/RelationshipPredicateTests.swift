import Foundation
import Testing

@testable import Ingot

private struct GitHubUser: IngotEntity, Hashable, Codable {
    var id: Int
    var login: String?
    enum CodingKeys: String, CodingKey { case id, login }
    static let identity: [CodingKeys] = [.id]
}

private struct Label: IngotEntity, Hashable, Codable {
    var name: String
    var color: String?
    enum CodingKeys: String, CodingKey { case name, color }
    static let identity: [CodingKeys] = [.name]
}

private struct Milestone: IngotEntity, Hashable, Codable {
    var id: Int
    var title: String?
    var creator: GitHubUser?
    enum CodingKeys: String, CodingKey { case id, title, creator }
    static let identity: [CodingKeys] = [.id]
}

private struct Issue: IngotEntity, Codable, Equatable {
    var id: Int
    var title: String?
    var comments: Int?
    var user: GitHubUser?
    var milestone: Milestone?
    var labels: Set<Label>?
    enum CodingKeys: String, CodingKey { case id, title, comments, user, milestone, labels }
    static let identity: [CodingKeys] = [.id]
}

/// Predicates through relationships (docs/library.md, "Reading back"): a to-one's properties,
/// chains of to-ones, and a to-many's `contains { … }` / `allSatisfy { … }`, translated into
/// subqueries on both backends; sort and limit apply to the fetched entity.
@Suite
struct RelationshipPredicateTests {
    static let issues = """
        [
          {"id": 1, "title": "Crash on start", "comments": 4, "user": {"id": 10, "login": "octocat"},
           "milestone": {"id": 100, "title": "v1", "creator": {"id": 11, "login": "hubot"}},
           "labels": [{"name": "bug", "color": "red"}, {"name": "p1"}]},
          {"id": 2, "title": "Docs typo", "comments": 0, "user": {"id": 11, "login": "hubot"}, "labels": [{"name": "docs"}]},
          {"id": 3, "title": "Slow fetch", "comments": 9, "user": {"id": 10},
           "milestone": {"id": 101, "title": "v2", "creator": {"id": 10}}, "labels": [{"name": "bug"}, {"name": "perf"}]},
          {"id": 4, "title": "No user", "comments": 1, "labels": []},
          {"id": 5, "title": "Another crash", "comments": 2, "user": {"id": 10}, "milestone": {"id": 100}, "labels": [{"name": "bug"}]}
        ]
        """

    private func loaded(_ backend: String) async throws -> IngotDatabase {
        let (db, _) = try libraryDatabase(backend, "relations", entities: [Issue.self, Milestone.self, GitHubUser.self, Label.self])
        let report = try await db.ingest([Issue].self, from: Array(Self.issues.utf8))
        #expect(report.rejections.isEmpty)
        return db
    }

    private func ids(_ issues: [Issue]) -> [Int] { issues.map(\.id) }

    /// Sorting through to-ones (docs/library.md, "Reading back"): by the related row's property,
    /// a row without one sorting as `nil` does — first ascending, last descending — on both
    /// backends; ties broken by the next descriptor, then the identity. A to-many is refused.
    @Test(arguments: ["sqlite", "postgres"])
    func sortsThroughToOnes(backend: String) async throws {
        let db = try await loaded(backend)
        #expect(ids(try await db.fetch(Issue.self, sortBy: [SortDescriptor(\.user?.login)])) == [4, 2, 1, 3, 5])
        #expect(ids(try await db.fetch(Issue.self, sortBy: [SortDescriptor(\.user?.login, order: .reverse)])) == [1, 3, 5, 2, 4])
        // A chain: the milestone's creator (issues 2 and 4 have no milestone; 5's milestone 100 is 1's).
        #expect(ids(try await db.fetch(Issue.self, sortBy: [SortDescriptor(\.milestone?.creator?.login)])) == [2, 4, 1, 5, 3])
        // With the issue's own property next, a filter through another to-one, and a window.
        let octocatsFirst = try await db.fetch(
            Issue.self, where: #Predicate { $0.milestone?.title != nil },
            sortBy: [SortDescriptor(\.user?.login, order: .reverse), SortDescriptor(\.comments, order: .reverse)], limit: 2)
        #expect(ids(octocatsFirst) == [3, 1])
        #expect(
            ids(try await db.fetch(Issue.self, sortBy: [SortDescriptor(\.user?.login), SortDescriptor(\.comments, order: .reverse)]))
                == [4, 2, 3, 1, 5])
        await #expect(throws: IngotQueryError.self) { try await db.fetch(Issue.self, sortBy: [SortDescriptor(\.labels?.count)]) }
    }

    @Test(arguments: ["sqlite", "postgres"])
    func aToOnesPropertiesAndChainsOfThem(backend: String) async throws {
        let db = try await loaded(backend)
        let octocat = try await db.fetch(Issue.self, where: #Predicate { $0.user?.login == "octocat" })
        #expect(ids(octocat) == [1, 3, 5])
        #expect(try await db.count(Issue.self, where: #Predicate { $0.user?.login == "octocat" }) == 3)
        // No user: the related value is nil, as `?.` gives it.
        #expect(ids(try await db.fetch(Issue.self, where: #Predicate { $0.user?.login == nil })) == [4])
        #expect(ids(try await db.fetch(Issue.self, where: #Predicate { $0.user?.id == 11 })) == [2])
        // A chain of to-ones: the milestone's creator.
        #expect(ids(try await db.fetch(Issue.self, where: #Predicate { $0.milestone?.creator?.login == "hubot" })) == [1, 5])
        // Mixed with the issue's own properties; sort and limit on issues.
        let busy = try await db.fetch(
            Issue.self, where: #Predicate { $0.user?.login == "octocat" && ($0.comments ?? 0) > 1 },
            sortBy: [SortDescriptor(\.comments, order: .reverse)], limit: 2)
        #expect(ids(busy) == [3, 1])
    }

    @Test(arguments: ["sqlite", "postgres"])
    func aToManysMembers(backend: String) async throws {
        let db = try await loaded(backend)
        let bugs = try await db.fetch(Issue.self, where: #Predicate { $0.labels?.contains { $0.name == "bug" } == true })
        #expect(ids(bugs) == [1, 3, 5])
        // The label row is shared: "bug" is red wherever it is linked.
        let red = try await db.fetch(Issue.self, where: #Predicate { $0.labels?.contains { $0.color == "red" } == true })
        #expect(ids(red) == [1, 3, 5])
        // Every label of the issue is a bug (an issue without labels passes, as Swift says).
        let onlyBugs = try await db.fetch(Issue.self, where: #Predicate { $0.labels?.allSatisfy { $0.name == "bug" } == true })
        #expect(ids(onlyBugs) == [4, 5])
        let notBugs = try await db.fetch(Issue.self, where: #Predicate { !($0.labels?.contains { $0.name == "bug" } == true) })
        #expect(ids(notBugs) == [2, 4])
        // A to-many beside a to-one (the fifth record's milestone is v1 too, without p1). Beside a chain
        // of two to-ones (`milestone?.creator?.login`, translated alone above) the type checker
        // took 15 s over this one expression: a tenth of the test target's build.
        let p1InV1 = try await db.fetch(
            Issue.self,
            where: #Predicate { $0.labels?.contains { $0.name == "p1" } == true && $0.milestone?.title == "v1" })
        #expect(ids(p1InV1) == [1])
        #expect(try await db.count(Issue.self, where: #Predicate { $0.labels?.contains { $0.name == "perf" } == true }) == 1)
    }

    /// What still has no translation throws before a row is read.
    @Test func whatHasNoTranslationIsRefused() async throws {
        let db = try await loaded("sqlite")
        let error = await #expect(throws: IngotQueryError.self) {
            _ = try await db.fetch(Issue.self, where: #Predicate { ($0.user?.login?.count ?? 0) > 3 })
        }
        #expect(error?.message.hasPrefix(#"\Issue.user?.login?.(a computed property): ?. translates only after a relationship"#) == true)
    }
}
