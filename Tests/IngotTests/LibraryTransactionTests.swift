import Foundation
import Synchronization
import Testing

@testable import Ingot

private struct Author: IngotEntity, Hashable, Codable {
    var id: Int
    var login: String?
    enum CodingKeys: String, CodingKey { case id, login }
    static let identity: [CodingKeys] = [.id]
}

private struct Post: IngotEntity, Codable, Equatable {
    var id: Int
    var title: String?
    var author: Author?
    enum CodingKeys: String, CodingKey { case id, title, author }
    static let identity: [CodingKeys] = [.id]
}

private struct Boom: Error {}

/// `IngotDatabase.write { tx in … }` (docs/library.md, "Transactions"): the ingests and deletes
/// made through the transaction commit together or not at all; inside, its own reads see what
/// it wrote while the database's do not; the database's own writes wait for it, and calling them
/// from inside its body throws instead of waiting for ever. On both backends.
@Suite(.tags(.process), .beyondUnit, .waitsOffThePool)
struct LibraryTransactionTests {
    static let posts = """
        [{"id": 1, "title": "One", "author": {"id": 7, "login": "ada"}},
         {"id": 2, "title": "Two", "author": {"id": 8, "login": "bob"}},
         {"id": 3, "title": "Three", "author": {"id": 7}}]
        """

