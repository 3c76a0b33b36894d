import Foundation
@testable import NearbyServer
import ServerAPI
import Testing
import TestSupport

/// The connection server among replicas: a device's channel and its
/// project's application servers' sessions may be on different replicas, and
/// CCS's guarantees hold across them: each upstream message is out with one
/// session at a time, goes to another when that session ends unacked (or its
/// replica dies), and never again once acked. The hubs are driven directly,
/// as ConnectionHubTests does, on one database of each engine.
@Suite(.postgresCluster, .timeLimit(.minutes(1))) struct ConnectionReplicationTests {
    static func ack(_ id: String, device: String) -> String {
        #"{"to":"\#(device)","message_id":"\#(id)","message_type":"ack"}"#
    }

    static func messageId(_ payload: String?) throws -> String {
        try #require(try ConnectionHubTests.json(payload)["message_id"] as? String)
    }

    /// A device's channel on replica 1, the application server's session on
    /// replica 2: upstream, its ack, downstream and the delivery receipt
    /// each reach the other side.
    @Test(arguments: Engine.allCases) func aChannelAndASessionOnDifferentReplicasTalk(engine: Engine) async throws {
        try await withReplicas(engine) { replicas in
            let (one, two) = (replicas[0].service.connections, replicas[1].service.connections)
            let device = try await replicas[0].devices(1)[0].id
            let (_, channelEvents) = await one.openChannel(device: device, project: "alpha")
            var channel = channelEvents.makeAsyncIterator()
            let (session, output) = await two.openSession(project: "alpha")
            var delivered = output.payloads()

            await one.received(ConnectionHubTests.upstream("m-1"), device: device, project: "alpha")
            #expect(try Self.messageId(await delivered.next()) == "m-1")
            #expect(await two.received(Self.ack("m-1", device: device), from: session) == nil)
            #expect(await channel.next() == .sent([ChannelMessageRef(app: "org.example.chat", messageId: "m-1")]))

            let downstream = #"{"to":"\#(device)","message_id":"d-1","data":{"k":"v"},"delivery_receipt_requested":true}"#
            let answer = try ConnectionHubTests.json(await two.received(downstream, from: session))
            #expect(answer["message_type"] as? String == "ack")
            #expect(await channel.next() == .message(ChannelDownstream(messageId: "d-1", from: "alpha", data: ["k": "v"])))
            await one.received(.ack(messageId: "d-1"), device: device, project: "alpha")
            let receipt = try ConnectionHubTests.json(await delivered.next())
            #expect(receipt["message_type"] as? String == "receipt")
            #expect((receipt["data"] as? [String: String])?["original_message_id"] == "d-1")

            // A message without time (TTL 0) reaches the session elsewhere too.
            await one.received(ConnectionHubTests.upstream("m-0", expiresAtMs: startMs), device: device, project: "alpha")
            #expect(try Self.messageId(await delivered.next()) == "m-0")
        }
    }

    /// A downstream message too large for a notification reaches the
    /// device's channel on the other replica from storage, where it is held
    /// to the device's quota; it is not stored again for the bus (on
    /// PostgreSQL nothing is kept in `replicaMessage`).
    @Test(arguments: Engine.allCases) func aLargeDownstreamMessageReachesAChannelElsewhereFromStorage(engine: Engine) async throws {
        let connectionsHub = InMemoryReplicaHub()
        try await withReplicas(engine, connectionsHub: connectionsHub) { replicas in
            let (one, two) = (replicas[0].service.connections, replicas[1].service.connections)
            let device = try await replicas[0].devices(1)[0].id
            let (_, channelEvents) = await one.openChannel(device: device, project: "alpha")
            var channel = channelEvents.makeAsyncIterator()
            let (session, _) = await two.openSession(project: "alpha")

            // JSON writes each "/" as "\/": 4,000 of them do not fit a notification.
            let large = ChannelDownstream(messageId: "d-large", from: "alpha", data: ["k": String(repeating: "/", count: 4000)])
            try #require(try JSONEncoder().encode(ConnectionEvent.tell(device: device, .message(large))).count > PostgresReplicaBus.inlineBytes)
            let downstream = #"{"to":"\#(device)","message_id":"d-large","data":{"k":"\#(String(repeating: "/", count: 4000))"}}"#
            let answer = try ConnectionHubTests.json(await two.received(downstream, from: session))
            #expect(answer["message_type"] as? String == "ack")
            #expect(await channel.next() == .message(large))

            // And a small one after it is told on the bus, in order.
            let small = #"{"to":"\#(device)","message_id":"d-small","data":{"k":"v"}}"#
            #expect(try ConnectionHubTests.json(await two.received(small, from: session))["message_type"] as? String == "ack")
            #expect(await channel.next() == .message(ChannelDownstream(messageId: "d-small", from: "alpha", data: ["k": "v"])))
            switch engine {
            case .sqlite:
                #expect(connectionsHub.longestMessage <= PostgresReplicaBus.inlineBytes, "\(connectionsHub.longestMessage)")
            case .postgres:
                let storage = try #require(replicas[1].service.storage as? PostgresStorage)
                let stored = try await storage.read { try await storage.value(Int64.self, "SELECT count(*) FROM replicaMessage", on: $0) }
                #expect(stored == 0)
            }
        }
    }

    /// Sessions of one project on both replicas share the messages, each
    /// out with one of them; what one leaves unacked goes to the other, and
    /// what is acked never comes back.
    @Test(arguments: Engine.allCases) func eachMessageIsOutWithOneSessionOfAllReplicas(engine: Engine) async throws {
        var configuration = testConfiguration(databasePath: "unused")
        configuration.xmpp.maxUnackedPerConnection = 3
        try await withReplicas(engine, configuration: configuration) { replicas in
            let (one, two) = (replicas[0].service.connections, replicas[1].service.connections)
            let device = try await replicas[0].devices(1)[0].id
            let (first, firstOutput) = await one.openSession(project: "alpha")
            let (second, secondOutput) = await two.openSession(project: "alpha")
            var (atOne, atTwo) = (firstOutput.payloads(), secondOutput.payloads())

            // Six messages, room for three on each: each session gets three, none twice.
            let ids = (1...6).map { "m-\($0)" }
            for id in ids { await one.received(ConnectionHubTests.upstream(id), device: device, project: "alpha") }
            var withOne: [String] = []
            var withTwo: [String] = []
            for _ in 0..<3 {
                withOne.append(try Self.messageId(await atOne.next()))
                withTwo.append(try Self.messageId(await atTwo.next()))
            }
            #expect(Set(withOne + withTwo) == Set(ids))

            // Replica 2's session acks one and ends: the other two go to a session on replica 1.
            #expect(await two.received(Self.ack(withTwo[0], device: device), from: second) == nil)
            await two.closeSession(second)
            #expect(await one.received(Self.ack(withOne[0], device: device), from: first) == nil)
            #expect(await one.received(Self.ack(withOne[1], device: device), from: first) == nil)
            var redelivered = [try Self.messageId(await atOne.next()), try Self.messageId(await atOne.next())]
            #expect(redelivered.sorted() == withTwo.dropFirst().sorted())
            // Acked everywhere: a new message is the next thing out, nothing comes twice.
            for id in redelivered + [withOne[2]] {
                #expect(await one.received(Self.ack(id, device: device), from: first) == nil)
            }
            await one.received(ConnectionHubTests.upstream("m-7"), device: device, project: "alpha")
            redelivered = [try Self.messageId(await atOne.next())]
            #expect(redelivered == ["m-7"])
        }
    }

    /// A replica that stops renewing its claims (it died) leaves what its
    /// sessions held to the other replicas once the lease has lapsed, and
    /// not before.
    @Test(arguments: Engine.allCases) func aDeadReplicasMessagesGoElsewhereWhenItsLeaseLapses(engine: Engine) async throws {
        var configuration = testConfiguration(databasePath: "unused")
        configuration.xmpp.claimLeaseSeconds = 30
        configuration.xmpp.maxUnackedPerConnection = 1
        try await withReplicas(engine, configuration: configuration) { replicas in
            let (one, two) = (replicas[0].service.connections, replicas[1].service.connections)
            let clock = replicas[0].clock
            let device = try await replicas[0].devices(1)[0].id
            let (_, firstOutput) = await one.openSession(project: "alpha")
            var atOne = firstOutput.payloads()
            await one.received(ConnectionHubTests.upstream("m-1"), device: device, project: "alpha")
            #expect(try Self.messageId(await atOne.next()) == "m-1")

            // Replica 1 goes silent with m-1 out; a session opens on replica 2.
            let (second, secondOutput) = await two.openSession(project: "alpha")
            var atTwo = secondOutput.payloads()
            clock.advance(bySeconds: 29)
            await two.sweep()
            await one.received(ConnectionHubTests.upstream("m-2"), device: device, project: "alpha")
            // m-2 is the first thing replica 2's session gets: m-1 is still replica 1's.
            #expect(try Self.messageId(await atTwo.next()) == "m-2")
            #expect(await two.received(Self.ack("m-2", device: device), from: second) == nil)
            clock.advance(bySeconds: 11)
            await two.sweep()
            #expect(try Self.messageId(await atTwo.next()) == "m-1")
            #expect(await two.received(Self.ack("m-1", device: device), from: second) == nil)
        }
    }
}
