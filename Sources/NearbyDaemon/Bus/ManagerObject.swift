import DBus
import NearbyCore

/// `org.nearbyd.Manager1`: one app's message manager (GNSMessageManager).
@BusActor
final class ManagerObject {
    nonisolated static let interfaceName = "org.nearbyd.Manager1"

    let manager: Manager
    let path: ObjectPath
    unowned let service: NearbyService
    var exported: ExportedObject?

    /// How many live publications and subscriptions of this manager use each medium.
    var mediumUsers: [Medium: Int] = [:]

    /// Kept as set: permissions (issue 7) are not enforced yet.
    var permissionGranted = true
    var background = false
    /// `DirectChannel` of `org.nearbyd.Upstream1`: the app wants its API key's direct channel.
    var directChannel = false
    /// Kept up to date by ``NearbyService`` from the mediums' conditions.
    var microphonePermissionError = false
    var bluetoothPermissionError = false
    var bluetoothPowerError = false

    init(manager: Manager, path: ObjectPath, service: NearbyService) {
        self.manager = manager
        self.path = path
        self.service = service
    }

    static let publishOptions: [String: Signature] = ["Namespace": "s", "Strategy": "a{sv}", "PermissionRequestHandler": "o"]
    static let subscribeOptions: [String: Signature] = [
        "Namespace": "s", "Type": "s", "DeviceTypes": "as", "Strategy": "a{sv}", "BeaconStrategy": "a{sv}",
        "PermissionRequestHandler": "o",
    ]
    static let beaconStrategyOptions: [String: Signature] = [
        "IncludeIBeacons": "b", "LowPowerPreferred": "b", "AllowInBackground": "b", "RawBeacons": "b",
    ]

    static let interface = Interface<ManagerObject>(
        interfaceName,
        methods: [
            Method("Publish", inputs: [Argument("content", "ay"), Argument("type", "s"), Argument("params", "a{sv}")],
                   outputs: [Argument("publication", "o")]) { object, call throws(DBusError) in
                let content = try call.arguments.read([UInt8].self)
                let type = try call.arguments.read(String.self)
                let raw = try call.arguments.read([String: Variant].self)
                let path = try checked { () throws(NearbyError) in
                    let params = try Options(raw, allowed: publishOptions, context: "Publish params")
                    try MessageRules.checkContent(content)
                    try MessageRules.checkType(type)
                    let namespace = params.string("Namespace") ?? ""
                    try MessageRules.checkNamespace(namespace)
                    let strategy = try object.service.strategy(params, for: .publication)
                    return try object.service.publish(Message(namespace: namespace, type: type, content: content),
                                                      strategy: strategy, in: object)
                }
                call.reply { writer throws(DBusError) in try writer.append(path) }
            },
            Method("Subscribe", inputs: [Argument("params", "a{sv}")],
                   outputs: [Argument("subscription", "o")]) { object, call throws(DBusError) in
                let raw = try call.arguments.read([String: Variant].self)
                let path = try checked { () throws(NearbyError) in
                    let params = try Options(raw, allowed: subscribeOptions, context: "Subscribe params")
                    let filter = MessageFilter(namespace: params.string("Namespace") ?? "", type: params.string("Type") ?? "")
                    try MessageRules.checkNamespace(filter.namespace)
                    try MessageRules.checkType(filter.type)
                    let deviceTypes = try deviceTypes(params)
                    let strategy = try object.service.strategy(params, for: .subscription)
                    return try object.service.subscribe(filter, strategy: strategy, deviceTypes: deviceTypes, in: object)
                }
                call.reply { writer throws(DBusError) in try writer.append(path) }
            },
            Method("Release") { object, _ in
                object.service.release(object)
            },
        ],
        properties: [
            Property("PermissionGranted", "b", get: { object, _ in .bool(object.permissionGranted) },
                     set: { object, value, _ throws(DBusError) in
                         object.permissionGranted = value.bool ?? true
                         try object.exported?.emitPropertiesChanged(interface: interfaceName, ["PermissionGranted"])
                     }),
            Property("MicrophonePermissionError", "b") { object, _ in .bool(object.microphonePermissionError) },
            Property("BluetoothPowerError", "b") { object, _ in .bool(object.bluetoothPowerError) },
            Property("BluetoothPermissionError", "b") { object, _ in .bool(object.bluetoothPermissionError) },
            Property("Background", "b", get: { object, _ in .bool(object.background) },
                     set: { object, value, _ in object.service.setBackground(object, value.bool ?? false) }),
        ]
    )

    /// `DeviceTypes` and `BeaconStrategy`, checked.
    private static func deviceTypes(_ params: Options) throws(NearbyError) -> DeviceTypes {
        let names = params.strings("DeviceTypes") ?? ["nearby"]
        guard !names.isEmpty else { throw .invalidArguments("DeviceTypes must name at least one device type") }
        for name in names where !["nearby", "ble-beacon"].contains(name) {
            throw .invalidArguments("unknown device type '\(name)' in DeviceTypes; known: nearby, ble-beacon")
        }
        guard Set(names).count == names.count else {
            throw .invalidArguments("DeviceTypes names a device type twice")
        }
        let options = try params.options("BeaconStrategy", allowed: beaconStrategyOptions, context: "BeaconStrategy")
        guard names.contains("ble-beacon") else {
            if options != nil { throw .invalidArguments("BeaconStrategy applies to DeviceTypes 'ble-beacon' only") }
            return DeviceTypes(nearby: true)
        }
        let defaults = BeaconStrategy()
        let strategy = BeaconStrategy(
            includeIBeacons: options?.bool("IncludeIBeacons") ?? defaults.includeIBeacons,
            lowPowerPreferred: options?.bool("LowPowerPreferred") ?? defaults.lowPowerPreferred,
            allowInBackground: options?.bool("AllowInBackground") ?? defaults.allowInBackground,
            raw: options?.bool("RawBeacons") ?? defaults.raw)
        return DeviceTypes(nearby: names.contains("nearby"), beacons: strategy)
    }

    /// Emits PropertiesChanged for `names` to the owner.
    func changed(_ names: [String]) {
        try? exported?.emitPropertiesChanged(interface: Self.interfaceName, names)
    }
}
