import Dispatch
import Synchronization
import Testing

/// Runs each test case of a suite that waits — on `ingot` processes, PostgreSQL, fixture servers
/// that hold a request, other jobs — on a thread of its own, at most ``width`` at once.
///
/// Swift Testing runs test cases as tasks of the cooperative pool, which has a thread per core: a
/// synchronous test that waits blocks one of them, so on two cores two waiting tests held the
/// whole run while the CPU idled (eight synchronous one-second sleeps take four seconds). A test
/// case here is started on a serial queue's thread instead (a task executor preference), and the
/// pool's threads stay free for the tests that compute. The tests that run in the test process
/// alone keep the pool: they use the CPU they are given. The PostgreSQL databases a case made
/// are dropped when it ends (``PostgresServer/MadeDatabases``), and a case with ``HangGuard`` is
/// guarded from when the gate admits it.
struct WaitsOffThePool: SuiteTrait, TestTrait, TestScoping {
    /// How many waiting test cases run at once: enough to keep two cores busy while most of
    /// them wait, few enough that their servers and databases stay small.
    static let width = 6
    private static let gate = Gate(width: width)

    var isRecursive: Bool { true }

    func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? { testCase == nil ? nil : self }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        await Self.gate.enter()
        defer { Self.gate.leave() }
        let made = PostgresServer.MadeDatabases()
        defer { made.drop() }
        // The hang guard counts from here, not from the case's wait at the gate.
        let guarded = test.traits.contains { $0 is HangGuard }
        try await PostgresServer.$made.withValue(made) {
            try await withTaskExecutorPreference(QueueExecutor()) {
                if guarded { try await HangGuard.guarding(function) } else { try await function() }
            }
        }
    }

    /// A counting semaphore whose waiters suspend (they hold no thread while they wait).
    private final class Gate: Sendable {
        private let state: Mutex<(free: Int, waiting: [CheckedContinuation<Void, Never>])>

        init(width: Int) { state = Mutex((width, [])) }

        func enter() async {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                let admitted = state.withLock { state in
                    guard state.free > 0 else {
                        state.waiting.append(waiter)
                        return false
                    }
                    state.free -= 1
                    return true
                }
                if admitted { waiter.resume() }
            }
        }

        func leave() {
            let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard !state.waiting.isEmpty else {
                    state.free += 1
                    return nil
                }
                return state.waiting.removeFirst()
            }
            next?.resume()
        }
    }

    /// A task executor on a serial queue of its own: a job that blocks holds that queue's
    /// thread, and Dispatch starts another for the next queue that has work.
    private final class QueueExecutor: TaskExecutor {
        private let queue = DispatchQueue(label: "ingot.tests.waiting")

        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }
}

extension Trait where Self == WaitsOffThePool {
    /// Each test case on a thread of its own (``WaitsOffThePool``).
    static var waitsOffThePool: Self { WaitsOffThePool() }
}
