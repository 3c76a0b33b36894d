import DBus
import Testing
import TestSupport

/// Something a timer's action captures, as a bus object captures itself.
@BusActor
private final class TimerOwner {
    var timer: BusTimer?
    var fired = false
}

@Suite struct BusTimerTests {
    @Test @BusActor func aTimerRunsItsActionOnceAfterTheDelay() async throws {
        let fired = Inbox<Void>()
        let timer = BusTimer(after: .milliseconds(20)) { fired.put(()) }
        _ = try await fired.first(within: 10, "the timer's action") { _ in true }
        withExtendedLifetime(timer) {}
    }

    @Test @BusActor func aCancelledTimerDoesNotRunAndLetsGoOfWhatItsActionHolds() async throws {
        weak var released: TimerOwner?
        do {
            let owner = TimerOwner()
            owner.timer = BusTimer(after: .milliseconds(1)) { owner.fired = true }
            released = owner
            owner.timer?.cancel()
        }
        #expect(released == nil)
    }

    @Test @BusActor func aFiredTimerLetsGoOfWhatItsActionHolds() async throws {
        let fired = Inbox<Void>()
        weak var released: TimerOwner?
        do {
            let owner = TimerOwner()
            owner.timer = BusTimer(after: .milliseconds(1)) {
                owner.fired = true
                fired.put(())
            }
            released = owner
        }
        #expect(released != nil, "the armed timer keeps its action")
        _ = try await fired.first(within: 10, "the timer's action") { _ in true }
        #expect(released == nil)
    }
}
