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
