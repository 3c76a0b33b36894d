import Foundation

/// A beacon's identifier as Google's Proximity Beacon API names it
/// (`AdvertisedId`): a type plus the raw id bytes the beacon broadcasts.
public struct AdvertisedID: Hashable, Sendable, CustomStringConvertible {
    /// The `AdvertisedId.type` values for the frames this module parses.
    public enum IDType: String, Hashable, Sendable, CaseIterable {
        /// Eddystone-UID: namespace + instance, 16 bytes.
        case eddystone = "EDDYSTONE"
        /// Eddystone-EID: the ephemeral id, 8 bytes.
        case eddystoneEID = "EDDYSTONE_EID"
        /// iBeacon: proximity UUID + major + minor, 20 bytes.
        case iBeacon = "IBEACON"

        /// The id length this type always has.
        public var byteCount: Int {
            switch self {
            case .eddystone: 16
            case .eddystoneEID: 8
            case .iBeacon: 20
            }
        }
    }

    /// What kind of id this is.
    public let type: IDType
    /// The id bytes, exactly `type.byteCount` of them.
    public let bytes: [UInt8]

    /// Creates an id, checking the byte count against `type`.
    public init(type: IDType, bytes: [UInt8]) throws(BeaconError) {
        guard bytes.count == type.byteCount else {
            throw .invalidIdentifierLength(expected: type.byteCount, actual: bytes.count)
        }
        self.init(type: type, checkedBytes: bytes)
    }

    init(type: IDType, checkedBytes bytes: [UInt8]) {
        self.type = type
        self.bytes = bytes
    }

    /// Lowercase hex of ``bytes`` (the API's "base16 ID").
    public var hex: String { BeaconHex.encode(bytes) }

    /// Padded base64 of ``bytes``, as the API's JSON `id` field wants.
    public var base64: String { Data(bytes).base64EncodedString() }

    /// The API's resource name `beacons/N!hex`, with N = 3 for Eddystone
    /// and 1 for iBeacon. Nil for EID, for which the API documents no code
    /// (EID beacons are registered under a stable UID instead).
    public var beaconName: String? {
        switch type {
        case .eddystone: "beacons/3!\(hex)"
        case .iBeacon: "beacons/1!\(hex)"
        case .eddystoneEID: nil
        }
    }

    /// `TYPE:hex`, e.g. `IBEACON:e2c56db5dffb48d2b060d0f5a71096e000010002`.
    public var description: String { "\(type.rawValue):\(hex)" }
}
