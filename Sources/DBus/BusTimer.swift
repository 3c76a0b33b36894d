import CSystemd
import Glibc

/// A one-shot timer on the bus thread's event loop: `action` runs on the bus
/// actor once `delay` has passed, unless the timer is cancelled (or released)
/// first. Cheaper than a sleeping task: no thread is woken to arm it, and
/// sd-event keeps thousands in a priority queue.
@BusActor
public final class BusTimer {
    // nonisolated(unsafe) for the deinit alone, which disposes of it on the bus
    // thread; everything else that touches it is bus-actor code.
    nonisolated(unsafe) private var source: OpaquePointer?
    private let action: @BusActor () -> Void

    public init(after delay: Duration, _ action: @escaping @BusActor () -> Void) {
        self.action = action
        var event: OpaquePointer?
        guard sd_event_default(&event) >= 0 else { preconditionFailure("the bus thread has no event loop") }
        defer { sd_event_unref(event) }
        let microseconds = max(0, delay.components.seconds * 1_000_000 + delay.components.attoseconds / 1_000_000_000_000)
        let fired: sd_event_time_handler_t = { _, _, userdata in
            BusActor.assumeIsolated(userdata) { userdata in
                Unmanaged<BusTimer>.fromOpaque(userdata!).takeUnretainedValue().fire()
            }
            return 0
        }
        var source: OpaquePointer?
        // One millisecond of slack lets sd-event coalesce wake-ups.
        let result = sd_event_add_time_relative(event, &source, CLOCK_MONOTONIC, UInt64(microseconds), 1000, fired,
                                                Unmanaged.passUnretained(self).toOpaque())
        precondition(result >= 0, "sd_event_add_time_relative failed: \(result)")
        self.source = source
    }

    // Not an isolated deinit: a timer per publication would pay the runtime's
    // executor checks on every release. Released on the bus thread (the usual
    // case) it disposes of its source at once, anywhere else it sends it there.
    deinit {
        guard let source else { return }
        if BusLoop.shared.isLoopThread {
            sd_event_source_disable_unref(source)
        } else {
            let handle = EventSource(source)
            Task { @BusActor in handle.dispose() }
        }
    }

    /// Stops the timer; the action will not run.
    public func cancel() {
        if let source { sd_event_source_disable_unref(source) }
        source = nil
    }

    private func fire() {
        guard source != nil else { return }
        cancel()
        action()
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
