import Foundation
import Logging
import NearbyCore
import ServerAPI
import Synchronization

/// The server's logic behind the API, free of HTTP: who a caller is, and what
/// registering, tokens, publications, subscriptions and sightings do to the
/// stored and the in-memory state. Client mistakes throw ``APIError``; any
/// other error is the server's own.
public final class NearbyService: Sendable {
    public let configuration: ServerConfiguration
    let storage: any ServerStorage
    let matcher: Matcher
    /// How the matcher's events reach it, and the other replicas' matchers.
    let feed: any MatcherFeed
    /// The connection server: devices' direct channels and application servers.
    public let connections: ConnectionHub
    /// This replica's share of the devices' partitions, among replicas sharing
    /// a PostgreSQL database; nil for a server alone, which owns them all.
    let partitions: PartitionOwnership?
    /// How the matcher's edges reach the replicas serving their devices,
    /// when the replicas divide the devices (``Matcher/routeEdges(_:)``);
    /// nil when every replica applies every report.
    let edges: EdgeExchange?
    let clock: any WallClock
    let logger: Logger
    private let tokens = Mutex(TokenCache())
    let authenticated = Mutex(DeviceCache())
    /// How far the log of project deletions has been read.
    private let projectDeletionPosition = Mutex<Int64>(0)
    /// How far the log of device deletions has been read.
    private let deviceDeletionPosition = Mutex<Int64>(0)
    /// When the next look for devices idle past `[limits] device-idle-days` is due.
    private let nextStaleSweepMs = Mutex<UInt64>(0)
    private let serializer = DeviceSerializer()
    /// Set once graceful shutdown begins (``beginStopping()``).
    private let stopping = Mutex(false)
    let registrations: RegistrationLimiter

    private init(storage: any ServerStorage, configuration: ServerConfiguration, clock: any WallClock, logger: Logger,
                 matcher: Matcher, feed: any MatcherFeed, connections: ConnectionHub, partitions: PartitionOwnership?,
                 edges: EdgeExchange?) {
        self.storage = storage
        self.partitions = partitions
        self.edges = edges
        self.matcher = matcher
        self.feed = feed
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
        registrations = RegistrationLimiter(limits: .init(
            perAddressPerMinute: configuration.limits.registrationsPerAddressPerMinute,
            perProjectPerMinute: configuration.limits.registrationsPerProjectPerMinute))
        self.connections = connections
    }

    /// A service over `storage`, with the devices, live tokens, publications
    /// and subscriptions it holds already loaded. On a database that several
    /// replicas may share (PostgreSQL) it listens to the others' events first.
    public static func start(storage: any ServerStorage, configuration: ServerConfiguration,
                             clock: any WallClock = SystemWallClock(),
                             logger: Logger = Logger(label: "nearby-server")) async throws -> NearbyService {
        try await start(storage: storage, configuration: configuration, clock: clock, logger: logger,
                        // Several server processes may share a PostgreSQL database; one alone holds an SQLite file.
                        buses: (storage as? PostgresStorage).map {
                            ReplicaBuses(matching: PostgresReplicaBus(storage: $0, channel: PostgresReplicaBus.matching, logger: logger),
                                         connections: PostgresReplicaBus(storage: $0, channel: PostgresReplicaBus.connections, logger: logger))
                        },
                        leases: storage as? PostgresStorage)
    }

    /// The connection server's hub of a replica whose matcher is `matcher`.
    private static func makeConnections(storage: any ServerStorage, configuration: ServerConfiguration, clock: any WallClock,
                                        logger: Logger, matcher: Matcher) -> ConnectionHub {
        ConnectionHub(storage: storage, clock: clock, replica: matcher.replica,
                      leaseMs: UInt64(configuration.xmpp.claimLeaseSeconds) * 1000, domain: configuration.xmpp.domain,
                      maxUnackedPerSession: configuration.xmpp.maxUnackedPerConnection,
                      maxPendingDownstreamPerDevice: configuration.xmpp.maxPendingDownstreamPerDevice,
                      deviceLimits: .init(channelQueue: configuration.limits.maxChannelQueue,
                                          upstreamPerDevice: configuration.limits.maxUpstreamPerDevice,
                                          receiptsPerProject: configuration.xmpp.maxPendingReceiptsPerProject),
                      logger: logger)
    }

