import Beacons
import DaemonCore
import DBus
import Logging
import Mediums
import NearbyCore

/// The beacon side of subscriptions (`DeviceTypes` with `ble-beacon`): turns
/// the beacon frames the BLE backend hears into found and lost messages, with
/// the beacons' attachments from the server (or, for raw subscriptions, the
/// beacons themselves), and reports distance and signal changes.
///
/// A message is found when the first beacon carrying it comes in range and
/// lost when the last one has not been heard for the lost timeout. Every
/// `signalInterval` at most one `DistanceChanged` and one `BleSignalChanged`
/// is emitted per message, for the nearest beacon carrying it, and only when
/// the smoothed distance moved by 10 % or the smoothed RSSI by 2 dB since the
/// last one reported.
@BusActor
final class BeaconWatch {
    struct Settings {
        var lostTimeout: Duration
        var cacheTTL: Duration
        var signalInterval: Duration
        var maxBeacons: Int

        init(_ configuration: DaemonConfiguration) {
            lostTimeout = .milliseconds(Int64(configuration.beaconLostTimeout * 1000))
            cacheTTL = .milliseconds(Int64(configuration.beaconCacheTTL * 1000))
            signalInterval = .milliseconds(Int64(configuration.beaconSignalInterval * 1000))
            maxBeacons = configuration.maxBeacons
        }
    }

    /// The reserved namespace and types of raw beacon sightings.
    static let reservedNamespace = "__reserved_namespace"
    static func rawType(of kind: BeaconKind) -> String {
        switch kind {
        case .iBeacon: "__i_beacon_id"
        case .eddystoneEID: "__eddystone_eid"
        default: "__eddystone_uid"
        }
    }

    /// A subscription's beacon state.
    @BusActor
    private final class Watched {
        let object: SubscriptionObject
        let strategy: BeaconStrategy
        /// The beacons each found message is carried by.
        var carriers: [Message: Set<AdvertisedID>] = [:]
        /// The distance and RSSI last reported per message.
        var reported: [Message: (distance: Double, rssi: Int)] = [:]

        init(object: SubscriptionObject, strategy: BeaconStrategy) {
            self.object = object
            self.strategy = strategy
        }

        var subscription: Subscription { object.subscription }
    }

    private let settings: Settings
    private let source: any AttachmentSource
    /// When beacons are heard, for the server's observations.
    private let clock: any WallClock
    private let logger: Logger
    private var tracker: BeaconTracker
    private var cache: AttachmentCache
    private var watched: [String: Watched] = [:]
    private var tick: BusTimer?
    private var warnedFull = false

    init(settings: Settings, source: any AttachmentSource, clock: any WallClock, logger: Logger) {
        self.settings = settings
        self.source = source
        self.clock = clock
        self.logger = logger
        tracker = BeaconTracker(lostTimeout: settings.lostTimeout)
        cache = AttachmentCache(ttl: settings.cacheTTL)
    }

    /// How hard BLE must listen for the beacon subscriptions: full for one in
    /// the foreground that does not prefer low power, low power otherwise.
    func scanMode(inBackground: (Manager) -> Bool) -> ScanMode {
        var mode = ScanMode.off
        for entry in watched.values {
            let wanted: ScanMode = entry.strategy.lowPowerPreferred || inBackground(entry.subscription.manager) ? .lowPower : .full
            mode = max(mode, wanted)
        }
        return mode
    }

    func add(_ object: SubscriptionObject, strategy: BeaconStrategy) {
        let entry = Watched(object: object, strategy: strategy)
        watched[object.subscription.id] = entry
        // The beacons already in range, once Subscribe has answered: the
        // caller learns the object's path from the reply and would miss
        // signals sent before it.
        Task { [weak self] in
            guard let self, self.watched[object.subscription.id] === entry else { return }
            for beacon in self.tracker.beacons.values { self.update(beacon, for: entry) }
        }
        startTicking()
    }

    func remove(_ subscription: Subscription) {
        watched.removeValue(forKey: subscription.id)
    }

