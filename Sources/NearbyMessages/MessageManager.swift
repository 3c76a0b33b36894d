import DBus
import Foundation
import NearbyBusContract
import Synchronization

/// Where nearbyd is: the system bus (the default), the session bus, or an address.
public typealias BusAddress = BusConnection.Address

/// Access to Nearby Messages for one app under one API key: the GNSMessageManager
/// of the iOS API, over nearbyd's D-Bus API. Publications and subscriptions made
/// from it stay active while their Swift objects live (and keep the manager
/// alive); the manager, and all it made, ends when it is released, or
/// deallocated with the last of them.
///
/// An app never restarts because nearbyd did (as BlueZ's clients register
/// again when bluetoothd restarts). When `org.nearbyd` loses its owner (the
/// bus says so: no other program can fake it), every subscription reports
/// the messages it had found as lost, and every publication and subscription
/// reports the status `starting` with the reason ``waitingForDaemon``. When
/// a nearbyd owns the name again, the manager is made again with what it was
/// made with (and the background and direct channel the app set), then its
/// live publications and subscriptions, in the order they were made, with
/// the TTL they have left of the one the app gave (one whose TTL ran out
/// meanwhile expires; one given none gets the daemon's default afresh); what
/// is near is found again. Their `path`s change; the Swift objects stay.
/// One that cannot be made again reports `inactive` and why.
public final class MessageManager: Sendable {
    /// The manager's D-Bus object now (a new one after nearbyd restarted; the
    /// last one while it is being made again).
    public var path: ObjectPath { live.withLock { $0.path } }
    /// The path, and whether it is the manager on the nearbyd that owns the
    /// name now. A stale path is never called: a new nearbyd may have given
    /// it to another manager of this process.
    private let live: Mutex<(path: ObjectPath, current: Bool)>
    let bus: NearbyBus
    private let apiKey: String
    private let params: [String: Variant]
    private let router: @Sendable (ObjectEvent) -> Void
    /// The background and direct channel the app asked for, set again on a restarted nearbyd.
    private let wishes = Mutex<(background: Bool?, directChannel: Bool?)>((nil, nil))
    /// Its publications and subscriptions, in the order they were made.
    @BusActor private var objects: [WeakObject] = []
    private struct WeakObject {
        weak var object: DaemonObject?
    }
    @BusActor private var daemonRestarts: OwnerObservation?
    /// Counts nearbyd's owner changes: a revival a later change overtook stops.
    @BusActor private var ownerChanges = 0
    @BusActor private var released = false

    /// The status reason of publications and subscriptions while nearbyd is
    /// not running (their status is then `starting`).
    public static let waitingForDaemon = DaemonObject.waitingReason

    /// What keeps Nearby from working for this manager now (the error state
    /// handlers of the iOS API). Each is false while all is well.
    public struct ErrorState: Sendable, Equatable {
        /// Audio is needed and the microphone cannot be used.
        public var microphonePermission = false
        /// BLE is needed and the adapter is off, blocked or absent.
        public var bluetoothPower = false
        /// BLE is needed and BlueZ or the bus policy refuses the daemon.
        public var bluetoothPermission = false
        /// nearby-server refuses the manager's API key (unknown to it, or revoked):
        /// nothing of the manager's will run until the key is right.
        public var apiKey = false

        public init(microphonePermission: Bool = false, bluetoothPower: Bool = false, bluetoothPermission: Bool = false,
                    apiKey: Bool = false) {
            self.microphonePermission = microphonePermission
            self.bluetoothPower = bluetoothPower
            self.bluetoothPermission = bluetoothPermission
            self.apiKey = apiKey
        }

