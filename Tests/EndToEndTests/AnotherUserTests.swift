import DBus
import Foundation
import Testing
import TestSupport

/// Two users of one machine whose apps share an API key and an AppId (both
/// public: the key ships inside the app, the AppId is whatever a caller
/// says): each has its own registration with nearby-server, so neither ever
/// sees, takes or blocks the other's upstream messages, verdicts, downstream
/// messages or message ids. The test's own user is the first; a dbus-next
/// app run as nobody is the second, as an attacker on the same machine would.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: getuid() == 0, "runs an app as nobody, which needs root"))
struct AnotherUserTests {
    /// The dbus-next app of python/upstream_app.py, run as nobody.
    final class Stranger: Sendable {
        let process: ChildProcess
        let directory: TemporaryDirectory

        init(_ device: Cluster.Device, apiKey: String) async throws {
            // A copy nobody can read: the checkout may sit under a directory only its owner can enter.
            directory = try TemporaryDirectory("nearbyd-stranger")
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
            let script = directory.file("upstream_app.py")
            let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("python/upstream_app.py")
            try FileManager.default.copyItem(atPath: source.path, toPath: script)
            process = try await ChildProcess(
                name: "stranger", executable: "/usr/sbin/runuser",
                arguments: ["-u", "nobody", "--", "/usr/bin/python3", script, device.busAddress, apiKey,
                            ConnectionServerTests.appID, "shop@\(Cluster.xmppDomain)"],
                takesInput: true)
            try await process.waitForLine(containing: #""event": "ready""#)
        }

        /// Sends an upstream message and waits for SendMessage's answer: "sent" or the error's name.
        func send(_ id: String, ttl: Int = 600) async throws -> String {
            process.send("send \(id) \(ttl)")
            let line = try await process.lines.first(within: 20, "the stranger's answer for \(id)") {
                ($0.contains(#""event": "sent""#) || $0.contains(#""event": "error""#)) && $0.contains(#""id": "\#(id)""#)
            }
            return line.contains(#""event": "sent""#) ? "sent" : (Self.field("name", of: line) ?? line)
        }

        /// Waits for an event line of `kind` about message `id`.
        @discardableResult
        func wait(_ kind: String, _ id: String) async throws -> String {
            try await process.waitForLine(containing: #""event": "\#(kind)", "id": "\#(id)""#)
        }

        /// Every event line of `kind` so far.
        func events(_ kind: String) -> [String] {
            process.lines.values.filter { $0.contains(#""event": "\#(kind)""#) }
        }

        func stop() async {
            await process.stop()
            directory.remove()
        }

        static func field(_ name: String, of line: String) -> String? {
            guard let data = line.data(using: .utf8),
                  let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
            return object[name] as? String
        }
    }

    @Test @BusActor func anotherUserWithTheSameKeyAndAppIdNeverSeesTakesOrBlocksTheFirstUsersMessages() async throws {
        try await withCluster(Cluster.Options(xmpp: true, busPolicy: .sharedWithOtherUsers(including: [PolicyTests.policyFile]))) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let device = try await cluster.addDevice("A")
            let learner = try await ConnectionServerTests.appServer(cluster, keys, ["--once"])
            let owner = try await ConnectionServerTests.App(device, apiKey: keys.apiKey)
            try await owner.directChannel(true)
            let stranger = try await Stranger(device, apiKey: keys.apiKey)
            try await stranger.process.waitForLine(containing: #""event": "connected""#)

            // Each user's messages come from its own registration.
            try await owner.send(["n": "1"], id: "hello")
            let ownerRegistration = try #require(
                try await ConnectionServerTests.waitForPayload(learner, #""message_id": "hello""#)["from"] as? String)
            try await owner.heard.first(within: 20, "the owner's SendSucceeded") { $0 == .succeeded("hello") }
            #expect(try await stranger.send("probe") == "sent")
            let strangerRegistration = try #require(
                try await ConnectionServerTests.waitForPayload(learner, #""message_id": "probe""#)["from"] as? String)
            #expect(strangerRegistration != ownerRegistration)
            // The stranger's own verdict comes after anything of the owner's it could have been told.
            try await stranger.wait("succeeded", "probe")
            #expect(stranger.events("succeeded").count == 1, "\(stranger.events("succeeded"))")
            await learner.stop()

            // No application server: the messages wait. The stranger cannot take the owner's id first.
            #expect(try await stranger.send("order-7") == "sent")
            try await owner.send(["n": "7"], id: "order-7")

            // Downstream to the owner's registration reaches the owner only.
            let toOwner = #"{"to": "\#(ownerRegistration)", "message_id": "d-owner", "data": {"for": "owner"}}"#
            let toStranger = #"{"to": "\#(strangerRegistration)", "message_id": "d-stranger", "data": {"for": "stranger"}}"#
            let server = try await ConnectionServerTests.appServer(cluster, keys, ["--send", toOwner, "--send", toStranger])
            try await owner.heard.first(within: 20, "the owner's MessageReceived") {
                if case .received(_, _, "d-owner") = $0 { true } else { false }
            }
            try await stranger.wait("received", "d-stranger")
            #expect(stranger.events("received").count == 1, "\(stranger.events("received"))")
            // Both order-7s reached the application server, each from its own user's registration, and each user hears of its own.
            try await owner.heard.first(within: 20, "the owner's SendSucceeded for order-7") { $0 == .succeeded("order-7") }
            try await stranger.wait("succeeded", "order-7")
            let orders = ConnectionServerTests.payloads(server).filter { $0["message_id"] as? String == "order-7" }
            #expect(Set(orders.compactMap { $0["from"] as? String }) == [ownerRegistration, strangerRegistration])
            await server.stop()

            // A verdict kept while the owner's app is closed waits for the owner, not for the stranger's app of the same name.
            // Another app of the owner keeps the owner's channel open meanwhile.
            let keeper = try RawClient(device.busAddress)
            let keeperManager = try await keeper.createManager(keys.apiKey, ["AppId": .string("org.example.keeper")])
            try await keeper.connection.call(destination: "org.nearbyd", path: keeperManager, interface: "org.freedesktop.DBus.Properties",
                                             member: "Set") { writer throws(DBusError) in
                try writer.append(ConnectionServerTests.upstream)
                try writer.append("DirectChannel")
                try writer.append(Variant(.bool(true)))
            }
            try await owner.send(["n": "8"], id: "late")
            await owner.close()
            let acking = try await ConnectionServerTests.appServer(cluster, keys)
            try await acking.waitForLine(containing: "acked late")
            #expect(try await stranger.send("after-late") == "sent")
            try await stranger.wait("succeeded", "after-late")
            #expect(!stranger.events("succeeded").contains { $0.contains(#""late""#) }, "\(stranger.events("succeeded"))")
            let back = try await ConnectionServerTests.App(device, apiKey: keys.apiKey)
            try await back.heard.first(within: 20, "the owner's kept SendSucceeded") { $0 == .succeeded("late") }
            await back.close()
            keeper.connection.close()
            await acking.stop()
            await stranger.stop()
        }
    }
}
