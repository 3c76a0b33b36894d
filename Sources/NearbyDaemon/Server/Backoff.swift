import DBus

/// How a connection to nearby-server is retried (`[server] reconnect-initial-delay`
/// and `reconnect-max-delay`): shared by the link and the direct channel.
struct Backoff: Sendable {
    var initial: Duration
    var maximum: Duration

    init(initial: Duration, maximum: Duration) {
        self.initial = initial
        self.maximum = maximum
    }

    /// The daemon's configured backoff.
    init(_ configuration: DaemonConfiguration) {
        self.init(initial: .milliseconds(Int64(configuration.reconnectInitialDelay * 1000)),
                  maximum: .milliseconds(Int64(configuration.reconnectMaxDelay * 1000)))
    }

    /// Runs `attempt` again and again until the task is cancelled. Between
    /// attempts it waits (with `pause`) from `initial`, doubling up to
    /// `maximum`; an attempt that returns true got connected, so the next
    /// failure starts from `initial` again.
    @BusActor
    func retry(_ attempt: @BusActor () async -> Bool,
               pause: @BusActor (Duration) async -> Void = { try? await Task.sleep(for: $0) }) async {
        var delay = initial
        while !Task.isCancelled {
            if await attempt() { delay = initial }
            if Task.isCancelled { break }
            await pause(delay)
            delay = min(delay * 2, maximum)
        }
    }
}
