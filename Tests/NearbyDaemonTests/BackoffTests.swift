import Logging
@testable import NearbyDaemon
import Testing

/// The daemon's reconnection backoff over its server URLs, run by hand: the
/// attempts' outcomes are given, the pauses recorded, nothing connects or sleeps.
@Suite struct BackoffTests {
    struct Refused: Error {}

    static let failed = Backoff.Attempt(connected: false, failure: Refused())
    /// Connected, then the connection failed.
    static let connectedThenFailed = Backoff.Attempt(connected: true, failure: Refused())

    /// The attempts' outcomes given in turn, and what the backoff did with them.
    actor Recorder {
        private var remaining: ArraySlice<Backoff.Attempt>
        private(set) var urls: [Int] = []
        private(set) var pauses: [Duration] = []
        private(set) var roundsFailed: [Bool] = []

        init(_ outcomes: [Backoff.Attempt]) {
            remaining = outcomes[...]
        }

        /// Runs the backoff, in this actor's isolation, until the outcomes
        /// run out; then it cancels its own task, which ends the backoff.
        func run(_ backoff: Backoff, over endpoints: ServerEndpoints) async {
            await backoff.retry(over: endpoints) { endpoint in
                guard let outcome = self.remaining.popFirst() else {
                    withUnsafeCurrentTask { $0?.cancel() }
                    return Backoff.Attempt(connected: false, failure: nil)
                }
                self.urls.append(endpoint.index)
                return outcome
            } settled: { roundFailed in
                if !Task.isCancelled { self.roundsFailed.append(roundFailed) }
            } pause: { self.pauses.append($0) }
        }
    }

    /// Runs the backoff over `urls` URLs through `outcomes`, one an attempt,
    /// and stops after the last: the URL of each attempt, each pause, and what
    /// `settled` heard after each attempt. The backoff runs in a task of its
    /// own, which it cancels at the end, so the test's task is never cancelled.
    static func run(urls: Int, _ outcomes: [Backoff.Attempt]) async -> (urls: [Int], pauses: [Duration], roundsFailed: [Bool]) {
        let clients = (0..<urls).map { ServerClient(baseURL: "http://127.0.0.1:\(9 + $0)", timeoutSeconds: 1) }
        let endpoints = ServerEndpoints(clients: clients, logger: Logger(label: "backoff-test"))
        let backoff = Backoff(initial: .milliseconds(100), maximum: .milliseconds(400))
        let recorder = Recorder(outcomes)
        await Task { await recorder.run(backoff, over: endpoints) }.value
        return (await recorder.urls, await recorder.pauses, await recorder.roundsFailed)
    }

    @Test func failedRoundsWaitLongerUpToTheMaximumAndAConnectionStartsAgain() async {
        let run = await Self.run(urls: 1, [Self.failed, Self.failed, Self.failed, Self.failed, Self.connectedThenFailed, Self.failed])
        #expect(run.pauses == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(400),
                               .milliseconds(100), .milliseconds(200)])
        #expect(run.roundsFailed == Array(repeating: true, count: 6))
    }

    /// A dead URL costs one quick retry on the next; the round fails, and
    /// waits, only once every URL has been tried.
    @Test func aRoundTriesEachURLBeforeItWaits() async {
        let run = await Self.run(urls: 2, [Self.failed, Self.failed, Self.failed, Self.failed])
        #expect(run.urls == [0, 1, 0, 1])
        #expect(run.roundsFailed == [false, true, false, true])
        #expect(run.pauses == [.milliseconds(100), .milliseconds(200)])
    }

    /// A refusal that is the request's (not the server's failing) does not
    /// move to the next URL: the round fails on the one URL.
    @Test func aRefusalStaysOnItsURL() async {
        let refused = Backoff.Attempt(connected: false, failure: ServerCallError.keyRefused("no"))
        let run = await Self.run(urls: 2, [refused, refused])
        #expect(run.urls == [0, 0])
        #expect(run.pauses == [.milliseconds(100), .milliseconds(200)])
    }
}
