import CSystemd
import Glibc

/// What reading oversized messages may cost a service's bus thread.
///
/// dbus-daemon queues a client's calls to a service whole, up to its
/// `max_message_size` (32 MiB on Debian's system bus), and a service cannot
/// decline to read what is queued: every other caller's message waits behind
/// it. A client that sends one such call after another, each as soon as the
/// last is answered, keeps that queue full. So the time spent reading oversized
/// messages is paced: a message that took many reads and ``oversized`` or
/// more to read (3 MiB or more) is charged to a budget that refills at ``share`` of the
/// thread's time; a method call that finds the budget spent is not run but
/// refused, and its refusal is held back until the budget would have covered
/// it. A caller that waits for its answers, as every synchronous D-Bus client
/// does, is slowed to what the budget allows, and fewer of its bytes stand in
/// the queue ahead of everyone else.
public struct OversizedCallBudget: Sendable, Equatable {
    /// A message is oversized when reading it took at least ``oversizedReads``
    /// reads of the socket that did not complete it and this much time in them.
    /// The bus daemon writes at most its socket's buffer (about 208 KiB on
    /// Linux) at a time, so 16 reads are 3 MiB or more, where the largest call
    /// a service of this project accepts is a few hundred KiB; the time keeps
    /// a message that a busy machine merely read slowly from counting.
    public static let oversized: Duration = .milliseconds(1)
    public static let oversizedReads = 16

    /// The share of the bus thread's time that reading oversized messages may
    /// take, 0 < share ≤ 1.
    public var share: Double
    /// Refused calls whose answers may wait at once; beyond it, refusals are
    /// sent at once (each held refusal is one small message, not the call).
    public var maxHeld: Int

    public init(share: Double, maxHeld: Int = 1024) {
        precondition(share > 0 && share <= 1, "share must be in 0 < share ≤ 1")
        self.share = share
        self.maxHeld = maxHeld
    }
}

/// The budget's account: a token bucket of reading time that refills at the
/// budget's share and holds up to one second's worth.
struct ReadingLedger {
    let share: Double
    /// One second's refill: enough for a burst of the oversized messages the
    /// budget allows each second, so that a rare one never waits.
    private var capacity: Duration { .seconds(1) * share }
    private var balance: Duration
    private var asOf: ContinuousClock.Instant

    init(share: Double, now: ContinuousClock.Instant) {
        self.share = share
        balance = .seconds(1) * share
        asOf = now
    }

    /// Charges a message that took `cost` to read. Returns nil when the budget
    /// covered it (whatever it costs, a message that finds the budget unspent
    /// is let through), or when a call refused now should be answered: once
    /// the debt it leaves would have been repaid.
    mutating func charge(_ cost: Duration, at now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        if now > asOf {
            balance = min(capacity, balance + (now - asOf) * share)
            asOf = now
        }
        let covered = balance >= .zero
        balance -= cost
        if covered { return nil }
        return now + (.zero - balance) / share
    }
}

/// Paces the oversized messages one connection receives (``OversizedCallBudget``).
/// ``BusPump`` tells it how long the steps that read without completing a
/// message took; its filter, which sd-bus runs on each message before
/// dispatching it, charges them to that message.
@BusActor
final class OversizedCallPacer {
    /// Reading time not yet charged: the steps since the last message that
    /// read part of one and dispatched nothing.
    var unbilled: Duration = .zero
    /// How many steps that was.
    var reads = 0

    private var ledger: ReadingLedger
    private let maxHeld: Int
    private let refusal: DBusError
    private var slot: OpaquePointer?
    /// Refusals waiting to be sent, in the order they are due (each is due
    /// later than the one before: the debt only grows while calls are refused).
    private var held: [(due: ContinuousClock.Instant, reply: OpaquePointer)] = []
    private var first = 0
    private var timer: BusTimer?

    init(_ bus: OpaquePointer, budget: OversizedCallBudget, refusal: DBusError) throws(DBusError) {
        ledger = ReadingLedger(share: budget.share, now: .now)
        maxHeld = budget.maxHeld
        self.refusal = refusal
        let filter: sd_bus_message_handler_t = { message, userdata, _ in
            BusActor.assumeIsolated((message, userdata)) { message, userdata in
                Unmanaged<OversizedCallPacer>.fromOpaque(userdata!).takeUnretainedValue().filter(message!)
            }
        }
        try check(sd_bus_add_filter(bus, &slot, filter, Unmanaged.passUnretained(self).toOpaque()), "pacing oversized calls")
    }

    isolated deinit {
        stop()
    }

    /// Lets go of the filter and of the refusals not yet sent (the connection is closing).
    func stop() {
        if let slot { sd_bus_slot_unref(slot) }
        slot = nil
        timer?.cancel()
        timer = nil
        for index in first..<held.count { sd_bus_message_unref(held[index].reply) }
        held.removeAll()
        first = 0
    }

    /// 0: dispatch the message as usual; 1: it was taken care of here.
    private func filter(_ message: OpaquePointer) -> Int32 {
        BusPump.dispatched = true
        let cost = unbilled
        let count = reads
        unbilled = .zero
        reads = 0
        guard count >= OversizedCallBudget.oversizedReads, cost >= OversizedCallBudget.oversized else { return 0 }
        let now = ContinuousClock.now
        guard let due = ledger.charge(cost, at: now) else { return 0 }
        // Signals and replies are charged too, but there is no answer to hold.
        guard sd_bus_message_is_method_call(message, nil, nil) > 0 else { return 0 }
        guard sd_bus_message_get_expect_reply(message) > 0 else { return 1 }
        var error = sd_bus_error()
        defer { sd_bus_error_free(&error) }
        _ = refusal.store(in: &error)
        var reply: OpaquePointer?
        guard sd_bus_message_new_method_error(message, &reply, &error) >= 0, let reply else { return 1 }
        if held.count - first >= maxHeld {
            sd_bus_send(nil, reply, nil)
            sd_bus_message_unref(reply)
            return 1
        }
        held.append((due, reply))
        if timer == nil { arm(now: now) }
        return 1
    }

    private func arm(now: ContinuousClock.Instant) {
        guard first < held.count else {
            held.removeAll()
            first = 0
            timer = nil
            return
        }
        timer = BusTimer(after: held[first].due - now) { [weak self] in self?.sendDue() }
    }

    private func sendDue() {
        let now = ContinuousClock.now
        while first < held.count, held[first].due <= now {
            sd_bus_send(nil, held[first].reply, nil)
            sd_bus_message_unref(held[first].reply)
            first += 1
        }
        if first > 64, first * 2 > held.count {
            held.removeFirst(first)
            first = 0
        }
        arm(now: now)
    }
}
