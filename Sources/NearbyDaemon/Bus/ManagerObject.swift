import DaemonCore
import DBus
import NearbyBusContract
import NearbyCore

/// `org.nearbyd.Manager1`: one app's message manager (GNSMessageManager).
@BusActor
final class ManagerObject {
    nonisolated static let interfaceName = NearbyBusContract.manager.name

    let manager: Manager
    let path: ObjectPath
    /// Held strongly, as ``PublicationObject/service`` is.
    let service: DaemonService
    var exported: ExportedObject?

    /// Whose permission decision the manager follows.
    let permissionKey: PermissionKey
    /// Why the app uses each medium, as `PermissionAgent1` details (`MicrophoneUsageDescription`…).
    var usageDescriptions: [String: String] = [:]
    /// `DirectChannel` of `org.nearbyd.Upstream1`: the app wants its API key's direct channel.
    var directChannel = false

    init(manager: Manager, path: ObjectPath, service: DaemonService) {
        self.manager = manager
        self.path = path
        self.service = service
        permissionKey = PermissionKey(uid: manager.client.uid, appId: manager.appId)
    }

    /// Exports the object, callable by its client alone.
    func export() throws(NearbyError) {
        exported = try service.connection.exportOwned([Self.interface.bind(self), Self.upstreamInterface.bind(self)], at: path,
                                                      owner: manager.client.busName)
    }

    /// Takes the object off the bus: a call waiting on it (a Publish asking
    /// permission) sees it gone.
    func unexport() {
        exported?.unregister()
        exported = nil
    }

    /// `Background`, as the core keeps it (the client's wish or its login session's).
    var background: Bool { service.core.isBackground(manager) }
    private var errors: MediumErrors { manager.state.errors }

    static let publishOptions = Options.allowed(NearbyBusContract.PublishOrSubscribeOption.publish)
    static let subscribeOptions = Options.allowed(NearbyBusContract.PublishOrSubscribeOption.subscribe)
    static let beaconStrategyOptions = Options.allowed(NearbyBusContract.BeaconStrategyOption.all)
    /// The params arguments' names in refusals, made once rather than on every call.
    static let publishParams = "\(NearbyBusContract.Manager1.publish.name) params"
    static let subscribeParams = "\(NearbyBusContract.Manager1.subscribe.name) params"

    static let interface = Interface<ManagerObject>(
        interfaceName,
        methods: [
            Method(NearbyBusContract.Manager1.publish, inputs: ["content", "type", "params"], outputs: ["publication"]) {
                object, call throws(DBusError) in try object.publish(call)
            },
            Method(NearbyBusContract.Manager1.subscribe, inputs: ["params"], outputs: ["subscription"]) {
                object, call throws(DBusError) in try object.subscribe(call)
            },
            Method(NearbyBusContract.Manager1.release) { object, _ in
                object.service.release(object)
            },
        ],
        properties: [
            Property(NearbyBusContract.Manager1.permissionGranted,
                     get: { object, _ in .bool(object.service.core.isPermitted(object.manager)) },
                     set: { object, value, _ throws(DBusError) in
                         // Only the manager's owner reaches this: the same uid as the decision's.
                         try checked { () throws(NearbyError) in
                             // A setter answers at once: in force now, on disk soon after (undone should that fail).
                             try object.service.permissions.record(object.permissionKey, granted: value.bool ?? false, by: .user)
                         }
                     }),
            Property(NearbyBusContract.Manager1.microphonePermissionError) { object, _ in .bool(object.errors.microphonePermission) },
            Property(NearbyBusContract.Manager1.bluetoothPowerError) { object, _ in .bool(object.errors.bluetoothPower) },
            Property(NearbyBusContract.Manager1.bluetoothPermissionError) { object, _ in .bool(object.errors.bluetoothPermission) },
            Property(NearbyBusContract.Manager1.apiKeyError) { object, _ in .bool(object.manager.state.link?.view.keyRefused ?? false) },
            Property(NearbyBusContract.Manager1.background, get: { object, _ in .bool(object.background) },
                     set: { object, value, _ in object.service.setBackground(object, requested: value.bool ?? false) }),
        ]
    )

    /// Publish: checked at once; made once the app may use Nearby.
    private func publish(_ call: MethodCall) throws(DBusError) {
        let (message, strategy, handler) = try Self.readPublish(Arguments(call)) { params throws(NearbyError) in
            try self.strategy(params, for: .publication)
        }
        func make() throws(NearbyError) -> ObjectPath {
            try service.publish(message, strategy: strategy, in: self).path
        }
        if try answeredAtOnce(call, make) { return }
        waitForPermission(mediums: strategy.mediums, handler: handler, call: call, make)
    }

    /// Subscribe: checked at once; made once the app may use Nearby.
    private func subscribe(_ call: MethodCall) throws(DBusError) {
        let (filter, strategy, deviceTypes, handler) = try Self.readSubscribe(Arguments(call)) { params throws(NearbyError) in
            try self.strategy(params, for: .subscription)
        }
        var mediums: Set<Medium> = deviceTypes.nearby ? strategy.mediums : []
        if deviceTypes.beacons != nil { mediums.insert(.ble) }
        func make() throws(NearbyError) -> ObjectPath {
            try service.subscribe(filter, strategy: strategy, deviceTypes: deviceTypes, in: self)
        }
        if try answeredAtOnce(call, make) { return }
        waitForPermission(mediums: mediums, handler: handler, call: call, make)
    }

