import DBus
import HeapModule

/// Publications and subscriptions with a TTL, earliest expiry first, behind the
/// daemon's one expiry timer. An object that ends early is not searched for and
/// taken out: it is skipped when its turn comes, and all such entries are
/// dropped in one pass once they are more than half the queue. Nothing is
/// hashed: making and ending objects is the daemon's hot path.
@BusActor
struct ExpiryQueue {
    enum Entry {
        case publication(PublicationObject)
        case subscription(SubscriptionObject)

        @BusActor var hasEnded: Bool {
            switch self {
            case .publication(let object): object.hasEnded
            case .subscription(let object): object.hasEnded
            }
        }

        fileprivate nonisolated var identity: ObjectIdentifier {
            switch self {
            case .publication(let object): ObjectIdentifier(object)
            case .subscription(let object): ObjectIdentifier(object)
            }
        }
    }

    private struct Item: Comparable {
        let expiresAt: UInt64
        let entry: Entry

        static func < (lhs: Item, rhs: Item) -> Bool { lhs.expiresAt < rhs.expiresAt }

        static func == (lhs: Item, rhs: Item) -> Bool {
            lhs.expiresAt == rhs.expiresAt && lhs.entry.identity == rhs.entry.identity
        }
    }

    private var heap = Heap<Item>()

    /// The earliest expiry held (possibly of an object that has ended since).
    var nextExpiry: UInt64? { heap.min?.expiresAt }

    /// Entries held, ended ones included: what the queue costs in memory.
    var count: Int { heap.count }

    mutating func add(_ entry: Entry, expiresAt: UInt64) {
        heap.insert(Item(expiresAt: expiresAt, entry: entry))
    }

    /// Drops the entries of ended objects once they must be most of the queue:
    /// when it holds more than twice the `live` objects there are.
    mutating func dropEnded(live: Int) {
        guard heap.count > 64, heap.count > 2 * live else { return }
        heap.removeAll { $0.entry.hasEnded }
    }

    /// Takes out every entry due at `now`, and returns those whose objects live.
    mutating func popDue(now: UInt64) -> [Entry] {
        var due: [Entry] = []
        while let first = heap.min, first.expiresAt <= now {
            _ = heap.removeMin()
            if !first.entry.hasEnded { due.append(first.entry) }
        }
        return due
    }
}
