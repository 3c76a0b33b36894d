/// An Eddystone-EID frame: an 8-byte ephemeral id that the beacon rotates,
/// resolvable only by a service holding the beacon's identity key.
///
/// Wire layout (service data after the 0xFEAA UUID):
/// `30 | tx power | ephemeral id (8)`, exactly 10 bytes.
public struct EddystoneEID: Hashable, Sendable {
    /// Calibrated transmit power at 0 m, in dBm. Not range-checked.
    public var txPower: Int8
    /// The current ephemeral identifier.
    public var ephemeralID: EddystoneEphemeralID

    /// Creates an EID frame from its fields.
    public init(txPower: Int8, ephemeralID: EddystoneEphemeralID) {
        self.txPower = txPower
        self.ephemeralID = ephemeralID
    }

    /// Parses Eddystone service data that must hold a 10-byte EID frame.
    public init(serviceData: [UInt8]) throws(BeaconError) {
        self = try Self.parse(frame: serviceData[...]).get()
    }

    /// The parser proper; see ``BeaconFrame`` for why it returns a `Result`.
    static func parse(frame: ArraySlice<UInt8>) -> Result<Self, BeaconError> {
        if let problem = Eddystone.frameTypeProblem(.eid, in: frame) { return .failure(problem) }
        guard BeaconKind.eddystoneEID.accepts(length: frame.count) else {
            return .failure(.invalidLength(.eddystoneEID, actual: frame.count))
        }
        return .success(Self(
            txPower: frame.int8(at: 1),
            ephemeralID: EddystoneEphemeralID(exactly: frame.bytes(at: 2, count: 8))))
    }

    /// The 10-byte frame as Eddystone service data.
    public var serviceData: [UInt8] {
        var out: [UInt8] = [Eddystone.FrameType.eid.rawValue]
        out.appendSigned(txPower)
        out.append(contentsOf: ephemeralID.bytes)
        return out
    }

    /// A complete advertising payload carrying this frame.
    public var advertisingData: [UInt8] {
        Eddystone.advertisingData(frame: serviceData)
    }

    /// The id the Proximity Beacon API uses: type `EDDYSTONE_EID`, the 8 bytes.
    public var advertisedID: AdvertisedID {
        AdvertisedID(type: .eddystoneEID, checkedBytes: ephemeralID.bytes)
    }
}