    @Test(arguments: ["sqlite", "postgres"])
    func ingestsAndDeletesCommitTogether(backend: String) async throws {
        let (db, _) = try libraryDatabase(backend, "tx-commit", entities: [Post.self, Author.self])
        let seen = try await db.write { tx in
            let report = try await tx.ingest([Post].self, from: Array(Self.posts.utf8))
            #expect(report.entities["post"]?.inserted == 3 && report.rejections.isEmpty)
            // A record rejected inside the transaction is in its report, read in the transaction.
            let bad = try await tx.ingest([Post].self, from: Array(#"[{"id": 4, "title": "Four"}, {"id": "x"}]"#.utf8))
            #expect(bad.rejections.map(\.codingPath) == ["[1].id"])
            // Deletes see the rows ingested in the transaction, cascade and nullify as outside it.
            #expect(try await tx.delete(Post.self, id: 2) == 1)
            #expect(try await tx.delete(Author.self, where: #Predicate { $0.login == "ada" }) == 1)
            // The transaction's reads see what it wrote; the database's see what was committed.
            #expect(try await tx.count(Post.self) == 3)
            #expect(try await db.count(Post.self) == 0, "not committed yet")
            return try await tx.fetch(Post.self, sortBy: [SortDescriptor(\.id)]).map(\.id)
        }
        #expect(seen == [1, 3, 4])
        let posts = try await db.fetch(Post.self, including: [\.author])
        #expect(posts.map(\.id) == [1, 3, 4])
        #expect(posts.allSatisfy { $0.author == nil }, "ada deleted, her posts' author nullified; post 4 has none")
        #expect(try await db.fetch(Author.self).map(\.id) == [8])
        await db.close()
    }

    @Test(arguments: ["sqlite", "postgres"])
    func aBodyThatThrowsLeavesNothing(backend: String) async throws {
        let (db, at) = try libraryDatabase(backend, "tx-rollback", entities: [Post.self, Author.self])
        _ = try await db.ingest([Post].self, from: Array(#"[{"id": 9, "title": "Kept"}]"#.utf8))
        await #expect(throws: Boom.self) {
            try await db.write { tx in
                _ = try await tx.ingest([Post].self, from: Array(Self.posts.utf8))
                _ = try await tx.delete(Post.self, id: 9)
                #expect(try await tx.count(Post.self) == 3)
                throw Boom()
            }
        }
        #expect(try await db.fetch(Post.self).map(\.id) == [9], "the ingest and the delete rolled back")
        #expect(try await db.count(Author.self) == 0)
        // No run of the transaction is recorded either: only the ingest before it.
        let store = try StoreLocation(backend == "sqlite" ? "sqlite:" + at : at)
        #expect(try store.runs().count == 1)
        // The database goes on: a transaction after it commits.
        _ = try await db.write { tx in try await tx.ingest([Post].self, from: Array(Self.posts.utf8)) }
        #expect(try await db.count(Post.self) == 4)
        await db.close()
    }

    @Test(arguments: ["sqlite", "postgres"])
    func errorsBeforeTheDatabaseDoNotDoomIt(backend: String) async throws {
        let (db, _) = try libraryDatabase(backend, "tx-errors", entities: [Post.self, Author.self])
        try await db.write { tx in
            _ = try await tx.ingest([Post].self, from: Array(Self.posts.utf8))
            // A predicate with no SQL translation throws before anything is written.
            await #expect(throws: IngotQueryError.self) {
                try await tx.delete(Post.self, where: #Predicate { $0.title?.count == 3 })
            }
            // The database's own writes from inside the body would wait for the body: they throw.
            await #expect(throws: StoreError.self) {
                _ = try await db.ingest([Post].self, from: Array(Self.posts.utf8))
            }
            await #expect(throws: StoreError.self) { try await db.delete(Post.self, id: 1) }
        }
        #expect(try await db.count(Post.self) == 3, "committed")
        await db.close()
    }

    /// An in-memory database holds a transaction too; its own reads see what it wrote, and the
    /// database's reads wait for it (its connections share one cache, where the tables it wrote
    /// are locked until it commits): from inside the body they throw, naming `tx`.
    @Test func anInMemoryDatabaseCommitsTogether() async throws {
        let db = try IngotDatabase.inMemory(entities: [Post.self, Author.self])
        let seen = try await db.write { tx in
            _ = try await tx.ingest([Post].self, from: Array(Self.posts.utf8))
            try await tx.delete(Post.self, id: 3)
            await #expect(throws: StoreError.self) { _ = try await db.count(Post.self) }
            let other = Task.detached { try await db.count(Post.self) }
            return (try await tx.count(Post.self), other)
        }
        #expect(seen.0 == 2)
        #expect(try await seen.1.value == 2, "another task's read waited for the commit")
        #expect(try await db.fetch(Post.self).map(\.id) == [1, 2])
        await #expect(throws: Boom.self) {
            try await db.write { tx in
                _ = try await tx.delete(Post.self, id: 1)
                throw Boom()
            }
        }
        #expect(try await db.count(Post.self) == 2)
        // A body whose value is nil commits like any other.
        let none: Int? = try await db.write { tx in
            _ = try await tx.ingest([Post].self, from: Array(#"[{"id": 9}]"#.utf8))
            return nil
        }
        #expect(none == nil)
        #expect(try await db.count(Post.self) == 3, "committed")
        await db.close()
    }

    /// A call that failed in the database dooms the transaction: the body catching the error and
    /// returning does not commit what came before it.
    @Test func aFailureCaughtInTheBodyStillRollsBack() async throws {
        let server = try FixtureServer()
        let (db, _) = try libraryDatabase("sqlite", "tx-doomed", entities: [Post.self, Author.self])
        let missing = try #require(URL(string: server.base + "/no/such/list"))
        let laterCall = Mutex<(any Error)?>(nil)
        await #expect(throws: IngestError.self) {
            try await db.write { tx in
                _ = try await tx.ingest([Post].self, from: Array(Self.posts.utf8))
                do {
                    _ = try await tx.ingest([Post].self, from: missing)
                } catch {
                    // Caught, and the body goes on: the transaction is doomed all the same.
                }
                do {
                    _ = try await tx.count(Post.self)
                } catch {
                    laterCall.withLock { $0 = error }
                }
            }
        }
        #expect(laterCall.withLock { $0 } is IngestError, "a later call throws the failure that doomed it")
        #expect(try await db.count(Post.self) == 0)
        await db.close()
    }

    /// An ingest of the database from another task while a transaction is open waits for it, and
    /// lands after it (on SQLite it would otherwise wait on the transaction's write lock while
    /// holding the database's queue the transaction needs).
    @Test(arguments: ["sqlite", "postgres"])
    func otherWritesWaitForTheTransaction(backend: String) async throws {
        let (db, _) = try libraryDatabase(backend, "tx-turn", entities: [Post.self, Author.self])
        let other = try await db.write { tx in
            _ = try await tx.ingest([Post].self, from: Array(#"[{"id": 1, "title": "from the transaction"}]"#.utf8))
            let other = Task.detached {
                try await db.ingest([Post].self, from: Array(#"[{"id": 1, "title": "after it"}, {"id": 2}]"#.utf8))
            }
            _ = try await tx.ingest([Post].self, from: Array(#"[{"id": 3, "title": "Three"}]"#.utf8))
            return other
        }
        let report = try await other.value
        #expect(report.entities["post"]?.updated == 1 && report.entities["post"]?.inserted == 1)
        #expect(try await db.fetch(Post.self).map(\.title) == ["after it", nil, "Three"])
        await db.close()
    }
}
