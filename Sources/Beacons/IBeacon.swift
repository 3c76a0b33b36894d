import Foundation

/// An Apple iBeacon advertisement.
///
/// Manufacturer data layout (AD type 0xFF), exactly 25 bytes:
/// `4C 00 | 02 | 15 | proximity UUID (16) | major (2, BE) | minor (2, BE) | measured power`.
/// Everything is checked: company id, type byte, length byte and total
/// length, each with its own error, so a non-iBeacon Apple advertisement
/// handed here says what it is not.
public struct IBeacon: Hashable, Sendable {
    /// Apple's Bluetooth SIG company identifier (sent little-endian: `4C 00`).
    public static let appleCompanyID: UInt16 = 0x004C
    /// The Apple manufacturer-data type byte that marks an iBeacon.
    public static let iBeaconType: UInt8 = 0x02
    /// The iBeacon's own length byte: the 21 bytes that follow it.
    public static let iBeaconDataLength: UInt8 = 0x15

    /// The proximity UUID, usually shared by all of one deployment's beacons.
    public var proximityUUID: UUID
    /// Major value, e.g. a site or a floor.
    public var major: UInt16
    /// Minor value, e.g. one beacon within a site.
    public var minor: UInt16
    /// Calibrated received power at 1 m, in dBm (note: Eddystone uses 0 m).
    /// Not range-checked.
    public var measuredPower: Int8

    /// Creates an iBeacon from its fields.
    public init(proximityUUID: UUID, major: UInt16, minor: UInt16, measuredPower: Int8) {
        self.proximityUUID = proximityUUID
        self.major = major
        self.minor = minor
        self.measuredPower = measuredPower
    }

    /// Parses manufacturer-specific data (the AD structure's data, which
    /// starts with the company id) that must be a 25-byte iBeacon.
    ///
    /// Checks run in wire order, so the first wrong field is the one named:
    /// company id, then type, then length byte, then the total length.
    public init(manufacturerData: [UInt8]) throws(BeaconError) {
        self = try Self.parse(manufacturerData: manufacturerData[...]).get()
    }

    /// The parser proper; see ``BeaconFrame`` for why it returns a `Result`.
    static func parse(manufacturerData data: ArraySlice<UInt8>) -> Result<Self, BeaconError> {
        if data.count >= 2, data.uint16LE(at: 0) != appleCompanyID {
            return .failure(.wrongCompanyID(data.uint16LE(at: 0)))
        }
        if data.count >= 3, data.byte(at: 2) != iBeaconType {
            return .failure(.wrongIBeaconType(data.byte(at: 2)))
        }
        if data.count >= 4, data.byte(at: 3) != iBeaconDataLength {
            return .failure(.wrongIBeaconDataLength(data.byte(at: 3)))
        }
        guard BeaconKind.iBeacon.accepts(length: data.count) else {
            return .failure(.invalidLength(.iBeacon, actual: data.count))
        }
        let u = data.bytes(at: 4, count: 16)
        return .success(Self(
            proximityUUID: UUID(uuid: (u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7],
                                       u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15])),
            major: data.uint16BE(at: 20),
            minor: data.uint16BE(at: 22),
            measuredPower: data.int8(at: 24)))
    }

    /// Parses a whole advertising payload that must carry an iBeacon.
    ///
    /// The first manufacturer-specific structure that looks like an iBeacon
    /// (Apple company id, type 0x02) is parsed strictly. If there is none,
    /// the first manufacturer-specific structure is parsed strictly so the
    /// error names what it is instead; with none at all the error is
    /// ``BeaconError/noBeaconFound``. Flags are not required: scanners
    /// often merge or strip them.
    public init(advertisingData: [UInt8]) throws(BeaconError) {
        let structures = try ADStructure.split(advertisingData).get()
        let manufacturer = structures.filter { $0.type == ADType.manufacturerSpecific }
        guard let chosen = manufacturer.first(where: { Self.looksLikeIBeacon($0.data) })
            ?? manufacturer.first
        else { throw .noBeaconFound }
        self = try Self.parse(manufacturerData: chosen.data).get()
    }

    /// Whether manufacturer data claims to be an iBeacon (Apple, type
    /// 0x02). Other Apple advertisements (AirDrop, Handoff, ...) do not,
    /// and are ignored when searching a payload for beacons.
    static func looksLikeIBeacon(_ data: ArraySlice<UInt8>) -> Bool {
        data.count >= 3
            && data.uint16LE(at: 0) == appleCompanyID
            && data.byte(at: 2) == iBeaconType
    }

    /// The 16 proximity UUID bytes in network (big-endian) order.
    public var proximityUUIDBytes: [UInt8] {
        withUnsafeBytes(of: proximityUUID.uuid) { Array($0) }
    }

    /// The 25 bytes of manufacturer-specific data, company id first.
    public var manufacturerData: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(25)
        out.appendLittleEndian(Self.appleCompanyID)
        out.append(Self.iBeaconType)
        out.append(Self.iBeaconDataLength)
        out.append(contentsOf: proximityUUIDBytes)
        out.appendBigEndian(major)
        out.appendBigEndian(minor)
        out.appendSigned(measuredPower)
        return out
    }

    /// The classic 30-byte advertising payload: Flags (`02 01 06`) followed
    /// by the 27-byte manufacturer-specific structure (`1A FF` + 25 bytes).
    public var advertisingData: [UInt8] {
        var out: [UInt8] = [0x02, ADType.flags, 0x06, 26, ADType.manufacturerSpecific]
        out.append(contentsOf: manufacturerData)
        return out
    }

    /// The id the Proximity Beacon API uses: type `IBEACON`, proximity UUID
    /// then major then minor, big-endian (20 bytes).
    public var advertisedID: AdvertisedID {
        var bytes = proximityUUIDBytes
        bytes.appendBigEndian(major)
        bytes.appendBigEndian(minor)
        return AdvertisedID(type: .iBeacon, checkedBytes: bytes)
    }
}
