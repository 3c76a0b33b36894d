import Foundation
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

/// A deployment's worth of rows in every table, written through
/// ``ServerStorage`` with the storage suite's fixtures, and everything they
/// read back as, for the migration's tests to compare across engines.
enum MigrationFixture {
    static let beacons: [UInt8] = [1, 2, 3, 4]
    /// Decommissioned and deleted: only its retired id is left.
    static let retiredBeacon: UInt8 = 3

    /// Fills every table, the logs of deletions, and gaps in the positions
    /// (a receipt and an attachment removed) included.
    static func fill(_ storage: any ServerStorage) async throws {
        try await createProject(storage, "alpha")
        try await createProject(storage, "beta")
        try await createProject(storage, "gamma")
        #expect(try await storage.deleteProject(name: "gamma"))
        try await storage.replaceAdminKey(project: "alpha", adminKeyHash: hash("admin-alpha-2"), createdAtMs: startMs + 5)
        try await storage.replaceServerKey(project: "beta", serverKeyHash: hash("server-beta-2"), createdAtMs: startMs + 5)
        for device in ["d1", "d2", "d3"] { try await createDevice(storage, device, of: "alpha") }
        try await createDevice(storage, "e1", of: "beta")
        try await storage.touchDevice(id: "d1", atMs: startMs + 3_600_000)
        #expect(try await storage.deleteDevice(id: "d3"))

        #expect(try await storage.insertToken(TokenRecord(token: token(1), device: "d1", issuedAtMs: startMs, expiresAtMs: startMs + 60_000)))
        #expect(try await storage.insertToken(TokenRecord(token: token(2), device: "e1", issuedAtMs: startMs, expiresAtMs: startMs + 1)))
        let limits = ObjectLimits(publications: 10, subscriptions: 10)
        var binary = StorageTests.Changes.publication("p2", content: "")
        binary.content = Data([0, 1, 0xFF, 0])
        _ = try await storage.applyChanges([.putPublication(StorageTests.Changes.publication("p1")), .putPublication(binary),
                                            .putSubscription(StorageTests.Changes.subscription("s1", expiresAtMs: 0))],
                                           device: "d1", limits: limits)
        _ = try await storage.applyChanges([.putSubscription(StorageTests.Changes.subscription("s2", device: "d2"))],
                                           device: "d2", limits: limits)

        let full = StoredBeacon(id: try beaconID(1), project: "alpha", status: .active, description: "Main lobby",
                                properties: ["floor": "2"], expectedStability: "STABLE", indoorLevel: "2",
                                latLng: LatLng(latitude: 51.5, longitude: -0.125), placeId: "place", createdAtMs: startMs)
        try await storage.registerBeacon(full)
        try await storage.registerBeacon(try StorageTests.Beacons.beacon(2, status: .inactive))
        try await storage.registerBeacon(try StorageTests.Beacons.beacon(retiredBeacon))
        try await storage.registerBeacon(try StorageTests.Beacons.beacon(4, project: "beta"))
        #expect(try await storage.setBeaconStatus(try beaconID(retiredBeacon), project: "alpha", status: .decommissioned, atMs: startMs))
        #expect(try await storage.deleteBeacon(try beaconID(retiredBeacon), project: "alpha"))
        try await storage.recordTelemetry([BeaconTelemetry(beacon: full.id, telemetry: Data([1, 2]), observedAtMs: startMs + 5)])
        #expect(try await storage.setServingVisibility(.public, namespace: "alpha-ns", project: "alpha"))
        for id in ["a1", "a2", "a3"] {
            #expect(try await storage.addAttachment(StorageTests.Beacons.attachment(id, of: full.id, data: "data \(id)"), project: "alpha"))
        }
        #expect(try await storage.deleteAttachment(id: "a3", of: full.id, project: "alpha"))

        #expect(try await storage.acceptUpstream(StorageTests.Connection.upstream("u1"), limit: 10) == .kept)
        #expect(try await storage.acceptUpstream(StorageTests.Connection.upstream("u2", device: "d2"), limit: 10) == .kept)
        #expect(try await storage.acceptUpstream(StorageTests.Connection.upstream("u3", device: "d2"), limit: 10) == .kept)
        _ = try await storage.settleUpstream(project: "alpha", device: "d2", messageId: "u2",
                                             verdict: .failed(error: "BAD_ACK", description: "no"), atMs: startMs + 1)
        _ = try await storage.settleUpstream(project: "alpha", device: "d2", messageId: "u3", verdict: .sent, atMs: startMs + 1)
        #expect(try await storage.addDownstream(StorageTests.Connection.downstream("m1", receiptRequested: true), limit: 10))
        #expect(try await storage.addDownstream(StorageTests.Connection.downstream("m2"), limit: 10))
        for id in ["r1", "r2", "r3"] {
            #expect(try await storage.addReceipt(StoredReceipt(project: "alpha", messageId: "dr2:\(id)", payload: "{\"id\":\"\(id)\"}"),
                                                 limit: 10) == 0)
        }
        #expect(try await storage.removeReceipt(project: "alpha", messageId: "dr2:r3"))
    }

    /// Everything the fixture's rows read back as, through every reading method.
    struct Contents: Equatable {
        var projects: [ProjectSummary]
        var projectsByKey: [ProjectRecord?]
        var serverKeys: [Bool]
        var devices: [DeviceRecord]
        var devicesBySecret: [DeviceRecord?]
        var activity: [[DeviceActivity]]
        var registrations: [RegistrationState]
        var projectDeletions: ProjectDeletions
        var deviceDeletions: DeviceDeletions
        var tokens: [Token: TokenRecord]
        var publications: [StoredPublication]
        var subscriptions: [StoredSubscription]
        var beacons: [BeaconPage]
        var retiredBeacon: StoredBeacon?
        var attachments: [StoredAttachment]
        var observed: [ObservedBeacon]
        var namespaces: [StoredNamespace]
        var upstream: [StoredUpstream]
        var settled: [UpstreamAcceptance]
        var downstream: [StoredDownstream]
        var receipts: [StoredReceipt]
    }

    static func contents(of storage: any ServerStorage) async throws -> Contents {
        let projects = ["alpha", "beta", "gamma"]
        let keys = projects.flatMap { [hash("api-\($0)"), hash("admin-\($0)")] } + [hash("admin-alpha-2")]
        var projectsByKey: [ProjectRecord?] = []
        for key in keys {
            projectsByKey.append(try await storage.project(apiKeyHash: key))
            projectsByKey.append(try await storage.project(adminKeyHash: key))
        }
        var serverKeys: [Bool] = []
        for project in projects {
            for key in [hash("server-\(project)"), hash("server-\(project)-2")] {
                serverKeys.append(try await storage.isServerKey(key, of: project))
            }
        }
        let devices = ["d1", "d2", "d3", "e1"]
        var devicesBySecret: [DeviceRecord?] = []
        var registrations: [RegistrationState] = []
        for device in devices {
            devicesBySecret.append(try await storage.device(secretHash: hash("secret-\(device)")))
            registrations.append(try await storage.registration(device, project: "alpha"))
        }
        var activity: [[DeviceActivity]] = []
        var pages: [BeaconPage] = []
        var namespaces: [StoredNamespace] = []
        var upstream: [StoredUpstream] = []
        var receipts: [StoredReceipt] = []
        for project in projects {
            activity.append(try await storage.deviceActivity(project: project))
            pages.append(try await storage.beacons(project: project, filter: BeaconFilter(), after: 0, limit: 100))
            namespaces += try await storage.namespaces(project: project)
            upstream += try await storage.pendingUpstream(project: project, after: 0, limit: 100)
            receipts += try await storage.receipts(project: project, after: 0, limit: 100)
        }
        var downstream: [StoredDownstream] = []
        for device in devices { downstream += try await storage.pendingDownstream(device: device) }
        let ids = try beacons.map { try beaconID($0) }
        return Contents(
            projects: try await storage.projects(), projectsByKey: projectsByKey, serverKeys: serverKeys,
            devices: try await storage.devices().sorted { $0.id < $1.id }, devicesBySecret: devicesBySecret, activity: activity,
            registrations: registrations, projectDeletions: try await storage.projectDeletions(after: 0),
            deviceDeletions: try await storage.deviceDeletions(after: 0),
            tokens: try await storage.tokens([token(1), token(2)]),
            publications: try await storage.publications(device: nil).sorted { ($0.device, $0.id) < ($1.device, $1.id) },
            subscriptions: try await storage.subscriptions(device: nil).sorted { ($0.device, $0.id) < ($1.device, $1.id) },
            beacons: pages, retiredBeacon: try await storage.beacon(try beaconID(retiredBeacon)),
            attachments: try await storage.attachments(of: ids[0], project: "alpha", filter: AttachmentFilter(namespaces: ["alpha-ns"])),
            observed: try await storage.activeBeacons(ids, attachmentNamespaces: ["alpha-ns"]), namespaces: namespaces,
            upstream: upstream,
            // Settled messages are read as a repeat finds them: with their verdict (nothing is written).
            settled: [try await storage.acceptUpstream(StorageTests.Connection.upstream("u2", device: "d2"), limit: 10),
                      try await storage.acceptUpstream(StorageTests.Connection.upstream("u3", device: "d2"), limit: 10)],
            downstream: downstream, receipts: receipts)
    }
}
