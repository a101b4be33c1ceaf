import Dispatch
import Foundation
import Logging
import Synchronization

/// A database of entities declared in Swift (``IngotEntity``): JSON is decoded straight into it
/// with exactly the pipeline's merge rules — identities found or created in one lookup per entity,
/// absent keys left alone, `null` clearing, stubs for bare references, duplicates folded into one
/// row (the later record winning key by key), a bad record rejected whole, with its coding path,
/// while its neighbours are saved.
///
/// ```swift
/// let db = try IngotDatabase.sqlite("cache.db", entities: [Person.self])
/// let report = try await db.ingest([Person].self, from: pageBytes)
/// print(report.entities["person"]?.inserted ?? 0, report.rejections.map(\.codingPath))
/// ```
///
/// Each ``ingest(_:from:at:write:)`` is one run of the pipeline the types describe (named
/// `swift.<entity>` in `_ingot_runs`, so `ingot` sees it like any other), saved in one
/// transaction (up to 32 MiB of JSON; a larger input commits as it goes). Ingests from several
/// tasks are safe: they take their turn, one at a time per database object.
public final class IngotDatabase: Sendable {
    /// The entities it was opened for and every entity they reach.
    public let model: EntityModel
    /// Where it is, as logs show it (a URL without its password).
    public let location: String
    /// The database as `--db` would name it (a URL may hold a password: never shown).
    private let database: String
    /// ``database``, parsed once.
    let store: StoreLocation
    /// What keeps an in-memory database alive while this object lives (``inMemory(entities:logger:)``),
    /// until ``close()``.
    private let keeper: Mutex<(any AnyObject & Sendable)?>
    /// Set by ``close()``: every later call throws.
    private let closed = Atomic<Bool>(false)
    let logger: Logger
    /// One ingest at a time: each is a run that holds the database until it ends.
    let queue = DispatchQueue(label: "ingot.database")
    /// The reader fetches share (``reading(_:)``), on `queue` only.
    private let readerSlot = ReaderSlot()
    /// The observations under way (``observe(_:where:sortBy:limit:)``), each told of every commit.
    let observers = Observers()
    /// One writer at a time — an ingest, a delete, or a transaction from its start to its end
    /// (``write(_:)``), which spans many turns of ``queue``.
    let turn = WriterTurn()

    /// A SQLite database at `path` (created when missing) for `entities` and every entity they
    /// reach. Its tables are created, or checked against the model: a database that disagrees is
    /// refused here, before anything is written. `":memory:"` is ``inMemory(entities:logger:)``.
    public static func sqlite(_ path: String, entities: [any IngotEntity.Type], logger: Logger? = nil) throws -> IngotDatabase {
        if path == ":memory:" { return try inMemory(entities: entities, logger: logger) }
        return try IngotDatabase(database: "sqlite:" + path, entities: entities, logger: logger)
    }

    /// A SQLite database in memory for `entities`, as ``sqlite(_:entities:logger:)``: for tests and
    /// caches that need not outlive the process. It lives as long as this object; each one is a
    /// database of its own.
    public static func inMemory(entities: [any IngotEntity.Type], logger: Logger? = nil) throws -> IngotDatabase {
        try IngotDatabase(database: "sqlite:file:ingot-\(UUID().uuidString)?mode=memory&cache=shared", entities: entities, logger: logger)
    }

    /// A PostgreSQL database (`postgresql://user:password@host/name`) for `entities`, as
    /// ``sqlite(_:entities:logger:)``.
    public static func postgres(_ url: String, entities: [any IngotEntity.Type], logger: Logger? = nil) throws -> IngotDatabase {
        guard url.lowercased().hasPrefix("postgres://") || url.lowercased().hasPrefix("postgresql://") else {
            throw StoreError.unsupported("a PostgreSQL database is a postgresql:// URL")
        }
        return try IngotDatabase(database: url, entities: entities, logger: logger)
    }

    private init(database: String, entities: [any IngotEntity.Type], logger: Logger?) throws {
        model = try EntityModel(roots: entities)
        try model.validate()
        let store = try StoreLocation(database)
        location = store.description
        self.database = database
        self.store = store
        self.logger = logger ?? Logger(label: "ingot", factory: { _ in SwiftLogNoOpLogHandler() })
        keeper = Mutex(try store.backend.keepAlive())
        try store.open(model: model, options: StoreOpening()).close()
    }

