import Beacons
import BluetoothLE
import DBus
import Foundation
import Logging
import Mediums
import NearbyCore

/// BLE through BlueZ: bluetoothd on the system bus broadcasts nearbyd's tokens
/// (one `LEAdvertisement1` per token) and tells it what it hears (`Device1`
/// objects and their `ServiceData`).
///
/// Everything runs on the bus thread (``BusActor``), which owns the connection
/// to the system bus next to the daemon's own. The medium keeps what the
/// daemon asked for apart from what bluetoothd has been told, and brings the
/// second to the first one call at a time (``reconcile()``) whenever either
/// changes: an adapter powered on or off, appearing or vanishing, bluetoothd
/// restarting, the bus connection coming back. It never needs a restart.
@BusActor
public final class BlueZMedium: BeaconScanner {
    public struct Settings: Sendable {
        /// Where bluetoothd is: the system bus, or a test's private bus.
        public var bus: BusConnection.Address
        /// The adapter to use (`hci0`); nil for the first powered one.
        public var adapter: String?
        /// Signal strength at one metre assumed for devices that advertise no
        /// transmit power, dBm.
        public var txPower: Int
        /// How long a device may go unheard before the daemon considers it gone;
        /// BlueZ's own devices that carried a token are removed after twice that.
        public var lostTimeout: Duration

        public init(bus: BusConnection.Address = .system, adapter: String? = nil, txPower: Int = -59,
                    lostTimeout: Duration = .seconds(3)) {
            self.bus = bus
            self.adapter = adapter
            self.txPower = txPower
            self.lostTimeout = lostTimeout
        }
    }

    public nonisolated let medium = Medium.ble
    public nonisolated var sightings: AsyncStream<Sighting> { reports.sightings }
    public nonisolated var conditionChanges: AsyncStream<MediumCondition> { reports.conditionChanges }
    public nonisolated var beaconSightings: AsyncStream<BeaconSighting> { beacons.sightings }
    private let reports = MediumReports()
    private let beacons = BeaconReports()
    private let settings: Settings
    private let logger: Logger
    private static let root: ObjectPath = "/org/nearbyd/ble"

    /// What the daemon asked for.
    private var wantedTokens: Set<Token> = []
    private var wantedScan = ScanMode.off

    /// The connection and what bluetoothd (its current instance) holds of ours.
    private var connection: BusConnection?
    /// bluetoothd's name and its owner: the only caller of the objects exported for it.
    private var bluezService: BusService?
    private var subscriptions: [SignalSubscription] = []
    /// bluetoothd's name changing hands: a crash, a restart.
    private var ownerChanges: OwnerObservation?
    private var bluezRunning = false
    private var objects = BlueZObjects()
    private var advertisements: [Token: LEAdvertisement] = [:]
    /// Registered advertisements, with the adapter they are registered on.
    private var registered: [Token: ObjectPath] = [:]
    /// How the chosen adapter listens now, and which adapter that is.
    private var scanning: (mode: ScanMode, adapter: ObjectPath)?
    private var monitor: AdvertisementMonitor?
    /// Devices the monitor reported in range (low-power scanning has no
    /// stream of reports to keep them fresh).
    private var monitored: Set<ObjectPath> = []
    /// When each device carrying a token was last heard.
    private var lastHeard: [ObjectPath: ContinuousClock.Instant] = [:]
    private var tick: BusTimer?
    /// Since when the adapter nearbyd discovers with has not been discovering.
    private var notDiscoveringSince: ContinuousClock.Instant?
    /// Set when listening must be stopped and started again.
    private var restartScanning = false

    private var refused = false
    private var condition = MediumCondition.unavailable
    private var reconciling = false
    /// Set when a call failed in a way retrying may fix; cleared by the retry.
    private var retryTimer: BusTimer?
    private var retryDelay = Duration.milliseconds(250)
    private var warnedNoMonitor = false
    private let clock: any WallClock

    /// `clock` times the sightings.
    public init(settings: Settings, logger: Logger, clock: any WallClock = SystemWallClock()) {
        self.settings = settings
        self.logger = logger
        self.clock = clock
    }

