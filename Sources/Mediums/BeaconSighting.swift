import Beacons

/// One beacon frame heard over BLE, as the backend heard it: what the daemon's
/// beacon subscriptions work from.
public struct BeaconSighting: Hashable, Sendable {
    /// The frame, parsed.
    public var frame: BeaconFrame
    /// Who sent it, as the backend names senders (a Bluetooth address, a
    /// BlueZ device path, a simulated device's name): an Eddystone beacon
    /// interleaves UID (or EID), URL and TLM frames from one sender, and only
    /// the sender ties its telemetry to its id.
    public var sender: String
    /// Received signal strength, dBm.
    public var rssi: Int

    /// A hearing at `rssi`; without one (a controller that reports none, a
    /// device held by a passive monitor) the frame's own power at one metre,
    /// as if the beacon were 1 m away, or -127 dBm for TLM, which declares none.
    public init(frame: BeaconFrame, sender: String, rssi: Int?) {
        self.frame = frame
        self.sender = sender
        self.rssi = rssi ?? frame.powerAtOneMetre ?? -127
    }
}

/// A BLE backend that also reports the beacon frames it hears while it listens
/// (for tokens or for beacons: the daemon asks for listening either way).
public protocol BeaconScanner: MediumBackend {
    /// Every beacon frame heard, as heard.
    var beaconSightings: AsyncStream<BeaconSighting> { get }
}

/// The beacon stream of a backend, and its end to yield into. Keeps the newest
/// 1,024 when the daemon falls behind, as ``MediumReports`` does.
public struct BeaconReports: Sendable {
    public let sightings: AsyncStream<BeaconSighting>
    public let sink: AsyncStream<BeaconSighting>.Continuation

    public init() {
        (sightings, sink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1024))
    }
}
