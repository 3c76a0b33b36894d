import CSystemd
import Glibc

/// Drives one connection from the bus thread's event loop, as
/// `sd_bus_attach_event` does, but processes the messages already received in
/// one go (up to a batch, within a time budget) instead of one per loop
/// iteration: under load that saves a trip through epoll and sd-event's
/// bookkeeping per message.
@BusActor
final class BusPump {
    private let bus: OpaquePointer
    private var io: OpaquePointer?
    private var timer: OpaquePointer?
    /// Told how long the steps that read without dispatching took, when the
    /// connection paces oversized calls.
    var pacer: OversizedCallPacer?
    /// Set when a step hands a message to a handler: the pacer's filter (calls
    /// and signals) or a reply's callback (``BusConnection``'s calls). Steps
    /// run one at a time on the bus thread, whichever connection they serve.
    static var dispatched = false

    /// Steps of sd-bus (a message dispatched, or part of one read) before other
    /// event sources (Swift jobs, timers) get a turn, unless
    /// ``budget`` runs out first.
    private static let batch = 64
    /// How long one turn may take: a large message is read in many steps,
    /// each of which counts, and a turn of 64 of them held everyone else's
    /// answers back (`nearby-bench isolation`: 30 MiB calls).
    private static let budget: Duration = .microseconds(500)

    init(_ bus: OpaquePointer) throws(DBusError) {
        self.bus = bus
        var event: OpaquePointer?
        try check(sd_event_default(&event), "opening the bus thread's event loop")
        defer { sd_event_unref(event) }
        let userdata = Unmanaged.passUnretained(self).toOpaque()
        let ready: sd_event_io_handler_t = { _, _, _, userdata in
            BusActor.assumeIsolated(userdata) { userdata in Unmanaged<BusPump>.fromOpaque(userdata!).takeUnretainedValue().process() }
            return 0
        }
        let due: sd_event_time_handler_t = { _, _, userdata in
            BusActor.assumeIsolated(userdata) { userdata in Unmanaged<BusPump>.fromOpaque(userdata!).takeUnretainedValue().process() }
            return 0
        }
        let prepare: sd_event_handler_t = { _, userdata in
            BusActor.assumeIsolated(userdata) { userdata in Unmanaged<BusPump>.fromOpaque(userdata!).takeUnretainedValue().prepare() }
            return 0
        }
        // The loop watches a duplicate of the socket that it owns and closes only
        // after taking it out of epoll. sd-bus closes its own descriptor when the
        // connection drops, before this pump can stop; if a child being spawned
        // at that moment still held the socket, epoll would keep reporting it for
        // a source already freed.
        let watched = fcntl(sd_bus_get_fd(bus), F_DUPFD_CLOEXEC, 3)
        guard watched >= 0 else { throw .system(-errno, "watching the bus socket") }
        let added = sd_event_add_io(event, &io, watched, UInt32(EPOLLIN.rawValue), ready, userdata)
        guard added >= 0 else {
            close(watched)
            throw .system(added, "watching the bus socket")
        }
        sd_event_source_set_io_fd_own(io, 1)
        try check(sd_event_source_set_prepare(io, prepare), "watching the bus socket")
        try check(sd_event_add_time(event, &timer, CLOCK_MONOTONIC, UInt64.max, 0, due, userdata), "arming the bus timer")
        try check(sd_event_source_set_enabled(timer, Int32(SD_EVENT_OFF)), "arming the bus timer")
    }

    isolated deinit {
        stop()
    }

    func stop() {
        if let io { sd_event_source_disable_unref(io) }
        if let timer { sd_event_source_disable_unref(timer) }
        io = nil
        timer = nil
    }

    /// Before each wait: what the socket should be watched for, and when sd-bus
    /// next needs to run (a call timing out, or messages already read: at once).
    private func prepare() {
        let events = sd_bus_get_events(bus)
        guard events >= 0 else {
            stop()
            return
        }
        sd_event_source_set_io_events(io, UInt32(events))
        var deadline: UInt64 = 0
        if sd_bus_get_timeout(bus, &deadline) >= 0, deadline != UInt64.max {
            sd_event_source_set_time(timer, deadline)
            sd_event_source_set_enabled(timer, Int32(SD_EVENT_ONESHOT))
        } else {
            sd_event_source_set_enabled(timer, Int32(SD_EVENT_OFF))
        }
    }

    private func process() {
        var started = ContinuousClock.now
        let deadline = started + Self.budget
        var steps = 0
        // The budget is checked after each step, not before the first (the
        // deadline was just read): reading the clock costs about what a step
        // of a small call's work does.
        repeat {
            // A step with messages waiting to be written may spend itself
            // writing them (sd-bus writes before it reads): not charged, which
            // errs only in the sender's favour.
            var writing = false
            if pacer != nil {
                Self.dispatched = false
                var queued: UInt64 = 0
                writing = sd_bus_get_n_queued_write(bus, &queued) >= 0 && queued > 0
            }
            let result = sd_bus_process(bus, nil)
            if result < 0 {
                // Disconnected: sd-bus has delivered its Disconnected signal; nothing more will come.
                stop()
                return
            }
            if result == 0 { return }
            steps += 1
            let now = ContinuousClock.now
            // A step that dispatched nothing read part of a message: its time
            // goes to the message it was reading.
            if let pacer, !Self.dispatched, !writing {
                pacer.unbilled += now - started
                pacer.reads += 1
            }
            started = now
            if now >= deadline { return }
        } while steps < Self.batch
    }
}
