import Foundation
import Testing
import TestSupport

/// nearby-server against devices that send much and read nothing: what the
/// server answers and queues for one is bounded, whatever it sends.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct ServerFloodTests {
    /// A device floods its direct channel with messages whose 15 KB `to` the
    /// server refuses (each refusal used to echo it whole, queued without
    /// bound for a device that never reads: +106 MB per 88 MiB sent).
    @Test func aDeviceFloodingItsChannelWithoutReadingCostsTheServerLittle() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("flood")
            let before = try BadInputTests.residentMiB(cluster.serverPID)
            let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("python/channel_flood.py").path
            let flood = try await runProgram("/usr/bin/python3", [script, cluster.serverURL, key, "15000", "88"])
            let outcome = try #require(flood.output.split(separator: "\n").last.map(String.init))
            #expect(outcome.contains(#""sent""#), "\(flood.output)")
            let after = try BadInputTests.residentMiB(cluster.serverPID)
            #expect(after - before < 32, "resident \(before) MiB before, \(after) MiB after: \(outcome)")
        }
    }
}
