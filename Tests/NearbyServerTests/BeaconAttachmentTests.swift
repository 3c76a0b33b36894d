import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
@testable import NearbyServer
import ServerAPI
import Testing

/// The beacon registry over HTTP (a live server): attachments and namespaces.
@Suite struct BeaconAttachmentTests {
    @Test func createListAndDelete() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let id = advertisedID(seed: 0x50)
            try await harness.registerBeacon(alpha, id)
            let greeting = try await harness.attach(alpha, id, "alpha/greeting", "hello")
            harness.clock.advance(byMs: 5)
            try await harness.attach(alpha, id, "alpha/greeting", "hi")
            try await harness.attach(alpha, id, "alpha/menu", "soup")

            #expect(greeting.namespacedType == "alpha/greeting")
            #expect(greeting.data == Data("hello".utf8))
            #expect(greeting.creationTimeMs == String(startMs))
            let attachmentName = try #require(greeting.attachmentName)
            #expect(attachmentName.wholeMatch(of: #/beacons/3![0-9a-f]{32}/attachments/[0-9a-f]{32}/#) != nil)
            #expect(attachmentName.hasPrefix("\(id.beaconName)/attachments/"))

            func list(_ namespacedType: String?) async throws -> [String] {
                let query = namespacedType.map { "?namespacedType=\($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)" }
                let response = try await harness.request(.get, BeaconAPIPath.attachments(id.beaconName) + (query ?? ""),
                                                         headers: alpha.admin)
                return try decode(ListBeaconAttachmentsResponse.self, response).attachments.map {
                    "\($0.namespacedType)=\(String(decoding: $0.data, as: UTF8.self))"
                }
            }
            let all = ["alpha/greeting=hello", "alpha/greeting=hi", "alpha/menu=soup"]
            #expect(try await list(nil) == all)
            #expect(try await list("*/*") == all)
            #expect(try await list("*") == all)
            #expect(try await list("alpha/*") == all)
            #expect(try await list("alpha/greeting") == ["alpha/greeting=hello", "alpha/greeting=hi"])
            #expect(try await list("*/menu") == ["alpha/menu=soup"])
            #expect(try await list("alpha/nothing") == [])
            expectError(try await harness.request(.get, BeaconAPIPath.attachments(id.beaconName) + "?namespacedType=beta/x",
                                                  headers: alpha.admin),
                        .forbidden, .permissionDenied, mentioning: "does not own namespace 'beta'")

            let deleted = try await harness.request(.delete, BeaconAPIPath.resource(attachmentName), headers: alpha.admin)
            #expect(deleted.status == .ok)
            #expect(try await list(nil) == ["alpha/greeting=hi", "alpha/menu=soup"])
            expectError(try await harness.request(.delete, BeaconAPIPath.resource(attachmentName), headers: alpha.admin),
                        .notFound, .notFound, mentioning: "no attachment")

            func batchDelete(_ query: String) async throws -> Int {
                try decode(DeleteAttachmentsResponse.self, try await harness.request(
                    .post, BeaconAPIPath.batchDelete(id.beaconName) + query, headers: alpha.admin)).numDeleted
            }
            try await harness.attach(alpha, id, "alpha/greeting", "hey")
            #expect(try await batchDelete("?namespacedType=alpha/greeting") == 2)
            #expect(try await batchDelete("?namespacedType=alpha/greeting") == 0)
            #expect(try await list(nil) == ["alpha/menu=soup"])
            try await harness.attach(alpha, id, "alpha/greeting", "hey")
            #expect(try await batchDelete("?namespacedType=*/*") == 2)
            try await harness.attach(alpha, id, "alpha/greeting", "hey")
            #expect(try await batchDelete("") == 1)
            #expect(try await list(nil) == [])