    public func broadcast(_ tokens: Set<Token>) async {
        wantedTokens = tokens
        await reconcile()
    }

    public func scan(_ mode: ScanMode) async {
        wantedScan = mode
        await reconcile()
    }

    // MARK: Connection

    public func run() async {
        var delay = Duration.milliseconds(100)
        while !Task.isCancelled {
            let (lost, lostSink) = AsyncStream.makeStream(of: Void.self)
            do {
                try await connect(onLost: lostSink)
                delay = .milliseconds(100)
                await withTaskCancellationHandler {
                    for await _ in lost {}
                } onCancel: {
                    lostSink.finish()
                }
                if !Task.isCancelled { logger.warning("lost the connection to the \(settings.bus); reconnecting") }
            } catch {
                logger.debug("cannot reach the \(settings.bus): \(error)")
            }
            tearDown()
            try? await Task.sleep(for: delay)
            delay = min(delay * 2, .seconds(5))
        }
    }

    /// Connects, follows bluetoothd's name and subscribes to its signals (from
    /// the name's owner alone: anyone on the bus can send nearbyd a signal),
    /// then reads its objects; `onLost` is finished when the connection goes.
    private func connect(onLost: AsyncStream<Void>.Continuation) async throws(DBusError) {
        let connection = try BusConnection(settings.bus)
        connection.onDisconnect { onLost.finish() }
        self.connection = connection
        let bluez = try await BusService(BlueZ.service, on: connection)
        bluezService = bluez
        // A change before this is in what synchronise() reads below.
        ownerChanges = bluez.onOwnerChange { [weak self] owner in self?.bluezChanged(owner: owner) }
        subscriptions = [
            try await bluez.addMatch("interface='\(BlueZ.objectManager)'") { [weak self] signal in
                self?.objectManagerSignal(signal)
            },
            try await bluez.addMatch(
                "interface='\(BlueZ.properties)',member='PropertiesChanged',path_namespace='/org/bluez'"
            ) { [weak self] signal in
                self?.propertiesChanged(signal)
            },
        ]
        await synchronise()
    }

    /// Forgets the connection and everything bluetoothd held for it: bluetoothd
    /// drops a client's advertisements and discovery when it leaves the bus.
    private func tearDown() {
        ownerChanges = nil
        bluezService = nil
        subscriptions = []
        connection?.close()
        connection = nil
        bluezGone()
    }

    /// Reads bluetoothd's objects afresh (at start, and when it restarts).
    private func synchronise() async {
        guard let connection else { return }
        do {
            let managed = try await connection.call(
                destination: BlueZ.service, path: .root, interface: BlueZ.objectManager, member: "GetManagedObjects"
            ) { reader throws(DBusError) in
                try reader.read([ObjectPath: [String: [String: Variant]]].self)
            }
            objects = BlueZObjects(managed.mapValues { $0.mapValues { $0.mapValues(\.value) } })
            bluezRunning = true
            refused = false
            logger.info("bluetoothd found", metadata: ["adapters": "\(objects.adapters.map(\.name))"])
        } catch {
            objects = BlueZObjects()
            bluezRunning = false
            if Self.isRefusal(error) {
                refused = true
                logger.error("BlueZ refuses nearbyd: \(error)")
                retryLater { await $0.synchronise() }
            } else {
                logger.info("bluetoothd is not running: \(error.message)")
            }
        }
        updateCondition()
        await reconcile()
    }

    /// Whatever the old bluetoothd held of ours went with it; a new one is read afresh.
    private func bluezChanged(owner: String?) {
        bluezGone()
        if let owner {
            logger.info("bluetoothd started", metadata: ["owner": "\(owner)"])
            Task { await self.synchronise() }
        } else {
            logger.warning("bluetoothd stopped")
        }
    }

    /// bluetoothd went away (or the connection did): nothing of ours is registered any more.
    private func bluezGone() {
        bluezRunning = false
        objects = BlueZObjects()
        registered.removeAll()
        scanning = nil
        restartScanning = false
        monitored.removeAll()
        lastHeard.removeAll()
        for advertisement in advertisements.values { advertisement.exported?.unregister() }
        advertisements.removeAll()
        monitor?.unexport()
        monitor = nil
        updateCondition()
    }

