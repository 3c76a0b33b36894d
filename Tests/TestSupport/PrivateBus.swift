import Foundation

/// A `dbus-daemon` of the test's own, on a socket in a fresh directory.
public final class PrivateBus: Sendable {
    /// Who may do what on the bus.
    public enum Policy: Sendable {
        /// Anyone may own any name and call anything.
        case open
        /// The system bus's default (deny owning names and method calls unless a
        /// policy punches a hole), plus the policy files given.
        case system(including: [String])
        /// The system bus's default and the files given for every user but root,
        /// which may do anything: for attacks by another user (nobody), who gets
        /// exactly what a system bus gives it, while the programs under test
        /// (root) need no policy of their own.
        case sharedWithOtherUsers(including: [String])
    }

    public let address: String
    public let directory: URL
    private let daemon: ChildProcess
    /// The bus daemon's process id: benchmarks read its CPU time.
    public var pid: Int32 { daemon.pid }

    public init(policy: Policy = .open) async throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("nearbyd-bus-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let config = directory.appendingPathComponent("bus.conf")
        let rules: String
        switch policy {
        case .open:
            rules = """
                <policy context="default">
                  <allow send_destination="*" eavesdrop="true"/>
                  <allow eavesdrop="true"/>
                  <allow own="*"/>
                </policy>
                """
        case .system(let files):
            rules = Self.systemRules(including: files)
        case .sharedWithOtherUsers(let files):
            rules = Self.systemRules(including: files) + """

                <policy user="root">
                  <allow own="*"/>
                  <allow send_destination="*"/>
                </policy>
                """
        }
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>session</type>
          <listen>unix:path=\(directory.path)/bus</listen>
          <auth>EXTERNAL</auth>
          \(rules)
        </busconfig>
        """.write(to: config, atomically: true, encoding: .utf8)
        daemon = try await ChildProcess(name: "dbus-daemon", executable: "/usr/bin/dbus-daemon",
                                  arguments: ["--config-file=\(config.path)", "--nofork", "--print-address=1"])
        address = try await daemon.waitForLine(containing: "unix:").trimmingCharacters(in: .whitespaces)
    }

    /// As /usr/share/dbus-1/system.conf has it, then `files`.
    private static func systemRules(including files: [String]) -> String {
        """
                <policy context="default">
                  <allow user="*"/>
                  <deny own="*"/>
                  <deny send_type="method_call"/>
                  <allow send_type="signal"/>
                  <allow send_requested_reply="true" send_type="method_return"/>
                  <allow send_requested_reply="true" send_type="error"/>
                  <allow receive_type="method_call"/>
                  <allow receive_type="method_return"/>
                  <allow receive_type="error"/>
                  <allow receive_type="signal"/>
                  <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
                  <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
                  <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
                </policy>
                """ + files.map { "<include>\($0)</include>" }.joined(separator: "\n")
    }

    /// Makes the bus daemon read its configuration and policy files again (SIGHUP).
    public func reloadConfiguration() {
        daemon.signal(SIGHUP)
    }

    /// Stops the bus daemon and removes its directory.
    public func stop() async {
        await daemon.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}
