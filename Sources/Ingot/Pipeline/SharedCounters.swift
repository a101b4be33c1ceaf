import Synchronization

/// The run's committed counters, readable from any queue (the progress timer, `stop()` callers).
final class SharedCounters: Sendable {
    let value = Mutex(RunCounters())
}
