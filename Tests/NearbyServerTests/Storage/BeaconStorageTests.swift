import Foundation
@testable import NearbyServer
import ServerAPI
import Testing

extension StorageTests {
    /// Beacons, their attachments and telemetry, and namespaces.
    @Suite struct Beacons {
        static func beacon(_ byte: UInt8, project: String = "alpha", status: BeaconStatus = .active, description: String? = nil,
                           type: AdvertisedIdType = .eddystone) throws -> StoredBeacon {
            StoredBeacon(id: try beaconID(byte, type: type), project: project, status: status, description: description,
                         createdAtMs: startMs + UInt64(byte))
        }

        static func attachment(_ id: String, of beacon: BeaconID, namespace: String = "alpha-ns", type: String = "note",
                               data: String = "x") -> StoredAttachment {
            StoredAttachment(beacon: beacon, id: id, namespace: namespace, type: type, data: Data(data.utf8), createdAtMs: startMs)
        }

        @Test(arguments: Engine.allCases)
        func aBeaconIsRegisteredOnceAndItsIdRetiredForGood(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createProject(storage, "beta")
                let full = StoredBeacon(id: try beaconID(1), project: "alpha", status: .active, description: "Main lobby",
                                        properties: ["floor": "2", "wing": "east"], expectedStability: "STABLE", indoorLevel: "2",
                                        latLng: LatLng(latitude: 51.5, longitude: -0.125), placeId: "place", createdAtMs: startMs)
                try await storage.registerBeacon(full)
                #expect(try await storage.beacon(full.id) == full)
                #expect(try await storage.beacon(try beaconID(2)) == nil)
                await #expect(throws: StorageError.beaconRegistered(full.id.name)) {
                    try await storage.registerBeacon(try Self.beacon(1, project: "beta"))
                }
                await #expect(throws: StorageError.projectNotFound("nope")) {
                    try await storage.registerBeacon(try Self.beacon(3, project: "nope"))
                }
                // The same bytes as another type are another beacon.
                try await storage.registerBeacon(try Self.beacon(1, type: .eddystoneEID))

