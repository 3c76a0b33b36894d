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
    /// RMS of the white Gaussian noise every microphone hears, in dBFS (0 dBFS is
    /// an RMS of 1, the amplitude of full scale; a full-scale sine is -3 dBFS).
    public var audioNoise: Double
    /// Absorption of sound by the air, dB per metre beyond the first; 0.5 is about
    /// right at 19–20 kHz.
    public var absorption: Double

    /// The valid ``audioNoise`` levels: -200 dBFS is silence for any practical purpose.
    public static let audioNoiseRange: ClosedRange<Double> = -200...0
    /// The valid ``absorption`` values.
    public static let absorptionRange: ClosedRange<Double> = 0...10

    public init(pathLossExponent: Double = 2.0, sensitivity: Double = -90, noiseSigma: Double = 0,
                seed: UInt64 = 1, interval: Double = 0.1, audioNoise: Double = -50, absorption: Double = 0.5) {
        self.pathLossExponent = pathLossExponent
        self.sensitivity = sensitivity
        self.noiseSigma = noiseSigma
        self.seed = seed
        self.interval = interval
        self.audioNoise = audioNoise
        self.absorption = absorption
    }

    /// Throws, naming the first parameter out of its range (NaN and infinities never are in range).
    public func validate() throws(AirProtocolError) {
        guard pathLossExponent > 0, pathLossExponent.isFinite else { throw AirProtocolError("the path-loss exponent must be positive") }
        guard sensitivity.isFinite else { throw AirProtocolError("the sensitivity must be a number") }
        guard noiseSigma >= 0, noiseSigma.isFinite else { throw AirProtocolError("the RSSI noise must not be negative") }
        guard interval >= 0.01, interval <= 10 else { throw AirProtocolError("the interval must be within 0.01...10 seconds") }
        guard Self.audioNoiseRange.contains(audioNoise) else {
            throw AirProtocolError("the audio noise must be within -200...0 dBFS")
        }
        guard Self.absorptionRange.contains(absorption) else {
            throw AirProtocolError("the absorption must be within 0...10 dB/m")
        }
    }

    /// The distance at which a broadcast of `txPower` fades below the sensitivity.
    public func range(txPower: Int) -> Double {
        PathLoss.distance(rssi: sensitivity, txPower: txPower, exponent: pathLossExponent)
    }

    /// The amplitude gain of sound that travels `distance` metres:
    ///
    ///     gain(d) = (1 m / max(d, 0.1 m)) · 10^(−absorption · max(d − 1 m, 0) / 20)
    ///
    /// Spherical spreading (amplitude ∝ 1/d, the 20·log10(d) law, full level at
    /// 1 m, no closer than 10 cm) and ``absorption`` dB per metre beyond the first.
    public func audioGain(distance: Double) -> Double {
        (1 / max(distance, 0.1)) * pow(10, -absorption * max(distance - 1, 0) / 20)
    }
}

