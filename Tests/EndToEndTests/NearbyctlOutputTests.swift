import Foundation
import NearbyMessages
import Testing
import TestSupport

/// What `nearbyctl subscribe` prints for a message found and lost: over BLE
/// the signal strength in dBm, over audio the level in dBFS, and for a lost
/// message no reading at all (the last one was from before it went).
@Suite(.serialized) struct NearbyctlOutputTests {
    private static func subscribe(_ device: Cluster.Device, _ key: String, _ extra: [String] = []) async throws -> ChildProcess {
        let client = try await ChildProcess(name: "nearbyctl", executable: Programs.path("nearbyctl"), arguments: [
            "subscribe", "--bus", device.busAddress, "--api-key", key, "--type", "chat",
        ] + extra)
        try await client.waitForLine(containing: "subscribed")
        return client
    }

    @Test func foundOverBLEGivesDBmAndLostGivesNoReading() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("readings")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let client = try await Self.subscribe(b, key)
            let publication = try await MessageManager(a, apiKey: key).publish("hello")
            let found = try await client.waitForLine(containing: "found")
            #expect(found.wholeMatch(of: #/found readings/chat ble rssi=-\d+dBm distance=\d+\.\dm 'hello'/#) != nil, "\(found)")
            try await cluster.move("A", to: (1_000, 0))
            let lost = try await client.waitForLine(containing: "lost")
            #expect(lost == "lost  readings/chat ble 'hello'")
            withExtendedLifetime(publication) {}
            await client.stop()
        }
    }

    @Test func foundOverAudioGivesDBFS() async throws {
        let options = Cluster.Options(extraConfiguration: "[audio]\nbackend = \"sim\"\ninterval = 1\n")
        try await withCluster(options) { cluster in
            let key = try await cluster.createProject("levels")
            let a = try await cluster.addDevice("A", at: (0, 0), ble: #"backend = "off""#)
            let b = try await cluster.addDevice("B", at: (1, 0), ble: #"backend = "off""#)
            let client = try await Self.subscribe(b, key, ["--medium", "audio", "--json"])
            let publication = try await MessageManager(a, apiKey: key)
                .publish("chirp", strategy: Strategy(mediums: ["audio"], mode: .broadcast))
            let line = try await client.waitForLine(containing: #""event":"found""#, within: 30)
            let json = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            #expect(json["medium"] as? String == "audio")
            withExtendedLifetime(publication) {}
            await client.stop()

            let human = try await Self.subscribe(b, key, ["--medium", "audio"])
            let found = try await human.waitForLine(containing: "found", within: 30)
            #expect(found.wholeMatch(of: #/found levels/chat audio level=-?\d+dBFS distance=\d+\.\dm 'chirp'/#) != nil, "\(found)")
            await human.stop()
        }
    }
}