    /// A frame from the BLE backend.
    func heard(_ sighting: BeaconSighting) {
        guard !watched.isEmpty else { return }
        if tracker.beacons.count >= settings.maxBeacons, let id = sighting.frame.advertisedID, tracker.beacons[id] == nil {
            if !warnedFull {
                warnedFull = true
                logger.warning("tracking \(settings.maxBeacons) beacons already ([beacons] max-beacons); ignoring more")
            }
            return
        }
        guard let id = tracker.heard(sighting, at: .now), let beacon = tracker.beacons[id] else { return }
        logger.debug("beacon in range", metadata: ["beacon": "\(id)", "rssi": "\(sighting.rssi)"])
        for entry in watched.values { update(beacon, for: entry) }
    }

    // MARK: Found and lost

    /// Brings `entry`'s found messages from `beacon` to what is known now,
    /// asking the server when the answer is not known.
    private func update(_ beacon: BeaconTracker.Beacon, for entry: Watched) {
        guard let messages = messages(of: beacon, for: entry) else { return }
        let prefix = Self.sourcePrefix(beacon.id)
        let wanted = Dictionary(uniqueKeysWithValues: messages.map { (Self.source(beacon.id, $0), $0) })
        for source in entry.subscription.found.sourceIDs where source.hasPrefix(prefix) && wanted[source] == nil {
            drop(source, of: beacon.id, from: entry)
        }
        for (source, message) in wanted {
            entry.carriers[message, default: []].insert(beacon.id)
            let info = SightingInfo(medium: .ble, rssi: Int(beacon.rssi.rounded()), distanceMeters: beacon.distance,
                                    beacon: beacon.info)
            guard entry.subscription.found.add(source: source, message: message, info: info) else { continue }
            entry.reported[message] = (beacon.distance, info.rssi)
            entry.object.emitFound(message, info)
            logger.debug("beacon message found", metadata: ["subscription": "\(entry.object.path)", "beacon": "\(beacon.id)",
                                                            "type": "\(message.type)"])
        }
    }

    private func drop(_ source: String, of beacon: AdvertisedID, from entry: Watched) {
        guard let carried = entry.subscription.found.message(of: source) else { return }
        entry.carriers[carried]?.remove(beacon)
        // Nil while another source (a beacon, or a device) still carries it.
        guard let (message, info) = entry.subscription.found.remove(source: source) else { return }
        entry.carriers.removeValue(forKey: message)
        entry.reported.removeValue(forKey: message)
        entry.object.emitLost(message, info)
        logger.debug("beacon message lost", metadata: ["subscription": "\(entry.object.path)", "beacon": "\(beacon)"])
    }

    /// What `beacon` yields for `entry`: its id for a raw subscription, its
    /// attachments that pass the filter otherwise; nil while the server has
    /// not answered (the question is asked).
    private func messages(of beacon: BeaconTracker.Beacon, for entry: Watched) -> [Message]? {
        if beacon.kind == .iBeacon, !entry.strategy.includeIBeacons { return [] }
        if entry.strategy.raw {
            return [Message(namespace: Self.reservedNamespace, type: Self.rawType(of: beacon.kind), content: beacon.id.bytes)]
        }
        let key = Self.key(entry, beacon.id)
        if cache.shouldAsk(key, at: .now) { ask(key, telemetry: beacon.telemetry) }
        guard let attachments = cache.attachments(key) else { return nil }
        let filter = entry.subscription.filter
        return attachments.filter { filter.type.isEmpty || $0.type == filter.type }
            .map { Message(namespace: $0.namespace, type: $0.type, content: $0.data) }
    }

    private func ask(_ key: AttachmentCache.Key, telemetry: [UInt8]?) {
        let source = source
        // Asked as the beacon is heard: now is when it was observed.
        let observedAtMs = clock.nowMs
        Task {
            do {
                let attachments = try await source.attachments(apiKey: key.apiKey, namespacedType: key.namespacedType,
                                                               beacon: key.beacon, telemetry: telemetry, observedAtMs: observedAtMs)
                self.answered(key, attachments)
            } catch {
                self.logger.info("cannot get the attachments of beacon \(key.beacon): \(error)")
                self.cache.failed(key, at: .now)
            }
        }
    }