/// The shared space: where each device is, what it broadcasts and on which
/// mediums it listens, and what its speaker plays and its microphone hears.
/// Pure state and arithmetic; the server drives it.
///
/// The acoustic space: a device with an audio link (``openAudio(_:)``) has a
/// speaker and a microphone. Each ``audioTick()`` (20 ms) every such speaker
/// plays the next ``AirAudio/blockSamples`` samples of its queue (silence when
/// it is empty), and every such microphone hears, sample by sample,
///
///     Σ over the speakers of gain · sample + noise
///
/// with the gain of ``AirParameters/audioGain(distance:)`` for the other
/// devices' speakers and 1 for its own: a device hears itself as loud as a
/// device 1 m away. The noise is white and Gaussian with an RMS of
/// ``AirParameters/audioNoise`` dBFS, from a stream per listener seeded by
/// ``AirParameters/seed`` and the listener's name. The arithmetic is linear and
/// sample-exact (no resampling, no compression, no clipping of the sum), so
/// the daemons' modems run on exactly what the model says they hear.
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
        /// The speaker and microphone, while the device has an audio link.
        var audio: Acoustics?
        /// A beacon the space hosts, rather than a device a connection attached.
        var isBeacon = false
    }

    private struct Acoustics: Sendable {
        var speaker = SampleQueue(capacity: AirAudio.speakerQueueSamples)
        var noise: GaussianNoise
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

    /// Places a beacon, or moves and reprograms the one of that name: a device
    /// that broadcasts `payload` on BLE and listens to nothing. Returns its
    /// first round of deliveries.
    public mutating func placeBeacon(_ name: String, at position: Position, payload: [UInt8],
                                     txPower: Int) throws(AirProtocolError) -> [Delivery] {
        if let existing = devices[name], !existing.isBeacon {
            throw AirProtocolError("a device named '\(name)' is attached; beacons need names of their own")
        }
        devices[name] = Device(position: position, broadcasts: [Self.beaconBroadcast: Broadcast(medium: .ble, payload: payload, txPower: txPower)],
                               isBeacon: true)
        return deliveries(from: [name])
    }

    /// Removes a beacon placed with ``placeBeacon(_:at:payload:txPower:)``.
    public mutating func removeBeacon(_ name: String) throws(AirProtocolError) {
        guard devices[name]?.isBeacon == true else { throw AirProtocolError("no beacon named '\(name)'") }
        devices.removeValue(forKey: name)
    }

    private static let beaconBroadcast = "beacon"

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
                          scanning: $0.scanning.sorted(), audio: $0.audio != nil, beacon: $0.isBeacon)
            }
        }
    }

    // MARK: The acoustic space

    /// Gives `device` a speaker and a microphone (its audio link opened).
    public mutating func openAudio(_ device: String) throws(AirProtocolError) {
        guard devices[device] != nil else { throw AirProtocolError("no device named '\(device)' is attached") }
        guard devices[device]?.audio == nil else { throw AirProtocolError("device '\(device)' already has an audio link") }
        let rms = pow(10, parameters.audioNoise / 20)
        devices[device]?.audio = Acoustics(noise: GaussianNoise(seed: parameters.seed, listener: device, rms: rms))
    }

    /// Takes `device`'s speaker and microphone away; what its speaker had queued is dropped.
    public mutating func closeAudio(_ device: String) {
        devices[device]?.audio = nil
    }

    /// Queues `samples` for `device`'s speaker, clamped to ±1; it plays them
    /// from the next tick on. All or nothing: throws for a non-finite sample or
    /// when the queue would exceed ``AirAudio/speakerQueueSamples``.
    public mutating func play(_ device: String, _ samples: [Float]) throws(AirProtocolError) {
        guard devices[device]?.audio != nil else { throw AirProtocolError("device '\(device)' has no audio link") }
        guard samples.allSatisfy({ $0.isFinite }) else { throw AirProtocolError("a speaker sample is not finite") }
        guard devices[device]!.audio!.speaker.append(samples) else {
            throw AirProtocolError("the speaker's queue would exceed \(AirAudio.speakerQueueSamples) samples")
        }
    }

    /// One tick of the acoustic space: every speaker plays its next block, and
    /// the result is what each microphone hears in that block, by device name.
    public mutating func audioTick() -> [String: [Float]] {
        let names = deviceNames.filter { devices[$0]?.audio != nil }
        var speakers: [(name: String, position: Position, block: [Float])] = []
        for name in names where devices[name]!.audio!.speaker.count > 0 {
            speakers.append((name, devices[name]!.position, devices[name]!.audio!.speaker.take(AirAudio.blockSamples)))
        }
        var heard: [String: [Float]] = [:]
        for name in names {
            let position = devices[name]!.position
            let sources = speakers.map { speaker in
                (gain: speaker.name == name ? 1 : Float(parameters.audioGain(distance: speaker.position.distance(to: position))),
                 samples: speaker.block)
            }
            heard[name] = Self.mix(sources, noise: devices[name]!.audio!.noise.samples(AirAudio.blockSamples))
        }
        return heard
    }

    /// One microphone block: per sample, the sum of every source's samples times
    /// its gain, plus the noise. Sources are as long as the noise or longer.
    public static func mix(_ sources: [(gain: Float, samples: [Float])], noise: [Float]) -> [Float] {
        var block = [Float](repeating: 0, count: noise.count)
        for source in sources {
            precondition(source.samples.count >= block.count, "a source shorter than the block")
            source.samples.withUnsafeBufferPointer { samples in
                for index in block.indices { block[index] += source.gain * samples[index] }
            }
        }
        for index in block.indices { block[index] += noise[index] }
        return block
    }

    private mutating func deliveries(from senders: [String], only: String? = nil) -> [Delivery] {
        var result: [Delivery] = []
        for sender in senders {
            guard let source = devices[sender] else { continue }
            for (id, broadcast) in source.broadcasts.sorted(by: { $0.key < $1.key }) where only == nil || only == id {
                for recipient in deviceNames where recipient != sender {
                    guard let target = devices[recipient], target.scanning.contains(broadcast.medium) else { continue }
                    if let heard = hearing(broadcast, from: sender, at: source.position, by: target.position) {
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
                if let heard = hearing(broadcast, from: sender, at: source.position, by: target.position) {
                    result.append(Delivery(recipient: recipient, heard: heard))
                }
            }
        }
        return result
    }

    private mutating func hearing(_ broadcast: Broadcast, from sender: String, at from: Position,
                                  by at: Position) -> Heard? {
        var rssi = PathLoss.rssi(distance: from.distance(to: at), txPower: broadcast.txPower, exponent: parameters.pathLossExponent)
        if parameters.noiseSigma > 0 { rssi += parameters.noiseSigma * random.nextGaussian() }
        guard rssi >= parameters.sensitivity else { return nil }
        return Heard(medium: broadcast.medium, payload: broadcast.payload, rssi: Int(rssi.rounded()),
                     txPower: broadcast.txPower, sender: sender)
    }
}
