import Foundation
import NearbyMessages
import Testing
import TestSupport

/// Files in `[publications] directory`: published by nearbyd itself from
/// start-up, with no client; bad files are reported and skipped.
@Suite(.serialized) struct StaticPublicationTests {
    @Test func goodFilesArePublishedAndBadOnesReportedWhileTheRestLoad() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("kiosk")
            let directory = cluster.directory.file("publications-A")
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let files = [
                "10-welcome.toml": "api-key = \"\(key)\"\ntype = \"kiosk\"\ncontent = \"Welcome!\"\n",
                "20-bytes.toml": "api-key = \"\(key)\"\ntype = \"kiosk\"\ncontent-base64 = \"AAEC\"\n[strategy]\nmediums = [\"ble\"]\n",
                "30-typo.toml": "api-key = \"\(key)\"\ntype = \"kiosk\"\ncontent = \"x\"\nttl = 5\n",
                "40-broken.toml": "api-key = \"\(key)\n",
                "README": "not a publication",
            ]
            for (name, text) in files { _ = FileManager.default.createFile(atPath: "\(directory)/\(name)", contents: Data(text.utf8)) }

            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            let subscriber = try await MessageManager(b, apiKey: key).record(type: "kiosk")
            try await subscriber.wait(.found, "Welcome!")
            _ = try await subscriber.events.first(within: 15, "the binary publication") { $0.message?.content == Data([0, 1, 2]) }

            try await a.daemon.waitForLine(containing: "static publication skipped")
            let status = try await runProgram(Programs.path("nearbyctl"), ["status", "--bus", a.busAddress, "--json"])
            #expect(status.status == 0, "\(status.output)")
            let object = try JSONSerialization.jsonObject(with: Data(status.output.utf8)) as? [String: Any]
            let entries = object?["staticPublications"] as? [[String: String]] ?? []
            #expect(entries.map { ($0["file"] ?? "").split(separator: "/").last.map(String.init) ?? "" }
                == ["10-welcome.toml", "20-bytes.toml", "30-typo.toml", "40-broken.toml"], "\(entries)")
            #expect(entries.prefix(2).allSatisfy { $0["status"] == "active" && $0["detail"]?.hasPrefix("/org/nearbyd/") == true },
                    "\(entries)")
            #expect(entries[2]["status"] == "error" && entries[2]["detail"]?.contains("unknown key 'ttl'") == true, "\(entries)")
            #expect(entries[3]["status"] == "error", "\(entries)")

            // Nobody but the daemon may end them.
            let path = entries[0]["detail"] ?? ""
            let unpublish = try await runProgram("/usr/bin/busctl", ["--address=\(a.busAddress)", "call", "org.nearbyd", path,
                                                                     "org.nearbyd.Publication1", "Unpublish"])
            #expect(unpublish.status != 0, "\(unpublish.output)")
        }
    }

    /// SIGHUP (systemctl reload): files read again; an unchanged publication
    /// stays, a removed file's ends, a new file's begins.
    @Test func aReloadPublishesWhatChangedAndKeepsTheRest() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("kiosk")
            let directory = cluster.directory.file("publications-A")
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            func write(_ name: String, _ text: String) {
                _ = FileManager.default.createFile(atPath: "\(directory)/\(name)",
                                                   contents: Data("api-key = \"\(key)\"\ntype = \"kiosk\"\ncontent = \"\(text)\"\n".utf8))
            }
            write("a.toml", "stays")
            write("b.toml", "goes")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            let subscriber = try await MessageManager(b, apiKey: key).record(type: "kiosk")
            try await subscriber.wait(.found, "stays")
            try await subscriber.wait(.found, "goes")

            try FileManager.default.removeItem(atPath: "\(directory)/b.toml")
            write("c.toml", "comes")
            a.daemon.signal(SIGHUP)
            try await subscriber.wait(.found, "comes")
            try await subscriber.wait(.lost, "goes")
            #expect(!subscriber.kinds.contains("lost /kiosk 'stays'"), "\(subscriber.kinds)")
            let status = try await DaemonStatus.read(from: .address(a.busAddress))
            #expect(status.staticPublications.map { URL(fileURLWithPath: $0.file).lastPathComponent } == ["a.toml", "c.toml"])
            #expect(a.daemon.isRunning)
        }
    }
}
