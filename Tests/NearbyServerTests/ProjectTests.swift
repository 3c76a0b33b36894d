import Foundation
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

@Suite struct ProjectTests {
    @Test func createListDelete() async throws {
        try await withTemporaryDirectory { directory in
            let clock = ManualWallClock(nowMs: startMs)
            let admin = ProjectAdmin(storage: try SQLiteStorage(path: directory.appendingPathComponent("a/b/db.sqlite").path),
                                     clock: clock)
            let created = try await admin.create(name: "alpha")
            #expect(created.project == "alpha")
            #expect(created.namespace == "alpha")
            #expect(created.apiKey.count == 43)
            #expect(created.adminKey.count == 43)
            #expect(created.adminKey != created.apiKey)
            let other = try await admin.create(name: "beta-2")
            #expect(other.apiKey != created.apiKey)
            #expect(other.adminKey != created.adminKey)

            let listed = try await admin.list()
            #expect(listed.map(\.project.name) == ["alpha", "beta-2"])
            #expect(listed.map(\.deviceCount) == [0, 0])
            #expect(listed[0].project.createdAtMs == startMs)

            try await admin.delete(name: "alpha")
            #expect(try await admin.list().map(\.project.name) == ["beta-2"])
            await #expect(throws: StorageError.projectNotFound("alpha")) { try await admin.delete(name: "alpha") }
        }
    }

    /// A key that began with '-' would read as an option after `--api-key`
    /// (one key in 64 would, drawn freely).
    @Test func keysNeverStartWithADash() {
        let secrets = (0..<2000).map { _ in Credentials.newSecret() }
        #expect(secrets.allSatisfy { $0.count == 43 && $0.first != "-" })
    }

    @Test func duplicateNameIsAnError() async throws {
        try await withTemporaryDirectory { directory in
            let admin = ProjectAdmin(storage: try SQLiteStorage(path: directory.appendingPathComponent("db.sqlite").path))
            _ = try await admin.create(name: "alpha")
            await #expect(throws: StorageError.duplicateProject("alpha")) { try await admin.create(name: "alpha") }
        }
    }

    @Test(arguments: ["", "-alpha", "Alpha", "al_pha", "al pha", "ä", String(repeating: "a", count: 64)])
    func invalidNames(name: String) {
        #expect(throws: ProjectNameError.self) { try ProjectAdmin.checkName(name) }
    }

    @Test(arguments: ["a", "0", "alpha-beta", "a-", String(repeating: "a", count: 63)])
    func validNames(name: String) throws {
        try ProjectAdmin.checkName(name)
    }

