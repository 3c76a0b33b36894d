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
    // nonisolated(unsafe) for the deinit alone, which disposes of it on the bus
    // thread; everything else that touches it is bus-actor code.
    nonisolated(unsafe) private var source: OpaquePointer?

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

    // Not an isolated deinit: a timer per publication would pay the runtime's
    // executor checks on every release. Released on the bus thread (the usual
    // case) it disposes of its source at once; anywhere else it sends the
    // source there, and until it arrives the action may still run once (the
    // action, not the timer, is what the source holds, so nothing is freed
    // under it).
    deinit {
        guard let source else { return }
        if BusLoop.shared.isLoopThread {
            sd_event_source_disable_unref(source)
        } else {
            let handle = EventSource(source)
            Task { @BusActor in handle.dispose() }
        }
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

/// An sd-event source on its way to the bus thread to be disposed of. Sendable
/// because nothing reads it on the way: only `dispose()`, on the bus thread,
/// touches the pointer.
private struct EventSource: @unchecked Sendable {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) {
        self.pointer = pointer
    }

    @BusActor func dispose() {
        sd_event_source_disable_unref(pointer)
    }
}