        /// Applies changed `…Error` properties.
        mutating func apply(_ changed: [String: DBusValue]) -> Bool {
            let before = self
            typealias Manager1 = NearbyBusContract.Manager1
            if let value = changed[Manager1.microphonePermissionError.name]?.bool { microphonePermission = value }
            if let value = changed[Manager1.bluetoothPowerError.name]?.bool { bluetoothPower = value }
            if let value = changed[Manager1.bluetoothPermissionError.name]?.bool { bluetoothPermission = value }
            if let value = changed[Manager1.apiKeyError.name]?.bool { apiKey = value }
            return self != before
        }
    }

    /// Creates a manager. `appId` identifies the app for permission decisions
    /// and upstream messages (default: derived from the user and the API
    /// key); `usageDescriptions` are shown to the user when a permission agent
    /// asks them about the app. Each handler runs on the bus thread, in order:
    /// `errorStateChanged` with the new state each time it changes;
    /// `permissionChanged` with ``permissionGranted`` each time it changes,
    /// whoever changed it (the user in a settings panel, a permission dialog,
    /// another manager of the app); `backgroundChanged` with ``background``
    /// each time it changes, by ``setBackground(_:)`` or because nearbyd saw the
    /// user's login session become inactive or locked (or active again);
    /// `upstream` hears of upstream messages and the direct channel (including
    /// verdicts kept from before the manager existed).
    public init(apiKey: String, appId: String? = nil, usageDescriptions: UsageDescriptions = UsageDescriptions(),
                bus address: BusAddress = .system,
                errorStateChanged: @escaping @Sendable (ErrorState) -> Void = { _ in },
                permissionChanged: @escaping @Sendable (Bool) -> Void = { _ in },
                backgroundChanged: @escaping @Sendable (Bool) -> Void = { _ in },
                upstream: UpstreamHandlers = UpstreamHandlers()) async throws {
        bus = try await NearbyBus.shared(address)
        var params = usageDescriptions.params
        if let appId { params[NearbyBusContract.CreateManagerOption.appId.name] = Variant(.string(appId)) }
        let state = Mutex(ErrorState())
        let router: @Sendable (ObjectEvent) -> Void = { event in
            switch event {
            case .propertiesChanged(let changed):
                if let now = state.withLock({ $0.apply(changed) ? $0 : nil }) { errorStateChanged(now) }
                if let granted = changed[NearbyBusContract.Manager1.permissionGranted.name]?.bool { permissionChanged(granted) }
                if let background = changed[NearbyBusContract.Manager1.background.name]?.bool { backgroundChanged(background) }
                if let connected = changed[NearbyBusContract.Upstream1.directChannelConnected.name]?.bool {
                    upstream.directChannelConnectedChanged(connected)
                }
            case .sendSucceeded(let id): upstream.sendSucceeded(id)
            case .sendFailed(let failure): upstream.sendFailed(failure)
            case .messageReceived(let message): upstream.messageReceived(message)
            default: break
            }
        }
        live = Mutex((try await Self.create(on: bus, apiKey: apiKey, params: params, router: router), true))
        self.apiKey = apiKey
        self.params = params
        self.router = router
        await followDaemon()
    }

    /// Makes a manager on nearbyd and routes its signals to `router`.
    @BusActor private static func create(on bus: NearbyBus, apiKey: String, params: [String: Variant],
                                         router: @escaping @Sendable (ObjectEvent) -> Void) async throws -> ObjectPath {
        try await bus.call(RootPath.manager, NearbyBusContract.nearby.name, NearbyBusContract.Nearby1.createManager.name) {
            writer throws(DBusError) in
            try writer.append(apiKey)
            try writer.append(params)
        } decode: { reader throws(DBusError) in
            let path = try reader.read(ObjectPath.self)
            // Routed as the reply is read, before any later message: no change is missed.
            bus.route(path, to: router)
            return path
        }
    }

    // MARK: nearbyd restarting

    @BusActor private func followDaemon() {
        daemonRestarts = bus.nearbyd.onOwnerChange { [weak self] owner in self?.ownerChanged(to: owner) }
    }

    /// The publication or subscription `object`, made from this manager, to be made again after a restart.
    @BusActor func adopt(_ object: DaemonObject) {
        objects.removeAll { $0.object == nil }
        objects.append(WeakObject(object: object))
    }

