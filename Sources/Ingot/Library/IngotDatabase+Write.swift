import Foundation
import Synchronization

extension IngotDatabase {
    /// Runs `body` in one transaction of the database: every ingest and delete made through its
    /// ``IngotTransaction`` is committed together when `body` returns, or none of them when it
    /// throws — GRDB's `write { db in … }`, SwiftData's `transaction { … }`:
    ///
    /// ```swift
    /// let report = try await db.write { tx in
    ///     try await tx.delete(Issue.self, where: #Predicate { $0.state == "closed" })
    ///     return try await tx.ingest([Issue].self, from: page)
    /// }
    /// ```
    ///
    /// Inside, ``IngotTransaction/fetch(_:where:sortBy:limit:)`` and ``IngotTransaction/count(_:where:)``
    /// see what the transaction wrote; the database's own fetches, and other connections, see it
    /// once it commits. Rejected records do not fail anything (they are in each report); an ingest
    /// or a delete that fails in the database throws, and the whole transaction is then rolled
    /// back even if `body` catches that error (`write` rethrows it). Other ingests, deletes and
    /// transactions of this database object wait for it to end; calling them from inside `body`
    /// throws instead of waiting for ever. Observations (``observe(_:where:sortBy:limit:)``) are
    /// told once, after the commit. docs/library.md, "Transactions".
    public func write<R: Sendable>(_ body: (IngotTransaction) async throws -> R) async throws -> R {
        try checkOpen()
        let turn = try await writersTurn("write")
        defer { turn.give() }
        var opening = StoreOpening()
        opening.transactions = .caller
        let (model, holding) = (self.model, opening)
        let held = try await onQueue { try HeldStore(try self.store.open(model: model, options: holding)) }
        let transaction = IngotTransaction(database: self, held: held)
        let outcome: Result<R, any Error>
        do {
            let value = try await IngotDatabase.$openTransaction.withValue(ObjectIdentifier(self)) { try await body(transaction) }
            outcome = transaction.end().map { Result<R, any Error>.failure($0) } ?? .success(value)
        } catch {
            _ = transaction.end()
            outcome = .failure(error)
        }
        let committing = if case .success = outcome { true } else { false }
        if committing {
            do {
                try await onQueue { try held.end(committing: true) }
            } catch {
                try? await onQueue { try held.end(committing: false) }
                throw error
            }
        } else {
            // The body's error (or the call's that doomed it) is what the caller hears.
            try? await onQueue { try held.end(committing: false) }
        }
        if committing { observers.committed() }
        return try outcome.get()
    }

    /// The database a ``write(_:)`` of this task is inside, if any (its object's identity).
    @TaskLocal static var openTransaction: ObjectIdentifier?

    /// Throws when called from inside a ``write(_:)`` body of this database, which would wait for
    /// its own transaction to end.
    func checkOutsideTransaction(_ call: String) throws {
        guard IngotDatabase.openTransaction != ObjectIdentifier(self) else {
            throw StoreError.unsupported(
                "\(call) on the database inside its own write { tx in … } would wait for that transaction to end: call it on tx")
        }
    }

    /// `body` on the database's queue, where its stores are used.
    func onQueue<R: Sendable>(_ body: @escaping @Sendable () throws -> R) async throws -> R {
        try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try body() }) }
        }
    }
}

/// The ingests, deletes and reads of one ``IngotDatabase/write(_:)``, all in its transaction.
/// Valid inside the body only: a call after it returned throws.
public final class IngotTransaction: Sendable {
    let database: IngotDatabase
    private let held: HeldStore
    /// `open` until the body returns; the first failure of a call in the database (which dooms
    /// the transaction) once one failed.
    private let state = Mutex<State>(.open)

    private enum State {
        case open
        case failed(any Error)
        case ended
    }

    init(database: IngotDatabase, held: HeldStore) {
        self.database = database
        self.held = held
    }

    /// As ``IngotDatabase/ingest(_:from:at:write:)``, in the transaction.
    public func ingest<T: IngotEntity>(
        _ type: [T].Type, from json: some Sequence<UInt8>, at: String? = nil, write: IngotDatabase.Write = .merge
    ) async throws -> IngestReport {
        try await ingest(T.self, from: json, at: at, write: write)
    }

    /// As ``IngotDatabase/ingest(_:from:at:write:)`` for a page of `T` records, in the transaction.
    public func ingest<T: IngotEntity>(
        _ type: T.Type, from json: some Sequence<UInt8>, at: String? = nil, write: IngotDatabase.Write = .merge
    ) async throws -> IngestReport {
        try checkOpen()
        return try await dooming { try await database.ingest(type, from: json, at: at, write: write, held: held) }
    }

