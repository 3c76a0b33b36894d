import DBus
import Foundation
import Testing
import TestSupport

/// Upstream and downstream messages end to end: an app on a device (raw
/// D-Bus to nearbyd), nearby-server's connection server, and an application
/// server written on slixmpp as one would for FCM's CCS.
@Suite(.serialized) struct ConnectionServerTests {
    static let upstream = "org.nearbyd.Upstream1"
    static let appID = "org.example.shop"

    /// What the app heard.
    enum Heard: Sendable, Equatable {
        case succeeded(String)
        case failed(String, String)
        case received(data: [String: String], from: String, id: String)
        case connected(Bool)
    }

    /// An app on a device: one manager with its Upstream1 signals.
    @BusActor
    final class App {
        let client: RawClient
        let manager: ObjectPath
        let heard = Inbox<Heard>()
        private var watch: SignalSubscription?

        init(_ device: Cluster.Device, apiKey: String) async throws {
            client = try RawClient(device.busAddress)
            let heard = heard
            // Before CreateManager: verdicts kept for the app come right after its reply.
            watch = try await client.connection.addMatch("type='signal',sender='org.nearbyd'") { signal in
                switch (signal.interface, signal.member) {
                case (ConnectionServerTests.upstream, "SendSucceeded"):
                    if let id = try? signal.arguments.read(String.self) { heard.put(.succeeded(id)) }
                case (ConnectionServerTests.upstream, "SendFailed"):
                    if let id = try? signal.arguments.read(String.self), let error = try? signal.arguments.read(String.self) {
                        heard.put(.failed(id, error))
                    }
                case (ConnectionServerTests.upstream, "MessageReceived"):
                    if let data = try? signal.arguments.read([String: String].self), let from = try? signal.arguments.read(String.self),
                       let id = try? signal.arguments.read(String.self) {
                        heard.put(.received(data: data, from: from, id: id))
                    }
                case ("org.freedesktop.DBus.Properties", "PropertiesChanged"):
                    guard (try? signal.arguments.read(String.self)) == ConnectionServerTests.upstream,
                          let changed = try? signal.arguments.read([String: Variant].self),
                          let connected = changed["DirectChannelConnected"]?.value.bool else { return }
                    heard.put(.connected(connected))
                default: break
                }
            }
            manager = try await client.createManager(apiKey, ["AppId": .string(ConnectionServerTests.appID)])
        }

        func close() {
            watch = nil
            client.connection.close()
        }

        /// Sets DirectChannel and, when opening, waits until it is connected.
        func directChannel(_ open: Bool) async throws {
            try await set(ConnectionServerTests.upstream, "DirectChannel", open)
            if open, try await client.get(manager, ConnectionServerTests.upstream, "DirectChannelConnected").bool != true {
                try await heard.first(within: 20, "DirectChannelConnected") { $0 == .connected(true) }
            }
        }

        /// Sets the manager's Background.
        func background(_ background: Bool) async throws {
            try await set("org.nearbyd.Manager1", "Background", background)
        }

        private func set(_ interface: String, _ property: String, _ value: Bool) async throws {
            try await client.connection.call(destination: "org.nearbyd", path: manager, interface: "org.freedesktop.DBus.Properties",
                                             member: "Set") { writer throws(DBusError) in
                try writer.append(interface)
                try writer.append(property)
                try writer.append(Variant(.bool(value)))
            }
        }

        func send(_ data: [String: String], id: String, ttl: Int64 = 600,
                  to: String = "shop@\(Cluster.xmppDomain)") async throws {
            _ = try await client.call(manager, ConnectionServerTests.upstream, "SendMessage") { writer throws(DBusError) in
                try writer.append(data)
                try writer.append(to)
                try writer.append(id)
                try writer.append(ttl)
            }
        }
    }

    /// tests/python/ccs_appserver.py on the project's Python environment.
    static func appServer(_ cluster: Cluster, _ keys: Cluster.ProjectKeys, _ flags: [String] = []) async throws -> ChildProcess {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let server = try await ChildProcess(
            name: "app-server", executable: root.appendingPathComponent(".build/venv/bin/python").path,
            arguments: [root.appendingPathComponent("Tests/EndToEndTests/python/ccs_appserver.py").path,
                        "--port", "\(cluster.xmppPort ?? 0)", "--jid", "shop@\(Cluster.xmppDomain)", "--key", keys.serverKey,
                        "--ca", cluster.certificatePath] + flags,
            environment: ["PYTHONUNBUFFERED": "1"])
        try await server.waitForLine(containing: "ready")
        return server
    }

    /// The `<gcm>` payloads an application server printed.
    static func payloads(_ server: ChildProcess) -> [[String: Any]] {
        server.lines.values.compactMap { line in
            guard line.hasPrefix("gcm ") else { return nil }
            return try? JSONSerialization.jsonObject(with: Data(line.dropFirst(4).utf8)) as? [String: Any]
        }
    }

    static func waitForPayload(_ server: ChildProcess, _ text: String) async throws -> [String: Any] {
        let line = try await server.waitForLine(containing: text)
        let json = try #require(line.range(of: "gcm ").map { line[$0.upperBound...] })
        return try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
    }

