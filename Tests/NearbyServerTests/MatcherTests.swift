import Foundation
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

/// The matcher on its own, without HTTP: the cases a device cannot easily stage.
@Suite struct MatcherTests {
    static func publication(_ device: String, _ id: String) -> StoredPublication {
        StoredPublication(device: device, id: id, namespace: "alpha", type: "t", content: Data(id.utf8), mediums: [.ble],
                          mode: .broadcast, expiresAtMs: startMs + 60_000)
    }

    static let subscription = StoredSubscription(device: "sub", id: "s1", namespace: "alpha", type: "", mediums: [.ble],
                                                 mode: .scan, expiresAtMs: 0)

    static func token(_ byte: UInt8) -> Token { Token(bytes: Array(repeating: byte, count: 8))! }

    static func seen(_ token: Token) -> SeenEdge {
        SeenEdge(observed: "pub", token: token, medium: .ble, rssi: -50, distance: 1)
    }

    @Test func tokenRotationKeepsTheEdge() async throws {
        let matcher = Matcher(clock: ManualWallClock(nowMs: startMs), edgeTimeoutMs: 30_000)
        await matcher.addDevice("pub", project: "alpha")
        await matcher.addDevice("sub", project: "alpha")
        await matcher.putPublication(Self.publication("pub", "p1"))
        await matcher.putSubscription(Self.subscription)
        let stream = try #require(await matcher.openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()

        await matcher.applySightings(observer: "sub", seen: [Self.seen(Self.token(1))], gone: [])
        guard case .event(.found) = await outputs.next() else { Issue.record("expected found"); return }
        // The next token is heard and the old one gone in one report: still near.
        await matcher.applySightings(observer: "sub", seen: [Self.seen(Self.token(2))],
                                     gone: [GoneEdge(observed: "pub", token: Self.token(1), medium: .ble)])
        #expect(await matcher.snapshot(of: "sub").count == 1)
        await matcher.applySightings(observer: "sub", seen: [],
                                     gone: [GoneEdge(observed: "pub", token: Self.token(2), medium: .ble)])
        guard case .event(.lost) = await outputs.next() else { Issue.record("expected lost"); return }
    }

    @Test func aStreamThatFallsBehindIsEnded() async throws {
        let matcher = Matcher(clock: ManualWallClock(nowMs: startMs), edgeTimeoutMs: 30_000, streamBufferLimit: 2)
        await matcher.addDevice("pub", project: "alpha")
        await matcher.addDevice("sub", project: "alpha")
        for index in 0..<5 { await matcher.putPublication(Self.publication("pub", "p\(index)")) }
        await matcher.putSubscription(Self.subscription)
        let stream = try #require(await matcher.openStream(device: "sub"))
        await matcher.applySightings(observer: "sub", seen: [Self.seen(Self.token(1))], gone: [])
        var received: [StreamOutput] = []
        for await output in stream.outputs { received.append(output) }
        // The first events, then the end without a close: the connection closes it as overflowed.
        #expect(received.count == 2)
        // The device's state is intact for the snapshot after it reconnects.
        #expect(await matcher.snapshot(of: "sub").count == 5)
    }

    @Test func edgesOfUnknownDevicesAreIgnored() async throws {
        let matcher = Matcher(clock: ManualWallClock(nowMs: startMs), edgeTimeoutMs: 30_000)
        await matcher.addDevice("sub", project: "alpha")
        await matcher.putSubscription(Self.subscription)
        // "pub" was unregistered between resolving its token and applying the report.
        await matcher.applySightings(observer: "sub", seen: [Self.seen(Self.token(1))], gone: [])
        await matcher.addDevice("pub", project: "alpha")
        await matcher.putPublication(Self.publication("pub", "p1"))
        #expect(await matcher.snapshot(of: "sub").isEmpty)
    }
}
