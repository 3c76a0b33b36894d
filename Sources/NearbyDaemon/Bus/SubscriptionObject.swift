import DaemonCore
import DBus
import NearbyBusContract
import NearbyCore

/// `org.nearbyd.Subscription1`: one live subscription, and its found/lost signals.
@BusActor
final class SubscriptionObject: LiveObject {
    nonisolated static let interfaceName = NearbyBusContract.subscription.name

    let subscription: Subscription
    let path: ObjectPath
    /// Held strongly, as ``PublicationObject/service`` is.
    let service: DaemonService
    var exported: ExportedObject?

    var entry: Subscription { subscription }

    init(subscription: Subscription, path: ObjectPath, service: DaemonService) {
        self.subscription = subscription
        self.path = path
        self.service = service
    }

    /// Exports the object, callable by its client alone.
    func export() throws(NearbyError) {
        exported = try service.connection.exportOwned([Self.interface.bind(self)], at: path, owner: subscription.manager.client.busName)
    }

    /// The names of the arguments every signal of a message starts with.
    static let messageArguments = ["content", "namespace", "type"]

    static let interface = Interface<SubscriptionObject>(
        interfaceName,
        methods: [
            Method(NearbyBusContract.Subscription1.unsubscribe) { object, _ in object.service.unsubscribe(object) },
        ],
        properties: [
            Property(NearbyBusContract.PublicationOrSubscription.status) { object, _ in .string(object.subscription.status.rawValue) },
            Property(NearbyBusContract.PublicationOrSubscription.statusReason) { object, _ in .string(object.subscription.statusReason) },
        ],
        signals: [
            SignalDescription(NearbyBusContract.Subscription1.messageFound, messageArguments + ["info"]),
            SignalDescription(NearbyBusContract.Subscription1.messageLost, messageArguments + ["info"]),
            SignalDescription(NearbyBusContract.Subscription1.distanceChanged, messageArguments + ["meters", "accuracy"]),
            SignalDescription(NearbyBusContract.Subscription1.bleSignalChanged, messageArguments + ["rssi", "tx_power"]),
            SignalDescription(NearbyBusContract.PublicationOrSubscription.expired),
        ]
    )

    func emitFound(_ message: Message, _ info: SightingInfo) {
        emit(NearbyBusContract.Subscription1.messageFound, message, info)
    }

    func emitLost(_ message: Message, _ info: SightingInfo) {
        emit(NearbyBusContract.Subscription1.messageLost, message, info)
    }

    func emitDistanceChanged(_ message: Message, meters: Double, accuracy: Double) {
        try? exported?.emitSignal(interface: Self.interfaceName, member: NearbyBusContract.Subscription1.distanceChanged.name) {
            writer throws(DBusError) in
            try Self.append(message, to: writer)
            try writer.append(meters)
            try writer.append(accuracy)
        }
    }

    func emitBleSignalChanged(_ message: Message, rssi: Int, txPower: Int) {
        try? exported?.emitSignal(interface: Self.interfaceName, member: NearbyBusContract.Subscription1.bleSignalChanged.name) {
            writer throws(DBusError) in
            try Self.append(message, to: writer)
            try writer.append(Int16(clamping: rssi))
            try writer.append(Int16(clamping: txPower))
        }
    }

    private func emit(_ signal: NearbyBusContract.Signal, _ message: Message, _ info: SightingInfo) {
        try? exported?.emitSignal(interface: Self.interfaceName, member: signal.name) { writer throws(DBusError) in
            try Self.append(message, to: writer)
            typealias Key = NearbyBusContract.MessageInfoKey
            var entries: [String: DBusValue] = [
                Key.medium.name: .string(info.medium.rawValue),
                Key.rssi.name: .int16(Int16(clamping: info.rssi)),
                Key.distanceMeters.name: .double(info.distanceMeters),
            ]
            if let beacon = info.beacon {
                typealias BeaconKey = NearbyBusContract.BeaconInfoKey
                entries[Key.beacon.name] = .vardict([
                    BeaconKey.kind.name: .string(beacon.kind), BeaconKey.id.name: .string(beacon.id),
                    BeaconKey.txPower.name: .int16(Int16(clamping: beacon.txPower)),
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
