import Foundation
import Ingot
import Testing

/// The library examples of the README and docs/library.md: they are this target's files, word for
/// word, and they run. The target imports `Ingot` without `@testable`: the public API is enough for them.
struct ReadmeExamplesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let examples = ["UserCacheExample", "PersonDogExample", "CoredatableExample", "FilmExample"]

    static func temporaryPath(_ name: String) -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ingot-readme-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir.appendingPathComponent(name).path
    }

    /// A file's `// README begin` … `// README end` regions, each dedented, joined by a blank line.
    static func regions(of text: String) -> String {
        var regions: [[Substring]] = []
        var current: [Substring]?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed == "// README begin" {
                current = []
            } else if trimmed == "// README end", let lines = current {
                regions.append(lines)
                current = nil
            } else {
                current?.append(line)
            }
        }
        return regions.map { lines in
            let indent = lines.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }.map { $0.prefix { $0 == " " }.count }.min() ?? 0
            return lines.map { String($0.dropFirst(min(indent, $0.prefix { $0 == " " }.count))) }.joined(separator: "\n")
        }.joined(separator: "\n\n")
    }

    /// The README's block after `<!-- example: NAME -->`.
    static func readmeBlock(_ name: String, in readme: String) -> String? {
        guard let marker = readme.range(of: "<!-- example: \(name) -->"),
            let open = readme.range(of: "```swift\n", range: marker.upperBound..<readme.endIndex),
            let close = readme.range(of: "\n```", range: open.upperBound..<readme.endIndex)
        else { return nil }
        return String(readme[open.upperBound..<close.lowerBound])
    }

    /// Where each example is shown: the README's front door has one, docs/library.md the others.
    static let shownIn = [
        "UserCacheExample": "README.md", "PersonDogExample": "docs/library.md", "CoredatableExample": "docs/library.md",
        "FilmExample": "docs/library.md",
    ]

    @Test(arguments: examples)
    func theDocsShowThisFileWordForWord(_ name: String) throws {
        let document = try #require(Self.shownIn[name])
        let text = try String(contentsOf: Self.root.appendingPathComponent(document), encoding: .utf8)
        let file = try String(contentsOf: Self.root.appendingPathComponent("Tests/ReadmeExamples/\(name).swift"), encoding: .utf8)
        let block = try #require(Self.readmeBlock(name, in: text), "\(document) has no <!-- example: \(name) --> block")
        #expect(block == Self.regions(of: file))
    }

    @Test func theUserCacheIsClearedAndRefilled() async throws {
        let first =
            #"[{"id": 1, "login": "octocat", "avatar_url": "https://a/1", "type": "User"}, {"id": 2, "login": "hubot", "type": "Bot"}]"#
        let later = #"[{"id": 1, "login": "octocat", "avatar_url": "https://a/1b"}, {"id": 3, "login": "github", "type": "Organization"}]"#
        let (users, refresh) = try await userCacheExample(
            path: Self.temporaryPath("users.db"), firstPage: Array(first.utf8), laterPage: Array(later.utf8))
        #expect(users.map(\.username) == ["github", "octocat"])
        #expect(users.last?.avatar == "https://a/1b" && users.last?.role == "User")
        #expect(refresh.deleted == 1 && refresh.entities["user"]?.inserted == 1 && refresh.entities["user"]?.updated == 1)
    }

    @Test func personAndDogEncodeWithoutALoop() async throws {
        let json = try await personDogExample(path: Self.temporaryPath("people.db"))
        #expect(json == #"[{"id":7,"name":"Ada","dogs":[{"id":3,"name":"Rex"}]}]"#)
    }

    @Test func coredatablesPersonAndAttributes() async throws {
        let members = try await coredatableExample(path: Self.temporaryPath("members.db"))
        #expect(members.count == 1)
        #expect(members.first?.name == "Marco Polo" && members.first?.country == "Spain")
        #expect(members.first?.attributes == [MemberAttribute(id: 1, name: "funny")])
    }

    /// DraftedOrders.swift is `ingot init --swift` of Tests/Fixtures/draft/shopify-orders as it
    /// prints it (InitTests holds the two equal): it compiles as is, in this target, and ingests
    /// the pages it was drafted from — orders, their customers and line items, dates with their
    /// offsets, prices as exact decimals.
    @Test func theDraftedTypesIngestThePagesTheyWereDraftedFrom() async throws {
        let dir = Self.root.appendingPathComponent("Tests/Fixtures/draft/shopify-orders")
        let pages = try ["page-1.json", "page-2.json"].map { try [UInt8](Data(contentsOf: dir.appendingPathComponent($0))) }
        let db = try IngotDatabase.sqlite(Self.temporaryPath("orders.db"), entities: [Order.self, Customer.self, LineItem.self])
        let report = try await db.ingest(
            [Order].self,
            pages: AsyncStream {
                for page in pages { $0.yield(page) }; $0.finish()
            }, at: "orders")
        #expect(report.entities["order"]?.inserted == 3 && report.entities["line_item"]?.inserted == 4, "\(report)")
        let orders = try await db.fetch(Order.self, sortBy: [SortDescriptor(\.id)])
        #expect(orders.map(\.name) == ["#1001", "#1002", "#1003"])
        #expect(orders.first?.totalPrice == Decimal(string: "598.94"))
        #expect(orders.first?.createdAt == Date(timeIntervalSince1970: 1_199_980_800), "2008-01-10T11:00:00-05:00")
        let customers = try await db.fetch(Customer.self, sortBy: [SortDescriptor(\.id)])
        #expect(customers.map(\.firstName) == ["Bob", "Jane"])
    }

    @Test func theFilmsDecodeOnABackgroundQueueAndLoad() async throws {
        let films = try [UInt8](Data(contentsOf: Self.root.appendingPathComponent("Tests/Fixtures/swapi/films.json")))
        let (decoded, stored) = try await filmExample(path: Self.temporaryPath("films.db"), filmsJSON: films)
        #expect(decoded.count == 6 && decoded.first?.title == "A New Hope")
        #expect(stored.map(\.episodeID) == [1, 2, 3, 4, 5, 6])
        #expect(stored.first?.title == "The Phantom Menace" && stored.first?.releaseDate == "1999-05-19")
    }
}
