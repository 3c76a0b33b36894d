/// A way of exchanging tokens with nearby devices.
public enum Medium: String, CaseIterable, Codable, Sendable, Comparable {
    case ble
    case audio

    public static func < (lhs: Medium, rhs: Medium) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Whether a publication or subscription makes its device heard, listens for
/// others, or both (GNSDiscoveryMode).
public enum DiscoveryMode: String, CaseIterable, Codable, Sendable {
    case broadcast
    case scan
    case both

    public var broadcasts: Bool { self != .scan }
    public var scans: Bool { self != .broadcast }
}

/// How near "nearby" is (GNSDiscoveryDistance... in spirit): `earshot` keeps
/// to the few metres that sound carries, and so needs audio.
public enum DistanceType: String, CaseIterable, Codable, Sendable {
    case `default`
    case earshot
}

/// How a publication or subscription is discovered: the GNSStrategy of the iOS API.
public struct Strategy: Equatable, Hashable, Codable, Sendable {
    public static let defaultTTL: UInt32 = 300
    public static let maximumTTL: UInt32 = 86_400

    public var mediums: Set<Medium>
    public var mode: DiscoveryMode
    /// Lifetime in seconds; 0 means until ended (subscriptions only).
    public var ttlSeconds: UInt32
    public var distance: DistanceType
    public var allowInBackground: Bool

    public init(mediums: Set<Medium> = Set(Medium.allCases), mode: DiscoveryMode = .both,
                ttlSeconds: UInt32 = Strategy.defaultTTL, distance: DistanceType = .default,
                allowInBackground: Bool = false) {
        self.mediums = mediums
        self.mode = mode
        self.ttlSeconds = ttlSeconds
        self.distance = distance
        self.allowInBackground = allowInBackground
    }

    /// Which object kind a strategy belongs to; they differ in the TTLs they accept.
    public enum Owner: String, Sendable, Hashable {
        case publication
        case subscription
    }

    /// Checks bounds and contradictions. `enabled` are the mediums the daemon is
    /// configured to use; `explicitMediums` says whether the caller named the
    /// mediums (a default that includes a disabled medium just drops it).
    public func validated(for owner: Owner, enabled: Set<Medium>, explicitMediums: Bool) throws(NearbyError) -> Strategy {
        var result = self
        guard !mediums.isEmpty else { throw .invalidArguments("Strategy.Mediums must name at least one medium") }
        if owner == .publication, ttlSeconds == 0 {
            throw .invalidArguments("Strategy.TTL 0 (no expiry) is for subscriptions only; publications take 1..\(Self.maximumTTL)")
        }
        guard ttlSeconds <= Self.maximumTTL else {
            throw .invalidArguments("Strategy.TTL \(ttlSeconds) is above the maximum of \(Self.maximumTTL) seconds")
        }
        if distance == .earshot, !mediums.contains(.audio) {
            throw .invalidArguments("Strategy.Distance 'earshot' needs the audio medium")
        }
        if allowInBackground, !mediums.contains(.ble) {
            throw .invalidArguments("Strategy.AllowInBackground needs BLE: audio never runs in the background")
        }
        if explicitMediums {
            let disabled = mediums.subtracting(enabled)
            guard disabled.isEmpty else {
                throw .notSupported("medium \(disabled.map(\.rawValue).sorted().joined(separator: ", ")) is disabled in this daemon's configuration")
            }
        } else {
            result.mediums = mediums.intersection(enabled)
            guard !result.mediums.isEmpty else { throw .notSupported("no medium is enabled in this daemon's configuration") }
        }
        if distance == .earshot, !result.mediums.contains(.audio) {
            throw .notSupported("Strategy.Distance 'earshot' needs audio, which is disabled in this daemon's configuration")
        }
        return result
    }
}
