import Foundation
import Logging
import SystemdService
import Testing
import TestSupport

/// The journal handler against a stand-in journald: sd-journal sends each record
/// as a datagram of `FIELD=value` lines to /run/systemd/journal/socket. Needs
/// root to create that path, and a machine where no journald owns it.
private let socketPath = "/run/systemd/journal/socket"

@Suite(.serialized, .enabled(if: getuid() == 0 && !FileManager.default.fileExists(atPath: socketPath),
                             "needs root and no running journald"))
struct JournalLogHandlerTests {
    @Test func recordsCarryStructuredFields() async throws {
        try FileManager.default.createDirectory(atPath: "/run/systemd/journal", withIntermediateDirectories: true)
        let journal = try DatagramSocket(path: socketPath)
        defer {
            journal.close()
            try? FileManager.default.removeItem(atPath: socketPath)
        }
        var logger = Logger(label: "test-component") { JournalLogHandler(label: $0, identifier: "nearbyd") }
        logger.logLevel = .debug
        logger[metadataKey: "client"] = ":1.42"
        logger.warning("publication refused", metadata: ["manager": "/org/nearbyd/client1/manager1"])

        let record = try await journal.messages.first(within: 10, "a journal record") { _ in true }
        let fields = Dictionary(record.split(separator: "\n").compactMap { line -> (String, String)? in
            guard let equals = line.firstIndex(of: "=") else { return nil }
            return (String(line[..<equals]), String(line[line.index(after: equals)...]))
        }, uniquingKeysWith: { $1 })
        #expect(fields["MESSAGE"] == "publication refused")
        #expect(fields["PRIORITY"] == "4")
        #expect(fields["SYSLOG_IDENTIFIER"] == "nearbyd")
        #expect(fields["NEARBY_CLIENT"] == ":1.42")
        #expect(fields["NEARBY_MANAGER"] == "/org/nearbyd/client1/manager1")
        #expect(fields["NEARBY_COMPONENT"] == "test-component")
        #expect(fields["CODE_FILE"]?.hasSuffix("JournalLogHandlerTests.swift") == true)
    }

    /// nearbyd under systemd (stderr is the journal, as JOURNAL_STREAM says): a
    /// manager created with DebugLogging has its events recorded with the
    /// client, manager, object and medium as fields, which `journalctl
    /// NEARBY_CLIENT=…` selects; another manager's are not recorded.
    @Test func aDebugLoggingManagersEventsCarryItsFields() async throws {
        try FileManager.default.createDirectory(atPath: "/run/systemd/journal", withIntermediateDirectories: true)
        let journal = try DatagramSocket(path: socketPath)
        defer {
            journal.close()
            try? FileManager.default.removeItem(atPath: socketPath)
        }
        let bus = try await PrivateBus()
        let directory = try TemporaryDirectory()
        let configuration = try directory.write("nearbyd.conf", """
            [daemon]
            logind-bus = "none"
            [permissions]
            default-policy = "grant"
            """)
        let daemon = try await ChildProcess(name: "nearbyd", executable: "/bin/sh", arguments: [
            "-c", #"JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec "$0" "$@""#, Programs.path("nearbyd"),
            "--bus", bus.address, "--config", configuration, "--state-dir", directory.file("state"),
            "--server", "http://127.0.0.1:9", "--air-socket", directory.file("none.sock"),
        ])
        try await daemon.waitForLine(containing: "nearbyd: ready")
        let client = try await ChildProcess(name: "client", executable: "/usr/bin/python3", arguments: ["-c", Self.client, bus.address])
        let line = try await client.waitForLine(containing: #""loud""#)
        let made = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String] ?? [:]

        let record = try await journal.messages.first(within: 20, "the loud manager's publication") {
            Self.fields($0)["NEARBY_OBJECT"]?.hasPrefix(made["loud"] ?? "-") == true
        }
        let fields = Self.fields(record)
        #expect(fields["MESSAGE"] == "published")
        #expect(fields["NEARBY_CLIENT"] == made["client"])
        #expect(fields["NEARBY_MANAGER"] == made["loud"])
        #expect(fields["NEARBY_MEDIUM"] == "ble")
        #expect(fields["NEARBY_APP"] == "org.example.Loud")
        #expect(fields["PRIORITY"] == "6")
        // One thread writes the records in order: the quiet one's would have come first.
        #expect(!journal.messages.values.map(Self.fields).contains { $0["NEARBY_MANAGER"] == made["quiet"] && $0["MESSAGE"] == "published" })

        await client.stop()
        await daemon.stop()
        await bus.stop()
        directory.remove()
    }

    /// A dbus-next client with a quiet manager and a DebugLogging one, each publishing.
    static let client = """
        import asyncio, json, sys
        from dbus_next import Variant
        from dbus_next.aio import MessageBus

        async def main(address):
            bus = await MessageBus(bus_address=address).connect()
            root = bus.get_proxy_object("org.nearbyd", "/org/nearbyd", await bus.introspect("org.nearbyd", "/org/nearbyd"))
            nearby = root.get_interface("org.nearbyd.Nearby1")
            made = {"client": bus.unique_name}
            for name, loud in (("quiet", False), ("loud", True)):
                path = await nearby.call_create_manager("key", {
                    "AppId": Variant("s", "org.example." + name.title()), "DebugLogging": Variant("b", loud)})
                manager = bus.get_proxy_object("org.nearbyd", path, await bus.introspect("org.nearbyd", path))
                await manager.get_interface("org.nearbyd.Manager1").call_publish(b"x", "t", {})
                made[name] = path
            print(json.dumps(made), flush=True)
            await asyncio.Event().wait()

        asyncio.run(main(sys.argv[1]))
        """

    static func fields(_ record: String) -> [String: String] {
        Dictionary(record.split(separator: "\n").compactMap { line -> (String, String)? in
            guard let equals = line.firstIndex(of: "=") else { return nil }
            return (String(line[..<equals]), String(line[line.index(after: equals)...]))
        }, uniquingKeysWith: { $1 })
    }
}
