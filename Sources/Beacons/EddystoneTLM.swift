/// A plain (unencrypted, version 0x00) Eddystone-TLM telemetry frame.
///
/// Wire layout (service data after the 0xFEAA UUID), all big-endian:
/// `20 | 00 | battery mV (2) | temperature 8.8 (2) | PDU count (4) | uptime 0.1 s (4)`,
/// exactly 14 bytes.
///
/// Fields hold the raw wire values so every frame round-trips exactly,
/// including the "not supported" sentinels; the optional accessors
/// interpret those sentinels. Encrypted TLM (version 0x01) is rejected
/// with ``BeaconError/encryptedTLMUnsupported``: reading it needs the
/// beacon's identity key, and guessing would yield garbage telemetry.
public struct EddystoneTLM: Hashable, Sendable {
    /// The only TLM version this type reads and writes.
    public static let plainVersion: UInt8 = 0x00
    /// The version byte of encrypted TLM, recognised only to reject it clearly.
    public static let encryptedVersion: UInt8 = 0x01
    /// The raw temperature meaning "not supported" (-128 °C).
    public static let temperatureNotSupported = Int16.min

    /// Battery voltage in millivolts; 0 means the beacon does not report it.
    public var batteryVoltage: UInt16
    /// Temperature in °C as signed 8.8 fixed point (value / 256);
    /// ``temperatureNotSupported`` (0x8000) means not reported.
    public var temperatureFixedPoint: Int16
    /// Advertising PDUs sent since power-on or reboot.
    public var advertisingPDUCount: UInt32
    /// Time since power-on or reboot, in tenths of a second.
    public var uptimeDeciseconds: UInt32

    /// Creates a TLM frame from raw field values.
    public init(
        batteryVoltage: UInt16,
        temperatureFixedPoint: Int16,
        advertisingPDUCount: UInt32,
        uptimeDeciseconds: UInt32
    ) {
        self.batteryVoltage = batteryVoltage
        self.temperatureFixedPoint = temperatureFixedPoint
        self.advertisingPDUCount = advertisingPDUCount
        self.uptimeDeciseconds = uptimeDeciseconds
    }

    /// Parses Eddystone service data that must hold a 14-byte plain TLM frame.
    public init(serviceData: [UInt8]) throws(BeaconError) {
        self = try Self.parse(frame: serviceData[...]).get()
    }

    /// The parser proper; see ``BeaconFrame`` for why it returns a `Result`.
    static func parse(frame: ArraySlice<UInt8>) -> Result<Self, BeaconError> {
        if let problem = Eddystone.frameTypeProblem(.tlm, in: frame) { return .failure(problem) }
        // Version before length: encrypted TLM is 18 bytes, and "encrypted,
        // unsupported" says more than "wrong length".
        if frame.count >= 2 {
            switch frame.byte(at: 1) {
            case Self.plainVersion: break
            case Self.encryptedVersion: return .failure(.encryptedTLMUnsupported)
            case let other: return .failure(.unknownTLMVersion(other))
            }
        }
        guard BeaconKind.eddystoneTLM.accepts(length: frame.count) else {
            return .failure(.invalidLength(.eddystoneTLM, actual: frame.count))
        }
        return .success(Self(
            batteryVoltage: frame.uint16BE(at: 2),
            temperatureFixedPoint: Int16(bitPattern: frame.uint16BE(at: 4)),
            advertisingPDUCount: frame.uint32BE(at: 6),
            uptimeDeciseconds: frame.uint32BE(at: 10)))
    }

    /// Battery voltage in millivolts, or nil when the beacon reports 0 (not supported).
    public var batteryMillivolts: UInt16? {
        batteryVoltage == 0 ? nil : batteryVoltage
    }

    /// Temperature in °C, or nil when the beacon reports 0x8000 (not supported).
    public var temperatureCelsius: Double? {
        temperatureFixedPoint == Self.temperatureNotSupported
            ? nil : Double(temperatureFixedPoint) / 256
    }

    /// Time since power-on or reboot, in seconds.
    public var uptimeSeconds: Double {
        Double(uptimeDeciseconds) / 10
    }

    /// The 14-byte frame as Eddystone service data.
    public var serviceData: [UInt8] {
        var out: [UInt8] = [Eddystone.FrameType.tlm.rawValue, Self.plainVersion]
        out.reserveCapacity(14)
        out.appendBigEndian(batteryVoltage)
        out.appendBigEndian(UInt16(bitPattern: temperatureFixedPoint))
        out.appendBigEndian(advertisingPDUCount)
        out.appendBigEndian(uptimeDeciseconds)
        return out
    }

    /// A complete advertising payload carrying this frame.
    public var advertisingData: [UInt8] {
        Eddystone.advertisingData(frame: serviceData)
    }
}
