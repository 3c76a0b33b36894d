import DaemonCore
import Testing

/// TTLs by hand: what is due when, what the one timer is armed for, and the
/// static publications renewed instead of ended.
struct ExpiriesTests {
    private let start: UInt64 = 1_800_000_000_000

    @Test func theTimerIsArmedOnlyForANewEarliestDeadline() {
        var expiries = Expiries()
        #expect(expiries.schedule("a", expiresAtMs: start + 300_000) == start + 300_000)
        #expect(expiries.schedule("b", expiresAtMs: start + 600_000) == nil)
        #expect(expiries.schedule("c", expiresAtMs: start + 60_000) == start + 60_000)
    }

    @Test func whatIsDueEndsInOrderAndTheTimerMovesOn() {
        var expiries = Expiries()
        _ = expiries.schedule("b", expiresAtMs: start + 600_000)
        _ = expiries.schedule("a", expiresAtMs: start + 300_000)
        _ = expiries.schedule("c", expiresAtMs: start + 300_001)
        #expect(expiries.due(nowMs: start + 299_999) == ([], start + 300_000))
        #expect(expiries.due(nowMs: start + 300_001) == ([.expire("a"), .expire("c")], start + 600_000))
        #expect(expiries.due(nowMs: start + 900_000) == ([.expire("b")], nil))
        // With the timer disarmed, the next one scheduled arms it whatever its time.
        #expect(expiries.schedule("d", expiresAtMs: start + 86_400_000) == start + 86_400_000)
    }

    @Test func anObjectEndedBeforeItsTimeIsNotDue() {
        var expiries = Expiries()
        _ = expiries.schedule("a", expiresAtMs: start + 300_000)
        _ = expiries.schedule("b", expiresAtMs: start + 400_000)
        expiries.cancel("a")
        // The timer may fire for the cancelled deadline: early, never late.
        #expect(expiries.due(nowMs: start + 300_000) == ([], start + 400_000))
        #expect(expiries.due(nowMs: start + 400_000) == ([.expire("b")], nil))
    }

    @Test func aStaticPublicationIsRenewedAnHourBeforeItsDayEnds() {
        var expiries = Expiries()
        let day: UInt64 = 86_400_000
        #expect(expiries.schedule("s", expiresAtMs: start + day, renewed: true) == start + day - Expiries.renewalMarginMs)
        #expect(expiries.due(nowMs: start + day - Expiries.renewalMarginMs) == ([.renew("s")], nil))
        // Given its next day, it is due again an hour before that one ends.
        let renewedAt = start + day - Expiries.renewalMarginMs
        #expect(expiries.schedule("s", expiresAtMs: renewedAt + day, renewed: true) == renewedAt + day - Expiries.renewalMarginMs)
        #expect(expiries.due(nowMs: renewedAt + day - 1) == ([.renew("s")], nil))
    }
}