    /// A run over the pages of the source `makeSource` makes, in the transaction.
    func ingest<T: IngotEntity>(
        _ type: T.Type, at: String?, write: IngotDatabase.Write, source makeSource: @escaping (PipelineConfig) throws -> any PageSource
    ) async throws -> IngestReport {
        try checkOpen()
        return try await dooming { try await database.ingest(type, at: at, write: write, held: held, source: makeSource) }
    }

    /// As ``IngotDatabase/delete(_:where:)``, in the transaction: the rows it ingested included.
    @discardableResult
    public func delete<T: IngotEntity>(_ type: T.Type, where predicate: Predicate<T>) async throws -> Int {
        try checkOpen()
        return try await dooming { try await database.delete(type, predicate: predicate, identity: nil, held: held) }
    }

    /// As ``IngotDatabase/delete(_:id:)``, in the transaction.
    @discardableResult
    public func delete<T: IngotEntity>(_ type: T.Type, id: some Sendable) async throws -> Int {
        try checkOpen()
        return try await dooming { try await database.delete(type, predicate: nil, identity: id, held: held) }
    }

    /// As ``IngotDatabase/fetch(_:where:sortBy:limit:offset:including:nested:)``, seeing what the
    /// transaction wrote.
    public func fetch<T: IngotEntity>(
        _ type: T.Type, where predicate: Predicate<T>? = nil, sortBy: [SortDescriptor<T>] = [], limit: Int? = nil
    ) async throws -> [T] {
        try checkOpen()
        return try await database.fetch(
            type, where: predicate, identity: nil, sortBy: sortBy, limit: limit, offset: 0, including: [], nested: [], held: held)
    }

    /// As ``IngotDatabase/count(_:where:)``, seeing what the transaction wrote.
    public func count<T: IngotEntity>(_ type: T.Type, where predicate: Predicate<T>? = nil) async throws -> Int {
        try checkOpen()
        return try await database.count(type, where: predicate, held: held)
    }

    private func checkOpen() throws {
        try state.withLock { state in
            switch state {
            case .open: return
            case .failed(let error): throw error
            case .ended: throw StoreError.unsupported("the transaction has ended: its calls belong inside the write { tx in … } body")
            }
        }
    }

    /// `call`, whose failure in the database (a run that failed, a delete the database refused)
    /// dooms the transaction; an error thrown before the database is reached (a predicate with no
    /// SQL translation, a type outside the model) does not.
    private func dooming<R>(_ call: () async throws -> R) async throws -> R {
        do {
            return try await call()
        } catch {
            if IngotTransaction.reachedTheDatabase(error) {
                state.withLock { state in if case .open = state { state = .failed(error) } }
            }
            throw error
        }
    }

    /// Whether `error` came from the database, not from checking the call before it (a predicate
    /// with no translation, a type outside the model: nothing was written).
    private static func reachedTheDatabase(_ error: any Error) -> Bool {
        if error is IngotQueryError { return false }
        if let store = error as? StoreError, store.kind == .conflict { return false }
        return true
    }

    /// Ends the transaction's calls; the failure that doomed it, if one did.
    func end() -> (any Error)? {
        state.withLock { state in
            defer { state = .ended }
            if case .failed(let error) = state { return error }
            return nil
        }
    }
}

/// A store holding a transaction for ``IngotDatabase/write(_:)``, and its reader.
final class HeldStore: @unchecked Sendable {  // used on its database's serial queue only (IngotDatabase.onQueue)
    let store: any IngestStore
    let reader: any RowReader
    private let held: any HeldTransaction

    init(_ store: any IngestStore) throws {
        guard let held = store as? any HeldTransaction else {
            try? store.close()
            throw StoreError.unsupported("this database's backend cannot hold a transaction")
        }
        self.store = store
        self.held = held
        reader = held.heldReader()
    }

    func end(committing: Bool) throws { try held.endTransaction(committing: committing) }
}

/// One writer at a time, waited for without blocking a thread: a FIFO of the tasks waiting.
final class WriterTurn: Sendable {
    private let state = Mutex<(taken: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    /// Waits for the turn, then holds it until ``give()``.
    func take() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                guard state.taken else {
                    state.taken = true
                    return true
                }
                state.waiting.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Hands the turn to the next task waiting, or frees it.
    func give() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiting.isEmpty else {
                state.taken = false
                return nil
            }
            return state.waiting.removeFirst()
        }
        next?.resume()
    }
}
