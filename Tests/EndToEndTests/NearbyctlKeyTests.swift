import Foundation
import Testing
import TestSupport

/// A key nearby-server does not know fails `nearbyctl publish` and
/// `subscribe` with the cause and exit status 1, instead of waiting.
@Suite(.timeLimit(.minutes(2))) struct NearbyctlKeyTests {
    @Test(arguments: ["publish", "subscribe"])
    func aRefusedAPIKeyFailsTheCommand(_ command: String) async throws {
        try await withCluster { cluster in
            _ = try await cluster.createProject("keys")
            let device = try await cluster.addDevice("A")
            let client = try await ChildProcess(name: "nearbyctl", executable: Programs.path("nearbyctl"), arguments: [
                command, "--bus", device.busAddress, "--api-key", "not-a-key-of-any-project", "--type", "chat",
            ] + (command == "publish" ? ["hello"] : []))
            let status = try await client.waitForExit(within: 30)
            #expect(status == 1, "\(client.output)")
            #expect(client.output.contains("nearbyctl: nearby-server refuses the API key"), "\(client.output)")
            #expect(client.output.contains("check --api-key or NEARBY_API_KEY"), "\(client.output)")

            let again = try await ChildProcess(name: "nearbyctl", executable: Programs.path("nearbyctl"), arguments: [
                command, "--bus", device.busAddress, "--api-key", "not-a-key-of-any-project", "--type", "chat",
            ] + (command == "publish" ? ["hello"] : []))
            // nearbyd already knows the key is refused: the command fails at once.
            #expect(try await again.waitForExit(within: 10) == 1, "\(again.output)")
        }
    }
}
