import Foundation
import Testing
import TestSupport

/// `nearbyctl publish --ttl` and `subscribe --ttl` end by themselves when
/// nearbyd expires their object, as their help says, and say so.
@Suite(.timeLimit(.minutes(2))) struct NearbyctlExpiryTests {
    @Test(arguments: ["publish", "subscribe"])
    func aCommandWithATTLSaysExpiredAndExits(_ command: String) async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("ttl-\(command)")
            let device = try await cluster.addDevice("A")
            let arguments = ["--bus", device.busAddress, "--api-key", key, "--type", "chat", "--ttl", "2"]
                + (command == "publish" ? ["expiring"] : [])
            let client = try await ChildProcess(name: "nearbyctl", executable: Programs.path("nearbyctl"),
                                                arguments: [command] + arguments)
            try await client.waitForLine(containing: command == "publish" ? "published" : "subscribed")
            let status = try await client.waitForExit(within: 20)
            #expect(status == 0, "\(client.output)")
            #expect(client.lines.values.contains("expired"), "\(client.output)")
        }
    }
}
