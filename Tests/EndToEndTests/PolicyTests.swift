import Foundation
import Testing
import TestSupport

/// dbus-policy/org.nearbyd.conf on a bus that denies by default, as the system
/// bus does: who may own org.nearbyd, and what others may call. Needs root, to
/// run programs as another user (nobody).
@Suite(.serialized, .enabled(if: getuid() == 0, "runs programs as nobody, which needs root"))
struct PolicyTests {
    static var policyFile: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../dbus-policy/org.nearbyd.conf")
            .standardizedFileURL.path
    }

    /// A program run as the unprivileged user nobody.
    func asNobody(_ arguments: [String]) async throws -> ProgramResult {
        try await runProgram("/usr/sbin/runuser", ["-u", "nobody", "--"] + arguments)
    }

    @Test func onlyNearbydsUserOrRootMayOwnTheNameAndAnyoneMayUseTheAPI() async throws {
        let bus = try await PrivateBus(policy: .system(including: [Self.policyFile]))
        let directory = try TemporaryDirectory()
        try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: directory.path)
        let arguments = ["--bus", bus.address, "--server", "http://127.0.0.1:9", "--air-socket", directory.file("none.sock")]

        // A copy nobody can reach: the build directory may sit under one only its owner can enter.
        let reachable = directory.file("nearbyd")
        try FileManager.default.copyItem(atPath: Programs.path("nearbyd"), toPath: reachable)
        let impostor = try await asNobody([reachable] + arguments + ["--state-dir", directory.file("nobody")])
        #expect(impostor.status == 1)
        #expect(impostor.output.contains("org.nearbyd"), "\(impostor.output)")

        let daemon = try await ChildProcess(name: "nearbyd", executable: Programs.path("nearbyd"),
                                            arguments: arguments + ["--state-dir", directory.file("root")])
        try await daemon.waitForLine(containing: "nearbyd: ready")

        let address = "--address=\(bus.address)"
        let created = try await asNobody(["/usr/bin/busctl", address, "call", "org.nearbyd", "/org/nearbyd",
                                          "org.nearbyd.Nearby1", "CreateManager", "sa{sv}", "key", "0"])
        #expect(created.status == 0, "\(created.output)")
        let property = try await asNobody(["/usr/bin/busctl", address, "get-property", "org.nearbyd", "/org/nearbyd",
                                           "org.nearbyd.Nearby1", "Version"])
        #expect(property.output.contains("0.1.0"), "\(property.output)")
        // Interfaces the policy does not open are refused by the bus itself.
        let closed = try await asNobody(["/usr/bin/busctl", address, "call", "org.nearbyd", "/org/nearbyd",
                                         "org.nearbyd.Upstream1", "SendMessage"])
        #expect(closed.status != 0)
        #expect(closed.output.contains("Access denied") || closed.output.contains("AccessDenied"), "\(closed.output)")

        // Daemon-wide settings are root's; a client's own objects stay settable.
        let debug = try await asNobody(["/usr/bin/busctl", address, "set-property", "org.nearbyd", "/org/nearbyd",
                                        "org.nearbyd.Nearby1", "DebugLogging", "b", "true"])
        #expect(debug.status != 0)
        #expect(debug.output.contains("Access denied") || debug.output.contains("AccessDenied"), "\(debug.output)")
        let rootDebug = try await runProgram("/usr/bin/busctl", [address, "set-property", "org.nearbyd", "/org/nearbyd",
                                                                 "org.nearbyd.Nearby1", "DebugLogging", "b", "true"])
        #expect(rootDebug.status == 0, "\(rootDebug.output)")

        await daemon.stop()
        await bus.stop()
        directory.remove()
    }
}
