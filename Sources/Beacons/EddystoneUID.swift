/// An Eddystone-UID frame: a static 16-byte beacon id (namespace + instance).
///
/// Wire layout (service data after the 0xFEAA UUID):
/// `00 | tx power | namespace (10) | instance (6) | RFU 00 00`.
///
/// Leniency: the specification fixes the frame at 20 bytes, but notes that
/// existing beacons truncate it to 18 by omitting the two reserved bytes.
/// Both lengths are accepted; 19 is not (it matches neither layout). When
/// present, the reserved bytes must be zero, as the specification requires,
/// so that a future use of them is not silently misread. Frames are always
/// built at the full 20 bytes.
public struct EddystoneUID: Hashable, Sendable {
    /// Calibrated transmit power at 0 m, in dBm (the "ranging data" field).
    /// Not range-checked: the specification's -100...+20 is advice for
    /// configuring beacons, and a miscalibrated beacon still has a valid id.
    public var txPower: Int8
    /// The 10-byte namespace id.
    public var namespace: EddystoneNamespace
    /// The 6-byte instance id.
    public var instance: EddystoneInstance

    /// Creates a UID frame from its fields.
    public init(txPower: Int8, namespace: EddystoneNamespace, instance: EddystoneInstance) {
        self.txPower = txPower
        self.namespace = namespace
        self.instance = instance
    }

    /// Parses Eddystone service data (the bytes after the 0xFEAA UUID)
    /// that must hold a UID frame of 18 or 20 bytes.
    public init(serviceData: [UInt8]) throws(BeaconError) {
        self = try Self.parse(frame: serviceData[...]).get()
    }

    /// The parser proper; see ``BeaconFrame`` for why it returns a `Result`.
    static func parse(frame: ArraySlice<UInt8>) -> Result<Self, BeaconError> {
        if let problem = Eddystone.frameTypeProblem(.uid, in: frame) { return .failure(problem) }
        guard BeaconKind.eddystoneUID.accepts(length: frame.count) else {
            return .failure(.invalidLength(.eddystoneUID, actual: frame.count))
        }
        if frame.count == 20, frame.byte(at: 18) != 0 || frame.byte(at: 19) != 0 {
            return .failure(.uidReservedBytesNotZero(frame.byte(at: 18), frame.byte(at: 19)))
        }
        return .success(Self(
            txPower: frame.int8(at: 1),
            namespace: EddystoneNamespace(exactly: frame.bytes(at: 2, count: 10)),
            instance: EddystoneInstance(exactly: frame.bytes(at: 12, count: 6))))
    }

    /// The 20-byte frame, reserved bytes included, as Eddystone service data.
    public var serviceData: [UInt8] {
        var out: [UInt8] = [Eddystone.FrameType.uid.rawValue]
        out.reserveCapacity(20)
        out.appendSigned(txPower)
        out.append(contentsOf: namespace.bytes)
        out.append(contentsOf: instance.bytes)
        out.append(contentsOf: [0, 0])
        return out
    }

    /// A complete 31-byte advertising payload carrying this frame.
    public var advertisingData: [UInt8] {
        Eddystone.advertisingData(frame: serviceData)
    }

    /// The id the Proximity Beacon API registers: type `EDDYSTONE`,
    /// namespace followed by instance (16 bytes).
    public var advertisedID: AdvertisedID {
        AdvertisedID(type: .eddystone, checkedBytes: namespace.bytes + instance.bytes)
    }
}
