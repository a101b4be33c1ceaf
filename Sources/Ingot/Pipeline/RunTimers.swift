import Dispatch

extension Duration {
    /// The duration in seconds, as a `Double` (log values, benchmarks).
    package var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// The clock behind a run's timers: the writer's commit interval, the progress ticks and metrics
/// updates, and a shared run's lease renewals. ``DispatchTimers`` (real time) by default; a test
/// gives a clock it advances itself (``RunOptions/timers``), so no test sleeps to see a timer fire.
package protocol RunTimers: Sendable {
    /// Seconds on this clock (monotonic, from an arbitrary start).
    func now() -> Double
    /// Calls `body` on `queue` every `interval` seconds, the first time `interval` seconds from
    /// now, until the returned timer is cancelled.
    func every(_ interval: Double, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void) -> any RunTimer
    /// Calls `body` on `queue` once, `delay` seconds from now.
    func after(_ delay: Double, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void)
}

/// A repeating timer of ``RunTimers``.
package protocol RunTimer: Sendable {
    /// Stops it: `body` is not called again once its queue has run what it was given.
    func cancel()
}

/// Real time: Dispatch's monotonic clock and timer sources.
package struct DispatchTimers: RunTimers {
    package init() {}

    package func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

    package func every(_ interval: Double, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void) -> any RunTimer {
        let source = DispatchSource.makeTimerSource(queue: queue)
        source.schedule(deadline: .now() + interval, repeating: interval)
        source.setEventHandler(handler: body)
        source.resume()
        return Source(source: source)
    }

    package func after(_ delay: Double, on queue: DispatchQueue, _ body: @escaping @Sendable () -> Void) {
        queue.asyncAfter(deadline: .now() + delay, execute: body)
    }

    private struct Source: RunTimer, @unchecked Sendable {  // DispatchSource is thread-safe; the type is not marked so
        let source: any DispatchSourceTimer
        func cancel() { source.cancel() }
    }
}
