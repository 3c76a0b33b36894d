import Foundation
import NearbyMessages
import Testing
import TestSupport

/// Who decides whether an app may use Nearby: the app's own dialog, the
/// permission agent of the user's session, or the default policy; decisions
/// kept per user and app across restarts, and the PermissionGranted toggle.
/// The agents and apps are Python programs on dbus-next (python/permissions.py).
@Suite(.serialized) struct PermissionTests {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("python/permissions.py").path
    static let ask = Cluster.Options(permissionPolicy: "ask")

    func python(_ arguments: [String], name: String) async throws -> ChildProcess {
        try await ChildProcess(name: name, executable: "/usr/bin/python3", arguments: [Self.script] + arguments)
    }

    func agent(on device: Cluster.Device, answering answer: String) async throws -> ChildProcess {
        let agent = try await python(["agent", device.busAddress, answer], name: "agent")
        try await agent.waitForLine(containing: #""event": "registered""#)
        return agent
    }

    func app(on device: Cluster.Device, key: String, appId: String, dialog: String = "none",
             type: String = "perm") async throws -> ChildProcess {
        try await python(["app", device.busAddress, key, appId, dialog, type], name: "app \(appId)")
    }

    /// `GetPermission` as busctl prints it (`--json=short`).
    func permission(on device: Cluster.Device, _ appId: String) async throws -> String {
        let result = try await runProgram("/usr/bin/busctl", [
            "--address=\(device.busAddress)", "--json=short", "call", "org.nearbyd", "/org/nearbyd",
            "org.nearbyd.Nearby1", "GetPermission", "sa{sv}", appId, "0",
        ])
        #expect(result.status == 0, "\(result.output)")
        return result.output
    }

    /// A decision is answered once it is on disk; one the file cannot take
    /// is `Failed` and undone, whether made by SetPermission or by the
    /// `PermissionGranted` toggle (which answers at once and is undone after).
    @Test func aDecisionTheDiskRefusesIsFailedAndUndone() async throws {
        try await withCluster(Self.ask) { cluster in
            let device = try await cluster.addDevice("A")
            // The decisions' temporary file cannot be made (a directory has its name), whoever runs the daemon.
            let blocker = cluster.directory.file("state-A/permissions.json.tmp")
            try FileManager.default.createDirectory(atPath: blocker, withIntermediateDirectories: true)
            func set(_ appId: String, _ granted: Bool) async throws -> ProgramResult {
                try await runProgram("/usr/bin/busctl", [
                    "--address=\(device.busAddress)", "call", "org.nearbyd", "/org/nearbyd", "org.nearbyd.Nearby1",
                    "SetPermission", "sba{sv}", appId, "\(granted)", "0",
                ])
            }
            let refused = try await set("org.example.Chat", true)
            // busctl prints the error's message (org.nearbyd.Error.Failed's).
            #expect(refused.status != 0 && refused.output.contains("cannot store the permission decision"), "\(refused.output)")
            #expect(try await permission(on: device, "org.example.Chat").contains(#""data":"undecided""#))

            let toggle = try await python(["toggle", device.busAddress, "key", "org.example.Toggle", "true"], name: "toggle")
            try await toggle.waitForLine(containing: #""event": "set""#)
            try await toggle.waitForLine(containing: #""event": "permission", "granted": false"#)
            #expect(try await permission(on: device, "org.example.Toggle").contains(#""data":"undecided""#))

            try FileManager.default.removeItem(atPath: blocker)
            let taken = try await set("org.example.Chat", true)
            #expect(taken.status == 0, "\(taken.output)")
            #expect(try await permission(on: device, "org.example.Chat").contains(#""data":"granted""#))
            await toggle.stop()
        }
    }

    @Test func theSessionsAgentIsAskedOnceAndItsGrantOutlivesARestart() async throws {
        try await withCluster(Self.ask) { cluster in
            let key = try await cluster.createProject("permissions")
            let device = try await cluster.addDevice("A")
            let agent = try await agent(on: device, answering: "grant")
            let first = try await app(on: device, key: key, appId: "org.example.Chat")
            let request = try await agent.waitForLine(containing: #""event": "request""#)
            #expect(request.contains(#""app_id": "org.example.Chat""#))
            #expect(request.contains(#""mediums": ["ble"]"#))
            #expect(request.contains(#""MicrophoneUsageDescription": "to hear the shop's beacons""#))
            #expect(request.contains(#""BluetoothUsageDescription": "to find nearby friends""#))
            #expect(request.contains(#""User": \#(getuid())"#))
            let published = try await first.waitForLine(containing: #""event": "published""#)
            #expect(!published.contains(#""status": "inactive""#))
            let stored = try await permission(on: device, "org.example.Chat")
            #expect(stored.contains(#""Decision":{"type":"s","data":"granted"}"#), "\(stored)")
            #expect(stored.contains(#""DecidedBy":{"type":"s","data":"agent"}"#), "\(stored)")

            // Nobody is left to ask, and the policy would refuse: the stored grant answers.
            await agent.stop()
            await first.stop()
            let restarted = try await cluster.restartDaemon("A")
            let second = try await app(on: restarted, key: key, appId: "org.example.Chat")
            try await second.waitForLine(containing: #""event": "published""#)
            #expect(agent.output.components(separatedBy: #""event": "request""#).count == 2, "\(agent.output)")
        }
    }

    @Test func aDenyIsKeptAndAnsweredWithoutAskingAgain() async throws {
        try await withCluster(Self.ask) { cluster in
            let key = try await cluster.createProject("permissions")
            let device = try await cluster.addDevice("A")
            let agent = try await agent(on: device, answering: "deny")
            let first = try await app(on: device, key: key, appId: "org.example.Denied")
            let refused = try await first.waitForLine(containing: #""event": "error""#)
            #expect(refused.contains("org.nearbyd.Error.NotPermitted"))
            let second = try await app(on: device, key: key, appId: "org.example.Denied")
            let again = try await second.waitForLine(containing: #""event": "error""#)
            #expect(again.contains("org.nearbyd.Error.NotPermitted"))
            #expect(again.contains("decided by agent"), "\(again)")
            #expect(agent.output.components(separatedBy: #""event": "request""#).count == 2, "\(agent.output)")
            let stored = try await permission(on: device, "org.example.Denied")
            #expect(stored.contains(#""Decision":{"type":"s","data":"denied"}"#), "\(stored)")
        }
    }

    @Test func theAppsOwnDialogIsAskedInsteadOfTheAgent() async throws {
        try await withCluster(Self.ask) { cluster in
            let key = try await cluster.createProject("permissions")
            let device = try await cluster.addDevice("A")
            let agent = try await agent(on: device, answering: "grant")
            let refusing = try await app(on: device, key: key, appId: "org.example.Shy", dialog: "deny")
            try await refusing.waitForLine(containing: #""event": "asked""#)
            let refused = try await refusing.waitForLine(containing: #""event": "error""#)
            #expect(refused.contains("org.nearbyd.Error.NotPermitted"))
            let granting = try await app(on: device, key: key, appId: "org.example.Keen", dialog: "grant")
            try await granting.waitForLine(containing: #""event": "published""#)
            let stored = try await permission(on: device, "org.example.Keen")
            #expect(stored.contains(#""DecidedBy":{"type":"s","data":"app"}"#), "\(stored)")
            #expect(!agent.output.contains(#""event": "request""#), "\(agent.output)")
        }
    }

    /// A Publish waiting for permission whose manager is released meanwhile
    /// makes nothing: the grant that follows is answered `DoesNotExist`.
    @Test func aManagerReleasedWhilePermissionIsAskedPublishesNothing() async throws {
        try await withCluster(Self.ask) { cluster in
            let key = try await cluster.createProject("permissions")
            let device = try await cluster.addDevice("A")
            let app = try await app(on: device, key: key, appId: "org.example.Gone", dialog: "release")
            try await app.waitForLine(containing: #""event": "released""#)
            let refused = try await app.waitForLine(containing: #""event": "error""#)
            #expect(refused.contains("org.nearbyd.Error.DoesNotExist"), "\(refused)")
            #expect(!app.output.contains(#""event": "published""#), "\(app.output)")
        }
    }

    @Test func noAnswerInTimeIsADenyThatIsNotKept() async throws {
        try await withCluster(Cluster.Options(permissionPolicy: "ask", permissionTimeout: 1)) { cluster in
            let key = try await cluster.createProject("permissions")
            let device = try await cluster.addDevice("A")
            let agent = try await agent(on: device, answering: "silent")
            let app = try await app(on: device, key: key, appId: "org.example.Waiting")
            try await agent.waitForLine(containing: #""event": "request""#)
            let refused = try await app.waitForLine(containing: #""event": "error""#)
            #expect(refused.contains("org.nearbyd.Error.NotPermitted"))
            #expect(refused.contains("did not answer"), "\(refused)")
            let stored = try await permission(on: device, "org.example.Waiting")
            #expect(stored.contains(#""Decision":{"type":"s","data":"undecided"}"#), "\(stored)")
        }
    }

    @Test(arguments: [("ask", "nobody to ask", "undecided"), ("deny", "decided by policy", "denied")])
    func withNobodyToAskThePolicyDecides(policy: String, says: String, stored: String) async throws {
        try await withCluster(Cluster.Options(permissionPolicy: policy)) { cluster in
            let key = try await cluster.createProject("permissions")
            let device = try await cluster.addDevice("A")
            let app = try await app(on: device, key: key, appId: "org.example.Kiosk")
            let refused = try await app.waitForLine(containing: #""event": "error""#)
            #expect(refused.contains("org.nearbyd.Error.NotPermitted"))
            #expect(refused.contains(says), "\(refused)")
            let decision = try await permission(on: device, "org.example.Kiosk")
            #expect(decision.contains(#""Decision":{"type":"s","data":"\#(stored)"}"#), "\(decision)")
        }
    }

    @Test func theGrantPolicyIsRecordedAsTheDecision() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("permissions")
            let device = try await cluster.addDevice("A")
            let app = try await app(on: device, key: key, appId: "org.example.Kiosk")
            try await app.waitForLine(containing: #""event": "published""#)
            let decision = try await permission(on: device, "org.example.Kiosk")
            #expect(decision.contains(#""DecidedBy":{"type":"s","data":"policy"}"#), "\(decision)")
        }
    }

    @Test func revokingFromAnotherConnectionStopsTheAppAndGrantingResumesIt() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("permissions")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            let subscriber = try await MessageManager(b, apiKey: key).record(type: "perm")
            let app = try await app(on: a, key: key, appId: "org.example.Toggled")
            try await app.waitForLine(containing: #""event": "published""#)
            try await subscriber.wait(.found, "hello")

            let revoke = try await python(["toggle", a.busAddress, key, "org.example.Toggled", "false"], name: "toggle")
            try await revoke.waitForLine(containing: #""event": "set""#)
            try await app.waitForLine(containing: #""granted": false"#)
            try await app.waitForLine(containing: #""status": "inactive""#)
            try await subscriber.wait(.lost, "hello")
            let revoked = try await permission(on: a, "org.example.Toggled")
            #expect(revoked.contains(#""DecidedBy":{"type":"s","data":"user"}"#), "\(revoked)")

            subscriber.events.clear()
            let grant = try await python(["toggle", a.busAddress, key, "org.example.Toggled", "true"], name: "toggle")
            try await grant.waitForLine(containing: #""event": "set""#)
            try await app.waitForLine(containing: #""granted": true"#)
            try await app.waitForLine(containing: #""status": "active""#)
            try await subscriber.wait(.found, "hello")
        }
    }

    @Test func aRevokedSubscriptionHearsNothingUntilGrantedAgain() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("permissions")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            let manager = try await MessageManager(apiKey: key, appId: "org.example.Listener", bus: .address(b.busAddress))
            let subscriber = try await manager.record(type: "chat")
            let publisher = try await MessageManager(a, apiKey: key)
            let first = try await publisher.publish("first")
            try await subscriber.wait(.found, "first")

            // The daemon stops the app's objects before it answers the Set.
            try await manager.setPermissionGranted(false)
            #expect(try await subscriber.subscription.status == "inactive")
            #expect(try await manager.permissionGranted == false)
            let second = try await publisher.publish("second")
            try await manager.setPermissionGranted(true)
            try await subscriber.wait(.found, "second")
            // Nothing was reported while it waited, not even the loss of what it had found.
            #expect(!subscriber.kinds.contains("lost /chat 'first'"), "\(subscriber.kinds)")
            _ = (first, second)
        }
    }
}
