import Foundation
import Hummingbird
import HummingbirdTesting
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

/// Devices nobody uses any more (an uninstalled app, registrations an
/// attacker made and dropped) expire, and the operator can see and remove them.
@Suite(.timeLimit(.minutes(2)))
struct IdleDeviceTests {
    static let day: UInt64 = 86_400

    @Test func aDeviceNotSeenForTheIdleDaysIsDeleted() async throws {
        try await withServer(live: true, configure: { $0.limits.deviceIdleDays = 30 }) { harness in
            let devices = try await harness.devices(2)
            let (quiet, active) = (devices[0], devices[1])
            harness.clock.advance(bySeconds: 29 * Self.day)
            // The active device authenticates: its last-seen time moves on.
            _ = try await harness.issueToken(active)
            // Exactly 30 days since the quiet one was seen: it stays (asked
            // without its credential, which would count as seeing it).
            harness.clock.advance(bySeconds: Self.day)
            await harness.service.sweep()
            let admin = ProjectAdmin(storage: harness.service.storage, clock: harness.clock)
            #expect(try await admin.devices(project: "alpha").map(\.device).sorted() == [quiet.id, active.id].sorted())
            // The next look, an hour later, finds it idle for longer: deleted.
            harness.clock.advance(bySeconds: 3600)
            await harness.service.sweep()
            expectError(try await harness.request(.get, APIPath.publications(quiet.id), headers: quiet.auth),
                        .unauthorized, .unauthenticated)
            #expect(try await harness.request(.get, APIPath.publications(active.id), headers: active.auth).status == .ok)
            #expect(try await admin.devices(project: "alpha").map(\.device) == [active.id])
        }
    }

    /// `nearby-server project devices`: the list, the stale ones, their
    /// removal, which a running server notices at its next sweep.
    @Test(.enabled(if: executable != nil, "needs the nearby-server executable"))
    func projectDevicesListsAndRemovesStaleDevices() async throws {
        try await withTemporaryDirectory { directory in
            // The server's clock near the real one, which the command uses.
            let now = UInt64(Date().timeIntervalSince1970 * 1000)
            let clock = ManualWallClock(nowMs: now - 40 * Self.day * 1000)
            let databasePath = directory.appendingPathComponent("nearby.sqlite").path
            let configuration = testConfiguration(databasePath: databasePath)
            let server = try await NearbyServer.open(configuration: configuration, clock: clock, logger: quietLogger())
            try await server.makeApplication(sweepInterval: nil).test(.live) { client in
                let harness = Harness(server: server, clock: clock, client: client)
                let old = try await harness.devices(1)[0]
                // Seen then, so the server holds its credential; its stream stays open.
                #expect(try await harness.request(.get, APIPath.publications(old.id), headers: old.auth).status == .ok)
                let stream = try await harness.openStream(old)
                clock.advance(bySeconds: 40 * Self.day)
                _ = try await harness.register(apiKey: try await harness.createProject("beta"))

                let listed = try await run(["project", "devices", "alpha", "--database", databasePath])
                #expect(listed.status == 0, "\(listed.errors)")
                #expect(listed.output.hasPrefix("\(old.id)\tcreated="))
                #expect(listed.output.contains("\tlast-seen="))
                let stale = try await run(["project", "devices", "alpha", "--stale-days", "30", "--json", "--database", databasePath])
                let staleDevices = try JSONDecoder().decode([DeviceActivity].self, from: Data(stale.output.utf8))
                #expect(staleDevices.map(\.device) == [old.id])
                #expect(try await run(["project", "devices", "beta", "--stale-days", "30", "--database", databasePath]).output == "")

                let removed = try await run(["project", "devices", "alpha", "--stale-days", "30", "--remove-stale",
                                             "--database", databasePath])
                #expect(removed.status == 0, "\(removed.errors)")
                #expect(removed.output.hasSuffix("removed 1 devices\n"))
                // The running server notices at its next sweep.
                await harness.service.sweep()
                expectError(try await harness.request(.get, APIPath.publications(old.id), headers: old.auth),
                            .unauthorized, .unauthenticated)
                #expect(try await stream.closedByServer()?.reason == "device unregistered")
                #expect(try await run(["project", "devices", "alpha", "--database", databasePath]).output == "")

                let missing = try await run(["project", "devices", "nope", "--database", databasePath])
                #expect(missing.status == 1)
                #expect(missing.errors == "nearby-server: no project named 'nope'\n")
            }
        }
    }

    /// The ids of deleted devices are kept, to tell application servers the
    /// device is gone, for `deleted-device-days`, then forgotten: one row per
    /// deletion no longer piles up.
    @Test func theIdOfADeletedDeviceIsForgottenAfterTheDeletedDeviceDays() async throws {
        try await withTemporaryDirectory { directory in
            // Deletions are stamped by SQLite's clock: the server's starts at the real time.
            let clock = ManualWallClock(nowMs: UInt64(Date().timeIntervalSince1970 * 1000))
            var configuration = testConfiguration(databasePath: directory.appendingPathComponent("nearby.sqlite").path)
            configuration.limits.deletedDeviceDays = 2
            let server = try await NearbyServer.open(configuration: configuration, clock: clock, logger: quietLogger())
            try await server.makeApplication(sweepInterval: nil).test(.router) { client in
                let harness = Harness(server: server, clock: clock, client: client)
                let device = try await harness.devices(1)[0]
                #expect(try await harness.request(.delete, APIPath.device(device.id), headers: device.auth).status == .noContent)
                let hub = harness.service.connections
                let (session, _) = await hub.openSession(project: "alpha")
                func error() async throws -> String? {
                    let nack = try #require(await hub.received(#"{"to":"\#(device.id)","message_id":"x"}"#, from: session))
                    return try #require(JSONSerialization.jsonObject(with: Data(nack.utf8)) as? [String: Any])["error"] as? String
                }
                await harness.service.sweep()
                #expect(try await error() == "DEVICE_UNREGISTERED")
                // Two days less a minute: still known; the sweep looks hourly.
                clock.advance(bySeconds: 2 * Self.day - 60)
                await harness.service.sweep()
                #expect(try await error() == "DEVICE_UNREGISTERED")
                clock.advance(bySeconds: 3600)
                await harness.service.sweep()
                #expect(try await error() == "BAD_REGISTRATION")
            }
        }
    }
}
