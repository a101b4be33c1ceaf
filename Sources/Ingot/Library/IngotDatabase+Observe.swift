import Foundation
import Synchronization

extension IngotDatabase {
    /// The stored `T`s `predicate` selects, as ``fetch(_:where:sortBy:limit:offset:including:nested:)``
    /// returns them, now and again after every ingest or delete this database object commits —
    /// what GRDB's `ValueObservation` and SwiftData's `@Query` give:
    ///
    /// ```swift
    /// for try await open in db.observe(Issue.self, where: #Predicate { $0.state == "open" }) {
    ///     print(open.count)   // at once, then after each commit
    /// }
    /// ```
    ///
    /// Guarantees (docs/library.md, "Observing"): the first value comes at once; each later one is
    /// fetched after a commit, on the database's queue, so it holds every write committed before
    /// it (never a write half done); commits made while a value is fetched or not yet taken are
    /// coalesced into one more fetch (a slow consumer sees the latest state, not every step);
    /// values come in commit order. A commit that changes nothing these rows show still yields.
    /// Writes by another process or another `IngotDatabase` object are not seen. The sequence
    /// ends when the task iterating it is cancelled or the database is closed, and throws what a
    /// fetch throws (a predicate with no translation: at once).
    public func observe<T: IngotEntity>(
        _ type: T.Type, where predicate: Predicate<T>? = nil, sortBy: [SortDescriptor<T>] = [], limit: Int? = nil
    ) -> AsyncThrowingStream<[T], any Error> {
        let (changes, signal) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = observers.add(signal)
        let (stream, out) = AsyncThrowingStream<[T], any Error>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let task = Task {
            do {
                out.yield(try await self.fetch(type, where: predicate, sortBy: sortBy, limit: limit))
                for await _ in changes {
                    try Task.checkCancellation()
                    out.yield(try await self.fetch(type, where: predicate, sortBy: sortBy, limit: limit))
                }
                out.finish()
            } catch {
                // Cancelled, or closed while a value was being fetched: the sequence just ends.
                if error is CancellationError || self.isClosed { out.finish() } else { out.finish(throwing: error) }
            }
        }
        out.onTermination = { [observers] _ in
            task.cancel()
            observers.remove(id)
        }
        return stream
    }
}

/// The observations of one database object: each a stream of commit signals, told of every
/// commit (buffering one: commits coalesce). Under a mutex: `Sendable` by it.
final class Observers: Sendable {
    private let state = Mutex<(next: Int, signals: [Int: AsyncStream<Void>.Continuation])>((0, [:]))

    /// Registers `signal`; the key that removes it.
    func add(_ signal: AsyncStream<Void>.Continuation) -> Int {
        state.withLock { state in
            state.next += 1
            state.signals[state.next] = signal
            return state.next
        }
    }

    func remove(_ id: Int) {
        let signal = state.withLock { $0.signals.removeValue(forKey: id) }
        signal?.finish()
    }

    /// A write committed: every observation fetches again (once, however many commits came).
    func committed() {
        for signal in state.withLock({ Array($0.signals.values) }) { signal.yield() }
    }

    /// The database closed: every observation ends.
    func finishAll() {
        let signals = state.withLock { state in
            defer { state.signals = [:] }
            return Array(state.signals.values)
        }
        for signal in signals { signal.finish() }
    }
}