    @BusActor private var liveObjects: [DaemonObject] { objects.compactMap(\.object) }

    /// ``path`` while it is current; else nearbyd restarted and the manager
    /// is not made again yet.
    private var currentPath: ObjectPath {
        get throws(NearbyMessagesError) {
            guard let path = live.withLock({ $0.current ? $0.path : nil }) else {
                throw NearbyMessagesError(kind: .daemonUnavailable, message: Self.waitingForDaemon)
            }
            return path
        }
    }

    @BusActor private func ownerChanged(to owner: String?) {
        ownerChanges += 1
        let wasCurrent = live.withLock { live in
            defer { live.current = false }
            return live.current
        }
        if wasCurrent {
            // The old nearbyd's paths may be the new one's for other objects.
            bus.removeRoute(path)
            for object in liveObjects { bus.removeRoute(object.daemonLeft()) }
        }
        guard owner != nil, !released else { return }
        let change = ownerChanges
        Task { await revive(after: change) }
    }

    /// Makes the manager, then its objects, again on the nearbyd of owner change `change`.
    @BusActor private func revive(after change: Int) async {
        guard change == ownerChanges, !released else { return }
        do {
            let path = try await Self.create(on: bus, apiKey: apiKey, params: params, router: router)
            live.withLock { $0 = (path, true) }
            let wishes = self.wishes.withLock { $0 }
            if let background = wishes.background {
                try await bus.setProperty(path, NearbyBusContract.manager.name, NearbyBusContract.Manager1.background.name,
                                          .bool(background))
            }
            if let wanted = wishes.directChannel {
                try await bus.setProperty(path, Self.upstream, NearbyBusContract.Upstream1.directChannel.name, .bool(wanted))
            }
        } catch {
            for object in liveObjects { object.couldNotRevive(error) }
            return
        }
        guard change == ownerChanges else { return }
        for object in liveObjects {
            guard change == ownerChanges else { return }
            await object.revive()
        }
    }

    /// The error state now.
    public var errorState: ErrorState {
        get async throws {
            var state = ErrorState()
            _ = state.apply(try await bus.properties(currentPath, NearbyBusContract.manager.name))
            return state
        }
    }

    deinit {
        guard let path = try? currentPath else { return }
        bus.unroute(path)
        bus.sendAndForget(path, NearbyBusContract.manager.name, NearbyBusContract.Manager1.release.name)
    }

    /// Publishes `message` until the returned publication is released or
    /// deallocated; `expired` runs if its TTL runs out first, `statusChanged`
    /// with each new ``Publication/status`` and `statusReasonChanged` with each
    /// new ``Publication/statusReason`` (all on the bus thread).
    ///
    /// When the user has not decided yet whether the app may use Nearby,
    /// nearbyd asks `permissionRequest` if given (the app's own dialog, the
    /// iOS API's permission request handler: it gets the mediums wanted and
    /// returns the user's answer), else the permission agent of the user's
    /// session, else its default policy. Throws
    /// ``NearbyMessagesError/Kind/notPermitted`` when the app is denied.
    public func publication(of message: Message, strategy: Strategy? = nil,
                            expired: @escaping @Sendable () -> Void = {},
                            statusChanged: @escaping @Sendable (String) -> Void = { _ in },
                            statusReasonChanged: @escaping @Sendable (String) -> Void = { _ in },
                            permissionRequest: (@Sendable ([String]) async -> Bool)? = nil) async throws -> Publication {
        typealias Option = NearbyBusContract.PublishOrSubscribeOption
        var params: [String: Variant] = [:]
        if !message.namespace.isEmpty { params[Option.namespace.name] = Variant(.string(message.namespace)) }
        let dialog = try await Self.export(permissionRequest, on: bus)
        if let dialog { params[Option.permissionRequestHandler.name] = Variant(.objectPath(dialog.path)) }
        let content = [UInt8](message.content)
        do {
            let object = try await DaemonObject.make(
                manager: self, interface: NearbyBusContract.publication.name, endMethod: NearbyBusContract.Publication1.unpublish.name,
                dialog: dialog, strategy: strategy
            ) { event in
                switch event {
                case .expired: expired()
                case .propertiesChanged(let changed):
                    if let status = changed[NearbyBusContract.PublicationOrSubscription.status.name]?.string { statusChanged(status) }
                    if let reason = changed[NearbyBusContract.PublicationOrSubscription.statusReason.name]?.string {
                        statusReasonChanged(reason)
                    }
                default: break
                }
            } create: { [params] strategy, route in
                try await self.make(NearbyBusContract.Manager1.publish.name, params: params, strategy: strategy, route: route) {
                    writer throws(DBusError) in
                    try writer.append(content)
                    try writer.append(message.type)
                }
            }
            return Publication(object: object)
        } catch {
            await dialog?.unexport()
            throw error
        }
    }

