@_spi(Testing) import DaemonCore
import Testing

/// TTLs by hand: what is due when, what the one timer is armed for, and the
/// static publications renewed instead of ended.
struct ExpiriesTests {
    private let start: UInt64 = 1_800_000_000_000
    private let day: UInt64 = 86_400_000

    /// The timer fired at `nowMs`: what was due, and what the timer is armed for next.
    private func fire(_ expiries: inout Expiries, at nowMs: UInt64) -> ([Expiries.Due], UInt64?) {
        let due = expiries.due(nowMs: nowMs)
        return (due, expiries.rearm())
    }

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
        #expect(fire(&expiries, at: start + 299_999) == ([], start + 300_000))
        #expect(fire(&expiries, at: start + 300_001) == ([.expire("a"), .expire("c")], start + 600_000))
        #expect(fire(&expiries, at: start + 900_000) == ([.expire("b")], nil))
        // With the timer disarmed, the next one scheduled arms it whatever its time.
        #expect(expiries.schedule("d", expiresAtMs: start + day) == start + day)
    }

    @Test func anObjectEndedBeforeItsTimeIsNotDue() {
        var expiries = Expiries()
        _ = expiries.schedule("a", expiresAtMs: start + 300_000)
        _ = expiries.schedule("b", expiresAtMs: start + 400_000)
        expiries.cancel("a")
        // The timer may fire for the cancelled deadline: early, never late.
        #expect(fire(&expiries, at: start + 300_000) == ([], start + 400_000))
        #expect(fire(&expiries, at: start + 400_000) == ([.expire("b")], nil))
    }

    @Test func aStaticPublicationIsRenewedAnHourBeforeItsDayEnds() {
        var expiries = Expiries()
        let renewal = start + day - Expiries.renewalMarginMs
        #expect(expiries.schedule("s", expiresAtMs: start + day, renewed: true) == renewal)
        #expect(expiries.due(nowMs: renewal) == [.renew("s")])
        // Given its next day, it is due again an hour before that one ends.
        #expect(expiries.schedule("s", expiresAtMs: renewal + day, renewed: true) == renewal + day - Expiries.renewalMarginMs)
        #expect(expiries.rearm() == renewal + day - Expiries.renewalMarginMs)
        #expect(fire(&expiries, at: renewal + day - Expiries.renewalMarginMs) == ([.renew("s")], nil))
    }

    @Test func aRenewalComesFirstThoughALaterDeadlineWaited() {
        var expiries = Expiries()
        let renewal = start + day - Expiries.renewalMarginMs
        _ = expiries.schedule("s", expiresAtMs: start + day, renewed: true)
        // A client's publication of the longest TTL, made half an hour before the renewal.
        _ = expiries.schedule("p", expiresAtMs: renewal - 1_800_000 + day)
        #expect(expiries.due(nowMs: renewal) == [.renew("s")])
        _ = expiries.schedule("s", expiresAtMs: renewal + day, renewed: true)
        // The renewed publication's next renewal is due before the other's expiry, and the timer says so.
        #expect(expiries.rearm() == renewal + day - Expiries.renewalMarginMs)
        #expect(fire(&expiries, at: renewal + day - Expiries.renewalMarginMs) == ([.renew("s")], renewal - 1_800_000 + day))
    }
}
