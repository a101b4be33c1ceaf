import Foundation
import Synchronization
import Testing

@testable import Ingot

/// Owned children: PokeAPI's type slots and moves, objects with fields and a
/// reference but no identity of their own, kept per owner and position, replaced as a set,
/// with owned children of their own (a move's version group details).
@Suite(.tags(.postgres), .beyondUnit, .waitsOffThePool)
struct OwnedTests {
    static let yaml = """
        version: 1
        name: pokemon
        records: "."
        root: pokemon
        entities:
          pokemon:
            identity: id
            attributes: {id: integer, name: string}
            relationships:
              types: {to: pokemon_type, many: true, owned: true}
              moves: {to: pokemon_move, many: true, owned: true}
          pokemon_type:
            attributes: {slot: integer}
            relationships:
              type: {to: type, key: type.name}
          pokemon_move:
            attributes: {}
            relationships:
              move: {to: move, key: move.name}
              version_group_details: {to: move_detail, many: true, owned: true}
          move_detail:
            attributes: {level: {type: integer, key: level_learned_at}, method: {type: string, key: move_learn_method.name}}
          type:
            identity: name
            attributes: {name: string}
          move:
            identity: name
            attributes: {name: string}
        """

    static let first = #"""
        [{"id": 1, "name": "bulbasaur",
          "types": [{"slot": 1, "type": {"name": "grass", "url": "/type/12/"}}, {"slot": 2, "type": {"name": "poison"}}],
          "moves": [
            {"move": {"name": "razor-wind"}, "version_group_details": [{"level_learned_at": 0, "move_learn_method": {"name": "egg"}}, {"level_learned_at": 7}]},
            {"move": {"name": "swords-dance"}, "version_group_details": [{"level_learned_at": 0, "move_learn_method": {"name": "machine"}}]}
          ]}]
        """#

    /// The next version: one type; the first move keeps one detail (its method gone); the second move is gone.
    static let second = #"""
        [{"id": 1, "types": [{"slot": 1, "type": {"name": "grass"}}],
          "moves": [{"move": {"name": "razor-wind"}, "version_group_details": [{"level_learned_at": 1}]}]}]
        """#

    /// `ingot export` writes owned children whole inside their owner's record (their own
    /// owned children and references too, at any depth; their key columns left out): the
    /// export ingested into a new database gives the same tables, on SQLite and PostgreSQL.
    /// An owner sent twice in one batch, its owned sets shrinking: the later set replaces the
    /// earlier one whole, as across batches (the earlier record's rows past its end are dropped
    /// from the batch, with what they own).
    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .memory, .postgresql])
    func aShrinkingSetWithinOneBatchReplacesTheEarlierOne(backend: StoreConformanceTests.Backend) throws {
        let together = try StoreConformanceTests.harness(backend, yaml: Self.yaml)
        #expect(try together.run([Self.first, Self.second], 50).status == .finished)
        let apart = try StoreConformanceTests.harness(backend, yaml: Self.yaml)
        #expect(try apart.run([Self.first, Self.second], 1).status == .finished)
        let (got, expected) = (try together.dump(), try apart.dump())
        #expect(got == expected)
        #expect(got["pokemon_move"]?.count == 1 && got["pokemon_type"]?.count == 1 && got["move_detail"]?.count == 1)
    }

    @Test(arguments: libraryBackends)
    func exportedOwnersIngestBackWithTheirChildren(backend: String) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "pokemon.yml")
        func database() throws -> String {
            backend == "sqlite" ? temporaryDirectory().appendingPathComponent("pokemon.db").path : try PostgresServer.freshDatabase()
        }
        func run(_ pages: [String], into db: String) -> RunSummary {
            var options = RunOptions()
            options.databasePath = db
            options.progressInterval = 0
            return PipelineRunner(config: config, options: options, logger: LogCapture().logger).run(source: MemoryPageSource(pages))
        }
        func dump(_ db: String) throws -> [String: [[String]]] {
            backend == "sqlite" ? try PostgresTests.sqliteDump(db, config.model) : try PostgresTests.postgresDump(db, config.model)
        }
        let (original, copy) = (try database(), try database())
        #expect(run([Self.first], into: original).status == .finished)
        for depth in [0, 1] {
            var records: [String] = []
            let skipped = try RecordExporter(config: config, location: try StoreLocation(original), entity: nil, filters: [], depth: depth)
                .forEachRecord { records.append($0) }
            #expect(skipped.isEmpty && records.count == 1)
            #expect(!records[0].contains("pokemon_id") && !records[0].contains("position"), "\(records[0])")
            let summary = run(["[" + records.joined(separator: ",") + "]"], into: copy)
            #expect(summary.status == .finished && summary.counters.rejectedRecords == 0, "\(summary.error ?? "")")
            #expect(try dump(copy) == (try dump(original)), "depth \(depth): \(records[0])")
        }
    }

    /// Shopify's product options are owned and have a `position` of their own (1-based, sent by
    /// the API): the entity keeps it, and the owned order goes into `_position` (it was refused:
    /// "attribute 'position' is declared twice"). A shorter set still drops the rows past its end.
    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .memory, .postgresql])
    func anOwnedEntityMayDeclareItsOwnPosition(backend: StoreConformanceTests.Backend) throws {
        let yaml = """
            version: 1
            name: shop
            records: products
            root: product
            entities:
              product:
                identity: id
                attributes: {id: integer, title: string}
                relationships:
                  options: {to: option, many: true, owned: true}
              option:
                attributes: {name: string, position: integer}
            """
        let config = try PipelineConfig.parse(text: yaml, path: "shop.yml")
        let option = try #require(config.model["option"])
        #expect(option.identity == ["product_id", "_position"], "\(option.identity)")
        let harness = try StoreConformanceTests.harness(backend, yaml: yaml)
        let first =
            #"{"products": [{"id": 7, "title": "shirt", "options": [{"name": "Size", "position": 1}, {"name": "Color", "position": 2}]}]}"#
        #expect(try harness.run([first], 50).status == .finished)
        #expect(try harness.dump()["option"]?.map { Array($0.prefix(4)) } == [["7", "0", "Size", "1"], ["7", "1", "Color", "2"]])
        let second = #"{"products": [{"id": 7, "options": [{"name": "Colour", "position": 1}]}]}"#
        #expect(try harness.run([second], 50).status == .finished)
        #expect(try harness.dump()["option"]?.map { Array($0.prefix(4)) } == [["7", "0", "Colour", "1"]])
    }

    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .memory, .postgresql])
    func ownedRowsAreKeptPerOwnerAndReplacedAsASet(backend: StoreConformanceTests.Backend) throws {
        let harness = try StoreConformanceTests.harness(backend, yaml: Self.yaml)
        let summary = try harness.run([Self.first], 50)
        #expect(summary.status == .finished, "\(summary.error ?? "")")
        #expect(summary.counters.rejectedRecords == 0)
        var tables = try harness.dump()
        // Owned rows: the owner's identity, the position, their own columns and to-one keys.
        #expect(tables["pokemon_type"] == [["1", "0", "1", "grass"], ["1", "1", "2", "poison"]], "\(tables["pokemon_type"] ?? [])")
        #expect(tables["pokemon_move"] == [["1", "0", "razor-wind"], ["1", "1", "swords-dance"]], "\(tables["pokemon_move"] ?? [])")
        #expect(
            tables["move_detail"] == [["1", "0", "0", "0", "egg"], ["1", "0", "1", "7", "NULL"], ["1", "1", "0", "0", "machine"]],
            "\(tables["move_detail"] ?? [])")
        #expect(tables["type"] == [["grass"], ["poison"]])

        let next = try harness.run([Self.second], 50)
        #expect(next.status == .finished, "\(next.error ?? "")")
        tables = try harness.dump()
        #expect(tables["pokemon_type"] == [["1", "0", "1", "grass"]])
        #expect(tables["pokemon_move"] == [["1", "0", "razor-wind"]])
        #expect(tables["move_detail"] == [["1", "0", "0", "1", "NULL"]], "replaced whole: the method is gone")
        #expect(tables["pokemon"] == [["1", "bulbasaur"]])
        #expect(tables["move"] == [["razor-wind"], ["swords-dance"]], "a referenced row is not owned: it stays")

        let again = try harness.run([Self.second], 50)
        #expect(again.counters.updated == 0 && again.counters.inserted == 0, "\(again.counters.entities)")
        #expect(try harness.dump() == tables)
    }

    /// `write: replace` deletes an owner's owned rows and what they own in turn (a move's
    /// version group details), deepest first.
    @Test(arguments: [StoreConformanceTests.Backend.sqlite, .postgresql])
    func ownedGrandchildrenGoWithTheirOwner(backend: StoreConformanceTests.Backend) throws {
        let replace = Self.yaml.replacingOccurrences(of: "root: pokemon", with: "root: pokemon\nwrite: replace")
        let harness = try StoreConformanceTests.harness(backend, yaml: replace)
        #expect(try harness.run([Self.first], 50).status == .finished)
        #expect(try harness.dump()["move_detail"]?.count == 3)
        let gone = try harness.run([#"[{"id": 2, "name": "ivysaur"}]"#], 50)
        #expect(gone.counters.deleted == 1, "\(gone.error ?? "")")
        let tables = try harness.dump()
        #expect(tables["pokemon"] == [["2", "ivysaur"]])
        for owned in ["pokemon_type", "pokemon_move", "move_detail"] {
            #expect(tables[owned] == [], "\(owned): \(tables[owned] ?? [])")
        }
    }

    @Test func ownedRowsGoWithTheirOwnerAndAreCheckedAtValidation() throws {
        let replace = Self.yaml.replacingOccurrences(of: "root: pokemon", with: "root: pokemon\nwrite: replace")
        let (_, db) = try ingest(replace, [Self.first])
        let (gone, _) = try ingest(replace, [#"[{"id": 2, "name": "ivysaur"}]"#], db: db)
        #expect(gone.counters.deleted == 1)
        #expect(try rows(db, "SELECT count(*) FROM pokemon_type") == [["0"]])
        #expect(try rows(db, "SELECT count(*) FROM pokemon_move") == [["0"]])

        func problem(_ from: String, _ to: String) -> String? {
            configProblems(Self.yaml.replacingOccurrences(of: from, with: to), path: "o.yml")
        }
        #expect(problem("", "") == nil)
        #expect(
            problem("types: {to: pokemon_type, many: true, owned: true}", "types: {to: pokemon_type, owned: true}")?.contains("to-many")
                == true)
        #expect(
            problem("pokemon_type:\n    attributes", "pokemon_type:\n    identity: slot\n    attributes")?.contains("no identity") == true)
        #expect(
            problem("type: {to: type, key: type.name}", "type: {to: type, key: type.name}\n      again: {to: pokemon_move}")?.contains(
                "is the target of 'pokemon_type.again' too") == true)
    }

    /// Owned sets in a joined run end as a single run's whatever order the units commit in: the
    /// first page's long sets are written *after* the second page's short ones (a job holds unit 1
    /// until the other job has committed unit 2, then lets it go), and the rows past the short
    /// sets' ends — moves, types, a move's details — still go.
    @Test(.hangGuard, arguments: JoinBackend.allCases)
    func ownedSetsEndAsAloneWhateverOrderUnitsCommit(backend: JoinBackend) throws {
        let config = try PipelineConfig.parse(text: Self.yaml, path: "o.yml")
        let database = try JoinDatabase(backend, model: config.model)
        let (_, db) = try ingest(Self.yaml, [Self.first, Self.second])
        let holder = try database.sharedStore()
        defer { try? holder.close() }
        let held = try holder.joinRun(database.request("owned", config))
        _ = try #require(try held.takeFetcherRole())
        for (k, page) in [Self.first, Self.second].enumerated() {
            #expect(try held.enqueue(Page(seq: k + 1, source: "MemoryPageSource#\(k + 1)", bytes: Array(page.utf8)), as: k + 1))
        }
        #expect(try held.endSource(at: 3))
        #expect(try held.claim(maxPageBytes: 1 << 20)?.page.unit?.seq == 1)
        let summaries = Mutex<[RunSummary]>([])
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            summaries.withLock { $0 = (try? JoinTests.runJoined(Self.yaml, [], database, name: "owned", jobs: 1)) ?? [] }
            done.signal()
        }
        // Unit 2 (the short sets) committed by the other job; then unit 1 goes to it.
        try waitUntil { try database.unitsDone("owned") == [2] }
        _ = try held.endJob(status: .interrupted, counters: RunCounters(), replacing: [], scopes: [:], maxPageBytes: 1 << 20, archive: nil)
        done.wait()
        #expect(summaries.withLock { $0 }.map(\.status) == [.finished], "\(summaries.withLock { $0 }.compactMap(\.error))")
        let expected = try database.sqlite(db)
        let got = try database.dump()
        for table in expected.keys.sorted() { #expect(got[table] == expected[table], "table \(table)") }
    }
}
