import DBus
import Foundation
import Testing
import TestSupport

/// `org.nearbyd.Upstream1` over raw D-Bus without a direct channel (no
/// manager asks for it, or it cannot open): checks, the durable outbox,
/// failures by the local TTL.
@Suite(.serialized) struct UpstreamTests {
    static let upstream = "org.nearbyd.Upstream1"
    static let invalid = "org.nearbyd.Error.InvalidArguments"

    struct Failure: Sendable {
        let id: String
        let error: String
    }

    @BusActor
    final class Upstream {
        let client: RawClient
        let manager: ObjectPath
        let failures = Inbox<Failure>()
        private var watch: SignalSubscription?

        /// A manager of app `appID` on `device`, and its SendFailed signals.
        init(_ device: Cluster.Device, appID: String = "org.example.shop") async throws {
            client = try RawClient(device.busAddress)
            // Listening before CreateManager: failures kept for the app come right after its reply.
            let failures = failures
            watch = try await client.connection.addMatch(
                "type='signal',interface='\(UpstreamTests.upstream)',member='SendFailed'") { signal in
                guard let id = try? signal.arguments.read(String.self),
                      let error = try? signal.arguments.read(String.self) else { return }
                failures.put(Failure(id: id, error: error))
            }
            manager = try await client.createManager("key", ["AppId": .string(appID)])
        }

        func close() {
            watch = nil
            client.connection.close()
        }

        func send(_ data: [String: String], to: String = "shop@nearby.example", id: String,
                  ttl: Int64) async throws(DBusError) {
            _ = try await client.call(manager, UpstreamTests.upstream, "SendMessage") { writer throws(DBusError) in
                try writer.append(data)
                try writer.append(to)
                try writer.append(id)
                try writer.append(ttl)
            }
        }
    }

    @Test @BusActor func badMessagesGetNamedErrors() async throws {
        try await withCluster { cluster in
            let upstream = try await Upstream(try await cluster.addDevice("A"))
            let cases: [(String, [String: String], String, String, Int64)] = [
                ("reserved key", ["from": "x"], "shop@nearby.example", "m", 60),
                ("google key", ["google.sent_time": "1"], "shop@nearby.example", "m", 60),
                ("too much data", ["k": String(repeating: "v", count: 5000)], "shop@nearby.example", "m", 60),
                ("no sender id", [:], "nearby.example", "m", 60),
                ("empty message id", [:], "shop@nearby.example", "", 60),
                ("negative TTL", [:], "shop@nearby.example", "m", -1),
                ("TTL over four weeks", [:], "shop@nearby.example", "m", 2_419_201),
            ]
            for (name, data, to, id, ttl) in cases {
                let got = await outcome { () async throws(DBusError) in try await upstream.send(data, to: to, id: id, ttl: ttl) }
                #expect(got == Self.invalid, "SendMessage with \(name)")
            }
            try await upstream.send(["a": "1"], id: "pending", ttl: 600)
            let again = await outcome { () async throws(DBusError) in try await upstream.send(["a": "2"], id: "pending", ttl: 600) }
            #expect(again == Self.invalid, "a message id already pending")
        }
    }

    @Test func withoutAChannelMessagesFailWhenTheirTTLRunsOutEvenAcrossACrash() async throws {
        try await withCluster { cluster in
            let device = try await cluster.addDevice("A")
            let first = try await Upstream(device)
            // TTL 0: now or never, and there is no channel yet.
            try await first.send(["order": "1"], id: "now", ttl: 0)
            #expect(try await first.failures.first(within: 10, "SendFailed for 'now'") { $0.id == "now" }.error == "SERVICE_NOT_AVAILABLE")

            // A TTL that runs out while the app is there.
            try await first.send(["order": "2"], id: "soon", ttl: 1)
            #expect(try await first.failures.first(within: 10, "SendFailed for 'soon'") { $0.id == "soon" }.error == "TTL_EXCEEDED")

            try await first.send(["order": "3"], id: "kept", ttl: 3)
            // The app quits, and nearbyd dies right after taking the message; the outbox keeps it.
            await first.close()
            try await cluster.restartDaemon("A")
            let second = try await Upstream(try #require(cluster.device("A")))
            let failed = try await second.failures.first(within: 15, "SendFailed for 'kept' after the restart") { $0.id == "kept" }
            #expect(failed.error == "TTL_EXCEEDED")
            // Another app's managers are not told.
            let stranger = try await Upstream(try #require(cluster.device("A")), appID: "org.example.other")
            try await stranger.send([:], id: "mine", ttl: 1)
            _ = try await stranger.failures.first(within: 10, "the stranger's own failure") { $0.id == "mine" }
            #expect(!stranger.failures.values.contains { $0.id == "kept" })
            // The listeners live as long as their Upstream.
            withExtendedLifetime(second) {}
        }
    }

    @Test @BusActor func directChannelIsEachManagersWishAndTheLocalRulesHoldWhileItCannotOpen() async throws {
        try await withCluster { cluster in
            let upstream = try await Upstream(try await cluster.addDevice("A"))
            let properties = "org.freedesktop.DBus.Properties"
            #expect(try await upstream.client.get(upstream.manager, Self.upstream, "DirectChannel").bool == false)
            _ = try await upstream.client.call(upstream.manager, properties, "Set") { writer throws(DBusError) in
                try writer.append(Self.upstream)
                try writer.append("DirectChannel")
                try writer.append(Variant(.bool(true)))
            }
            #expect(try await upstream.client.get(upstream.manager, Self.upstream, "DirectChannel").bool == true)
            // The server knows no project of API key "key": the device cannot register, the channel cannot open.
            #expect(try await upstream.client.get(upstream.manager, Self.upstream, "DirectChannelConnected").bool == false)
            try await upstream.send(["order": "1"], id: "now", ttl: 0)
            #expect(try await upstream.failures.first(within: 10, "SendFailed for 'now'") { $0.id == "now" }.error == "SERVICE_NOT_AVAILABLE")
            try await upstream.send(["order": "2"], id: "soon", ttl: 1)
            #expect(try await upstream.failures.first(within: 10, "SendFailed for 'soon'") { $0.id == "soon" }.error == "TTL_EXCEEDED")
        }
    }
}
