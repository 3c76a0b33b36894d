import NearbyCore
import Testing

@Suite struct DeadlineQueueTests {
    @Test func popsInDeadlineOrderOnlyWhatIsDue() {
        var queue = DeadlineQueue<String>()
        queue.schedule("c", at: 30)
        queue.schedule("a", at: 10)
        queue.schedule("b", at: 20)
        // Later than scheduled: kept at the earlier time.
        queue.schedule("a", at: 50)
        // Earlier: moves up.
        queue.schedule("c", at: 5)
        #expect(queue.popDue(now: 4) == [])
        #expect(queue.popDue(now: 20) == ["c", "a", "b"])
        // The stale entry for c at 30 is not handed out again.
        #expect(queue.popDue(now: 100) == [])
        #expect(queue.isEmpty)
    }

    @Test func cancelledKeysAreNotHandedOut() {
        var queue = DeadlineQueue<String>()
        queue.schedule("a", at: 10)
        queue.schedule("b", at: 20)
        queue.schedule("c", at: 30)
        queue.cancel("b")
        queue.cancel("unknown")
        #expect(queue.popDue(now: 100) == ["a", "c"])
        // Cancelled and scheduled again: due at its new time.
        queue.schedule("b", at: 200)
        queue.cancel("b")
        queue.schedule("b", at: 300)
        #expect(queue.popDue(now: 250) == [])
        #expect(queue.popDue(now: 300) == ["b"])
        #expect(queue.isEmpty)
    }

    @Test func aKeyCancelledAndScheduledAgainForTheSameTimeIsDueOnce() {
        var queue = DeadlineQueue<String>()
        queue.schedule("live", at: 50)
        for _ in 0..<1000 {
            queue.schedule("a", at: 10)
            queue.cancel("a")
        }
        queue.schedule("a", at: 10)
        #expect(queue.count <= 4, "the stale entries of the same time are dropped too: \(queue.count) held for 2 keys")
        #expect(queue.popDue(now: 10) == ["a"])
        #expect(queue.popDue(now: 100) == ["live"])
        #expect(queue.isEmpty)
    }

    /// Random schedules (earlier and later), cancels and sweeps against a
    /// dictionary: the same keys come due, in deadline order, and stale
    /// entries never outnumber the live ones.
    @Test func agreesWithAModelAndDropsStaleEntries() throws {
        var generator = SplitMix64(seed: 0x6e65_6172_6279)
        var queue = DeadlineQueue<Int>()
        var model: [Int: UInt64] = [:]
        var now: UInt64 = 0
        for step in 0..<20_000 {
            let key = Int.random(in: 0..<200, using: &generator)
            switch Int.random(in: 0..<10, using: &generator) {
            case 0..<5:
                let deadline = now + UInt64.random(in: 1...1000, using: &generator)
                queue.schedule(key, at: deadline)
                model[key] = min(model[key] ?? .max, deadline)
            case 5..<8:
                queue.cancel(key)
                model[key] = nil
            default:
                now += UInt64.random(in: 0...50, using: &generator)
                let due = queue.popDue(now: now)
                let deadlines = due.map { model[$0] }
                try #require(Set(due) == Set(model.filter { $0.value <= now }.keys), "step \(step)")
                try #require(due.count == Set(due).count, "step \(step)")
                try #require(deadlines == deadlines.sorted { $0! < $1! }, "step \(step)")
                for key in due { model[key] = nil }
            }
            try #require(queue.count <= 2 * model.count, "step \(step): \(queue.count) entries for \(model.count) keys")
        }
    }
}