    /// Subscribes to messages of `type` in `namespace` (empty: all types of the
    /// project's namespace), from other devices and or beacons (`deviceTypes`).
    /// The handlers run on the bus thread, in order. `distanceChanged`
    /// (metres, accuracy) and `bleSignalChanged` (RSSI, TX power at 1 m) are
    /// for beacon messages; `statusChanged` gets each new ``Subscription/status``
    /// and `statusReasonChanged` each new ``Subscription/statusReason``.
    /// `permissionRequest` is asked, as for ``publication(of:strategy:expired:statusChanged:statusReasonChanged:permissionRequest:)``,
    /// when the user has not decided yet whether the app may use Nearby.
    public func subscription(namespace: String = "", type: String = "", strategy: Strategy? = nil,
                             deviceTypes: DeviceTypes = .nearby, beaconStrategy: BeaconStrategy? = nil,
                             messageFound: @escaping @Sendable (Message, MessageInfo) -> Void,
                             messageLost: @escaping @Sendable (Message, MessageInfo) -> Void = { _, _ in },
                             distanceChanged: @escaping @Sendable (Message, Double, Double) -> Void = { _, _, _ in },
                             bleSignalChanged: @escaping @Sendable (Message, Int, Int) -> Void = { _, _, _ in },
                             expired: @escaping @Sendable () -> Void = {},
                             statusChanged: @escaping @Sendable (String) -> Void = { _ in },
                             statusReasonChanged: @escaping @Sendable (String) -> Void = { _ in },
                             permissionRequest: (@Sendable ([String]) async -> Bool)? = nil) async throws -> Subscription {
        typealias Option = NearbyBusContract.PublishOrSubscribeOption
        var params: [String: Variant] = [:]
        if !namespace.isEmpty { params[Option.namespace.name] = Variant(.string(namespace)) }
        if !type.isEmpty { params[Option.type.name] = Variant(.string(type)) }
        if deviceTypes != .nearby { params[Option.deviceTypes.name] = Variant(.strings(deviceTypes.names)) }
        if let beaconStrategy { params[Option.beaconStrategy.name] = Variant(beaconStrategy.dbusValue) }
        let dialog = try await Self.export(permissionRequest, on: bus)
        if let dialog { params[Option.permissionRequestHandler.name] = Variant(.objectPath(dialog.path)) }
        do {
            let object = try await DaemonObject.make(
                manager: self, interface: NearbyBusContract.subscription.name, endMethod: NearbyBusContract.Subscription1.unsubscribe.name,
                dialog: dialog, strategy: strategy
            ) { event in
                switch event {
                case .found(let message, let info): messageFound(message, info)
                case .lost(let message, let info): messageLost(message, info)
                case .distanceChanged(let message, let meters, let accuracy): distanceChanged(message, meters, accuracy)
                case .bleSignalChanged(let message, let rssi, let txPower): bleSignalChanged(message, rssi, txPower)
                case .expired: expired()
                case .propertiesChanged(let changed):
                    if let status = changed[NearbyBusContract.PublicationOrSubscription.status.name]?.string { statusChanged(status) }
                    if let reason = changed[NearbyBusContract.PublicationOrSubscription.statusReason.name]?.string {
                        statusReasonChanged(reason)
                    }
                case .sendSucceeded, .sendFailed, .messageReceived: break
                }
            } create: { [params] strategy, route in
                try await self.make(NearbyBusContract.Manager1.subscribe.name, params: params, strategy: strategy, route: route)
            }
            return Subscription(object: object)
        } catch {
            await dialog?.unexport()
            throw error
        }
    }

