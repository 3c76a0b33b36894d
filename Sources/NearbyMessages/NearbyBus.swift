import DBus
import NearbyBusContract

/// A signal of a publication or subscription, decoded.
enum ObjectEvent: Sendable {
    case found(Message, MessageInfo)
    case lost(Message, MessageInfo)
    /// A beacon message's distance (metres) and its accuracy.
    case distanceChanged(Message, Double, Double)
    /// A beacon message's RSSI and the beacon's TX power at 1 m, dBm.
    case bleSignalChanged(Message, Int, Int)
    case expired
    /// PropertiesChanged: the changed properties' new values.
    case propertiesChanged([String: DBusValue])
    /// A manager's upstream message was delivered to its application server.
    case sendSucceeded(String)
    /// A manager's upstream message will not be delivered.
    case sendFailed(UpstreamFailure)
    /// A downstream message for a manager.
    case messageReceived(DownstreamMessage)
}

/// The process's connection to one bus, shared by its managers, and the routes
/// from the daemon's objects to their handlers.
final class NearbyBus: Sendable {
    static let daemon = NearbyBusContract.busName

    /// Each bus's connection, opening or open.
    @BusActor private static var shared: [String: Task<NearbyBus, any Error>] = [:]

    let connection: BusConnection
    /// nearbyd as the bus knows it: the connection that owns `org.nearbyd`
    /// now, the only one whose signals and calls this process believes.
    let nearbyd: BusService
    @BusActor private var routes: [ObjectPath: @Sendable (ObjectEvent) -> Void] = [:]
    /// The match for every signal of the daemon's objects, added once the
    /// connection opens: a manager's signals may follow its CreateManager
    /// reply at once (SendFailed kept from before), before a match added
    /// for the new path could be in place.
    @BusActor private var watch: SignalSubscription?

    @BusActor private init(connection: BusConnection, nearbyd: BusService) {
        self.connection = connection
        self.nearbyd = nearbyd
    }

    /// The connection for `address`, opened on first use. Callers that come
    /// while it opens wait for it: nothing is called on it before nearbyd's
    /// owner is known and the match is in place.
    @BusActor static func shared(_ address: BusAddress) async throws -> NearbyBus {
        let key = address.description
        if let opening = shared[key] {
            if let bus = try? await opening.value, bus.connection.isOpen { return bus }
            // Failed or closed: opened again by the first caller to notice.
            if shared[key] == opening { shared[key] = nil }
            return try await Self.shared(address)
        }
        let opening = Task { @BusActor in try await connect(address) }
        shared[key] = opening
        return try await opening.value
    }

    @BusActor private static func connect(_ address: BusAddress) async throws -> NearbyBus {
        let connection = try await mapped { () throws(DBusError) in try BusConnection(address) }
        let nearbyd = try await mapped { () async throws(DBusError) in try await BusService(daemon, on: connection) }
        let bus = NearbyBus(connection: connection, nearbyd: nearbyd)
        bus.watch = try await mapped { () async throws(DBusError) in
            try await nearbyd.addMatch("path_namespace='\(RootPath.manager)'") { [weak bus] signal in bus?.deliver(signal) }
        }
        return bus
    }

    @BusActor func call<T: Sendable>(
        _ path: ObjectPath, _ interface: String, _ member: String,
        arguments: @BusActor (MessageWriter) throws(DBusError) -> Void = { _ in },
        decode: @escaping @BusActor (MessageReader) throws(DBusError) -> T
    ) async throws -> T {
        do {
            return try await connection.call(destination: Self.daemon, path: path, interface: interface, member: member,
                                             arguments: arguments, decode: decode)
        } catch {
            throw NearbyMessagesError(error)
        }
    }

    @BusActor func call(_ path: ObjectPath, _ interface: String, _ member: String) async throws {
        try await call(path, interface, member) { _ throws(DBusError) in () }
    }

    @BusActor func property(_ path: ObjectPath, _ interface: String, _ name: String) async throws -> DBusValue {
        try await call(path, "org.freedesktop.DBus.Properties", "Get") { writer throws(DBusError) in
            try writer.append(interface)
            try writer.append(name)
        } decode: { reader throws(DBusError) in try reader.read(Variant.self).value }
    }

    @BusActor func properties(_ path: ObjectPath, _ interface: String) async throws -> [String: DBusValue] {
        try await call(path, "org.freedesktop.DBus.Properties", "GetAll") { writer throws(DBusError) in
            try writer.append(interface)
        } decode: { reader throws(DBusError) in try reader.read([String: Variant].self).mapValues(\.value) }
    }

    @BusActor func setProperty(_ path: ObjectPath, _ interface: String, _ name: String, _ value: DBusValue) async throws {
        try await call(path, "org.freedesktop.DBus.Properties", "Set") { writer throws(DBusError) in
            try writer.append(interface)
            try writer.append(name)
            try writer.append(Variant(value))
        } decode: { _ throws(DBusError) in () }
    }

    /// Sends a call without waiting; for ending objects from `deinit`.
    func sendAndForget(_ path: ObjectPath, _ interface: String, _ member: String,
                       arguments: @escaping @BusActor @Sendable (MessageWriter) throws(DBusError) -> Void = { _ in }) {
        Task { @BusActor in
            try? connection.send(destination: Self.daemon, path: path, interface: interface, member: member,
                                 arguments: arguments)
        }
    }

    /// Paths of the objects this process exports for the daemon to call, one
    /// per object made on this connection.
    @BusActor private var exportedCount = 0

