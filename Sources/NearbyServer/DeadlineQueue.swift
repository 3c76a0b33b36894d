/// Keys due at a time, cheapest-first (a binary min-heap), so a sweep touches
/// only what is due instead of everything held.
///
/// A key is entered at most once per earliest deadline: scheduling it later
/// than it already is does nothing. The owner checks each key it pops against
/// its own state and schedules it again when its real deadline moved on;
/// that keeps the heap at about one entry per live key even though edges are
/// refreshed many times. A cancelled key, or one moved earlier, leaves a stale
/// entry behind; the heap is rebuilt without them once they outnumber the live
/// ones, so it stays within twice the keys scheduled.
struct DeadlineQueue<Key: Hashable> {
    private var heap: [(deadline: UInt64, key: Key)] = []
    private var scheduled: [Key: UInt64] = [:]

    var isEmpty: Bool { heap.isEmpty }

    /// Entries held, stale ones included: what the queue costs in memory.
    var count: Int { heap.count }

    mutating func schedule(_ key: Key, at deadline: UInt64) {
        if let earlier = scheduled[key], earlier <= deadline { return }
        scheduled[key] = deadline
        heap.append((deadline, key))
        siftUp(heap.count - 1)
        compactIfMostlyStale()
    }

    /// Forgets `key`'s deadline, if it has one: it is not handed out.
    mutating func cancel(_ key: Key) {
        guard scheduled.removeValue(forKey: key) != nil else { return }
        compactIfMostlyStale()
    }

    /// Removes and returns every key whose deadline is at or before `now`.
    mutating func popDue(now: UInt64) -> [Key] {
        var due: [Key] = []
        while let first = heap.first, first.deadline <= now {
            let last = heap.removeLast()
            if !heap.isEmpty {
                heap[0] = last
                siftDown(0)
            }
            // Only the entry for the earliest deadline counts; later ones are stale.
            if scheduled[first.key] == first.deadline {
                scheduled[first.key] = nil
                due.append(first.key)
            }
        }
        compactIfMostlyStale()
        return due
    }

    /// Drops the stale entries once they are more than half the heap: deleted
    /// objects would otherwise stay until their deadline, up to a day away.
    private mutating func compactIfMostlyStale() {
        guard heap.count > 2 * scheduled.count else { return }
        let scheduled = self.scheduled
        var kept = Set<Key>()
        // Filtered in place rather than rebuilt from the dictionary, so keys
        // due at the same time still come out in an order hashing does not change.
        heap.removeAll { entry in scheduled[entry.key] != entry.deadline || !kept.insert(entry.key).inserted }
        for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) {
            siftDown(index)
        }
    }

    private mutating func siftUp(_ start: Int) {
        var child = start
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { return }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private mutating func siftDown(_ start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            let right = left + 1
            var smallest = parent
            if left < heap.count, heap[left].deadline < heap[smallest].deadline { smallest = left }
            if right < heap.count, heap[right].deadline < heap[smallest].deadline { smallest = right }
            guard smallest != parent else { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }
}