    /// Asks every replica for the edges of devices of `partitions`, which this one took.
    private static func wantEdges(of partitions: Set<Int>, matcher: Matcher, feed: any MatcherFeed, logger: Logger) async {
        guard !partitions.isEmpty else { return }
        do {
            try await feed.publish(.edgesWanted(replica: matcher.replica, partitions: partitions.sorted()))
        } catch {
            logger.warning("could not ask the other replicas for the edges of the partitions taken: \(PostgresStorage.reason(error))",
                           metadata: ["partitions": "\(partitions.count)"])
        }
    }

    /// The replicas' buses: the matchers' and the connection hubs'.
    struct ReplicaBuses {
        var matching: any ReplicaBus
        var connections: any ReplicaBus
    }

    /// As ``start(storage:configuration:clock:logger:)``, over `buses` (tests
    /// give replicas on one SQLite file buses of their own).
    static func start(storage: any ServerStorage, configuration: ServerConfiguration, clock: any WallClock, logger: Logger,
                      buses: ReplicaBuses?, leases: (any PartitionLeases)? = nil) async throws -> NearbyService {
        let bus = buses?.matching
        let matcher = Matcher(clock: clock, replica: bus == nil ? "local" : Credentials.newReplicaID(),
                              edgeTimeoutMs: UInt64(configuration.edgeTimeoutSeconds) * 1000,
                              streamBufferBytes: configuration.limits.maxStreamBufferBytes,
                              snapshotPageBytes: configuration.limits.snapshotPageBytes)
        // Read before the devices: a project deleted while they load is noticed at the first sweep.
        let deletions = try await storage.projectDeletions(after: 0)
        let deviceDeletions = try await storage.deviceDeletions(after: 0)
        // What the matcher holds of storage: loaded now, and again by a replica at each join of its bus.
        let contents: @Sendable () async throws -> Matcher.Contents = {
            try await Matcher.Contents(devices: storage.devices(), publications: storage.publications(device: nil),
                                       subscriptions: storage.subscriptions(device: nil))
        }
        let feed: any MatcherFeed
        if let bus {
            feed = try await ReplicatedMatcherFeed.start(bus: bus, matcher: matcher, logger: logger, reload: contents,
                                                         content: { try await storage.publicationContent(device: $0, id: $1) })
            logger.info("listening to the other replicas", metadata: ["replica": "\(matcher.replica)"])
        } else {
            await matcher.resync(try await contents())
            feed = LocalMatcherFeed(matcher: matcher)
        }
        let connections = makeConnections(storage: storage, configuration: configuration, clock: clock, logger: logger,
                                          matcher: matcher)
        // Replicas dividing the devices: each applies its own devices' reports and copies what changes to the
        // replicas serving the devices on the edges' other ends (doc/architecture.md, "Partitions and their owners").
        var edges: EdgeExchange?
        if leases != nil, let postgres = storage as? PostgresStorage {
            let exchange = EdgeExchange(storage: postgres, matcher: matcher, logger: logger) {
                // Copies sent while this replica was not listening are lost to it: it asks for them all again,
                // and sends the others theirs (what it sent meanwhile may have found them not listening).
                await wantEdges(of: await matcher.servedPartitions, matcher: matcher, feed: feed, logger: logger)
                await matcher.resendEdgesToEveryone()
            }
            await matcher.routeEdges { exchange.send(to: $0, $1) }
            edges = exchange
        }
        let partitions = leases.map {
            PartitionOwnership(replica: matcher.replica, leases: $0, leaseMs: UInt64(configuration.replication.leaseSeconds) * 1000,
                               clock: clock, logger: logger, rounded: { round in
                await matcher.partitionsChanged(owners: round.owners, live: round.live)
                await connections.closeChannels(servedElsewhere: round.owners)
                await wantEdges(of: round.change.gained, matcher: matcher, feed: feed, logger: logger)
            }, left: { [edges] in
                // Stopping: the others keep this replica's edges until its devices report to them.
                let (replicas, copies) = await matcher.bequest()
                if let edges, !copies.isEmpty { await edges.sendNow(.bequest(copies), to: replicas) }
            })
        }
        let service = NearbyService(storage: storage, configuration: configuration, clock: clock, logger: logger,
                                    matcher: matcher, feed: feed, connections: connections, partitions: partitions, edges: edges)
        try await service.connections.start(bus: buses?.connections)
        service.projectDeletionPosition.withLock { $0 = deletions.position }
        service.deviceDeletionPosition.withLock { $0 = deviceDeletions.position }
        let live = try await storage.liveTokens(nowMs: clock.nowMs)
        service.tokens.withLock { cache in live.forEach { cache.insert($0) } }
        return service
    }

