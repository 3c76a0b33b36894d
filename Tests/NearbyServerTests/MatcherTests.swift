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

    /// A publication whose found event takes about `contentBytes` + 80 bytes of a stream's budget.
    static func publication(_ device: String, _ id: String, contentBytes: Int) -> StoredPublication {
        var publication = publication(device, id)
        publication.content = Data(repeating: UInt8(ascii: "a"), count: contentBytes)
        return publication
    }

    /// "sub" hears "pub" and subscribes to what it publishes; no stream yet.
    static func pair(streamBufferBytes: Int = 16 << 20) async -> Matcher {
        let matcher = Matcher(clock: ManualWallClock(nowMs: startMs), edgeTimeoutMs: 30_000, streamBufferBytes: streamBufferBytes)
        await matcher.addDevice("pub", project: "alpha")
        await matcher.addDevice("sub", project: "alpha")
        await matcher.putSubscription(subscription)
        await matcher.applySightings(observer: "sub", seen: [seen(token(1))], gone: [], atMs: startMs)
        return matcher
    }

    static func isFound(_ output: StreamOutput?) -> Bool {
        if case .event(.found)? = output { return true }
        return false
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

        await matcher.applySightings(observer: "sub", seen: [Self.seen(Self.token(1))], gone: [], atMs: startMs)
        guard case .event(.found) = await outputs.next() else { Issue.record("expected found"); return }
        // The next token is heard and the old one gone in one report: still near.
        await matcher.applySightings(observer: "sub", seen: [Self.seen(Self.token(2))],
                                     gone: [GoneEdge(observed: "pub", token: Self.token(1), medium: .ble)], atMs: startMs)
        #expect(await matcher.snapshot(of: "sub").count == 1)
        await matcher.applySightings(observer: "sub", seen: [],
                                     gone: [GoneEdge(observed: "pub", token: Self.token(2), medium: .ble)], atMs: startMs)
        guard case .event(.lost) = await outputs.next() else { Issue.record("expected lost"); return }
    }

    @Test func aStreamThatFallsBehindIsEnded() async throws {
        let matcher = Matcher(clock: ManualWallClock(nowMs: startMs), edgeTimeoutMs: 30_000, streamBufferLimit: 2)
        await matcher.addDevice("pub", project: "alpha")
        await matcher.addDevice("sub", project: "alpha")
        for index in 0..<5 { await matcher.putPublication(Self.publication("pub", "p\(index)")) }
        await matcher.putSubscription(Self.subscription)
        let stream = try #require(await matcher.openStream(device: "sub"))
        await matcher.applySightings(observer: "sub", seen: [Self.seen(Self.token(1))], gone: [], atMs: startMs)
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
        await matcher.applySightings(observer: "sub", seen: [Self.seen(Self.token(1))], gone: [], atMs: startMs)
        await matcher.addDevice("pub", project: "alpha")
        await matcher.putPublication(Self.publication("pub", "p1"))
        #expect(await matcher.snapshot(of: "sub").isEmpty)
    }

    /// A device that does not read its stream must not make the server hold
    /// ever more content for it: the byte budget ends the stream long before
    /// the event count would.
    @Test func aStreamWhoseEventsTakeTooManyBytesIsEnded() async throws {
        let matcher = await Self.pair(streamBufferBytes: 3000)
        let stream = try #require(await matcher.openStream(device: "sub"))
        for index in 0..<5 { await matcher.putPublication(Self.publication("pub", "p\(index)", contentBytes: 1000)) }
        // The device's state is intact for the snapshot after it reconnects.
        #expect(await matcher.snapshot(of: "sub").count == 5)
        // Closed here as well, so that reading ends even if the budget did not end the stream.
        _ = await matcher.closeStream(device: "sub", id: stream.id)
        var received: [StreamOutput] = []
        for await output in stream.outputs { received.append(output) }
        // Two events fit in 3000 bytes, the third does not.
        #expect(received.count == 2)
    }

    @Test func eventsTakenFreeTheirBytes() async throws {
        let matcher = await Self.pair(streamBufferBytes: 3000)
        let stream = try #require(await matcher.openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()
        // Three rounds of two events: each round alone fits, all six together would not.
        for round in 0..<3 {
            for index in 0..<2 { await matcher.putPublication(Self.publication("pub", "p\(round)-\(index)", contentBytes: 1000)) }
            #expect(Self.isFound(await outputs.next()))
            #expect(Self.isFound(await outputs.next()))
        }
        await matcher.putPublication(Self.publication("pub", "last", contentBytes: 1000))
        #expect(Self.isFound(await outputs.next()))
    }

    @Test func anEventOverTheBudgetStillGoesOutAlone() async throws {
        let matcher = await Self.pair(streamBufferBytes: 1000)
        let stream = try #require(await matcher.openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()
        await matcher.putPublication(Self.publication("pub", "big", contentBytes: 5000))
        #expect(Self.isFound(await outputs.next()))
        // A snapshot over the budget too: the device reads it rather than reconnecting forever.
        await matcher.sendSnapshot(device: "sub", streamID: stream.id)
        guard case .event(.snapshot(let matches, more: false))? = await outputs.next() else { Issue.record("expected a snapshot"); return }
        #expect(matches.count == 1)
    }

    /// Deleted objects, ended edges and removed devices take their entries out
    /// of the deadline heap instead of leaving them until their deadline,
    /// which for a publication may be a day away.
    @Test func whatIsGoneLeavesNoDeadlines() async throws {
        let matcher = Matcher(clock: ManualWallClock(nowMs: startMs), edgeTimeoutMs: 30_000)
        await matcher.addDevice("pub", project: "alpha")
        await matcher.addDevice("sub", project: "alpha")
        let day = startMs + 86_400_000
        for index in 0..<1000 {
            var publication = Self.publication("pub", "p\(index)")
            publication.expiresAtMs = day
            await matcher.putPublication(publication)
            var subscription = Self.subscription
            subscription.id = "s\(index)"
            subscription.expiresAtMs = day
            await matcher.putSubscription(subscription)
        }
        #expect(await matcher.deadlineEntries == 2000)
        for index in 0..<1000 {
            await matcher.removePublication(device: "pub", id: "p\(index)")
            await matcher.removeSubscription(device: "sub", id: "s\(index)")
        }
        #expect(await matcher.deadlineEntries == 0)

        await matcher.putPublication(Self.publication("pub", "p"))
        var subscription = Self.subscription
        subscription.expiresAtMs = day
        await matcher.putSubscription(subscription)
        await matcher.applySightings(observer: "sub", seen: [Self.seen(Self.token(1))], gone: [], atMs: startMs)
        #expect(await matcher.deadlineEntries == 3)
        await matcher.applySightings(observer: "sub", seen: [],
                                     gone: [GoneEdge(observed: "pub", token: Self.token(1), medium: .ble)], atMs: startMs)
        // Replaced by a subscription that never expires.
        subscription.expiresAtMs = 0
        await matcher.putSubscription(subscription)
        await matcher.removeDevice("pub")
        #expect(await matcher.deadlineEntries == 0)
    }

    @Test func expiryStillFiresAfterStaleDeadlinesAreDropped() async throws {
        let clock = ManualWallClock(nowMs: startMs)
        let matcher = Matcher(clock: clock, edgeTimeoutMs: 120_000)
        await matcher.addDevice("pub", project: "alpha")
        await matcher.addDevice("sub", project: "alpha")
        await matcher.putSubscription(Self.subscription)
        for index in 0..<10 { await matcher.putPublication(Self.publication("pub", "p\(index)")) }
        await matcher.applySightings(observer: "sub", seen: [Self.seen(Self.token(1))], gone: [], atMs: startMs)
        for index in 0..<9 { await matcher.removePublication(device: "pub", id: "p\(index)") }
        // The edge and p9 are left.
        #expect(await matcher.deadlineEntries == 2)
        let stream = try #require(await matcher.openStream(device: "sub"))
        var outputs = stream.outputs.makeAsyncIterator()
        clock.advance(bySeconds: 60)
        await matcher.sweep()
        guard case .event(.lost(_, let source))? = await outputs.next() else { Issue.record("expected lost"); return }
        #expect(source == "pub/p9")
    }
}
