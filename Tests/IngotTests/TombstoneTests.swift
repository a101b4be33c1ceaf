import Foundation
import GRDB
import Testing

@testable import Ingot

/// Deletions in a feed (`delete_when:`) and a sync's next URL kept for the next run
/// (`sync_url:`): docs/pipelines.md, "Deletions in a feed" and "Sync tokens".
@Suite struct TombstoneTests {
    static let yaml = """
        version: 1
        name: feed
        records: events
        root: item
        delete_when: {path: deleted, equals: true}
        entities:
          item:
            identity: id
            attributes: {id: integer, name: string, note: string}
            relationships:
              parent: {to: item, key: parent_id}
              tags: {to: tag, many: true, key: tags}
          tag:
            identity: name
            attributes: {name: string}
        """

    /// A tombstone deletes its row where it stands: a record before it in the same page is
    /// undone with the row, one after it makes the row again with only its own values; what
    /// pointed at the deleted row is nullified and its links go; a tombstone of a row never
    /// stored deletes nothing. The same on SQLite and PostgreSQL, at every batch size.
    @Test(arguments: StoreConformanceTests.storedBackends, [1, 2, 50])
    func aTombstoneDeletesItsRowWhereItStands(backend: StoreConformanceTests.Backend, batchRecords: Int) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.yaml)
        let pages = [
            #"{"events": [{"id": 1, "name": "one", "tags": ["a"]}, {"id": 2, "name": "two", "note": "old", "parent_id": 1, "tags": ["a", "b"]}, {"id": 3, "name": "three", "parent_id": 2}]}"#,
            #"{"events": [{"id": 2, "note": "changed"}, {"id": 2, "deleted": true}, {"id": 4, "name": "four"}, {"id": 9, "deleted": true}]}"#,
            #"{"events": [{"id": 5, "name": "five", "note": "x"}, {"id": 5, "deleted": true}, {"id": 5, "name": "again"}]}"#,
        ]
        let summary = try harness.run(pages, batchRecords)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(
            summary.counters.records == 10 && summary.counters.deleted == 2 && summary.counters.rejectedRecords == 0, "\(summary.counters)")
        let items = try #require(harness.dump()["item"]).sorted { $0[0] < $1[0] }
        // Columns: id, name, note, parent_id.
        #expect(items.map { $0[0] } == ["1", "3", "4", "5"], "\(items)")
        #expect(items.first { $0[0] == "3" }?.last == "NULL", "what pointed at the deleted row is nullified: \(items)")
        #expect(items.first { $0[0] == "5" }.map { Array($0[1...2]) } == ["again", "NULL"], "made again with only its own values")
        #expect(try harness.dump()["item_tags"]?.count == 1, "the deleted row's links are gone")
    }

    /// Two joined jobs into PostgreSQL, the units committed in the run's order, end as a single
    /// run ends, whatever batches cut the pages: a unit cut at a tombstone is committed whole
    /// (its later batches looked up again in its transaction), and the run counts the deletions.
    @Test(.tags(.postgres, .process), .beyondUnit, .waitsOffThePool, .hangGuard, arguments: [1, 2, 50])
    func joinedJobsDeleteWhereTheTombstonesStand(batchRecords: Int) throws {
        let pages = [
            #"{"events": [{"id": 1, "name": "one", "tags": ["a"]}, {"id": 2, "name": "two", "note": "old", "parent_id": 1, "tags": ["a", "b"]}]}"#,
            #"{"events": [{"id": 3, "name": "three", "parent_id": 2}, {"id": 2, "note": "changed"}, {"id": 2, "deleted": true}, {"id": 4, "name": "four"}]}"#,
            #"{"events": [{"id": 5, "name": "five", "note": "x"}, {"id": 5, "deleted": true}, {"id": 5, "name": "again"}, {"id": 9, "deleted": true}]}"#,
            #"{"events": [{"id": 2, "name": "back"}, {"id": 4, "deleted": true}]}"#,
        ]
        let (single, db) = try ingest(Self.yaml, pages, batchRecords: batchRecords)
        #expect(single.status == .finished && single.counters.deleted == 3, "\(single.counters)")
        let config = try PipelineConfig.parse(text: Self.yaml, path: "feed.yml")
        let database = try JoinDatabase(.postgresql, model: config.model)
        let summaries = try JoinTests.runJoined(Self.yaml, pages, database, name: "feed", jobs: 2, batchRecords: batchRecords)
        #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { $0.error ?? "" })")
        JoinTests.expectShared(summaries)
        let (got, want) = (try database.dump(), try database.sqlite(db))
        for table in want.keys.sorted() { #expect(got[table] == want[table], "table \(table)") }
        let counters = try #require(try database.runs().last?.counters)
        let counted: [Int] = [counters.records, counters.inserted, counters.deleted]
        #expect(counted == [single.counters.records, single.counters.inserted, single.counters.deleted])
    }

    /// What a tombstone cannot do is refused: a record without the identity it names is a
    /// rejected record; a root without identity, a rule without its value, and delete_when at the
    /// top of a file with resources are refused at validation.
    @Test func whatATombstoneCannotDoIsRefused() throws {
        let (summary, db) = try ingest(Self.yaml, [#"{"events": [{"deleted": true}, {"id": 1, "name": "one"}]}"#])
        #expect(summary.counters.rejectedRecords == 1 && summary.counters.deleted == 0)
        let reason = try rows(db, "SELECT reason FROM _ingot_rejects").first?.first ?? ""
        #expect(reason.contains("identity"), "\(reason)")
        let noIdentity = Self.yaml.replacingOccurrences(
            of: "    identity: id\n    attributes: {id: integer, name", with: "    attributes: {id: integer, name")
        #expect(configProblems(noIdentity)?.contains("has no identity, so a record cannot name the row it deletes") == true)
        let noValue = Self.yaml.replacingOccurrences(of: "{path: deleted, equals: true}", with: "{path: deleted}")
        #expect(configProblems(noValue)?.contains("delete_when takes equals") == true)
    }

    /// `present: true`: any value that is not null, false, 0 or empty (`deleted_at`).
    @Test func presentMeansAnyValue() throws {
        let yaml = Self.yaml.replacingOccurrences(of: "{path: deleted, equals: true}", with: "{path: deleted_at, present: true}")
        let page =
            #"{"events": [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}, {"id": 1, "deleted_at": "2024-01-01"}, {"id": 2, "deleted_at": null}, {"id": 3, "deleted_at": ""}, {"id": 4, "deleted_at": 0}]}"#
        let (summary, db) = try ingest(yaml, [page])
        #expect(summary.counters.deleted == 1)
        #expect(try rows(db, "SELECT id FROM item ORDER BY id") == [["2"], ["3"], ["4"]])
    }

    /// A feed with tombstones is written in its order: a staged load is declined (it writes
    /// out of the feed's order), and a joined run commits its units in the run's order, saying
    /// why.
    @Test func aFeedWithTombstonesIsWrittenInOrder() throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "feed.yml")
        var options = RunOptions()
        options.join = "j"
        #expect(PipelineRunner.joinRefusal(config, options, sharesRuns: true) == nil)
        guard case .inOrder(let reasons) = PipelineRunner.joinOrder(config) else {
            Issue.record("a joined feed with tombstones commits in any order")
            return
        }
        #expect(reasons.contains { $0.contains("delete_when") }, "\(reasons)")
        #expect(PipelineRunner.writeObstacles(config).contains { $0.contains("delete_when") })
        #expect(PipelineRunner.refreshObstacle(config)?.contains("delete_when") == true)
    }

    static let sync = """
        version: 1
        name: cf
        source:
          http:
            url: "BASE/contentful/spaces/cfexample/environments/master/sync?initial=true"
            paginate: {next_url: nextPageUrl}
            sync_url: nextSyncUrl
        records: items
        root: entry
        delete_when: {path: sys.type, equals: DeletedEntry}
        entities: {entry: {identity: id, attributes: {id: {type: string, key: sys.id}, title: {type: string, key: fields.title.en-US}}}}
        """

    private func run(_ server: FixtureServer, db: String, fullRefresh: Bool = false, yaml: String = sync) throws -> RunSummary {
        var options = RunOptions()
        options.databasePath = db
        options.progressInterval = 0
        options.fullRefresh = fullRefresh
        let config = try PipelineConfig.parse(text: yaml.replacingOccurrences(of: "BASE", with: server.base), path: "cf.yml")
        return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run()
    }

    /// The last page's `nextSyncUrl` is kept with its batch; the next run starts there and reads
    /// only what changed (a tombstone included); `--full-refresh` starts over at the configured URL.
    @Test(.tags(.process), .beyondUnit, .waitsOffThePool) func theNextRunStartsWhereTheSyncEnded() throws {
        let server = try FixtureServer()
        let db = temporaryDirectory().appendingPathComponent("cf.db").path
        #expect(try run(server, db: db).counters.records == 4)
        _ = try HTTPClient().get(server.base + "/control/cookbook-edit", headers: [], timeout: 5)
        let delta = try run(server, db: db)
        #expect(delta.status == .finished && delta.counters.pages == 1 && delta.counters.records == 3 && delta.counters.deleted == 1)
        #expect(
            try rows(db, "SELECT id, title FROM entry ORDER BY id") == [
                ["e1", "Product 1"], ["e3", "Product 3 (renamed)"], ["e4", "Product 4"], ["e5", "Product 5"],
            ])
        let queries = try server.seen().filter { $0.path.hasPrefix("/contentful/") }.map(\.query)
        #expect(queries == ["initial=true", "sync_token=p1", "sync_token=t1"], "\(queries)")
        let full = try run(server, db: db, fullRefresh: true)
        #expect(full.counters.pages == 2 && full.counters.inserted == 0, "\(full.counters)")
        #expect(try server.seen().map(\.query).suffix(2) == ["initial=true", "sync_token=p1"])
        #expect(try rows(db, "SELECT value FROM _ingot_state WHERE key = 'sync:next_url'").first?.first?.hasSuffix("sync_token=t2") == true)
    }

    /// A sync read by two joined jobs into PostgreSQL: its tombstones delete where they stand
    /// (the units committed in the run's order), the delta's last page's next URL is kept by
    /// the job that commits it, and the next joined run starts there and reads only what
    /// changed — each run's tables those of a single SQLite run, the kept URL the same.
    @Test(.tags(.postgres, .process), .beyondUnit, .waitsOffThePool, .hangGuard) func aJoinedSyncKeepsItsNextURL() throws {
        let yaml = Self.sync
        let alone = try FixtureServer()
        let db = temporaryDirectory().appendingPathComponent("cf.db").path
        let joined = try FixtureServer()
        let config = try PipelineConfig.parse(text: yaml.replacingOccurrences(of: "BASE", with: joined.base), path: "cf.yml")
        let database = try JoinDatabase(.postgresql, model: config.model)
        let location = try JoinTests.options(database, join: nil).location.get()
        for (k, name) in ["first", "delta"].enumerated() {
            let single = try run(alone, db: db, yaml: yaml)
            #expect(single.status == .finished, "\(single.error ?? "")")
            let summaries = try JoinTests.runJoined(config, database, name: name, jobs: 2, batchRecords: 1) {
                try config.makeSource(database: location, maxPageBytes: Page.defaultMaxBytes, logger: LogCapture().logger)
            }
            #expect(summaries.allSatisfy { $0.status == .finished }, "\(summaries.map { $0.error ?? "" })")
            let (got, want) = (try database.dump(), try database.sqlite(db))
            for table in want.keys.sorted() { #expect(got[table] == want[table], "\(name): table \(table)") }
            let counters = try #require(try database.runs().last?.counters)
            let counted: [Int] = [counters.pages, counters.records, counters.deleted]
            #expect(counted == [single.counters.pages, single.counters.records, single.counters.deleted], "\(name)")
            let kept = try PGConnection(url: database.url).execute("SELECT value FROM _ingot_state WHERE key = 'sync:next_url'")
                .map { $0.map { ($0 ?? "NULL").replacingOccurrences(of: joined.base, with: "BASE") } }
            let keptAlone: [[String]] = try rows(db, "SELECT value FROM _ingot_state WHERE key = 'sync:next_url'")
                .map { $0.map { $0.replacingOccurrences(of: alone.base, with: "BASE") } }
            #expect(kept == keptAlone && !kept.isEmpty, "\(name)")
            if k == 0 {
                JoinTests.expectShared(summaries)
                for server in [alone, joined] { _ = try HTTPClient().get(server.base + "/control/cookbook-edit", headers: [], timeout: 5) }
            }
        }
        let queries = try joined.seen().filter { $0.path.hasPrefix("/contentful/") }.map(\.query)
        #expect(queries == ["initial=true", "sync_token=p1", "sync_token=t1"], "\(queries)")
    }

    /// A kept sync URL is input from the database: one that leads off the source's origin is
    /// refused before any request.
    @Test(.tags(.process), .beyondUnit, .waitsOffThePool) func aKeptSyncURLIsCheckedAgain() throws {
        let server = try FixtureServer()
        let db = temporaryDirectory().appendingPathComponent("cf.db").path
        #expect(try run(server, db: db).status == .finished)
        try DatabaseQueue(path: db).write {
            try $0.execute(sql: "UPDATE _ingot_state SET value = 'url:https://evil.example.org/sync' WHERE key = 'sync:next_url'")
        }
        let refused = try run(server, db: db)
        #expect(
            refused.status == .failed && refused.error?.contains("evil.example.org is not the pipeline's origin") == true,
            "\(refused.error ?? "")")
    }

    /// What a sync cannot be is refused: `write: replace` (a delta is not the whole), a sync in
    /// a resource.
    @Test func whatASyncCannotBeIsRefused() throws {
        let replace = Self.sync.replacingOccurrences(of: "records: items\n", with: "records: items\nwrite: replace\n")
            .replacingOccurrences(of: "BASE", with: "https://cdn.example.org")
        #expect(configProblems(replace)?.contains("a sync run sees only what changed") == true)
        let resources = """
            version: 1
            name: cf
            resources:
              - name: entries
                source: {http: {url: "https://cdn.example.org/sync?initial=true", paginate: {next_url: nextPageUrl}, sync_url: nextSyncUrl}}
                records: items
                root: entry
            entities: {entry: {identity: id, attributes: {id: string}}}
            """
        #expect(configProblems(resources)?.contains("sync_url is kept for a pipeline of one resource") == true)
    }
}
