import Beacons
import Foundation
import ServerAPI

/// Beacon attachments from nearby-server's `beaconinfo:getforobserved`
/// (doc/server-api/openapi.yaml), one beacon per question, asked at the
/// current URL (and the next ones, should its server fail).
extension ServerEndpoints: AttachmentSource {
    func attachments(apiKey: String, namespacedType: String, beacon: AdvertisedID,
                     telemetry: [UInt8]?, observedAtMs: UInt64) async throws -> [BeaconAttachment] {
        try await request { client in
            try await client.attachments(apiKey: apiKey, namespacedType: namespacedType, beacon: beacon, telemetry: telemetry,
                                         observedAtMs: observedAtMs)
        }
    }
}

extension ServerClient {
    /// One question to this URL's server.
    func attachments(apiKey: String, namespacedType: String, beacon: AdvertisedID,
                     telemetry: [UInt8]?, observedAtMs: UInt64) async throws -> [BeaconAttachment] {
        guard let type = AdvertisedIdType(rawValue: beacon.type.rawValue) else { return [] }
        let observed = AdvertisedIdJSON(type: type, id: Data(beacon.bytes))
        let observedAt = Date(timeIntervalSince1970: Double(observedAtMs) / 1000)
        let request = GetForObservedRequest(
            observations: [.init(advertisedId: observed, telemetry: telemetry.map { Data($0) },
                                 timestampMs: observedAt.formatted(.iso8601))],
            namespacedTypes: [namespacedType])
        let response: GetForObservedResponse = try await call(.POST, BeaconAPIPath.getForObserved,
                                                              headers: [(apiKeyHeader, apiKey)], body: request)
        return response.beacons.filter { $0.advertisedId == observed }.flatMap(\.attachments).compactMap { attachment in
            // NAMESPACE/TYPE; the server never sends another shape.
            guard let slash = attachment.namespacedType.firstIndex(of: "/") else { return nil }
            return BeaconAttachment(namespace: String(attachment.namespacedType[..<slash]),
                                    type: String(attachment.namespacedType[attachment.namespacedType.index(after: slash)...]),
                                    data: Array(attachment.data))
        }
    }
}
