/// Any beacon frame this module understands.
///
/// Parsers are written as functions returning `Result` and only the public
/// entry points throw. A scanner rejects far more advertisements than it
/// accepts, so rejection must be cheap: `parse(advertisingData:)` never
/// throws at all, and a test harness that records a backtrace for every
/// thrown error (as swift-testing does) stays fast.
public enum BeaconFrame: Hashable, Sendable {
    /// An Eddystone-UID frame.
    case eddystoneUID(EddystoneUID)
    /// An Eddystone-URL frame.
    case eddystoneURL(EddystoneURL)
    /// A plain Eddystone-TLM frame.
    case eddystoneTLM(EddystoneTLM)
    /// An Eddystone-EID frame.
    case eddystoneEID(EddystoneEID)
    /// An Apple iBeacon.
    case iBeacon(IBeacon)

    /// Parses Eddystone service data (the bytes after the 0xFEAA UUID, as
    /// BlueZ and Android hand them over), dispatching on the frame type.
    /// - Throws: ``BeaconError/emptyEddystoneFrame``,
    ///   ``BeaconError/unknownEddystoneFrameType(_:)``, or the chosen
    ///   frame's own errors.
    public init(eddystoneServiceData: [UInt8]) throws(BeaconError) {
        self = try Self.parse(eddystoneFrame: eddystoneServiceData[...]).get()
    }

    /// Non-throwing form of ``init(eddystoneServiceData:)``.
    public static func parse(eddystoneServiceData: [UInt8]) -> BeaconFrame? {
        if case let .success(frame) = parse(eddystoneFrame: eddystoneServiceData[...]) { frame } else { nil }
    }

    /// An iBeacon in Apple's manufacturer data given without the company id
    /// (as BlueZ's `ManufacturerData` holds it under key 0x004C), or nil.
    public static func parse(appleManufacturerData data: [UInt8]) -> BeaconFrame? {
        let companyID = [UInt8(IBeacon.appleCompanyID & 0xFF), UInt8(IBeacon.appleCompanyID >> 8)]
        if case let .success(beacon) = IBeacon.parse(manufacturerData: (companyID + data)[...]) { return .iBeacon(beacon) }
        return nil
    }

    static func parse(eddystoneFrame frame: ArraySlice<UInt8>) -> Result<Self, BeaconError> {
        guard let first = frame.first else { return .failure(.emptyEddystoneFrame) }
        guard let type = Eddystone.FrameType(rawValue: first) else {
            return .failure(.unknownEddystoneFrameType(first))
        }
        switch type {
        case .uid: return EddystoneUID.parse(frame: frame).map(Self.eddystoneUID)
        case .url: return EddystoneURL.parse(frame: frame).map(Self.eddystoneURL)
        case .tlm: return EddystoneTLM.parse(frame: frame).map(Self.eddystoneTLM)
        case .eid: return EddystoneEID.parse(frame: frame).map(Self.eddystoneEID)
        }
    }

    /// Parses a whole advertising (or merged scan-response) payload.
    ///
    /// The payload's AD structures must all be well formed, including the
    /// 16-bit UUID lists and service data this reads. The first structure
    /// carrying a beacon wins: Service Data for 0xFEAA (Eddystone, which
    /// also requires 0xFEAA in a 16-bit UUID list, as the specification
    /// does), or Apple manufacturer data of type 0x02 (iBeacon). Other
    /// manufacturers' data and other Apple advertisements are not beacons
    /// and are skipped; a beacon structure that is malformed is an error,
    /// never skipped.
    ///
    /// - Throws: ``BeaconError/noBeaconFound`` when nothing qualifies, or
    ///   the precise error of the malformed structure or frame.
    public init(advertisingData payload: [UInt8]) throws(BeaconError) {
        self = try Self.parse(payload: payload).get()
    }

    /// Non-throwing form of ``init(advertisingData:)``: the frame, or nil
    /// for anything malformed or beacon-free. Use the throwing form to log why.
    public static func parse(advertisingData payload: [UInt8]) -> BeaconFrame? {
        if case let .success(frame) = parse(payload: payload) { frame } else { nil }
    }

    static func parse(payload: [UInt8]) -> Result<Self, BeaconError> {
        let structures: [ADStructure]
        switch ADStructure.split(payload) {
        case let .success(split): structures = split
        case let .failure(error): return .failure(error)
        }
        var eddystoneListed = false
        var beacon: ADStructure?
        for structure in structures {
            let data = structure.data
            switch structure.type {
            case let type where ADType.isUUIDList16(type):
                guard data.count % 2 == 0 else {
                    return .failure(.malformedServiceUUIDList(offset: structure.offset, length: data.count))
                }
                for i in stride(from: 0, to: data.count, by: 2)
                where data.uint16LE(at: i) == Eddystone.serviceUUID {
                    eddystoneListed = true
                }
            case ADType.serviceData16:
                guard data.count >= 2 else {
                    return .failure(.serviceDataTooShort(offset: structure.offset, length: data.count))
                }
                if beacon == nil, data.uint16LE(at: 0) == Eddystone.serviceUUID {
                    beacon = structure
                }
            case ADType.manufacturerSpecific:
                if beacon == nil, IBeacon.looksLikeIBeacon(data) {
                    beacon = structure
                }
            default:
                break
            }
        }
        guard let beacon else { return .failure(.noBeaconFound) }
        if beacon.type == ADType.manufacturerSpecific {
            return IBeacon.parse(manufacturerData: beacon.data).map(Self.iBeacon)
        }
        // Checked after the loop: the UUID list may follow the service data.
        guard eddystoneListed else { return .failure(.eddystoneUUIDNotListed) }
        return parse(eddystoneFrame: beacon.data.dropFirst(2))
    }

    /// A complete advertising payload for this frame, which
    /// ``init(advertisingData:)`` parses back to an equal value.
    public var advertisingData: [UInt8] {
        switch self {
        case let .eddystoneUID(frame): frame.advertisingData
        case let .eddystoneURL(frame): frame.advertisingData
        case let .eddystoneTLM(frame): frame.advertisingData
        case let .eddystoneEID(frame): frame.advertisingData
        case let .iBeacon(frame): frame.advertisingData
        }
    }

    /// Which format this frame is.
    public var kind: BeaconKind {
        switch self {
        case .eddystoneUID: .eddystoneUID
        case .eddystoneURL: .eddystoneURL
        case .eddystoneTLM: .eddystoneTLM
        case .eddystoneEID: .eddystoneEID
        case .iBeacon: .iBeacon
        }
    }

    /// The signal strength the frame says it is heard with at one metre,
    /// dBm; nil for TLM, which declares none.
    public var powerAtOneMetre: Int? {
        switch self {
        case let .eddystoneUID(frame): Int(frame.txPower) - Eddystone.lossOverFirstMetre
        case let .eddystoneURL(frame): Int(frame.txPower) - Eddystone.lossOverFirstMetre
        case let .eddystoneEID(frame): Int(frame.txPower) - Eddystone.lossOverFirstMetre
        case let .iBeacon(frame): Int(frame.measuredPower)
        case .eddystoneTLM: nil
        }
    }

    /// The Proximity Beacon API id this frame advertises; nil for URL and
    /// TLM frames, which identify nothing by themselves.
    public var advertisedID: AdvertisedID? {
        switch self {
        case let .eddystoneUID(frame): frame.advertisedID
        case let .eddystoneEID(frame): frame.advertisedID
        case let .iBeacon(frame): frame.advertisedID
        case .eddystoneURL, .eddystoneTLM: nil
        }
    }
}