    // MARK: Signals

    private func objectManagerSignal(_ signal: ReceivedSignal) {
        let names: [String]
        do {
            let path = try signal.arguments.read(ObjectPath.self)
            switch signal.member {
            case "InterfacesAdded":
                let interfaces = try signal.arguments.read([String: [String: Variant]].self)
                objects.add(path, interfaces.mapValues { $0.mapValues(\.value) })
                if interfaces[BlueZ.device] != nil { heard(path) }
                names = Array(interfaces.keys)
            case "InterfacesRemoved":
                names = try signal.arguments.read([String].self)
                objects.remove(path, names)
                if names.contains(BlueZ.device) { forget(path) }
            default:
                return
            }
        } catch {
            logger.warning("ignoring a malformed \(signal.member) from bluetoothd: \(error)")
            return
        }
        if !Set(names).isDisjoint(with: [BlueZ.adapter, BlueZ.advertisingManager, BlueZ.monitorManager]) { adaptersChanged() }
    }

    private func propertiesChanged(_ signal: ReceivedSignal) {
        let interface: String
        let changed: [String: Variant]
        let invalidated: [String]
        do {
            interface = try signal.arguments.read(String.self)
            changed = try signal.arguments.read([String: Variant].self)
            invalidated = try signal.arguments.read([String].self)
        } catch {
            logger.warning("ignoring a malformed PropertiesChanged from bluetoothd: \(error)")
            return
        }
        objects.change(signal.path, interface, changed: changed.mapValues(\.value), invalidated: invalidated)
        switch interface {
        case BlueZ.device where changed["ServiceData"] != nil || changed["RSSI"] != nil || changed["ManufacturerData"] != nil:
            heard(signal.path)
        case BlueZ.adapter where changed["Powered"] != nil:
            adaptersChanged()
        default:
            break
        }
    }

    /// bluetoothd can drop a discovery session by itself, after answering
    /// StartDiscovery: a restarted bluetoothd does when the kernel refuses its
    /// first discovery as busy, and the adapter never shows `Discovering`.
    /// While nearbyd discovers, an adapter that has not been discovering for
    /// a few seconds (longer than bluetoothd's own restarts of the scan) gets
    /// its discovery started again.
    private func checkDiscovering() {
        guard let scanning, scanning.mode == .full, let adapter = objects.adapter(at: scanning.adapter),
              !adapter.discovering else {
            notDiscoveringSince = nil
            return
        }
        guard let since = notDiscoveringSince else {
            notDiscoveringSince = .now
            return
        }
        guard ContinuousClock.now - since >= .seconds(3) else { return }
        logger.notice("\(adapter.name) is not discovering; starting discovery again")
        notDiscoveringSince = nil
        restartScanning = true
        retryLater { await $0.reconcile() }
    }

    private func adaptersChanged() {
        updateCondition()
        Task { await self.reconcile() }
    }

    // MARK: Hearing

    /// A device report (or, with `report` false, a device held present): a
    /// sighting if the device carries a token and is on the adapter nearbyd
    /// listens with.
    private func heard(_ path: ObjectPath, report: Bool = true) {
        guard let scanning, let device = objects.device(at: path), device.adapter == scanning.adapter else { return }
        if let token = device.token {
            if report { lastHeard[path] = .now }
            reports.sightingSink.yield(sighting(token, device))
        } else if let frame = device.beacon {
            if report { lastHeard[path] = .now }
            beacons.sink.yield(BeaconSighting(frame: frame, sender: path.rawValue, rssi: device.rssi))
        }
    }

    private func sighting(_ token: Token, _ device: DeviceInfo) -> Sighting {
        Sighting(token: token, medium: .ble, rssi: device.rssi, txPower: device.referencePower(default: settings.txPower),
                 seenAtMilliseconds: clock.nowMs)
    }

    private func forget(_ path: ObjectPath) {
        lastHeard.removeValue(forKey: path)
        monitored.remove(path)
    }

