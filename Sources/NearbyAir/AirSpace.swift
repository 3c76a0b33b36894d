#if canImport(Glibc)
import Glibc
#endif
import NearbyCore

/// How the simulated radio behaves.
public struct AirParameters: Equatable, Sendable {
    /// Path-loss exponent n in RSSI = txPower − 10·n·log10(d): 2 is free space, 2.7–3.5 indoors.
    public var pathLossExponent: Double
    /// Broadcasts weaker than this (dBm) are not heard: it sets the range.
    public var sensitivity: Double
    /// Standard deviation (dB) of the Gaussian noise added to each hearing.
    public var noiseSigma: Double
    /// Seed of the noise, so a run can be repeated.
    public var seed: UInt64
    /// How often every broadcast is repeated, in seconds (BLE advertising interval).
    public var interval: Double

    public init(pathLossExponent: Double = 2.0, sensitivity: Double = -90, noiseSigma: Double = 0,
                seed: UInt64 = 1, interval: Double = 0.1) {
        self.pathLossExponent = pathLossExponent
        self.sensitivity = sensitivity
        self.noiseSigma = noiseSigma
        self.seed = seed
        self.interval = interval
    }

    /// The distance at which a broadcast of `txPower` fades below the sensitivity.
    public func range(txPower: Int) -> Double {
        pow(10, (Double(txPower) - sensitivity) / (10 * pathLossExponent))
    }
}

/// The shared space: where each device is, what it broadcasts and on which
/// mediums it listens. Pure state and arithmetic; the server drives it.
public struct AirSpace: Sendable {
    /// One broadcast reaching one device.
    public struct Delivery: Equatable, Sendable {
        public var recipient: String
        public var heard: Heard

        public init(recipient: String, heard: Heard) {
            self.recipient = recipient
            self.heard = heard
        }
    }

    private struct Broadcast: Sendable {
        var medium: Medium
        var payload: [UInt8]
        var txPower: Int
    }

    private struct Device: Sendable {
        var position: Position
        var broadcasts: [String: Broadcast] = [:]
        var scanning: Set<Medium> = []
    }

    public let parameters: AirParameters
    private var devices: [String: Device] = [:]
    private var random: SplitMix64

    public init(parameters: AirParameters) {
        self.parameters = parameters
        random = SplitMix64(seed: parameters.seed)
    }

    public var deviceNames: [String] { devices.keys.sorted() }

    public func position(of device: String) -> Position? { devices[device]?.position }

    public mutating func attach(_ name: String, at position: Position) throws(AirProtocolError) {
        guard devices[name] == nil else { throw AirProtocolError("a device named '\(name)' is already attached") }
        devices[name] = Device(position: position)
    }

    public mutating func detach(_ name: String) {
        devices.removeValue(forKey: name)
    }

    /// Moves a device; returns what its new neighbours hear at once.
    public mutating func move(_ name: String, to position: Position) throws(AirProtocolError) -> [Delivery] {
        guard devices[name] != nil else { throw AirProtocolError("no device named '\(name)'") }
        devices[name]?.position = position
        return deliveries(from: [name]) + deliveries(to: name)
    }

    /// Starts or replaces a broadcast; returns its first round of deliveries.
    public mutating func advertise(_ device: String, id: String, medium: Medium, payload: [UInt8],
                                   txPower: Int) throws(AirProtocolError) -> [Delivery] {
        guard devices[device] != nil else { throw AirProtocolError("attach before advertising") }
        guard devices[device]?.broadcasts[id] != nil || (devices[device]?.broadcasts.count ?? 0) < 16 else {
            throw AirProtocolError("a device may have at most 16 broadcasts")
        }
        devices[device]?.broadcasts[id] = Broadcast(medium: medium, payload: payload, txPower: txPower)
        return deliveries(from: [device], only: id)
    }

    public mutating func stopAdvertising(_ device: String, id: String) throws(AirProtocolError) {
        guard devices[device] != nil else { throw AirProtocolError("attach before advertising") }
        devices[device]?.broadcasts.removeValue(forKey: id)
    }

    /// Starts or stops listening; starting hears every broadcast in range at once.
    public mutating func scan(_ device: String, medium: Medium, enabled: Bool) throws(AirProtocolError) -> [Delivery] {
        guard devices[device] != nil else { throw AirProtocolError("attach before scanning") }
        if enabled {
            devices[device]?.scanning.insert(medium)
            return deliveries(to: device)
        }
        devices[device]?.scanning.remove(medium)
        return []
    }

    /// One advertising interval: every broadcast to every listener in range.
    public mutating func tick() -> [Delivery] {
        deliveries(from: deviceNames)
    }

    public func describe() -> [AirDevice] {
        deviceNames.compactMap { name in
            devices[name].map {
                AirDevice(name: name, position: $0.position, broadcasts: $0.broadcasts.count,
                          scanning: $0.scanning.sorted())
            }
        }
    }

    private mutating func deliveries(from senders: [String], only: String? = nil) -> [Delivery] {
        var result: [Delivery] = []
        for sender in senders {
            guard let source = devices[sender] else { continue }
            for (id, broadcast) in source.broadcasts.sorted(by: { $0.key < $1.key }) where only == nil || only == id {
                for recipient in deviceNames where recipient != sender {
                    guard let target = devices[recipient], target.scanning.contains(broadcast.medium) else { continue }
                    if let heard = hearing(broadcast, from: source.position, at: target.position) {
                        result.append(Delivery(recipient: recipient, heard: heard))
                    }
                }
            }
        }
        return result
    }

    private mutating func deliveries(to recipient: String) -> [Delivery] {
        guard let target = devices[recipient] else { return [] }
        var result: [Delivery] = []
        for sender in deviceNames where sender != recipient {
            guard let source = devices[sender] else { continue }
            for (_, broadcast) in source.broadcasts.sorted(by: { $0.key < $1.key })
            where target.scanning.contains(broadcast.medium) {
                if let heard = hearing(broadcast, from: source.position, at: target.position) {
                    result.append(Delivery(recipient: recipient, heard: heard))
                }
            }
        }
        return result
    }

    private mutating func hearing(_ broadcast: Broadcast, from: Position, at: Position) -> Heard? {
        let distance = max(from.distance(to: at), 0.01)
        var rssi = Double(broadcast.txPower) - 10 * parameters.pathLossExponent * log10(distance)
        if parameters.noiseSigma > 0 { rssi += parameters.noiseSigma * random.nextGaussian() }
        guard rssi >= parameters.sensitivity else { return nil }
        return Heard(medium: broadcast.medium, payload: broadcast.payload, rssi: Int(rssi.rounded()),
                     txPower: broadcast.txPower)
    }
}

extension SplitMix64 {
    /// A standard normal sample (Box–Muller).
    mutating func nextGaussian() -> Double {
        let u1 = Double.random(in: Double.ulpOfOne..<1, using: &self)
        let u2 = Double.random(in: 0..<1, using: &self)
        return (-2 * log(u1)).squareRoot() * cos(2 * .pi * u2)
    }
}
