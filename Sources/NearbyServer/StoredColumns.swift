import Foundation
import NearbyCore
import ServerAPI

/// How both engines write values into text columns and read them back: the
/// same encodings, so that the engines cannot drift.
enum StoredColumns {
    static func text(_ mediums: [Medium]) -> String {
        mediums.map(\.rawValue).joined(separator: ",")
    }

    static func mediums(_ text: String) throws -> [Medium] {
        try text.split(separator: ",").map { name in
            guard let medium = Medium(rawValue: String(name)) else { throw CorruptRow("medium '\(name)'") }
            return medium
        }
    }

    static func mode(_ text: String) throws -> DiscoveryMode {
        guard let mode = DiscoveryMode(rawValue: text) else { throw CorruptRow("mode '\(text)'") }
        return mode
    }

    static func distance(_ text: String) throws -> DistanceType {
        guard let distance = DistanceType(rawValue: text) else { throw CorruptRow("distance '\(text)'") }
        return distance
    }

    /// A message's data (or a beacon's properties) as JSON with sorted keys.
    static func json(_ data: [String: String]) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: try encoder.encode(data), as: UTF8.self)
    }

    static func dictionary(_ text: String) throws -> [String: String] {
        try JSONDecoder().decode([String: String].self, from: Data(text.utf8))
    }

    /// A beacon's properties as stored.
    static func properties(_ text: String) throws -> [String: String] {
        guard let properties = try? dictionary(text) else { throw CorruptRow("beacon properties '\(text)'") }
        return properties
    }

    static func beaconID(type typeName: String, bytes: Data) throws -> BeaconID {
        guard let type = AdvertisedIdType(rawValue: typeName) else { throw CorruptRow("beacon type '\(typeName)'") }
        do {
            return try BeaconID(AdvertisedIdJSON(type: type, id: bytes), field: "advertisedId")
        } catch {
            throw CorruptRow("beacon id of \(bytes.count) bytes")
        }
    }

    static func beaconStatus(_ text: String) throws -> BeaconStatus {
        guard let status = BeaconStatus(rawValue: text) else { throw CorruptRow("beacon status '\(text)'") }
        return status
    }

    static func visibility(_ text: String) throws -> ServingVisibility {
        guard let visibility = ServingVisibility(rawValue: text) else { throw CorruptRow("namespace visibility '\(text)'") }
        return visibility
    }

    static func verdict(code: String?, description: String?) -> UpstreamVerdict? {
        switch code {
        case nil: nil
        case "SENT": .sent
        case let code?: .failed(error: code, description: description ?? "")
        }
    }

    static func columns(of verdict: UpstreamVerdict) -> (code: String, description: String?) {
        switch verdict {
        case .sent: ("SENT", nil)
        case .failed(let error, let description): (error, description)
        }
    }
}
