import Foundation
@testable import NearbyServer
import ServerAPI
import Testing

/// The connection server's routing between devices' channels and application
/// servers' sessions, over real storage, without the transports.
@Suite(.timeLimit(.minutes(2))) struct ConnectionHubTests {
    /// A project with a device, its channel and one application server session.
    struct Setup {
        let hub: ConnectionHub
        let device: String
        var channel: AsyncStream<ChannelEvent>.Iterator
        var session: SessionPayloads
        let sessionID: UInt64
        let channelID: UInt64
    }

    static func setUp(_ h: Harness, session: Bool = true) async throws -> Setup {
        let device = try await h.devices(1)[0]
        let hub = h.service.connections
        let (channelID, channel) = await hub.openChannel(device: device.id, project: "alpha")
        let (id, output) = session ? await hub.openSession(project: "alpha") : (0, AsyncStream<[String]> { $0.finish() })
        return Setup(hub: hub, device: device.id, channel: channel.makeAsyncIterator(), session: output.payloads(),
                     sessionID: id, channelID: channelID)
    }

    static func upstream(_ id: String, expiresAtMs: UInt64 = startMs + 60_000, to: String = "alpha@nearby.local") -> ChannelRequest {
        .send(ChannelUpstream(app: "org.example.chat", messageId: id, to: to, data: ["text": "hi \(id)"], expiresAtMs: expiresAtMs))
    }

    static func json(_ text: String?) throws -> [String: Any] {
        let text = try #require(text)
        return try #require(JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test func anUpstreamMessageReachesTheApplicationServerAndItsAckTellsTheDevice() async throws {
        try await withServer { h in
            var s = try await Self.setUp(h)
            await s.hub.received(Self.upstream("m-1"), device: s.device, project: "alpha")
            let delivered = try Self.json(await s.session.next())
            #expect(delivered["category"] as? String == "org.example.chat")
            #expect(delivered["from"] as? String == s.device)
            #expect(delivered["message_id"] as? String == "m-1")
            #expect(delivered["data"] as? [String: String] == ["text": "hi m-1"])
            let answer = await s.hub.received(#"{"to":"\#(s.device)","message_id":"m-1","message_type":"ack"}"#, from: s.sessionID)
            #expect(answer == nil)
            #expect(await s.channel.next() == .sent([ChannelMessageRef(app: "org.example.chat", messageId: "m-1")]))
            // Sent again after a reconnect: the verdict, not a second delivery.
            await s.hub.received(Self.upstream("m-1"), device: s.device, project: "alpha")
            #expect(await s.channel.next() == .sent([ChannelMessageRef(app: "org.example.chat", messageId: "m-1")]))
        }
    }

    @Test func whatASessionLeavesUnackedGoesToTheNextOne() async throws {
        try await withServer { h in
            var s = try await Self.setUp(h)
            await s.hub.received(Self.upstream("m-1"), device: s.device, project: "alpha")
            #expect(try Self.json(await s.session.next())["message_id"] as? String == "m-1")
            await s.hub.closeSession(s.sessionID)
            let (next, output) = await s.hub.openSession(project: "alpha")
            var again = output.payloads()
            #expect(try Self.json(await again.next())["message_id"] as? String == "m-1")
            #expect(await s.hub.received(#"{"to":"\#(s.device)","message_id":"m-1","message_type":"ack"}"#, from: next) == nil)
            #expect(await s.channel.next() == .sent([ChannelMessageRef(app: "org.example.chat", messageId: "m-1")]))
        }
    }

    @Test func aSessionHasAtMostItsLimitOfUnackedMessages() async throws {
        try await withServer(configure: { $0.xmpp.maxUnackedPerConnection = 2 }) { h in
            var s = try await Self.setUp(h)
            for index in 1...3 { await s.hub.received(Self.upstream("m-\(index)"), device: s.device, project: "alpha") }
            #expect(try Self.json(await s.session.next())["message_id"] as? String == "m-1")
            #expect(try Self.json(await s.session.next())["message_id"] as? String == "m-2")
            // The third follows the first ack, not before.
            _ = await s.hub.received(#"{"to":"\#(s.device)","message_id":"m-1","message_type":"ack"}"#, from: s.sessionID)
            #expect(try Self.json(await s.session.next())["message_id"] as? String == "m-3")
        }
    }

    /// A session's acks and downstream messages are taken one after the
    /// other without waiting for the answers (they commit together), and
    /// answered in the order they came.
    @Test func stanzasTakenTogetherAreAnsweredInOrder() async throws {
        try await withServer { h in
            var s = try await Self.setUp(h)
            let ids = (1...5).map { "m-\($0)" }
            for id in ids { await s.hub.received(Self.upstream(id), device: s.device, project: "alpha") }
            for _ in ids { _ = try await s.session.next() }
            var answers: [Task<String?, Never>] = []
            for id in ids.prefix(2) {
                answers.append(await s.hub.take(#"{"to":"\#(s.device)","message_id":"\#(id)","message_type":"ack"}"#, from: s.sessionID))
            }
            answers.append(await s.hub.take(#"{"to":"\#(s.device)","message_id":"none","message_type":"ack"}"#, from: s.sessionID))
            answers.append(await s.hub.take(#"{"to":"\#(s.device)","message_id":"down-1","data":{"k":"v"}}"#, from: s.sessionID))
            for id in ids.dropFirst(2) {
                answers.append(await s.hub.take(#"{"to":"\#(s.device)","message_id":"\#(id)","message_type":"ack"}"#, from: s.sessionID))
            }
            answers.append(await s.hub.take(#"{"to":"\#(s.device)","message_id":"down-2","data":{"k":"v"}}"#, from: s.sessionID))
            var texts: [String?] = []
            for answer in answers { texts.append(await answer.value) }
            #expect(texts[0] == nil && texts[1] == nil && texts[4..<7].allSatisfy { $0 == nil })
            #expect(try Self.json(texts[7])["message_id"] as? String == "down-2")
            #expect(try Self.json(texts[2])["error"] as? String == "BAD_ACK")
            #expect(try Self.json(texts[3])["message_type"] as? String == "ack")
            #expect(try Self.json(texts[3])["message_id"] as? String == "down-1")
            // The device hears each of its messages sent, and the downstream messages in the order they came.
            var sent: Set<String> = []
            var downstream: [String] = []
            while sent.count < ids.count || downstream.count < 2, let event = await s.channel.next() {
                switch event {
                case .sent(let refs): sent.formUnion(refs.map(\.messageId))
                case .message(let message): downstream.append(message.messageId)
                default: Issue.record("unexpected \(event)")
                }
            }
            #expect(sent == Set(ids))
            #expect(downstream == ["down-1", "down-2"])
        }
    }

    @Test func severalConnectionsOfOneSenderShareTheMessages() async throws {
        try await withServer(configure: { $0.xmpp.maxUnackedPerConnection = 1 }) { h in
            var s = try await Self.setUp(h)
            var second = await s.hub.openSession(project: "alpha").output.payloads()
            for index in 1...2 { await s.hub.received(Self.upstream("m-\(index)"), device: s.device, project: "alpha") }
            let first = try Self.json(await s.session.next())["message_id"] as? String
            let other = try Self.json(await second.next())["message_id"] as? String
            #expect(Set([first, other]) == ["m-1", "m-2"])
        }
    }

    @Test func ttlZeroWithoutAnApplicationServerFailsAtOnce() async throws {
        try await withServer { h in
            var s = try await Self.setUp(h, session: false)
            await s.hub.received(Self.upstream("now", expiresAtMs: startMs), device: s.device, project: "alpha")
            guard case .failed(let failure) = await s.channel.next() else { Issue.record("expected a failure"); return }
            #expect(failure.messageId == "now")
            #expect(failure.error == "SERVICE_NOT_AVAILABLE")
        }
    }

    /// An ack frees its message's place in the session's window as it is
    /// taken, before its settlement commits (CCS counts what the application
    /// server has not acked), so the claim that fills the place commits with
    /// the settlement. The message, no longer held by the session, is still
    /// never handed out again: a renewal of claims right after gives it up
    /// only behind its settlement.
    @Test func anAckFreesItsPlaceAsItIsTaken() async throws {
        try await withServer(configure: { $0.xmpp.maxUnackedPerConnection = 1 }) { h in
            var s = try await Self.setUp(h)
            await s.hub.received(Self.upstream("m-1"), device: s.device, project: "alpha")
            #expect(try Self.json(await s.session.next())["message_id"] as? String == "m-1")
            let answer = await s.hub.take(#"{"to":"\#(s.device)","message_id":"m-1","message_type":"ack"}"#, from: s.sessionID)
            #expect(await s.hub.holdings.inFlight == 0)
            // A third of the lease later: the renewal gives up the claims no session holds.
            h.clock.advance(bySeconds: 10)
            await s.hub.sweep()
            #expect(await answer.value == nil)
            #expect(await s.channel.next() == .sent([ChannelMessageRef(app: "org.example.chat", messageId: "m-1")]))
            await s.hub.received(Self.upstream("m-2"), device: s.device, project: "alpha")
            #expect(try Self.json(await s.session.next())["message_id"] as? String == "m-2")
        }
    }

    @Test func aMessageNoServerAckedInItsTTLFailsAtTheSweep() async throws {
        try await withServer { h in
            var s = try await Self.setUp(h, session: false)
            await s.hub.received(Self.upstream("late", expiresAtMs: startMs + 5000), device: s.device, project: "alpha")
            h.clock.advance(byMs: 5000)
            await s.hub.sweep()
            guard case .failed(let failure) = await s.channel.next() else { Issue.record("expected a failure"); return }
            #expect(failure.error == "TTL_EXCEEDED")
        }
    }

    /// A device's word for how long its message is worth keeping is taken up
    /// to CCS's longest TTL (four weeks), however far it says.
    @Test func noMessageIsKeptLongerThanTheLongestTTL() async throws {
        try await withServer { h in
            var s = try await Self.setUp(h, session: false)
            await s.hub.received(Self.upstream("forever", expiresAtMs: .max), device: s.device, project: "alpha")
            h.clock.advance(bySeconds: 2_419_200 - 1)
            await s.hub.sweep()
            h.clock.advance(bySeconds: 1)
            await s.hub.sweep()
            guard case .failed(let failure) = await s.channel.next() else { Issue.record("expected a failure"); return }
            #expect(failure.messageId == "forever" && failure.error == "TTL_EXCEEDED")
        }
    }

    @Test func aDeviceKeepsAtMostItsLimitOfUpstreamMessages() async throws {
        try await withServer(configure: { $0.limits.maxUpstreamPerDevice = 2 }) { h in
            var s = try await Self.setUp(h, session: false)
            for id in ["m-1", "m-2", "m-3"] { await s.hub.received(Self.upstream(id), device: s.device, project: "alpha") }
            guard case .failed(let failure) = await s.channel.next() else { Issue.record("expected a failure"); return }
            #expect(failure.messageId == "m-3" && failure.error == "DEVICE_MESSAGE_RATE_EXCEEDED", "\(failure)")
            #expect(failure.description.contains("max-upstream-per-device"))
            // A repeat of one it keeps is still answered as a repeat, not refused.
            await s.hub.received(Self.upstream("m-1"), device: s.device, project: "alpha")
            let (_, output) = await s.hub.openSession(project: "alpha")
            var session = output.payloads()
            #expect(try Self.json(await session.next())["message_id"] as? String == "m-1")
        }
    }

    /// A device that writes and never reads loses its channel once its queue
    /// is full, and no answer costs much more than the question.
    @Test func aDeviceThatDoesNotReadLosesItsChannel() async throws {
        try await withServer(configure: { $0.limits.maxChannelQueue = 3 }) { h in
            var s = try await Self.setUp(h, session: false)
            let long = "x" + String(repeating: "y", count: 15_000) + "@nearby.local"
            for index in 1...4 { await s.hub.received(Self.upstream("m-\(index)", to: long), device: s.device, project: "alpha") }
            var events: [ChannelEvent] = []
            while let event = await s.channel.next() { events.append(event) }
            #expect(events.count == 3)
            for case .failed(let failure) in events { #expect(failure.description.utf8.count < 200, "\(failure.description.utf8.count)") }
            #expect(await s.hub.takeEndReason(of: s.channelID).contains("max-channel-queue"))
        }
    }

    @Test func aMessageForAnotherSenderOrAgainstTheRulesIsRefused() async throws {
        try await withServer { h in
            var s = try await Self.setUp(h)
            await s.hub.received(Self.upstream("m", to: "beta@nearby.local"), device: s.device, project: "alpha")
            guard case .failed(let failure) = await s.channel.next() else { Issue.record("expected a failure"); return }
            #expect(failure.error == "INVALID_PARAMETERS")
            // The server checks what nearbyd checks: it trusts no client.
            let reserved = ChannelUpstream(app: "a", messageId: "r", to: "alpha@nearby.local", data: ["gcm.x": "1"],
                                           expiresAtMs: startMs + 60_000)
            await s.hub.received(.send(reserved), device: s.device, project: "alpha")
            guard case .failed(let refused) = await s.channel.next() else { Issue.record("expected a failure"); return }
            #expect(refused.error == "INVALID_PARAMETERS")
            #expect(refused.description.contains("gcm.x"))
            // A NUL in an id is refused by name, on every engine (PostgreSQL's text cannot hold one).
            let nul = ChannelUpstream(app: "a", messageId: "m\u{0}1", to: "alpha@nearby.local", data: [:], expiresAtMs: startMs + 60_000)
            await s.hub.received(.send(nul), device: s.device, project: "alpha")
            guard case .failed(let control) = await s.channel.next() else { Issue.record("expected a failure"); return }
            #expect(control.error == "INVALID_PARAMETERS")
            #expect(control.description == "messageId must be 1 to 256 bytes without control characters")
        }
    }

    @Test func downstreamReachesTheDeviceAndItsAckBringsAReceipt() async throws {
        try await withServer { h in
            var s = try await Self.setUp(h)
            let answer = try Self.json(await s.hub.received(
                #"{"to":"\#(s.device)","message_id":"d-1","data":{"a":"b"},"delivery_receipt_requested":true}"#, from: s.sessionID))
            #expect(answer["message_type"] as? String == "ack")
            #expect(answer["message_id"] as? String == "d-1")
            #expect(answer["from"] as? String == s.device)
            #expect(await s.channel.next() == .message(ChannelDownstream(messageId: "d-1", from: "alpha", data: ["a": "b"])))
            await s.hub.received(.ack(messageId: "d-1"), device: s.device, project: "alpha")
            let receipt = try Self.json(await s.session.next())
            #expect(receipt["message_type"] as? String == "receipt")
            #expect(receipt["message_id"] as? String == "dr2:d-1")
            let data = try #require(receipt["data"] as? [String: String])
            #expect(data["message_status"] == "MESSAGE_SENT_TO_DEVICE")
            #expect(data["original_message_id"] == "d-1")
            #expect(data["device_registration_id"] == s.device)
            #expect(await s.hub.received(#"{"to":"nearby.local","message_id":"dr2:d-1","message_type":"ack"}"#, from: s.sessionID) == nil)
        }
    }

    /// Receipts wait for the project's application servers, the newest
    /// `max-pending-receipts-per-project` of them: one that never connects
    /// does not make them pile up.
    @Test func receiptsNobodyTakesAreBounded() async throws {
        try await withServer(configure: { $0.xmpp.maxPendingReceiptsPerProject = 2 }) { h in
            var s = try await Self.setUp(h)
            for id in ["d-1", "d-2", "d-3"] {
                _ = await s.hub.received(#"{"to":"\#(s.device)","message_id":"\#(id)","delivery_receipt_requested":true}"#,
                                         from: s.sessionID)
                _ = await s.channel.next()
            }
            await s.hub.closeSession(s.sessionID)
            for id in ["d-1", "d-2"] { await s.hub.received(.ack(messageId: id), device: s.device, project: "alpha") }
            #expect(try await h.service.storage.receipts(project: "alpha", after: 0, limit: 10).map(\.messageId)
                == ["dr2:d-1", "dr2:d-2"])
            await s.hub.received(.ack(messageId: "d-3"), device: s.device, project: "alpha")
            #expect(try await h.service.storage.receipts(project: "alpha", after: 0, limit: 10).map(\.messageId)
                == ["dr2:d-2", "dr2:d-3"])
            var session = await s.hub.openSession(project: "alpha").output.payloads()
            #expect(try Self.json(await session.next())["message_id"] as? String == "dr2:d-2")
            #expect(try Self.json(await session.next())["message_id"] as? String == "dr2:d-3")
        }
    }

    @Test func aDeviceGetsWhatWaitedForItWhenItsChannelOpens() async throws {
        try await withServer { h in
            let s = try await Self.setUp(h)
            await s.hub.closeChannel(device: s.device, id: s.channelID)
            _ = await s.hub.received(#"{"to":"\#(s.device)","message_id":"d-1","data":{"a":"b"}}"#, from: s.sessionID)
            var channel = await s.hub.openChannel(device: s.device, project: "alpha").output.makeAsyncIterator()
            #expect(await channel.next() == .message(ChannelDownstream(messageId: "d-1", from: "alpha", data: ["a": "b"])))
        }
    }

    @Test func badInputGetsTheNackThatNamesIt() async throws {
        try await withServer(configure: { $0.xmpp.maxPendingDownstreamPerDevice = 1 }) { h in
            let s = try await Self.setUp(h)
            func error(_ payload: String) async throws -> String? {
                try Self.json(await s.hub.received(payload, from: s.sessionID))["error"] as? String
            }
            #expect(try await error(#"{"to":"nobody","message_id":"x"}"#) == "BAD_REGISTRATION")
            #expect(try await error(#"{"to":"\#(s.device)","message_id":"x","colour":"red"}"#) == "INVALID_JSON")
            #expect(try await error(#"{"to":"\#(s.device)","message_id":"x","time_to_live":-1}"#) == "INVALID_JSON")
            #expect(try await error(#"{"to":"\#(s.device)","message_id":"x","data":{"n":1}}"#) == "INVALID_JSON")
            #expect(try await error("not json") == "INVALID_JSON")
            // CCS's rules for data, as nearbyd applies them upstream (CCSRules).
            #expect(try await error(#"{"to":"\#(s.device)","message_id":"x","data":{"message_type":"y"}}"#) == "INVALID_JSON")
            #expect(try await error(#"{"to":"\#(s.device)","message_id":"x","data":{"":"y"}}"#) == "INVALID_JSON")
            #expect(try await error(#"{"to":"\#(s.device)","message_id":"x","message_type":"ack"}"#) == "BAD_ACK")
            #expect(try await error(#"{"to":"\#(s.device)","message_id":"d-1"}"#) == nil)
            #expect(try await error(#"{"to":"\#(s.device)","message_id":"d-2"}"#) == "DEVICE_MESSAGE_RATE_EXCEEDED")
            // Another project's device is no registration of this one.
            let other = try await h.devices(1, project: "beta")[0]
            #expect(try await error(#"{"to":"\#(other.id)","message_id":"x"}"#) == "BAD_REGISTRATION")
            let response = try await h.request(.delete, APIPath.device(other.id), headers: other.auth)
            #expect(response.status == .noContent)
            let (beta, _) = await s.hub.openSession(project: "beta")
            #expect(try Self.json(await s.hub.received(#"{"to":"\#(other.id)","message_id":"x"}"#, from: beta))["error"] as? String
                == "DEVICE_UNREGISTERED")
        }
    }

    @Test func drainingTellsTheSessionsAndGivesThemNothingNew() async throws {
        try await withServer { h in
            var s = try await Self.setUp(h)
            await s.hub.drain()
            let control = try Self.json(await s.session.next())
            #expect(control["message_type"] as? String == "control")
            #expect(control["control_type"] as? String == "CONNECTION_DRAINING")
            // A downstream message is refused, to be sent again elsewhere.
            let refused = try Self.json(await s.hub.received(#"{"to":"\#(s.device)","message_id":"d-1"}"#, from: s.sessionID))
            #expect(refused["error"] as? String == "SERVICE_UNAVAILABLE")
            // An upstream message waits for a connection that is not draining.
            await s.hub.received(Self.upstream("m-1"), device: s.device, project: "alpha")
            await s.hub.closeSession(s.sessionID)
            #expect(await s.session.next() == nil)
        }
    }
}
