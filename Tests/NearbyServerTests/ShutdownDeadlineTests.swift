import Synchronization
@testable import NearbyServer
import Testing
import TestSupport

/// The bound on a whole shutdown, for a part that does not return when
/// cancelled.
@Suite(.timeLimit(.minutes(1))) struct ShutdownDeadlineTests {
    /// The server's promise: ten seconds from SIGTERM, of which the graceful
    /// phase takes at most eight, leaving cancellation two.
    @Test func theWholeShutdownIsBoundedByTheDocumentedTenSeconds() {
        #expect(NearbyServer.shutdownDeadline == .seconds(10))
        #expect(NearbyServer.gracefulShutdownDuration < NearbyServer.shutdownDeadline)
    }

    /// A deadline not cancelled runs its action; one cancelled in time does
    /// not, checked when a later deadline has run.
    @Test func anOverdueShutdownRunsTheActionAndAFinishedOneDoesNot() async throws {
        let fired = Mutex<[String]>([])
        let (events, event) = AsyncStream.makeStream(of: String.self)
        let finished = ShutdownDeadline(after: .milliseconds(20)) {
            fired.withLock { $0.append("finished") }
            event.yield("finished")
        }
        finished.cancel()
        _ = ShutdownDeadline(after: .milliseconds(100)) {
            fired.withLock { $0.append("overdue") }
            event.yield("overdue")
        }
        let first = try await withTimeout(10, "a deadline runs") { await events.first { _ in true } }
        #expect(first == "overdue")
        #expect(fired.withLock { $0 } == ["overdue"])
    }
}
