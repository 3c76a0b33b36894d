import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
@testable import NearbyServer
import ServerAPI
import Testing

/// The beacon registry over HTTP (a live server): beacons.
@Suite struct BeaconAPITests {
    @Test(arguments: AdvertisedIdType.allCases)
    func registerAndGetEveryType(type: AdvertisedIdType) async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let id = advertisedID(type, seed: 0xa0)
            let registered = try await harness.registerBeacon(alpha, id, description: "lobby")
            #expect(registered.beaconName == "beacons/\(type.nameCode)!" + id.id.map { String(format: "%02x", $0) }.joined())
            #expect(registered.advertisedId == id)
            #expect(registered.status == .active)
            #expect(registered.description == "lobby")

            let response = try await harness.request(.get, beaconPath(id), headers: alpha.admin)
            #expect(try decode(Beacon.self, response) == registered)
            // Google's field names and shapes: the id is base64 of its bytes.
            let json = try #require(try JSONSerialization.jsonObject(with: Data(response.body.readableBytesView)) as? [String: Any])
            let advertised = try #require(json["advertisedId"] as? [String: Any])
            #expect(advertised["type"] as? String == type.rawValue)
            #expect(advertised["id"] as? String == id.id.base64EncodedString())
            #expect(json["beaconName"] as? String == id.beaconName)
            #expect(json["status"] as? String == "ACTIVE")

