import DBus
import Foundation
import Testing
import TestSupport

/// What one user does cannot take what the daemon shares among all users:
/// limits are per user first, each user has its own registration (and so its
/// own quotas) with nearby-server, and what the server refuses is retried and
/// says why it waits. The other user is nobody, running dbus-next programs,
/// as a hostile program of another user would.
@Suite(.serialized, .timeLimit(.minutes(3)), .enabled(if: getuid() == 0, "runs programs as nobody, which needs root"))
struct FairShareTests {
    /// A copy of a python/ script nobody can read (the checkout may sit
    /// under a directory only its owner can enter), run as nobody.
    static func asNobody(_ script: String, _ arguments: [String], name: String,
                        in directory: TemporaryDirectory) async throws -> ChildProcess {
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
        let copy = directory.file(script)
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("python/\(script)")
        if !FileManager.default.fileExists(atPath: copy) { try FileManager.default.copyItem(atPath: source.path, toPath: copy) }
        return try await ChildProcess(name: name, executable: "/usr/sbin/runuser",
                                      arguments: ["-u", "nobody", "--", "/usr/bin/python3", copy] + arguments)
    }

    /// Waits until the publication at `path` has a `property` that `matches`:
    /// its value now, or as its PropertiesChanged signals bring it.
    @BusActor @discardableResult
    static func waitFor(_ client: RawClient, _ path: ObjectPath, _ property: String,
                        _ matches: @escaping @Sendable (String) -> Bool) async throws -> String {
        let changes = Inbox<String>()
        let subscription = try await client.connection.addMatch(
            "type='signal',sender='org.nearbyd',path='\(path.rawValue)',member='PropertiesChanged'") { signal in
            _ = try? signal.arguments.read(String.self)
            if let value = (try? signal.arguments.read([String: Variant].self))?[property]?.value.string { changes.put(value) }
        }
        defer { subscription.cancel() }
        // Read after the match is in place: nothing changes unseen in between.
        if let now = try await client.get(path, "org.nearbyd.Publication1", property).string, matches(now) { return now }
        return try await changes.first(within: 20, "\(property) of \(path)", where: matches)
    }

    @Test @BusActor func oneUsersConnectionsLeaveOtherUsersTheirShare() async throws {
        let limits = "[limits]\nmax-clients-per-user = 4\nmax-clients = 8\n"
        try await withCluster(Cluster.Options(extraConfiguration: limits, busPolicy: .sharedWithOtherUsers(including: [PolicyTests.policyFile]))) { cluster in
            let device = try await cluster.addDevice("A")
            let directory = try TemporaryDirectory("nearbyd-share")
            defer { directory.remove() }
            let greedy = try await Self.asNobody("connections.py", [device.busAddress, "key", "6"], name: "greedy", in: directory)
            try await greedy.waitForLine(containing: #""event": "holding""#)
            let outcomes = greedy.lines.values.filter { $0.contains(#""connection""#) }
            #expect(outcomes.filter { $0.contains(#""outcome": "ok""#) }.count == 4, "\(outcomes)")
            #expect(outcomes.filter { $0.contains("org.nearbyd.Error.LimitExceeded") && $0.contains("max-clients-per-user") }.count == 2,
                    "\(outcomes)")
            // Another user is served while nobody holds its whole share.
            let client = try RawClient(device.busAddress)
            _ = try await client.createManager("key")
            client.connection.close()
            await greedy.stop()
        }
    }

    @Test @BusActor func whatTheServerRefusesIsOfferedAgainAndSaysWhyItWaits() async throws {
        let options = Cluster.Options(daemonServerSettings: "refused-change-retry = 0.3",
                                      serverConfiguration: "[limits]\nmax-publications-per-device = 2\n",
                                      busPolicy: .sharedWithOtherUsers(including: [PolicyTests.policyFile]))
        try await withCluster(options) { cluster in
            let key = try await cluster.createProject("shop")
            let device = try await cluster.addDevice("A")
            let client = try RawClient(device.busAddress)
            let manager = try await client.createManager(key)
            let first = try await client.publish(manager, [1], "chat")
            _ = try await client.publish(manager, [2], "chat")
            let third = try await client.publish(manager, [3], "chat")
            // The user's registration is full: the third waits, and says why.
            let waiting = try await Self.waitFor(client, third, "StatusReason") { $0.contains("limit_exceeded") }
            #expect(waiting.contains("offered again every"), "\(waiting)")
            #expect(try await client.get(third, "org.nearbyd.Publication1", "Status").string == "starting")

            // Another user's publication of the same key has its own registration and quota.
            let directory = try TemporaryDirectory("nearbyd-share")
            defer { directory.remove() }
            let other = try await Self.asNobody("permissions.py", ["app", device.busAddress, key, "org.example.other", "none"],
                                                name: "other", in: directory)
            try await other.waitForLine(containing: #""status": "active""#)

            // Room again: the refused one is offered again and goes active by itself.
            _ = try await client.call(first, "org.nearbyd.Publication1", "Unpublish")
            try await Self.waitFor(client, third, "Status") { $0 == "active" }
            #expect(try await client.get(third, "org.nearbyd.Publication1", "StatusReason").string == "")
            await other.stop()
            client.connection.close()
        }
    }

    @Test @BusActor func aKeyTheServerRefusesIsNotOfferedToItAgainAndAgain() async throws {
        try await withCluster { cluster in
            let device = try await cluster.addDevice("A")
            let client = try RawClient(device.busAddress)
            let manager = try await client.createManager("made-up-key")
            let publication = try await client.publish(manager, [1], "chat")
            let refused = try await Self.waitFor(client, publication, "StatusReason") { $0.contains("refuses the API key") }
            #expect(refused.contains("unknown API key"), "\(refused)")
            // The direct channel of the same user and key retries too, every backoff (at most 0.5 s here):
            // after several of its attempts, the server has still been asked once.
            _ = try await client.connection.call(destination: "org.nearbyd", path: manager, interface: "org.freedesktop.DBus.Properties",
                                                 member: "Set") { writer throws(DBusError) in
                try writer.append("org.nearbyd.Upstream1")
                try writer.append("DirectChannel")
                try writer.append(Variant(.bool(true)))
            }
            _ = try await device.daemon.lines.nth(4, within: 20, "four attempts of the direct channel") {
                $0.contains("direct channel:") && $0.contains("refuses the API key")
            }
            let asked = device.daemon.lines.values.filter { $0.contains("nearby-server refuses an API key") }
            #expect(asked.count == 1, "\(asked)")
            client.connection.close()

            // nearbyctl fails at once with the reason: nearbyd already knows the key is refused.
            let publisher = try await ChildProcess(name: "nearbyctl", executable: Programs.path("nearbyctl"), arguments: [
                "publish", "--bus", device.busAddress, "--api-key", "made-up-key", "hello",
            ])
            #expect(try await publisher.waitForExit(within: 20) == 1, "\(publisher.output)")
            #expect(publisher.output.contains("nearbyctl: nearby-server refuses the API key: unknown API key"), "\(publisher.output)")
        }
    }
}
