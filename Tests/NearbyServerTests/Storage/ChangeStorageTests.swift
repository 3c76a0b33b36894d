import Foundation
import NearbyCore
@testable import NearbyServer
import Testing

extension StorageTests {
    /// A device's publications and subscriptions: batches of changes, their limits, expiry.
    @Suite struct Changes {
        static func publication(_ id: String, device: String = "d1", expiresAtMs: UInt64 = startMs + 1000,
                                content: String = "hello") -> StoredPublication {
            StoredPublication(device: device, id: id, namespace: "alpha-ns", type: "greeting", content: Data(content.utf8),
                              mediums: [.audio, .ble], mode: .broadcast, expiresAtMs: expiresAtMs, distance: .earshot)
        }

        static func subscription(_ id: String, device: String = "d1", expiresAtMs: UInt64 = startMs + 1000) -> StoredSubscription {
            StoredSubscription(device: device, id: id, namespace: "alpha-ns", type: "", mediums: [.ble], mode: .scan,
                               expiresAtMs: expiresAtMs)
        }

        @Test(arguments: Engine.allCases)
        func changesApplyInOrderWithinTheDevicesLimits(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                let limits = ObjectLimits(publications: 2, subscriptions: 1)
                let outcomes = try await storage.applyChanges([
                    .putPublication(Self.publication("p2")),
                    .putPublication(Self.publication("p1")),
                    .putPublication(Self.publication("p3")),
                    .putPublication(Self.publication("p1", content: "again")),
                    .deletePublication(id: "p2"),
                    .putPublication(Self.publication("p3")),
                    .deletePublication(id: "p9"),
                    .putSubscription(Self.subscription("s1")),
                    .putSubscription(Self.subscription("s2")),
                    .deleteSubscription(id: "s1"),
                    .putSubscription(Self.subscription("s2")),
                ], device: "d1", limits: limits)
                #expect(outcomes == [.created, .created, .limitReached, .replaced, .deleted, .created, .absent,
                                     .created, .limitReached, .deleted, .created])
                #expect(try await storage.publications(device: "d1") == [Self.publication("p1", content: "again"), Self.publication("p3")])
                #expect(try await storage.subscriptions(device: "d1") == [Self.subscription("s2")])

                // A later batch counts what the earlier ones left.
                #expect(try await storage.applyChanges([.putPublication(Self.publication("p4")), .putSubscription(Self.subscription("s3"))],
                                                       device: "d1", limits: limits) == [.limitReached, .limitReached])
                #expect(try await storage.applyChanges([.putPublication(Self.publication("p4"))], device: "d1",
                                                       limits: ObjectLimits(publications: 3, subscriptions: 1)) == [.created])
            }
        }

        @Test(arguments: Engine.allCases)
        func changesOfAnUnknownDeviceApplyNone(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                await #expect(throws: StorageError.deviceNotFound("d1")) {
                    try await storage.applyChanges([.putPublication(Self.publication("p1")), .putSubscription(Self.subscription("s1"))],
                                                   device: "d1", limits: ObjectLimits(publications: 5, subscriptions: 5))
                }
                #expect(try await storage.publications(device: nil).isEmpty)
                #expect(try await storage.subscriptions(device: nil).isEmpty)
            }
        }

        @Test(arguments: Engine.allCases)
        func everyDevicesObjectsAreListedAndGoWithTheDevice(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                try await createDevice(storage, "d2", of: "alpha")
                let limits = ObjectLimits(publications: 5, subscriptions: 5)
                _ = try await storage.applyChanges([.putPublication(Self.publication("p1")), .putSubscription(Self.subscription("s1"))],
                                                   device: "d1", limits: limits)
                _ = try await storage.applyChanges([.putPublication(Self.publication("p1", device: "d2")),
                                                    .putSubscription(Self.subscription("s1", device: "d2"))],
                                                   device: "d2", limits: limits)
                #expect(Set(try await storage.publications(device: nil).map(\.device)) == ["d1", "d2"])
                #expect(Set(try await storage.subscriptions(device: nil).map(\.device)) == ["d1", "d2"])
                #expect(try await storage.publications(device: "d3").isEmpty)
                #expect(try await storage.deleteDevice(id: "d1"))
                #expect(try await storage.publications(device: nil) == [Self.publication("p1", device: "d2")])
                #expect(try await storage.subscriptions(device: nil) == [Self.subscription("s1", device: "d2")])
            }
        }

        @Test(arguments: Engine.allCases)
        func expiredObjectsAreDeleted(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                _ = try await storage.applyChanges([
                    .putPublication(Self.publication("p1", expiresAtMs: startMs + 10)),
                    .putPublication(Self.publication("p2", expiresAtMs: startMs + 11)),
                    .putSubscription(Self.subscription("s1", expiresAtMs: startMs + 10)),
                    .putSubscription(Self.subscription("s2", expiresAtMs: startMs + 11)),
                    // Never expires.
                    .putSubscription(Self.subscription("s3", expiresAtMs: 0)),
                ], device: "d1", limits: ObjectLimits(publications: 5, subscriptions: 5))
                // At or before now.
                try await storage.deleteExpiredPublications(nowMs: startMs + 10)
                try await storage.deleteExpiredSubscriptions(nowMs: startMs + 10)
                #expect(try await storage.publications(device: "d1").map(\.id) == ["p2"])
                #expect(try await storage.subscriptions(device: "d1").map(\.id) == ["s2", "s3"])
                try await storage.deleteExpiredSubscriptions(nowMs: .max)
                #expect(try await storage.subscriptions(device: "d1").map(\.id) == ["s3"])
            }
        }
    }
}