    // MARK: Callers

    /// The device that `authorization` (`Bearer SECRET`) belongs to, which must
    /// be `device`, the device the path names.
    public func authenticate(device: String, authorization: String?) async throws -> DeviceRecord {
        let secret = try CallerCredentials.bearerSecret(authorization, credential: "the device's secret")
        guard let record = try await knownDevice(secretHash: Credentials.hash(secret)) else {
            throw APIError(.unauthenticated, "unknown device secret")
        }
        guard record.id == device else {
            throw APIError(.permissionDenied, "the credential is of another device than '\(device)'")
        }
        return record
    }

    /// The device a secret belongs to: from memory, or read from storage and
    /// then kept in memory. Its last-seen time is written when due.
    private func knownDevice(secretHash: Data) async throws -> DeviceRecord? {
        let (cached, generation) = authenticated.withLock { ($0.device(secretHash: secretHash), $0.generation) }
        let record: DeviceRecord
        if let cached {
            record = cached
        } else {
            guard let stored = try await storage.device(secretHash: secretHash) else { return nil }
            authenticated.withLock { $0.insert(stored, secretHash: secretHash, readAt: generation) }
            record = stored
        }
        let now = clock.nowMs
        if authenticated.withLock({ $0.seenWriteIsDue(record.id, nowMs: now, resolutionMs: Self.lastSeenResolutionMs) }) {
            try await storage.touchDevice(id: record.id, atMs: now)
        }
        return record
    }

    /// How often at most a device's last-seen time is written: idle devices
    /// expire after days, so an hour's precision costs nothing.
    static let lastSeenResolutionMs: UInt64 = 3_600_000

    // MARK: Devices

    /// How long `GET /v1/ready` waits for the database to answer.
    static let readinessTimeout = Duration.seconds(2)

    /// `GET /v1/ready`: answers when the database answers a trivial query
    /// within ``readinessTimeout`` and, among replicas, this one hears the
    /// others (or does again within as long); otherwise
    /// ``APIError/Code/unavailable``.
    /// Why is logged, not answered: the endpoint needs no credential, and the
    /// reason may name the database's host, socket or role.
    public func checkReady() async throws(APIError) {
        let storage = self.storage
        // The ping is left to finish on its own, not awaited: a query on a
        // connection whose peer went silent ignores cancellation, and a task
        // group would wait for it past the deadline.
        let outcome = await FirstOutcome.race(within: Self.readinessTimeout) { try await storage.ping() }
        if case .failure(let error) = outcome {
            logger.warning("not ready: the database does not answer", metadata: ["reason": "\(error)"])
            throw APIError(.unavailable, "the database does not answer")
        }
        let feed = self.feed
        guard case .success = await FirstOutcome.race(within: Self.readinessTimeout, { await feed.untilListening() }) else {
            // Its matcher misses the others' events: found and lost would be wrong here.
            throw APIError(.unavailable, "not listening to the other replicas")
        }
    }

    /// `POST /v1/devices`: a new device of the API key's project, within the
    /// registration rates of the caller's address and of the project.
    public func registerDevice(apiKey: String?, from address: ClientAddress) async throws -> DeviceRegistration {
        let project = try await CallerCredentials.project(apiKey: apiKey, storage: storage)
        do {
            try registrations.admit(from: address, project: project.name, nowMs: clock.nowMs)
        } catch {
            throw Self.rateLimited(error, project: project.name, limits: configuration.limits)
        }
        let limit = configuration.limits.maxDevicesPerProject
        let record = DeviceRecord(id: Credentials.newDeviceID(), project: project.name, namespace: project.namespace,
                                  createdAtMs: clock.nowMs)
        let secret = Credentials.newSecret()
        let created: Bool
        do {
            created = try await storage.createDevice(record, secretHash: Credentials.hash(secret), limit: limit)
        } catch StorageError.projectNotFound {
            throw APIError(.unauthenticated, "unknown API key")
        }
        guard created else {
            throw APIError(.limitExceeded, "project '\(project.name)' has \(limit) devices, its limit ([limits] max-devices-per-project)")
        }
        try await feed.publish(.deviceAdded(id: record.id, project: project.name))
        logger.info("device registered", metadata: ["device": "\(record.id)", "project": "\(project.name)"])
        return DeviceRegistration(device: record.id, secret: secret, project: project.name, namespace: project.namespace)
    }

