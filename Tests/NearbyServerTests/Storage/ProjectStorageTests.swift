import Foundation
@testable import NearbyServer
import Testing

extension StorageTests {
    /// Projects, their keys, and the log of their deletions.
    @Suite struct Projects {
        @Test(arguments: Engine.allCases)
        func createdProjectsAreFoundByNameAndKeys(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                let beta = try await createProject(storage, "beta", at: startMs + 1)
                let alpha = try await createProject(storage, "alpha")
                try await createDevice(storage, "d1", of: "beta")
                try await createDevice(storage, "d2", of: "beta")
                #expect(try await storage.projects() == [ProjectSummary(project: alpha, deviceCount: 0),
                                                         ProjectSummary(project: beta, deviceCount: 2)])
                #expect(try await storage.project(name: "alpha") == alpha)
                #expect(try await storage.project(name: "gamma") == nil)
                #expect(try await storage.project(apiKeyHash: hash("api-beta")) == beta)
                #expect(try await storage.project(adminKeyHash: hash("admin-alpha")) == alpha)
                #expect(try await storage.project(apiKeyHash: hash("admin-alpha")) == nil)
                #expect(try await storage.isServerKey(hash("server-alpha"), of: "alpha"))
                #expect(try await !storage.isServerKey(hash("server-alpha"), of: "beta"))
                #expect(try await storage.namespaces(project: "alpha") == [StoredNamespace(name: "alpha-ns", project: "alpha",
                                                                                           servingVisibility: .unlisted)])
            }
        }

        @Test(arguments: Engine.allCases)
        func aNameOrNamespaceIsTakenOnce(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                await #expect(throws: StorageError.duplicateProject("alpha")) {
                    try await storage.createProject(ProjectRecord(name: "alpha", namespace: "other", createdAtMs: startMs),
                                                    apiKeyHash: hash("k1"), adminKeyHash: hash("k2"), serverKeyHash: hash("k3"))
                }
                await #expect(throws: StorageError.duplicateProject("beta")) {
                    try await storage.createProject(ProjectRecord(name: "beta", namespace: "alpha-ns", createdAtMs: startMs),
                                                    apiKeyHash: hash("k1"), adminKeyHash: hash("k2"), serverKeyHash: hash("k3"))
                }
                #expect(try await storage.projects().map(\.project.name) == ["alpha"])
                // Nothing of the refused projects was kept.
                #expect(try await storage.project(apiKeyHash: hash("k1")) == nil)
            }
        }

        @Test(arguments: Engine.allCases)
        func projectsAreListedInByteOrder(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                for name in ["b", "B", "a", "_z", "A"] { try await createProject(storage, name) }
                #expect(try await storage.projects().map(\.project.name) == ["A", "B", "_z", "a", "b"])
            }
        }

        @Test(arguments: Engine.allCases)
        func replacingTheAdminKeyRetiresTheOldOne(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                let alpha = try await createProject(storage, "alpha")
                try await storage.replaceAdminKey(project: "alpha", adminKeyHash: hash("admin-2"), createdAtMs: startMs + 5)
                #expect(try await storage.project(adminKeyHash: hash("admin-alpha")) == nil)
                #expect(try await storage.project(adminKeyHash: hash("admin-2")) == alpha)
                await #expect(throws: StorageError.projectNotFound("nope")) {
                    try await storage.replaceAdminKey(project: "nope", adminKeyHash: hash("admin-3"), createdAtMs: startMs)
                }
            }
        }

        @Test(arguments: Engine.allCases)
        func deletingAProjectTakesEverythingItOwns(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createProject(storage, "beta")
                try await createDevice(storage, "d1", of: "alpha")
                try await createDevice(storage, "d2", of: "beta")
                #expect(try await storage.insertToken(TokenRecord(token: token(1), device: "d1", issuedAtMs: startMs, expiresAtMs: startMs + 10)))
                let beacon = try beaconID(1)
                try await storage.registerBeacon(StoredBeacon(id: beacon, project: "alpha", status: .active, createdAtMs: startMs))
                #expect(try await storage.addReceipt(StoredReceipt(project: "alpha", messageId: "dr2:m", payload: "{}"), limit: 10) == 0)
                let before = try await storage.deviceDeletions(after: 0).position

                #expect(try await storage.deleteProject(name: "alpha"))
                #expect(try await !storage.deleteProject(name: "alpha"))

                #expect(try await storage.project(name: "alpha") == nil)
                #expect(try await storage.project(apiKeyHash: hash("api-alpha")) == nil)
                #expect(try await storage.device(secretHash: hash("secret-d1")) == nil)
                #expect(try await storage.devices().map(\.id) == ["d2"])
                #expect(try await storage.tokens([token(1)]).isEmpty)
                #expect(try await storage.beacon(beacon) == nil)
                #expect(try await storage.namespaces(project: "alpha").isEmpty)
                #expect(try await storage.receipts(project: "alpha", after: 0, limit: 10).isEmpty)
                #expect(try await !storage.isServerKey(hash("server-alpha"), of: "alpha"))
                // Its devices are logged as deleted, but their ids are not kept
                // as the project's: the project is gone.
                #expect(try await storage.deviceDeletions(after: before).devices == ["d1": "alpha"])
                #expect(try await storage.registration("d1", project: "alpha") == .unknown)
                #expect(try await storage.projects().map(\.project.name) == ["beta"])
            }
        }

        @Test(arguments: Engine.allCases)
        func theLogOfDeletionsNamesEachDeletionOnce(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                let start = try await storage.projectDeletions(after: 0)
                #expect(start == ProjectDeletions(position: 0, projects: []))
                try await createProject(storage, "alpha")
                try await createProject(storage, "beta")
                #expect(try await storage.deleteProject(name: "alpha"))
                #expect(try await storage.deleteProject(name: "beta"))
                let first = try await storage.projectDeletions(after: 0)
                #expect(first.projects == ["alpha", "beta"])
                #expect(first.position > 0)
                #expect(try await storage.projectDeletions(after: first.position) == ProjectDeletions(position: first.position, projects: []))
                // A project created again under the same name and deleted again is logged again.
                try await createProject(storage, "alpha")
                #expect(try await storage.deleteProject(name: "alpha"))
                let second = try await storage.projectDeletions(after: first.position)
                #expect(second.projects == ["alpha"])
                #expect(second.position > first.position)
            }
        }
    }
}
