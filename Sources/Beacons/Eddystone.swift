/// Constants and framing shared by all Eddystone frame types.
public enum Eddystone {
    /// The 16-bit Bluetooth service UUID under which Eddystone frames are
    /// carried as service data (sent little-endian: `AA FE`).
    public static let serviceUUID: UInt16 = 0xFEAA

    /// How much weaker a 2.4 GHz signal is at 1 m than at 0 m, dB: Eddystone
    /// frames declare their power at 0 m, iBeacon and most scanners use 1 m.
    public static let lossOverFirstMetre = 41

    /// The first byte of every Eddystone frame. The high nibble selects the
    /// frame; the low nibble is reserved and must be zero, so any other
    /// byte value is rejected as an unknown frame type.
    public enum FrameType: UInt8, Hashable, Sendable, CaseIterable {
        /// Eddystone-UID.
        case uid = 0x00
        /// Eddystone-URL.
        case url = 0x10
        /// Eddystone-TLM.
        case tlm = 0x20
        /// Eddystone-EID.
        case eid = 0x30

        /// The matching ``BeaconKind``, for error reporting.
        public var kind: BeaconKind {
            switch self {
            case .uid: .eddystoneUID
            case .url: .eddystoneURL
            case .tlm: .eddystoneTLM
            case .eid: .eddystoneEID
            }
        }
    }

    /// Wraps frame bytes (service data after the UUID) in a complete
    /// advertising payload: Flags (LE General Discoverable, BR/EDR not
    /// supported), the Complete List of 16-bit Service UUIDs naming 0xFEAA,
    /// and the Service Data structure. The largest frame (UID, 20 bytes)
    /// gives exactly the 31-byte legacy advertising limit.
    static func advertisingData(frame: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [0x02, ADType.flags, 0x06,
                            0x03, ADType.completeServiceUUIDs16]
        out.appendLittleEndian(serviceUUID)
        out.append(UInt8(1 + 2 + frame.count))
        out.append(ADType.serviceData16)
        out.appendLittleEndian(serviceUUID)
        out.append(contentsOf: frame)
        return out
    }

    /// Checks the frame type byte a frame-specific parser expects, so a
    /// UID parser handed a TLM frame says so instead of misreading it.
    static func frameTypeProblem(_ type: FrameType, in frame: ArraySlice<UInt8>) -> BeaconError? {
        guard let first = frame.first else { return .emptyEddystoneFrame }
        guard first == type.rawValue else {
            return .unexpectedEddystoneFrameType(expected: type.kind, actual: first)
        }
        return nil
    }
}
