/// What a subscription listens for (GNSSubscriptionParams'
/// `deviceTypesToDiscover`): other devices running Nearby, BLE beacons, or both.
public struct DeviceTypes: Hashable, Sendable {
    /// Messages published by other devices running Nearby (through the server).
    public var nearby: Bool
    /// Beacon attachments, and how to scan for beacons; nil: no beacons.
    public var beacons: BeaconStrategy?

    public init(nearby: Bool = true, beacons: BeaconStrategy? = nil) {
        self.nearby = nearby
        self.beacons = beacons
    }
}

/// How a subscription scans for beacons (GNSBeaconStrategy, plus raw sightings).
public struct BeaconStrategy: Hashable, Sendable {
    /// false: iBeacons are ignored, only Eddystone counts.
    public var includeIBeacons: Bool
    /// Passive, low-power scanning (BlueZ's advertisement monitor where the
    /// adapter offers one): beacons are found later and lost later.
    public var lowPowerPreferred: Bool
    /// Keep scanning (with low power) while the manager is in the background.
    public var allowInBackground: Bool
    /// Deliver every beacon heard, registered or not, as a message of the
    /// reserved namespace; needs no server.
    public var raw: Bool

    public init(includeIBeacons: Bool = true, lowPowerPreferred: Bool = false, allowInBackground: Bool = false,
                raw: Bool = false) {
        self.includeIBeacons = includeIBeacons
        self.lowPowerPreferred = lowPowerPreferred
        self.allowInBackground = allowInBackground
        self.raw = raw
    }
}

/// The beacon a message was found through: `MessageFound`'s `info.Beacon`.
public struct BeaconDetails: Hashable, Sendable, Codable {
    /// `eddystone-uid`, `eddystone-eid` or `ibeacon`.
    public var kind: String
    /// The advertised id in lowercase hex (Eddystone-UID: namespace then
    /// instance; iBeacon: UUID, major, minor).
    public var id: String
    /// The power the beacon declares at one metre, dBm.
    public var txPower: Int

    public init(kind: String, id: String, txPower: Int) {
        self.kind = kind
        self.id = id
        self.txPower = txPower
    }
}
