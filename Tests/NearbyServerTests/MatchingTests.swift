import Foundation
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

/// Found and lost over real streams, with time moved by hand.
@Suite struct MatchingTests {
    @Test func foundWhenSubscriberHearsPublisher() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1", content: "hello")
            try await harness.subscribe(subscriber, "s1")
            let stream = try await harness.openStream(subscriber)

            #expect(try await harness.report(subscriber, seen: [(token.token, .ble)], rssi: -42) == [.ok])
            let expected = Match(subscription: "s1", source: "\(publisher.id)/p1", namespace: "alpha", type: "greeting",
                                 content: Data("hello".utf8), medium: .ble, rssi: -42, distance: 1.5)
            #expect(try await stream.next() == .found(expected))

            // Hearing it again pushes nothing new; the snapshot shows the latest signal.
            #expect(try await harness.report(subscriber, seen: [(token.token, .ble)], rssi: -50) == [.ok])
            var refreshed = expected
            refreshed.rssi = -50
            #expect(try await stream.snapshot() == [refreshed])

            try await harness.report(subscriber, gone: [(token.token, .ble)])
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            #expect(try await stream.snapshot() == [])
            try await stream.close()
        }
    }

    @Test func largestMessageArrivesWhole() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            let content = String(repeating: "z", count: MessageRules.maximumContentBytes)
            try await harness.publish(publisher, "big", content: content)
            try await harness.subscribe(subscriber, "s1")
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            guard case .found(let match) = try await stream.next() else { Issue.record("expected found"); return }
            #expect(match.content == Data(content.utf8))
            #expect(try await stream.snapshot().map(\.content) == [Data(content.utf8)])
            try await stream.close()
        }
    }

    @Test func reverseDirection() async throws {
        // The publisher scans and hears the broadcasting subscriber (the set-top box case).
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(subscriber)
            try await harness.publish(publisher, "p1", mode: .scan)
            try await harness.subscribe(subscriber, "s1", mode: .broadcast)
            let stream = try await harness.openStream(subscriber)
            #expect(try await harness.report(publisher, seen: [(token.token, .ble)]) == [.ok])
            guard case .found(let match) = try await stream.next() else { Issue.record("expected found"); return }
            #expect(match.source == "\(publisher.id)/p1")
            try await harness.report(publisher, gone: [(token.token, .ble)])
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            try await stream.close()
        }
    }

    @Test(arguments: [
        // (publication mode, subscription mode, subscriber hears publisher?)
        (DiscoveryMode.scan, DiscoveryMode.scan, true),
        (.broadcast, .broadcast, true),
        (.broadcast, .scan, false),  // the publisher heard the subscriber, but the publication does not scan
        (.scan, .both, true),  // the subscriber heard the publisher, but the publication does not broadcast
    ])
    func modeMismatchYieldsNothing(publicationMode: DiscoveryMode, subscriptionMode: DiscoveryMode, subscriberHears: Bool) async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            try await harness.publish(publisher, "p1", mode: publicationMode)
            try await harness.subscribe(subscriber, "s1", mode: subscriptionMode)
            let stream = try await harness.openStream(subscriber)
            if subscriberHears {
                try await harness.report(subscriber, seen: [(try await harness.issueToken(publisher).token, .ble)])
            } else {
                try await harness.report(publisher, seen: [(try await harness.issueToken(subscriber).token, .ble)])
            }
            try await stream.expectNothingPushed()
            try await stream.close()
        }
    }

    @Test func mediumMismatchYieldsNothing() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1", mediums: [.audio])
            try await harness.subscribe(subscriber, "s1", mediums: [.ble, .audio])
            let stream = try await harness.openStream(subscriber)
            // Heard on BLE, but the publication is audio only.
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            try await stream.expectNothingPushed()
            // Heard on audio: found, on audio.
            try await harness.report(subscriber, seen: [(token.token, .audio)])
            guard case .found(let match) = try await stream.next() else { Issue.record("expected found"); return }
            #expect(match.medium == .audio)
            try await stream.close()
        }
    }

    @Test func strongestEdgeIsReported() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1", mediums: [.ble, .audio])
            try await harness.subscribe(subscriber, "s1", mediums: [.ble, .audio])
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .audio)], rssi: -80)
            guard case .found(let first) = try await stream.next() else { Issue.record("expected found"); return }
            #expect(first.medium == .audio)
            try await harness.report(subscriber, seen: [(token.token, .ble)], rssi: -40)
            let snapshot = try await stream.snapshot()
            #expect(snapshot.map(\.medium) == [.ble])
            #expect(snapshot.map(\.rssi) == [-40])
            // Losing one medium keeps the match on the other.
            try await harness.report(subscriber, gone: [(token.token, .ble)])
            #expect(try await stream.snapshot().map(\.medium) == [.audio])
            try await stream.close()
        }
    }

    @Test func namespaceAndTypeFilters() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "own-a", type: "a")
            try await harness.publish(publisher, "own-b", type: "b")
            try await harness.publish(publisher, "shared-a", type: "a", namespace: "shared")
            // The project's own namespace, spelled out, is the same as empty.
            try await harness.subscribe(subscriber, "any-own", namespace: "alpha")
            try await harness.subscribe(subscriber, "own-b-only", type: "b")
            try await harness.subscribe(subscriber, "shared-any", namespace: "shared")
            try await harness.subscribe(subscriber, "shared-b", type: "b", namespace: "shared")
            try await harness.subscribe(subscriber, "elsewhere", namespace: "nobody")
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            var found: [String] = []
            for _ in 0..<4 {
                guard case .found(let match) = try await stream.next() else { Issue.record("expected found"); return }
                found.append("\(match.subscription)<-\(match.source.split(separator: "/").last!)")
            }
            #expect(found.sorted() == ["any-own<-own-a", "any-own<-own-b", "own-b-only<-own-b", "shared-any<-shared-a"])
            try await stream.expectNothingPushed()
            try await stream.close()
        }
    }

    @Test func projectsAreIsolated() async throws {
        try await withServer(live: true) { harness in
            let publisher = try await harness.devices(1, project: "alpha")[0]
            let subscriber = try await harness.devices(1, project: "beta")[0]
            let token = try await harness.issueToken(publisher)
            // Even in a namespace both name explicitly.
            try await harness.publish(publisher, "p1", namespace: "shared")
            try await harness.subscribe(subscriber, "s1", namespace: "shared")
            let stream = try await harness.openStream(subscriber)
            // Another project's token is unknown to it: it learns nothing of it, and no edge is made.
            #expect(try await harness.report(subscriber, seen: [(token.token, .ble)]) == [.unknown])
            try await stream.expectNothingPushed()
            try await stream.close()
        }
    }

    @Test func lostOnEdgeTimeout() async throws {
        try await withServer(live: true, configure: { $0.edgeTimeoutSeconds = 30 }) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1", ttlSeconds: 3600)
            try await harness.subscribe(subscriber, "s1")
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            guard case .found = try await stream.next() else { Issue.record("expected found"); return }

            // Refreshed before the timeout: still near.
            harness.clock.advance(bySeconds: 20)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            harness.clock.advance(bySeconds: 20)
            await harness.service.sweep()
            try await stream.expectNothingPushed()

            // Not refreshed for 30 s: lost.
            harness.clock.advance(bySeconds: 10)
            await harness.service.sweep()
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            try await stream.close()
        }
    }

    @Test func lostOnUnpublishButNotOnUnsubscribe() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1")
            try await harness.publish(publisher, "p2")
            try await harness.subscribe(subscriber, "s1")
            try await harness.subscribe(subscriber, "s2")
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            for _ in 0..<4 { _ = try await stream.next() }

            #expect(try await harness.request(.delete, APIPath.publication(publisher.id, "p1"), headers: publisher.auth).status == .noContent)
            var lost = [try await stream.next(), try await stream.next()]
            lost.sort { "\($0)" < "\($1)" }
            #expect(lost == [.lost(subscription: "s1", source: "\(publisher.id)/p1"), .lost(subscription: "s2", source: "\(publisher.id)/p1")])

            // The subscriber removing its own subscription is told nothing.
            #expect(try await harness.request(.delete, APIPath.subscription(subscriber.id, "s2"), headers: subscriber.auth).status == .noContent)
            #expect(try await stream.snapshot().map(\.subscription) == ["s1"])
            try await stream.close()
        }
    }

    @Test func replacingAPublication() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1", type: "a", content: "one")
            try await harness.subscribe(subscriber, "s1", type: "a")
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            guard case .found = try await stream.next() else { Issue.record("expected found"); return }

            // Same message, longer life: nothing to tell.
            try await harness.publish(publisher, "p1", type: "a", content: "one", ttlSeconds: 600)
            try await stream.expectNothingPushed()
            // Other content: the old message is lost, the new one found.
            try await harness.publish(publisher, "p1", type: "a", content: "two")
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            guard case .found(let match) = try await stream.next() else { Issue.record("expected found"); return }
            #expect(match.content == Data("two".utf8))
            // A type the subscription does not take: lost.
            try await harness.publish(publisher, "p1", type: "b", content: "two")
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            try await stream.close()
        }
    }

    @Test func lostOnExpiry() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1", ttlSeconds: 20)
            try await harness.subscribe(subscriber, "s1")
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            guard case .found = try await stream.next() else { Issue.record("expected found"); return }
            harness.clock.advance(bySeconds: 10)
            // Keep the edge alive; only the publication runs out.
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            await harness.service.sweep()
            try await stream.expectNothingPushed()
            harness.clock.advance(bySeconds: 10)
            await harness.service.sweep()
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            try await stream.close()
        }
    }

    @Test func subscriptionExpiryEndsItsMatches() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1", ttlSeconds: 3600)
            try await harness.subscribe(subscriber, "s1", ttlSeconds: 5)
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            guard case .found = try await stream.next() else { Issue.record("expected found"); return }
            harness.clock.advance(bySeconds: 5)
            await harness.service.sweep()
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            try await stream.close()
        }
    }

    @Test func lostWhenPublisherIsUnregistered() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1")
            try await harness.subscribe(subscriber, "s1")
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            guard case .found = try await stream.next() else { Issue.record("expected found"); return }
            #expect(try await harness.request(.delete, APIPath.device(publisher.id), headers: publisher.auth).status == .noContent)
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            try await stream.close()
        }
    }

    @Test func unregisteringClosesTheDevicesStream() async throws {
        try await withServer(live: true) { harness in
            let device = try await harness.devices(1)[0]
            let stream = try await harness.openStream(device)
            #expect(try await harness.request(.delete, APIPath.device(device.id), headers: device.auth).status == .noContent)
            let close = try await stream.closedByServer()
            #expect(close?.reason == "device unregistered")
        }
    }

    @Test func sameMessageFromTwoPublishers() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(3)
            let (first, second, subscriber) = (devices[0], devices[1], devices[2])
            let firstToken = try await harness.issueToken(first)
            let secondToken = try await harness.issueToken(second)
            try await harness.publish(first, "p", content: "same")
            try await harness.publish(second, "p", content: "same")
            try await harness.subscribe(subscriber, "s1")
            let stream = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(firstToken.token, .ble)])
            try await harness.report(subscriber, seen: [(secondToken.token, .ble)])
            // One found per source: the daemon counts sources of one message.
            guard case .found(let a) = try await stream.next(), case .found(let b) = try await stream.next() else {
                Issue.record("expected two found")
                return
            }
            #expect(a.source == "\(first.id)/p")
            #expect(b.source == "\(second.id)/p")
            #expect(a.content == b.content)
            try await harness.report(subscriber, gone: [(firstToken.token, .ble)])
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(first.id)/p"))
            #expect(try await stream.snapshot().map(\.source) == ["\(second.id)/p"])
            try await stream.close()
        }
    }

    @Test func snapshotAfterReconnect() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(3)
            let (publisher, subscriber, other) = (devices[0], devices[1], devices[2])
            let subscriberToken = try await harness.issueToken(subscriber)
            let publisherToken = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1", mode: .both)
            try await harness.subscribe(subscriber, "s1", mode: .both)
            try await harness.publish(other, "q1", mode: .scan)

            var stream = try await harness.openStream(subscriber)
            // The publisher hears the subscriber: this edge does not depend on the subscriber's stream.
            try await harness.report(publisher, seen: [(subscriberToken.token, .ble)])
            guard case .found = try await stream.next() else { Issue.record("expected found"); return }
            try await stream.close()

            // While away: another publisher hears it, and nothing is queued.
            try await harness.report(other, seen: [(subscriberToken.token, .ble)])
            stream = try await harness.openStream(subscriber)
            let matches = try await stream.snapshot()
            #expect(matches.map(\.source).sorted() == ["\(other.id)/q1", "\(publisher.id)/p1"].sorted())
            #expect(matches.allSatisfy { $0.subscription == "s1" && $0.content == Data("hello".utf8) })
            // The subscriber's own sightings went with its old stream; reporting again brings nothing new.
            try await harness.report(subscriber, seen: [(publisherToken.token, .ble)])
            try await stream.expectNothingPushed()
            try await stream.close()
        }
    }

    @Test func closingAStreamDropsThatObserversSightings() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let subscriberToken = try await harness.issueToken(subscriber)
            // The publisher is the observer here: its stream going drops its edges.
            try await harness.publish(publisher, "p1", mode: .scan)
            try await harness.subscribe(subscriber, "s1", mode: .broadcast)
            let subscriberStream = try await harness.openStream(subscriber)
            let publisherStream = try await harness.openStream(publisher)
            try await harness.report(publisher, seen: [(subscriberToken.token, .ble)])
            guard case .found = try await subscriberStream.next() else { Issue.record("expected found"); return }
            try await publisherStream.close()
            #expect(try await subscriberStream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            try await subscriberStream.close()
        }
    }

    @Test func aNewStreamReplacesTheOld() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (publisher, subscriber) = (devices[0], devices[1])
            let token = try await harness.issueToken(publisher)
            try await harness.publish(publisher, "p1")
            try await harness.subscribe(subscriber, "s1")
            let old = try await harness.openStream(subscriber)
            try await harness.report(subscriber, seen: [(token.token, .ble)])
            guard case .found = try await old.next() else { Issue.record("expected found"); return }
            let new = try await harness.openStream(subscriber)
            let close = try await old.closedByServer()
            #expect(close?.reason?.contains("replaced") == true)
            // The replaced stream's closing does not drop the device's sightings.
            #expect(try await new.snapshot().map(\.source) == ["\(publisher.id)/p1"])
            try await new.close()
        }
    }

    @Test func streamUpgradeNeedsTheDevicesCredential() async throws {
        try await withServer(live: true) { harness in
            let devices = try await harness.devices(2)
            let (a, b) = (devices[0], devices[1])
            let wrongDevice = TestDevice(registration: DeviceRegistration(device: a.id, secret: b.registration.secret,
                                                                          project: "alpha", namespace: "alpha"))
            let noSecret = TestDevice(registration: DeviceRegistration(device: a.id, secret: "nope", project: "alpha",
                                                                       namespace: "alpha"))
            for device in [wrongDevice, noSecret] {
                await #expect(throws: (any Error).self) { _ = try await harness.openStream(device) }
            }
        }
    }

    @Test func invalidStreamRequestsCloseTheStream() async throws {
        try await withServer(live: true) { harness in
            let device = try await harness.devices(1)[0]
            let stream = try await harness.openStream(device)
            stream.send(#"{"request":"everything"}"#)
            let close = try await stream.closedByServer()
            #expect(close?.closeCode == .unacceptableData)
        }
    }
}
