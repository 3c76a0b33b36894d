import Foundation
import NearbyCore
import Partitions
import ServerAPI

/// What a device's stream writer is handed, in order.
enum StreamOutput: Sendable {
    case event(StreamEvent)
    /// A page of a snapshot with more to come (`more` is set): once it is
    /// written the writer asks for the next (``Matcher/continueSnapshot(device:streamID:generation:)``),
    /// so a stream holds one page of a snapshot at a time, whatever its size.
    case snapshotPage(StreamEvent, generation: UInt64)
    /// The server ends the stream, saying why (a newer stream replaced it, the
    /// device was unregistered).
    case close(String)
}

/// A device's open stream, as the matcher hands it to the connection.
struct StreamHandle: Sendable {
    let id: UInt64
    let outputs: StreamOutputs
}

/// An ok sighting, its token already resolved to the device that holds it.
struct SeenEdge: Sendable, Equatable, Codable {
    var observed: String
    var token: Token
    var medium: Medium
    var rssi: Int
    var distance: Double
}

/// A `gone` entry, resolved.
struct GoneEdge: Sendable, Equatable, Codable {
    var observed: String
    var token: Token
    var medium: Medium
}

/// Decides which publications are near which subscriptions and tells the
/// subscribers, as things change.
///
/// An edge is "observer heard observed on medium", from ok sightings. A
/// publication P of device DP and a subscription S of device DS are near when
/// the two devices are different devices of one project, S's filter takes P,
/// both are unexpired, and an edge on a medium both allow goes the way their
/// modes allow: DS hears DP while P broadcasts and S scans, or DP hears DS
/// while P scans and S broadcasts.
///
/// Everything is indexed by device pair: a change between two devices (an
/// edge made or lost) re-evaluates only that pair; a changed publication or
/// subscription re-evaluates only the pairs its device has edges with; and
/// within a pair a subscription looks only at the publications of its
/// namespace (and type). A refreshed edge costs a dictionary update.
actor Matcher {
    struct Publication: Sendable, Equatable {
        var id: String
        var namespace: String
        var type: String
        var content: Data
        var mediums: Set<Medium>
        var mode: DiscoveryMode
        var expiresAtMs: UInt64
        var earshot: Bool

        init(_ stored: StoredPublication) {
            id = stored.id
            namespace = stored.namespace
            type = stored.type
            content = stored.content
            mediums = Set(stored.mediums)
            mode = stored.mode
            expiresAtMs = stored.expiresAtMs
            earshot = stored.distance == .earshot
        }

        func isLive(_ nowMs: UInt64) -> Bool { expiresAtMs > nowMs }
    }

    struct Subscription: Sendable, Equatable {
        var id: String
        var filter: MessageFilter
        var mediums: Set<Medium>
        var mode: DiscoveryMode
        var expiresAtMs: UInt64
        var earshot: Bool

        init(_ stored: StoredSubscription) {
            id = stored.id
            filter = MessageFilter(namespace: stored.namespace, type: stored.type)
            mediums = Set(stored.mediums)
            mode = stored.mode
            expiresAtMs = stored.expiresAtMs
            earshot = stored.distance == .earshot
        }

        func isLive(_ nowMs: UInt64) -> Bool { expiresAtMs == 0 || expiresAtMs > nowMs }
    }

    private struct Device {
        var project: String
        var publications: [String: Publication] = [:]
        /// Publication ids by namespace, then type.
        var index: [String: [String: Set<String>]] = [:]
        var subscriptions: [String: Subscription] = [:]

        mutating func insert(_ publication: Publication) {
            index[publication.namespace, default: [:]][publication.type, default: []].insert(publication.id)
            publications[publication.id] = publication
        }

        mutating func removePublication(_ id: String) {
            guard let old = publications.removeValue(forKey: id) else { return }
            index[old.namespace]?[old.type]?.remove(id)
            if index[old.namespace]?[old.type]?.isEmpty == true { index[old.namespace]?[old.type] = nil }
            if index[old.namespace]?.isEmpty == true { index[old.namespace] = nil }
        }

        /// Ids of the publications a subscription's filter takes (namespaces are resolved on both sides).
        func candidates(for subscription: Subscription) -> [String] {
            guard let types = index[subscription.filter.namespace] else { return [] }
            if subscription.filter.type.isEmpty { return types.values.flatMap { $0 } }
            return Array(types[subscription.filter.type] ?? [])
        }
    }

    struct EdgeKey: Hashable, Sendable, Codable {
        var observer: String
        var observed: String
        var medium: Medium
    }

    /// How well an edge's observer hears the observed device.
    private struct Reach: Equatable {
        var rssi: Int
        var distance: Double

        /// Near enough for `earshot`: heard over audio within ``Matcher/earshotMeters``.
        func inEarshot(_ medium: Medium) -> Bool { medium == .audio && distance <= Matcher.earshotMeters }
    }

    /// An edge this replica is home to: made from its observer's reports applied here.
    private struct Edge {
        /// The observed device's tokens the observer hears, with when each was last reported.
        var tokens: [Token: UInt64]
        var rssi: Int
        var distance: Double

        var reach: Reach { Reach(rssi: rssi, distance: distance) }

        func inEarshot(_ medium: Medium) -> Bool { reach.inEarshot(medium) }
    }

    /// Where the edges this replica is home to are copied, when the replicas
    /// divide the devices into partitions (``routeEdges(_:)``).
    private struct EdgeRoutes {
        /// Hands a message to the replica named.
        let send: @Sendable (_ to: String, EdgeMessage) -> Void
        /// The replica serving each partition, as this replica's last round of leases saw it.
        var owners: [String?] = Array(repeating: nil, count: Partition.count)
        /// Replicas that took a partition after that round: they asked for
        /// its edges (``MatcherEvent/edgesWanted(replica:partitions:)``) and
        /// are sent its changes too until the owners say the same.
        var claimants: [Int: String] = [:]
        /// The replicas alive, as the last round that could survey them saw them.
        var live: Set<String> = []
        /// Homes of copies held here that a round did not see alive, and
        /// since when (this replica's clock).
        var goneSince: [String: UInt64] = [:]
        /// Homes that left and sent their edges to every replica
        /// (``EdgeMessage/bequest(_:)``): their copies are kept whoever
        /// serves the devices, until they time out.
        var bequeathed: Set<String> = []
    }

    /// How near `earshot` is: about arm's length, what sound in a room carries
    /// clearly (doc/configuration.md gives the level it takes with nearbyd's defaults).
    static let earshotMeters = 1.5

    private struct Pair: Hashable {
        var subscriber: String
        var publisher: String
    }

    private struct MatchKey: Hashable, Comparable {
        var subscription: String
        var publication: String

        static func < (lhs: MatchKey, rhs: MatchKey) -> Bool {
            (lhs.subscription, lhs.publication) < (rhs.subscription, rhs.publication)
        }
    }

    private struct Session {
        let id: UInt64
        let continuation: AsyncStream<StreamOutputs.Queued>.Continuation
        let backlog: StreamBacklog
        /// The snapshot being sent, if one is.
        var snapshot: SnapshotCursor?
        /// Whether its ``MatcherEvent/streamOpened(device:owner:)`` has been
        /// applied: a stream another replica opens later replaces it, one
        /// opened earlier (whose event comes first) does not.
        var announced = false
    }

    /// Where a snapshot sent a page at a time has got to. It walks the
    /// subscriber's matches in order (publisher device, then subscription,
    /// then publication, as ids sort) against the matcher's state as each page
    /// is made, so it holds ids, never content: what changes meanwhile goes
    /// out as found and lost in the stream's order, and a match already lost
    /// is not listed.
    private struct SnapshotCursor {
        let generation: UInt64
        /// The publisher devices the subscriber had matches with when the snapshot began, sorted.
        let publishers: [String]
        var publisherIndex = 0
        /// The subscriber's subscription ids, sorted, for the current publisher.
        var subscriptions: [String] = []
        var subscriptionIndex = 0
        /// The current subscription's candidate publications at the current publisher, sorted.
        var candidates: [String] = []
        var candidateIndex = 0
    }

    private enum Deadline: Hashable {
        case publication(device: String, id: String)
        case subscription(device: String, id: String)
        case edge(EdgeKey)
    }

    private let clock: any WallClock
    /// This replica's id, which the streams it holds are owned by.
    let replica: String
    private let edgeTimeoutMs: UInt64
    private let streamBufferLimit: Int
    private let streamBufferBytes: Int
    private let snapshotPageBytes: Int

    private var devices: [String: Device] = [:]
    private var projectDevices: [String: Set<String>] = [:]
    private var edges: [EdgeKey: Edge] = [:]
    /// Copies of edges whose home is another replica, by edge, then home.
    private var copies: [EdgeKey: [String: Reach]] = [:]
    /// Nil while edges stay here (one server, or replicas that each apply every report).
    private var routes: EdgeRoutes?
    /// For each device, the devices it shares edges with (either way, here or
    /// as copies), and how many edges.
    private var links: [String: [String: Int]] = [:]
    /// The near (subscription, publication) pairs of each device pair.
    private var matches: [Pair: Set<MatchKey>] = [:]
    /// For each subscriber, the publishers it has matches with.
    private var matchedPublishers: [String: Set<String>] = [:]
    /// The streams this replica holds.
    private var sessions: [String: Session] = [:]
    /// Which replica's stream each device has, as the last
    /// ``MatcherEvent/streamOpened(device:owner:)`` said: the stream whose
    /// end takes the device's sightings away.
    private var streamOwners: [String: StreamOwner] = [:]
    private var deadlines = DeadlineQueue<Deadline>()
    private var lastSessionID: UInt64 = 0
    private var lastSnapshotGeneration: UInt64 = 0

    /// `streamBufferLimit` and `streamBufferBytes`: events, and bytes of
    /// events, a stream may have waiting for a slow connection; beyond either
    /// the stream is closed (its device reconnects and asks for a snapshot)
    /// instead of the server holding ever more memory. `snapshotPageBytes`:
    /// about how much of the matches' content one page of a snapshot holds
    /// (at least one match, however large).
    init(clock: any WallClock, replica: String = "local", edgeTimeoutMs: UInt64, streamBufferLimit: Int = 8192,
         streamBufferBytes: Int = 16 << 20, snapshotPageBytes: Int = 1 << 20) {
        self.clock = clock
        self.replica = replica
        self.edgeTimeoutMs = edgeTimeoutMs
        self.streamBufferLimit = streamBufferLimit
        self.streamBufferBytes = streamBufferBytes
        self.snapshotPageBytes = snapshotPageBytes
    }

    /// What storage holds that the matcher keeps: every device, publication and subscription.
    struct Contents: Sendable {
        var devices: [DeviceRecord]
        var publications: [StoredPublication]
        var subscriptions: [StoredSubscription]
    }

    /// Brings the devices, publications and subscriptions in line with
    /// storage, with found and lost for what differs: a replica that may have
    /// missed events (its connection to the others was lost) reloads.
    /// At start it fills the empty matcher.
    func resync(_ contents: Contents) {
        let stored = Set(contents.devices.map(\.id))
        removeDevices(Set(devices.keys).subtracting(stored))
        for record in contents.devices { addDevice(record.id, project: record.project) }
        let publicationsByDevice = Dictionary(grouping: contents.publications, by: \.device)
        let subscriptionsByDevice = Dictionary(grouping: contents.subscriptions, by: \.device)
        for id in devices.keys.sorted() {
            let device = devices[id]!
            let storedPublications = publicationsByDevice[id] ?? []
            let storedSubscriptions = subscriptionsByDevice[id] ?? []
            let keptPublications = Set(storedPublications.map(\.id))
            let keptSubscriptions = Set(storedSubscriptions.map(\.id))
            var changes: [ObjectChange] = []
            changes += device.publications.keys.filter { !keptPublications.contains($0) }.sorted().map { .deletePublication(id: $0) }
            changes += device.subscriptions.keys.filter { !keptSubscriptions.contains($0) }.sorted().map { .deleteSubscription(id: $0) }
            changes += storedPublications.filter { device.publications[$0.id] != Publication($0) }.map { .putPublication($0) }
            changes += storedSubscriptions.filter { device.subscriptions[$0.id] != Subscription($0) }.map { .putSubscription($0) }
            apply(changes, device: id)
        }
    }

    /// Applies events in order, which this replica or others published.
    func apply(_ events: [MatcherEvent]) {
        for event in events { apply(event) }
    }

    /// Applies an event, which this replica or another published.
    func apply(_ event: MatcherEvent) {
        switch event {
        case .deviceAdded(let id, let project): addDevice(id, project: project)
        case .devicesRemoved(let ids): removeDevices(Set(ids))
        case .objects(let device, let changes): apply(changes, device: device)
        case .sightings(let observer, let atMs, let seen, let gone): applySightings(observer: observer, seen: seen, gone: gone, atMs: atMs)
        case .streamOpened(let device, let owner): streamOpened(device: device, owner: owner)
        case .streamClosed(let device, let owner): streamClosed(device: device, owner: owner)
        case .edgesWanted(let replica, let partitions): edgesWanted(by: replica, partitions: partitions)
        }
    }

    // MARK: Devices

    func addDevice(_ id: String, project: String) {
        guard devices[id] == nil else { return }
        devices[id] = Device(project: project)
        projectDevices[project, default: []].insert(id)
    }

    func hasDevice(_ id: String) -> Bool { devices[id] != nil }

    /// Forgets a device: its stream is closed, subscribers that had found its
    /// publications get lost.
    func removeDevice(_ id: String) {
        guard let device = devices.removeValue(forKey: id) else { return }
        for publication in device.publications.keys { deadlines.cancel(.publication(device: id, id: publication)) }
        for subscription in device.subscriptions.keys { deadlines.cancel(.subscription(device: id, id: subscription)) }
        projectDevices[device.project]?.remove(id)
        if projectDevices[device.project]?.isEmpty == true { projectDevices[device.project] = nil }
        streamOwners[id] = nil
        if let session = sessions.removeValue(forKey: id) {
            session.continuation.yield(StreamOutputs.Queued(output: .close("device unregistered"), bytes: 0))
            session.continuation.finish()
        }
        let others = (links[id] ?? [:]).keys.sorted()
        for other in others {
            for medium in Medium.allCases {
                for key in [EdgeKey(observer: id, observed: other, medium: medium), EdgeKey(observer: other, observed: id, medium: medium)] {
                    removeEdge(key)
                    removeCopies(of: key)
                }
            }
        }
        // With the device gone every pair it was part of evaluates to nothing.
        for publisher in matchedPublishers[id] ?? [] {
            recompute(subscriber: id, publisher: publisher)
        }
        for other in others {
            recompute(subscriber: other, publisher: id)
        }
    }

    /// The devices held of these projects.
    func devices(inProjects projects: Set<String>) -> Set<String> {
        projects.reduce(into: []) { $0.formUnion(projectDevices[$1] ?? []) }
    }

    /// Forgets devices deleted behind the server's back (with their project, by the CLI).
    func removeDevices(_ ids: Set<String>) {
        for id in ids.sorted() { removeDevice(id) }
    }

    // MARK: Publications and subscriptions

    /// Applies stored changes of `device`, in order, each with its found and lost.
    func apply(_ changes: [ObjectChange], device: String) {
        for change in changes {
            switch change {
            case .putPublication(let publication): putPublication(publication)
            case .deletePublication(let id): removePublication(device: device, id: id)
            case .putSubscription(let subscription): putSubscription(subscription)
            case .deleteSubscription(let id): removeSubscription(device: device, id: id)
            }
        }
    }

    func putPublication(_ stored: StoredPublication) {
        guard devices[stored.device] != nil else { return }
        let publication = Publication(stored)
        if let old = devices[stored.device]!.publications[stored.id],
           (old.namespace, old.type, old.content) != (publication.namespace, publication.type, publication.content) {
            // Another message under the same id: subscribers lose the old one first.
            removePublication(device: stored.device, id: stored.id)
        }
        devices[stored.device]!.removePublication(stored.id)
        devices[stored.device]!.insert(publication)
        deadlines.schedule(.publication(device: stored.device, id: stored.id), at: stored.expiresAtMs)
        for other in linkedDevices(stored.device) {
            recompute(subscriber: other, publisher: stored.device)
        }
    }

    func removePublication(device: String, id: String) {
        guard devices[device]?.publications[id] != nil else { return }
        devices[device]!.removePublication(id)
        deadlines.cancel(.publication(device: device, id: id))
        for other in linkedDevices(device) {
            recompute(subscriber: other, publisher: device)
        }
    }

    func putSubscription(_ stored: StoredSubscription) {
        guard devices[stored.device] != nil else { return }
        devices[stored.device]!.subscriptions[stored.id] = Subscription(stored)
        let deadline = Deadline.subscription(device: stored.device, id: stored.id)
        if stored.expiresAtMs != 0 {
            deadlines.schedule(deadline, at: stored.expiresAtMs)
        } else {
            deadlines.cancel(deadline)
        }
        for other in linkedDevices(stored.device) {
            recompute(subscriber: stored.device, publisher: other)
        }
    }

    /// Removes a subscription. Its device asked for it, so it is told nothing
    /// unless `notify` (the server removes it on its own when it expires).
    func removeSubscription(device: String, id: String, notify: Bool = false) {
        guard devices[device]?.subscriptions.removeValue(forKey: id) != nil else { return }
        deadlines.cancel(.subscription(device: device, id: id))
        for publisher in (matchedPublishers[device] ?? []).sorted() {
            let pair = Pair(subscriber: device, publisher: publisher)
            let dropped = (matches[pair] ?? []).filter { $0.subscription == id }
            guard !dropped.isEmpty else { continue }
            store(matches[pair]!.subtracting(dropped), for: pair)
            if notify {
                for key in dropped.sorted() {
                    emit(.lost(subscription: key.subscription, source: Self.source(publisher, key.publication)), to: device)
                }
            }
        }
    }

    // MARK: Sightings

    /// The tokens among `seen` of devices of another project than the
    /// observer's (all of them for an observer this replica does not know):
    /// they make no edge, and their observer is told they are unknown, as
    /// any token it could not have been given.
    func foreignTokens(observer: String, seen: [SeenEdge]) -> Set<Token> {
        guard let project = devices[observer]?.project else { return Set(seen.map(\.token)) }
        return Set(seen.filter { devices[$0.observed].map { $0.project != project } ?? false }.map(\.token))
    }

    /// Applies one report of `observer`, made at `atMs`: `seen` makes or
    /// refreshes edges, then `gone` takes tokens off them (an edge lasts
    /// while any token of the observed device is heard, so token rotation
    /// does not break it). Sightings of devices of another project are left out.
    func applySightings(observer: String, seen: [SeenEdge], gone: [GoneEdge], atMs: UInt64) {
        guard let project = devices[observer]?.project else { return }
        // A report applied late (a replica catching up) makes no edge that has timed out already.
        let current = atMs + edgeTimeoutMs > clock.nowMs
        var changed = Set<String>()
        for sighting in seen where current && sighting.observed != observer && devices[sighting.observed]?.project == project {
            let key = EdgeKey(observer: observer, observed: sighting.observed, medium: sighting.medium)
            if var edge = edges[key] {
                let wasInEarshot = edge.inEarshot(key.medium)
                edge.tokens[sighting.token] = max(edge.tokens[sighting.token] ?? 0, atMs)
                edge.rssi = sighting.rssi
                edge.distance = sighting.distance
                edges[key] = edge
                // Coming into or out of earshot changes what earshot objects match.
                if edge.inEarshot(key.medium) != wasInEarshot {
                    changed.insert(sighting.observed)
                    copy(key, edge)
                }
                if copies[key] != nil, rightfulHome(of: key) == replica, dropVersions(of: key, besides: replica) {
                    changed.insert(sighting.observed)
                }
            } else {
                let edge = Edge(tokens: [sighting.token: atMs], rssi: sighting.rssi, distance: sighting.distance)
                supersedeGoneCopies(of: key)
                if !isPresent(key) { link(observer, sighting.observed, by: 1) }
                edges[key] = edge
                deadlines.schedule(.edge(key), at: atMs + edgeTimeoutMs)
                changed.insert(sighting.observed)
                copy(key, edge)
                if copies[key] != nil, rightfulHome(of: key) == replica { dropVersions(of: key, besides: replica) }
            }
        }
        for entry in gone {
            let key = EdgeKey(observer: observer, observed: entry.observed, medium: entry.medium)
            guard var edge = edges[key] else {
                // Only former homes' versions here (the observer moved to this replica without a hand-over): the
                // observer says the edge ended, and its home now, this replica, tells the others so.
                if copies[key] != nil, rightfulHome(of: key) == replica, dropVersions(of: key, besides: replica) {
                    tell(.remove([key]), about: key)
                    changed.insert(entry.observed)
                }
                continue
            }
            edge.tokens[entry.token] = nil
            if edge.tokens.isEmpty {
                removeEdge(key)
                if copies[key] != nil, rightfulHome(of: key) == replica { dropVersions(of: key, besides: replica) }
                changed.insert(entry.observed)
            } else {
                edges[key] = edge
            }
        }
        for other in changed.sorted() {
            recompute(subscriber: observer, publisher: other)
            recompute(subscriber: other, publisher: observer)
        }
    }

    // MARK: Partitions

    /// From now on the replicas divide the devices into partitions, each
    /// served by one replica: this one applies the reports that reach it (its
    /// partitions' devices', ``NearbyService/reportSightings(_:from:)``)
    /// and is home to the edges they make, and copies each edge to the
    /// replicas serving its two devices, through `send`, instead of every
    /// replica applying every report. Found and lost then come from the
    /// replica serving the subscriber, whichever replica the edge is home to.
    func routeEdges(_ send: @escaping @Sendable (_ to: String, EdgeMessage) -> Void) {
        routes = EdgeRoutes(send: send)
    }

    /// Who serves each partition (by number; nil where nobody does), and
    /// which replicas are alive, as a round of leases saw them. Copies that
    /// touch no device this replica serves or streams any more go. Copies
    /// from a replica no longer alive are kept one edge timeout from the
    /// first round that did not see it, as its edges would have lasted
    /// unrefreshed, then go: meanwhile its devices report to their new
    /// replicas, which make the edges again, so a device still near loses
    /// nothing (and one that began just after a survey is not taken for dead).
    ///
    /// The streams of devices another replica serves now are closed without
    /// their sightings going (``closeStream(device:id:)`` announces
    /// nothing): the device reconnects, is sent to that replica, and finds
    /// there what it had here, the edges this replica is home to among it
    /// (sent when that replica asked) until they time out.
    ///
    /// `live` is nil after a round that could not survey the replicas.
    func partitionsChanged(owners: [String?], live: Set<String>?) {
        guard var routes else { return }
        let now = clock.nowMs
        routes.owners = owners
        if let live {
            routes.live = live
            let homes = Set(copies.values.flatMap(\.keys))
            routes.goneSince = routes.goneSince.filter { homes.contains($0.key) && !live.contains($0.key) }
            for home in homes where !live.contains(home) && routes.goneSince[home] == nil { routes.goneSince[home] = now }
            routes.bequeathed = routes.bequeathed.intersection(homes)
        }
        routes.claimants = routes.claimants.filter { routes.live.contains($0.value) && owners[$0.key] != $0.value }
        self.routes = routes
        let expired = routes.goneSince.filter { $0.value + edgeTimeoutMs <= now }
        for device in sessions.keys.sorted() {
            guard let owner = owners[Partition.of(device: device)], owner != replica, let session = sessions.removeValue(forKey: device)
            else { continue }
            session.continuation.yield(StreamOutputs.Queued(output: .close("the device is served by another replica now"), bytes: 0))
            session.continuation.finish()
        }
        var dropped: [(EdgeKey, String)] = []
        for (key, held) in copies {
            let kept = keepsCopies(of: key.observer) || keepsCopies(of: key.observed)
            // A gone home's copy that a live one's, or this replica's own edge, now stands for is superseded.
            let renewed = edges[key] != nil || held.keys.contains { !isGone($0) }
            for home in held.keys where expired[home] != nil || (!kept && !routes.bequeathed.contains(home)) || (renewed && isGone(home)) {
                dropped.append((key, home))
            }
        }
        var changed = Set<Pair>()
        for (key, home) in dropped where removeCopy(of: key, from: home) { changed.formUnion(pairs(of: key)) }
        recompute(changed)
    }

    /// `replica` took `partitions` and wants the edges this one is home to
    /// with their devices: it is sent them all, and their changes from now
    /// on (until the owners this replica sees say so too).
    private func edgesWanted(by claimant: String, partitions: [Int]) {
        guard claimant != replica, var routes else { return }
        let wanted = Set(partitions.filter { $0 >= 0 && $0 < Partition.count })
        for partition in wanted { routes.claimants[partition] = claimant }
        self.routes = routes
        sendSync(to: claimant, of: wanted)
    }

    /// Copies to `other` could not be sent (the database was away): what it
    /// holds of this replica's edges may be behind, by a put or a remove
    /// that no later change of the edge would repair. It is sent every edge
    /// this replica is home to with a device of the partitions it serves or
    /// claimed, in place of what it holds from here (a sync, as when it
    /// asks). Nothing is sent to a replica no longer alive.
    func resendEdges(to other: String) {
        guard other != replica, let routes, routes.live.contains(other) else { return }
        let partitions = Set(routes.owners.indices.filter { routes.owners[$0] == other })
            .union(routes.claimants.filter { $0.value == other }.keys)
        guard !partitions.isEmpty else { return }
        sendSync(to: other, of: partitions)
    }

    /// This replica listens again after a break (the database was away):
    /// what it sent meanwhile may have reached replicas that were not
    /// listening either, and their asks for its edges may have been lost.
    /// Every live replica is sent what it should hold of this replica's
    /// edges, as ``resendEdges(to:)`` sends it. With the ask this replica
    /// makes on joining, whichever of two replicas listens again last
    /// repairs both directions.
    func resendEdgesToEveryone() {
        guard let routes else { return }
        for other in routes.live.sorted() where other != replica { resendEdges(to: other) }
    }

    /// Sends `other` every edge this replica is home to with a device of
    /// `partitions`, to hold in place of what it held from here there.
    private func sendSync(to other: String, of partitions: Set<Int>) {
        guard let routes else { return }
        let touching = edges.filter { key, _ in
            partitions.contains(Partition.of(device: key.observer)) || partitions.contains(Partition.of(device: key.observed))
        }
        let sent = touching.map { key, edge in
            EdgeCopy(observer: key.observer, observed: key.observed, medium: key.medium, rssi: edge.rssi, distance: edge.distance)
        }
        routes.send(other, .sync(partitions: partitions.sorted(), edges: sent.sorted { ($0.observer, $0.observed, $0.medium) < ($1.observer, $1.observed, $1.medium) }))
    }

    /// Applies what the home of some edges, `letter.from`, tells this
    /// replica about them. Copies that touch no device this replica serves
    /// or holds the stream of are not kept (they were sent before the sender
    /// knew the device had moved).
    func receive(_ letter: EdgeLetter) {
        guard routes != nil, letter.from != replica else { return }
        var changed = Set<Pair>()
        for message in letter.messages {
            switch message {
            case .put(let copies):
                for copy in copies where keepsCopies(of: copy.observer) || keepsCopies(of: copy.observed) {
                    if putCopy(copy, from: letter.from) { changed.formUnion(pairs(of: copy.key)) }
                }
            case .remove(let keys):
                for key in keys {
                    var removed = removeCopy(of: key, from: letter.from)
                    // The edge's home now says it ended: what former homes hold of it ends with it.
                    if letter.from == rightfulHome(of: key) { removed = dropVersions(of: key, besides: letter.from) || removed }
                    if removed { changed.formUnion(pairs(of: key)) }
                }
            case .bequest(let copies):
                routes?.bequeathed.insert(letter.from)
                for copy in copies where putCopy(copy, from: letter.from) { changed.formUnion(pairs(of: copy.key)) }
            case .sync(let partitions, let copies):
                let synced = Set(partitions)
                func inSync(_ key: EdgeKey) -> Bool {
                    synced.contains(Partition.of(device: key.observer)) || synced.contains(Partition.of(device: key.observed))
                }
                let kept = Set(copies.map(\.key))
                let stale = self.copies.filter { key, held in held[letter.from] != nil && inSync(key) && !kept.contains(key) }.keys
                for key in Array(stale) where removeCopy(of: key, from: letter.from) { changed.formUnion(pairs(of: key)) }
                for copy in copies where inSync(copy.key) && (keepsCopies(of: copy.observer) || keepsCopies(of: copy.observed)) {
                    if putCopy(copy, from: letter.from) { changed.formUnion(pairs(of: copy.key)) }
                }
            }
        }
        recompute(changed)
    }

    /// The partitions this replica serves, by the owners it knows.
    var servedPartitions: Set<Int> {
        guard let routes else { return [] }
        return Set(routes.owners.indices.filter { routes.owners[$0] == replica })
    }

    /// This replica is stopping, its partitions given up: every edge it is
    /// home to, for every other replica alive, which keeps them until they
    /// time out (``EdgeMessage/bequest(_:)``), whoever comes to serve their
    /// devices. Empty when edges are not copied.
    func bequest() -> (to: Set<String>, edges: [EdgeCopy]) {
        guard let routes else { return ([], []) }
        let edges = self.edges.map { key, edge in
            EdgeCopy(observer: key.observer, observed: key.observed, medium: key.medium, rssi: edge.rssi, distance: edge.distance)
        }
        return (routes.live.subtracting([replica]), edges.sorted { ($0.observer, $0.observed, $0.medium) < ($1.observer, $1.observed, $1.medium) })
    }

    /// Copies held of edges whose home is another replica: what the
    /// partitioned matcher holds beyond its own.
    var copyCount: Int { copies.values.reduce(0) { $0 + $1.count } }

    /// Whether `home` stopped (its bequest came) or a round no longer saw it.
    private func isGone(_ home: String) -> Bool {
        guard let routes else { return false }
        return routes.goneSince[home] != nil || routes.bequeathed.contains(home)
    }

    /// Drops the copies of an edge whose homes are gone: a live replica's
    /// copy, or this replica's own edge, stands for it now, and its end
    /// must be the edge's end.
    private func supersedeGoneCopies(of key: EdgeKey) {
        for home in copies[key]?.keys.sorted() ?? [] where isGone(home) { removeCopy(of: key, from: home) }
    }

    /// Whether this replica keeps copies of the device's edges: it serves
    /// the device's partition, by the owners it knows, or holds its stream
    /// still (nobody else serves it yet).
    private func keepsCopies(of device: String) -> Bool {
        routes?.owners[Partition.of(device: device)] == replica || sessions[device] != nil
    }

    /// Copies the edge to the replicas serving its devices, other than this one.
    private func copy(_ key: EdgeKey, _ edge: Edge) {
        tell(.put([EdgeCopy(observer: key.observer, observed: key.observed, medium: key.medium, rssi: edge.rssi,
                            distance: edge.distance)]), about: key)
    }

    /// Sends `message` to the replicas that serve the edge's two devices or
    /// took their partitions since, other than this one.
    private func tell(_ message: EdgeMessage, about key: EdgeKey) {
        guard let routes else { return }
        var to: Set<String> = []
        for device in [key.observer, key.observed] {
            let partition = Partition.of(device: device)
            if let owner = routes.owners[partition] { to.insert(owner) }
            if let claimant = routes.claimants[partition] { to.insert(claimant) }
        }
        to.remove(replica)
        for destination in to.sorted() { routes.send(destination, message) }
    }

    /// Holds `copy` from `home`; returns whether what matches may have changed.
    private func putCopy(_ copy: EdgeCopy, from home: String) -> Bool {
        let key = copy.key
        let reach = Reach(rssi: copy.rssi, distance: copy.distance)
        if !isGone(home) { supersedeGoneCopies(of: key) }
        if !isPresent(key) { link(key.observer, key.observed, by: 1) }
        let old = copies[key]?[home]
        copies[key, default: [:]][home] = reach
        let superseded = home == rightfulHome(of: key) && dropVersions(of: key, besides: home)
        return superseded || (old.map { $0.inEarshot(key.medium) != reach.inEarshot(key.medium) } ?? true)
    }

    /// The replica serving the edge's observer, by the owners this replica
    /// knows: the one that applies its reports, and so the edge's home.
    private func rightfulHome(of key: EdgeKey) -> String? {
        routes?.owners[Partition.of(device: key.observer)]
    }

    /// Drops every version of the edge here but `home`'s: the copies of
    /// other homes, and this replica's own edge unless it is `home` (its end
    /// told to the others). Called when the edge's rightful home made,
    /// changed or ended it: the observer moved (its partition taken after a
    /// break, not handed over) and its former replica, still alive, keeps
    /// the edge, and copies it, until it times out unrefreshed; the edge
    /// must come and go as its home now says. Returns whether anything went.
    @discardableResult
    private func dropVersions(of key: EdgeKey, besides home: String) -> Bool {
        var dropped = false
        for other in copies[key]?.keys.sorted() ?? [] where other != home {
            dropped = removeCopy(of: key, from: other) || dropped
        }
        if home != replica, removeEdge(key) { dropped = true }
        return dropped
    }

    /// Drops `home`'s copy of the edge; returns whether there was one.
    @discardableResult
    private func removeCopy(of key: EdgeKey, from home: String) -> Bool {
        guard copies[key]?.removeValue(forKey: home) != nil else { return false }
        if copies[key]?.isEmpty == true { copies[key] = nil }
        if !isPresent(key) { link(key.observer, key.observed, by: -1) }
        return true
    }

    /// Drops every copy of the edge (its device is gone everywhere).
    private func removeCopies(of key: EdgeKey) {
        for home in copies[key]?.keys.sorted() ?? [] { removeCopy(of: key, from: home) }
    }

    /// The two (subscriber, publisher) pairs an edge can make near.
    private func pairs(of key: EdgeKey) -> [Pair] {
        [Pair(subscriber: key.observer, publisher: key.observed), Pair(subscriber: key.observed, publisher: key.observer)]
    }

    /// Re-evaluates pairs, in a stable order.
    private func recompute(_ pairs: Set<Pair>) {
        for pair in pairs.sorted(by: { ($0.subscriber, $0.publisher) < ($1.subscriber, $1.publisher) }) {
            recompute(subscriber: pair.subscriber, publisher: pair.publisher)
        }
    }

    // MARK: Streams

    /// Opens a stream of the device on this replica, closing the one it had
    /// here. Nil for an unknown device. The stream becomes the device's
    /// (whose end takes its sightings away) once a
    /// ``MatcherEvent/streamOpened(device:owner:)`` naming it is applied.
    func openStream(device: String) -> StreamHandle? {
        guard devices[device] != nil else { return nil }
        if let old = sessions[device] {
            old.continuation.yield(StreamOutputs.Queued(output: .close("replaced by a newer stream of this device"), bytes: 0))
            old.continuation.finish()
        }
        lastSessionID += 1
        let (outputs, continuation) = AsyncStream.makeStream(of: StreamOutputs.Queued.self,
                                                             bufferingPolicy: .bufferingOldest(streamBufferLimit))
        let backlog = StreamBacklog()
        sessions[device] = Session(id: lastSessionID, continuation: continuation, backlog: backlog)
        return StreamHandle(id: lastSessionID, outputs: StreamOutputs(base: outputs, backlog: backlog))
    }

    /// The connection of stream `id` ended. Returns whether it was the
    /// device's stream here, not one a newer stream replaced: then its end is
    /// to be announced (``MatcherEvent/streamClosed(device:owner:)``).
    func closeStream(device: String, id: UInt64) -> Bool {
        guard let session = sessions[device], session.id == id else { return false }
        sessions[device] = nil
        session.continuation.finish()
        return true
    }

    /// A stream of the device opened on `owner.replica`. Its stream here, if
    /// an earlier event announced it, is replaced: the device went to another replica.
    private func streamOpened(device: String, owner: StreamOwner) {
        guard devices[device] != nil else { return }
        streamOwners[device] = owner
        guard var session = sessions[device] else { return }
        if owner.replica == replica {
            if session.id == owner.stream {
                session.announced = true
                sessions[device] = session
            }
        } else if session.announced {
            sessions[device] = nil
            session.continuation.yield(StreamOutputs.Queued(output: .close("replaced by a newer stream of this device"), bytes: 0))
            session.continuation.finish()
        }
    }

    /// The device's stream `owner` ended. Unless a newer stream replaced it,
    /// the device's sightings as observer go: it reports them again when it
    /// reconnects.
    private func streamClosed(device: String, owner: StreamOwner) {
        guard streamOwners[device] == owner else { return }
        streamOwners[device] = nil
        var changed: [String] = []
        for other in (links[device] ?? [:]).keys.sorted() {
            var removedAny = false
            for medium in Medium.allCases {
                removedAny = removeEdge(EdgeKey(observer: device, observed: other, medium: medium)) || removedAny
            }
            if removedAny { changed.append(other) }
        }
        for other in changed {
            recompute(subscriber: device, publisher: other)
            recompute(subscriber: other, publisher: device)
        }
    }

    /// Answers a snapshot request in the stream's order of events: its first
    /// page now, the next each time the writer has written one. A request
    /// while a snapshot is being sent starts it again.
    func sendSnapshot(device: String, streamID: UInt64) {
        guard sessions[device]?.id == streamID else { return }
        lastSnapshotGeneration += 1
        let publishers = (matchedPublishers[device] ?? []).sorted()
        sessions[device]!.snapshot = SnapshotCursor(generation: lastSnapshotGeneration, publishers: publishers)
        emitSnapshotPage(device: device)
    }

    /// The writer wrote the page of snapshot `generation`: the next one, unless
    /// that snapshot was started again or the stream ended meanwhile.
    func continueSnapshot(device: String, streamID: UInt64, generation: UInt64) {
        guard let session = sessions[device], session.id == streamID, session.snapshot?.generation == generation else { return }
        emitSnapshotPage(device: device)
    }

    private func emitSnapshotPage(device: String) {
        guard var cursor = sessions[device]?.snapshot else { return }
        let (page, more) = nextPage(of: device, &cursor)
        sessions[device]!.snapshot = more ? cursor : nil
        if more {
            emit(.snapshot(page, more: true), to: device, generation: cursor.generation)
        } else {
            emit(.snapshot(page, more: false), to: device)
        }
    }

    /// Every current match of the device's subscriptions, all pages together.
    func snapshot(of device: String) -> [Match] {
        var cursor = SnapshotCursor(generation: 0, publishers: (matchedPublishers[device] ?? []).sorted())
        var matches: [Match] = []
        while true {
            let (page, more) = nextPage(of: device, &cursor)
            matches += page
            if !more { return matches }
        }
    }

    /// The matches from `cursor` on, up to about `snapshotPageBytes` of them
    /// (at least one), and whether any may follow.
    private func nextPage(of subscriber: String, _ cursor: inout SnapshotCursor) -> (page: [Match], more: Bool) {
        var page: [Match] = []
        var bytes = 0
        while let (publisher, key) = nextKey(of: subscriber, &cursor) {
            guard matches[Pair(subscriber: subscriber, publisher: publisher)]?.contains(key) == true,
                  let match = makeMatch(subscriber: subscriber, publisher: publisher, key: key) else { continue }
            let matchBytes = match.bufferedBytes
            if !page.isEmpty && bytes + matchBytes > snapshotPageBytes {
                // Its page is the next one.
                cursor.candidateIndex -= 1
                return (page, true)
            }
            page.append(match)
            bytes += matchBytes
        }
        return (page, false)
    }

    /// The next (publisher, subscription, publication) the cursor passes that
    /// may be a match, or nil at the end.
    private func nextKey(of subscriber: String, _ cursor: inout SnapshotCursor) -> (String, MatchKey)? {
        while true {
            if cursor.candidateIndex < cursor.candidates.count {
                let publication = cursor.candidates[cursor.candidateIndex]
                cursor.candidateIndex += 1
                return (cursor.publishers[cursor.publisherIndex - 1],
                        MatchKey(subscription: cursor.subscriptions[cursor.subscriptionIndex - 1], publication: publication))
            }
            if cursor.publisherIndex > 0 && cursor.subscriptionIndex < cursor.subscriptions.count {
                let subscription = devices[subscriber]?.subscriptions[cursor.subscriptions[cursor.subscriptionIndex]]
                let publisher = devices[cursor.publishers[cursor.publisherIndex - 1]]
                cursor.subscriptionIndex += 1
                cursor.candidates = subscription.flatMap { publisher?.candidates(for: $0).sorted() } ?? []
                cursor.candidateIndex = 0
                continue
            }
            guard cursor.publisherIndex < cursor.publishers.count else { return nil }
            cursor.publisherIndex += 1
            cursor.subscriptions = (devices[subscriber]?.subscriptions.keys).map { $0.sorted() } ?? []
            cursor.subscriptionIndex = 0
            cursor.candidates = []
            cursor.candidateIndex = 0
        }
    }

    // MARK: Time

    /// Removes what expired or timed out by now, with lost events.
    func sweep() {
        let now = clock.nowMs
        for deadline in deadlines.popDue(now: now) {
            switch deadline {
            case .publication(let device, let id):
                guard let publication = devices[device]?.publications[id] else { continue }
                if publication.isLive(now) {
                    deadlines.schedule(deadline, at: publication.expiresAtMs)
                } else {
                    removePublication(device: device, id: id)
                }
            case .subscription(let device, let id):
                guard let subscription = devices[device]?.subscriptions[id], subscription.expiresAtMs != 0 else { continue }
                if subscription.isLive(now) {
                    deadlines.schedule(deadline, at: subscription.expiresAtMs)
                } else {
                    removeSubscription(device: device, id: id, notify: true)
                }
            case .edge(let key):
                guard var edge = edges[key] else { continue }
                edge.tokens = edge.tokens.filter { $0.value + edgeTimeoutMs > now }
                if let oldest = edge.tokens.values.min() {
                    edges[key] = edge
                    deadlines.schedule(deadline, at: oldest + edgeTimeoutMs)
                } else {
                    removeEdge(key)
                    recompute(subscriber: key.observer, publisher: key.observed)
                    recompute(subscriber: key.observed, publisher: key.observer)
                }
            }
        }
    }

    /// Entries of the deadline heap, stale ones included: what deleted
    /// objects must not keep growing.
    var deadlineEntries: Int { deadlines.count }

    // MARK: Evaluation

    /// Re-evaluates one (subscriber device, publisher device) pair and pushes
    /// the difference: lost for what stopped being near, found for what became near.
    private func recompute(subscriber: String, publisher: String) {
        let pair = Pair(subscriber: subscriber, publisher: publisher)
        let now = clock.nowMs
        var near = Set<MatchKey>()
        if subscriber != publisher, let subscriberDevice = devices[subscriber], let publisherDevice = devices[publisher],
           subscriberDevice.project == publisherDevice.project, !publisherDevice.publications.isEmpty {
            for subscription in subscriberDevice.subscriptions.values where subscription.isLive(now) {
                for id in publisherDevice.candidates(for: subscription) {
                    guard let publication = publisherDevice.publications[id], publication.isLive(now),
                          strongestEdge(subscription, publication, subscriber: subscriber, publisher: publisher) != nil
                    else { continue }
                    near.insert(MatchKey(subscription: subscription.id, publication: id))
                }
            }
        }
        let previous = matches[pair] ?? []
        guard near != previous else { return }
        store(near, for: pair)
        for key in previous.subtracting(near).sorted() {
            emit(.lost(subscription: key.subscription, source: Self.source(publisher, key.publication)), to: subscriber)
        }
        for key in near.subtracting(previous).sorted() {
            if let match = makeMatch(subscriber: subscriber, publisher: publisher, key: key) {
                emit(.found(match), to: subscriber)
            }
        }
    }

    /// The edge that makes the pair near with the highest RSSI, if any does:
    /// one this replica is home to, or a copy.
    private func strongestEdge(_ subscription: Subscription, _ publication: Publication, subscriber: String,
                               publisher: String) -> (medium: Medium, edge: Reach)? {
        var best: (medium: Medium, edge: Reach)?
        let earshot = subscription.earshot || publication.earshot
        func consider(_ key: EdgeKey, _ reach: Reach) {
            guard !earshot || reach.inEarshot(key.medium) else { return }
            if best == nil || reach.rssi > best!.edge.rssi { best = (key.medium, reach) }
        }
        func consider(_ key: EdgeKey) {
            if let edge = edges[key] { consider(key, edge.reach) }
            if let held = copies[key] { for reach in held.values { consider(key, reach) } }
        }
        for medium in Medium.allCases where publication.mediums.contains(medium) && subscription.mediums.contains(medium) {
            if publication.mode.broadcasts && subscription.mode.scans {
                consider(EdgeKey(observer: subscriber, observed: publisher, medium: medium))
            }
            if publication.mode.scans && subscription.mode.broadcasts {
                consider(EdgeKey(observer: publisher, observed: subscriber, medium: medium))
            }
        }
        return best
    }

    private func makeMatch(subscriber: String, publisher: String, key: MatchKey) -> Match? {
        guard let subscription = devices[subscriber]?.subscriptions[key.subscription],
              let publication = devices[publisher]?.publications[key.publication],
              let (medium, edge) = strongestEdge(subscription, publication, subscriber: subscriber, publisher: publisher)
        else { return nil }
        return Match(subscription: subscription.id, source: Self.source(publisher, publication.id),
                     namespace: publication.namespace, type: publication.type, content: publication.content,
                     medium: medium, rssi: edge.rssi, distance: edge.distance)
    }

    /// The opaque id of a publication: unique across devices, stable while it lives.
    static func source(_ device: String, _ publication: String) -> String { "\(device)/\(publication)" }

    // MARK: Bookkeeping

    private func store(_ near: Set<MatchKey>, for pair: Pair) {
        if near.isEmpty {
            matches[pair] = nil
            matchedPublishers[pair.subscriber]?.remove(pair.publisher)
            if matchedPublishers[pair.subscriber]?.isEmpty == true { matchedPublishers[pair.subscriber] = nil }
        } else {
            matches[pair] = near
            matchedPublishers[pair.subscriber, default: []].insert(pair.publisher)
        }
    }

    /// Queues `event` on the device's stream; `generation` marks a snapshot
    /// page with more to come.
    private func emit(_ event: StreamEvent, to device: String, generation: UInt64? = nil) {
        guard let session = sessions[device] else { return }
        // The connection cannot keep up (too many events or bytes waiting):
        // end the stream rather than lose events silently; the device
        // reconnects and takes a snapshot. An event over the byte budget on
        // its own (one large match) still goes out when nothing waits.
        let bytes = event.bufferedBytes
        let waiting = session.backlog.waiting
        guard waiting == 0 || waiting + bytes <= streamBufferBytes else {
            session.continuation.finish()
            return
        }
        session.backlog.add(bytes)
        let output: StreamOutput = generation.map { .snapshotPage(event, generation: $0) } ?? .event(event)
        if case .dropped = session.continuation.yield(StreamOutputs.Queued(output: output, bytes: bytes)) {
            session.continuation.finish()
        }
    }

    /// Devices sharing an edge with `device`, in a stable order.
    private func linkedDevices(_ device: String) -> [String] {
        (links[device] ?? [:]).keys.sorted()
    }

    private func link(_ a: String, _ b: String, by delta: Int) {
        for (from, to) in [(a, b), (b, a)] {
            let count = (links[from]?[to] ?? 0) + delta
            if count > 0 {
                links[from, default: [:]][to] = count
            } else {
                links[from]?[to] = nil
                if links[from]?.isEmpty == true { links[from] = nil }
            }
        }
    }

    /// Removes an edge this replica is home to (without re-evaluating), and
    /// its copies elsewhere; returns whether there was one.
    @discardableResult
    private func removeEdge(_ key: EdgeKey) -> Bool {
        guard edges.removeValue(forKey: key) != nil else { return false }
        deadlines.cancel(.edge(key))
        if !isPresent(key) { link(key.observer, key.observed, by: -1) }
        tell(.remove([key]), about: key)
        return true
    }

    /// Whether the edge is here at all: this replica's own or a copy.
    private func isPresent(_ key: EdgeKey) -> Bool { edges[key] != nil || copies[key] != nil }
}
