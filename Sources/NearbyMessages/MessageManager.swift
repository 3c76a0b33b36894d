import DBus
import Foundation

/// Where nearbyd is: the system bus (the default), the session bus, or an address.
public typealias BusAddress = BusConnection.Address

/// Access to Nearby Messages for one app under one API key: the GNSMessageManager
/// of the iOS API, over nearbyd's D-Bus API. Publications and subscriptions made
/// from it stay active while their Swift objects live (and keep the manager
/// alive); the manager, and all it made, ends when it is released, or
/// deallocated with the last of them.
public final class MessageManager: Sendable {
    /// The manager's D-Bus object.
    public let path: ObjectPath
    let bus: NearbyBus

    /// Creates a manager. `appId` identifies the app for permission decisions
    /// (default: derived from the user and the API key).
    public init(apiKey: String, appId: String? = nil, bus address: BusAddress = .system) async throws {
        bus = try await NearbyBus.shared(address)
        var params: [String: Variant] = [:]
        if let appId { params["AppId"] = Variant(.string(appId)) }
        let bus = self.bus
        path = try await bus.call(RootPath.manager, "org.nearbyd.Nearby1", "CreateManager") { writer throws(DBusError) in
            try writer.append(apiKey)
            try writer.append(params)
        } decode: { reader throws(DBusError) in try reader.read(ObjectPath.self) }
        try await bus.watchSubtree(path)
    }

    deinit {
        bus.unwatchSubtree(path)
        bus.sendAndForget(path, "org.nearbyd.Manager1", "Release")
    }

    /// Publishes `message` until the returned publication is released or
    /// deallocated; `expired` runs if its TTL runs out first.
    public func publication(of message: Message, strategy: Strategy? = nil,
                            expired: @escaping @Sendable () -> Void = {}) async throws -> Publication {
        var params: [String: Variant] = [:]
        if !message.namespace.isEmpty { params["Namespace"] = Variant(.string(message.namespace)) }
        if let strategy { params["Strategy"] = Variant(strategy.dbusValue) }
        let content = [UInt8](message.content)
        let bus = self.bus
        let objectPath = try await bus.call(path, "org.nearbyd.Manager1", "Publish") { writer throws(DBusError) in
            try writer.append(content)
            try writer.append(message.type)
            try writer.append(params)
        } decode: { reader throws(DBusError) in
            let objectPath = try reader.read(ObjectPath.self)
            bus.route(objectPath) { event in if case .expired = event { expired() } }
            return objectPath
        }
        return Publication(path: objectPath, manager: self)
    }

    /// Subscribes to messages of `type` in `namespace` (empty: all types of the
    /// project's namespace). The handlers run on the bus thread, in order.
    public func subscription(namespace: String = "", type: String = "", strategy: Strategy? = nil,
                             messageFound: @escaping @Sendable (Message, MessageInfo) -> Void,
                             messageLost: @escaping @Sendable (Message, MessageInfo) -> Void = { _, _ in },
                             expired: @escaping @Sendable () -> Void = {}) async throws -> Subscription {
        var params: [String: Variant] = [:]
        if !namespace.isEmpty { params["Namespace"] = Variant(.string(namespace)) }
        if !type.isEmpty { params["Type"] = Variant(.string(type)) }
        if let strategy { params["Strategy"] = Variant(strategy.dbusValue) }
        let bus = self.bus
        let objectPath = try await bus.call(path, "org.nearbyd.Manager1", "Subscribe") { writer throws(DBusError) in
            try writer.append(params)
        } decode: { reader throws(DBusError) in
            let objectPath = try reader.read(ObjectPath.self)
            // Routed as the reply is read, before any later message: no signal is missed.
            bus.route(objectPath) { event in
                switch event {
                case .found(let message, let info): messageFound(message, info)
                case .lost(let message, let info): messageLost(message, info)
                case .expired: expired()
                }
            }
            return objectPath
        }
        return Subscription(path: objectPath, manager: self)
    }

    /// Whether the user allows this app to use Nearby (GNSPermission).
    public var permissionGranted: Bool {
        get async throws { try await bus.property(path, "org.nearbyd.Manager1", "PermissionGranted").bool ?? false }
    }

    /// Records the user's decision for this app (stored until permissions are enforced).
    public func setPermissionGranted(_ granted: Bool) async throws {
        try await bus.setProperty(path, "org.nearbyd.Manager1", "PermissionGranted", .bool(granted))
    }

    /// Ends the manager and everything it made now rather than at deallocation.
    public func release() async throws {
        try await bus.call(path, "org.nearbyd.Manager1", "Release")
    }
}

enum RootPath {
    static let manager: ObjectPath = "/org/nearbyd"
}

extension Strategy {
    var dbusValue: DBusValue {
        var entries: [String: DBusValue] = [:]
        if let mediums { entries["Mediums"] = .strings(mediums) }
        if let mode { entries["Mode"] = .string(mode.rawValue) }
        if let ttlSeconds { entries["TTL"] = .uint32(ttlSeconds) }
        if let distance { entries["Distance"] = .string(distance.rawValue) }
        if let allowInBackground { entries["AllowInBackground"] = .bool(allowInBackground) }
        return .vardict(entries)
    }
}