    /// Calls `member` (Publish, Subscribe) of the manager to make an object:
    /// `leading` writes the arguments before the options, `params` with
    /// `strategy`'s. The object's signals go to `route` from the reply on.
    private func make(_ member: String, params: [String: Variant], strategy: Strategy?,
                      route: @escaping @Sendable (ObjectEvent) -> Void,
                      leading: @escaping @Sendable @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in }) async throws -> ObjectPath {
        var params = params
        if let strategy { params[NearbyBusContract.PublishOrSubscribeOption.strategy.name] = Variant(strategy.dbusValue) }
        let bus = self.bus
        return try await bus.call(currentPath, NearbyBusContract.manager.name, member) { [params] writer throws(DBusError) in
            try leading(writer)
            try writer.append(params)
        } decode: { reader throws(DBusError) in
            let objectPath = try reader.read(ObjectPath.self)
            // Routed as the reply is read, before any later message: no signal is missed.
            bus.route(objectPath, to: route)
            return objectPath
        }
    }

    /// Exports the app's permission dialog for one Publish or Subscribe; it
    /// lives as long as the object made.
    @BusActor private static func export(_ permissionRequest: (@Sendable ([String]) async -> Bool)?,
                                         on bus: NearbyBus) throws -> DaemonCallee<[String]>? {
        guard let permissionRequest else { return nil }
        let dialog = DaemonCallee(bus: bus, kind: "permission_request", answer: permissionRequest)
        do {
            try dialog.export(CalleeInterfaces.permissionRequest)
        } catch {
            throw NearbyMessagesError(error)
        }
        return dialog
    }

    // MARK: Permission and background (GNSPermission, app state)

    /// Whether the user allows this app (the manager's `AppId`) to use Nearby
    /// (GNSPermission's `isGranted`): false while denied or undecided.
    public var permissionGranted: Bool {
        get async throws {
            try await bus.property(currentPath, NearbyBusContract.manager.name, NearbyBusContract.Manager1.permissionGranted.name).bool
                ?? false
        }
    }

    /// Grants or revokes Nearby for this app as the user's decision
    /// (GNSPermission's `setGranted`, for an in-app switch). Revoking stops
    /// the app's publications and subscriptions, of every manager of the app
    /// (their status becomes `inactive`); granting resumes them. Every manager
    /// of the app hears it through `permissionChanged`.
    public func setPermissionGranted(_ granted: Bool) async throws {
        try await bus.setProperty(currentPath, NearbyBusContract.manager.name, NearbyBusContract.Manager1.permissionGranted.name,
                                  .bool(granted))
    }

    /// Whether the app is in the background now: said by ``setBackground(_:)``,
    /// or set by nearbyd while the user's login session is inactive or locked.
    public var background: Bool {
        get async throws {
            try await bus.property(currentPath, NearbyBusContract.manager.name, NearbyBusContract.Manager1.background.name).bool
                ?? false
        }
    }

    /// Tells nearbyd the app is in the background (or back). Meanwhile only
    /// the publications and subscriptions whose strategy has
    /// `allowInBackground` run, on BLE alone; the others pause until the app
    /// is back.
    public func setBackground(_ background: Bool) async throws {
        // While nearbyd restarts, said once the manager is made again.
        if let path = try? currentPath {
            try await bus.setProperty(path, NearbyBusContract.manager.name, NearbyBusContract.Manager1.background.name,
                                      .bool(background))
        }
        wishes.withLock { $0.background = background }
    }

    // MARK: Upstream messages (org.nearbyd.Upstream1)

    /// Sends `data` to the application server `to` (`SENDER_ID@DOMAIN`, the
    /// sender id being the project's) under `messageID` (unique among the
    /// app's pending messages). nearbyd keeps it, across restarts, until the
    /// server acknowledges it (``UpstreamHandlers/sendSucceeded``) or it fails
    /// (``UpstreamHandlers/sendFailed``), at the latest when `ttlSeconds` run
    /// out; 0 is now or never, and fails at once without the direct channel.
    /// It travels while the direct channel of the API key is open (see
    /// ``setDirectChannel(_:)``).
    public func sendUpstream(data: [String: String], to: String, messageID: String, ttlSeconds: Int64) async throws {
        try await bus.call(currentPath, Self.upstream, NearbyBusContract.Upstream1.sendMessage.name) { writer throws(DBusError) in
            try writer.append(data)
            try writer.append(to)
            try writer.append(messageID)
            try writer.append(ttlSeconds)
        } decode: { _ throws(DBusError) in () }
    }

    /// Asks for the direct channel (FIRMessaging's `shouldEstablishDirectChannel`):
    /// nearbyd keeps it open while some manager of the API key asks for it and
    /// is not in the background.
    public func setDirectChannel(_ wanted: Bool) async throws {
        // While nearbyd restarts, said once the manager is made again.
        if let path = try? currentPath {
            try await bus.setProperty(path, Self.upstream, NearbyBusContract.Upstream1.directChannel.name, .bool(wanted))
        }
        wishes.withLock { $0.directChannel = wanted }
    }

    /// Whether the direct channel of this manager's API key is open now.
    public var directChannelConnected: Bool {
        get async throws {
            try await bus.property(currentPath, Self.upstream, NearbyBusContract.Upstream1.directChannelConnected.name).bool ?? false
        }
    }

    private static let upstream = NearbyBusContract.upstream.name

    /// Ends the manager and everything it made now rather than at deallocation.
    public func release() async throws {
        // While nearbyd restarts, releasing is not making it again.
        if let path = try? currentPath {
            try await bus.call(path, NearbyBusContract.manager.name, NearbyBusContract.Manager1.release.name)
        }
        await stopFollowingDaemon()
    }

    @BusActor private func stopFollowingDaemon() {
        released = true
        daemonRestarts = nil
    }
}

