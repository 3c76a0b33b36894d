import Foundation

/// A message: small content (1 to 102400 bytes) with a type, in a namespace.
/// The GNSMessage of the iOS API.
public struct Message: Hashable, Sendable {
    public var content: Data
    /// Empty when publishing: the project's own namespace.
    public var namespace: String
    public var type: String

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
    /// Received signal strength, dBm.
    public var rssi: Int
    /// Estimated distance, metres.
    public var distanceMeters: Double
}

/// Which mediums, which direction and how long: the GNSStrategy of the iOS API.
/// Unset fields keep the daemon's defaults.
public struct Strategy: Sendable, Equatable {
    public enum Mode: String, Sendable {
        case broadcast, scan, both
    }

    public enum Distance: String, Sendable {
        case `default`, earshot
    }

    /// `ble`, `audio`.
    public var mediums: [String]?
    public var mode: Mode?
    /// Seconds; 0 (subscriptions only) means until ended.
    public var ttlSeconds: UInt32?
    public var distance: Distance?
    public var allowInBackground: Bool?

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
    public enum Kind: Sendable, Equatable {
        case invalidArguments, notPermitted, limitExceeded, notSupported, accessDenied
        /// nearbyd is not running on that bus (or not reachable).
        case daemonUnavailable
        case other(String)
    }

    public let kind: Kind
    public let message: String

    public var description: String { message }
}
