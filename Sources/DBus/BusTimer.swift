import CSystemd
import Glibc

/// A one-shot timer on the bus thread's event loop: `action` runs on the bus
/// actor once `delay` has passed, unless the timer is cancelled (or released)
/// first. Cheaper than a sleeping task: no thread is woken to arm it, and
/// sd-event keeps thousands in a priority queue.
///
/// The action is held by the event source, not by the timer, and let go as
/// soon as it has run or the timer is cancelled: an action that captures the
/// timer's owner makes no lasting cycle.
@BusActor
public final class BusTimer {
    private var source: OpaquePointer?

    public init(after delay: Duration, _ action: @escaping @BusActor () -> Void) {
        var event: OpaquePointer?
        guard sd_event_default(&event) >= 0 else { preconditionFailure("the bus thread has no event loop") }
        defer { sd_event_unref(event) }
        let microseconds = max(0, delay.components.seconds * 1_000_000 + delay.components.attoseconds / 1_000_000_000_000)
        let fired: sd_event_time_handler_t = { _, _, userdata in
            BusActor.assumeIsolated(userdata) { userdata in
                Unmanaged<TimerAction>.fromOpaque(userdata!).takeUnretainedValue().fire()
            }
            return 0
        }
        let box = TimerAction(action)
        var source: OpaquePointer?
        // One millisecond of slack lets sd-event coalesce wake-ups.
        let result = sd_event_add_time_relative(event, &source, CLOCK_MONOTONIC, UInt64(microseconds), 1000, fired,
                                                Unmanaged.passRetained(box).toOpaque())
        precondition(result >= 0, "sd_event_add_time_relative failed: \(result)")
        // The source owns the action from here: released when the source goes.
        sd_event_source_set_destroy_callback(source) { userdata in
            Unmanaged<TimerAction>.fromOpaque(userdata!).release()
        }
        self.source = source
    }

    // Released off the bus thread, the deinit waits for it; the action may run
    // once meanwhile (the source holds the action, not the timer, so nothing
    // is freed under it).
    isolated deinit {
        if let source { sd_event_source_disable_unref(source) }
    }

    /// Stops the timer; the action will not run, and is let go.
    public func cancel() {
        if let source { sd_event_source_disable_unref(source) }
        source = nil
    }
}

/// What a timer's event source holds: the action, dropped once it has run
/// (one-shot) so that what it captured is not kept by a spent timer.
@BusActor
private final class TimerAction {
    private var run: (@BusActor () -> Void)?

    init(_ run: @escaping @BusActor () -> Void) {
        self.run = run
    }

    func fire() {
        let action = run
        run = nil
        action?()
    }
}

extension BusTimer {
    /// Suspends the calling task for `delay` on the bus thread's event loop.
    /// Unlike `Task.sleep`, which leaves the bus actor for a dispatch timer and
    /// comes back through the bus thread's eventfd, no other thread takes
    /// part: for a bus-actor loop that pauses often (a server link's rounds).
    /// Throws `CancellationError` as soon as the task is cancelled.
    public static func sleep(for delay: Duration) async throws {
        let sleeper = Sleeper()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { sleeper.start(delay, $0) }
        } onCancel: {
            Task { @BusActor in sleeper.cancel() }
        }
    }
}

/// One ``BusTimer/sleep(for:)``: its timer and its waiting task, ended by
/// whichever comes first, the timer or the task's cancellation.
@BusActor
private final class Sleeper {
    private var timer: BusTimer?
    private var waiting: CheckedContinuation<Void, any Error>?
    private var cancelled = false

    func start(_ delay: Duration, _ continuation: CheckedContinuation<Void, any Error>) {
        // Cancelled before it began: the cancellation's hop came first.
        guard !cancelled else { return continuation.resume(throwing: CancellationError()) }
        waiting = continuation
        timer = BusTimer(after: delay) { [self] in end(nil) }
    }

    func cancel() {
        cancelled = true
        end(CancellationError())
    }

    private func end(_ error: CancellationError?) {
        timer?.cancel()
        timer = nil
        guard let waiting else { return }
        self.waiting = nil
        if let error { waiting.resume(throwing: error) } else { waiting.resume() }
    }
}