    private static func rateLimited(_ refusal: RegistrationLimiter.Refusal, project: String,
                                    limits: ServerConfiguration.Limits) -> RetryLater {
        let seconds = Int((refusal.retryAfterMs + 999) / 1000)
        let error = switch refusal.limit {
        case .address:
            APIError(.rateLimited, "this address registered \(limits.registrationsPerAddressPerMinute) devices in the last minute, "
                     + "its limit ([limits] registrations-per-address-per-minute); try again in \(seconds) s")
        case .project:
            APIError(.rateLimited, "project '\(project)' registered \(limits.registrationsPerProjectPerMinute) devices in the last "
                     + "minute, its limit ([limits] registrations-per-project-per-minute); try again in \(seconds) s")
        }
        return RetryLater(error: error, afterSeconds: seconds)
    }

    /// `DELETE /v1/devices/{device}`: the device and all it had; subscribers
    /// that had found its publications get lost; its stream and channel close.
    public func unregister(_ device: DeviceRecord) async throws {
        try await serializer.run(device.id) {
            _ = try await self.storage.deleteDevice(id: device.id)
            self.authenticated.withLock { $0.remove(device) }
            self.tokens.withLock { $0.remove(devices: [device.id]) }
            try await self.feed.publish(.devicesRemoved([device.id]))
            await self.connections.devicesDeleted([device.id])
        }
        logger.info("device unregistered", metadata: ["device": "\(device.id)"])
    }

    // MARK: Tokens

    /// `POST /v1/devices/{device}/tokens`: the device's newest token again
    /// until its refresh time, then a fresh random token, unused by any stored
    /// token. Earlier tokens stay valid until their own expiry. Asking early
    /// costs nothing and stores nothing, so a device holds at most
    /// lifetime / (lifetime - overlap), rounded up, live tokens.
    public func issueToken(for device: DeviceRecord) async throws -> IssuedToken {
        // In the device's turn, so that requests at once do not each draw a token.
        try await serializer.run(device.id) {
            let now = self.clock.nowMs
            let overlapMs = UInt64(self.configuration.tokenOverlapSeconds) * 1000
            if let newest = self.tokens.withLock({ $0.newest(of: device.id) }), newest.expiresAtMs > now + overlapMs {
                return IssuedToken(token: newest.token, expiresAtMs: newest.expiresAtMs,
                                   refreshAtMs: newest.expiresAtMs - overlapMs)
            }
            let expires = now + UInt64(self.configuration.tokenLifetimeSeconds) * 1000
            // 64 random bits: a clash is all but impossible, but must not be fatal.
            for _ in 0..<8 {
                let token = Token(bytes: Credentials.randomBytes(Token.byteCount))!
                guard self.tokens.withLock({ $0.byToken[token] == nil }) else { continue }
                let record = TokenRecord(token: token, device: device.id, issuedAtMs: now, expiresAtMs: expires)
                let inserted = try await self.mapStorageErrors { try await self.storage.insertToken(record) }
                if inserted {
                    self.tokens.withLock { $0.insert(record) }
                    return IssuedToken(token: token, expiresAtMs: expires, refreshAtMs: expires - overlapMs)
                }
            }
            throw APIError(.internalError, "could not draw an unused token")
        }
    }

    // MARK: Publications

    /// `PUT /v1/devices/{device}/publications/{id}`: creates or replaces.
    public func putPublication(_ spec: PublicationSpec, id: String, for device: DeviceRecord) async throws -> PublicationRecord {
        let stored = try Validation.publication(spec, id: id, device: device.id, projectNamespace: device.namespace,
                                                nowMs: clock.nowMs)
        _ = try await commit([.putPublication(stored)], for: device)[0].get()
        return Self.record(stored)
    }

