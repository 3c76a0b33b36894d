import NearbyCore
import ServerAPI

/// A message a subscription found or lost, for its client to be told.
public enum FoundChange: Equatable, Sendable {
    case found(subscription: String, source: String, Message, SightingInfo)
    /// `source` is nil when a snapshot showed the message gone: its sources
    /// went together.
    case lost(subscription: String, source: String?, Message, SightingInfo)
}

/// Where a found message came from: a device's publication through the
/// server link, or a beacon the daemon heard itself.
public enum FoundSource {
    /// What every beacon source starts with: the beacon watch's, not the server's.
    public static let beaconPrefix = "beacon:"

    public static func isBeacon(_ source: String) -> Bool { source.hasPrefix(beaconPrefix) }
}

/// The subscriptions one server link's stream speaks of, as it needs them:
/// one by id for each event, all of them at a snapshot's end.
public protocol LinkSubscriptions {
    /// The link's subscription `id`, if it has one.
    func subscription(_ id: String) -> Subscription?
    /// Every subscription of the link.
    func all() -> [Subscription]
    /// Whether the subscription's nearby part runs: a waiting one hears
    /// nothing, even what the server sent before it heard of the wait.
    func runs(_ id: String) -> Bool
}

/// Turns one server link's stream (found, lost, and the snapshot after a
/// reconnect, a page at a time) into what its subscriptions found and lost.
/// Holds what a snapshot under way has listed so far.
public struct MatchStream: Sendable {
    /// While a snapshot arrives in pages: the sources each subscription has
    /// been told of since it began.
    private var snapshotSources: [String: Set<String>]?

    public init() {}

    /// The link's connection ended: a snapshot cut short says nothing, and
    /// the next connection asks for a new one.
    public mutating func disconnected() {
        snapshotSources = nil
    }

    /// Applies one event to the link's subscriptions, whose found messages
    /// it changes, and says what changed.
    public mutating func apply(_ event: StreamEvent, to subscriptions: some LinkSubscriptions) -> [FoundChange] {
        switch event {
        case .found(let match):
            snapshotSources?[match.subscription, default: []].insert(match.source)
            return Self.found(match, in: subscriptions).map { [$0] } ?? []
        case .lost(let id, let source):
            guard let subscription = subscriptions.subscription(id),
                  let (message, info) = subscription.found.remove(source: source) else { return [] }
            return [.lost(subscription: id, source: source, message, info)]
        case .snapshot(let matches, let more):
            // What the pages list, and what is found meanwhile, is current;
            // what was found before and is in neither is lost once the last
            // page is in.
            var sources = snapshotSources ?? [:]
            for match in matches { sources[match.subscription, default: []].insert(match.source) }
            var changes: [FoundChange] = []
            if more {
                snapshotSources = sources
            } else {
                snapshotSources = nil
                for subscription in subscriptions.all().sorted(by: { $0.id < $1.id }) {
                    // Beacon sources are the watch's, not the server's.
                    let kept = (sources[subscription.id] ?? []).union(subscription.found.sourceIDs.filter(FoundSource.isBeacon))
                    for (message, info) in subscription.found.keepOnly(kept) {
                        changes.append(.lost(subscription: subscription.id, source: nil, message, info))
                    }
                }
            }
            for match in matches {
                if let change = Self.found(match, in: subscriptions) { changes.append(change) }
            }
            return changes
        }
    }

    private static func found(_ match: Match, in subscriptions: some LinkSubscriptions) -> FoundChange? {
        guard let subscription = subscriptions.subscription(match.subscription), subscriptions.runs(match.subscription)
        else { return nil }
        let message = Message(namespace: match.namespace, type: match.type, content: Array(match.content))
        let info = SightingInfo(medium: match.medium, rssi: match.rssi, distanceMeters: match.distance)
        guard subscription.found.add(source: match.source, message: message, info: info) else { return nil }
        return .found(subscription: match.subscription, source: match.source, message, info)
    }
}
