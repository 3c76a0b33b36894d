import NearbyCore

/// When each publication and subscription with a TTL ends, by id, on the
/// service's clock (milliseconds since the epoch): one timer for the
/// earliest deadline, cheaper than one per object. A static publication is
/// not ended but renewed, an hour before its day is over (the server holds a
/// publication a day at most).
public struct Expiries: Sendable {
    /// How long before its expiry a renewed publication is renewed.
    @_spi(Testing) public static let renewalMarginMs: UInt64 = 3_600 * 1000

    /// What is due.
    public enum Due: Equatable, Sendable {
        /// Its TTL ran out: it ends, `Expired` first.
        case expire(String)
        /// A static publication's day is nearly over: it is given another.
        case renew(String)
    }

    private var queue = DeadlineQueue<String>()
    private var renewed: Set<String> = []
    /// The deadline the owner's timer is armed for (`.max`: none).
    private var armedFor = UInt64.max

    public init() {}

    /// Schedules `id` to expire at `expiresAtMs`, or, if `renewed`, to be
    /// renewed ``renewalMarginMs`` before. Returns the deadline to arm the
    /// timer for when it is now the earliest, nil when the timer armed
    /// already comes first.
    public mutating func schedule(_ id: String, expiresAtMs: UInt64, renewed: Bool = false) -> UInt64? {
        let deadline = renewed ? expiresAtMs - min(expiresAtMs, Self.renewalMarginMs) : expiresAtMs
        // Only static publications are renewed: most daemons hold none, and a Publish hashes nothing here.
        if renewed { self.renewed.insert(id) } else if !self.renewed.isEmpty { self.renewed.remove(id) }
        queue.schedule(id, at: deadline)
        guard deadline < armedFor else { return nil }
        armedFor = deadline
        return deadline
    }

    /// `id` ended before its time: it is not due.
    public mutating func cancel(_ id: String) {
        queue.cancel(id)
        if !renewed.isEmpty { renewed.remove(id) }
    }

    /// The timer fired: what is due at `nowMs`, in deadline order. The
    /// owner ends each due to expire, gives each due to be renewed its new
    /// expiry (``schedule(_:expiresAtMs:renewed:)``), and then arms the
    /// timer for ``rearm()``.
    public mutating func due(nowMs: UInt64) -> [Due] {
        armedFor = .max
        return queue.popDue(now: nowMs).map { id in
            renewed.remove(id) != nil ? Due.renew(id) : Due.expire(id)
        }
    }

    /// The deadline to arm the timer for after what was due was handled, the
    /// renewals scheduled meanwhile included; nil: nothing is scheduled.
    public mutating func rearm() -> UInt64? {
        armedFor = queue.nextDeadline ?? .max
        return queue.nextDeadline
    }
}
