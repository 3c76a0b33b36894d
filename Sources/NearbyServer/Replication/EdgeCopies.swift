import NearbyCore

/// An edge as another replica holds it: a copy, made by the edge's home
/// (the replica whose matcher applied its observer's reports) for the
/// replicas that serve its two devices.
///
/// Copies go with what changes matching (an edge made, one that came into
/// or out of earshot, one ended), never with a report that only refreshes
/// an edge: that is most reports, and they then cost one replica alone. A
/// copy's RSSI and distance are those of when it was made or last changed
/// earshot.
struct EdgeCopy: Sendable, Equatable, Codable {
    var observer: String
    var observed: String
    var medium: Medium
    var rssi: Int
    var distance: Double

    var key: Matcher.EdgeKey { Matcher.EdgeKey(observer: observer, observed: observed, medium: medium) }
}

/// What an edge's home tells a replica that serves one of its devices.
enum EdgeMessage: Sendable, Equatable, Codable {
    /// Edges made or changed.
    case put([EdgeCopy])
    /// Edges ended.
    case remove([Matcher.EdgeKey])
    /// Every edge the sender is home to with a device of `partitions`, in
    /// place of what the receiver held from it there: the answer to
    /// ``MatcherEvent/edgesWanted(replica:partitions:)``.
    case sync(partitions: [Int], edges: [EdgeCopy])
    /// Every edge the sender is home to, sent as it stops: kept whoever
    /// comes to serve their devices, until they would have timed out
    /// unrefreshed, so that its devices moving to other replicas lose nothing.
    case bequest([EdgeCopy])
}

/// Messages from one replica to another, in the order they were made.
struct EdgeLetter: Sendable, Equatable, Codable {
    var from: String
    var messages: [EdgeMessage]
}
