import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NearbyCore
import NIOCore
@testable import NearbyServer
import ServerAPI
import Testing
import TestSupport

/// Several replicas on one database: a device and its peers may each talk to
/// any replica, and found and lost come out as with one server. On SQLite
/// the replicas share a file and an in-memory bus; on PostgreSQL the real
/// LISTEN/NOTIFY (PostgresReplicaBus).
@Suite(.postgresCluster, .timeLimit(.minutes(1))) struct ReplicationTests {
    /// The subscriber's replica knows a publication made on another.
    @Test(arguments: Engine.allCases) func aPublicationOnOneReplicaIsFoundOnAnother(engine: Engine) async throws {
        try await withReplicas(engine) { replicas in
            let (a, b) = (replicas[0], replicas[1])
            let key = try await a.createProject("alpha")
            let publisher = try await a.register(apiKey: key)
            let subscriber = try await b.register(apiKey: key)
            let token = try await a.issueToken(publisher)
            try await a.publish(publisher, "p1", content: "hello")
            try await b.subscribe(subscriber, "s1")
            let stream = try await b.openStream(subscriber)

            #expect(try await b.report(subscriber, seen: [(token.token, .ble)], rssi: -42) == [.ok])
            let expected = Match(subscription: "s1", source: "\(publisher.id)/p1", namespace: "alpha", type: "greeting",
                                 content: Data("hello".utf8), medium: .ble, rssi: -42, distance: 1.5)
            #expect(try await stream.next() == .found(expected))
            // The publisher deletes it on its replica: lost on the subscriber's.
            #expect(try await a.request(.delete, APIPath.publication(publisher.id, "p1"), headers: publisher.auth).status == .noContent)
            #expect(try await stream.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            try await stream.close()
        }
    }

    /// A publication's content goes from replica to replica through storage,
    /// where it is held to the device's quotas, not on the bus: a device
    /// putting a 100 KiB publication again and again sends only messages
    /// that fit a notification (on PostgreSQL nothing is kept in
    /// `replicaMessage`, outside every quota), and a subscriber on the other
    /// replica finds the whole of its last content.
    @Test(arguments: Engine.allCases) func largeContentsGoThroughStorageNotTheBus(engine: Engine) async throws {
        let hub = InMemoryReplicaHub()
        try await withReplicas(engine, hub: hub) { replicas in
            let (a, b) = (replicas[0], replicas[1])
            let key = try await a.createProject("alpha")
            let publisher = try await a.register(apiKey: key)
            let subscriber = try await b.register(apiKey: key)
            let token = try await a.issueToken(publisher)
            for letter in ["a", "b", "c", "d", "e"] {
                try await a.publish(publisher, "p1", content: String(repeating: letter, count: 100 * 1024))
            }
            try await b.subscribe(subscriber, "s1")
            let stream = try await b.openStream(subscriber)
            #expect(try await b.report(subscriber, seen: [(token.token, .ble)], rssi: -42) == [.ok])
            let expected = Match(subscription: "s1", source: "\(publisher.id)/p1", namespace: "alpha", type: "greeting",
                                 content: Data(String(repeating: "e", count: 100 * 1024).utf8), medium: .ble, rssi: -42, distance: 1.5)
            #expect(try await stream.next() == .found(expected))
            try await stream.close()
            switch engine {
            case .sqlite:
                #expect(hub.longestMessage <= PostgresReplicaBus.inlineBytes, "\(hub.longestMessage)")
            case .postgres:
                let storage = try #require(a.service.storage as? PostgresStorage)
                let stored = try await storage.read { try await storage.value(Int64.self, "SELECT count(*) FROM replicaMessage", on: $0) }
                #expect(stored == 0)
            }
        }
    }

    /// The observer reports to one replica, the subscriber it hears listens on
    /// another (the publisher scans): the sighting reaches the subscriber's
    /// replica; gone, and the end of the observer's stream, take it away.
    @Test(arguments: Engine.allCases) func sightingsReportedToOneReplicaMatchOnAnother(engine: Engine) async throws {
        try await withReplicas(engine) { replicas in
            let (a, b) = (replicas[0], replicas[1])
            let key = try await a.createProject("alpha")
            let publisher = try await a.register(apiKey: key)
            let subscriber = try await b.register(apiKey: key)
            let token = try await b.issueToken(subscriber)
            try await a.publish(publisher, "p1", mode: .scan)
            try await b.subscribe(subscriber, "s1", mode: .broadcast)
            let subscriberStream = try await b.openStream(subscriber)
            let publisherStream = try await a.openStream(publisher)
            let lost = StreamEvent.lost(subscription: "s1", source: "\(publisher.id)/p1")

            #expect(try await a.report(publisher, seen: [(token.token, .ble)]) == [.ok])
            guard case .found = try await subscriberStream.next() else { Issue.record("expected found"); return }
            try await a.report(publisher, gone: [(token.token, .ble)])
            #expect(try await subscriberStream.next() == lost)

            try await a.report(publisher, seen: [(token.token, .ble)])
            guard case .found = try await subscriberStream.next() else { Issue.record("expected found"); return }
            // The observer's stream ends on its replica: its sightings go on every replica.
            try await publisherStream.close()
            #expect(try await subscriberStream.next() == lost)
            try await subscriberStream.close()
        }
    }

    /// A device that opens its stream on another replica (its first replica
    /// died, or the load balancer moved it) is served there; the first
    /// stream is closed, and its end does not take the device's sightings.
    @Test(arguments: Engine.allCases) func aStreamOpenedOnAnotherReplicaReplacesTheFirst(engine: Engine) async throws {
        try await withReplicas(engine) { replicas in
            let (a, b) = (replicas[0], replicas[1])
            let key = try await a.createProject("alpha")
            let publisher = try await a.register(apiKey: key)
            let subscriber = try await a.register(apiKey: key)
            let token = try await a.issueToken(publisher)
            try await a.publish(publisher, "p1")
            try await a.subscribe(subscriber, "s1")
            let first = try await a.openStream(subscriber)
            try await a.report(subscriber, seen: [(token.token, .ble)])
            guard case .found = try await first.next() else { Issue.record("expected found"); return }

            let second = try await b.openStream(subscriber)
            // The first replica ends the first stream (its events end). The
            // close frame's reason is checked when the client gets it: on a
            // loaded machine the client may find the channel closed before
            // its side of the close handshake, and the frame is lost to it.
            do {
                #expect(try await first.closedByServer()?.reason == "replaced by a newer stream of this device")
            } catch ChannelError.ioOnClosedChannel {}
            // Still near: the snapshot on the new replica has the match, and nothing was lost.
            #expect(try await second.snapshot().map(\.source) == ["\(publisher.id)/p1"])
            try await b.report(subscriber, gone: [(token.token, .ble)])
            #expect(try await second.next() == .lost(subscription: "s1", source: "\(publisher.id)/p1"))
            try await second.close()
        }
    }

    /// A replica cut off from the others misses their events, and says it is
    /// not ready; when it joins again it reloads from storage, and what
    /// changed meanwhile is found.
    @Test func aReplicaThatMissedEventsReloadsWhenItJoinsAgain() async throws {
        let hub = InMemoryReplicaHub()
        try await expectFoundOnB(hub) { a, b, publisher in
            #expect(try await b.request(.get, APIPath.ready).status == .ok)
            await hub.drop(1)
            expectError(try await b.request(.get, APIPath.ready), .serviceUnavailable, .unavailable,
                        mentioning: "not listening to the other replicas")
            #expect(try await a.request(.get, APIPath.ready).status == .ok)
            try await a.publish(publisher, "p1")
            await hub.reconnect(1)
            #expect(try await b.request(.get, APIPath.ready).status == .ok)
        }
    }

    /// A message on the bus a replica does not understand (from a replica
    /// of another version) is an event its matcher misses: it reloads from
    /// storage, and what changed without its knowing is found.
    @Test func aMessageNotUnderstoodMakesTheReplicaReload() async throws {
        let hub = InMemoryReplicaHub()
        try await expectFoundOnB(hub) { a, _, publisher in
            // Kept in storage behind the replicas' backs: no event says so.
            let publication = StoredPublication(device: publisher.id, id: "p1", namespace: publisher.registration.namespace, type: "greeting",
                                                content: Data("hello".utf8), mediums: [.ble], mode: .broadcast,
                                                expiresAtMs: a.clock.nowMs + 300_000)
            _ = try await a.service.storage.applyChanges([.putPublication(publication)], device: publisher.id,
                                                         limits: ObjectLimits(publications: 5, subscriptions: 5))
            // The report comes after the message: the bus delivers in one order, so b has reloaded when it applies it.
            try await hub.bus(9).publish(#"{"a message of":"another version"}"#)
        }
    }

    /// Two replicas on SQLite over `hub`, A and B: a project with a
    /// publisher (its token issued on A) and a subscriber subscribed on B
    /// with its stream open there. After `change`, B's subscriber hears the
    /// publisher's token, and its stream must find the publication `p1`.
    private func expectFoundOnB(_ hub: InMemoryReplicaHub,
                                after change: @escaping @Sendable (Harness, Harness, TestDevice) async throws -> Void) async throws {
        try await withReplicas(.sqlite, hub: hub) { replicas in
            let (a, b) = (replicas[0], replicas[1])
            let key = try await a.createProject("alpha")
            let publisher = try await a.register(apiKey: key)
            let subscriber = try await a.register(apiKey: key)
            let token = try await a.issueToken(publisher)
            try await b.subscribe(subscriber, "s1")
            let stream = try await b.openStream(subscriber)
            try await change(a, b, publisher)
            try await b.report(subscriber, seen: [(token.token, .ble)])
            guard case .found(let match) = try await stream.next() else { Issue.record("expected found"); return }
            #expect(match.source == "\(publisher.id)/p1")
            try await stream.close()
        }
    }

    /// An event PostgreSQL refuses to send is an error for its publisher,
    /// not lost in silence (the publisher would only time out waiting for it
    /// to come back, and the other replicas never have it). PostgreSQL refuses
    /// an empty channel name.
    @Test func aNotificationPostgreSQLRefusesIsAnError() async throws {
        try await withStorage(.postgres) { storage in
            let refused = PostgresReplicaBus(storage: storage as! PostgresStorage, channel: "", logger: quietLogger())
            await #expect(throws: (any Error).self) { try await refused.publish("{}") }
            let sent = PostgresReplicaBus(storage: storage as! PostgresStorage, channel: PostgresReplicaBus.matching,
                                          logger: quietLogger())
            try await sent.publish("{}")
        }
    }

    /// PostgreSQL restarted under two replicas: they wait, join again by
    /// themselves, and match what changed while it was down.
    @Test func replicasRecoverFromARestartOfPostgreSQL() async throws {
        // A cluster of its own: the suite's other tests run meanwhile.
        let cluster = try await PostgresCluster.start()
        do {
            try await PostgresClusterTrait.$current.withValue(cluster) { try await restartUnderReplicas(cluster) }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }

    private func restartUnderReplicas(_ cluster: PostgresCluster) async throws {
        try await withReplicas(.postgres) { replicas in
            let (a, b) = (replicas[0], replicas[1])
            let key = try await a.createProject("alpha")
            let publisher = try await a.register(apiKey: key)
            let subscriber = try await b.register(apiKey: key)
            let token = try await a.issueToken(publisher)
            try await b.subscribe(subscriber, "s1")
            let stream = try await b.openStream(subscriber)

            try await cluster.stopServer()
            try await cluster.startServer()
            // The pool reconnects at the next request; the listener by itself,
            // with backoff: whether the subscriber's replica hears this or
            // reloads it when it joins, it knows the publication once ready.
            try await a.publish(publisher, "p1")
            for replica in [a, b] { try await waitUntilReady(replica) }
            try await b.report(subscriber, seen: [(token.token, .ble)])
            guard case .found(let match) = try await stream.next() else { Issue.record("expected found"); return }
            #expect(match.source == "\(publisher.id)/p1")
            try await stream.close()
        }
    }
}

/// Asks `/v1/ready` until it answers 200: each answer waits up to the
/// readiness timeout for the replica to hear the others again, and a few
/// are allowed (the listener's backoff reaches 5 s).
private func waitUntilReady(_ replica: Harness, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    for _ in 0..<30 {
        if try await replica.request(.get, APIPath.ready).status == .ok { return }
    }
    Issue.record("the replica is not ready again", sourceLocation: sourceLocation)
}

/// Runs `body` with `count` replicas of a server on one new database of
/// `engine`, each serving on a socket of its own, sharing one manual clock.
/// On SQLite they share a file, and `hub` as their matchers' bus.
func withReplicas(_ engine: Engine, count: Int = 2, hub: InMemoryReplicaHub = InMemoryReplicaHub(),
                  connectionsHub: InMemoryReplicaHub = InMemoryReplicaHub(),
                  configuration: ServerConfiguration = testConfiguration(databasePath: "unused"),
                  _ body: @escaping @Sendable ([Harness]) async throws -> Void) async throws {
    let clock = ManualWallClock(nowMs: startMs)
    // The connection hubs' bus (`connectionsHub` on SQLite): in PostgreSQL, a channel of its own.
    try await withStorages(engine, count: count) { storages in
        var servers: [NearbyServer] = []
        for (number, storage) in storages.enumerated() {
            let buses = switch engine {
            case .sqlite: NearbyService.ReplicaBuses(matching: hub.bus(number), connections: connectionsHub.bus(number))
            case .postgres: NearbyService.ReplicaBuses(
                matching: PostgresReplicaBus(storage: storage as! PostgresStorage, channel: PostgresReplicaBus.matching, logger: quietLogger()),
                connections: PostgresReplicaBus(storage: storage as! PostgresStorage, channel: PostgresReplicaBus.connections,
                                                logger: quietLogger()))
            }
            servers.append(try NearbyServer(service: try await NearbyService.start(
                storage: storage, configuration: configuration, clock: clock, logger: quietLogger(), buses: buses)))
        }
        try await serve(servers[...], clock: clock, harnesses: [], body)
    }
}

/// Serves each server live, then runs `body` with a harness for each.
private func serve(_ servers: ArraySlice<NearbyServer>, clock: ManualWallClock, harnesses: [Harness],
                   _ body: @escaping @Sendable ([Harness]) async throws -> Void) async throws {
    guard let server = servers.first else { return try await body(harnesses) }
    try await server.makeApplication(sweepInterval: nil).test(.live) { client in
        try await serve(servers.dropFirst(), clock: clock, harnesses: harnesses + [Harness(server: server, clock: clock, client: client)],
                        body)
    }
}