                #expect(try await !storage.setBeaconStatus(full.id, project: "beta", status: .decommissioned, atMs: startMs))
                #expect(try await storage.setBeaconStatus(full.id, project: "alpha", status: .decommissioned, atMs: startMs))
                // Nothing brings it back.
                #expect(try await !storage.setBeaconStatus(full.id, project: "alpha", status: .active, atMs: startMs))
                #expect(try await storage.beacon(full.id)?.status == .decommissioned)
                #expect(try await storage.deleteBeacon(full.id, project: "alpha"))
                #expect(try await !storage.deleteBeacon(full.id, project: "alpha"))
                await #expect(throws: StorageError.beaconRetired(full.id.name)) { try await storage.registerBeacon(full) }
            }
        }

        @Test(arguments: Engine.allCases)
        func updatesChangeWhatAClientMayChange(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                let registered = try Self.beacon(1, description: "old")
                try await storage.registerBeacon(registered)
                var changed = registered
                changed.description = "new"
                changed.properties = ["k": "v"]
                changed.expectedStability = "ROVING"
                changed.indoorLevel = "1"
                changed.latLng = LatLng(latitude: -33.9, longitude: 151.2)
                changed.placeId = "p"
                var ignored = changed
                ignored.status = .inactive
                ignored.createdAtMs = 1
                #expect(try await storage.updateBeacon(ignored))
                #expect(try await storage.beacon(registered.id) == changed)
                var cleared = changed
                cleared.description = nil
                cleared.latLng = nil
                #expect(try await storage.updateBeacon(cleared))
                #expect(try await storage.beacon(registered.id) == cleared)
                var elsewhere = changed
                elsewhere.project = "beta"
                #expect(try await !storage.updateBeacon(elsewhere))
                #expect(try await storage.setBeaconStatus(registered.id, project: "alpha", status: .decommissioned, atMs: startMs))
                #expect(try await !storage.updateBeacon(changed))
            }
        }

        @Test(arguments: Engine.allCases)
        func listingsArePagedFilteredAndTheProjectsOwn(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createProject(storage, "beta")
                let first = try Self.beacon(1, description: "Main LOBBY")
                let second = try Self.beacon(2, status: .inactive, description: "lobby, east")
                let third = try Self.beacon(3, type: .iBeacon)
                let fourth = try Self.beacon(4, description: "Lobby east door")
                for beacon in [first, second, third, fourth] { try await storage.registerBeacon(beacon) }
                try await storage.registerBeacon(try Self.beacon(5, project: "beta", description: "lobby"))

                let page1 = try await storage.beacons(project: "alpha", filter: BeaconFilter(), after: 0, limit: 3)
                #expect(page1.beacons == [first, second, third])
                #expect(page1.totalCount == 4)
                let next = try #require(page1.next)
                let page2 = try await storage.beacons(project: "alpha", filter: BeaconFilter(), after: next, limit: 3)
                #expect(page2 == BeaconPage(beacons: [fourth], totalCount: 4, next: nil))
                // Exactly a page: no next.
                #expect(try await storage.beacons(project: "alpha", filter: BeaconFilter(), after: 0, limit: 4).next == nil)

                let lobby = BeaconFilter(descriptions: ["lobby"])
                #expect(try await storage.beacons(project: "alpha", filter: lobby, after: 0, limit: 10).beacons == [first, second, fourth])
                let eastLobby = BeaconFilter(descriptions: ["LOBBY", "East"])
                #expect(try await storage.beacons(project: "alpha", filter: eastLobby, after: 0, limit: 10).beacons == [second, fourth])
                let active = BeaconFilter(statuses: [.active], descriptions: ["lobby"])
                #expect(try await storage.beacons(project: "alpha", filter: active, after: 0, limit: 10)
                    == BeaconPage(beacons: [first, fourth], totalCount: 2, next: nil))
                let iBeacons = BeaconFilter(types: [.iBeacon])
                #expect(try await storage.beacons(project: "alpha", filter: iBeacons, after: 0, limit: 10).beacons == [third])
                // Two statuses at once: none is both.
                let both = BeaconFilter(statuses: [.active, .inactive])
                #expect(try await storage.beacons(project: "alpha", filter: both, after: 0, limit: 10).totalCount == 0)
                #expect(try await storage.beacons(project: "gamma", filter: BeaconFilter(), after: 0, limit: 10)
                    == BeaconPage(beacons: [], totalCount: 0, next: nil))
            }
        }

        @Test(arguments: Engine.allCases)
        func descriptionsAreComparedFoldingASCIICaseOnly(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                let school = try Self.beacon(1, description: "ÉCOLE Gate")
                try await storage.registerBeacon(school)
                try await storage.registerBeacon(try Self.beacon(2))
                func matching(_ text: String) async throws -> [StoredBeacon] {
                    try await storage.beacons(project: "alpha", filter: BeaconFilter(descriptions: [text]), after: 0, limit: 10).beacons
                }
                #expect(try await matching("gate") == [school])
                #expect(try await matching("ÉCOLE g") == [school])
                #expect(try await matching("école").isEmpty)
                #expect(try await matching("") == [school, try Self.beacon(2)])
            }
        }

        @Test(arguments: Engine.allCases)
        func observationsSeeActiveBeaconsWithTheAttachmentsAskedFor(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createProject(storage, "beta")
                let active = try Self.beacon(1)
                let inactive = try Self.beacon(2, status: .inactive)
                try await storage.registerBeacon(active)
                try await storage.registerBeacon(inactive)
                let note = Self.attachment("a1", of: active.id)
                let other = Self.attachment("a2", of: active.id, namespace: "beta-ns")
                let later = Self.attachment("a3", of: active.id, type: "photo")
                for attachment in [note, other, later] { #expect(try await storage.addAttachment(attachment, project: "alpha")) }

                #expect(try await storage.activeBeacons([active.id, inactive.id, try beaconID(9)], attachmentNamespaces: ["alpha-ns"])
                    == [ObservedBeacon(beacon: active, attachments: [note, later])])
                #expect(try await storage.activeBeacons([active.id], attachmentNamespaces: [])
                    == [ObservedBeacon(beacon: active, attachments: [])])
                #expect(try await storage.activeBeacons([active.id], attachmentNamespaces: ["alpha-ns", "beta-ns"]).first?.attachments
                    == [note, other, later])

                try await storage.recordTelemetry([BeaconTelemetry(beacon: active.id, telemetry: Data([1, 2]), observedAtMs: startMs + 5),
                                                   BeaconTelemetry(beacon: inactive.id, telemetry: Data([3]), observedAtMs: startMs + 5)])
                let seen = try await storage.beacon(active.id)
                #expect(seen?.lastTelemetry == Data([1, 2]))
                #expect(seen?.lastTelemetryAtMs == startMs + 5)
                #expect(try await storage.beacon(inactive.id)?.lastTelemetry == nil)
            }
        }

        @Test(arguments: Engine.allCases)
        func attachmentsAreTheProjectsBeaconsAndGoWithThem(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "alpha")
                try await createProject(storage, "beta")
                let beacon = try Self.beacon(1)
                try await storage.registerBeacon(beacon)
                let note = Self.attachment("a1", of: beacon.id)
                let photo = Self.attachment("a2", of: beacon.id, type: "photo")
                let foreign = Self.attachment("a3", of: beacon.id, namespace: "beta-ns")
                for attachment in [note, photo, foreign] { #expect(try await storage.addAttachment(attachment, project: "alpha")) }
                #expect(try await !storage.addAttachment(Self.attachment("a4", of: beacon.id), project: "beta"))
                #expect(try await !storage.addAttachment(Self.attachment("a5", of: try beaconID(7)), project: "alpha"))

                #expect(try await storage.attachments(of: beacon.id, project: "alpha", filter: AttachmentFilter(namespaces: ["alpha-ns"]))
                    == [note, photo])
                #expect(try await storage.attachments(of: beacon.id, project: "alpha",
                                                      filter: AttachmentFilter(namespaces: ["alpha-ns"], type: "photo")) == [photo])
                #expect(try await storage.attachments(of: beacon.id, project: "alpha", filter: AttachmentFilter(namespaces: [])).isEmpty)
                #expect(try await storage.attachments(of: beacon.id, project: "beta", filter: AttachmentFilter(namespaces: ["alpha-ns"]))
                    .isEmpty)

                #expect(try await !storage.deleteAttachment(id: "a1", of: beacon.id, project: "beta"))
                #expect(try await storage.deleteAttachment(id: "a1", of: beacon.id, project: "alpha"))
                #expect(try await !storage.deleteAttachment(id: "a1", of: beacon.id, project: "alpha"))
                #expect(try await storage.deleteAttachments(of: beacon.id, project: "alpha", filter: AttachmentFilter(namespaces: [])) == 0)
                #expect(try await storage.deleteAttachments(of: beacon.id, project: "alpha",
                                                            filter: AttachmentFilter(namespaces: ["alpha-ns"], type: "note")) == 0)
                #expect(try await storage.deleteAttachments(of: beacon.id, project: "alpha",
                                                            filter: AttachmentFilter(namespaces: ["alpha-ns", "beta-ns"])) == 2)

                #expect(try await storage.addAttachment(note, project: "alpha"))
                // A namespace's attachments go with its project.
                #expect(try await storage.addAttachment(foreign, project: "alpha"))
                #expect(try await storage.deleteProject(name: "beta"))
                #expect(try await storage.attachments(of: beacon.id, project: "alpha",
                                                      filter: AttachmentFilter(namespaces: ["alpha-ns", "beta-ns"])) == [note])
                #expect(try await storage.deleteBeacon(beacon.id, project: "alpha"))
                try await storage.registerBeacon(beacon)
                #expect(try await storage.attachments(of: beacon.id, project: "alpha", filter: AttachmentFilter(namespaces: ["alpha-ns"]))
                    .isEmpty)
            }
        }

        @Test(arguments: Engine.allCases)
        func namespacesAreFoundByProjectAndNameWithTheirVisibility(engine: Engine) async throws {
            try await withStorage(engine) { storage in
                try await createProject(storage, "beta")
                try await createProject(storage, "alpha")
                #expect(try await storage.setServingVisibility(.public, namespace: "alpha-ns", project: "alpha"))
                #expect(try await !storage.setServingVisibility(.public, namespace: "alpha-ns", project: "beta"))
                #expect(try await !storage.setServingVisibility(.public, namespace: "gamma-ns", project: "alpha"))
                let alpha = StoredNamespace(name: "alpha-ns", project: "alpha", servingVisibility: .public)
                let beta = StoredNamespace(name: "beta-ns", project: "beta", servingVisibility: .unlisted)
                #expect(try await storage.namespaces(project: "alpha") == [alpha])
                #expect(try await storage.namespaces(named: ["beta-ns", "alpha-ns", "gamma-ns"]) == [alpha, beta])
                #expect(try await storage.namespaces(named: []).isEmpty)
            }
        }
    }
}
