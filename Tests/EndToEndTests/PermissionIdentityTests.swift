import Foundation
import Testing
import TestSupport

/// Who may answer and see permission decisions, as attackers on one machine
/// would try it: a sandboxed app (a program placed in a Flatpak app's scope,
/// as Flatpak would) registering an agent or reading and changing its user's
/// other apps' decisions, and another uid's process in the same login
/// session (su, sudo) being answered for by the session's agent. The agents
/// and apps are dbus-next programs (python/permissions.py). Needs root: it
/// places programs in control groups and runs one as nobody.
@Suite(.serialized, .timeLimit(.minutes(3)),
       .enabled(if: AppControlGroup.base != nil, "no writable control group hierarchy (or not root)"))
struct PermissionIdentityTests {
    static let ask = Cluster.Options(permissionPolicy: "ask")

    /// A permissions.py program started with `--wait`: it connects once
    /// ``go()`` is called, after the test has placed it.
    struct Program {
        let process: ChildProcess
        let pid: UInt32
        let directory: TemporaryDirectory?

        /// As the test's user, or as nobody (from a copy nobody can read: the
        /// checkout may sit under a directory only its owner can enter).
        init(_ arguments: [String], name: String, asNobody: Bool = false) async throws {
            let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .appendingPathComponent("python/permissions.py").path
            var executable = "/usr/bin/python3"
            var prefix = [source]
            if asNobody {
                let directory = try TemporaryDirectory("nearbyd-nobody")
                try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory.path)
                try FileManager.default.copyItem(atPath: source, toPath: directory.file("permissions.py"))
                self.directory = directory
                executable = "/usr/sbin/runuser"
                prefix = ["-u", "nobody", "--", "/usr/bin/python3", directory.file("permissions.py")]
            } else {
                directory = nil
            }
            process = try await ChildProcess(name: name, executable: executable, arguments: prefix + ["--wait"] + arguments,
                                             takesInput: true)
            let waiting = try await process.waitForLine(containing: #""event": "waiting""#)
            let data = try #require(waiting.data(using: .utf8))
            let fields = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            pid = try #require((fields["pid"] as? NSNumber)?.uint32Value)
        }

        func go() { process.send("go") }

        func stop() async {
            await process.stop()
            directory?.remove()
        }
    }

    /// `GetPermission` of the test's user, as busctl prints it (`--json=short`).
    func decision(on device: Cluster.Device, _ appId: String) async throws -> String {
        try await PermissionTests().permission(on: device, appId)
    }