    /// Decodes `json` — an array of `T` records, or one `T` object — into the database, and
    /// returns what it did. `at`: the key path to the records inside an envelope
    /// (`"results"` for `{"count": 82, "results": […]}`).
    ///
    /// Rejected records are in the report, not thrown; what throws is a failure of the database
    /// itself (nothing of this input is then saved) or a type outside ``model``.
    /// `write`: how rows already stored are treated (``Write``; the pipeline file's `write:`).
    public func ingest<T: IngotEntity>(_ type: [T].Type, from json: some Sequence<UInt8>, at: String? = nil, write: Write = .merge)
        async throws -> IngestReport
    {
        try await ingest(T.self, from: json, at: at, write: write)
    }

    /// The same for a page of `T` records (one object or an array of them).
    public func ingest<T: IngotEntity>(_ type: T.Type, from json: some Sequence<UInt8>, at: String? = nil, write: Write = .merge)
        async throws -> IngestReport
    {
        let turn = try await writersTurn("ingest")
        defer { turn.give() }
        return try await ingest(type, from: json, at: at, write: write, held: nil)
    }

    /// An ingest: a run of its own into the database, or (`held`) one inside a transaction.
    func ingest<T: IngotEntity>(_ type: T.Type, from json: some Sequence<UInt8>, at: String?, write: Write, held: HeldStore?)
        async throws -> IngestReport
    {
        let bytes = Array(json)
        return try await ingest(type, at: at, write: write, held: held) { _ in BytesPageSource(bytes: bytes, source: "ingest(\(T.self))") }
    }