    /// Once a second (more often with a short lost timeout) while listening:
    /// devices held present are heard again,
    /// discovery that bluetoothd dropped is started again, and
    /// bluetoothd's devices that carried a token but have gone quiet are
    /// removed, so a device that comes back is announced afresh.
    private func startTicking() {
        guard tick == nil else { return }
        // Held devices must be heard again well within the lost timeout.
        tick = BusTimer(after: min(.seconds(1), settings.lostTimeout / 4)) { [weak self] in
            guard let self else { return }
            self.tick = nil
            guard self.scanning != nil else { return }
            self.hearHeldDevices()
            self.checkDiscovering()
            self.removeStaleDevices()
            self.startTicking()
        }
    }

    /// Devices still taken as present between reports: those the monitor holds
    /// in range, and, while discovering, those reported within the last
    /// ``duplicateFilterHold``. Discovery scans with the kernel's duplicate
    /// filter on, which reports a steady advertiser only once per scan (the
    /// scan restarts every few seconds; measured in the rig), so silence
    /// shorter than that says nothing; the price is that a device that goes is
    /// lost that much later.
    private func hearHeldDevices() {
        for path in monitored { heard(path, report: false) }
        guard monitor == nil else { return }
        let since = ContinuousClock.now - Self.duplicateFilterHold
        for (path, seen) in lastHeard where seen > since { heard(path, report: false) }
    }

    static let duplicateFilterHold = Duration.seconds(10)

    private func removeStaleDevices() {
        guard let connection, let adapter = scanning?.adapter else { return }
        let limit = ContinuousClock.now - settings.lostTimeout * 2 - (monitor == nil ? Self.duplicateFilterHold : .zero)
        for (path, seen) in lastHeard where seen < limit && !monitored.contains(path) {
            lastHeard.removeValue(forKey: path)
            guard objects.device(at: path)?.isTemporary == true else { continue }
            Task {
                do {
                    try await connection.call(destination: BlueZ.service, path: adapter, interface: BlueZ.adapter,
                                              member: "RemoveDevice") { writer throws(DBusError) in try writer.append(path) }
                } catch {
                    self.logger.debug("could not remove stale device \(path): \(error)")
                }
            }
        }
    }

    // MARK: Bringing bluetoothd to what is wanted

    /// The adapter in use, if it is powered.
    private var readyAdapter: AdapterInfo? {
        guard bluezRunning, let adapter = AdapterInfo.choose(from: objects.adapters, configured: settings.adapter),
              adapter.powered else { return nil }
        return adapter
    }

    private func updateCondition() {
        let now: MediumCondition = refused ? .refused : readyAdapter == nil ? .unavailable : .ready
        guard now != condition else { return }
        condition = now
        reports.conditionSink.yield(now)
    }

    /// Makes one call at a time until bluetoothd holds what the daemon asked
    /// for. A change that comes while a call is on its way is picked up by the
    /// running loop. A call that fails stops the loop and schedules a retry.
    private func reconcile() async {
        guard !reconciling else { return }
        reconciling = true
        defer { reconciling = false }
        while let connection, let step = nextStep() {
            do {
                try await perform(step, on: connection)
                retryDelay = .milliseconds(250)
                if refused {
                    refused = false
                    updateCondition()
                }
            } catch {
                failed(step, error)
                return
            }
        }
    }

    private enum Step {
        case unregister(Token, adapter: ObjectPath)
        case register(Token, adapter: ObjectPath)
        case stopScanning(ScanMode, adapter: ObjectPath)
        case startScanning(ScanMode, adapter: AdapterInfo)
    }

    /// The first difference between what bluetoothd holds and what is wanted:
    /// undoing comes before doing, so moving to another adapter frees the old one first.
    private func nextStep() -> Step? {
        let adapter = readyAdapter
        if let (token, on) = registered.first(where: { $0.value != adapter?.path || !wantedTokens.contains($0.key) }) {
            return .unregister(token, adapter: on)
        }
        let mode = adapter.map(effectiveScanMode) ?? .off
        if let scanning, restartScanning || scanning.adapter != adapter?.path || scanning.mode != mode {
            return .stopScanning(scanning.mode, adapter: scanning.adapter)
        }
        guard let adapter else { return nil }
        if adapter.canAdvertise, let token = wantedTokens.subtracting(registered.keys).sorted(by: { $0.hex < $1.hex }).first {
            return .register(token, adapter: adapter.path)
        }
        if scanning == nil, mode != .off { return .startScanning(mode, adapter: adapter) }
        return nil
    }

