import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
@testable import NearbyServer
import ServerAPI
import Testing

/// A project as a beacon test uses it: both of its keys.
struct TestProject: Sendable {
    let name: String
    let apiKey: String
    let adminKey: String

    /// `Authorization: Bearer ADMINKEY`.
    var admin: HTTPFields { [.authorization: "Bearer \(adminKey)"] }
    /// `X-Api-Key: APIKEY`.
    var api: HTTPFields { [HTTPAPI.apiKeyField: apiKey] }
}

/// An advertised id of `type` whose bytes are `seed`, `seed + 1`, ... (wrapping).
func advertisedID(_ type: AdvertisedIdType = .eddystone, seed: UInt8) -> AdvertisedIdJSON {
    AdvertisedIdJSON(type: type, id: Data((0..<type.byteCount).map { seed &+ UInt8($0) }))
}

/// The path of a beacon: `/v1beta1/beacons/N!hex`.
func beaconPath(_ id: AdvertisedIdJSON) -> String {
    BeaconAPIPath.resource(id.beaconName)
}

extension Harness {
    func createTestProject(_ name: String) async throws -> TestProject {
        let created = try await ProjectAdmin(storage: service.storage, clock: clock).create(name: name)
        return TestProject(name: name, apiKey: created.apiKey, adminKey: created.adminKey)
    }

    /// A request with `headers` and `json` as its body.
    func request(_ method: HTTPRequest.Method, _ path: String, headers: HTTPFields,
                 json: some Encodable) async throws -> TestResponse {
        try await request(method, path, headers: headers, body: try JSONEncoder().encode(json))
    }

    /// Registers a beacon of `project` and checks the answer.
    @discardableResult
    func registerBeacon(_ project: TestProject, _ id: AdvertisedIdJSON, status: BeaconStatus? = nil,
                        description: String? = nil, sourceLocation: SourceLocation = #_sourceLocation) async throws -> Beacon {
        let request = Beacon(advertisedId: id, status: status, description: description)
        let beacon = try decode(Beacon.self, try await self.request(.post, BeaconAPIPath.register, headers: project.admin, json: request))
        #expect(beacon.beaconName == id.beaconName, sourceLocation: sourceLocation)
        return beacon
    }

    /// Attaches `data` (text) as `namespacedType` to the beacon of `project`.
    @discardableResult
    func attach(_ project: TestProject, _ id: AdvertisedIdJSON, _ namespacedType: String,
                _ data: String) async throws -> BeaconAttachment {
        let request = BeaconAttachment(namespacedType: namespacedType, data: Data(data.utf8))
        return try decode(BeaconAttachment.self,
                          try await self.request(.post, BeaconAPIPath.attachments(id.beaconName), headers: project.admin, json: request))
    }

    func observe(_ project: TestProject, _ request: GetForObservedRequest) async throws -> GetForObservedResponse {
        try decode(GetForObservedResponse.self,
                   try await self.request(.post, BeaconAPIPath.getForObserved, headers: project.api, json: request))
    }

    /// What `project` gets for observing `ids` and asking for `namespacedTypes`:
    /// each beacon's name and its attachments' `namespacedType=data` (data as text).
    func observed(_ project: TestProject, _ ids: [AdvertisedIdJSON],
                  _ namespacedTypes: [String]?) async throws -> [String: [String]] {
        let response = try await observe(project, GetForObservedRequest(
            observations: ids.map { GetForObservedRequest.Observation(advertisedId: $0) }, namespacedTypes: namespacedTypes))
        var seen: [String: [String]] = [:]
        for beacon in response.beacons {
            seen[beacon.beaconName] = beacon.attachments.map { "\($0.namespacedType)=\(String(decoding: $0.data, as: UTF8.self))" }
        }
        return seen
    }
}
