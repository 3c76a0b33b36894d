import Foundation
import Testing
import TestSupport

/// A program the system runs as an app (a Flatpak, or a desktop's systemd app
/// unit: its control group says which) is that app to nearbyd, whatever
/// AppId it claims. Needs root and a control group hierarchy it may write
/// (systemd's, or a unified one), to place the program as Flatpak would.
@Suite(.serialized, .timeLimit(.minutes(2)), .enabled(if: AppControlGroup.base != nil, "no writable control group hierarchy"))
struct SandboxedAppTests {
    @Test func aFlatpakAppIsItsOwnAppWhateverItClaims() async throws {
        try await withCluster { cluster in
            let device = try await cluster.addDevice("A")
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("python/claim_app.py").path
            let app = try await ChildProcess(name: "flatpak app", executable: "/usr/bin/python3",
                                             arguments: [script, device.busAddress, "key", "org.example.Bank"], takesInput: true)
            try await app.waitForLine(containing: #""event": "waiting""#)
            let group = try AppControlGroup("app-flatpak-org.example.Maps-4242.scope")
            defer { group.remove() }
            try group.add(app.pid)
            app.send("go")

            let claimed = try await app.waitForLine(containing: #""event": "claimed""#)
            #expect(claimed.contains("org.nearbyd.Error.AccessDenied") && claimed.contains("org.example.Maps"), "\(claimed)")
            try await app.waitForLine(containing: #""event": "published", "outcome": "ok""#)
            // The default policy's grant was recorded for the app it really is.
            let decision = try await runProgram("/usr/bin/busctl", [
                "--address=\(device.busAddress)", "--json=short", "call", "org.nearbyd", "/org/nearbyd", "org.nearbyd.Nearby1",
                "GetPermission", "sa{sv}", "org.example.Maps", "0",
            ])
            #expect(decision.output.contains(#""data":"granted""#), "\(decision.output)")
            await app.stop()
        }
    }
}

/// A control group of the test's own in systemd's hierarchy (or the unified
/// one), named as an app's unit is.
struct AppControlGroup {
    /// Where the test may make control groups: systemd's named hierarchy on a
    /// hybrid system, or the unified one; nil when neither is writable.
    static let base: String? = {
        guard getuid() == 0, let own = try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8) else { return nil }
        let candidates = own.contains(":name=systemd:") ? ["/sys/fs/cgroup/systemd"] : ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        return candidates.first { access("\($0)/cgroup.procs", W_OK) == 0 }
    }()

    let path: String

    init(_ unit: String) throws {
        let base = try #require(Self.base)
        path = "\(base)/nearbyd-test-\(UUID().uuidString.prefix(8))/\(unit)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func add(_ pid: Int32) throws {
        try "\(pid)\n".write(toFile: path + "/cgroup.procs", atomically: false, encoding: .utf8)
    }

    /// Removes the groups (once their processes have gone back or ended).
    func remove() {
        rmdir(path)
        rmdir((path as NSString).deletingLastPathComponent)
    }
}
