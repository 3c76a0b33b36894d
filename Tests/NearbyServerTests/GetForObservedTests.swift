import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
@testable import NearbyServer
import ServerAPI
import Testing

/// `POST /v1beta1/beaconinfo:getforobserved` over HTTP (a live server).
@Suite struct GetForObservedTests {
    @Test func ownBeaconsWithTheAttachmentsAskedFor() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let door = advertisedID(.eddystone, seed: 1)
            let desk = advertisedID(.iBeacon, seed: 2)
            try await harness.registerBeacon(alpha, door, description: "front door")
            try await harness.registerBeacon(alpha, desk)
            try await harness.attach(alpha, door, "alpha/greeting", "hello")
            try await harness.attach(alpha, door, "alpha/menu", "soup")

            let both = ["alpha/greeting=hello", "alpha/menu=soup"]
            #expect(try await harness.observed(alpha, [door, desk], ["*"]) == [door.beaconName: both, desk.beaconName: []])
            #expect(try await harness.observed(alpha, [door], ["alpha/*"]) == [door.beaconName: both])
            #expect(try await harness.observed(alpha, [door], ["alpha/menu"]) == [door.beaconName: ["alpha/menu=soup"]])
            #expect(try await harness.observed(alpha, [door], ["alpha/menu", "alpha/greeting", "*"]) == [door.beaconName: both])
            // Without namespaced types, Google's way: the beacons, no attachments.
            #expect(try await harness.observed(alpha, [door, desk], nil) == [door.beaconName: [], desk.beaconName: []])
            #expect(try await harness.observed(alpha, [door, desk], []) == [door.beaconName: [], desk.beaconName: []])

