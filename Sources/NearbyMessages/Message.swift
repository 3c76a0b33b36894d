import Foundation

/// A message: small content (1 to 102400 bytes) with a type, in a namespace.
/// The GNSMessage of the iOS API.
public struct Message: Hashable, Sendable {
    /// 1 to 102400 bytes.
    public var content: Data
    /// Empty when publishing: the project's own namespace.
    public var namespace: String
    /// At most 32 characters, no `*`; subscribers filter on it.
    public var type: String

    /// A message to publish (or one that was found).
    public init(content: Data, namespace: String = "", type: String = "") {
        self.content = content
        self.namespace = namespace
        self.type = type
    }
}

/// How a found message was heard.
public struct MessageInfo: Hashable, Sendable {
    /// `ble` or `audio`.
    public var medium: String
    /// Over BLE the received signal strength, dBm; over audio the level the
    /// burst was heard at, dBFS. For a lost message, the last reading.
    public var rssi: Int
    /// Estimated distance, metres.
    public var distanceMeters: Double
    /// The beacon, for a message found through one.
    public var beacon: BeaconInfo?
}

/// The beacon a message was found through (`info.Beacon`).
public struct BeaconInfo: Hashable, Sendable {
    /// `eddystone-uid`, `eddystone-eid` or `ibeacon`.
    public var kind: String
    /// The advertised id in lowercase hex.
    public var id: String
    /// The power the beacon declares at one metre, dBm.
    public var txPower: Int

    public init(kind: String, id: String, txPower: Int) {
        self.kind = kind
        self.id = id
        self.txPower = txPower
    }
}

/// What a subscription discovers (GNSDeviceTypes).
public struct DeviceTypes: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Messages published by other devices running Nearby.
    public static let nearby = DeviceTypes(rawValue: 1)
    /// Attachments of BLE beacons registered to the project (or, with
    /// ``BeaconStrategy/raw``, every beacon heard).
    public static let bleBeacon = DeviceTypes(rawValue: 2)

    var names: [String] {
        (contains(.nearby) ? ["nearby"] : []) + (contains(.bleBeacon) ? ["ble-beacon"] : [])
    }
}

/// How a beacon subscription scans (GNSBeaconStrategy). Unset fields keep the daemon's defaults.
public struct BeaconStrategy: Sendable, Equatable {
    /// false: iBeacons are ignored (default true).
    public var includeIBeacons: Bool?
    /// Passive, low-power scanning: beacons are found and lost later (default false).
    public var lowPowerPreferred: Bool?
    /// Keep scanning while the app is in the background (default false).
    public var allowInBackground: Bool?
    /// Every beacon heard, registered or not, as a message of the reserved
    /// namespace `__reserved_namespace` whose content is the beacon's id; needs
    /// no server (default false).
    public var raw: Bool?

    public init(includeIBeacons: Bool? = nil, lowPowerPreferred: Bool? = nil, allowInBackground: Bool? = nil,
                raw: Bool? = nil) {
        self.includeIBeacons = includeIBeacons
        self.lowPowerPreferred = lowPowerPreferred
        self.allowInBackground = allowInBackground
        self.raw = raw
    }
}

/// Which mediums, which direction and how long: the GNSStrategy of the iOS API.
/// Unset fields keep the daemon's defaults.
public struct Strategy: Sendable, Equatable {
    /// Which way tokens go: this device's out, other devices' in, or both.
    public enum Mode: String, Sendable {
        case broadcast, scan, both
    }

    /// How near counts as nearby: BLE range, or earshot (audio only).
    public enum Distance: String, Sendable {
        case `default`, earshot
    }

    /// `ble`, `audio`.
    public var mediums: [String]?
    /// Default: both.
    public var mode: Mode?
    /// Seconds; 0 (subscriptions only) means until ended.
    public var ttlSeconds: UInt32?
    public var distance: Distance?
    /// Keep working while the app is in the background (BLE only: audio
    /// pauses there). Default false: the object pauses in the background.
    public var allowInBackground: Bool?

    /// A strategy; what is left nil is the daemon's default.
    public init(mediums: [String]? = nil, mode: Mode? = nil, ttlSeconds: UInt32? = nil, distance: Distance? = nil,
                allowInBackground: Bool? = nil) {
        self.mediums = mediums
        self.mode = mode
        self.ttlSeconds = ttlSeconds
        self.distance = distance
        self.allowInBackground = allowInBackground
    }
}

/// An error from the daemon, by its D-Bus error name.
public struct NearbyMessagesError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The daemon's errors (doc/dbus-api.md), and the bus's when the daemon cannot be reached.
    public enum Kind: Sendable, Equatable {
        case invalidArguments, limitExceeded, notSupported
        /// The user denied Nearby to the app (Publish, Subscribe).
        case notPermitted
        /// The caller may not do this (another user's permissions, daemon-wide settings).
        case accessDenied
        /// The object or agent named is gone (ended, expired, released).
        case doesNotExist
        /// nearbyd is not running on that bus (or not reachable).
        case daemonUnavailable
        /// Any other D-Bus error, by name.
        case other(String)
    }

    public let kind: Kind
    /// What the daemon said: which argument was wrong and why.
    public let message: String

    public var description: String { message }
}
