import DBus
import NearbyBusContract
import NearbyCore

/// `org.nearbyd.Subscription1`: one live subscription, and its found/lost signals.
@BusActor
final class SubscriptionObject: LiveObject {
    nonisolated static let interfaceName = NearbyBusContract.subscription.name

    let subscription: Subscription
    let path: ObjectPath
    unowned let service: DaemonService
    var exported: ExportedObject?

    var entry: Subscription { subscription }

    init(subscription: Subscription, path: ObjectPath, service: DaemonService) {
        self.subscription = subscription
        self.path = path
        self.service = service
    }

    static let messageArguments = [Argument("content", "ay"), Argument("namespace", "s"), Argument("type", "s")]

    static let interface = Interface<SubscriptionObject>(
        interfaceName,
        methods: [
            Method("Unsubscribe") { object, _ in object.service.unsubscribe(object) },
        ],
        properties: [
            Property("Status", "s") { object, _ in .string(object.subscription.status.rawValue) },
            Property("StatusReason", "s") { object, _ in .string(object.subscription.statusReason) },
        ],
        signals: [
            SignalDescription("MessageFound", messageArguments + [Argument("info", "a{sv}")]),
            SignalDescription("MessageLost", messageArguments + [Argument("info", "a{sv}")]),
            SignalDescription("DistanceChanged", messageArguments + [Argument("meters", "d"), Argument("accuracy", "d")]),
            SignalDescription("BleSignalChanged", messageArguments + [Argument("rssi", "n"), Argument("tx_power", "n")]),
            SignalDescription("Expired"),
        ]
    )

    func emitFound(_ message: Message, _ info: SightingInfo) {
        emit("MessageFound", message, info)
    }

    func emitLost(_ message: Message, _ info: SightingInfo) {
        emit("MessageLost", message, info)
    }

    func emitDistanceChanged(_ message: Message, meters: Double, accuracy: Double) {
        try? exported?.emitSignal(interface: Self.interfaceName, member: "DistanceChanged") { writer throws(DBusError) in
            try Self.append(message, to: writer)
            try writer.append(meters)
            try writer.append(accuracy)
        }
    }

    func emitBleSignalChanged(_ message: Message, rssi: Int, txPower: Int) {
        try? exported?.emitSignal(interface: Self.interfaceName, member: "BleSignalChanged") { writer throws(DBusError) in
            try Self.append(message, to: writer)
            try writer.append(Int16(clamping: rssi))
            try writer.append(Int16(clamping: txPower))
        }
    }

    private func emit(_ member: String, _ message: Message, _ info: SightingInfo) {
        try? exported?.emitSignal(interface: Self.interfaceName, member: member) { writer throws(DBusError) in
            try Self.append(message, to: writer)
            var entries: [String: DBusValue] = [
                "Medium": .string(info.medium.rawValue),
                "Rssi": .int16(Int16(clamping: info.rssi)),
                "DistanceMeters": .double(info.distanceMeters),
            ]
            if let beacon = info.beacon {
                entries["Beacon"] = .vardict([
                    "Kind": .string(beacon.kind), "Id": .string(beacon.id), "TxPower": .int16(Int16(clamping: beacon.txPower)),
                ])
            }
            try writer.append(DBusValue.vardict(entries))
        }
    }

    /// The content, namespace and type every signal of a message starts with.
    private static func append(_ message: Message, to writer: MessageWriter) throws(DBusError) {
        try writer.append(message.content)
        try writer.append(message.namespace)
        try writer.append(message.type)
    }
}
