/// How a connection to nearby-server is retried (`[server] reconnect-initial-delay`
/// and `reconnect-max-delay`): shared by the link and the direct channel.
struct Backoff: Sendable {
    var initial: Duration
    var maximum: Duration

    /// What came of one attempt: whether it got connected (and then ended),
    /// and the error it ended with, if any.
    struct Attempt {
        var connected: Bool
        var failure: (any Error)?
    }

    init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The daemon's configured backoff.
    init(_ configuration: DaemonConfiguration) {
        self.init(initial: .milliseconds(Int64(configuration.reconnectInitialDelay * 1000)),
                  maximum: .milliseconds(Int64(configuration.reconnectMaxDelay * 1000)))
    }

    /// Runs `attempt` on the current URL of `endpoints` again and again until
    /// the task is cancelled, telling `endpoints` how each went. The backoff
    /// counts rounds of the list, not URLs: an attempt whose failure moved
    /// `endpoints` to a URL not yet tried in this round is followed at once by
    /// one on that URL, so a dead replica costs one quick retry on the next.
    /// Once the current URL has been tried in the round, the round has failed:
    /// `settled(true)` runs, then it waits (with `pause`) from `initial`,
    /// doubling up to `maximum`. An attempt that got connected starts a new
    /// round, and the next failed round waits `initial` again. `settled` runs
    /// after every attempt, with whether the round failed with it.
    ///
    /// It runs, and calls its closures, in its caller's isolation (the link's
    /// and the direct channel's, the bus actor); it needs none of its own.
    func retry(isolation: isolated (any Actor)? = #isolation, over endpoints: ServerEndpoints,
               _ attempt: (ServerEndpoints.Endpoint) async -> Attempt,
               settled: (_ roundFailed: Bool) async -> Void = { _ in },
               pause: (Duration) async -> Void = { try? await Task.sleep(for: $0) }) async {
        var delay = initial
        var tried: Set<Int> = []
        while !Task.isCancelled {
            let endpoint = await endpoints.current
            tried.insert(endpoint.index)
            let outcome = await attempt(endpoint)
            if outcome.connected {
                delay = initial
                tried = [endpoint.index]
            }
            if let failure = outcome.failure, !Task.isCancelled { await endpoints.failed(endpoint, failure) }
            let roundFailed = await tried.contains(endpoints.current.index)
            await settled(roundFailed)
            guard roundFailed, !Task.isCancelled else { continue }
            await pause(delay)
            delay = min(delay * 2, maximum)
            tried = []
        }
    }
}
