import NearbyCore

/// What changes the matcher's inputs. Every replica sharing a database
/// applies every replica's events, its own included, in one order, so that
/// each holds the whole matching state and tells the devices whose streams it
/// holds what they find and lose (doc/architecture.md, "Several replicas").
enum MatcherEvent: Sendable, Equatable, Codable {
    /// A device registered.
    case deviceAdded(id: String, project: String)
    /// Devices unregistered. (Devices deleted by other means each replica
    /// finds in storage's log of deletions.)
    case devicesRemoved([String])
    /// Changes to a device's publications and subscriptions, as stored.
    case objects(device: String, changes: [ObjectChange])
    /// One sighting report of `observer`, its tokens resolved, made at `atMs`.
    case sightings(observer: String, atMs: UInt64, seen: [SeenEdge], gone: [GoneEdge])
    /// The device opened its stream on `owner.replica`.
    case streamOpened(device: String, owner: StreamOwner)
    /// That stream ended.
    case streamClosed(device: String, owner: StreamOwner)
}

/// A device's stream: the replica that holds it and its id there.
struct StreamOwner: Sendable, Hashable, Codable {
    var replica: String
    var stream: UInt64
}
