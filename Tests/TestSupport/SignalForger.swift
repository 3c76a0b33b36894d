import Foundation

/// Another user on the machine (nobody) sending forged signals with
/// python/forge_signals.py (dbus-next): each addressed to one connection, which
/// the bus delivers whatever that connection's match rules say. The bus must
/// let nobody connect (``PrivateBus/Policy/sharedWithOtherUsers(including:)``),
/// and the tests must run as root.
public enum SignalForger {
    /// One signal as the forger sends it: its body one JSON value per type of
    /// `signature` ("ay" a text or a list of bytes, "v" a [signature, value]
    /// pair, "a{..}" an object, a struct a list); the string "{forger}" stands
    /// for the forger's unique name.
    public struct Signal: Sendable {
        public let path: String
        public let interface: String
        public let member: String
        public let signature: String
        public let body: [any Sendable]

        public init(path: String, interface: String, member: String, signature: String, body: [any Sendable]) {
            self.path = path
            self.interface = interface
            self.member = member
            self.signature = signature
            self.body = body
        }

        /// `NameOwnerChanged` as the bus daemon would send it: `name` passed from `old` to `new` ("" for none).
        public static func nameOwnerChanged(_ name: String, from old: String, to new: String) -> Signal {
            Signal(path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                   signature: "sss", body: [name, old, new])
        }

        /// `PropertiesChanged` of `interface` at `path`: `changed` as [name: [signature, value]].
        public static func propertiesChanged(at path: String, _ interface: String, _ changed: [String: [any Sendable]]) -> Signal {
            Signal(path: path, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                   signature: "sa{sv}as", body: [interface, changed, [String]()])
        }
    }

    /// Sends `signals`, as nobody, to every other connection on the bus at
    /// `address`; returns once the bus has put them in their recipients'
    /// queues, ahead of anything sent from now on.
    public static func forge(_ signals: [Signal], on address: String) async throws {
        let directory = try TemporaryDirectory("forger")
        defer { directory.remove() }
        // A copy nobody can read: the source tree may sit under a directory only its owner can enter.
        let script = directory.file("forge_signals.py")
        try FileManager.default.copyItem(
            atPath: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("python/forge_signals.py").path,
            toPath: script)
        let list = signals.map { signal -> [String: Any] in
            ["path": signal.path, "interface": signal.interface, "member": signal.member,
             "signature": signal.signature, "body": signal.body]
        }
        let json = String(decoding: try JSONSerialization.data(withJSONObject: list), as: UTF8.self)
        let result = try await runProgram("/usr/sbin/runuser", ["-u", "nobody", "--", "/usr/bin/python3", script, "--bus", address, json])
        guard result.status == 0, result.output.contains("forged ") else {
            throw ChildProcessError(message: "forge_signals.py failed: \(result.output)")
        }
    }
}
