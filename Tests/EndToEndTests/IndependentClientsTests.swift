import Foundation
import NearbyMessages
import Testing
import TestSupport

/// nearbyd driven by D-Bus clients written by others: busctl (sd-bus),
/// gdbus (GLib) and Python's dbus-next.
@Suite(.serialized) struct IndependentClientsTests {
    @Test func busctlIntrospectsAndCalls() async throws {
        try await withCluster { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let address = "--address=\(device.busAddress)"
            let introspection = try await runProgram("/usr/bin/busctl", [address, "introspect", "org.nearbyd", "/org/nearbyd"])
            #expect(introspection.status == 0)
            #expect(introspection.output.contains(".CreateManager"))
            #expect(introspection.output.contains("sa{sv}"))
            #expect(introspection.output.contains(".AvailableMediums"))

            let version = try await runProgram("/usr/bin/busctl", [address, "get-property", "org.nearbyd", "/org/nearbyd",
                                                                   "org.nearbyd.Nearby1", "Version"])
            #expect(version.output.trimmingCharacters(in: .whitespacesAndNewlines) == #"s "0.1.0""#)

            let created = try await runProgram("/usr/bin/busctl", [address, "call", "org.nearbyd", "/org/nearbyd",
                                                                   "org.nearbyd.Nearby1", "CreateManager", "sa{sv}", "key", "0"])
            #expect(created.status == 0)
            #expect(created.output.hasPrefix(#"o "/org/nearbyd/client"#))
            // busctl has left the bus, and its manager with it.
            let path = created.output.split(separator: "\"")[1]
            let gone = try await runProgram("/usr/bin/busctl", [address, "introspect", "org.nearbyd", String(path)])
            #expect(!gone.output.contains("org.nearbyd.Manager1"))

            let refused = try await runProgram("/usr/bin/busctl", [address, "call", "org.nearbyd", "/org/nearbyd",
                                                                   "org.nearbyd.Nearby1", "CreateManager", "sa{sv}", "", "0"])
            #expect(refused.status != 0)
            #expect(refused.output.contains("api_key must be 1..256 printable ASCII characters"))
        }
    }

    @Test func gdbusCallsAndIntrospects() async throws {
        try await withCluster { cluster in
            let device = try await cluster.addDevice("A", at: (0, 0))
            let created = try await runProgram("/usr/bin/gdbus", [
                "call", "--address", device.busAddress, "--dest", "org.nearbyd", "--object-path", "/org/nearbyd",
                "--method", "org.nearbyd.Nearby1.CreateManager", "key", "{'AppId': <'org.example.App'>}",
            ])
            #expect(created.status == 0, "\(created.output)")
            #expect(created.output.contains("(objectpath '/org/nearbyd/client"))
            let wrongType = try await runProgram("/usr/bin/gdbus", [
                "call", "--address", device.busAddress, "--dest", "org.nearbyd", "--object-path", "/org/nearbyd",
                "--method", "org.nearbyd.Nearby1.CreateManager", "key", "{'AppId': <uint32 7>}",
            ])
            #expect(wrongType.status != 0)
            #expect(wrongType.output.contains("org.nearbyd.Error.InvalidArguments"))
            let introspection = try await runProgram("/usr/bin/gdbus", [
                "introspect", "--address", device.busAddress, "--dest", "org.nearbyd", "--object-path", "/org/nearbyd",
            ])
            #expect(introspection.output.contains("CreateManager(in  s api_key"))
        }
    }

    @Test func aPythonDbusNextAppFindsAndLosesAMessage() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("python")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("python/subscribe.py").path
            let app = try await ChildProcess(name: "subscribe.py", executable: "/usr/bin/python3",
                                             arguments: [script, b.busAddress, key, "chat"])
            try await app.waitForLine(containing: #""event": "subscribed""#)
            let publication = try await MessageManager(a, apiKey: key).publish("from swift")
            let found = try await app.waitForLine(containing: #""event": "found""#)
            #expect(found.contains(#""content": "from swift""#))
            #expect(found.contains(#""medium": "ble""#))
            try await app.waitForLine(containing: #""status": "active""#)
            try await publication.unpublish()
            try await app.waitForLine(containing: #""event": "lost""#)
            #expect(try await app.waitForExit() == 0, "\(app.output)")
        }
    }
}
