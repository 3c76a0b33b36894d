import DBus
import Foundation
import NearbyMessages
import Synchronization
import Testing
import TestSupport

/// nearbyctl's permission commands, its terminal permission agent and
/// `subscribe --notify`, against real daemons; and the library's own
/// permission dialog that they rely on. The daemons run with the default
/// policy `ask` where a test needs nobody to have decided for the app.
@Suite(.serialized) struct NearbyctlPermissionTests {
    static let ask = Cluster.Options(permissionPolicy: "ask")

    /// Runs nearbyctl to its end.
    func runNearbyctl(_ arguments: [String]) async throws -> ProgramResult {
        try await runProgram(Programs.path("nearbyctl"), arguments)
    }

    func object(_ line: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "not a JSON object: \(line)")
    }

    @Test(arguments: ["grant", "deny"])
    func theAgentAnswersAnAppsFirstPublicationAndItsAnswerIsKept(answer: String) async throws {
        try await withCluster(Self.ask) { cluster in try await withProcesses { processes in
            let key = try await cluster.createProject("agent")
            let device = try await cluster.addDevice("A")
            let agent = try await processes.nearbyctl(["agent", "--bus", device.busAddress, "--answer", answer, "--json"])
            try await agent.waitForLine(containing: #""event":"registered""#)

            let app = try await MessageManager(
                apiKey: key, appId: "org.example.Chat",
                usageDescriptions: UsageDescriptions(bluetooth: "To find the people you chat with nearby"),
                bus: .address(device.busAddress))
            if answer == "grant" {
                let publication = try await app.publish("hello")
                #expect(try await publication.status != "inactive")
            } else {
                let error = await #expect(throws: NearbyMessagesError.self) { try await app.publish("hello") }
                #expect(error?.kind == .notPermitted)
            }

            let request = try object(try await agent.waitForLine(containing: "org.example.Chat"))
            #expect(request["event"] as? String == (answer == "grant" ? "granted" : "denied"))
            #expect(request["user"] as? Int == Int(getuid()))
            #expect(request["bluetoothUsageDescription"] as? String == "To find the people you chat with nearby")
            #expect((request["mediums"] as? [String])?.isEmpty == false)

            let shown = try await runNearbyctl(["permission", "show", "org.example.Chat", "--bus", device.busAddress, "--json"])
            #expect(shown.status == 0, "\(shown.output)")
            let kept = try object(shown.output.trimmingCharacters(in: .whitespacesAndNewlines))
            #expect(kept["decision"] as? String == (answer == "grant" ? "granted" : "denied"))
            #expect(kept["decidedBy"] as? String == "agent")

            await agent.stop()
            #expect(agent.exitStatus == 0)
            #expect(agent.output.contains(#""event":"unregistered""#), "\(agent.output)")
        } }
    }

    @Test func theAgentRegistersAgainWhenNearbydRestarts() async throws {
        try await withCluster(Self.ask) { cluster in try await withProcesses { processes in
            let key = try await cluster.createProject("restart")
            let device = try await cluster.addDevice("A")
            let agent = try await processes.nearbyctl(["agent", "--bus", device.busAddress, "--answer", "grant", "--json"])
            try await agent.waitForLine(containing: #""event":"registered""#)
            agent.lines.clear()
            let restarted = try await cluster.restartDaemon("A")
            try await agent.waitForLine(containing: #""event":"registered""#)

            let app = try await MessageManager(apiKey: key, appId: "org.example.Chat", bus: .address(restarted.busAddress))
            let publication = try await app.publish("hello again")
            try await agent.waitForLine(containing: #""event":"granted""#)
            withExtendedLifetime(publication) {}
        } }
    }

    @Test func theAgentAsksOnItsInputOneRequestAtATimeAndDeniesAtItsEnd() async throws {
        try await withCluster(Self.ask) { cluster in try await withProcesses { processes in
            let key = try await cluster.createProject("ask")
            let device = try await cluster.addDevice("A")
            let answers = try cluster.directory.write("answers", "y\n")
            // The shell gives the agent its input and becomes it, so stopping it stops the agent.
            let agent = try await processes.start("nearbyctl agent", "/bin/sh", [
                "-c", #"exec "$0" agent --bus "$1" < "$2""#, Programs.path("nearbyctl"), device.busAddress, answers,
            ])
            try await agent.waitForLine(containing: "permission agent registered")

            let chat = try await MessageManager(apiKey: key, appId: "org.example.Chat",
                                                usageDescriptions: UsageDescriptions(bluetooth: "To find friends"),
                                                bus: .address(device.busAddress))
            let publication = try await chat.publish("hello")
            let question = try await agent.waitForLine(containing: "Allow org.example.Chat to use Nearby (")
            #expect(question.hasSuffix("[y/N] y"), "\(question)")
            #expect(agent.output.contains("bluetooth:  To find friends"), "\(agent.output)")
            try await agent.waitForLine(containing: "granted org.example.Chat")

            let notes = try await MessageManager(apiKey: key, appId: "org.example.Notes", bus: .address(device.busAddress))
            let error = await #expect(throws: NearbyMessagesError.self) { try await notes.publish("note") }
            #expect(error?.kind == .notPermitted)
            try await agent.waitForLine(containing: "(end of input: denied)")
            try await agent.waitForLine(containing: "denied org.example.Notes")
            withExtendedLifetime(publication) {}
        } }
    }

    @Test func grantRevokeAndShowChangeWhatTheAppMayDo() async throws {
        try await withCluster(Self.ask) { cluster in
            let key = try await cluster.createProject("switch")
            let device = try await cluster.addDevice("A")
            let bus = ["--bus", device.busAddress]

            let undecided = try await runNearbyctl(["permission", "show", "org.example.Notes", "--json"] + bus)
            #expect(undecided.status == 0, "\(undecided.output)")
            let before = try object(undecided.output.trimmingCharacters(in: .whitespacesAndNewlines))
            #expect(before["decision"] as? String == "undecided")
            #expect(before["decidedBy"] == nil)

            let granted = try await runNearbyctl(["permission", "grant", "org.example.Notes"] + bus)
            #expect(granted.status == 0, "\(granted.output)")
            #expect(granted.output.hasPrefix("org.example.Notes (user \(getuid())): granted by user at "), "\(granted.output)")

            let changes = Inbox<Bool>()
            let statuses = Inbox<String>()
            let app = try await MessageManager(apiKey: key, appId: "org.example.Notes", bus: .address(device.busAddress),
                                               permissionChanged: { changes.put($0) })
            let publication = try await app.publish("shopping list", statusChanged: { statuses.put($0) })
            #expect(try await app.permissionGranted)

            let revoked = try await runNearbyctl(["permission", "revoke", "org.example.Notes", "--json"] + bus)
            #expect(revoked.status == 0, "\(revoked.output)")
            let after = try object(revoked.output.trimmingCharacters(in: .whitespacesAndNewlines))
            #expect(after["decision"] as? String == "denied")
            #expect(after["decidedBy"] as? String == "user")
            _ = try await changes.first(within: 15, "PermissionGranted false") { $0 == false }
            _ = try await statuses.first(within: 15, "the publication to stop") { $0 == "inactive" }
            #expect(try await app.permissionGranted == false)
            let refused = await #expect(throws: NearbyMessagesError.self) { try await app.publish("another") }
            #expect(refused?.kind == .notPermitted)

            statuses.clear()
            #expect(try await runNearbyctl(["permission", "grant", "org.example.Notes"] + bus).status == 0)
            _ = try await changes.first(within: 15, "PermissionGranted true again") { $0 == true }
            _ = try await statuses.first(within: 15, "the publication to resume") { $0 == "active" }

            // Root may see and set another user's decisions; the list has them all.
            let other = try await runNearbyctl(["permission", "revoke", "org.example.Notes", "--user", "4242", "--json"] + bus)
            #expect(other.status == 0, "\(other.output)")
            let listed = try await runNearbyctl(["permission", "show", "--json"] + bus)
            #expect(listed.status == 0, "\(listed.output)")
            let entries = try listed.output.split(separator: "\n").map { try object(String($0)) }
            let decisions = Set(entries.map { "\($0["user"] as? Int ?? -1) \($0["appId"] as? String ?? "") \($0["decision"] as? String ?? "")" })
            #expect(decisions.isSuperset(of: ["\(getuid()) org.example.Notes granted", "4242 org.example.Notes denied"]), "\(listed.output)")
            withExtendedLifetime(publication) {}
        }
    }

    /// Another user's decisions are root's: nobody asking for root's gets
    /// nearbyd's AccessDenied as one line and exit status 1. Its own bus with
    /// the system bus's policy, which lets other users in.
    @Test(.enabled(if: getuid() == 0, "runs nearbyctl as nobody, which needs root"))
    func anotherUsersDecisionsAreRefusedToAnyoneButRoot() async throws {
        let bus = try await PrivateBus(policy: .system(including: [PolicyTests.policyFile]))
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try await withProcesses(stopping: bus) { processes in
            let daemon = try await processes.start("nearbyd", Programs.path("nearbyd"), [
                "--bus", bus.address, "--server", "http://127.0.0.1:9", "--air-socket", directory.file("none.sock"),
                "--state-dir", directory.file("state"),
            ])
            // A copy nobody can reach: the build directory may sit under one only its owner can enter.
            let reachable = directory.file("nearbyctl")
            try FileManager.default.copyItem(atPath: Programs.path("nearbyctl"), toPath: reachable)
            try await daemon.waitForLine(containing: "nearbyd: ready")
            for command in [["show", "--user", "0"], ["grant", "org.example.Chat", "--user", "root"]] {
                let result = try await runProgram("/usr/sbin/runuser", ["-u", "nobody", "--", reachable, "permission"]
                                                  + command + ["--bus", bus.address])
                #expect(result.status == 1, "\(result.output)")
                let lines = result.output.split(separator: "\n")
                #expect(lines.count == 1 && lines[0].hasPrefix("nearbyctl: access denied: "), "\(result.output)")
            }
        }
    }

    @Test func anAppsOwnDialogDecidesInsteadOfTheAgent() async throws {
        try await withCluster(Self.ask) { cluster in
            let key = try await cluster.createProject("dialog")
            let device = try await cluster.addDevice("A")
            let asked = Inbox<[String]>()
            let app = try await MessageManager(apiKey: key, appId: "org.example.Map", bus: .address(device.busAddress))
            let subscription = try await app.subscription(messageFound: { _, _ in }, permissionRequest: { mediums in
                asked.put(mediums)
                return true
            })
            #expect(asked.values.count == 1 && asked.values.first?.isEmpty == false, "\(asked.values)")
            let kept = try await Permissions(bus: .address(device.busAddress)).permission(appId: "org.example.Map")
            #expect(kept.decision == .granted)
            #expect(kept.decidedBy == .app)
            #expect(kept.decidedAt != nil)
            withExtendedLifetime(subscription) {}
        }
    }

    @Test func subscribeNotifiesOfMessagesFoundInTheBackground() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("notify")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            // Two session buses: one with python-dbusmock's notification daemon, one without any.
            let session = try await PrivateBus()
            let bare = try await PrivateBus()
            let notifications = try await NotificationWatch(address: session.address)
            try await withProcesses(stopping: session, bare) { processes in
                _ = try await processes.start("dbusmock", "/usr/bin/python3", ["-m", "dbusmock", "--template", "notification_daemon"],
                                              environment: ["DBUS_SESSION_BUS_ADDRESS": session.address])
                _ = try await notifications.started.first(within: 20, "the notification daemon to start") { _ in true }
                let arguments = ["subscribe", "--bus", a.busAddress, "--api-key", key, "--type", "chat", "--notify", "--background", "--json"]
                let notifier = try await processes.nearbyctl(arguments, environment: ["DBUS_SESSION_BUS_ADDRESS": session.address])
                let unnotified = try await processes.nearbyctl(arguments, environment: ["DBUS_SESSION_BUS_ADDRESS": bare.address])
                for subscriber in [notifier, unnotified] {
                    try await subscriber.waitForLine(containing: #""event":"background""#)
                    try await subscriber.waitForLine(containing: #""event":"subscribed""#)
                }

                let publisher = try await MessageManager(b, apiKey: key)
                let publication = try await publisher.publish("meet at the fountain")
                let found = try object(try await notifier.waitForLine(containing: #""event":"found""#, within: 30))
                #expect(found["text"] as? String == "meet at the fountain")

                let notify = try await notifications.notified.first(within: 20, "a notification") { _ in true }
                #expect(notify.count == 8, "\(notify)")
                #expect(notify.first?.string == "nearbyctl")
                #expect(notify.count > 4 && notify[3].string == "Nearby message", "\(notify)")
                #expect(notify.count > 4 && notify[4].string == "chat: meet at the fountain", "\(notify)")

                try await unnotified.waitForLine(containing: #""text":"meet at the fountain""#, within: 30)
                let warnings = unnotified.lines.values.filter { $0.contains("warning: no desktop notifications") }
                #expect(warnings.count == 1, "\(unnotified.output)")
                withExtendedLifetime(publication) {}
            }
        }
    }
}

/// The processes a test starts besides its cluster.
final class Processes: Sendable {
    private let started = Mutex<[ChildProcess]>([])

    /// Starts a program; it is stopped when the test ends.
    func start(_ name: String, _ executable: String, _ arguments: [String],
               environment: [String: String] = [:]) async throws -> ChildProcess {
        let process = try await ChildProcess(name: name, executable: executable, arguments: arguments, environment: environment)
        started.withLock { $0.append(process) }
        return process
    }

    /// Starts nearbyctl with `arguments`.
    func nearbyctl(_ arguments: [String], environment: [String: String] = [:]) async throws -> ChildProcess {
        try await start("nearbyctl \(arguments[0])", Programs.path("nearbyctl"), arguments, environment: environment)
    }

    fileprivate var all: [ChildProcess] { started.withLock { $0 } }
}

/// Runs `body`, then stops every process it started and the buses given,
/// whether it failed or not; a failure prints the processes' output.
func withProcesses(stopping buses: PrivateBus..., isolation: isolated (any Actor)? = #isolation,
                   _ body: (Processes) async throws -> Void) async throws {
    let processes = Processes()
    var failure: (any Error)?
    do {
        try await body(processes)
    } catch {
        for process in processes.all { print("--- \(process.name) ---\n\(process.output)") }
        failure = error
    }
    for process in processes.all.reversed() { await process.stop() }
    for bus in buses { await bus.stop() }
    if let failure { throw failure }
}

/// What happens on a session bus of the test's, watched until released: who
/// takes the notification daemon's name, and the Notify calls python-dbusmock
/// reports with its MethodCalled signal.
@BusActor
final class NotificationWatch {
    /// The unique names that took `org.freedesktop.Notifications`.
    nonisolated let started = Inbox<String>()
    /// The arguments of each Notify call.
    nonisolated let notified = Inbox<[DBusValue]>()
    private let connection: BusConnection
    private var matches: [SignalSubscription] = []

    init(address: String) async throws {
        connection = try BusConnection(.address(address))
        matches.append(try await connection.addMatch(
            "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.freedesktop.Notifications'"
        ) { [started] signal in
            _ = try? signal.arguments.read(String.self)
            _ = try? signal.arguments.read(String.self)
            if let owner = try? signal.arguments.read(String.self), !owner.isEmpty { started.put(owner) }
        })
        matches.append(try await connection.addMatch(
            "type='signal',interface='org.freedesktop.DBus.Mock',member='MethodCalled'"
        ) { [notified] signal in
            guard (try? signal.arguments.read(String.self)) == "Notify",
                  let arguments = try? signal.arguments.read([Variant].self) else { return }
            notified.put(arguments.map(\.value))
        })
    }
}
