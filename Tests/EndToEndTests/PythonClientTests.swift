import Foundation
import Testing
import TestSupport

/// The Python client (clients/python, installed into .build/venv by `make
/// setup`) against real daemons: a message published through it on one
/// device is found through it on another, lost when the devices part, and
/// found again after the subscriber's nearbyd restarts (the client makes its
/// manager and subscription again on the new one).
@Suite(.serialized, .timeLimit(.minutes(3))) struct PythonClientTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func client(_ arguments: [String], takesInput: Bool = false) async throws -> ChildProcess {
        try await ChildProcess(name: "python-client", executable: root.appendingPathComponent(".build/venv/bin/python").path,
                               arguments: [root.appendingPathComponent("Tests/EndToEndTests/python/python_client.py").path] + arguments,
                               environment: ["PYTHONUNBUFFERED": "1"], takesInput: takesInput)
    }

    @Test func foundLostAndFoundAgainAfterTheDaemonRestarts() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("python")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let subscriber = try await Self.client(["subscribe", b.busAddress, key])
            try await subscriber.waitForLine(containing: #""event": "subscribed""#)
            let publisher = try await Self.client(["publish", a.busAddress, key, "from python"])
            try await publisher.waitForLine(containing: #""event": "published""#)

            let found = try await subscriber.waitForLine(containing: #""event": "found""#)
            #expect(found.contains(#""medium": "ble""#) && found.contains(#""text": "from python""#), "\(found)")
            try await cluster.move("A", to: (1_000, 0))
            try await subscriber.waitForLine(containing: #""event": "lost""#)
            try await cluster.move("A", to: (0, 0))
            try await subscriber.waitForLine(containing: #""event": "found""#, occurrence: 2)

            // B's nearbyd crashes and comes back: the client subscribes again by itself.
            _ = try await cluster.restartDaemon("B")
            try await subscriber.waitForLine(containing: #""event": "found""#, occurrence: 3, within: 30)
            #expect(!subscriber.output.contains(#""event": "error""#), "\(subscriber.output)")
            await publisher.stop()
            await subscriber.stop()
        }
    }

    /// nearbyd's status, an upstream message to a real application server
    /// (slixmpp) and its verdict, and the app's permission, through the client.
    @Test func statusUpstreamAndPermission() async throws {
        try await withCluster(Cluster.Options(xmpp: true)) { cluster in
            let keys = try await cluster.createProjectKeys("shop")
            let appServer = try await ConnectionServerTests.appServer(cluster, keys)
            let device = try await cluster.addDevice("A")
            let client = try await Self.client(["upstream", device.busAddress, keys.apiKey, "shop@\(Cluster.xmppDomain)"])
            let status = try await client.waitForLine(containing: #""event": "status""#)
            #expect(status.contains(#""mediums": ["ble"]"#), "\(status)")
            let verdict = try await client.waitForLine(containing: #""id": "py-1""#, within: 30)
            #expect(verdict.contains(#""event": "succeeded""#), "\(client.output)")
            try await appServer.waitForLine(containing: #""message_id": "py-1""#)
            #expect(try await client.waitForExit(within: 20) == 0, "\(client.output)")
            let permissions = client.lines.values.filter { $0.contains(#""event": "permission""#) }
            #expect(permissions == [#"{"event": "permission", "granted": false}"#, #"{"event": "permission", "granted": true}"#],
                    "\(client.output)")
            await appServer.stop()
        }
    }

    /// A beacon's attachment and the raw beacon itself, through the client;
    /// the raw subscription made once the beacon is in range (nearbyd then
    /// signals the find right after its reply: the client keeps it for the
    /// object it names).
    @Test func beaconsAndTheirAttachments() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("shop")
            let uid = "0123456789abcdef0123" + "00000000002a"
            try await cluster.serverCommand(["beacon", "register", "--project", "shop", "--type", "eddystone", "--id", uid])
            try await cluster.serverCommand(["beacon", "attachment", "add", "3!\(uid)", "--project", "shop", "--type", "door",
                                             "--data", "Welcome in"])
            try await cluster.placeBeacon("door", "eddystone-uid", "0123456789abcdef0123/00000000002a", at: (1, 0))
            let device = try await cluster.addDevice("A")
            let client = try await Self.client(["beacons", device.busAddress, key])
            let attachment = try await client.waitForLine(containing: #""event": "attachment""#, within: 30)
            let welcome = Data("Welcome in".utf8).map { String(format: "%02x", $0) }.joined()
            #expect(attachment.contains(#""content": "\#(welcome)""#) && attachment.contains(#""type": "door""#), "\(attachment)")
            #expect(attachment.contains(#""kind": "eddystone-uid""#) && attachment.contains(#""id": "\#(uid)""#), "\(attachment)")
            let raw = try await client.waitForLine(containing: #""event": "raw""#, within: 30)
            #expect(raw.contains(#""content": "\#(uid)""#) && raw.contains(#""type": "__eddystone_uid""#), "\(raw)")
            await client.stop()
        }
    }

    /// The app's background through the client: set, heard back as a
    /// change, and only the publication with `allow_in_background` keeps
    /// running meanwhile; back in the foreground both run.
    @Test func theBackgroundIsSetHeardAndObeyed() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("python")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let client = try await Self.client(["background", a.busAddress, key])
            #expect(try await client.waitForExit(within: 30) == 0, "\(client.output)")
            let lines = client.lines.values.filter { $0.contains(#""event": "background""#) }
            #expect(lines.count == 2, "\(client.output)")
            guard lines.count == 2 else { return }
            #expect(lines[0].contains(#""changed": true"#) && lines[0].contains(#""now": true"#), "\(lines[0])")
            #expect(lines[0].contains(#""foreground": "inactive""#) && !lines[0].contains(#""anyway": "inactive""#), "\(lines[0])")
            #expect(lines[1].contains(#""changed": false"#) && lines[1].contains(#""now": false"#), "\(lines[1])")
            #expect(!lines[1].contains(#""inactive""#), "\(lines[1])")
        }
    }

    /// With nobody else to ask (no agent, the `ask` policy), the app's own
    /// permission dialog given to `publish` is asked, its yes recorded as
    /// the app's decision; another connection calling the dialog is refused.
    @Test func theAppsOwnPermissionDialogIsAskedAndOnlyByNearbyd() async throws {
        try await withCluster(Cluster.Options(permissionPolicy: "ask")) { cluster in
            let key = try await cluster.createProject("python")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let client = try await Self.client(["dialog", a.busAddress, key])
            #expect(try await client.waitForExit(within: 30) == 0, "\(client.output)")
            #expect(client.output.contains(#"{"event": "asked", "mediums": ["#), "\(client.output)")
            #expect(client.output.contains(#"{"event": "published", "granted": true}"#), "\(client.output)")
            #expect(client.output.contains(#""error": "org.freedesktop.DBus.Error.AccessDenied", "event": "forged""#), "\(client.output)")
            let decision = try await runProgram("/usr/bin/busctl", [
                "--address=\(a.busAddress)", "--json=short", "call", "org.nearbyd", "/org/nearbyd",
                "org.nearbyd.Nearby1", "GetPermission", "sa{sv}", "org.example.PythonDialog", "0",
            ]).output
            #expect(decision.contains(#""DecidedBy":{"type":"s","data":"app"}"#), "\(decision)")
        }
    }

    /// A permission agent on the client: asked (with the caller's user) for
    /// an app nobody decided about, its yes recorded; another connection's
    /// call refused; registered again by itself on a restarted nearbyd,
    /// which asks it for the next app.
    @Test func aPermissionAgentIsAskedAndRegistersAgainAfterARestart() async throws {
        try await withCluster(Cluster.Options(permissionPolicy: "ask")) { cluster in
            let key = try await cluster.createProject("python")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let client = try await Self.client(["agent", a.busAddress, key], takesInput: true)
            let asked = try await client.waitForLine(containing: #""event": "asked""#)
            #expect(asked.contains(#""app_id": "org.example.PythonAgent0""#) && asked.contains(#""user": 0"#), "\(asked)")
            try await client.waitForLine(containing: #"{"event": "published", "granted": true}"#)
            let forged = try await client.waitForLine(containing: #""event": "forged""#)
            #expect(forged.contains(#""error": "org.freedesktop.DBus.Error.AccessDenied""#), "\(forged)")

            _ = try await cluster.restartDaemon("A")
            client.send("again")
            let again = try await client.waitForLine(containing: #""event": "asked""#, occurrence: 2, within: 30)
            #expect(again.contains(#""app_id": "org.example.PythonAgent1""#), "\(again)")
            #expect(try await client.waitForExit(within: 30) == 0, "\(client.output)")
            #expect(!client.output.contains(#""event": "error""#), "\(client.output)")
        }
    }

    /// The chat examples' project and two devices 1 m apart.
    static func chatDevices(_ cluster: Cluster) async throws -> (key: String, a: Cluster.Device, b: Cluster.Device) {
        (try await cluster.createProject("chat"), try await cluster.addDevice("A", at: (0, 0)), try await cluster.addDevice("B", at: (1, 0)))
    }

    /// examples/chat.py as `name` on `device`.
    static func pythonChat(_ name: String, on device: Cluster.Device, key: String) async throws -> ChildProcess {
        try await ChildProcess(name: "chat \(name)", executable: root.appendingPathComponent(".build/venv/bin/python").path,
                               arguments: [root.appendingPathComponent("examples/chat.py").path, name, "--api-key", key,
                                           "--bus", device.busAddress],
                               environment: ["PYTHONUNBUFFERED": "1"])
    }

    /// examples/chat.py, the small app on the client, on two devices: each
    /// sees the other come, and go.
    @Test func theChatExampleSeesWhoComesAndGoes() async throws {
        try await withCluster { cluster in
            let (key, a, b) = try await Self.chatDevices(cluster)
            let alice = try await Self.pythonChat("alice", on: a, key: key)
            let bob = try await Self.pythonChat("bob", on: b, key: key)
            try await alice.waitForLine(containing: "here: bob is here (")
            try await bob.waitForLine(containing: "here: alice is here (")
            await alice.stop()
            try await bob.waitForLine(containing: "gone: alice is here")
            await bob.stop()
        }
    }

    /// examples/swift-chat, the same small app on the Swift library, with
    /// examples/chat.py on the other device: each sees the other come, and go.
    @Test func theSwiftChatExampleMeetsThePythonOne() async throws {
        try await withCluster { cluster in
            let (key, a, b) = try await Self.chatDevices(cluster)
            let alice = try await ChildProcess(name: "chat-example alice", executable: Programs.path("chat-example"),
                                               arguments: ["alice", "--api-key", key, "--bus", a.busAddress])
            let bob = try await Self.pythonChat("bob", on: b, key: key)
            try await alice.waitForLine(containing: "here: bob is here (")
            try await bob.waitForLine(containing: "here: alice is here (")
            await bob.stop()
            try await alice.waitForLine(containing: "gone: bob is here")
            alice.signal(SIGTERM)
            #expect(try await alice.waitForExit(within: 10) == 0, "\(alice.output)")
        }
    }

    /// Signals forged by another user's program, addressed to the client (a
    /// message found on its subscription's path, and a claim that nearbyd's
    /// name went to the forger) are not believed; nearbyd's own are.
    @Test func onlyNearbydIsBelieved() async throws {
        try await withCluster(ForgedSignalTests.options) { cluster in
            let key = try await cluster.createProject("genuine")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let subscriber = try await Self.client(["subscribe", b.busAddress, key])
            let subscribed = try await subscriber.waitForLine(containing: #""event": "subscribed""#)
            let path = try #require((try JSONSerialization.jsonObject(with: Data(subscribed.utf8)) as? [String: Any])?["path"] as? String)
            let fake = ForgedSignalTests.messageFound(at: path)
            try await SignalForger.forge([fake, .nameOwnerChanged("org.nearbyd", from: "", to: "{forger}"), fake], on: b.busAddress)

            let publisher = try await Self.client(["publish", a.busAddress, key, "genuine"])
            let found = try await subscriber.waitForLine(containing: #""event": "found""#)
            #expect(found.contains(#""text": "genuine""#), "\(subscriber.output)")
            #expect(!subscriber.output.contains("FAKE"), "\(subscriber.output)")
            await publisher.stop()
            await subscriber.stop()
        }
    }
}
