import Foundation
import Hummingbird
import HummingbirdTesting
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

@Suite struct PublicationAPITests {
    @Test func putGetDelete() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            let record = try await harness.publish(device, "p1", type: "t", mediums: [.ble, .audio], mode: .both)
            #expect(record == PublicationRecord(id: "p1", namespace: "alpha", type: "t", mediums: [.audio, .ble], mode: .both,
                                                expiresAtMs: startMs + 300_000))
            // PUT again replaces.
            let replaced = try await harness.publish(device, "p1", type: "u", namespace: "shared", mediums: [.audio])
            #expect(replaced.type == "u")
            #expect(replaced.namespace == "shared")
            try await harness.publish(device, "p0")

            let list = try decode(PublicationList.self,
                                  try await harness.request(.get, APIPath.publications(device.id), headers: device.auth))
            #expect(list.publications.map(\.id) == ["p0", "p1"])
            #expect(list.publications[1] == replaced)

            #expect(try await harness.request(.delete, APIPath.publication(device.id, "p1"), headers: device.auth).status == .noContent)
            expectError(try await harness.request(.delete, APIPath.publication(device.id, "p1"), headers: device.auth),
                        .notFound, .notFound, mentioning: "p1")
            let after = try decode(PublicationList.self,
                                   try await harness.request(.get, APIPath.publications(device.id), headers: device.auth))
            #expect(after.publications.map(\.id) == ["p0"])
        }
    }

    @Test func subscriptionsPutGetDelete() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            let forever = try await harness.subscribe(device, "s1")
            #expect(forever == SubscriptionRecord(id: "s1", namespace: "alpha", type: "", mediums: [.ble], mode: .scan, expiresAtMs: 0))
            let timed = try await harness.subscribe(device, "s2", type: "t", namespace: "other", mediums: [.audio, .ble],
                                                    mode: .both, ttlSeconds: 60)
            #expect(timed.expiresAtMs == startMs + 60_000)
            #expect(timed.mediums == [.audio, .ble])
            let list = try decode(SubscriptionList.self,
                                  try await harness.request(.get, APIPath.subscriptions(device.id), headers: device.auth))
            #expect(list.subscriptions == [forever, timed])
            #expect(try await harness.request(.delete, APIPath.subscription(device.id, "s1"), headers: device.auth).status == .noContent)
            expectError(try await harness.request(.delete, APIPath.subscription(device.id, "s1"), headers: device.auth),
                        .notFound, .notFound)
        }
    }

    /// Each invalid field is named in the message.
    @Test(arguments: [
        ("content", #"{"namespace":"","type":"t","content":"","mediums":["ble"],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("content", #"{"namespace":"","type":"t","content":"!!","mediums":["ble"],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("content", #"{"namespace":"","type":"t","mediums":["ble"],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("type", #"{"namespace":"","type":"0123456789012345678901234567890123","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("type", #"{"namespace":"","type":"a*","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("type", #"{"namespace":"","type":7,"content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("namespace", #"{"namespace":"bad space","type":"t","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("namespace", #"{"namespace":"__system","type":"t","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("mediums", #"{"namespace":"","type":"t","content":"aGk=","mediums":[],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("mediums", #"{"namespace":"","type":"t","content":"aGk=","mediums":["ble","ble"],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("mediums", #"{"namespace":"","type":"t","content":"aGk=","mediums":["wifi"],"mode":"broadcast","expiresAtMs":EXP}"#),
        ("mode", #"{"namespace":"","type":"t","content":"aGk=","mediums":["ble"],"mode":"shout","expiresAtMs":EXP}"#),
        ("expiresAtMs", #"{"namespace":"","type":"t","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":1}"#),
        ("expiresAtMs", #"{"namespace":"","type":"t","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":0}"#),
        ("expiresAtMs", #"{"namespace":"","type":"t","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":FAR}"#),
        ("expiresAtMs", #"{"namespace":"","type":"t","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":-5}"#),
        ("expiresAtMs", #"{"namespace":"","type":"t","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":1.5}"#),
        ("expiresAtMs", #"{"namespace":"","type":"t","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":1e30}"#),
        ("earshot", #"{"namespace":"","type":"t","content":"aGk=","mediums":["ble"],"mode":"broadcast","expiresAtMs":EXP,"distance":"earshot"}"#),
        ("distance", #"{"namespace":"","type":"t","content":"aGk=","mediums":["audio"],"mode":"broadcast","expiresAtMs":EXP,"distance":"far"}"#),
    ])
    func invalidPublications(field: String, body: String) async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            let text = body.replacingOccurrences(of: "EXP", with: "\(startMs + 60_000)")
                .replacingOccurrences(of: "FAR", with: "\(startMs + 90_000_000)")
            let response = try await harness.request(.put, APIPath.publication(device.id, "p1"), headers: device.auth,
                                                     body: Data(text.utf8))
            expectError(response, .badRequest, .invalidArgument, mentioning: field)
            let list = try decode(PublicationList.self,
                                  try await harness.request(.get, APIPath.publications(device.id), headers: device.auth))
            #expect(list.publications.isEmpty)
        }
    }

    @Test func contentLimits() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            let largest = String(repeating: "x", count: MessageRules.maximumContentBytes)
            try await harness.publish(device, "big", content: largest)
            let spec = PublicationSpec(namespace: "", type: "", content: Data(largest.utf8 + [0x78]), mediums: [.ble],
                                       mode: .broadcast, expiresAtMs: startMs + 1000)
            expectError(try await harness.request(.put, APIPath.publication(device.id, "bigger"), as: device, json: spec),
                        .badRequest, .invalidArgument, mentioning: "content is 102401 bytes")
        }
    }

    @Test(arguments: ["bad%20id", "a%2Fb", String(repeating: "i", count: 129), "%C3%A4"])
    func invalidIDs(id: String) async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            let publication = PublicationSpec(namespace: "", type: "", content: Data([1]), mediums: [.ble], mode: .broadcast,
                                              expiresAtMs: startMs + 1000)
            expectError(try await harness.request(.put, "/v1/devices/\(device.id)/publications/\(id)", as: device, json: publication),
                        .badRequest, .invalidArgument, mentioning: "publication id")
            let subscription = SubscriptionSpec(namespace: "", type: "", mediums: [.ble], mode: .scan, expiresAtMs: 0)
            expectError(try await harness.request(.put, "/v1/devices/\(device.id)/subscriptions/\(id)", as: device, json: subscription),
                        .badRequest, .invalidArgument, mentioning: "subscription id")
        }
    }

    @Test func subscriptionValidation() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            func put(_ spec: SubscriptionSpec) async throws -> TestResponse {
                try await harness.request(.put, APIPath.subscription(device.id, "s1"), as: device, json: spec)
            }
            expectError(try await put(SubscriptionSpec(namespace: "", type: "", mediums: [], mode: .scan, expiresAtMs: 0)),
                        .badRequest, .invalidArgument, mentioning: "mediums")
            expectError(try await put(SubscriptionSpec(namespace: "a b", type: "", mediums: [.ble], mode: .scan, expiresAtMs: 0)),
                        .badRequest, .invalidArgument, mentioning: "namespace")
            expectError(try await put(SubscriptionSpec(namespace: "", type: "*", mediums: [.ble], mode: .scan, expiresAtMs: 0)),
                        .badRequest, .invalidArgument, mentioning: "type")
            expectError(try await put(SubscriptionSpec(namespace: "", type: "", mediums: [.ble], mode: .scan, expiresAtMs: startMs)),
                        .badRequest, .invalidArgument, mentioning: "expiresAtMs")
            expectError(try await put(SubscriptionSpec(namespace: "", type: "", mediums: [.ble], mode: .scan,
                                                       expiresAtMs: startMs + 86_400_000 + 120_000)),
                        .badRequest, .invalidArgument, mentioning: "expiresAtMs")
            // Up to a day ahead (with a little slack for device clocks) is fine.
            #expect(try await put(SubscriptionSpec(namespace: "", type: "", mediums: [.ble], mode: .scan,
                                                   expiresAtMs: startMs + 86_400_000 + 30_000)).status == .ok)
        }
    }

    @Test func limitsPerDevice() async throws {
        try await withServer(configure: {
            $0.limits.maxPublicationsPerDevice = 2
            $0.limits.maxSubscriptionsPerDevice = 1
        }) { harness in
            let device = try await harness.devices(1)[0]
            try await harness.publish(device, "p1")
            try await harness.publish(device, "p2")
            // Replacing does not count as another.
            try await harness.publish(device, "p2", content: "again")
            let spec = PublicationSpec(namespace: "", type: "", content: Data([1]), mediums: [.ble], mode: .broadcast,
                                       expiresAtMs: startMs + 1000)
            expectError(try await harness.request(.put, APIPath.publication(device.id, "p3"), as: device, json: spec),
                        .tooManyRequests, .limitExceeded, mentioning: "max-publications-per-device")
            try await harness.subscribe(device, "s1")
            let subscription = SubscriptionSpec(namespace: "", type: "", mediums: [.ble], mode: .scan, expiresAtMs: 0)
            expectError(try await harness.request(.put, APIPath.subscription(device.id, "s2"), as: device, json: subscription),
                        .tooManyRequests, .limitExceeded, mentioning: "max-subscriptions-per-device")
        }
    }

    @Test func expiredObjectsLeaveListingsAndStorage() async throws {
        try await withServer { harness in
            let device = try await harness.devices(1)[0]
            try await harness.publish(device, "p1", ttlSeconds: 10)
            try await harness.subscribe(device, "s1", ttlSeconds: 10)
            try await harness.subscribe(device, "forever")
            harness.clock.advance(bySeconds: 10)
            let publications = try decode(PublicationList.self,
                                          try await harness.request(.get, APIPath.publications(device.id), headers: device.auth))
            #expect(publications.publications.isEmpty)
            let subscriptions = try decode(SubscriptionList.self,
                                           try await harness.request(.get, APIPath.subscriptions(device.id), headers: device.auth))
            #expect(subscriptions.subscriptions.map(\.id) == ["forever"])
            await harness.service.sweep()
            #expect(try await harness.service.storage.publications(device: nil).isEmpty)
            #expect(try await harness.service.storage.subscriptions(device: nil).map(\.id) == ["forever"])
        }
    }
}
