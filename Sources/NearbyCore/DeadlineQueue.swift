import HeapModule

/// Keys due at a time, earliest first (swift-collections' `Heap`), so a sweep
/// touches only what is due instead of everything held: the server's matcher
/// (edges, tokens, publications and subscriptions that expire) and the
/// daemon's publications and subscriptions with a TTL keep their deadlines
/// here.
///
/// A key is entered at most once per earliest deadline: scheduling it later
/// than it already is does nothing. The owner checks each key it pops against
/// its own state and schedules it again when its real deadline moved on;
/// that keeps the heap at about one entry per live key even though edges are
/// refreshed many times. A cancelled key, or one moved earlier, leaves a stale
/// entry behind; the heap is rebuilt without them once they outnumber the live
/// ones, so it stays within twice the keys scheduled. Each entry carries the
/// serial number of the scheduling that made it, and only the key's latest is
/// live: an entry left by a cancelled key is stale even when the key comes
/// back with the same deadline, so one look-up per entry tells them apart.
///
/// Inlinable: its users' keys (the daemon's object ids, the matcher's
/// deadlines) are hashed and compared on every Publish and token heard, and
/// only a copy specialized for the key type does that without looking up
/// the type's witnesses at each step.
public struct DeadlineQueue<Key: Hashable> {
    @usableFromInline
    struct Entry: Comparable {
        @usableFromInline let deadline: UInt64
        @usableFromInline let serial: UInt64
        @usableFromInline let key: Key

        @inlinable
        init(deadline: UInt64, serial: UInt64, key: Key) {
            self.deadline = deadline
            self.serial = serial
            self.key = key
        }

        @inlinable
        static func < (lhs: Entry, rhs: Entry) -> Bool { lhs.deadline < rhs.deadline }
    }

    @usableFromInline var heap = Heap<Entry>()
    /// Each key's deadline, and the serial number of its live entry.
    @usableFromInline var scheduled: [Key: (deadline: UInt64, serial: UInt64)] = [:]
    @usableFromInline var lastSerial: UInt64 = 0

    @inlinable
    public init() {}

    @inlinable
    public var isEmpty: Bool { heap.isEmpty }

    /// Entries held, stale ones included: what the queue costs in memory.
    @inlinable
    public var count: Int { heap.count }

    /// The earliest deadline held; possibly of a key cancelled since, which
    /// ``popDue(now:)`` then skips: a timer armed for it fires early, not late.
    @inlinable
    public var nextDeadline: UInt64? { heap.min?.deadline }

    /// Gives `key` the deadline `deadline`, unless it already has an earlier one.
    @inlinable
    public mutating func schedule(_ key: Key, at deadline: UInt64) {
        lastSerial += 1
        // Entered first and put back in the rare case that it had an earlier
        // deadline: a new key, as nearly always, is hashed once, not twice.
        if let earlier = scheduled.updateValue((deadline, lastSerial), forKey: key), earlier.deadline <= deadline {
            scheduled[key] = earlier
            return
        }
        heap.insert(Entry(deadline: deadline, serial: lastSerial, key: key))
        compactIfMostlyStale()
    }

    /// Forgets `key`'s deadline, if it has one: it is not handed out.
    @inlinable
    public mutating func cancel(_ key: Key) {
        guard scheduled.removeValue(forKey: key) != nil else { return }
        compactIfMostlyStale()
    }

    /// Removes and returns every key whose deadline is at or before `now`.
    @inlinable
    public mutating func popDue(now: UInt64) -> [Key] {
        var due: [Key] = []
        while let first = heap.min, first.deadline <= now {
            _ = heap.removeMin()
            // Only the key's live entry counts; the others are stale.
            if let index = scheduled.index(forKey: first.key), scheduled.values[index].serial == first.serial {
                scheduled.remove(at: index)
                due.append(first.key)
            }
        }
        compactIfMostlyStale()
        return due
    }

    /// Drops the stale entries once they are more than half the heap: deleted
    /// objects would otherwise stay until their deadline, up to a day away.
    @inlinable
    mutating func compactIfMostlyStale() {
        guard heap.count > 2 * scheduled.count else { return }
        let scheduled = self.scheduled
        heap.removeAll { entry in scheduled[entry.key]?.serial != entry.serial }
    }
}

/// Sendable with its keys: the daemon's core holds one in a Sendable value.
extension DeadlineQueue: Sendable where Key: Sendable {}
extension DeadlineQueue.Entry: Sendable where Key: Sendable {}
