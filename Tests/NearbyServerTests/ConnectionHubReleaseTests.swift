import Foundation
import HummingbirdWSClient
import HummingbirdWSTesting
@testable import NearbyServer
import ServerAPI
import Testing
import TestSupport

/// What the connection server keeps once application servers' sessions and
/// devices' channels have ended, or their devices are gone: nothing.
@Suite(.timeLimit(.minutes(2))) struct ConnectionHubReleaseTests {
    static let none = ConnectionHub.Holdings(sessions: 0, inFlight: 0, channels: 0, endedChannels: 0)

    /// Sessions that end with messages out and not acked, each handing
    /// them to the next, leave the hub no message in flight once the last
    /// one has acked them, and nothing once that one has ended too (what a
    /// project's sessions hold is in storage, as claims); a closed channel
    /// leaves no channel.
    @Test func endedSessionsAndChannelsLeaveNothingInTheHub() async throws {
        try await withServer { h in
            let s = try await ConnectionHubTests.setUp(h)
            let ids = ["m-1", "m-2", "m-3"]
            for id in ids { await s.hub.received(ConnectionHubTests.upstream(id), device: s.device, project: "alpha") }
            var (session, output) = (s.sessionID, s.session)
            for _ in 0..<8 {
                var taken: [String] = []
                for _ in ids { taken.append(try #require(try ConnectionHubTests.json(await output.next())["message_id"] as? String)) }
                #expect(taken.sorted() == ids)
                // The next session gets them once this one has ended without an ack.
                let (next, nextOutput) = await s.hub.openSession(project: "alpha")
                await s.hub.closeSession(session)
                (session, output) = (next, nextOutput.payloads())
            }
            for _ in ids {
                let id = try #require(try ConnectionHubTests.json(await output.next())["message_id"] as? String)
                #expect(await s.hub.received(#"{"to":"\#(s.device)","message_id":"\#(id)","message_type":"ack"}"#, from: session) == nil)
            }
            #expect(await s.hub.holdings == ConnectionHub.Holdings(sessions: 1, inFlight: 0, channels: 1, endedChannels: 0))
            await s.hub.closeSession(session)
            await s.hub.closeChannel(device: s.device, id: s.channelID)
            #expect(await s.hub.holdings == Self.none)
        }
    }

    /// A device deleted after its request to open a channel was
    /// authenticated, before the hub opened it: the channel it gets has
    /// ended (`device unregistered`), and the hub keeps nothing of it.
    @Test func aChannelOpenedForADeletedDeviceHasEnded() async throws {
        try await withServer { h in
            let device = try await h.devices(1)[0]
            #expect(try await h.service.storage.deleteDevice(id: device.id))
            let (id, output) = await h.service.connections.openChannel(device: device.id, project: "alpha")
            let events = try await withTimeout(10, "the channel to end") { await output.reduce(0) { count, _ in count + 1 } }
            #expect(events == 0)
            #expect(await h.service.connections.takeEndReason(of: id) == "device unregistered")
            await h.service.connections.closeChannel(device: device.id, id: id)
            #expect(await h.service.connections.holdings == Self.none)
        }
    }

    /// A device deleted with its direct channel open: the server closes the
    /// channel (`device unregistered`) and keeps nothing of it. Before, the
    /// channel stayed open, and in the hub, for as long as the device kept
    /// its connection.
    @Test func deletingADeviceClosesItsChannel() async throws {
        try await withServer(live: true) { h in
            let device = try await h.devices(1)[0]
            let answered = Inbox<Void>()
            let configuration = WebSocketClientConfiguration(additionalHeaders: device.auth)
            let connection = Task {
                try await h.client.ws(APIPath.channel(device.id), configuration: configuration, logger: quietLogger()) {
                    inbound, outbound, _ in
                    // A message to another project's server: the channel answers it failed, so it is open.
                    let request = ChannelRequest.send(ChannelUpstream(app: "org.example.chat", messageId: "m-1", to: "other@elsewhere",
                                                                      data: [:], expiresAtMs: startMs + 60_000))
                    try await outbound.write(.text(String(decoding: try JSONEncoder().encode(request), as: UTF8.self)))
                    for try await _ in inbound.messages(maxSize: 1 << 16) { answered.put(()) }
                }
            }
            defer { connection.cancel() }
            _ = try await answered.first(within: 10, "the channel's answer") { _ in true }
            #expect(await h.service.connections.holdings.channels == 1)
            #expect(try await h.request(.delete, APIPath.device(device.id), headers: device.auth).status == .noContent)
            let close = try await withTimeout(10, "the server to close the channel") {
                try await withTaskCancellationHandler { try await connection.value } onCancel: { connection.cancel() }
            }
            #expect(close?.reason == "device unregistered")
            // The hub let go of the channel before its close went out.
            #expect(await h.service.connections.holdings == Self.none)
        }
    }
}
