import DBus
import Foundation
import Testing
import TestSupport

/// nearbyd as a process: how it starts, tells systemd, stops and fails.
@Suite(.serialized) struct DaemonProcessTests {
    /// A daemon with no server or air to reach: enough for what these tests watch.
    static func arguments(_ bus: PrivateBus, _ directory: TemporaryDirectory) -> [String] {
        ["--bus", bus.address, "--state-dir", directory.file("state"), "--server", "http://127.0.0.1:9",
         "--air-socket", directory.file("no-air.sock")]
    }

    static func readyDaemon(on bus: PrivateBus, in directory: TemporaryDirectory) async throws -> ChildProcess {
        let daemon = try await ChildProcess(name: "nearbyd", executable: Programs.path("nearbyd"),
                                            arguments: arguments(bus, directory))
        try await daemon.waitForLine(containing: "nearbyd: ready")
        return daemon
    }

    @Test func itTellsSystemdWhenReadyReloadsOnSIGHUPAndStopsCleanlyOnSIGTERM() async throws {
        let bus = try await PrivateBus()
        let directory = try TemporaryDirectory()
        let notify = try DatagramSocket(path: directory.file("notify.sock"))
        let daemon = try await ChildProcess(
            name: "nearbyd", executable: Programs.path("nearbyd"), arguments: Self.arguments(bus, directory),
            environment: ["NOTIFY_SOCKET": notify.path])
        let ready = try await notify.messages.first(within: 20, "READY=1") { $0.contains("READY=1") }
        #expect(ready.contains("STATUS="))
        // systemctl reload: reloading, then ready again.
        notify.messages.clear()
        daemon.signal(SIGHUP)
        let reloading = try await notify.messages.first(within: 20, "RELOADING=1") { $0.contains("RELOADING=1") }
        #expect(reloading.contains("MONOTONIC_USEC="))
        _ = try await notify.messages.first(within: 20, "READY=1 after the reload") { $0.contains("READY=1") }
        daemon.signal(SIGTERM)
        _ = try await notify.messages.first(within: 20, "STOPPING=1") { $0.contains("STOPPING=1") }
        #expect(try await daemon.waitForExit() == 0)
        notify.close()
        await bus.stop()
        directory.remove()
    }

    @Test func aBadConfigurationFileIsRefusedByName() async throws {
        let directory = try TemporaryDirectory()
        let configuration = try directory.write("nearbyd.conf", "[discovery]\nlost-timout = 3\n")
        let result = try await runProgram(Programs.path("nearbyd"), ["--session", "--config", configuration])
        #expect(result.status == 1)
        #expect(result.output.contains("unknown key 'lost-timout' in [discovery]"))
        directory.remove()
    }

    @Test func aSecondDaemonOnTheSameBusGivesUp() async throws {
        let bus = try await PrivateBus()
        let directory = try TemporaryDirectory()
        let arguments = ["--bus", bus.address, "--server", "http://127.0.0.1:9", "--air-socket", directory.file("no-air.sock")]
        let first = try await ChildProcess(name: "nearbyd", executable: Programs.path("nearbyd"),
                                           arguments: arguments + ["--state-dir", directory.file("one")])
        try await first.waitForLine(containing: "nearbyd: ready")
        let second = try await runProgram(Programs.path("nearbyd"), arguments + ["--state-dir", directory.file("two")])
        #expect(second.status == 1)
        #expect(second.output.contains("org.nearbyd is owned by another connection"))
        await first.stop()
        await bus.stop()
        directory.remove()
    }

    @Test func losingTheBusIsAFailure() async throws {
        let bus = try await PrivateBus()
        let directory = try TemporaryDirectory()
        let daemon = try await Self.readyDaemon(on: bus, in: directory)
        await bus.stop()
        #expect(try await daemon.waitForExit() == 1)
        #expect(daemon.output.contains("the connection to the bus was lost"))
        directory.remove()
    }

    /// A manager created with DebugLogging has its objects' records logged at
    /// the default level; root's Nearby1.DebugLogging turns on everyone's.
    @Test @BusActor func debugLoggingShowsAManagersRecordsOrEveryones() async throws {
        let bus = try await PrivateBus()
        let directory = try TemporaryDirectory()
        let daemon = try await Self.readyDaemon(on: bus, in: directory)
        let client = try RawClient(bus.address)
        let quiet = try await client.createManager("key")
        let verbose = try await client.createManager("key", ["DebugLogging": .bool(true)])
        // Nobody is there to ask (the default policy is ask): the app allows itself, as GNSPermission lets it.
        try await client.connection.call(
            destination: "org.nearbyd", path: quiet, interface: "org.freedesktop.DBus.Properties",
            member: "Set") { writer throws(DBusError) in
            try writer.append("org.nearbyd.Manager1")
            try writer.append("PermissionGranted")
            try writer.append(Variant(.bool(true)))
        }

        _ = try await client.publish(quiet, [1], "quiet-one")
        _ = try await client.publish(verbose, [1], "loud-one")
        // One thread writes the records in order: the first is not coming.
        try await daemon.waitForLine(containing: "loud-one")
        #expect(!daemon.output.contains("quiet-one"))

        if getuid() == 0 {
            try await client.connection.call(
                destination: "org.nearbyd", path: "/org/nearbyd", interface: "org.freedesktop.DBus.Properties",
                member: "Set") { writer throws(DBusError) in
                try writer.append("org.nearbyd.Nearby1")
                try writer.append("DebugLogging")
                try writer.append(Variant(.bool(true)))
            }
            _ = try await client.publish(quiet, [1], "quiet-two")
            try await daemon.waitForLine(containing: "quiet-two")
        }
        client.connection.close()
        await daemon.stop()
        await bus.stop()
        directory.remove()
    }
}