    /// A run of the pipeline the types describe over the pages of `source` (made for the
    /// pipeline: its framing), into the database or `held`.
    func ingest<T: IngotEntity>(
        _ type: T.Type, at: String?, write: Write, held: HeldStore?, source makeSource: (PipelineConfig) throws -> any PageSource
    ) async throws -> IngestReport {
        try checkOpen()
        let entity = T.entityName
        guard model.entities.contains(where: { $0.name == entity }) else {
            throw StoreError.conflict(
                "\(T.self) (entity '\(entity)') is not among this database's entities: open it with \(T.self) or a type that reaches it")
        }
        var config = PipelineConfig(
            name: "swift.\(entity)", recordsPath: at.map { $0.split(separator: ".").map(String.init) } ?? [], root: entity, model: model)
        config.write = write.mode
        config.writeScope = write.scope
        config.writeRejectsUnknown = write.rejectsUnknown
        if let scope = write.scope, model.scopeColumn(scope, of: entity) == nil {
            throw StoreError.conflict(
                "write scope '\(scope)' is not the key of an attribute or a to-one of \(T.self) (entity '\(entity)')")
        }
        var options = RunOptions()
        options.databasePath = database
        options.progressInterval = 0
        options.commitRecords = .max
        options.commitInterval = 30
        let (logger, run, pipeline, source) = (self.logger, options, config, try makeSource(config))
        return try await withCheckedThrowingContinuation { continuation in
            queue.async {
                let runner = PipelineRunner(config: pipeline, options: run, logger: logger)
                let summary = held.map { runner.run(source: source, store: $0.store) } ?? runner.run(source: source)
                // The run takes no more pages: a caller still offering one is told so.
                source.cancel()
                guard summary.status == .finished else {
                    continuation.resume(throwing: IngestError(runID: summary.runID, message: summary.error ?? "the run \(summary.status)"))
                    return
                }
                if held == nil { self.observers.committed() }
                do {
                    let rejections =
                        try held.map { try StoreLocation.rejections(runID: summary.runID, on: $0.reader) }
                        ?? self.store.rejections(runID: summary.runID).map(\.1)
                    continuation.resume(returning: IngestReport(summary: summary, rejections: rejections))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }
}

extension IngotDatabase {
    /// How many stored `T` match `predicate` (all of them without one), counted by the database
    /// (`SELECT count(*)`): the predicate translates as ``fetch(_:where:sortBy:limit:offset:including:nested:)``'s does.
    public func count<T: IngotEntity>(_ type: T.Type, where predicate: Predicate<T>? = nil) async throws -> Int {
        try await count(type, where: predicate, held: nil)
    }

    func count<T: IngotEntity>(_ type: T.Type, where predicate: Predicate<T>?, held: HeldStore?) async throws -> Int {
        try checkOpen()
        let turn = try await readingTurn(held)
        defer { turn?.give() }
        guard let index = model.index(of: T.entityName) else {
            throw StoreError.conflict("\(T.self) (entity '\(T.entityName)') is not among this database's entities")
        }
        let layouts = EntityLayout.layouts(of: model)
        let levels = chain(from: index)
        var columns = QueryColumns(typeName: "\(T.self)", entity: model.entities[index], layout: layouts[index])
        columns.parents = levels.dropFirst().map { (self.model.entities[$0], layouts[$0]) }
        columns.world = (model, layouts)
        var query = try IngotDatabase.rowQuery(predicate: predicate, sortBy: [], columns: columns, levels: levels, layouts: layouts)
        query.filter = IngotDatabase.holdingRequired(query.filter, model.entities[index])
        query.countsRows = true
        let counting = query
        let rows = try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(with: Result { try self.reading(in: held) { reader in try reader.select(counting) } })
            }
        }
        guard case .integer(let n)? = rows.first?.first else { return 0 }
        return Int(n)
    }

    /// The stored `T`s that `predicate` selects, sorted by `sortBy` then by identity, as plain
    /// Swift values decoded through `T`'s own `init(from:)`, with the relationships `including`
    /// names loaded (two queries each, whatever the number of rows):
    ///
    /// ```swift
    /// let spanish = try await db.fetch(Person.self, where: #Predicate { $0.country == "ES" },
    ///                                  sortBy: [SortDescriptor(\.score, order: .reverse)], limit: 50,
    ///                                  including: [\.dogs])
    /// ```
    ///
    /// The predicate and the sort become SQL (`==`, `!=`, `<`, `<=`, `>`, `>=`, `&&`, `||`, `!`,
    /// `??` and `[constants].contains(property)` on stored attributes; text sorts and compares by
    /// its bytes on both backends; `Date` constants compare as times); anything else throws
    /// ``IngotQueryError`` before a row is read.
    /// Relationships not included are not loaded: optional ones are `nil`. Loaded targets come
    /// with the relationships `nested` names on their own types (`\Dog.toys`), loaded level by
    /// level wherever a loaded target of that type is (two queries each per level):
    ///
    /// ```swift
    /// let people = try await db.fetch(Person.self, including: [\.dogs], nested: [\Dog.toys, \Toy.maker])
    /// ```
    public func fetch<T: IngotEntity>(
        _ type: T.Type, where predicate: Predicate<T>? = nil, sortBy: [SortDescriptor<T>] = [], limit: Int? = nil, offset: Int = 0,
        including: [PartialKeyPath<T>] = [], nested: [AnyKeyPath] = []
    ) async throws -> [T] {
        try await fetch(
            type, where: predicate, identity: nil, sortBy: sortBy, limit: limit, offset: offset, including: including, nested: nested,
            held: nil)
    }

    /// The stored `T` whose identity is `id` (its identity property's value: an `Int`, a
    /// `String`, a `UUID`…), its relationships loaded as ``fetch(_:where:sortBy:limit:offset:including:nested:)``
    /// loads them; `nil` when none is stored. For a type with a single identity property.
    public func fetch<T: IngotEntity>(
        _ type: T.Type, id: some Sendable, including: [PartialKeyPath<T>] = [], nested: [AnyKeyPath] = []
    ) async throws -> T? {
        try await fetch(type, where: nil, identity: id, sortBy: [], limit: 1, offset: 0, including: including, nested: nested, held: nil)
            .first
    }

    func fetch<T: IngotEntity>(
        _ type: T.Type, where predicate: Predicate<T>?, identity: (any Sendable)?, sortBy: [SortDescriptor<T>], limit: Int?, offset: Int,
        including: [PartialKeyPath<T>], nested: [AnyKeyPath], held: HeldStore?
    ) async throws -> [T] {
        try checkOpen()
        let turn = try await readingTurn(held)
        defer { turn?.give() }
        guard let index = model.index(of: T.entityName) else {
            throw StoreError.conflict("\(T.self) (entity '\(T.entityName)') is not among this database's entities")
        }
        let layouts = EntityLayout.layouts(of: model)
        let layout = layouts[index]
        let levels = chain(from: index)
        var columns = QueryColumns(typeName: "\(T.self)", entity: model.entities[index], layout: layout)
        columns.parents = levels.dropFirst().map { (self.model.entities[$0], layouts[$0]) }
        columns.world = (model, layouts)
        var query = try IngotDatabase.rowQuery(predicate: predicate, sortBy: sortBy, columns: columns, levels: levels, layouts: layouts)
        if let identity { query.filter = try IngotDatabase.identityFilter(T.self, identity, layout) }
        query.filter = IngotDatabase.holdingRequired(query.filter, model.entities[index])
        query.limit = limit
        query.offset = max(0, offset)
        let relationships = try including.map { keyPath -> (level: Int, relationship: Int) in
            for (level, entity) in levels.enumerated() {
                let declared = QueryColumns(typeName: "\(T.self)", entity: self.model.entities[entity], layout: layouts[entity])
                if let r = try? declared.relationship(keyPath) { return (level, r) }
            }
            return (0, try columns.relationship(keyPath))
        }
        let deeper = try nested.map { try nestedRelationship($0, layouts: layouts) }
        let (model, select, chain) = (self.model, query, levels)
        let levelShape = RowDecoder.Shape(levels: levels.map { (model.entities[$0], layouts[$0]) })
        let decoders = try await withCheckedThrowingContinuation { continuation in
            queue.async {
                continuation.resume(
                    with: Result {
                        try self.reading(in: held) { reader in
                            let rows = try reader.select(select)
                            let loader = RelationshipLoader(model: model, layouts: layouts, reader: reader)
                            var parts = [rows]
                            let identities = rows.map { row in layout.identitySlots.map { row[$0] } }
                            for ancestor in chain.dropFirst() {
                                let found = try loader.rows(of: ancestor, identities: identities)
                                let empty = [ScalarValue](repeating: .null, count: layouts[ancestor].columns.count)
                                parts.append(identities.map { found[$0] ?? empty })
                            }
                            var decoders = rows.indices.map { k in RowDecoder(shape: levelShape, row: parts.flatMap { $0[k] }) }
                            for (level, r) in relationships {
                                let key = model.entities[chain[level]].relationships[r].key
                                for (k, loaded) in try loader.load(r, of: chain[level], owners: parts[level]).enumerated() {
                                    decoders[k].loaded[key] = loaded
                                }
                            }
                            try IngotDatabase.loadNested(deeper, into: &decoders, loader: loader)
                            return decoders
                        }
                    })
            }
        }
        return decodeFitting(T.self, decoders)
    }

    /// The filter of ``fetch(_:id:including:nested:)``: `T`'s one identity column equal to
    /// `identity`, refused for a composite identity or a value that cannot name one.
    static func identityFilter<T>(_ type: T.Type, _ identity: any Sendable, _ layout: EntityLayout) throws -> RowExpression {
        guard layout.identitySlots.count == 1 else {
            throw IngotQueryError(message: "\(T.self) has a composite identity: fetch it with a predicate on its identity properties")
        }
        let column = layout.columns[layout.identitySlots[0]]
        let value = try RowExpression.constant(identity)
        guard names(column.type, value) else {
            let given = "\(identity) (\(Swift.type(of: identity)))"
            throw IngotQueryError(
                message: "\(T.self)'s identity '\(column.name)' is stored as \(column.type.name): \(given) cannot name one")
        }
        return .compare(.column(column.name), .equal, value)
    }

    /// `filter`, narrowed to the rows that hold a value for each of `entity`'s required
    /// attributes (a Swift type's non-optional properties, ``Attribute/required``): a stub holds
    /// only its identity and is not a value of the type. One rule for `fetch` and `count`, in
    /// SQL, so that a count, a page of `limit` rows and its offset agree with what `fetch` returns.
    static func holdingRequired(_ filter: RowExpression?, _ entity: Entity) -> RowExpression? {
        var result = filter
        for attribute in entity.attributes
        where attribute.required && !entity.identityAttributes.contains(where: { $0.name == attribute.name }) {
            let held = RowExpression.compare(.column(attribute.name), .notEqual, .value(.null))
            result = result.map { .and($0, held) } ?? held
        }
        return result
    }

    /// The rows `decoders` read, decoded through `T`'s own `init(from:)`. A row that cannot be
    /// decoded as T (a stub of a type that requires more than its identity, a row without a
    /// required key) is left out and said (`fetch.row_skipped`): never the whole fetch.
    private func decodeFitting<T: IngotEntity>(_ type: T.Type, _ decoders: [RowDecoder]) -> [T] {
        let skips = DecodeSkips()
        let values = DecodeSkips.$current.withValue(skips) {
            decoders.compactMap { decoder -> T? in
                do {
                    return try T(from: decoder)
                } catch {
                    skips.add(decoder, error)
                    return nil
                }
            }
        }
        for (table, identity, reason) in skips.entries {
            logger.warning(
                "fetch.row_skipped",
                metadata: ["entity": "\(table)", "identity": "\(identity)", LogKey.reason: "\(reason)", "type": "\(T.self)"])
        }
        return values
    }

    /// A `nested:` key path as (entity, relationship, coding key), checked before a row is read.
    private func nestedRelationship(_ keyPath: AnyKeyPath, layouts: [EntityLayout]) throws -> (entity: Int, relationship: Int, key: String)
    {
        guard let root = Swift.type(of: keyPath).rootType as? any IngotEntity.Type, let e = model.index(of: root.entityName) else {
            throw IngotQueryError(message: "\(keyPath): its root type is not an entity of this database")
        }
        let columns = QueryColumns(typeName: "\(root)", entity: model.entities[e], layout: layouts[e])
        let r = try columns.relationship(keyPath)
        return (e, r, model.entities[e].relationships[r].key)
    }

    /// The entity at `index`, then its parent, its parent's parent…: a child entity's row is
    /// joined to its parents' rows (their columns follow its own).
    func chain(from index: Int) -> [Int] {
        var levels = [index]
        while let name = model.entities[levels[levels.count - 1]].parent, let parent = model.index(of: name), !levels.contains(parent) {
            levels.append(parent)
        }
        return levels
    }

    /// Whether `value` (a constant) can name a row whose identity is stored as `type`: an integer
    /// an integer identity, text a text one, and so on — `fetch(_:id:)` with a literal of another
    /// type is refused rather than answered `nil` (a JSON identity takes any value).
    static func names(_ type: AttributeType, _ value: RowExpression) -> Bool {
        switch (type, value) {
        case (.integer, .value(.integer)), (.string, .value(.text)), (.bool, .value(.bool)), (.json, _): true
        case (.double, .value(.real)), (.double, .value(.integer)), (.decimal, .decimal), (.decimal, .value(.integer)): true
        case (.date, .time): true
        default: false
        }
    }

    /// The query of a fetch: its predicate and sort translated (PredicateTranslation.swift), the
    /// parents' tables joined when either names an inherited property.
    static func rowQuery<T: IngotEntity>(
        predicate: Predicate<T>?, sortBy: [SortDescriptor<T>], columns: QueryColumns, levels: [Int], layouts: [EntityLayout]
    ) throws -> RowQuery {
        let layout = layouts[levels[0]]
        var query = RowQuery(layout)
        query.filter = try predicate.map { try RowExpression.of($0.expression, columns) }
        query.order = try sortBy.map { descriptor -> RowQuery.Order in
            guard let keyPath = descriptor.keyPath else {
                throw IngotQueryError(message: "a SortDescriptor without a key path (\(descriptor)) has no SQL translation")
            }
            let (level, column, through) = try columns.sortKey(keyPath)
            let isTime = if case .date = column.type { true } else { false }
            var order = RowQuery.Order(
                column: column.name, descending: descriptor.order == .reverse, isText: column.type == .string, level: level,
                isTime: isTime, isDecimal: column.type == .decimal)
            order.through = through
            return order
        }
        query.aliasesTable = query.filter?.namesRelated == true || query.order.contains { $0.through != nil }
        if query.order.contains(where: { $0.level > 0 }) || query.filter?.namesInherited == true {
            let keys = layout.identitySlots.map { layout.columns[$0].name }
            query.parents = levels.dropFirst().map { RowQuery.Parent(table: layouts[$0].table, keys: keys) }
        }
        return query
    }

    /// Loads the `nested` relationships of the targets already loaded under `decoders`, level by
    /// level until a level loads nothing new: each relationship wherever a loaded target of its
    /// entity lacks it (two queries per relationship and level, whatever the number of rows).
    static func loadNested(
        _ nested: [(entity: Int, relationship: Int, key: String)], into decoders: inout [RowDecoder], loader: RelationshipLoader
    ) throws {
        guard !nested.isEmpty else { return }
        for _ in 0..<16 {  // a cycle of relationships (person → dogs → master → …) stops somewhere
            var loadedAny = false
            for (entity, r, key) in nested {
                // The targets of `entity` that lack `key`, in a walk of the tree; then their loads,
                // handed back in the same walk (children before their owner, so that what is
                // handed back is not walked again).
                var owners: [[ScalarValue]] = []
                walk(&decoders) { decoder in
                    if decoder.layout.entity == entity && decoder.loaded[key] == nil { owners.append(decoder.row) }
                }
                guard !owners.isEmpty else { continue }
                loadedAny = true
                var results = try loader.load(r, of: entity, owners: owners)[...]
                walk(&decoders) { decoder in
                    if decoder.layout.entity == entity && decoder.loaded[key] == nil, let next = results.popFirst() {
                        decoder.loaded[key] = next
                    }
                }
            }
            if !loadedAny { return }
        }
    }

    /// Calls `visit` on every decoder loaded under `decoders` (not `decoders` themselves), each
    /// one's own loaded targets first, in a fixed order.
    private static func walk(_ decoders: inout [RowDecoder], _ visit: (inout RowDecoder) -> Void) {
        for k in decoders.indices {
            for key in decoders[k].loaded.keys.sorted() {
                switch decoders[k].loaded[key] {
                case .one(let target?)?:
                    var inner = [target]
                    walk(&inner, visit)
                    visit(&inner[0])
                    decoders[k].loaded[key] = .one(inner[0])
                case .many(var targets)?:
                    walk(&targets, visit)
                    for t in targets.indices { visit(&targets[t]) }
                    decoders[k].loaded[key] = .many(targets)
                default: break
                }
            }
        }
    }

    /// Runs `body` with this database's reader, opened at the first read and kept open: a fetch
    /// is a few selects, each of which would otherwise connect anew. A read that fails drops it
    /// (a connection the server closed is opened again next time). On `queue` only.
    /// Throws once ``close()`` was called.
    /// Whether ``close()`` was called.
    var isClosed: Bool { closed.load(ordering: .acquiring) }

    /// Whether the database lives in memory (``inMemory(entities:logger:)``).
    var isInMemory: Bool { keeper.withLock { $0 != nil } }

    func checkOpen() throws {
        guard !closed.load(ordering: .acquiring) else { throw StoreError.unsupported("the database \(location) is closed") }
    }

    /// Lets go of what the database holds open — the connection fetches share, and an in-memory
    /// database, which is then gone — after the ingests and fetches already asked for. Every
    /// later call throws; closing twice does nothing.
    public func close() async {
        closed.store(true, ordering: .releasing)
        observers.finishAll()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            queue.async {
                self.readerSlot.reader = nil
                self.keeper.withLock { $0 = nil }
                continuation.resume()
            }
        }
    }

