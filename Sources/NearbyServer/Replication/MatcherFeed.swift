/// How the matcher's events reach the matchers: directly for one server, over
/// a ``ReplicaBus`` when several replicas share a database.
protocol MatcherFeed: Sendable {
    /// Hands `event` to every replica's matcher, this one's included, in one
    /// order for all; returns once this replica's matcher has applied it
    /// (found and lost are queued on its streams by then). Throws when the
    /// event could not be sent: no replica applies it.
    func publish(_ event: MatcherEvent) async throws

    /// Returns once this replica hears the others (at once when it does):
    /// while it does not, its matcher misses their events and it should not
    /// be sent devices. Ends early when the task is cancelled.
    func untilListening() async
}

/// One server alone: events go straight to its matcher.
struct LocalMatcherFeed: MatcherFeed {
    let matcher: Matcher

    func publish(_ event: MatcherEvent) async {
        await matcher.apply(event)
    }

    func untilListening() async {}
}
