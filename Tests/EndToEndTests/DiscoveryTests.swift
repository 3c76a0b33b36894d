import DBus
import Foundation
import NearbyMessages
import Testing
import TestSupport

/// Two daemons on their own buses, nearby-server and nearby-air, driven through
/// the NearbyMessages library: what a user of the API relies on.
@Suite(.serialized) struct DiscoveryTests {
    @Test func subscriberFindsAPublisherNearbyAndLosesItWhenItMovesAway() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("demo")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (3, 4))
            let publisher = try await MessageManager(a, apiKey: key)
            let subscriber = try await MessageManager(b, apiKey: key)
            let subscription = try await subscriber.record()
            let publication = try await publisher.publish("hello")

            let found = try await subscription.wait(.found, "hello")
            #expect(found.message == Message(content: Data("hello".utf8), namespace: "demo", type: "chat"))
            #expect(found.info?.medium == "ble")
            // 5 m from a -59 dBm (at 1 m) transmitter in free space.
            #expect(found.info?.rssi == -73)
            #expect(abs((found.info?.distanceMeters ?? 0) - 5) < 0.3)

            try await cluster.move("A", to: (100, 0))
            try await subscription.wait(.lost, "hello")
            // Back in range: found again.
            try await cluster.move("A", to: (1, 0))
            _ = try await subscription.events.first(within: 15, "found again") { $0.kind == .found && $0.text == "hello" && $0.info?.rssi != -73 }
            #expect(subscription.kinds == ["found demo/chat 'hello'", "lost demo/chat 'hello'", "found demo/chat 'hello'"])
            withExtendedLifetime(publication) {}
        }
    }

    @Test func aPublisherInScanModeFindsABroadcastingSubscriber() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("settop")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (2, 0))
            // The set-top box: it only listens; the phone only broadcasts.
            let publication = try await MessageManager(a, apiKey: key)
                .publish("tv guide", strategy: Strategy(mode: .scan))
            let subscription = try await MessageManager(b, apiKey: key).record(strategy: Strategy(mode: .broadcast))
            try await subscription.wait(.found, "tv guide")
            try await publication.unpublish()
            try await subscription.wait(.lost, "tv guide")
        }
    }

    @Test func messagesAreLostWithinASecondOfUnpublishReleaseDisconnectAndExpiry() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("ends")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let subscription = try await MessageManager(b, apiKey: key).record()
            let publisher = try await MessageManager(a, apiKey: key)

            let unpublished = try await publisher.publish("unpublished")
            try await subscription.wait(.found, "unpublished")
            try await unpublished.unpublish()
            try await subscription.wait(.lost, "unpublished", within: 5)

            let released = try await MessageManager(a, apiKey: key)
            let kept = try await released.publish("released")
            try await subscription.wait(.found, "released")
            try await released.release()
            try await subscription.wait(.lost, "released", within: 5)
            withExtendedLifetime(kept) {}

            let expired = Inbox<Bool>()
            let short = try await publisher.publish("expires", strategy: Strategy(ttlSeconds: 2)) { expired.put(true) }
            try await subscription.wait(.found, "expires")
            _ = try await expired.first(within: 10, "the publication's Expired signal") { $0 }
            try await subscription.wait(.lost, "expires", within: 5)
            withExtendedLifetime(short) {}

            // A client that dies takes its publications with it.
            let client = try await ChildProcess(name: "nearbyctl", executable: Programs.path("nearbyctl"), arguments: [
                "publish", "--bus", a.busAddress, "--api-key", key, "--type", "chat", "from a process",
            ])
            try await subscription.wait(.found, "from a process")
            client.signal(SIGKILL)
            try await subscription.wait(.lost, "from a process", within: 5)
        }
    }

    @Test func subscriptionsExpireToo() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("ttl")
            let b = try await cluster.addDevice("B", at: (0, 0))
            let manager = try await MessageManager(b, apiKey: key)
            // One due later first, then one due sooner: the sooner is not held up by it.
            let lasting = try await manager.record(strategy: Strategy(ttlSeconds: 3600))
            let subscription = try await manager.record(strategy: Strategy(ttlSeconds: 1))
            _ = try await subscription.events.first(within: 10, "Expired") { $0.kind == .expired }
            await #expect(throws: NearbyMessagesError.self) { _ = try await subscription.subscription.status }
            #expect(try await lasting.subscription.status != "")
            #expect(!lasting.events.values.contains { $0.kind == .expired })
        }
    }

    /// Many publications with a TTL, most ended early: only the ones left
    /// expire, each once, and the ended ones never do (the expiry queue drops
    /// ended entries in passes, which this many ended objects set off).
    @Test func onlyLivePublicationsExpire() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("many-ttls")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let publisher = try await MessageManager(a, apiKey: key)
            let expired = Inbox<Int>()
            var publications: [Publication] = []
            // Each ended one goes before the next is made: a slow machine making
            // 120 takes longer than their TTL, and an ended one must end first.
            for index in 0..<120 {
                let publication = try await publisher.publish("message \(index)", strategy: Strategy(ttlSeconds: 2)) {
                    expired.put(index)
                }
                if index < 110 { try await publication.unpublish() }
                publications.append(publication)
            }
            for index in 110..<120 {
                _ = try await expired.first(within: 15, "message \(index) to expire") { $0 == index }
            }
            #expect(expired.values.sorted() == Array(110..<120))
            withExtendedLifetime(publications) {}
        }
    }

    @Test func namespaceAndTypeFiltersSelectMessages() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("filters")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 1))
            let subscriber = try await MessageManager(b, apiKey: key)
            let chatOnly = try await subscriber.record(type: "chat")
            let everything = try await subscriber.record()
            let otherNamespace = try await subscriber.record(namespace: "games")
            let publisher = try await MessageManager(a, apiKey: key)
            let chat = try await publisher.publish("chat message", type: "chat")
            let weather = try await publisher.publish("weather message", type: "weather")
            let game = try await publisher.publish("game message", type: "score", namespace: "games")

            try await everything.wait(.found, "chat message")
            try await everything.wait(.found, "weather message")
            try await chatOnly.wait(.found, "chat message")
            let found = try await otherNamespace.wait(.found, "game message")
            #expect(found.message?.namespace == "games")
            // One stream carries every event of device B in order: once the chat
            // message is lost, anything wrongly found earlier would have arrived.
            try await chat.unpublish()
            try await chatOnly.wait(.lost, "chat message")
            try await otherNamespace.subscription.unsubscribe()
            #expect(chatOnly.kinds == ["found filters/chat 'chat message'", "lost filters/chat 'chat message'"])
            #expect(!everything.kinds.contains { $0.contains("game message") })
            #expect(otherNamespace.kinds == ["found games/score 'game message'"])
            withExtendedLifetime((weather, game)) {}
        }
    }

    @Test func messagesNeverCrossProjects() async throws {
        try await withCluster { cluster in
            let first = try await cluster.createProject("first")
            let second = try await cluster.createProject("second")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let secretive = try await MessageManager(a, apiKey: first).publish("first's secret")
            let outsider = try await MessageManager(b, apiKey: second).record()
            let insider = try await MessageManager(b, apiKey: first).record()
            try await insider.wait(.found, "first's secret")
            // The second project's own message reaches its subscriber on the same
            // stream after anything published earlier would have.
            let marker = try await MessageManager(a, apiKey: second).publish("second's marker")
            try await outsider.wait(.found, "second's marker")
            #expect(outsider.kinds == ["found second/chat 'second's marker'"])
            withExtendedLifetime((secretive, marker)) {}
        }
    }

    @Test func theSameMessageFromTwoDevicesIsFoundOnceAndLostWithTheLast() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("twice")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let c = try await cluster.addDevice("C", at: (0, 2))
            let b = try await cluster.addDevice("B", at: (1, 1))
            let subscription = try await MessageManager(b, apiKey: key).record()
            let fromA = try await MessageManager(a, apiKey: key).publish("shared")
            try await subscription.wait(.found, "shared")
            // B hears C once C's first message is found. C's later publications
            // reach the server in order, and B's stream carries their matches in
            // order: once "marker" is found, C's copy of "shared" is known too.
            let publisherC = try await MessageManager(c, apiKey: key)
            let ready = try await publisherC.publish("c is near")
            try await subscription.wait(.found, "c is near")
            let fromC = try await publisherC.publish("shared")
            let marker = try await publisherC.publish("marker")
            try await subscription.wait(.found, "marker")

            try await fromA.unpublish()
            let afterwards = try await publisherC.publish("after A left")
            try await subscription.wait(.found, "after A left")
            #expect(subscription.kinds == ["found twice/chat 'shared'", "found twice/chat 'c is near'",
                                           "found twice/chat 'marker'", "found twice/chat 'after A left'"])
            try await fromC.unpublish()
            try await subscription.wait(.lost, "shared", within: 5)
            withExtendedLifetime((ready, marker, afterwards)) {}
        }
    }

    /// A regression test: a burst of publications ended (with their manager)
    /// before the link could tell the server once crashed the daemon. What the
    /// burst saves in server calls is measured by the D-Bus benchmark, not here.
    @Test func aBurstOfPublicationsEndedAtOnceBreaksNothing() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("burst")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let subscription = try await MessageManager(b, apiKey: key).record()
            let publisher = try await MessageManager(a, apiKey: key)
            let first = try await publisher.publish("the link is up")
            try await subscription.wait(.found, "the link is up")
            // Publications and their manager's Release sent without waiting arrive together.
            try await Self.publishAndRelease(on: a.busAddress, key: key, count: 32)
            let lasting = try await publisher.publish("lasting")
            try await subscription.wait(.found, "lasting")
            #expect(a.daemon.isRunning)
            withExtendedLifetime((first, lasting)) {}
        }
    }

    @BusActor
    static func publishAndRelease(on address: String, key: String, count: Int) async throws {
        let client = try RawClient(address)
        let manager = try await client.createManager(key)
        for index in 0..<count {
            try client.connection.send(destination: "org.nearbyd", path: manager, interface: "org.nearbyd.Manager1",
                                       member: "Publish") { writer throws(DBusError) in
                try writer.append([UInt8(index)])
                try writer.append("short")
                try writer.append([String: Variant]())
            }
        }
        _ = try await client.call(manager, "org.nearbyd.Manager1", "Release")
        client.connection.close()
    }

    @Test func discoveryResumesAfterTheServerIsKilledAndRestarted() async throws {
        try await withCluster { cluster in
            let key = try await cluster.createProject("restart")
            let a = try await cluster.addDevice("A", at: (0, 0))
            let b = try await cluster.addDevice("B", at: (1, 0))
            let publisher = try await MessageManager(a, apiKey: key)
            let statuses = Inbox<String>()
            let before = try await publisher.publish("before", statusChanged: { statuses.put($0) })
            let subscription = try await MessageManager(b, apiKey: key).record()
            try await subscription.wait(.found, "before")
            // B can hear of it before A's daemon has read the server's answer to its publish.
            if try await before.status != "active" { try await statuses.first(within: 15, "active") { $0 == "active" } }

            await cluster.killServer()
            // Publications made while the server is down wait, starting.
            let during = try await publisher.publish("during")
            #expect(try await during.status == "starting")
            try await cluster.restartServer()

            // Nobody does anything: the daemons reconnect and re-register.
            try await subscription.wait(.found, "during", within: 20)
            #expect(!subscription.kinds.contains("lost restart/chat 'before'"))
            try await cluster.move("A", to: (200, 0))
            try await subscription.wait(.lost, "before")
            try await subscription.wait(.lost, "during")
            #expect(try await during.status == "active")
        }
    }
}
