import DBus
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import NearbyMessages
import TestSupport

/// Publish→MessageFound and Unpublish→MessageLost between two daemons over
/// nearby-air, with the server on loopback.
enum DiscoveryBenchmark {
    static func run(trials: Int) async throws {
        let cluster = try await Cluster(options: Cluster.Options(daemonLogLevel: "info"))
        defer { Task { await cluster.stop() } }
        let key = try await cluster.createProject("bench")
        let a = try await cluster.addDevice("A", at: (0, 0))
        let b = try await cluster.addDevice("B", at: (1, 0))
        let publisher = try await MessageManager(apiKey: key, bus: .address(a.busAddress))
        let subscriber = try await MessageManager(apiKey: key, bus: .address(b.busAddress))
        let events = Inbox<(String, String, ContinuousClock.Instant)>()
        let subscription = try await subscriber.subscription(
            messageFound: { message, _ in events.put(("found", String(decoding: message.content, as: UTF8.self), .now)) },
            messageLost: { message, _ in events.put(("lost", String(decoding: message.content, as: UTF8.self), .now)) })

        var found: [Double] = []
        var lost: [Double] = []
        let warmUp = 5
        for trial in 0..<(trials + warmUp) {
            let text = "message \(trial)"
            let published = ContinuousClock.now
            let publication = try await publisher.publication(of: Message(content: Data(text.utf8), type: "bench"))
            let foundAt = try await events.first(within: 10, "found \(text)") { $0.0 == "found" && $0.1 == text }.2
            let unpublished = ContinuousClock.now
            try await publication.unpublish()
            let lostAt = try await events.first(within: 10, "lost \(text)") { $0.0 == "lost" && $0.1 == text }.2
            if trial >= warmUp {
                found.append(milliseconds(foundAt - published))
                lost.append(milliseconds(lostAt - unpublished))
            }
        }

        // The floor: one D-Bus round trip to the daemon and one HTTP request to the server.
        var floor: [Double] = []
        let status = try await publisher.publication(of: Message(content: Data("floor".utf8), type: "bench"))
        let health = URL(string: cluster.serverURL + "/v1/health")!
        for _ in 0..<trials {
            let start = ContinuousClock.now
            _ = try await status.status
            _ = try await URLSession.shared.data(from: health)
            floor.append(milliseconds(.now - start))
        }
        withExtendedLifetime(subscription) {}

        let foundSample = Sample(found), lostSample = Sample(lost), floorSample = Sample(floor)
        print("""
            discovery over nearby-air, \(trials) trials (after \(warmUp) warm-up), lost timeout 1 s:
            | measure | p50 ms | p99 ms | target | p50 / floor |
            | --- | --- | --- | --- | --- |
            | Publish → MessageFound | \(format(foundSample.p50)) | \(format(foundSample.p99)) | p50 ≤ 100, p99 ≤ 500 | \(format(foundSample.p50 / floorSample.p50, 2)) |
            | Unpublish → MessageLost | \(format(lostSample.p50)) | \(format(lostSample.p99)) | ≤ 1000 | \(format(lostSample.p50 / floorSample.p50, 2)) |
            | floor: D-Bus Get + HTTP GET | \(format(floorSample.p50, 2)) | \(format(floorSample.p99, 2)) | | 1.00 |
            """)
        await cluster.stop()
    }
}
