import Foundation
import NearbyCore
@testable import NearbyServer
import Testing

extension StorageTests {
    /// Devices, their activity and the log of their deletions, and their tokens.
    @Suite struct Devices {
        @Test(arguments: Engine.allCases)
        func aProjectHasAtMostItsLimitOfDevices(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createProject(storage, "beta")
                func register(_ id: String, _ project: String) async throws -> Bool {
                    try await storage.createDevice(DeviceRecord(id: id, project: project, namespace: "\(project)-ns", createdAtMs: startMs),
                                                   secretHash: hash("secret-\(id)"), limit: 2)
                }
                #expect(try await register("d1", "alpha"))
                #expect(try await register("d2", "alpha"))
                #expect(try await !register("d3", "alpha"))
                #expect(try await register("d4", "beta"))
                await #expect(throws: StorageError.projectNotFound("nope")) { try await register("d5", "nope") }
                #expect(try await storage.deviceIDs(projects: ["alpha"]) == ["d1", "d2"])
                #expect(try await storage.deviceIDs(projects: ["alpha", "beta"]) == ["d1", "d2", "d4"])
                #expect(try await storage.deviceIDs(projects: []).isEmpty)
                #expect(Set(try await storage.devices().map(\.id)) == ["d1", "d2", "d4"])
            }
        }

        @Test(arguments: Engine.allCases)
        func aDeviceIsFoundByItsSecretWithItsProjectsNamespace(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                let device = try await createDevice(storage, "d1", of: "alpha", at: startMs + 7)
                #expect(try await storage.device(secretHash: hash("secret-d1")) == device)
                #expect(try await storage.device(secretHash: hash("secret-d2")) == nil)
                #expect(try await storage.devices() == [device])
            }
        }

        @Test(arguments: Engine.allCases)
        func activityAndStaleDevicesFollowTheLastSeenTime(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d2", of: "alpha", at: startMs)
                try await createDevice(storage, "d1", of: "alpha", at: startMs + 1)
                try await createDevice(storage, "d3", of: "alpha", at: startMs + 2)
                try await storage.touchDevice(id: "d2", atMs: startMs + 100)
                try await storage.touchDevice(id: "unknown", atMs: startMs + 100)
                #expect(try await storage.deviceActivity(project: "alpha") == [
                    DeviceActivity(device: "d1", createdAtMs: startMs + 1, lastSeenAtMs: startMs + 1),
                    DeviceActivity(device: "d2", createdAtMs: startMs, lastSeenAtMs: startMs + 100),
                    DeviceActivity(device: "d3", createdAtMs: startMs + 2, lastSeenAtMs: startMs + 2),
                ])
                #expect(try await storage.deviceActivity(project: "nope").isEmpty)
                // Least recently seen first, before the time, up to the limit.
                #expect(try await storage.staleDevices(lastSeenBeforeMs: startMs + 100, limit: 10).map(\.id) == ["d1", "d3"])
                #expect(try await storage.staleDevices(lastSeenBeforeMs: startMs + 101, limit: 2).map(\.id) == ["d1", "d3"])
                #expect(try await storage.staleDevices(lastSeenBeforeMs: startMs + 1, limit: 10).isEmpty)
            }
        }

        @Test(arguments: Engine.allCases)
        func deletedDevicesAreLoggedAndRememberedUntilPurged(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                try await createDevice(storage, "d2", of: "alpha")
                #expect(try await storage.deviceDeletions(after: 0) == DeviceDeletions(position: 0, devices: [:]))
                #expect(try await storage.registration("d1", project: "alpha") == .registered)
                #expect(try await storage.registration("d1", project: "beta") == .unknown)

                #expect(try await storage.deleteDevice(id: "d1"))
                #expect(try await !storage.deleteDevice(id: "d1"))
                let first = try await storage.deviceDeletions(after: 0)
                #expect(first.devices == ["d1": "alpha"])
                #expect(try await storage.deviceDeletions(after: first.position) == DeviceDeletions(position: first.position, devices: [:]))
                #expect(try await storage.deleteDevice(id: "d2"))
                let second = try await storage.deviceDeletions(after: first.position)
                #expect(second.devices == ["d2": "alpha"])
                #expect(second.position > first.position)

                #expect(try await storage.registration("d1", project: "alpha") == .unregistered)
                // By the database's clock: none was deleted an hour ago, both were by an hour from now.
                let nowMs = UInt64(Date().timeIntervalSince1970 * 1000)
                #expect(try await storage.purgeDeletedDevices(deletedBeforeMs: nowMs - 3_600_000) == 0)
                #expect(try await storage.registration("d1", project: "alpha") == .unregistered)
                #expect(try await storage.purgeDeletedDevices(deletedBeforeMs: nowMs + 3_600_000) == 2)
                #expect(try await storage.registration("d1", project: "alpha") == .unknown)
            }
        }

        @Test(arguments: Engine.allCases)
        func aDeviceRegisteredAgainIsRegistered(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                #expect(try await storage.deleteDevice(id: "d1"))
                #expect(try await storage.registration("d1", project: "alpha") == .unregistered)
                try await createDevice(storage, "d1", of: "alpha")
                #expect(try await storage.registration("d1", project: "alpha") == .registered)
            }
        }

        @Test(arguments: Engine.allCases)
        func tokensAreStoredOnceAndExpire(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                try await createDevice(storage, "d2", of: "alpha")
                let first = TokenRecord(token: token(1), device: "d1", issuedAtMs: startMs, expiresAtMs: startMs + 100)
                let second = TokenRecord(token: token(2), device: "d2", issuedAtMs: startMs + 1, expiresAtMs: startMs + 200)
                #expect(try await storage.insertToken(first))
                #expect(try await storage.insertToken(second))
                // The same bytes again, even for another device: the first stays.
                #expect(try await !storage.insertToken(TokenRecord(token: token(1), device: "d2", issuedAtMs: startMs, expiresAtMs: startMs + 999)))
                await #expect(throws: StorageError.deviceNotFound("d9")) {
                    try await storage.insertToken(TokenRecord(token: token(3), device: "d9", issuedAtMs: startMs, expiresAtMs: startMs + 1))
                }
                #expect(try await storage.tokens([token(1), token(2), token(3), token(1)]) == [token(1): first, token(2): second])
                #expect(try await storage.tokens([]).isEmpty)
                // Live: expiring after now.
                #expect(Set(try await storage.liveTokens(nowMs: startMs + 99).map(\.token)) == [token(1), token(2)])
                #expect(try await storage.liveTokens(nowMs: startMs + 100) == [second])
                // Purged: expired at or before the time.
                try await storage.purgeTokens(expiredBeforeMs: startMs + 100)
                #expect(try await storage.tokens([token(1), token(2)]) == [token(2): second])
                // A device's tokens go with it.
                #expect(try await storage.deleteDevice(id: "d2"))
                #expect(try await storage.tokens([token(2)]).isEmpty)
            }
        }

        @Test(arguments: Engine.allCases)
        func timesBeyondSignedSixtyFourBitsAreClamped(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "alpha")
                #expect(try await storage.insertToken(TokenRecord(token: token(1), device: "d1", issuedAtMs: startMs, expiresAtMs: .max)))
                #expect(try await storage.tokens([token(1)])[token(1)]?.expiresAtMs == UInt64(Int64.max))
                #expect(try await storage.liveTokens(nowMs: UInt64(Int64.max) - 1).map(\.token) == [token(1)])
            }
        }
    }
}