            // Deleting the beacon deletes its attachments: registered again, it has none.
            try await harness.attach(alpha, id, "alpha/greeting", "hey")
            _ = try await harness.request(.delete, beaconPath(id), headers: alpha.admin)
            try await harness.registerBeacon(alpha, id)
            #expect(try await list(nil) == [])
        }
    }

    @Test func attachmentsAreChecked() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            _ = try await harness.createTestProject("beta")
            let id = advertisedID(.iBeacon, seed: 0x60)
            try await harness.registerBeacon(alpha, id)
            func attach(_ namespacedType: String, bytes: Int) async throws -> TestResponse {
                try await harness.request(.post, BeaconAPIPath.attachments(id.beaconName), headers: alpha.admin,
                                          json: BeaconAttachment(namespacedType: namespacedType, data: Data(repeating: 0xee, count: bytes)))
            }
            #expect(try await attach("alpha/big", bytes: 1024).status == .ok)
            #expect(try await attach("alpha/" + String(repeating: "t", count: 100), bytes: 1).status == .ok)
            #expect(try await attach("alpha/ünïcödé-type", bytes: 1).status == .ok)

            let refused: [(String, Int, String)] = [
                ("alpha/big", 1025, "data is 1025 bytes; an attachment holds 1 to 1024 bytes"),
                ("alpha/empty", 0, "data is 0 bytes"),
                ("alpha/a/b", 1, "the type may not hold '/'"),
                ("alpha/" + String(repeating: "t", count: 101), 1, "longer than 100 characters"),
                ("alpha/", 1, "NAMESPACE/TYPE"),
                ("alpha", 1, "NAMESPACE/TYPE"),
                ("/type", 1, "NAMESPACE/TYPE"),
                ("alpha/*", 1, "may not hold '*'"),
                ("*/type", 1, "must name one namespace"),
                ("alpha/tab\there", 1, "the type may not hold the control character U+0009"),
                ("al\u{0}pha/type", 1, "the namespace may not hold the control character U+0000"),
            ]
            for (namespacedType, bytes, message) in refused {
                expectError(try await attach(namespacedType, bytes: bytes), .badRequest, .invalidArgument, mentioning: message)
            }
            // A namespace of another project, or of none.
            expectError(try await attach("beta/greeting", bytes: 1), .forbidden, .permissionDenied,
                        mentioning: "project 'alpha' does not own namespace 'beta'")
            expectError(try await attach("gamma/greeting", bytes: 1), .forbidden, .permissionDenied)

            let missingData = Data(#"{"namespacedType":"alpha/x"}"#.utf8)
            expectError(try await harness.request(.post, BeaconAPIPath.attachments(id.beaconName), headers: alpha.admin,
                                                  body: missingData),
                        .badRequest, .invalidArgument, mentioning: "'data'")

            // A decommissioned beacon takes no new attachments.
            _ = try await harness.request(.post, BeaconAPIPath.action(id.beaconName, .decommission), headers: alpha.admin)
            expectError(try await attach("alpha/late", bytes: 1), .badRequest, .invalidArgument, mentioning: "decommissioned")
        }
    }

    @Test func namespacesAndTheirVisibility() async throws {
        try await withServer(live: true) { harness in
            let alpha = try await harness.createTestProject("alpha")
            let beta = try await harness.createTestProject("beta")
            func namespaces(_ project: TestProject) async throws -> ListNamespacesResponse {
                try decode(ListNamespacesResponse.self, try await harness.request(.get, BeaconAPIPath.namespaces, headers: project.admin))
            }
            #expect(try await namespaces(alpha).namespaces == [BeaconNamespace(namespaceName: "namespaces/alpha",
                                                                               servingVisibility: .unlisted)])
            let response = try await harness.request(.get, BeaconAPIPath.namespaces, headers: alpha.admin)
            let json = try JSONSerialization.jsonObject(with: Data(response.body.readableBytesView)) as? [String: [[String: String]]]
            #expect(json == ["namespaces": [["namespaceName": "namespaces/alpha", "servingVisibility": "UNLISTED"]]])

            let path = BeaconAPIPath.resource("namespaces/alpha")
            let made = try decode(BeaconNamespace.self, try await harness.request(
                .put, path, headers: alpha.admin, json: BeaconNamespace(servingVisibility: .public)))
            #expect(made == BeaconNamespace(namespaceName: "namespaces/alpha", servingVisibility: .public))
            #expect(try await namespaces(alpha).namespaces == [made])
            #expect(try await namespaces(beta).namespaces.map(\.servingVisibility) == [.unlisted])

            // Another project's namespace is not found, as one that does not exist.
            expectError(try await harness.request(.put, path, headers: beta.admin, json: BeaconNamespace(servingVisibility: .unlisted)),
                        .notFound, .notFound, mentioning: "project 'beta' has no namespace 'namespaces/alpha'")
            expectError(try await harness.request(.put, BeaconAPIPath.resource("namespaces/nobody"), headers: beta.admin,
                                                  json: BeaconNamespace(servingVisibility: .public)),
                        .notFound, .notFound)
            expectError(try await harness.request(.put, path, headers: alpha.admin,
                                                  json: BeaconNamespace(namespaceName: "namespaces/beta", servingVisibility: .public)),
                        .badRequest, .invalidArgument, mentioning: "namespaceName")
            expectError(try await harness.request(.put, path, headers: alpha.admin, body: Data(#"{"servingVisibility":"SECRET"}"#.utf8)),
                        .badRequest, .invalidArgument, mentioning: "UNLISTED, PUBLIC")
            #expect(try await namespaces(alpha).namespaces == [made])
        }
    }
}