    @Test func keysAreStoredOnlyAsHashes() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("db.sqlite").path
            let storage = try SQLiteStorage(path: path)
            let created = try await ProjectAdmin(storage: storage).create(name: "alpha")
            #expect(try await storage.project(apiKeyHash: Credentials.hash(created.apiKey))?.name == "alpha")
            #expect(try await storage.project(apiKeyHash: Credentials.hash("wrong")) == nil)
            #expect(try await storage.project(adminKeyHash: Credentials.hash(created.adminKey))?.name == "alpha")
            // Neither key opens the other's door.
            #expect(try await storage.project(adminKeyHash: Credentials.hash(created.apiKey)) == nil)
            #expect(try await storage.project(apiKeyHash: Credentials.hash(created.adminKey)) == nil)
            let file = try Data(contentsOf: URL(fileURLWithPath: path)) + ((try? Data(contentsOf: URL(fileURLWithPath: path + "-wal"))) ?? Data())
            #expect(file.range(of: Data(created.apiKey.utf8)) == nil)
            #expect(file.range(of: Data(created.adminKey.utf8)) == nil)
        }
    }

    @Test func deletingAProjectRemovesItsDevices() async throws {
        try await withServer { harness in
            let key = try await harness.createProject("alpha")
            let publisher = try await harness.register(apiKey: key)
            let otherKey = try await harness.createProject("beta")
            let subscriber = try await harness.register(apiKey: otherKey)
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1")

            try await ProjectAdmin(storage: harness.service.storage).delete(name: "alpha")
            let registration = try await harness.request(.post, APIPath.devices, headers: [HTTPAPI.apiKeyField: key])
            expectError(registration, .unauthorized, .unauthenticated, mentioning: "API key")
            // Writes need the device in storage.
            let spec = PublicationSpec(namespace: "", type: "", content: Data([1]), mediums: [.ble], mode: .broadcast,
                                       expiresAtMs: startMs + 1000)
            expectError(try await harness.request(.put, APIPath.publication(publisher.id, "p2"), as: publisher, json: spec),
                        .unauthorized, .unauthenticated)

            // The running server notices at its next sweep: the secret it had
            // in memory no longer authenticates.
            await harness.service.sweep()
            expectError(try await harness.request(.get, APIPath.publications(publisher.id), headers: publisher.auth),
                        .unauthorized, .unauthenticated, mentioning: "unknown device secret")
            #expect(await harness.service.matcher.hasDevice(publisher.id) == false)
            #expect(await harness.service.matcher.hasDevice(subscriber.id))
            #expect(try await harness.report(subscriber, seen: [(token.token, .ble)]) == [.unknown])
            #expect(try await harness.service.storage.publications(device: nil).isEmpty)
        }
    }

    /// Its beacons, their attachments and its namespace go with it; the ids
    /// it decommissioned stay retired.
    @Test func deletingAProjectRemovesItsBeacons() async throws {
        try await withServer { harness in
            let alpha = try await harness.createTestProject("alpha")
            let kept = advertisedID(seed: 1)
            let retired = advertisedID(seed: 2)
            try await harness.registerBeacon(alpha, kept)
            try await harness.registerBeacon(alpha, retired)
            try await harness.attach(alpha, kept, "alpha/greeting", "hello")
            _ = try await harness.request(.post, BeaconAPIPath.action(retired.beaconName, .decommission), headers: alpha.admin)

            try await ProjectAdmin(storage: harness.service.storage).delete(name: "alpha")
            let storage = harness.service.storage
            #expect(try await storage.beacon(try BeaconID(kept, field: "id")) == nil)
            #expect(try await storage.namespaces(named: ["alpha"]).isEmpty)

            let again = try await harness.createTestProject("alpha")
            try await harness.registerBeacon(again, kept)
            #expect(try await harness.observed(again, [kept], ["*"]) == [kept.beaconName: []])
            expectError(try await harness.request(.post, BeaconAPIPath.register, headers: again.admin,
                                                  json: Beacon(advertisedId: retired)),
                        .conflict, .alreadyExists, mentioning: "decommissioned")
        }
    }

    /// Deleted and created again under the same name before the server's
    /// sweep: the old devices go all the same, the new project's stay.
    @Test func aProjectCreatedAgainKeepsNoOldDevices() async throws {
        try await withServer { harness in
            let old = try await harness.devices(1)[0]
            try await harness.publish(old, "p1")
            try await ProjectAdmin(storage: harness.service.storage, clock: harness.clock).delete(name: "alpha")
            let new = try await harness.register(apiKey: try await harness.createProject("alpha"))
            try await harness.publish(new, "p1")

            await harness.service.sweep()
            expectError(try await harness.request(.get, APIPath.publications(old.id), headers: old.auth),
                        .unauthorized, .unauthenticated, mentioning: "unknown device secret")
            #expect(await harness.service.matcher.hasDevice(old.id) == false)
            #expect(await harness.service.matcher.hasDevice(new.id))
            let listed = try decode(PublicationList.self,
                                    try await harness.request(.get, APIPath.publications(new.id), headers: new.auth))
            #expect(listed.publications.map(\.id) == ["p1"])
            // Seen once, the deletion is not acted on again.
            await harness.service.sweep()
            #expect(await harness.service.matcher.hasDevice(new.id))
        }
    }
}