    /// A sandboxed app in the user's session registers an agent after the
    /// user's own: it is refused, and the user's agent is the one asked when
    /// another app publishes. An agent in a terminal's app scope (not a
    /// sandbox: where `nearbyctl agent` runs on some desktops) is taken.
    @Test func aSandboxedAppCannotBeTheAgentThatAnswersForOtherApps() async throws {
        let logindBus = try await PrivateBus()
        let logind = try await LogindMock(bus: logindBus)
        let session = try await logind.addSession("c3", uid: getuid(), active: true)
        try await withCluster(Cluster.Options(permissionPolicy: "ask", logindBus: logindBus.address)) { cluster in
            let key = try await cluster.createProject("sandbox")
            let device = try await cluster.addDevice("A")
            let user = try await Program(["agent", device.busAddress, "deny"], name: "the user's agent")
            let spy = try await Program(["agent", device.busAddress, "grant"], name: "a Flatpak app's agent")
            let terminal = try await Program(["agent", device.busAddress, "deny"], name: "an agent in a terminal's scope")
            let chat = try await Program(["app", device.busAddress, key, "org.example.Chat", "none"], name: "another app")
            try await logind.placeProcesses([user.pid, spy.pid, terminal.pid, chat.pid], in: session)
            let flatpak = try AppControlGroup("app-flatpak-org.example.Spy-77.scope")
            defer { flatpak.remove() }
            try flatpak.add(Int32(spy.pid))

            user.go()
            try await user.process.waitForLine(containing: #""event": "registered""#)
            spy.go()
            let refused = try await spy.process.waitForLine(containing: #""event": "refused""#)
            #expect(refused.contains("org.nearbyd.Error.AccessDenied") && refused.contains("org.example.Spy"), "\(refused)")

            chat.go()
            let denied = try await chat.process.waitForLine(containing: #""event": "error""#)
            #expect(denied.contains("org.nearbyd.Error.NotPermitted") && denied.contains("decided by agent"), "\(denied)")
            let asked = try await user.process.waitForLine(containing: #""event": "request""#)
            #expect(asked.contains(#""app_id": "org.example.Chat""#), "\(asked)")
            #expect(spy.process.lineCount(containing: #""event": "request""#) == 0, "\(spy.process.lines.values)")
            #expect(try await decision(on: device, "org.example.Chat").contains(#""data":"denied""#))

            // Not a sandbox: registered, and (the latest in the session) asked next.
            let scope = try AppControlGroup("app-org.kde.konsole-5150.scope")
            defer { scope.remove() }
            try scope.add(Int32(terminal.pid))
            terminal.go()
            try await terminal.process.waitForLine(containing: #""event": "registered""#)
            let maps = try await Program(["app", device.busAddress, key, "org.example.Maps", "none"], name: "a third app")
            try await logind.placeProcesses([user.pid, spy.pid, terminal.pid, chat.pid, maps.pid], in: session)
            maps.go()
            try await maps.process.waitForLine(containing: #""event": "error""#)
            let second = try await terminal.process.waitForLine(containing: #""event": "request""#)
            #expect(second.contains(#""app_id": "org.example.Maps""#), "\(second)")
            #expect(spy.process.lineCount(containing: #""event": "request""#) == 0)
            for program in [user, spy, terminal, chat, maps] { await program.stop() }
        }
        await logind.stop()
        await logindBus.stop()
    }

    /// A sandboxed app reaches its own decision alone: another app's is
    /// neither shown, listed nor changed. A program in a desktop's app unit
    /// (not a sandbox) reaches every decision of its user, as the user's
    /// programs all do.
    @Test func aSandboxedAppSeesAndChangesOnlyItsOwnDecision() async throws {
        try await withCluster(Self.ask) { cluster in
            let device = try await cluster.addDevice("A")
            let grant = try await runProgram("/usr/bin/busctl", [
                "--address=\(device.busAddress)", "call", "org.nearbyd", "/org/nearbyd", "org.nearbyd.Nearby1",
                "SetPermission", "sba{sv}", "org.example.Bank", "true", "0",
            ])
            #expect(grant.status == 0, "\(grant.output)")

            let sandboxed = try await Program(["decisions", device.busAddress, "org.example.Bank", "org.example.Maps"],
                                              name: "a Flatpak app")
            let flatpak = try AppControlGroup("app-flatpak-org.example.Maps-4242.scope")
            defer { flatpak.remove() }
            try flatpak.add(Int32(sandboxed.pid))
            sandboxed.go()
            let got = try await sandboxed.process.waitForLine(containing: #""event": "get""#)
            #expect(got.contains("org.nearbyd.Error.AccessDenied"), "\(got)")
            let set = try await sandboxed.process.waitForLine(containing: #""event": "set""#)
            #expect(set.contains("org.nearbyd.Error.AccessDenied"), "\(set)")
            let own = try await sandboxed.process.waitForLine(containing: #""event": "set_own""#)
            #expect(own.contains(#""outcome": "ok""#), "\(own)")
            let listed = try await sandboxed.process.waitForLine(containing: #""event": "listed""#)
            #expect(listed.contains(#""apps": ["org.example.Maps"]"#), "\(listed)")
            #expect(try await decision(on: device, "org.example.Bank").contains(#""data":"granted""#))

            let unsandboxed = try await Program(["decisions", device.busAddress, "org.example.Bank", "org.kde.konsole"],
                                                name: "a program in a terminal's scope")
            let scope = try AppControlGroup("app-org.kde.konsole-5150.scope")
            defer { scope.remove() }
            try scope.add(Int32(unsandboxed.pid))
            unsandboxed.go()
            try await unsandboxed.process.waitForLine(containing: #""event": "get", "outcome": "ok""#)
            try await unsandboxed.process.waitForLine(containing: #""event": "set", "outcome": "ok""#)
            let all = try await unsandboxed.process.waitForLine(containing: #""event": "listed""#)
            #expect(all.contains(#""apps": ["org.example.Bank", "org.example.Maps", "org.kde.konsole"]"#), "\(all)")
            #expect(try await decision(on: device, "org.example.Bank").contains(#""data":"denied""#))
            await sandboxed.stop()
            await unsandboxed.stop()
        }
    }

    /// Root's agent never answers for nobody's app, not even in root's own
    /// login session (as after `su nobody`): nobody is asked, and the policy
    /// (`ask`) refuses with nothing recorded.
    @Test(arguments: [true, false])
    func anAgentNeverAnswersForAnotherUser(logindStandIn: Bool) async throws {
        let logindBus = try await PrivateBus()
        let logind = try await LogindMock(bus: logindBus)
        let session = try await logind.addSession("c5", uid: getuid(), active: true)
        let options = Cluster.Options(permissionPolicy: "ask", logindBus: logindStandIn ? logindBus.address : "none",
                                      busPolicy: .sharedWithOtherUsers(including: [PolicyTests.policyFile]))
        try await withCluster(options) { cluster in
            let key = try await cluster.createProject("another-user")
            let device = try await cluster.addDevice("A")
            let agent = try await Program(["agent", device.busAddress, "grant"], name: "root's agent")
            let stranger = try await Program(["app", device.busAddress, key, "org.example.Chat", "none"],
                                             name: "nobody's app", asNobody: true)
            try await logind.placeProcesses([agent.pid, stranger.pid], in: session)
            agent.go()
            try await agent.process.waitForLine(containing: #""event": "registered""#)
            stranger.go()
            let refused = try await stranger.process.waitForLine(containing: #""event": "error""#)
            #expect(refused.contains("org.nearbyd.Error.NotPermitted") && refused.contains("nobody to ask"), "\(refused)")
            #expect(agent.process.lineCount(containing: #""event": "request""#) == 0, "\(agent.process.lines.values)")
            await agent.stop()
            await stranger.stop()
        }
        await logind.stop()
        await logindBus.stop()
    }
}