    /// Low power needs the advertisement monitor; without it, full discovery.
    private func effectiveScanMode(_ adapter: AdapterInfo) -> ScanMode {
        guard wantedScan == .lowPower, !adapter.canMonitorPatterns else { return wantedScan }
        if !warnedNoMonitor {
            warnedNoMonitor = true
            logger.notice("\(adapter.name) has no advertisement monitor (bluetoothd older than 5.66 or not Experimental); low-power scanning uses full discovery")
        }
        return .full
    }

    private func perform(_ step: Step, on connection: BusConnection) async throws(DBusError) {
        switch step {
        case .register(let token, let adapter):
            let advertisement = try exportAdvertisement(token, on: connection)
            do {
                try await call(connection, adapter, BlueZ.advertisingManager, "RegisterAdvertisement") { writer throws(DBusError) in
                    try writer.append(advertisement.path)
                    try writer.append([String: Variant]())
                }
            } catch where error.name == "org.bluez.Error.AlreadyExists" {
                // Still registered from before a power cycle.
            }
            registered[token] = adapter
            logger.info("advertising", metadata: ["token": "\(token)", "adapter": "\(BlueZObjects.name(of: adapter))"])
        case .unregister(let token, let adapter):
            registered.removeValue(forKey: token)
            if let advertisement = advertisements.removeValue(forKey: token) {
                // Best effort: bluetoothd may have dropped it with the adapter already.
                try? await call(connection, adapter, BlueZ.advertisingManager, "UnregisterAdvertisement") { writer throws(DBusError) in
                    try writer.append(advertisement.path)
                }
                advertisement.exported?.unregister()
            }
            logger.info("stopped advertising", metadata: ["token": "\(token)"])
        case .startScanning(let mode, let adapter):
            if mode == .full {
                // No UUIDs in the filter: bluetoothd matches them against service
                // UUID lists only, never service data (doc/architecture.md, "BLE:
                // what the backends rely on", Discovery filter).
                // Any filter also makes non-discoverable broadcasters visible.
                try await call(connection, adapter.path, BlueZ.adapter, "SetDiscoveryFilter") { writer throws(DBusError) in
                    try writer.append(["Transport": Variant(.string("le")), "DuplicateData": Variant(.bool(true))])
                }
                do {
                    try await call(connection, adapter.path, BlueZ.adapter, "StartDiscovery")
                } catch where error.name == "org.bluez.Error.InProgress" {
                    // This connection's session is already running.
                }
            }
            // Low power is the monitor alone: passive scanning by the kernel,
            // matching in bluetoothd. Full listening does without one, although
            // a monitor would also turn the kernel's duplicate filter off: on
            // Debian 12's kernel, a monitor being added while the adapter
            // powers down crashed the kernel in the rig (a use-after-free in
            // mgmt_add_adv_patterns_monitor_complete), and full listening
            // follows power changes closely. Heard devices are held instead.
            if mode == .lowPower {
                let monitor = try exportMonitor(on: connection)
                try await call(connection, adapter.path, BlueZ.monitorManager, "RegisterMonitor") { writer throws(DBusError) in
                    try writer.append(monitor.root)
                }
            }
            scanning = (mode, adapter.path)
            startTicking()
            logger.info("listening", metadata: ["mode": "\(mode)", "adapter": "\(adapter.name)", "monitor": "\(monitor != nil)"])
        case .stopScanning(let mode, let adapter):
            scanning = nil
            restartScanning = false
            monitored.removeAll()
            if let monitor {
                try? await call(connection, adapter, BlueZ.monitorManager, "UnregisterMonitor") { writer throws(DBusError) in
                    try writer.append(monitor.root)
                }
                monitor.unexport()
                self.monitor = nil
            }
            if mode == .full {
                try? await call(connection, adapter, BlueZ.adapter, "StopDiscovery")
            }
            logger.info("stopped listening", metadata: ["adapter": "\(BlueZObjects.name(of: adapter))"])
        }
    }