    /// Publish and Subscribe when the app may use Nearby: `make` runs now and
    /// the call is answered with its object; false, and nothing done, while
    /// that is not decided (``waitForPermission``). Kept apart from the
    /// waiting: `make` kept for later has its captures allocated, and taken
    /// here, on every Publish, it has them on the stack.
    private func answeredAtOnce(_ call: MethodCall, _ make: () throws(NearbyError) -> ObjectPath) throws(DBusError) -> Bool {
        guard service.core.isPermitted(manager) else { return false }
        let path = try checked(make)
        call.reply { writer throws(DBusError) in try writer.append(path) }
        return true
    }

    /// Publish and Subscribe: `body` runs once the app may use Nearby; the
    /// call waits for the answer.
    private func waitForPermission(mediums: Set<Medium>, handler: ObjectPath?, call: MethodCall,
                                   _ body: @escaping @BusActor @Sendable () throws(NearbyError) -> ObjectPath) {
        let reply = call.deferReply()
        Task { @BusActor [self] in
            do throws(NearbyError) {
                try await service.authorize(self, mediums: mediums, handler: handler)
                guard exported != nil else { throw .doesNotExist("the manager was released while permission was asked") }
                let path = try body()
                reply.reply { writer throws(DBusError) in try writer.append(path) }
            } catch {
                reply.fail(error.dbusError)
            }
        }
    }

    /// The `Strategy` entry of Publish or Subscribe params, checked.
    private func strategy(_ params: Options, for owner: Strategy.Owner) throws(NearbyError) -> Strategy {
        let strategyKey = NearbyBusContract.PublishOrSubscribeOption.strategy
        let options = try params.options(strategyKey.name, allowed: StrategyOptions.allowed, context: strategyKey.name)
        if options == nil, let strategy = service.defaultStrategy(for: owner) { return strategy }
        return try StrategyOptions.parse(options, for: owner, enabled: service.enabledMediums)
    }

    /// Publish's arguments, read and checked; `strategy` reads the params' Strategy.
    static func readPublish(_ arguments: Arguments, strategy: (Options) throws(NearbyError) -> Strategy)
        throws(DBusError) -> (message: Message, strategy: Strategy, handler: ObjectPath?) {
        typealias Option = NearbyBusContract.PublishOrSubscribeOption
        let content = try arguments.bytes("content", maxCount: MessageRules.maximumContentBytes)
        let type = try arguments.string("type")
        let params = try arguments.options(publishParams, allowed: publishOptions)
        return try checked { () throws(NearbyError) in
            try MessageRules.checkContent(content)
            try MessageRules.checkType(type)
            let namespace = params.string(Option.namespace.name) ?? ""
            try MessageRules.checkNamespace(namespace)
            return (Message(namespace: namespace, type: type, content: content), try strategy(params),
                    params.objectPath(Option.permissionRequestHandler.name))
        }
    }

    /// Subscribe's arguments, read and checked; `strategy` reads the params' Strategy.
    static func readSubscribe(_ arguments: Arguments, strategy: (Options) throws(NearbyError) -> Strategy)
        throws(DBusError) -> (filter: MessageFilter, strategy: Strategy, deviceTypes: DeviceTypes, handler: ObjectPath?) {
        typealias Option = NearbyBusContract.PublishOrSubscribeOption
        let params = try arguments.options(subscribeParams, allowed: subscribeOptions)
        return try checked { () throws(NearbyError) in
            let filter = MessageFilter(namespace: params.string(Option.namespace.name) ?? "", type: params.string(Option.type.name) ?? "")
            try MessageRules.checkNamespace(filter.namespace)
            try MessageRules.checkType(filter.type)
            let deviceTypes = try Self.deviceTypes(params)
            return (filter, try strategy(params), deviceTypes, params.objectPath(Option.permissionRequestHandler.name))
        }
    }

    /// `DeviceTypes` and `BeaconStrategy`, checked.
    private static func deviceTypes(_ params: Options) throws(NearbyError) -> DeviceTypes {
        let names = params.strings(NearbyBusContract.PublishOrSubscribeOption.deviceTypes.name) ?? ["nearby"]
        guard !names.isEmpty else { throw .invalidArguments("DeviceTypes must name at least one device type") }
        for name in names where !["nearby", "ble-beacon"].contains(name) {
            throw .invalidArguments("unknown device type '\(name)' in DeviceTypes; known: nearby, ble-beacon")
        }
        guard Set(names).count == names.count else {
            throw .invalidArguments("DeviceTypes names a device type twice")
        }
        let key = NearbyBusContract.PublishOrSubscribeOption.beaconStrategy.name
        let options = try params.options(key, allowed: beaconStrategyOptions, context: key)
        guard names.contains("ble-beacon") else {
            if options != nil { throw .invalidArguments("BeaconStrategy applies to DeviceTypes 'ble-beacon' only") }
            return DeviceTypes(nearby: true)
        }
        typealias Option = NearbyBusContract.BeaconStrategyOption
        let defaults = BeaconStrategy()
        let strategy = BeaconStrategy(
            includeIBeacons: options?.bool(Option.includeIBeacons.name) ?? defaults.includeIBeacons,
            lowPowerPreferred: options?.bool(Option.lowPowerPreferred.name) ?? defaults.lowPowerPreferred,
            allowInBackground: options?.bool(Option.allowInBackground.name) ?? defaults.allowInBackground,
            raw: options?.bool(Option.rawBeacons.name) ?? defaults.raw)
        return DeviceTypes(nearby: names.contains("nearby"), beacons: strategy)
    }

    /// Emits PropertiesChanged for `properties` to the owner.
    func changed(_ properties: [NearbyBusContract.Property]) {
        try? exported?.emitPropertiesChanged(interface: Self.interfaceName, properties.map(\.name))
    }
}
