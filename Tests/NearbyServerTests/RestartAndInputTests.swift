import Foundation
import Hummingbird
import HummingbirdTesting
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

@Suite struct RestartTests {
    /// A new server on the same database file knows what the old one stored.
    @Test func restartKeepsState() async throws {
        try await withTemporaryDirectory { directory in
            let clock = ManualWallClock(nowMs: startMs)
            let configuration = testConfiguration(databasePath: directory.appendingPathComponent("nearby.sqlite").path)

            let first = try await NearbyServer.open(configuration: configuration, clock: clock, logger: quietLogger())
            let (publisher, subscriber, token) = try await first.makeApplication(sweepInterval: nil).test(.router) { client in
                let harness = Harness(server: first, clock: clock, client: client)
                let devices = try await harness.devices(2)
                let token = try await harness.issueToken(devices[0])
                try await harness.publish(devices[0], "p1", content: "kept", ttlSeconds: 3600)
                try await harness.subscribe(devices[1], "s1")
                return (devices[0], devices[1], token)
            }

            clock.advance(bySeconds: 60)
            let second = try await NearbyServer.open(configuration: configuration, clock: clock, logger: quietLogger())
            try await second.makeApplication(sweepInterval: nil).test(.live) { client in
                let harness = Harness(server: second, clock: clock, client: client)
                #expect(try await ProjectAdmin(storage: second.service.storage).list().map(\.project.name) == ["alpha"])
                // Devices and their secrets.
                let publications = try decode(PublicationList.self,
                                              try await harness.request(.get, APIPath.publications(publisher.id), headers: publisher.auth))
                #expect(publications.publications.map(\.id) == ["p1"])
                let subscriptions = try decode(SubscriptionList.self,
                                               try await harness.request(.get, APIPath.subscriptions(subscriber.id), headers: subscriber.auth))
                #expect(subscriptions.subscriptions.map(\.id) == ["s1"])
                // Tokens, and matching from the reloaded publications and subscriptions.
                let stream = try await harness.openStream(subscriber)
                #expect(try await harness.report(subscriber, seen: [(token.token, .ble)]) == [.ok])
                guard case .found(let match) = try await stream.next() else { Issue.record("expected found"); return }
                #expect(match.content == Data("kept".utf8))
                try await stream.close()
            }
        }
    }
}

@Suite struct MalformedInputTests {
    @Test func unknownRoutesAndMethods() async throws {
        try await withServer { harness in
            for (method, path) in [(HTTPRequest.Method.get, "/"), (.get, "/v2/health"), (.post, "/v1/health"),
                                   (.patch, "/v1/devices"), (.get, "/v1/devices/x/unknown"), (.get, "/v1/devices/x/publications/y/z")] {
                expectError(try await harness.request(method, path), .notFound, .notFound, mentioning: "no route")
            }
        }
    }

    @Test(arguments: [
        ("", "empty"),
        ("{", "not valid JSON"),
        ("[]", "the body"),
        ("null", "the body"),
        (#"{"seen":[{"token":"zz","medium":"ble","rssi":1,"distance":1,"seenAtMs":1}],"gone":[]}"#, "seen[0].token"),
        (#"{"seen":[{"token":"0011","medium":"ble","rssi":1,"distance":1,"seenAtMs":1}],"gone":[]}"#, "16 hex digits"),
        (#"{"seen":[{"token":"0011223344556677","medium":"ble","rssi":"loud","distance":1,"seenAtMs":1}],"gone":[]}"#,
         "seen[0].rssi"),
        (#"{"seen":[{"token":"0011223344556677","medium":"fm","rssi":1,"distance":1,"seenAtMs":1}],"gone":[]}"#, "seen[0].medium"),
        (#"{"seen":[],"gone":[{"token":"0011223344556677"}]}"#, "gone[0].medium"),
        (#"{"seen":[]}"#, "gone"),
        (#"{"seen":[{"token":"0011223344556677","medium":"ble","rssi":1,"distance":1,"seenAtMs":-1}],"gone":[]}"#,
         "seen[0].seenAtMs"),
        (#"{"seen":{},"gone":[]}"#, "expected an array"),
    ])
    func malformedSightingReports(body: String, mentioning: String) async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            let response = try await harness.request(.post, APIPath.sightings(device.id), headers: device.auth, body: Data(body.utf8))
            expectError(response, .badRequest, .invalidArgument, mentioning: mentioning)
        }
    }

    @Test func hugeBodies() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            let huge = Data(repeating: UInt8(ascii: "a"), count: 300_000)
            for path in [APIPath.publication(device.id, "p1"), APIPath.subscription(device.id, "s1")] {
                expectError(try await harness.request(.put, path, headers: device.auth, body: huge),
                            .contentTooLarge, .payloadTooLarge, mentioning: "max-body-bytes")
            }
            for path in [APIPath.sightings(device.id), APIPath.changes(device.id)] {
                expectError(try await harness.request(.post, path, headers: device.auth, body: huge),
                            .contentTooLarge, .payloadTooLarge, mentioning: "max-body-bytes")
            }
            // The server is still fine.
            #expect(try await harness.request(.get, APIPath.health).status == .ok)
        }
    }

    @Test func tooManySightingsInOneReport() async throws {
        try await withServer(configure: { $0.limits.maxSightingsPerReport = 3 }) { harness in
            let device = try await harness.devices(1)[0]
            let token = Token(bytes: [0, 1, 2, 3, 4, 5, 6, 7])!
            let report = SightingReport(
                seen: Array(repeating: .init(token: token, medium: .ble, rssi: 0, distance: 0, seenAtMs: 0), count: 2),
                gone: Array(repeating: .init(token: token, medium: .ble), count: 2))
            expectError(try await harness.request(.post, APIPath.sightings(device.id), as: device, json: report),
                        .contentTooLarge, .payloadTooLarge, mentioning: "max-sightings-per-report")
        }
    }

    @Test func everyErrorIsJSON() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            let response = try await harness.request(.put, APIPath.publication(device.id, "p1"), headers: device.auth,
                                                     body: Data([0xff, 0xfe, 0x00]))
            expectError(response, .badRequest, .invalidArgument)
            #expect(response.headers[.contentType] == "application/json")
        }
    }
}