    /// `GET /v1/devices/{device}/publications`: the device's unexpired publications, by id.
    public func publications(of device: DeviceRecord) async throws -> PublicationList {
        let now = clock.nowMs
        let stored = try await storage.publications(device: device.id)
        return PublicationList(publications: stored.filter { $0.expiresAtMs > now }.map(Self.record))
    }

    /// `DELETE /v1/devices/{device}/publications/{id}`.
    public func deletePublication(id: String, of device: DeviceRecord) async throws {
        try Validation.checkID(id, kind: "publication")
        guard try await commit([.deletePublication(id: id)], for: device)[0].get() != .absent else {
            throw APIError(.notFound, "no publication '\(id)' on this device")
        }
    }

    private static func record(_ stored: StoredPublication) -> PublicationRecord {
        PublicationRecord(id: stored.id, namespace: stored.namespace, type: stored.type, mediums: stored.mediums,
                          mode: stored.mode, expiresAtMs: stored.expiresAtMs)
    }

    // MARK: Subscriptions

    /// `PUT /v1/devices/{device}/subscriptions/{id}`: creates or replaces.
    public func putSubscription(_ spec: SubscriptionSpec, id: String, for device: DeviceRecord) async throws -> SubscriptionRecord {
        let stored = try Validation.subscription(spec, id: id, device: device.id, projectNamespace: device.namespace,
                                                 nowMs: clock.nowMs)
        _ = try await commit([.putSubscription(stored)], for: device)[0].get()
        return Self.record(stored)
    }

    /// `GET /v1/devices/{device}/subscriptions`: the device's unexpired subscriptions, by id.
    public func subscriptions(of device: DeviceRecord) async throws -> SubscriptionList {
        let now = clock.nowMs
        let stored = try await storage.subscriptions(device: device.id)
        return SubscriptionList(subscriptions: stored.filter { $0.expiresAtMs == 0 || $0.expiresAtMs > now }.map(Self.record))
    }

    /// `DELETE /v1/devices/{device}/subscriptions/{id}`: its matches end
    /// without lost events (the device knows).
    public func deleteSubscription(id: String, of device: DeviceRecord) async throws {
        try Validation.checkID(id, kind: "subscription")
        guard try await commit([.deleteSubscription(id: id)], for: device)[0].get() != .absent else {
            throw APIError(.notFound, "no subscription '\(id)' on this device")
        }
    }

    private static func record(_ stored: StoredSubscription) -> SubscriptionRecord {
        SubscriptionRecord(id: stored.id, namespace: stored.namespace, type: stored.type, mediums: stored.mediums,
                           mode: stored.mode, expiresAtMs: stored.expiresAtMs)
    }

    // MARK: Batches

    /// `POST /v1/devices/{device}/changes`: each change as its own request
    /// would apply it, except that deleting an unknown id is no error, in
    /// order, in one storage transaction. A refused change does not stop the
    /// later ones.
    public func applyChanges(_ batch: ChangeBatch, for device: DeviceRecord) async throws -> ChangeResults {
        let limit = configuration.limits.maxChangesPerBatch
        guard batch.changes.count <= limit else {
            throw APIError(.payloadTooLarge,
                           "the batch holds \(batch.changes.count) changes; at most \(limit) are taken at once ([limits] max-changes-per-batch)")
        }
        let now = clock.nowMs
        var errors = [APIError?](repeating: nil, count: batch.changes.count)
        var valid: [ObjectChange] = []
        var positions: [Int] = []
        for (position, change) in batch.changes.enumerated() {
            do throws(APIError) {
                valid.append(try Validation.change(change, device: device.id, projectNamespace: device.namespace, nowMs: now))
                positions.append(position)
            } catch {
                errors[position] = error
            }
        }
        for (position, outcome) in zip(positions, try await commit(valid, for: device)) {
            if case .failure(let error) = outcome { errors[position] = error }
        }
        return ChangeResults(results: zip(batch.changes, errors).map { ChangeResults.Result(id: $0.id, error: $1) })
    }

