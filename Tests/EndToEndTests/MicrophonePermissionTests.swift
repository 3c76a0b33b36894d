import Foundation
import NearbyMessages
import Synchronization
import Testing
import TestSupport

/// MicrophonePermissionError from the real ALSA backend: nearbyd runs as the
/// unprivileged user nobody, and its capture PCM (ALSA's `file` plugin)
/// reads a file only root may read, so libasound refuses to open it with
/// EACCES, as it would a sound device outside the user's groups. Needs root,
/// to run nearbyd as another user.
@Suite(.serialized, .enabled(if: getuid() == 0, "runs nearbyd as nobody, which needs root"))
struct MicrophonePermissionTests {
    @Test func theErrorFollowsWhetherTheCaptureDeviceMayBeOpened() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("mic")
            let directory = try TemporaryDirectory("nearbyd-mic")
            defer { directory.remove() }
            try FileManager.default.setAttributes([.posixPermissions: 0o777], ofItemAtPath: directory.path)
            let microphone = try directory.write("microphone.raw", String(repeating: "\0", count: 4096))
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: microphone)
            let alsa = try directory.write("asound.conf", """
                pcm.microphone { type file slave.pcm null file "/dev/null" infile "\(microphone)" format raw }
                pcm.speaker { type file slave.pcm null file "/dev/null" format raw }
                """)
            let configuration = try directory.write("nearbyd.conf", """
                [daemon]
                logind-bus = "none"
                [permissions]
                default-policy = "grant"
                [server]
                url = "\(cluster.serverURL)"
                [ble]
                backend = "off"
                [audio]
                backend = "alsa"
                capture-pcm = "microphone"
                playback-pcm = "speaker"
                alsa-config = "\(alsa)"
                """)
            for file in [alsa, configuration] {
                try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: file)
            }
            // A copy nobody can reach: the build directory may sit under one only its owner can enter.
            let nearbyd = directory.file("nearbyd")
            try FileManager.default.copyItem(atPath: Programs.path("nearbyd"), toPath: nearbyd)
            // A bus that lets any user connect (a session bus admits only its owner), own and call anything.
            let policy = try directory.write("open.conf", """
                <busconfig><policy context="default"><allow own="*"/><allow send_destination="*"/></policy></busconfig>
                """)
            let bus = try await PrivateBus(policy: .system(including: [policy]))
            let daemon = try await ChildProcess(
                name: "nearbyd-nobody", executable: "/usr/bin/setpriv",
                arguments: ["--reuid=65534", "--regid=65534", "--clear-groups", nearbyd, "--bus", bus.address,
                            "--config", configuration, "--state-dir", directory.file("state"), "--log-level", "debug"])
            do {
                try await daemon.waitForLine(containing: "nearbyd: ready")
                try await check(bus: bus, apiKey: key, microphone: microphone)
            } catch {
                print(daemon.output)
                throw error
            }
            await daemon.stop()
            await bus.stop()
        }
    }

    private func check(bus: PrivateBus, apiKey: String, microphone: String) async throws {
        // Each change of the error state, numbered in order.
        let changes = Inbox<(number: Int, state: MessageManager.ErrorState)>()
        let count = Mutex(0)
        let manager = try await MessageManager(apiKey: apiKey, bus: .address(bus.address)) { state in
            changes.put((count.withLock { $0 += 1; return $0 }, state))
        }
        // Only a manager whose objects use audio sees the error.
        #expect(try await manager.errorState.microphonePermission == false)
        let publication = try await manager.publish("psst", strategy: Strategy(mediums: ["audio"], mode: .broadcast))
        let refused = try await changes.first(within: 20, "MicrophonePermissionError true") { $0.state.microphonePermission }
        #expect(try await availableMediums(bus) == "as 0")

        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: microphone)
        _ = try await changes.first(within: 60, "MicrophonePermissionError false again") {
            $0.number > refused.number && !$0.state.microphonePermission
        }
        try await publication.unpublish()
        #expect(try await availableMediums(bus) == #"as 1 "audio""#)
    }

    private func availableMediums(_ bus: PrivateBus) async throws -> String {
        try await runProgram("/usr/bin/busctl", ["--address=\(bus.address)", "get-property", "org.nearbyd", "/org/nearbyd",
                                                  "org.nearbyd.Nearby1", "AvailableMediums"])
            .output.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
