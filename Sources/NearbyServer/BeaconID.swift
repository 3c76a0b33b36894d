import Foundation
import NearbyCore
import ServerAPI

/// A beacon's advertised id, checked: a type and exactly as many bytes as
/// that type has. The registry's key; its resource name is `beacons/N!hex`.
public struct BeaconID: Hashable, Sendable, CustomStringConvertible {
    public let type: AdvertisedIdType
    public let bytes: Data

    /// Checks the length of `advertised.id`; `field` names it in the error.
    public init(_ advertised: AdvertisedIdJSON, field: String) throws(APIError) {
        guard advertised.id.count == advertised.type.byteCount else {
            throw APIError(.invalidArgument, "\(field).id is \(advertised.id.count) bytes; \(Self.length(of: advertised.type))")
        }
        type = advertised.type
        bytes = advertised.id
    }

    /// Parses a resource name, `beacons/N!HEX` (hex digits of either case).
    public init(name: String) throws(APIError) {
        let form = "beacons/N!HEX, N being 3 (Eddystone), 4 (Eddystone-EID), 1 (iBeacon) or 5 (AltBeacon)"
        guard name.hasPrefix("beacons/"), let bang = name.firstIndex(of: "!") else {
            throw APIError(.invalidArgument, "beacon name '\(name)' is not \(form)")
        }
        let code = name[name.index(name.startIndex, offsetBy: 8)..<bang]
        guard code.count == 1, let number = Int(code), let type = AdvertisedIdType(nameCode: number) else {
            throw APIError(.invalidArgument, "beacon name '\(name)' has the type code '\(code)'; it must be \(form)")
        }
        guard let bytes = Hex.decode(String(name[name.index(after: bang)...])) else {
            throw APIError(.invalidArgument, "beacon name '\(name)' does not end in hexadecimal digits")
        }
        guard bytes.count == type.byteCount else {
            throw APIError(.invalidArgument, "beacon name '\(name)' holds \(bytes.count) bytes; \(Self.length(of: type))")
        }
        self.type = type
        self.bytes = Data(bytes)
    }

    private static func length(of type: AdvertisedIdType) -> String {
        "\(type.rawValue) ids are \(type.byteCount) bytes"
    }

    public var advertisedId: AdvertisedIdJSON { AdvertisedIdJSON(type: type, id: bytes) }

    /// `beacons/N!hex`, hex in lower case.
    public var name: String { advertisedId.beaconName }

    public var description: String { name }
}
