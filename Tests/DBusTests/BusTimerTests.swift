import DBus
import Testing
import TestSupport

/// Something a timer's action captures, as a bus object captures itself.
@BusActor
private final class TimerOwner {
    var timer: BusTimer?
    var fired = false
}

@Suite(.timeLimit(.minutes(1))) struct BusTimerTests {
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

    /// How `sleeping` ended, waited for at most ten seconds: a sleep that
    /// never ends fails the test by name instead of holding it.
    private func end(of sleeping: Task<Void, any Error>, _ what: String) async throws -> Result<Void, any Error> {
        let ended = Inbox<Result<Void, any Error>>()
        Task { ended.put(await sleeping.result) }
        return try await ended.first(within: 10, what) { _ in true }
    }

    @Test func sleepReturnsOnTheBusThreadOnceTheDelayHasPassed() async throws {
        let start = ContinuousClock.now
        let onBusThread = Inbox<Bool?>()
        let sleeping = Task { @BusActor in
            try await BusTimer.sleep(for: .milliseconds(30))
            onBusThread.put(BusLoop.shared.isIsolatingCurrentContext())
        }
        try await end(of: sleeping, "the 30 ms sleep to end").get()
        #expect(ContinuousClock.now - start >= .milliseconds(30))
        #expect(onBusThread.values == [true])
    }

    @Test func aCancelledSleepEndsAtOnceWithCancellationError() async throws {
        let started = Inbox<Void>()
        let sleeping = Task { @BusActor in
            started.put(())
            try await BusTimer.sleep(for: .seconds(60))
        }
        _ = try await started.first(within: 10, "the sleep to begin") { _ in true }
        sleeping.cancel()
        let result = try await end(of: sleeping, "the cancelled sleep to end")
        #expect(throws: CancellationError.self) { try result.get() }
    }

    @Test func aSleepCancelledBeforeItBeginsDoesNotWait() async throws {
        let sleeping = Task { @BusActor in
            withUnsafeCurrentTask { $0?.cancel() }
            try await BusTimer.sleep(for: .seconds(60))
        }
        let result = try await end(of: sleeping, "the sleep of a cancelled task to end")
        #expect(throws: CancellationError.self) { try result.get() }
    }
}
