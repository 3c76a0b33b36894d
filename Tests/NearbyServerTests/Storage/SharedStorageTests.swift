import Foundation
import NearbyCore
@testable import NearbyServer
import Testing

extension StorageTests {
    /// Several processes on one database, writing at once: the limits hold
    /// across them, and each sees what the others wrote.
    @Suite struct Shared {
        @Test(arguments: Engine.allCases)
        func aProjectsDeviceLimitHoldsAcrossProcesses(engine: Engine) async throws {
            try await withStorages(engine, count: 3) { storages in
                try await createProject(storages[0], "alpha")
                let created = try await withThrowingTaskGroup(of: Bool.self) { group in
                    for index in 0..<30 {
                        let storage = storages[index % storages.count]
                        group.addTask {
                            try await storage.createDevice(DeviceRecord(id: "d\(index)", project: "alpha", namespace: "alpha-ns",
                                                                        createdAtMs: startMs),
                                                           secretHash: hash("secret-\(index)"), limit: 7)
                        }
                    }
                    return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
                }
                #expect(created == 7)
                #expect(try await storages[1].projects().first?.deviceCount == 7)
            }
        }

        @Test(arguments: Engine.allCases)
        func aDevicesObjectLimitHoldsAcrossProcesses(engine: Engine) async throws {
            try await withStorages(engine, count: 3) { storages in
                try await createProject(storages[0], "alpha")
                try await createDevice(storages[0], "d1", of: "alpha")
                let limits = ObjectLimits(publications: 5, subscriptions: 5)
                let outcomes = try await withThrowingTaskGroup(of: [ChangeOutcome].self) { group in
                    for index in 0..<12 {
                        let storage = storages[index % storages.count]
                        let publication = StoredPublication(device: "d1", id: "p\(index)", namespace: "alpha-ns", type: "t",
                                                            content: Data([UInt8(index)]), mediums: [.ble], mode: .both,
                                                            expiresAtMs: startMs + 1000)
                        group.addTask { try await storage.applyChanges([.putPublication(publication)], device: "d1", limits: limits) }
                    }
                    return try await group.reduce(into: []) { $0 += $1 }
                }
                #expect(outcomes.filter { $0 == .created }.count == 5)
                #expect(outcomes.filter { $0 == .limitReached }.count == 7)
                #expect(try await storages[2].publications(device: "d1").count == 5)
            }
        }

        @Test(arguments: Engine.allCases)
        func aRepeatedUpstreamMessageIsKeptOnceAcrossProcesses(engine: Engine) async throws {
            try await withStorages(engine, count: 3) { storages in
                try await createProject(storages[0], "alpha")
                try await createDevice(storages[0], "d1", of: "alpha")
                let outcomes = try await withThrowingTaskGroup(of: UpstreamAcceptance.self) { group in
                    for index in 0..<9 {
                        let storage = storages[index % storages.count]
                        // Three messages, each sent three times, with room for two.
                        let message = StoredUpstream(project: "alpha", device: "d1", app: "app", messageId: "m\(index % 3)",
                                                     data: [:], receivedAtMs: startMs, expiresAtMs: startMs + 100)
                        group.addTask { try await storage.acceptUpstream(message, limit: 2) }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(outcomes.filter { $0 == .kept }.count == 2)
                let pending = try await storages[1].pendingUpstream(project: "alpha", after: 0, limit: 10)
                #expect(pending.count == 2)
                let keptM0 = pending.contains { $0.messageId == "m0" }
                let settled = try await withThrowingTaskGroup(of: StoredUpstream?.self) { group in
                    for storage in storages {
                        group.addTask {
                            try await storage.settleUpstream(project: "alpha", device: "d1", messageId: "m0", verdict: .sent, atMs: startMs)
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                // Exactly one process settles it when it was kept, none otherwise.
                #expect(settled.compactMap { $0 }.count == (keptM0 ? 1 : 0))
            }
        }

        @Test(arguments: Engine.allCases)
        func deletionsByOneProcessAreLoggedForTheOthers(engine: Engine) async throws {
            try await withStorages(engine, count: 2) { storages in
                try await createProject(storages[0], "alpha")
                for index in 0..<10 { try await createDevice(storages[0], "d\(index)", of: "alpha") }
                let deleted = try await withThrowingTaskGroup(of: Bool.self) { group in
                    for index in 0..<10 {
                        let storage = storages[index % storages.count]
                        group.addTask { try await storage.deleteDevice(id: "d\(index)") }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                #expect(deleted == Array(repeating: true, count: 10))
                let deletions = try await storages[1].deviceDeletions(after: 0)
                #expect(deletions.devices.count == 10)
                #expect(try await storages[0].deviceDeletions(after: deletions.position).devices.isEmpty)
            }
        }
    }
}