    @Test func anUpstreamMessageReachesTheApplicationServerAndItsAckComesBack() async throws {
        try await withCluster(Cluster.Options(xmpp: true)) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let server = try await Self.appServer(cluster, keys)
            let app = try await App(try await cluster.addDevice("A"), apiKey: keys.apiKey)
            try await app.directChannel(true)
            try await app.send(["item": "apples", "count": "3"], id: "order-1")
            let delivered = try await Self.waitForPayload(server, #""message_id": "order-1""#)
            #expect(delivered["category"] as? String == Self.appID)
            #expect(delivered["data"] as? [String: String] == ["item": "apples", "count": "3"])
            #expect((delivered["from"] as? String)?.isEmpty == false)
            try await app.heard.first(within: 20, "SendSucceeded") { $0 == .succeeded("order-1") }
            await app.close()
            await server.stop()
        }
    }

    @Test func whatTheApplicationServerDidNotAckGoesToItsNextConnection() async throws {
        try await withCluster(Cluster.Options(xmpp: true)) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let first = try await Self.appServer(cluster, keys, ["--no-ack", "--once"])
            let app = try await App(try await cluster.addDevice("A"), apiKey: keys.apiKey)
            try await app.directChannel(true)
            try await app.send(["n": "1"], id: "m-1")
            _ = try await Self.waitForPayload(first, #""message_id": "m-1""#)
            // Gone without acking: nothing succeeded yet.
            first.signal(SIGKILL)
            _ = try await first.waitForExit()
            #expect(!app.heard.values.contains(.succeeded("m-1")))
            let second = try await Self.appServer(cluster, keys)
            _ = try await Self.waitForPayload(second, #""message_id": "m-1""#)
            try await app.heard.first(within: 20, "SendSucceeded") { $0 == .succeeded("m-1") }
            await app.close()
            await second.stop()
        }
    }

    @Test func aDownstreamMessageReachesTheAppWithADeliveryReceipt() async throws {
        try await withCluster(Cluster.Options(xmpp: true)) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let learner = try await Self.appServer(cluster, keys, ["--once"])
            let app = try await App(try await cluster.addDevice("A"), apiKey: keys.apiKey)
            try await app.directChannel(true)
            // The application server learns the device's registration id from an upstream message.
            try await app.send(["hello": "server"], id: "hello")
            let registration = try #require(try await Self.waitForPayload(learner, #""message_id": "hello""#)["from"] as? String)
            try await app.heard.first(within: 20, "SendSucceeded") { $0 == .succeeded("hello") }
            await learner.stop()

            let downstream = #"{"to": "\#(registration)", "message_id": "d-1", "data": {"offer": "pears"}, "delivery_receipt_requested": true}"#
            let server = try await Self.appServer(cluster, keys, ["--send", downstream])
            let ack = try await Self.waitForPayload(server, #""message_type": "ack""#)
            #expect(ack["message_id"] as? String == "d-1")
            #expect(ack["from"] as? String == registration)
            try await app.heard.first(within: 20, "MessageReceived") {
                $0 == .received(data: ["offer": "pears"], from: "shop", id: "d-1")
            }
            let receipt = try await Self.waitForPayload(server, #""message_type": "receipt""#)
            #expect(receipt["message_id"] as? String == "dr2:d-1")
            let data = try #require(receipt["data"] as? [String: String])
            #expect(data["message_status"] == "MESSAGE_SENT_TO_DEVICE")
            #expect(data["original_message_id"] == "d-1")
            #expect(data["device_registration_id"] == registration)
            await app.close()
            await server.stop()
        }
    }

    @Test func badPayloadsGetTheNackThatNamesThem() async throws {
        try await withCluster(Cluster.Options(xmpp: true)) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let payloads = [
                #"{"to": "no-such-device", "message_id": "bad-1", "data": {}}"#,
                #"{"to": "x", "message_id": "bad-2", "colour": "red"}"#,
                #"{"to": "x", "message_id": "bad-3", "time_to_live": "soon"}"#,
                #"{"to": "x", "message_id": "bad-4", "message_type": "ack"}"#,
                "this is not JSON",
            ]
            let server = try await Self.appServer(cluster, keys, payloads.flatMap { ["--send", $0] })
            for (id, error) in [("bad-1", "BAD_REGISTRATION"), ("bad-2", "INVALID_JSON"), ("bad-3", "INVALID_JSON"),
                                ("bad-4", "BAD_ACK")] {
                let nack = try await Self.waitForPayload(server, #""message_id": "\#(id)""#)
                #expect(nack["message_type"] as? String == "nack")
                #expect(nack["error"] as? String == error, "\(id)")
            }
            let unparsable = try await Self.waitForPayload(server, #""message_id": """#)
            #expect(unparsable["error"] as? String == "INVALID_JSON")
            await server.stop()
        }
    }

    @Test func aServerShuttingDownTellsItsApplicationServersToDrain() async throws {
        try await withCluster(Cluster.Options(xmpp: true)) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let server = try await Self.appServer(cluster, keys, ["--once"])
            await cluster.stopServer()
            let control = try await Self.waitForPayload(server, #""message_type": "control""#)
            #expect(control["control_type"] as? String == "CONNECTION_DRAINING")
            try await server.waitForLine(containing: "disconnected")
        }
    }

    @Test func theServerFailsWhatItCannotDeliver() async throws {
        try await withCluster(Cluster.Options(xmpp: true)) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let app = try await App(try await cluster.addDevice("A"), apiKey: keys.apiKey)
            try await app.directChannel(true)
            // Now or never, and no application server is connected.
            try await app.send(["n": "1"], id: "now", ttl: 0)
            try await app.heard.first(within: 20, "SendFailed now") { $0 == .failed("now", "SERVICE_NOT_AVAILABLE") }
            // Another project's application server.
            try await app.send(["n": "2"], id: "elsewhere", to: "other@\(Cluster.xmppDomain)")
            try await app.heard.first(within: 20, "SendFailed elsewhere") { $0 == .failed("elsewhere", "INVALID_PARAMETERS") }
            // No application server acks it within its TTL.
            try await app.send(["n": "3"], id: "late", ttl: 1)
            try await app.heard.first(within: 20, "SendFailed late") { $0 == .failed("late", "TTL_EXCEEDED") }
            await app.close()
        }
    }

    @Test func theChannelIsDroppedInTheBackgroundAndMessagesWaitForTheForeground() async throws {
        try await withCluster(Cluster.Options(xmpp: true)) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let server = try await Self.appServer(cluster, keys)
            let app = try await App(try await cluster.addDevice("A"), apiKey: keys.apiKey)
            try await app.directChannel(true)
            try await app.background(true)
            try await app.heard.first(within: 20, "DirectChannelConnected false") { $0 == .connected(false) }
            try await app.send(["later": "yes"], id: "waits")
            #expect(!Self.payloads(server).contains { $0["message_id"] as? String == "waits" })
            try await app.background(false)
            _ = try await Self.waitForPayload(server, #""message_id": "waits""#)
            try await app.heard.first(within: 20, "SendSucceeded") { $0 == .succeeded("waits") }
            await app.close()
            await server.stop()
        }
    }

    @Test func nearbyctlSendsUpstreamAndListensDownstream() async throws {
        try await withCluster(Cluster.Options(xmpp: true)) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let learner = try await Self.appServer(cluster, keys, ["--once"])
            let device = try await cluster.addDevice("A")
            let sent = try await runProgram(Programs.path("nearbyctl"), [
                "upstream", "send", "--bus", device.busAddress, "--api-key", keys.apiKey, "--to", "shop@\(Cluster.xmppDomain)",
                "--id", "cli-1", "item=42",
            ])
            #expect(sent.status == 0)
            #expect(sent.output.contains("succeeded cli-1"))
            let delivered = try await Self.waitForPayload(learner, #""message_id": "cli-1""#)
            #expect(delivered["data"] as? [String: String] == ["item": "42"])
            let registration = try #require(delivered["from"] as? String)
            await learner.stop()

            let listener = try await ChildProcess(name: "nearbyctl", executable: Programs.path("nearbyctl"), arguments: [
                "upstream", "listen", "--bus", device.busAddress, "--api-key", keys.apiKey, "--count", "1",
            ])
            try await listener.waitForLine(containing: "connected")
            let server = try await Self.appServer(cluster, keys, ["--send", #"{"to": "\#(registration)", "message_id": "d-9", "data": {"note": "hi"}}"#])
            try await listener.waitForLine(containing: "message d-9 from shop note=hi")
            #expect(try await listener.waitForExit() == 0)
            await server.stop()
        }
    }

    /// Messages sent before, while the server is down, across a kill -9 of
    /// nearbyd and after: each reaches the application server exactly once.
    @Test func nothingIsLostOrDuplicatedAcrossCrashesOfTheServerAndTheDaemon() async throws {
        try await withCluster(Cluster.Options(xmpp: true)) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let server = try await Self.appServer(cluster, keys)
            let app = try await App(try await cluster.addDevice("A"), apiKey: keys.apiKey)
            try await app.directChannel(true)
            for index in 1...5 { try await app.send(["n": "\(index)"], id: "m-\(index)") }
            for index in 1...5 { try await app.heard.first(within: 20, "SendSucceeded m-\(index)") { $0 == .succeeded("m-\(index)") } }

            await cluster.killServer()
            for index in 6...10 { try await app.send(["n": "\(index)"], id: "m-\(index)") }
            await app.close()
            let device = try await cluster.restartDaemon("A")
            try await cluster.restartServer()
            let again = try await App(device, apiKey: keys.apiKey)
            try await again.directChannel(true)
            for index in 6...10 { try await again.heard.first(within: 30, "SendSucceeded m-\(index)") { $0 == .succeeded("m-\(index)") } }

            let ids = Self.payloads(server).filter { $0["message_type"] == nil }.compactMap { $0["message_id"] as? String }
            for index in 1...10 { #expect(ids.filter { $0 == "m-\(index)" }.count == 1, "m-\(index) delivered once") }
            await again.close()
            await server.stop()
        }
    }
}
