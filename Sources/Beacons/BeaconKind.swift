/// The beacon frame formats this module understands.
///
/// Used in errors to say *which* format an input was being read as, and
/// to state the lengths that format allows.
public enum BeaconKind: String, Hashable, Sendable, CaseIterable, CustomStringConvertible {
    /// Eddystone-UID (frame type `0x00`).
    case eddystoneUID = "Eddystone-UID"
    /// Eddystone-URL (frame type `0x10`).
    case eddystoneURL = "Eddystone-URL"
    /// Eddystone-TLM (frame type `0x20`).
    case eddystoneTLM = "Eddystone-TLM"
    /// Eddystone-EID (frame type `0x30`).
    case eddystoneEID = "Eddystone-EID"
    /// Apple iBeacon manufacturer data.
    case iBeacon = "iBeacon"

    /// The byte lengths a frame of this kind may have, as counted by the
    /// parser that reads it (Eddystone: service data after the 0xFEAA UUID;
    /// iBeacon: manufacturer data including the company id).
    public var allowedLengths: ClosedRange<Int> {
        switch self {
        // 18 admits beacons that drop the two RFU bytes (see `EddystoneUID`).
        case .eddystoneUID: 18...20
        case .eddystoneURL: 3...(3 + EddystoneURL.maxEncodedLength)
        case .eddystoneTLM: 14...14
        case .eddystoneEID: 10...10
        case .iBeacon: 25...25
        }
    }

    /// Whether `length` is one this kind accepts. UID is the only kind with
    /// a gap: 19 bytes (one RFU byte) matches neither real-world layout.
    public func accepts(length: Int) -> Bool {
        switch self {
        case .eddystoneUID: length == 18 || length == 20
        default: allowedLengths.contains(length)
        }
    }

    /// Human-readable form of the accepted lengths, for error messages.
    var allowedLengthsDescription: String {
        switch self {
        case .eddystoneUID: "18 or 20"
        default:
            allowedLengths.count == 1
                ? "\(allowedLengths.lowerBound)"
                : "\(allowedLengths.lowerBound)...\(allowedLengths.upperBound)"
        }
    }

    /// The format's name as its specification spells it.
    public var description: String { rawValue }

    /// The lower-case name command lines and nearbyd's `info.Beacon.Kind` use:
    /// `eddystone-uid`, `eddystone-url`, `eddystone-tlm`, `eddystone-eid`, `ibeacon`.
    public var name: String { rawValue.lowercased() }

    /// The kind whose ``name`` is `name`.
    public init?(name: String) {
        guard let kind = Self.allCases.first(where: { $0.name == name }) else { return nil }
        self = kind
    }
}