    /// Stores `changes` in one transaction and hands those that took effect to
    /// the matcher, in the device's turn, so that both see every change of the
    /// device in the same order. Returns what each did, or why it was refused.
    private func commit(_ changes: [ObjectChange], for device: DeviceRecord) async throws -> [Result<ChangeOutcome, APIError>] {
        guard !changes.isEmpty else { return [] }
        let limits = ObjectLimits(publications: configuration.limits.maxPublicationsPerDevice,
                                  subscriptions: configuration.limits.maxSubscriptionsPerDevice)
        return try await serializer.run(device.id) {
            let outcomes = try await self.mapStorageErrors {
                try await self.storage.applyChanges(changes, device: device.id, limits: limits)
            }
            // A deletion of what is absent goes too: it may be the retry of
            // one stored whose event was lost, and it changes nothing elsewhere.
            let applied = zip(changes, outcomes).filter { $0.1 != .limitReached }.map(\.0)
            if !applied.isEmpty { try await self.feed.publish(.objects(device: device.id, changes: applied)) }
            return zip(changes, outcomes).map { change, outcome in
                outcome == .limitReached ? .failure(Self.limitExceeded(change, limits)) : .success(outcome)
            }
        }
    }

    private static func limitExceeded(_ change: ObjectChange, _ limits: ObjectLimits) -> APIError {
        if case .putSubscription = change {
            return APIError(.limitExceeded,
                            "the device has \(limits.subscriptions) subscriptions, its limit ([limits] max-subscriptions-per-device)")
        }
        return APIError(.limitExceeded,
                        "the device has \(limits.publications) publications, its limit ([limits] max-publications-per-device)")
    }

    // MARK: Sightings

    /// `POST /v1/devices/{device}/sightings`: resolves each heard token and
    /// updates the device's edges; found and lost go out on the streams
    /// before this returns.
    public func reportSightings(_ report: SightingReport, from device: DeviceRecord) async throws -> SightingResults {
        let limit = configuration.limits.maxSightingsPerReport
        let count = report.seen.count + report.gone.count
        guard count <= limit else {
            throw APIError(.payloadTooLarge,
                           "the report holds \(count) sightings (seen and gone); at most \(limit) are taken at once ([limits] max-sightings-per-report)")
        }
        let records = try await resolve(report.seen.map(\.token) + report.gone.map(\.token))
        let now = clock.nowMs
        var results: [SightingResults.Result] = []
        var seen: [SeenEdge] = []
        results.reserveCapacity(report.seen.count)
        for sighting in report.seen {
            guard let record = records[sighting.token] else {
                results.append(.init(token: sighting.token, status: .unknown))
                continue
            }
            guard record.expiresAtMs > now else {
                results.append(.init(token: sighting.token, status: .expired))
                continue
            }
            results.append(.init(token: sighting.token, status: .ok))
            seen.append(SeenEdge(observed: record.device, token: sighting.token, medium: sighting.medium,
                                 rssi: sighting.rssi, distance: sighting.distance))
        }
        // A gone token may have expired since it was heard: it still names its device.
        let gone = report.gone.compactMap { entry in
            records[entry.token].map { GoneEdge(observed: $0.device, token: entry.token, medium: entry.medium) }
        }
        // Tokens of another project are unknown to this device: no edge, and no hint that they are valid.
        try await knowInMatcher(device)
        let foreign = await matcher.foreignTokens(observer: device.id, seen: seen)
        let event = MatcherEvent.sightings(observer: device.id, atMs: now, seen: seen.filter { !foreign.contains($0.token) },
                                           gone: gone)
        if edges != nil {
            // This replica serves the device: the edges its report makes are at home here.
            await matcher.apply(event)
        } else {
            try await feed.publish(event)
        }
        if !foreign.isEmpty {
            for index in results.indices where foreign.contains(results[index].token) { results[index].status = .unknown }
        }
        return SightingResults(results: results)
    }

    /// Makes sure the matcher holds the device: one registered on another
    /// replica may be asked for here before that replica's event has come.
    private func knowInMatcher(_ device: DeviceRecord) async throws {
        guard await !matcher.hasDevice(device.id) else { return }
        try await feed.publish(.deviceAdded(id: device.id, project: device.project))
    }

    // MARK: Streams

