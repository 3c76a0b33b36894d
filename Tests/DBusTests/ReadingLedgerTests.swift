@testable import DBus
import Testing

/// The budget for reading oversized messages, with time moved by hand.
@Suite(.timeLimit(.minutes(1))) struct ReadingLedgerTests {
    let start = ContinuousClock.now

    /// Shares multiply durations in floating point: equal to a microsecond.
    func near(_ due: ContinuousClock.Instant?, _ expected: ContinuousClock.Instant) -> Bool {
        guard let due else { return false }
        return due - expected < .microseconds(1) && expected - due < .microseconds(1)
    }

    @Test func aMessageThatFindsTheBudgetUnspentIsLetThroughWhateverItCosts() {
        var ledger = ReadingLedger(share: 0.02, now: start)
        // The budget holds one second's share, 20 ms: a 30 ms message still goes through.
        #expect(ledger.charge(.milliseconds(30), at: start) == nil)
        // Now 10 ms in debt: the next is refused, answered once 40 ms of debt is repaid at 20 ms/s.
        #expect(near(ledger.charge(.milliseconds(30), at: start), start + .seconds(2)))
    }

    @Test func refusalsAreDueEachLaterThanTheOneBefore() {
        var ledger = ReadingLedger(share: 0.02, now: start)
        _ = ledger.charge(.milliseconds(25), at: start)
        var last = start
        for step in 1...10 {
            let now = start + .milliseconds(10 * step)
            let due = ledger.charge(.milliseconds(5), at: now)
            #expect(due.map { $0 > last && $0 > now } == true)
            last = due ?? last
        }
    }

    @Test func theBudgetRefillsAtItsShareUpToOneSecondsWorth() {
        var ledger = ReadingLedger(share: 0.02, now: start)
        _ = ledger.charge(.milliseconds(40), at: start)  // 20 ms in debt
        // A second later 20 ms came back: the debt is repaid, so the next goes through.
        #expect(ledger.charge(.milliseconds(5), at: start + .seconds(1)) == nil)
        // An hour idle refills no more than one second's share, 20 ms: a 21 ms message
        // goes through, and the next finds the budget 1 ms in debt.
        let later = start + .seconds(3600)
        #expect(ledger.charge(.milliseconds(21), at: later) == nil)
        #expect(near(ledger.charge(.milliseconds(1), at: later), later + .milliseconds(100)))
    }

    @Test func aWholeShareIsNeverInDebtForLong() {
        var ledger = ReadingLedger(share: 1, now: start)
        // Reading all the time, one 100 ms message every 100 ms, never refuses.
        for step in 0..<100 {
            #expect(ledger.charge(.milliseconds(100), at: start + .milliseconds(100 * step)) == nil)
        }
    }
}