    private func answered(_ key: AttachmentCache.Key, _ attachments: [BeaconAttachment]) {
        logger.debug("beacon attachments", metadata: ["attachments": "\(attachments.count)", "beacon": "\(key.beacon)",
                                                      "namespacedType": "\(key.namespacedType)"])
        cache.answered(key, attachments, at: .now)
        guard let beacon = tracker.beacons[key.beacon] else { return }
        for entry in watched.values where !entry.strategy.raw && Self.key(entry, key.beacon) == key {
            update(beacon, for: entry)
        }
    }

    /// The question `entry` asks about `beacon`.
    private static func key(_ entry: Watched, _ beacon: AdvertisedID) -> AttachmentCache.Key {
        AttachmentCache.Key(apiKey: entry.subscription.manager.apiKey,
                            namespacedType: namespacedType(entry.subscription.filter), beacon: beacon)
    }

    /// What a subscription asks the server for: every type of the project's
    /// own namespaces (`*`), or the one namespace it names.
    static func namespacedType(_ filter: MessageFilter) -> String {
        guard !filter.namespace.isEmpty else { return "*" }
        return "\(filter.namespace)/\(filter.type.isEmpty ? "*" : filter.type)"
    }

    /// Found-message sources of beacons: `beacon:<id>|` and the message, so a
    /// message keeps its source whatever else the beacon's attachments do.
    static func sourcePrefix(_ id: AdvertisedID) -> String { FoundSource.beaconPrefix + "\(id)|" }

    static func source(_ id: AdvertisedID, _ message: Message) -> String {
        sourcePrefix(id) + "\(message.namespace)|\(message.type)|\(Hex.encode(message.content))"
    }

    // MARK: The clock

    /// While anything is watched: beacons gone quiet are lost, answers due
    /// are asked again, and distance and signal changes are reported.
    private func startTicking() {
        guard tick == nil else { return }
        tick = BusTimer(after: min(settings.signalInterval, settings.lostTimeout / 4)) { [weak self] in
            guard let self else { return }
            self.tick = nil
            self.onTick()
            if !self.watched.isEmpty || !self.tracker.beacons.isEmpty { self.startTicking() }
        }
    }

    private var lastSignalReport = ContinuousClock.now

    private func onTick() {
        let now = ContinuousClock.now
        for beacon in tracker.expire(at: now) {
            logger.debug("beacon out of range", metadata: ["beacon": "\(beacon.id)"])
            for entry in watched.values {
                let prefix = Self.sourcePrefix(beacon.id)
                for source in entry.subscription.found.sourceIDs where source.hasPrefix(prefix) {
                    drop(source, of: beacon.id, from: entry)
                }
            }
        }
        // Answers due for a refresh (or a retry) are asked again; what comes
        // back updates the subscriptions that use it.
        // Each API key and namespaced type once, whatever number of subscriptions ask it.
        let questions = Set(watched.values.filter { !$0.strategy.raw }.map {
            [$0.subscription.manager.apiKey, Self.namespacedType($0.subscription.filter)]
        })
        for beacon in tracker.beacons.values {
            for question in questions {
                let key = AttachmentCache.Key(apiKey: question[0], namespacedType: question[1], beacon: beacon.id)
                if cache.shouldAsk(key, at: now) { ask(key, telemetry: beacon.telemetry) }
            }
        }
        cache.prune(keeping: Set(tracker.beacons.keys), at: now)
        if now - lastSignalReport >= settings.signalInterval {
            lastSignalReport = now
            for entry in watched.values { reportSignals(of: entry) }
        }
    }

    /// For each found message, the nearest beacon carrying it, reported when
    /// it moved enough since the last report.
    private func reportSignals(of entry: Watched) {
        for (message, carriers) in entry.carriers {
            guard let nearest = carriers.compactMap({ tracker.beacons[$0] }).min(by: { $0.distance < $1.distance }),
                  let last = entry.reported[message] else { continue }
            let rssi = Int(nearest.rssi.rounded())
            var now = last
            if abs(nearest.distance - last.distance) >= 0.1 * last.distance {
                entry.object.emitDistanceChanged(message, meters: nearest.distance, accuracy: nearest.accuracy)
                now.distance = nearest.distance
            }
            if abs(rssi - last.rssi) >= 2 {
                entry.object.emitBleSignalChanged(message, rssi: rssi, txPower: nearest.powerAtOneMetre)
                now.rssi = rssi
            }
            entry.reported[message] = now
        }
    }
}
