import Foundation
import Synchronization

/// A deferring job's merge steps while units are still being written (docs/scale-out.md,
/// "Merged as the units come"), on a thread and a connection of their own: the server merges
/// the parts that filled up while the jobs decode, instead of all of them once every unit is
/// done. Each step is ``PGStore/mergeDeferredStep(_:minimumRows:)``; the end's merge takes what
/// the steps left.
final class PGDeferredSteps: Sendable {
    /// When a step is worth taking, and how long to wait when none is.
    struct Policy: Sendable, Equatable {
        /// The rows a part holds, at least, for a step to merge it: a step costs a dozen
        /// statements, and an identity merged by one step and offered again by a later one is
        /// upserted where the end's merge would insert it once.
        var minimumRows = 4_000
        /// Seconds between looks when no part was worth a step.
        var pause = 0.1
    }

    private struct State {
        var stopped = false
        var merged = RunCounters()
        var steps = 0
        var failure: String?
    }
    private let state = Mutex(State())
    private let wake = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)

    /// Starts stepping for the run `join`, on a store of its own opened at `url` for `model`.
    init(url: String, model: EntityModel, join: JoinContext, policy: Policy = Policy()) {
        Thread.detachNewThread { [self] in
            defer { done.signal() }
            do {
                try step(url: url, model: model, join: join, policy: policy)
            } catch {
                // A step that fails leaves its rows to the end's merge; the job goes on.
                state.withLock { $0.failure = "\(error)" }
            }
        }
    }

    /// The thread's loop: a step whenever a part is worth one, until stopped or every unit is done.
    private func step(url: String, model: EntityModel, join: JoinContext, policy: Policy) throws {
        let store = try PGStore(url: url, model: model)
        defer { try? store.close() }
        var prepared = false
        while !state.withLock({ $0.stopped }) {
            if !prepared { prepared = try store.prepareDeferredMerge(join) }
            if prepared, let merged = try store.mergeDeferredStep(join, minimumRows: policy.minimumRows) {
                state.withLock {
                    $0.merged.add(merged)
                    $0.steps += 1
                }
                continue
            }
            if try store.deferredUnitsAllDone(join) { return }
            _ = wake.wait(timeout: .now() + policy.pause)
        }
    }

    /// Stops stepping (a step under way ends first) and returns what the steps merged, how many
    /// they were, and why they stopped early, if they failed.
    func stop() -> (merged: RunCounters, steps: Int, failure: String?) {
        state.withLock { $0.stopped = true }
        wake.signal()
        done.wait()
        return state.withLock { ($0.merged, $0.steps, $0.failure) }
    }
}