            // The answer's shape: once per beacon, in the order first observed, with its description.
            let response = try await harness.observe(alpha, GetForObservedRequest(observations: [
                .init(advertisedId: desk), .init(advertisedId: door), .init(advertisedId: desk),
            ], namespacedTypes: ["alpha/greeting"]))
            #expect(response == GetForObservedResponse(beacons: [
                BeaconInfo(advertisedId: desk, beaconName: desk.beaconName, attachments: []),
                BeaconInfo(advertisedId: door, beaconName: door.beaconName, description: "front door",
                           attachments: [AttachmentInfo(namespacedType: "alpha/greeting", data: Data("hello".utf8))]),
            ]))
        }
    }

    @Test func onlyActiveRegisteredBeaconsAreAnswered() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let active = advertisedID(seed: 1)
            let inactive = advertisedID(.eddystoneEID, seed: 2)
            let retired = advertisedID(.altBeacon, seed: 3)
            let unknown = advertisedID(seed: 4)
            try await harness.registerBeacon(alpha, active)
            try await harness.registerBeacon(alpha, inactive, status: .inactive)
            try await harness.registerBeacon(alpha, retired)
            for id in [active, inactive, retired] { try await harness.attach(alpha, id, "alpha/x", "data") }
            _ = try await harness.request(.post, BeaconAPIPath.action(retired.beaconName, .decommission), headers: alpha.admin)

            let all = [active, inactive, retired, unknown]
            #expect(try await harness.observed(alpha, all, ["*"]) == [active.beaconName: ["alpha/x=data"]])
            _ = try await harness.request(.post, BeaconAPIPath.action(inactive.beaconName, .activate), headers: alpha.admin)
            _ = try await harness.request(.post, BeaconAPIPath.action(active.beaconName, .deactivate), headers: alpha.admin)
            #expect(try await harness.observed(alpha, all, ["*"]) == [inactive.beaconName: ["alpha/x=data"]])
            #expect(try await harness.observed(alpha, [unknown], ["*"]) == [:])
            #expect(try await harness.observed(alpha, [], ["*"]) == [:])
        }
    }

    /// Another project's beacon yields nothing, not even its name, unless it
    /// carries attachments in a public namespace that the caller names.
    @Test func anotherProjectsBeaconsThroughPublicNamespacesOnly() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let beta = try await harness.createTestProject("beta")
            let shop = advertisedID(seed: 0x70)
            let bare = advertisedID(seed: 0x80)
            try await harness.registerBeacon(alpha, shop, description: "alpha's shop")
            try await harness.registerBeacon(alpha, bare)
            try await harness.attach(alpha, shop, "alpha/offer", "10% off")
            try await harness.attach(alpha, shop, "alpha/staff", "door code")

            for types in [nil, [], ["*"], ["alpha/*"], ["alpha/offer"], ["*/offer"]] as [[String]?] {
                #expect(try await harness.observed(beta, [shop, bare], types) == [:], "\(String(describing: types))")
            }

            let path = BeaconAPIPath.resource("namespaces/alpha")
            _ = try await harness.request(.put, path, headers: alpha.admin, json: BeaconNamespace(servingVisibility: .public))
            #expect(try await harness.observed(beta, [shop, bare], ["alpha/offer"]) == [shop.beaconName: ["alpha/offer=10% off"]])
            #expect(try await harness.observed(beta, [shop, bare], ["alpha/*"])
                == [shop.beaconName: ["alpha/offer=10% off", "alpha/staff=door code"]])
            // Public namespaces are read only when named.
            for types in [nil, ["*"], ["*/offer"], ["alpha/nothing"]] as [[String]?] {
                #expect(try await harness.observed(beta, [shop, bare], types) == [:], "\(String(describing: types))")
            }
            // The description stays the owner's.
            let answer = try await harness.observe(beta, GetForObservedRequest(
                observations: [.init(advertisedId: shop)], namespacedTypes: ["alpha/offer"]))
            #expect(answer.beacons.map(\.description) == [nil])

            _ = try await harness.request(.put, path, headers: alpha.admin, json: BeaconNamespace(servingVisibility: .unlisted))
            #expect(try await harness.observed(beta, [shop], ["alpha/offer"]) == [:])
            // Beta's own beacons and namespace are unaffected by alpha's.
            let mine = advertisedID(seed: 0x90)
            try await harness.registerBeacon(beta, mine)
            try await harness.attach(beta, mine, "beta/offer", "free")
            #expect(try await harness.observed(beta, [shop, mine], ["*", "alpha/offer"]) == [mine.beaconName: ["beta/offer=free"]])
        }
    }

    @Test func limitsAndMalformedRequests() async throws {
        try await withServer(live: true, configure: {
            $0.limits.maxObservationsPerRequest = 3
            $0.limits.maxNamespacedTypesPerRequest = 2
        }) { harness in
            let alpha = try await harness.createTestProject("alpha")
            func post(_ request: GetForObservedRequest) async throws -> TestResponse {
                try await harness.request(.post, BeaconAPIPath.getForObserved, headers: alpha.api, json: request)
            }
            let observations = (0..<4).map { GetForObservedRequest.Observation(advertisedId: advertisedID(seed: UInt8($0))) }
            #expect(try await post(GetForObservedRequest(observations: Array(observations.prefix(3)), namespacedTypes: ["*", "x/*"]))
                .status == .ok)
            expectError(try await post(GetForObservedRequest(observations: observations)), .badRequest, .invalidArgument,
                        mentioning: "at most 3 are taken at once ([limits] max-observations-per-request)")
            expectError(try await post(GetForObservedRequest(observations: [], namespacedTypes: ["*", "a/*", "b/*"])),
                        .badRequest, .invalidArgument,
                        mentioning: "at most 2 are taken at once ([limits] max-namespaced-types-per-request)")

            let malformed: [(GetForObservedRequest, String)] = [
                (GetForObservedRequest(observations: [], namespacedTypes: ["alpha"]), "namespacedTypes[0] 'alpha'"),
                (GetForObservedRequest(observations: [], namespacedTypes: ["*", "a/b/c"]), "namespacedTypes[1]"),
                // A NUL in the namespace was a 500 on PostgreSQL, which cannot hold one.
                (GetForObservedRequest(observations: [], namespacedTypes: ["al\u{0}pha/*"]),
                 "namespacedTypes[0]: the namespace may not hold the control character U+0000"),
                (GetForObservedRequest(observations: [observations[0], .init(advertisedId: AdvertisedIdJSON(type: .iBeacon, id: Data([1])))]),
                 "observations[1].advertisedId.id is 1 bytes; IBEACON ids are 20 bytes"),
                (GetForObservedRequest(observations: [.init(advertisedId: advertisedID(seed: 0), telemetry: Data(count: 65))]),
                 "observations[0].telemetry is 65 bytes; at most 64"),
                (GetForObservedRequest(observations: [.init(advertisedId: advertisedID(seed: 0), timestampMs: "yesterday")]),
                 "observations[0].timestampMs 'yesterday' is not an RFC 3339 time"),
            ]
            for (request, message) in malformed {
                expectError(try await post(request), .badRequest, .invalidArgument, mentioning: message)
            }
            expectError(try await harness.request(.post, BeaconAPIPath.getForObserved, headers: alpha.api, body: Data("{}".utf8)),
                        .badRequest, .invalidArgument, mentioning: "'observations'")
        }
    }

    /// The defaults: 100 observations and 16 namespaced types.
    @Test func defaultLimits() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let observations = (0..<101).map { GetForObservedRequest.Observation(advertisedId: advertisedID(seed: UInt8($0))) }
            let types = (0..<17).map { "ns\($0)/*" }
            for (request, ok) in [(GetForObservedRequest(observations: Array(observations.prefix(100)),
                                                         namespacedTypes: Array(types.prefix(16))), true),
                                  (GetForObservedRequest(observations: observations), false),
                                  (GetForObservedRequest(observations: [], namespacedTypes: types), false)] {
                let response = try await harness.request(.post, BeaconAPIPath.getForObserved, headers: alpha.api, json: request)
                #expect(response.status == (ok ? .ok : .badRequest))
            }
        }
    }

    @Test func theAPIKeyIsRequired() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let id = advertisedID(seed: 1)
            try await harness.registerBeacon(alpha, id)
            let body = try JSONEncoder().encode(GetForObservedRequest(observations: [.init(advertisedId: id)]))
            let missing = try await harness.request(.post, BeaconAPIPath.getForObserved, body: body)
            expectError(missing, .unauthorized, .unauthenticated, mentioning: "X-Api-Key")
            #expect(missing.headers[.wwwAuthenticate] == nil)
            // The admin key is no API key, as header, as bearer or as ?key=.
            expectError(try await harness.request(.post, BeaconAPIPath.getForObserved, headers: [HTTPAPI.apiKeyField: alpha.adminKey],
                                                  body: body),
                        .unauthorized, .unauthenticated, mentioning: "unknown API key")
            expectError(try await harness.request(.post, BeaconAPIPath.getForObserved, headers: alpha.admin, body: body),
                        .unauthorized, .unauthenticated)
            expectError(try await harness.request(.post, "\(BeaconAPIPath.getForObserved)?key=\(alpha.adminKey)", body: body),
                        .unauthorized, .unauthenticated, mentioning: "unknown API key")

            let byQuery = try await harness.request(.post, "\(BeaconAPIPath.getForObserved)?key=\(alpha.apiKey)", body: body)
            #expect(try decode(GetForObservedResponse.self, byQuery).beacons.map(\.beaconName) == [id.beaconName])
        }
    }

    @Test func telemetryIsKeptForTheCallersOwnBeacons() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let beta = try await harness.createTestProject("beta")
            let id = advertisedID(seed: 0x42)
            try await harness.registerBeacon(alpha, id)
            func beacon() async throws -> Beacon {
                try decode(Beacon.self, try await harness.request(.get, beaconPath(id), headers: alpha.admin))
            }
            #expect(try await beacon().lastTelemetry == nil)

            let frame = Data([0x20, 0x00, 0x0b, 0xb8, 0x19, 0x00]) + Data(repeating: 0, count: 8)
            _ = try await harness.observe(alpha, GetForObservedRequest(observations: [
                .init(advertisedId: id, telemetry: frame, timestampMs: "2023-11-14T22:13:10.5Z"),
            ]))
            var stored = try await beacon()
            #expect(stored.lastTelemetry == frame)
            #expect(stored.lastTelemetryTimeMs == String(startMs - 9_500))

            // Without a time it is the server's; a time ahead of the server's is taken as now.
            harness.clock.advance(bySeconds: 1)
            _ = try await harness.observe(alpha, GetForObservedRequest(observations: [.init(advertisedId: id, telemetry: Data([1]))]))
            stored = try await beacon()
            #expect(stored.lastTelemetry == Data([1]))
            #expect(stored.lastTelemetryTimeMs == String(startMs + 1000))
            _ = try await harness.observe(alpha, GetForObservedRequest(observations: [
                .init(advertisedId: id, telemetry: Data([2]), timestampMs: "2099-01-01T00:00:00+02:00"),
            ]))
            #expect(try await beacon().lastTelemetryTimeMs == String(startMs + 1000))

            // Another project's observation of it does not write it.
            _ = try await harness.observe(beta, GetForObservedRequest(observations: [.init(advertisedId: id, telemetry: Data([3]))]))
            #expect(try await beacon().lastTelemetry == Data([2]))
        }
    }
}