    /// Opens the device's stream on this replica (closing one it had on any
    /// replica), announced to every replica. Nil when the device is gone.
    func openStream(device: DeviceRecord) async throws -> StreamHandle? {
        try await knowInMatcher(device)
        guard let handle = await matcher.openStream(device: device.id) else { return nil }
        do {
            try await feed.publish(.streamOpened(device: device.id, owner: StreamOwner(replica: matcher.replica, stream: handle.id)))
        } catch {
            _ = await matcher.closeStream(device: device.id, id: handle.id)
            throw error
        }
        return handle
    }

    /// The server began to stop: streams it closes from now on are not the
    /// devices leaving, and take no sightings away (their devices report
    /// them again wherever they reconnect).
    func beginStopping() {
        stopping.withLock { $0 = true }
    }

    /// The connection of the device's stream ended: unless a newer stream
    /// replaced it, or the server is stopping, every replica drops the
    /// device's sightings.
    func closeStream(device: String, handle: StreamHandle) async {
        guard await matcher.closeStream(device: device, id: handle.id), !stopping.withLock({ $0 }) else { return }
        do {
            try await feed.publish(.streamClosed(device: device, owner: StreamOwner(replica: matcher.replica, stream: handle.id)))
        } catch {
            // The sightings then time out, on the replicas that missed this, instead.
            logger.warning("the end of a stream could not be told to the replicas",
                           metadata: ["device": "\(device)", "error": "\(error)"])
        }
    }

    /// The stored records of `wanted`, from memory for live tokens and from
    /// storage for the rest.
    private func resolve(_ wanted: [Token]) async throws -> [Token: TokenRecord] {
        var missing: [Token] = []
        var found: [Token: TokenRecord] = [:]
        tokens.withLock { cache in
            for token in wanted {
                if let record = cache.byToken[token] { found[token] = record } else { missing.append(token) }
            }
        }
        guard !missing.isEmpty else { return found }
        let stored = try await storage.tokens(missing)
        let now = clock.nowMs
        // Tokens issued by another server sharing the storage become known here.
        tokens.withLock { cache in
            for record in stored.values where record.expiresAtMs > now { cache.insert(record) }
        }
        return found.merging(stored) { cached, _ in cached }
    }

    // MARK: Housekeeping

    /// Removes what expired or timed out, in memory (with lost events) and in
    /// storage, forgets tokens a day past expiry, and notices projects deleted
    /// by another process. The server calls this every second; tests call it
    /// after moving their clock.
    public func sweep() async {
        let now = clock.nowMs
        await matcher.sweep()
        await connections.sweep()
        tokens.withLock { $0.removeExpired(nowMs: now) }
        registrations.sweep(nowMs: now)
        do {
            try await storage.deleteExpiredPublications(nowMs: now)
            try await storage.deleteExpiredSubscriptions(nowMs: now)
            try await storage.purgeTokens(expiredBeforeMs: now > Self.tokenRetentionMs ? now - Self.tokenRetentionMs : 0)
            try await dropDeletedProjects()
            try await hourly(nowMs: now)
            try await dropDeletedDevices()
        } catch {
            logger.error("storage housekeeping failed", metadata: ["error": "\(error)"])
        }
    }

    /// Forgets the devices of projects deleted by another process (the CLI)
    /// since the last look: they stop authenticating, their streams close.
    /// A project of the same name may already have been created again: its
    /// devices stay.
    private func dropDeletedProjects() async throws {
        let deletions = try await storage.projectDeletions(after: projectDeletionPosition.withLock { $0 })
        guard !deletions.projects.isEmpty else { return }
        // Taken before storage is asked: a device registered in between is then not taken for deleted.
        let held = await matcher.devices(inProjects: deletions.projects)
        let remaining = try await storage.deviceIDs(projects: deletions.projects)
        let gone = held.subtracting(remaining)
        let uncached = authenticated.withLock { $0.remove(projects: deletions.projects, keeping: remaining) }
        tokens.withLock { $0.remove(devices: gone.union(uncached)) }
        await matcher.removeDevices(gone)
        await connections.devicesDeleted(gone)
        projectDeletionPosition.withLock { $0 = deletions.position }
        logger.info("projects deleted elsewhere were dropped", metadata: ["projects": "\(deletions.projects.sorted())"])
    }

