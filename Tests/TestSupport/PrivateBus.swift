import Foundation

/// A `dbus-daemon` of the test's own, on a socket in a fresh directory, with a
/// permissive policy (the project's system-bus policy is tested separately).
public final class PrivateBus: Sendable {
    public let address: String
    public let directory: URL
    private let daemon: ChildProcess

    public init() async throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("nearbyd-bus-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let config = directory.appendingPathComponent("bus.conf")
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=\(directory.path)/bus</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow send_destination="*" eavesdrop="true"/>
            <allow eavesdrop="true"/>
            <allow own="*"/>
          </policy>
        </busconfig>
        """.write(to: config, atomically: true, encoding: .utf8)
        daemon = try await ChildProcess(name: "dbus-daemon", executable: "/usr/bin/dbus-daemon",
                                  arguments: ["--config-file=\(config.path)", "--nofork", "--print-address=1"])
        address = try await daemon.waitForLine(containing: "unix:").trimmingCharacters(in: .whitespaces)
    }

    /// Stops the bus daemon and removes its directory.
    public func stop() async {
        await daemon.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}