    private func failed(_ step: Step, _ error: DBusError) {
        switch step {
        case .register(let token, _):
            advertisements.removeValue(forKey: token)?.exported?.unregister()
        case .startScanning:
            monitor?.unexport()
            monitor = nil
        case .unregister, .stopScanning:
            break
        }
        if Self.isRefusal(error) {
            logger.error("BlueZ refuses nearbyd: \(error)")
            refused = true
            updateCondition()
        } else {
            logger.warning("bluetoothd call failed: \(error)")
        }
        retryLater { await $0.reconcile() }
    }

    /// Runs `action` after a delay that doubles with each failure (up to 30 s).
    private func retryLater(_ action: @escaping @BusActor (BlueZMedium) async -> Void) {
        guard retryTimer == nil else { return }
        let delay = retryDelay
        retryDelay = min(retryDelay * 2, .seconds(30))
        retryTimer = BusTimer(after: delay) { [weak self] in
            guard let self else { return }
            self.retryTimer = nil
            Task { await action(self) }
        }
    }

    /// What other programs get for calling an object exported for bluetoothd
    /// (a `Release` or `DeviceFound` of their own making).
    private func bluetoothdOnly() throws(DBusError) -> Access {
        guard let bluezService else { throw .failed("not connected to bluetoothd") }
        return .service(bluezService, denied: Self.notBluetoothd)
    }

    private static let notBluetoothd = DBusError.accessDenied("only bluetoothd (the owner of org.bluez) calls this object")

    private func exportAdvertisement(_ token: Token, on connection: BusConnection) throws(DBusError) -> LEAdvertisement {
        if let existing = advertisements[token] { return existing }
        let advertisement = LEAdvertisement(token: token, under: Self.root) { [weak self] token in
            guard let self, self.registered.removeValue(forKey: token) != nil else { return }
            self.logger.notice("bluetoothd released the advertisement", metadata: ["token": "\(token)"])
            self.advertisements.removeValue(forKey: token)?.exported?.unregister()
            Task { await self.reconcile() }
        }
        advertisement.exported = try connection.export([LEAdvertisement.interface.bind(advertisement)], at: advertisement.path,
                                                       access: try bluetoothdOnly())
        advertisements[token] = advertisement
        return advertisement
    }

    private func exportMonitor(on connection: BusConnection) throws(DBusError) -> AdvertisementMonitor {
        if let monitor { return monitor }
        // bluetoothd refuses a monitor whose RSSILowTimeout is outside 1–300 s
        // (ADV_MONITOR_MAX_TIMEOUT); a longer lost timeout is still nearbyd's
        // own, by its sightings.
        let seconds = UInt16(min(300, max(1, settings.lostTimeout.components.seconds)))
        let monitor = AdvertisementMonitor(
            root: Self.root.child("monitor"), lostTimeoutSeconds: seconds,
            found: { [weak self] device in
                self?.monitored.insert(device)
                self?.heard(device)
            },
            lost: { [weak self] device in self?.monitored.remove(device) },
            released: { [weak self] in
                guard let self, self.monitor != nil, self.scanning != nil else { return }
                self.logger.notice("bluetoothd released the advertisement monitor")
                self.scanning = nil
                self.monitor?.unexport()
                self.monitor = nil
                Task { await self.reconcile() }
            })
        try monitor.export(on: connection, access: try bluetoothdOnly())
        self.monitor = monitor
        return monitor
    }

    private func call(
        _ connection: BusConnection, _ path: ObjectPath, _ interface: String, _ member: String,
        arguments: @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in }
    ) async throws(DBusError) {
        try await connection.call(destination: BlueZ.service, path: path, interface: interface, member: member,
                                  arguments: arguments)
    }

    /// The errors that mean "not allowed", as opposed to "not now".
    static func isRefusal(_ error: DBusError) -> Bool {
        ["org.freedesktop.DBus.Error.AccessDenied", "org.bluez.Error.NotAuthorized"].contains(error.name)
    }
}