enum RootPath {
    static let manager = ObjectPath(stringLiteral: NearbyBusContract.rootPath)
}

extension Strategy {
    var dbusValue: DBusValue {
        typealias Option = NearbyBusContract.StrategyOption
        var entries: [String: DBusValue] = [:]
        if let mediums { entries[Option.mediums.name] = .strings(mediums) }
        if let mode { entries[Option.mode.name] = .string(mode.rawValue) }
        if let ttlSeconds { entries[Option.ttl.name] = .uint32(ttlSeconds) }
        if let distance { entries[Option.distance.name] = .string(distance.rawValue) }
        if let allowInBackground { entries[Option.allowInBackground.name] = .bool(allowInBackground) }
        return .vardict(entries)
    }
}

extension BeaconStrategy {
    var dbusValue: DBusValue {
        typealias Option = NearbyBusContract.BeaconStrategyOption
        var entries: [String: DBusValue] = [:]
        if let includeIBeacons { entries[Option.includeIBeacons.name] = .bool(includeIBeacons) }
        if let lowPowerPreferred { entries[Option.lowPowerPreferred.name] = .bool(lowPowerPreferred) }
        if let allowInBackground { entries[Option.allowInBackground.name] = .bool(allowInBackground) }
        if let raw { entries[Option.rawBeacons.name] = .bool(raw) }
        return .vardict(entries)
    }
}
