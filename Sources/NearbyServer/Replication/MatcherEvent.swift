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
    /// `replica` took `partitions` (or listens again after a break): it
    /// wants every replica's edges with their devices (``EdgeMessage/sync(partitions:edges:)``).
    case edgesWanted(replica: String, partitions: [Int])
}

extension MatcherEvent {
    /// The event in two parts that, applied one after the other, do what it
    /// does (a device's changes in their order; a report's sightings, seen
    /// before gone, as one report applies them); nil for one that cannot be
    /// split.
    var halves: (MatcherEvent, MatcherEvent)? {
        switch self {
        case .objects(let device, let changes) where changes.count > 1:
            let middle = changes.count / 2
            return (.objects(device: device, changes: Array(changes[..<middle])),
                    .objects(device: device, changes: Array(changes[middle...])))
        case .devicesRemoved(let ids) where ids.count > 1:
            let middle = ids.count / 2
            return (.devicesRemoved(Array(ids[..<middle])), .devicesRemoved(Array(ids[middle...])))
        case .sightings(let observer, let atMs, let seen, let gone) where seen.count + gone.count > 1:
            let middle = (seen.count + gone.count) / 2
            if middle <= seen.count {
                return (.sightings(observer: observer, atMs: atMs, seen: Array(seen[..<middle]), gone: []),
                        .sightings(observer: observer, atMs: atMs, seen: Array(seen[middle...]), gone: gone))
            }
            let goneMiddle = middle - seen.count
            return (.sightings(observer: observer, atMs: atMs, seen: seen, gone: Array(gone[..<goneMiddle])),
                    .sightings(observer: observer, atMs: atMs, seen: [], gone: Array(gone[goneMiddle...])))
        default:
            return nil
        }
    }
}

/// A device's stream: the replica that holds it and its id there.
struct StreamOwner: Sendable, Hashable, Codable {
    var replica: String
    var stream: UInt64
}
