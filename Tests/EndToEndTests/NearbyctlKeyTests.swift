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

    /// With nobody to ask whether the app may use Nearby (no agent, the
    /// `ask` policy), a refused key is still what the command says first:
    /// the permission would not help while the key is wrong.
    @Test(arguments: ["publish", "subscribe"])
    func aRefusedKeyReadsFirstWhenNobodyCanBeAskedForPermission(_ command: String) async throws {
        try await withCluster(Cluster.Options(permissionPolicy: "ask")) { cluster in
            _ = try await cluster.createProject("keys")
            let device = try await cluster.addDevice("A")
            let client = try await ChildProcess(name: "nearbyctl", executable: Programs.path("nearbyctl"), arguments: [
                command, "--bus", device.busAddress, "--api-key", "not-a-key-of-any-project", "--type", "chat",
            ] + (command == "publish" ? ["hello"] : []))
            #expect(try await client.waitForExit(within: 30) == 1, "\(client.output)")
            let failure = client.output.split(separator: "\n").first { $0.hasPrefix("nearbyctl: ") } ?? ""
            #expect(failure.hasPrefix("nearbyctl: nearby-server refuses the API key"), "\(client.output)")
            #expect(failure.contains("check --api-key or NEARBY_API_KEY"), "\(failure)")
            #expect(failure.contains("nobody to ask"), "the permission is said too: \(failure)")
        }
    }
}