    /// What is looked at once an hour: idle devices, and the ids of deleted ones.
    private func hourly(nowMs: UInt64) async throws {
        guard nextStaleSweepMs.withLock({ next in
            guard nowMs >= next else { return false }
            next = nowMs + Self.lastSeenResolutionMs
            return true
        }) else { return }
        try await expireIdleDevices(nowMs: nowMs)
        let keptMs = UInt64(configuration.limits.deletedDeviceDays) * 86_400_000
        let forgotten = try await storage.purgeDeletedDevices(deletedBeforeMs: nowMs > keptMs ? nowMs - keptMs : 0)
        if forgotten > 0 { logger.info("ids of deleted devices forgotten", metadata: ["count": "\(forgotten)"]) }
    }

    /// Deletes the devices that have not authenticated for `[limits]
    /// device-idle-days`: an app uninstalled, a registration an attacker made
    /// and dropped. Their subscribers lose what they published.
    private func expireIdleDevices(nowMs: UInt64) async throws {
        let idleMs = UInt64(configuration.limits.deviceIdleDays) * 86_400_000
        guard nowMs > idleMs else { return }
        var expired = 0
        while true {
            let stale = try await storage.staleDevices(lastSeenBeforeMs: nowMs - idleMs, limit: 1000)
            for device in stale {
                try await serializer.run(device.id) {
                    _ = try await self.storage.deleteDevice(id: device.id)
                }
            }
            await forget(Dictionary(stale.map { ($0.id, $0.project) }, uniquingKeysWith: { first, _ in first }))
            expired += stale.count
            if stale.count < 1000 { break }
        }
        if expired > 0 {
            logger.info("idle devices expired", metadata: ["devices": "\(expired)", "idleDays": "\(configuration.limits.deviceIdleDays)"])
        }
    }

    /// Forgets the devices another process deleted (`nearby-server project
    /// devices --remove-stale`) since the last look: they stop
    /// authenticating, their streams close, their publications are lost.
    private func dropDeletedDevices() async throws {
        let deletions = try await storage.deviceDeletions(after: deviceDeletionPosition.withLock { $0 })
        guard !deletions.devices.isEmpty else { return }
        await forget(deletions.devices)
        deviceDeletionPosition.withLock { $0 = deletions.position }
    }

    /// Drops devices deleted from storage (id to project) from memory: the
    /// caches, the matcher, which closes their streams, and the connection
    /// hub, which closes their channels.
    private func forget(_ devices: [String: String]) async {
        authenticated.withLock { cache in
            for (id, project) in devices { cache.remove(id: id, project: project) }
        }
        tokens.withLock { $0.remove(devices: Set(devices.keys)) }
        await matcher.removeDevices(Set(devices.keys))
        await connections.devicesDeleted(devices.keys)
    }

    /// How long an expired token is still told apart from an unknown one.
    static let tokenRetentionMs: UInt64 = 86_400_000

    /// Storage says the device is gone: it was unregistered while this request ran.
    private func mapStorageErrors<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch StorageError.deviceNotFound {
            throw APIError(.unauthenticated, "the device is no longer registered")
        }
    }
}

/// Live tokens in memory: most sightings resolve without storage.
private struct TokenCache {
    var byToken: [Token: TokenRecord] = [:]
    var byDevice: [String: Set<Token>] = [:]
    private var nextScanMs: UInt64 = 0

    mutating func insert(_ record: TokenRecord) {
        byToken[record.token] = record
        byDevice[record.device, default: []].insert(record.token)
    }

    /// The device's most recently issued token held, expired or not.
    func newest(of device: String) -> TokenRecord? {
        (byDevice[device] ?? []).compactMap { byToken[$0] }
            .max { ($0.issuedAtMs, $0.expiresAtMs) < ($1.issuedAtMs, $1.expiresAtMs) }
    }

    mutating func remove(devices: Set<String>) {
        for device in devices {
            for token in byDevice.removeValue(forKey: device) ?? [] { byToken[token] = nil }
        }
    }

    /// Drops expired entries, at most once a minute: an expired entry still
    /// resolves correctly (its expiry is checked), it only takes memory.
    mutating func removeExpired(nowMs: UInt64) {
        guard nowMs >= nextScanMs else { return }
        nextScanMs = nowMs + 60_000
        for (token, record) in byToken where record.expiresAtMs <= nowMs {
            byToken[token] = nil
            byDevice[record.device]?.remove(token)
            if byDevice[record.device]?.isEmpty == true { byDevice[record.device] = nil }
        }
    }
}
