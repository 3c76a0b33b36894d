import DBus
import Foundation
import NearbyBusContract

/// Why the app uses the microphone and Bluetooth, in the user's words: shown
/// by permission agents when they ask the user (the iOS API's
/// `NSMicrophoneUsageDescription` and `NSBluetoothPeripheralUsageDescription`).
/// Each is 1 to 1024 bytes without control characters other than newline.
public struct UsageDescriptions: Sendable, Equatable {
    /// Why the app listens on the microphone (audio medium).
    public var microphone: String?
    /// Why the app uses Bluetooth (BLE medium).
    public var bluetooth: String?

    /// Descriptions; nil leaves one out.
    public init(microphone: String? = nil, bluetooth: String? = nil) {
        self.microphone = microphone
        self.bluetooth = bluetooth
    }

    /// CreateManager's params for them.
    var params: [String: Variant] {
        var params: [String: Variant] = [:]
        typealias Option = NearbyBusContract.CreateManagerOption
        if let microphone { params[Option.microphoneUsageDescription.name] = Variant(.string(microphone)) }
        if let bluetooth { params[Option.bluetoothUsageDescription.name] = Variant(.string(bluetooth)) }
        return params
    }
}

/// What nearbyd keeps for one app of one user: whether it may use Nearby, and
/// who decided.
public struct AppPermission: Sendable, Equatable {
    /// The user's answer, or none yet.
    public enum Decision: String, Sendable {
        case granted, denied, undecided
    }

    /// Who made a decision.
    public struct Source: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The user, asked by the permission agent of their session.
        public static let agent = Source(rawValue: "agent")
        /// The user, asked by the app's own dialog (a permission request handler).
        public static let app = Source(rawValue: "app")
        /// Set directly: ``Permissions/setPermission(appId:granted:user:)`` or
        /// ``MessageManager/setPermissionGranted(_:)``.
        public static let user = Source(rawValue: "user")
        /// nearbyd's configured default policy.
        public static let policy = Source(rawValue: "policy")
    }

    /// The user's uid.
    public var user: UInt32
    public var appId: String
    public var decision: Decision
    /// Nil while undecided.
    public var decidedBy: Source?
    /// Nil while undecided.
    public var decidedAt: Date?

    public init(user: UInt32, appId: String, decision: Decision, decidedBy: Source? = nil, decidedAt: Date? = nil) {
        self.user = user
        self.appId = appId
        self.decision = decision
        self.decidedBy = decidedBy
        self.decidedAt = decidedAt
    }

    /// From a GetPermission reply or a ListPermissions entry.
    init(_ entry: [String: DBusValue]) throws(NearbyMessagesError) {
        typealias Key = NearbyBusContract.PermissionEntryKey
        guard let user = entry[Key.user.name]?.uint32, let appId = entry[Key.appId.name]?.string,
              let decisionName = entry[Key.decision.name]?.string else {
            throw NearbyMessagesError(kind: .other("org.freedesktop.DBus.Error.InvalidArgs"),
                                      message: "nearbyd's permission entry lacks User, AppId or Decision")
        }
        guard let decision = Decision(rawValue: decisionName) else {
            throw NearbyMessagesError(kind: .other("org.freedesktop.DBus.Error.InvalidArgs"),
                                      message: "nearbyd answered an unknown decision '\(decisionName)'")
        }
        self.init(user: user, appId: appId, decision: decision,
                  decidedBy: entry[Key.decidedBy.name]?.string.map(Source.init(rawValue:)),
                  decidedAt: entry[Key.decidedAt.name]?.uint64.map { Date(timeIntervalSince1970: Double($0) / 1_000_000) })
    }
}

/// The permission decisions nearbyd keeps, per user and app id
/// (`org.nearbyd.Nearby1`'s GetPermission, SetPermission and ListPermissions):
/// for settings panels and administration. Each call works on the caller's own
/// decisions unless it names another `user`, which only root may.
public struct Permissions: Sendable {
    /// The bus nearbyd is on.
    public let bus: BusAddress

    /// Decisions of the nearbyd on `bus`.
    public init(bus: BusAddress = .system) {
        self.bus = bus
    }

    /// The decision for `appId` of `user` (default: the caller's uid).
    /// Throws ``NearbyMessagesError/Kind/accessDenied`` for another user unless root.
    public func permission(appId: String, user: UInt32? = nil) async throws -> AppPermission {
        let params = Self.params(user)
        let entry = try await NearbyBus.shared(bus).call(RootPath.manager, NearbyBusContract.nearby.name,
                                                         NearbyBusContract.Nearby1.getPermission.name) { writer throws(DBusError) in
            try writer.append(appId)
            try writer.append(params)
        } decode: { reader throws(DBusError) in try reader.read([String: Variant].self).mapValues(\.value) }
        return try AppPermission(entry)
    }

    /// Grants or revokes Nearby for `appId` of `user` (default: the caller's
    /// uid), as the user's own decision. Every manager of the app hears it
    /// (``MessageManager``'s `permissionChanged`); revoking stops the app's
    /// publications and subscriptions (status `inactive`), granting resumes
    /// them. Throws ``NearbyMessagesError/Kind/accessDenied`` for another user unless root.
    public func setPermission(appId: String, granted: Bool, user: UInt32? = nil) async throws {
        let params = Self.params(user)
        try await NearbyBus.shared(bus).call(RootPath.manager, NearbyBusContract.nearby.name,
                                             NearbyBusContract.Nearby1.setPermission.name) { writer throws(DBusError) in
            try writer.append(appId)
            try writer.append(granted)
            try writer.append(params)
        } decode: { _ throws(DBusError) in () }
    }

    /// Every decision of `user` (default: the caller's uid; for root, every
    /// user's). Throws ``NearbyMessagesError/Kind/accessDenied`` for another user unless root.
    public func permissions(user: UInt32? = nil) async throws -> [AppPermission] {
        let params = Self.params(user)
        let entries = try await NearbyBus.shared(bus).call(RootPath.manager, NearbyBusContract.nearby.name,
                                                           NearbyBusContract.Nearby1.listPermissions.name) { writer throws(DBusError) in
            try writer.append(params)
        } decode: { reader throws(DBusError) in try reader.read([[String: Variant]].self).map { $0.mapValues(\.value) } }
        return try entries.map { entry throws(NearbyMessagesError) in try AppPermission(entry) }
    }

    private static func params(_ user: UInt32?) -> [String: Variant] {
        user.map { [NearbyBusContract.PermissionOption.user.name: Variant(.uint32($0))] } ?? [:]
    }
}
