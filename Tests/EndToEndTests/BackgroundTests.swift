import Foundation
import NearbyMessages
import Testing
import TestSupport

/// A manager in the background: only objects with AllowInBackground run, on
/// BLE; the others wait, inactive, and resume in the foreground.
@Suite(.serialized) struct BackgroundTests {
    @Test func onlyObjectsAllowedInTheBackgroundRunThereAndAllResumeInTheForeground() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("background")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            let publisher = try await MessageManager(a, apiKey: key)
            let stays = try await publisher.publish("stays", strategy: Strategy(allowInBackground: true))
            let pauses = try await publisher.publish("pauses")
            let listener = try await MessageManager(b, apiKey: key)
            let subscriber = try await listener.record()
            try await subscriber.wait(.found, "stays")
            try await subscriber.wait(.found, "pauses")

            // The daemon has moved the objects before it answers the Set.
            try await publisher.setBackground(true)
            #expect(try await pauses.status == "inactive")
            #expect(try await stays.status != "inactive")
            try await subscriber.wait(.lost, "pauses")

            // A subscription without AllowInBackground waits too.
            try await listener.setBackground(true)
            #expect(try await subscriber.subscription.status == "inactive")
            subscriber.events.clear()
            try await listener.setBackground(false)
            try await subscriber.wait(.found, "stays")

            try await publisher.setBackground(false)
            try await subscriber.wait(.found, "pauses")
            #expect(try await pauses.status != "inactive")
            #expect(!subscriber.kinds.contains("lost /chat 'stays'"), "\(subscriber.kinds)")
        }
    }

    /// With logind (python-dbusmock's), a manager is in the background while its
    /// client's session is locked or inactive, and back when it returns.
    @Test func theClientsLoginSessionSetsBackground() async throws {
        let logindBus = try await PrivateBus()
        let logind = try await LogindMock(bus: logindBus)
        let session = try await logind.addSession("c7", uid: getuid(), active: true)
        // The managers below live in this process.
        try await logind.placeProcess(UInt32(getpid()), in: session)
        try await withCluster(Cluster.Options(logindBus: logindBus.address)) { cluster in
            let key = try await cluster.createProject("sessions")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            let status = try await DaemonStatus.read(from: .address(a.busAddress))
            #expect(status.loginSessions == "logind")
            let backgrounds = Inbox<Bool>()
            let publisher = try await MessageManager(apiKey: key, bus: .address(a.busAddress),
                                                     backgroundChanged: { backgrounds.put($0) })
            #expect(try await publisher.background == false)
            let publication = try await publisher.publish("hello")
            // The subscriber is of the same session, but may run in the background.
            let subscriber = try await MessageManager(b, apiKey: key).record(strategy: Strategy(allowInBackground: true))
            try await subscriber.wait(.found, "hello")

            try await logind.setLocked(session, true)
            _ = try await backgrounds.first(within: 15, "background while locked") { $0 }
            try await subscriber.wait(.lost, "hello")
            #expect(try await publication.status == "inactive")

            try await logind.setLocked(session, false)
            _ = try await backgrounds.first(within: 15, "foreground once unlocked") { !$0 }
            try await subscriber.wait(.found, "hello")

            backgrounds.clear()
            try await logind.setActive(session, false)
            _ = try await backgrounds.first(within: 15, "background while switched away") { $0 }
            try await logind.setActive(session, true)
            _ = try await backgrounds.first(within: 15, "foreground when back") { !$0 }
        }
        await logind.stop()
        await logindBus.stop()
    }

    @Test func withoutLogindStatusSaysSoAndTheClientDecides() async throws {
        try await withCluster { cluster in
            let a = try await cluster.addDevice("A")
            let status = try await runProgram(Programs.path("nearbyctl"), ["status", "--bus", a.busAddress])
            #expect(status.output.contains("login sessions:      unavailable: disabled in the configuration"), "\(status.output)")
        }
    }
}