    /// An in-memory database's reads wait for a transaction under way, holding the writers' turn
    /// while they read: its connections share one cache, where a table a transaction wrote is
    /// locked to every other connection until it commits ("database table is locked"). Inside
    /// the transaction's own body, such a read would wait for ever: it throws, naming `tx`.
    /// The turn taken, if any (`nil`: a file or a server database, or a read inside `held`).
    func readingTurn(_ held: HeldStore?) async throws -> WriterTurn? {
        guard held == nil, isInMemory else { return nil }
        return try await writersTurn("reading an in-memory database")
    }

    /// The writers' turn (``turn``), once this task's `call` may wait for it: not from inside a
    /// ``write(_:)`` body of this database, which holds it (that throws). Give it back when done.
    func writersTurn(_ call: String) async throws -> WriterTurn {
        try checkOutsideTransaction(call)
        await turn.take()
        return turn
    }

    /// `body` with the reader fetches share, on the database's queue.
    func read<R: Sendable>(_ body: @escaping @Sendable (any RowReader) throws -> R) async throws -> R {
        try checkOpen()
        let turn = try await readingTurn(nil)
        defer { turn?.give() }
        return try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try self.reading(body) }) }
        }
    }

    /// `body` with the held transaction's reader (which sees what it wrote), or the database's.
    func reading<R>(in held: HeldStore?, _ body: (any RowReader) throws -> R) throws -> R {
        guard let held else { return try reading(body) }
        dispatchPrecondition(condition: .onQueue(queue))
        return try body(held.reader)
    }

    func reading<R>(_ body: (any RowReader) throws -> R) throws -> R {
        dispatchPrecondition(condition: .onQueue(queue))
        let reader = try readerSlot.reader ?? store.reader()
        readerSlot.reader = reader
        do {
            return try body(reader)
        } catch {
            readerSlot.reader = nil
            throw error
        }
    }
}

/// The reader an ``IngotDatabase`` keeps open between fetches.
private final class ReaderSlot: @unchecked Sendable {  // read and written on its database's serial queue only (reading(_:) checks)
    var reader: (any RowReader)?
}