            // Upper-case hex in the path names the same beacon.
            let upper = BeaconAPIPath.resource(id.beaconName.uppercased().replacingOccurrences(of: "BEACONS/", with: "beacons/"))
            #expect(try decode(Beacon.self, try await harness.request(.get, upper, headers: alpha.admin)) == registered)
        }
    }

    @Test func idsOfTheWrongLengthAreRefused() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            for type in AdvertisedIdType.allCases {
                for count in [0, type.byteCount - 1, type.byteCount + 1] {
                    let beacon = Beacon(advertisedId: AdvertisedIdJSON(type: type, id: Data(repeating: 7, count: count)))
                    expectError(try await harness.request(.post, BeaconAPIPath.register, headers: alpha.admin, json: beacon),
                                .badRequest, .invalidArgument, mentioning: "advertisedId.id is \(count) bytes")
                }
            }
            expectError(try await harness.request(.post, BeaconAPIPath.register, headers: alpha.admin, json: Beacon()),
                        .badRequest, .invalidArgument, mentioning: "advertisedId")
            let unknownType = Data(#"{"advertisedId":{"type":"URIBEACON","id":"AAAA"}}"#.utf8)
            expectError(try await harness.request(.post, BeaconAPIPath.register, headers: alpha.admin, body: unknownType),
                        .badRequest, .invalidArgument, mentioning: "EDDYSTONE, EDDYSTONE_EID, IBEACON, ALTBEACON")
            let notBase64 = Data(#"{"advertisedId":{"type":"EDDYSTONE","id":"%%%"}}"#.utf8)
            expectError(try await harness.request(.post, BeaconAPIPath.register, headers: alpha.admin, body: notBase64),
                        .badRequest, .invalidArgument, mentioning: "base64")
            let decommissioned = Beacon(advertisedId: advertisedID(seed: 1), status: .decommissioned)
            expectError(try await harness.request(.post, BeaconAPIPath.register, headers: alpha.admin, json: decommissioned),
                        .badRequest, .invalidArgument, mentioning: "DECOMMISSIONED")
            // PostgreSQL's text cannot hold a NUL: both engines refuse it by name.
            let nul = Beacon(advertisedId: advertisedID(seed: 2), description: "lobby\u{0}")
            expectError(try await harness.request(.post, BeaconAPIPath.register, headers: alpha.admin, json: nul),
                        .badRequest, .invalidArgument, mentioning: "description may not hold the control character U+0000 (only line breaks and tabs)")
            // Nor any other control character than line breaks and tabs (an escape sequence for a terminal).
            let escape = Beacon(advertisedId: advertisedID(seed: 3), description: "lobby\u{1b}[2J")
            expectError(try await harness.request(.post, BeaconAPIPath.register, headers: alpha.admin, json: escape),
                        .badRequest, .invalidArgument, mentioning: "description may not hold the control character U+001B")
            let lines = Beacon(advertisedId: advertisedID(seed: 4), description: "lobby\r\n\tfloor 2")
            #expect(try await harness.request(.post, BeaconAPIPath.register, headers: alpha.admin, json: lines).status == .ok)
        }
    }

    @Test func badBeaconNames() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let hex16 = String(repeating: "ab", count: 16)
            let cases = [
                ("9!\(hex16)", "type code '9'"),
                ("33!\(hex16)", "type code '33'"),
                ("\(hex16)", "is not beacons/N!HEX"),
                ("3!\(String(repeating: "zz", count: 16))", "hexadecimal"),
                ("3!abc", "hexadecimal"),
                ("3!\(String(repeating: "ab", count: 15))", "15 bytes; EDDYSTONE ids are 16 bytes"),
                ("1!\(hex16)", "16 bytes; IBEACON ids are 20 bytes"),
            ]
            for (segment, message) in cases {
                expectError(try await harness.request(.get, "/v1beta1/beacons/\(segment)", headers: alpha.admin),
                            .badRequest, .invalidArgument, mentioning: message)
            }
            // `!` percent-encoded is the same name.
            let id = advertisedID(seed: 0)
            try await harness.registerBeacon(alpha, id)
            let encoded = beaconPath(id).replacingOccurrences(of: "!", with: "%21")
            #expect(try decode(Beacon.self, try await harness.request(.get, encoded, headers: alpha.admin)).advertisedId == id)
        }
    }

    @Test func anIDIsRegisteredOnceAndADecommissionedOneNeverAgain() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let beta = try await harness.createTestProject("beta")
            let id = advertisedID(.iBeacon, seed: 1)
            try await harness.registerBeacon(alpha, id)
            for project in [alpha, beta] {
                expectError(try await harness.request(.post, BeaconAPIPath.register, headers: project.admin,
                                                      json: Beacon(advertisedId: id)),
                            .conflict, .alreadyExists, mentioning: "already registered")
            }

            // Deleted, the id is free again.
            #expect(try await harness.request(.delete, beaconPath(id), headers: alpha.admin).status == .ok)
            try await harness.registerBeacon(beta, id)

            // Decommissioned, it is not, even once the beacon and then its project are deleted.
            _ = try decode(Beacon.self, try await harness.request(.post, BeaconAPIPath.action(id.beaconName, .decommission),
                                                                  headers: beta.admin))
            #expect(try await harness.request(.delete, beaconPath(id), headers: beta.admin).status == .ok)
            try await ProjectAdmin(storage: harness.service.storage).delete(name: "beta")
            expectError(try await harness.request(.post, BeaconAPIPath.register, headers: alpha.admin, json: Beacon(advertisedId: id)),
                        .conflict, .alreadyExists, mentioning: "decommissioned; its id can never be registered again")
            // Another type with the same bytes is another beacon.
            try await harness.registerBeacon(alpha, AdvertisedIdJSON(type: .altBeacon, id: id.id))
        }
    }

    @Test func listFiltersAndPages() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let beta = try await harness.createTestProject("beta")
            let lobby = advertisedID(.eddystone, seed: 1)
            let room3 = advertisedID(.iBeacon, seed: 2)
            let hall = advertisedID(.eddystoneEID, seed: 3)
            let old = advertisedID(.altBeacon, seed: 4)
            let room33 = advertisedID(.iBeacon, seed: 5)
            try await harness.registerBeacon(alpha, lobby, description: "Lobby door")
            try await harness.registerBeacon(alpha, room3, description: "Room 3, left")
            try await harness.registerBeacon(alpha, hall, status: .inactive, description: "hall")
            try await harness.registerBeacon(alpha, old)
            try await harness.registerBeacon(alpha, room33, status: .inactive, description: "room 33")
            _ = try await harness.request(.post, BeaconAPIPath.action(old.beaconName, .decommission), headers: alpha.admin)
            try await harness.registerBeacon(beta, advertisedID(seed: 9))

            func list(_ query: String) async throws -> [AdvertisedIdJSON?] {
                let encoded = query.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? query
                let response = try decode(ListBeaconsResponse.self,
                                          try await harness.request(.get, "\(BeaconAPIPath.beacons)?q=\(encoded)", headers: alpha.admin))
                #expect(response.totalCount == String(response.beacons.count))
                #expect(response.nextPageToken == nil)
                return response.beacons.map(\.advertisedId)
            }
            #expect(try await list("") == [lobby, room3, hall, old, room33])
            #expect(try await list("status:active") == [lobby, room3])
            #expect(try await list("status:INACTIVE") == [hall, room33])
            #expect(try await list("status:decommissioned") == [old])
            #expect(try await list("type:ibeacon") == [room3, room33])
            #expect(try await list("type:eddystone_eid") == [hall])
            #expect(try await list("type:altbeacon") == [old])
            #expect(try await list("type:eddystone") == [lobby])
            #expect(try await list(#"description:"room 3""#) == [room3, room33])
            #expect(try await list("description:LOBBY") == [lobby])
            #expect(try await list(#"description:"room 3" status:inactive type:ibeacon"#) == [room33])
            #expect(try await list("status:active status:inactive") == [])

            // The limit on terms at its edge (16 by default) passes; one more is refused by name. (3,000,
            // a 500 from the database once, are longer than [http] max-request-line-bytes now: a 414.)
            #expect(try await list(Array(repeating: "description:o", count: 16).joined(separator: " ")) == [lobby, room3, room33])
            let tooMany = ("q has 17 terms; at most 16", Array(repeating: "description:o", count: 17).joined(separator: " "))
            for (query, message) in [("colour:red", "unknown field 'colour'"), ("status:lost", "status is one of"),
                                     ("type:uribeacon", "type is one of"), ("active", "is not FIELD:VALUE"),
                                     (#"description:"open"#, "unclosed"), (tooMany.1, tooMany.0)] {
                let encoded = query.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? query
                expectError(try await harness.request(.get, "\(BeaconAPIPath.beacons)?q=\(encoded)", headers: alpha.admin),
                            .badRequest, .invalidArgument, mentioning: message)
            }

            // Pages of two, in the order registered, each with the total.
            var names: [String] = []
            var token: String?
            var pages = 0
            repeat {
                let query = "pageSize=2" + (token.map { "&pageToken=\($0)" } ?? "")
                let page = try decode(ListBeaconsResponse.self,
                                      try await harness.request(.get, "\(BeaconAPIPath.beacons)?\(query)", headers: alpha.admin))
                #expect(page.totalCount == "5")
                #expect(page.beacons.count <= 2)
                names += page.beacons.compactMap(\.beaconName)
                token = page.nextPageToken
                pages += 1
            } while token != nil
            #expect(pages == 3)
            #expect(names == [lobby, room3, hall, old, room33].map(\.beaconName))
            for query in ["pageSize=0", "pageSize=1001", "pageSize=two", "pageToken=x"] {
                expectError(try await harness.request(.get, "\(BeaconAPIPath.beacons)?\(query)", headers: alpha.admin),
                            .badRequest, .invalidArgument, mentioning: query.hasPrefix("pageSize") ? "pageSize" : "pageToken")
            }
        }
    }

    @Test func updateReplacesWhatAClientDescribes() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let id = advertisedID(seed: 0x10)
            try await harness.registerBeacon(alpha, id, description: "first")
            let update = Beacon(status: .inactive, description: "second", properties: ["position": "door", "floor": "2"],
                                expectedStability: "STABLE", indoorLevel: IndoorLevel(name: "2"),
                                latLng: LatLng(latitude: 47.37, longitude: 8.54), placeId: "ChIJ-place")
            let updated = try decode(Beacon.self, try await harness.request(.put, beaconPath(id), headers: alpha.admin, json: update))
            // Status has its own calls: PUT leaves it.
            #expect(updated.status == .active)
            #expect(updated.description == "second")
            #expect(updated.properties == ["position": "door", "floor": "2"])
            #expect(updated.expectedStability == "STABLE")
            #expect(updated.indoorLevel == IndoorLevel(name: "2"))
            #expect(updated.latLng == LatLng(latitude: 47.37, longitude: 8.54))
            #expect(updated.placeId == "ChIJ-place")
            #expect(try decode(Beacon.self, try await harness.request(.get, beaconPath(id), headers: alpha.admin)) == updated)

            // What an update lacks is cleared; the id and name may be repeated.
            let cleared = try decode(Beacon.self, try await harness.request(
                .put, beaconPath(id), headers: alpha.admin, json: Beacon(beaconName: id.beaconName, advertisedId: id)))
            #expect(cleared.description == nil)
            #expect(cleared.properties == [:])
            #expect(cleared.latLng == nil)

            let refused: [(Beacon, String)] = [
                (Beacon(advertisedId: advertisedID(seed: 0x11)), "advertisedId cannot be changed"),
                (Beacon(beaconName: advertisedID(seed: 0x11).beaconName), "is not the beacon of the path"),
                (Beacon(expectedStability: "WOBBLY"), "expectedStability 'WOBBLY'"),
                (Beacon(latLng: LatLng(latitude: 91, longitude: 0)), "latLng.latitude"),
                (Beacon(latLng: LatLng(latitude: 0, longitude: -181)), "latLng.longitude"),
                (Beacon(description: String(repeating: "d", count: 1025)), "description is 1025 bytes"),
                (Beacon(properties: ["k": String(repeating: "v", count: 1025)]), "properties.k"),
                (Beacon(properties: Dictionary(uniqueKeysWithValues: (0..<65).map { ("k\($0)", "v") })), "65 entries"),
            ]
            for (beacon, message) in refused {
                expectError(try await harness.request(.put, beaconPath(id), headers: alpha.admin, json: beacon),
                            .badRequest, .invalidArgument, mentioning: message)
            }

            _ = try await harness.request(.post, BeaconAPIPath.action(id.beaconName, .decommission), headers: alpha.admin)
            expectError(try await harness.request(.put, beaconPath(id), headers: alpha.admin, json: Beacon(description: "x")),
                        .badRequest, .invalidArgument, mentioning: "decommissioned")
        }
    }

    @Test func statusChangesAndDelete() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let id = advertisedID(.altBeacon, seed: 0x20)
            try await harness.registerBeacon(alpha, id)
            func perform(_ action: BeaconAction) async throws -> TestResponse {
                try await harness.request(.post, BeaconAPIPath.action(id.beaconName, action), headers: alpha.admin)
            }
            #expect(try decode(Beacon.self, try await perform(.deactivate)).status == .inactive)
            #expect(try decode(Beacon.self, try await perform(.deactivate)).status == .inactive)
            #expect(try decode(Beacon.self, try await perform(.activate)).status == .active)
            #expect(try decode(Beacon.self, try await perform(.decommission)).status == .decommissioned)
            #expect(try decode(Beacon.self, try await perform(.decommission)).status == .decommissioned)
            expectError(try await perform(.activate), .badRequest, .invalidArgument, mentioning: "decommissioned; it cannot be activated")
            expectError(try await perform(.deactivate), .badRequest, .invalidArgument, mentioning: "cannot be deactivated")
            let got = try decode(Beacon.self, try await harness.request(.get, beaconPath(id), headers: alpha.admin))
            #expect(got.status == .decommissioned)

            expectError(try await harness.request(.post, "\(beaconPath(id)):explode", headers: alpha.admin),
                        .notFound, .notFound, mentioning: ":activate, :deactivate or :decommission")
            expectError(try await harness.request(.post, beaconPath(id), headers: alpha.admin), .notFound, .notFound)

            let deleted = try await harness.request(.delete, beaconPath(id), headers: alpha.admin)
            #expect(deleted.status == .ok)
            #expect(String(buffer: deleted.body) == "{}")
            expectError(try await harness.request(.get, beaconPath(id), headers: alpha.admin), .notFound, .notFound)
            expectError(try await harness.request(.delete, beaconPath(id), headers: alpha.admin), .notFound, .notFound)
        }
    }

    /// Another project's beacon is answered exactly as one that does not exist.
    @Test func anotherProjectsBeaconIsNotFound() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let beta = try await harness.createTestProject("beta")
            let id = advertisedID(seed: 0x30)
            let missing = advertisedID(seed: 0x40)
            try await harness.registerBeacon(alpha, id, description: "alpha's")
            try await harness.attach(alpha, id, "alpha/greeting", "hello")

            func requests(_ id: AdvertisedIdJSON) -> [(HTTPRequest.Method, String, Data?)] {
                let body = try? JSONEncoder().encode(Beacon(description: "mine now"))
                let attachment = try? JSONEncoder().encode(BeaconAttachment(namespacedType: "beta/x", data: Data([1])))
                return [
                    (.get, beaconPath(id), nil),
                    (.put, beaconPath(id), body),
                    (.delete, beaconPath(id), nil),
                    (.post, BeaconAPIPath.action(id.beaconName, .activate), nil),
                    (.post, BeaconAPIPath.action(id.beaconName, .deactivate), nil),
                    (.post, BeaconAPIPath.action(id.beaconName, .decommission), nil),
                    (.get, BeaconAPIPath.attachments(id.beaconName), nil),
                    (.post, BeaconAPIPath.attachments(id.beaconName), attachment),
                    (.post, BeaconAPIPath.batchDelete(id.beaconName), nil),
                ]
            }
            for ((method, path, body), (_, missingPath, _)) in zip(requests(id), requests(missing)) {
                let theirs = try await harness.request(method, path, headers: beta.admin, body: body)
                let nobodys = try await harness.request(method, missingPath, headers: beta.admin, body: body)
                expectError(theirs, .notFound, .notFound, mentioning: "project 'beta' has no beacon")
                let theirsError = try JSONDecoder().decode(APIError.self, from: Data(theirs.body.readableBytesView))
                let nobodysError = try JSONDecoder().decode(APIError.self, from: Data(nobodys.body.readableBytesView))
                #expect(theirsError.message.replacingOccurrences(of: id.beaconName, with: missing.beaconName) == nobodysError.message)
            }
            let attachments = try decode(ListBeaconAttachmentsResponse.self,
                                         try await harness.request(.get, BeaconAPIPath.attachments(id.beaconName), headers: alpha.admin))
            let attachmentName = try #require(attachments.attachments.first?.attachmentName)
            expectError(try await harness.request(.delete, BeaconAPIPath.resource(attachmentName), headers: beta.admin),
                        .notFound, .notFound)
            let listed = try decode(ListBeaconsResponse.self, try await harness.request(.get, BeaconAPIPath.beacons, headers: beta.admin))
            #expect(listed.beacons.isEmpty)
            #expect(listed.totalCount == "0")

            // Untouched.
            let beacon = try decode(Beacon.self, try await harness.request(.get, beaconPath(id), headers: alpha.admin))
            #expect(beacon.status == .active)
            #expect(beacon.description == "alpha's")
            #expect(try decode(ListBeaconAttachmentsResponse.self, try await harness.request(
                .get, BeaconAPIPath.attachments(id.beaconName), headers: alpha.admin)).attachments.count == 1)
        }
    }

    @Test func registryCallsNeedTheAdminKey() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let device = try await harness.register(apiKey: alpha.apiKey)
            let paths: [(HTTPRequest.Method, String)] = [
                (.post, BeaconAPIPath.register),
                (.get, BeaconAPIPath.beacons),
                (.get, beaconPath(advertisedID(seed: 0))),
                (.put, beaconPath(advertisedID(seed: 0))),
                (.delete, beaconPath(advertisedID(seed: 0))),
                (.post, BeaconAPIPath.action(advertisedID(seed: 0).beaconName, .activate)),
                (.get, BeaconAPIPath.attachments(advertisedID(seed: 0).beaconName)),
                (.post, BeaconAPIPath.batchDelete(advertisedID(seed: 0).beaconName)),
                (.get, BeaconAPIPath.namespaces),
                (.put, BeaconAPIPath.resource("namespaces/alpha")),
            ]
            for (method, path) in paths {
                let missing = try await harness.request(method, path)
                expectError(missing, .unauthorized, .unauthenticated, mentioning: "admin key")
                #expect(missing.headers[.wwwAuthenticate] == "Bearer")
                // Neither the API key nor a device secret is an admin key.
                expectError(try await harness.request(method, path, headers: [.authorization: "Bearer \(alpha.apiKey)"]),
                            .unauthorized, .unauthenticated, mentioning: "unknown admin key")
                expectError(try await harness.request(method, path, headers: device.auth),
                            .unauthorized, .unauthenticated, mentioning: "unknown admin key")
                expectError(try await harness.request(method, path, headers: alpha.api), .unauthorized, .unauthenticated)
                expectError(try await harness.request(method, path, headers: [.authorization: "Basic abc"]),
                            .unauthorized, .unauthenticated, mentioning: "Bearer")
            }

            // A new admin key replaces the old one at once.
            let issued = try await ProjectAdmin(storage: harness.service.storage).issueAdminKey(name: "alpha")
            expectError(try await harness.request(.get, BeaconAPIPath.beacons, headers: alpha.admin),
                        .unauthorized, .unauthenticated, mentioning: "unknown admin key")
            let renewed = try await harness.request(.get, BeaconAPIPath.beacons, headers: [.authorization: "Bearer \(issued.adminKey)"])
            #expect(renewed.status == .ok)
        }
    }
}