    /// A new path for an object of this process that the daemon calls (`kind`:
    /// letters, digits and underscores).
    @BusActor func newExportPath(_ kind: String) -> ObjectPath {
        exportedCount += 1
        return Self.exportRoot.child("\(kind)_\(exportedCount)")
    }

    private static let exportRoot = ObjectPath(stringLiteral: NearbyBusContract.clientExportRoot)

    /// Sends the signals of the object at `path` to `handler`.
    @BusActor func route(_ path: ObjectPath, to handler: @escaping @Sendable (ObjectEvent) -> Void) {
        routes[path] = handler
    }

    /// Sends the signals of the object at `path` nowhere from now on.
    @BusActor func removeRoute(_ path: ObjectPath) {
        routes.removeValue(forKey: path)
    }

    /// ``removeRoute(_:)`` soon; for `deinit`.
    func unroute(_ path: ObjectPath) {
        Task { @BusActor in removeRoute(path) }
    }

    /// The content, namespace and type every message signal starts with.
    @BusActor private static func message(in signal: ReceivedSignal) -> Message? {
        guard let content = try? signal.arguments.read([UInt8].self),
              let namespace = try? signal.arguments.read(String.self),
              let type = try? signal.arguments.read(String.self) else { return nil }
        return Message(content: .init(content), namespace: namespace, type: type)
    }

    @BusActor private func deliver(_ signal: ReceivedSignal) {
        guard let handler = routes[signal.path] else { return }
        typealias Subscription1 = NearbyBusContract.Subscription1
        typealias Upstream1 = NearbyBusContract.Upstream1
        switch signal.member {
        case Subscription1.messageFound.name, Subscription1.messageLost.name:
            guard let message = Self.message(in: signal),
                  let info = try? signal.arguments.read([String: Variant].self) else { return }
            typealias Key = NearbyBusContract.MessageInfoKey
            typealias BeaconKey = NearbyBusContract.BeaconInfoKey
            let beacon = info[Key.beacon.name]?.value.stringVariantDictionary.map { beacon in
                BeaconInfo(kind: beacon[BeaconKey.kind.name]?.string ?? "", id: beacon[BeaconKey.id.name]?.string ?? "",
                           txPower: Int(beacon[BeaconKey.txPower.name]?.int16 ?? 0))
            }
            let details = MessageInfo(medium: info[Key.medium.name]?.value.string ?? "",
                                      rssi: Int(info[Key.rssi.name]?.value.int16 ?? 0),
                                      distanceMeters: info[Key.distanceMeters.name]?.value.double ?? 0, beacon: beacon)
            handler(signal.member == Subscription1.messageFound.name ? .found(message, details) : .lost(message, details))
        case Subscription1.distanceChanged.name:
            guard let message = Self.message(in: signal), let meters = try? signal.arguments.read(Double.self),
                  let accuracy = try? signal.arguments.read(Double.self) else { return }
            handler(.distanceChanged(message, meters, accuracy))
        case Subscription1.bleSignalChanged.name:
            guard let message = Self.message(in: signal), let rssi = try? signal.arguments.read(Int16.self),
                  let txPower = try? signal.arguments.read(Int16.self) else { return }
            handler(.bleSignalChanged(message, Int(rssi), Int(txPower)))
        case NearbyBusContract.PublicationOrSubscription.expired.name:
            routes.removeValue(forKey: signal.path)
            handler(.expired)
        case Upstream1.sendSucceeded.name:
            guard let id = try? signal.arguments.read(String.self) else { return }
            handler(.sendSucceeded(id))
        case Upstream1.sendFailed.name:
            guard let id = try? signal.arguments.read(String.self), let error = try? signal.arguments.read(String.self),
                  let description = try? signal.arguments.read(String.self) else { return }
            handler(.sendFailed(UpstreamFailure(messageID: id, error: error, description: description)))
        case Upstream1.messageReceived.name:
            guard let data = try? signal.arguments.read([String: String].self), let from = try? signal.arguments.read(String.self),
                  let id = try? signal.arguments.read(String.self) else { return }
            handler(.messageReceived(DownstreamMessage(data: data, from: from, messageID: id)))
        case "PropertiesChanged":
            guard (try? signal.arguments.read(String.self)) != nil,
                  let changed = try? signal.arguments.read([String: Variant].self) else { return }
            handler(.propertiesChanged(changed.mapValues(\.value)))
        default:
            break
        }
    }
}

/// Runs a D-Bus step, turning its error into a ``NearbyMessagesError``.
@BusActor
private func mapped<T>(_ body: () async throws(DBusError) -> T) async throws(NearbyMessagesError) -> T {
    do {
        return try await body()
    } catch {
        throw NearbyMessagesError(error)
    }
}

extension NearbyMessagesError {
    init(_ error: DBusError) {
        let kind: Kind
        switch error.name {
        case NearbyBusContract.Error.invalidArguments.busName: kind = .invalidArguments
        case NearbyBusContract.Error.notPermitted.busName: kind = .notPermitted
        case NearbyBusContract.Error.limitExceeded.busName: kind = .limitExceeded
        case NearbyBusContract.Error.notSupported.busName: kind = .notSupported
        case NearbyBusContract.Error.accessDenied.busName, "org.freedesktop.DBus.Error.AccessDenied": kind = .accessDenied
        case NearbyBusContract.Error.doesNotExist.busName, "org.freedesktop.DBus.Error.UnknownObject": kind = .doesNotExist
        case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
             "org.freedesktop.DBus.Error.Disconnected", "org.freedesktop.DBus.Error.NoReply":
            kind = .daemonUnavailable
        default: kind = .other(error.name)
        }
        self.init(kind: kind, message: error.message)
    }
}
