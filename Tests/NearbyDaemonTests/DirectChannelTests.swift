import DBus
import Logging
import NearbyCore
import ServerAPI
import Testing
@testable import NearbyDaemon

/// ``DirectChannel`` against a stand-in for the WebSocket: when it connects,
/// what it reports, and that nothing of a closed connection gets through.
@BusActor
struct DirectChannelTests {
    /// One connection the channel made, driven by the test.
    struct Connection: Sendable {
        let requests: AsyncStream<ChannelRequest>
        let opened: @Sendable () async -> Void
        let received: @Sendable (ChannelEvent) async -> Void
        /// Ends the connection: with this error, or cleanly with nil.
        let end: AsyncStream<(any Error)?>.Continuation
    }

    struct Dropped: Error {}

    let connections: AsyncStream<Connection>
    let channel: DirectChannel
    let changes: AsyncStream<Bool>
    let events: AsyncStream<ChannelEvent>

    init() {
        let (connections, made) = AsyncStream.makeStream(of: Connection.self)
        self.connections = connections
        channel = DirectChannel(account: Account(uid: 1000, apiKey: "key"), connect: { requests, opened, received in
            let (ends, end) = AsyncStream.makeStream(of: (any Error)?.self)
            made.yield(Connection(requests: requests, opened: opened, received: received, end: end))
            // Iteration stops when the channel cancels the connection's task.
            for await outcome in ends {
                if let outcome { throw outcome }
                return
            }
        }, backoff: Backoff(initial: .milliseconds(1), maximum: .milliseconds(2)), logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        let (changes, changed) = AsyncStream.makeStream(of: Bool.self)
        self.changes = changes
        let (events, event) = AsyncStream.makeStream(of: ChannelEvent.self)
        self.events = events
        channel.onOpenChanged = { changed.yield($0) }
        channel.onEvent = { event.yield($0) }
    }

    @Test func itConnectsWhileWantedAndReconnectsAfterAFailure() async throws {
        var connections = connections.makeAsyncIterator()
        var changes = changes.makeAsyncIterator()
        var events = events.makeAsyncIterator()
        #expect(!channel.wanted && !channel.isOpen)
        channel.wanted = true
        let first = try #require(await connections.next(isolation: #isolation))
        // Connecting is not open: a request now is dropped (everything pending goes when it opens).
        channel.send(.ack(messageId: "dropped"))
        await first.opened()
        let opened = await changes.next(isolation: #isolation)
        #expect(opened == true && channel.isOpen)
        channel.send(.ack(messageId: "d1"))
        var requests = first.requests.makeAsyncIterator()
        let written = await requests.next(isolation: #isolation)
        #expect(written == .ack(messageId: "d1"))
        let sent = ChannelEvent.sent([ChannelMessageRef(app: "app", messageId: "m1")])
        await first.received(sent)
        let heard = await events.next(isolation: #isolation)
        #expect(heard == sent)

        first.end.yield(Dropped())
        let closed = await changes.next(isolation: #isolation)
        #expect(closed == false && !channel.isOpen)
        let afterClose = await requests.next(isolation: #isolation)
        #expect(afterClose == nil)
        // Again after the backoff, by itself.
        let second = try #require(await connections.next(isolation: #isolation))
        await second.opened()
        let reopened = await changes.next(isolation: #isolation)
        #expect(reopened == true)
        channel.wanted = false
    }

    @Test func itClosesAtOnceWhenNoLongerWantedAndHearsNothingMoreOfThatConnection() async throws {
        var connections = connections.makeAsyncIterator()
        var changes = changes.makeAsyncIterator()
        var events = events.makeAsyncIterator()
        channel.wanted = true
        let first = try #require(await connections.next(isolation: #isolation))
        await first.opened()
        let opened = await changes.next(isolation: #isolation)
        #expect(opened == true)

        channel.wanted = false
        // Closed before the connection's task has even seen its cancellation.
        #expect(!channel.isOpen)
        let closed = await changes.next(isolation: #isolation)
        #expect(closed == false)
        // A frame that was on its way, and a late open, are not heard.
        await first.received(.message(ChannelDownstream(messageId: "late", from: "shop", data: [:])))
        await first.opened()
        #expect(!channel.isOpen)

        // Wanted again: a new connection, and only its events.
        channel.wanted = true
        let second = try #require(await connections.next(isolation: #isolation))
        await second.opened()
        let reopened = await changes.next(isolation: #isolation)
        #expect(reopened == true)
        let failed = ChannelEvent.failed(ChannelFailure(app: "app", messageId: "m2", error: "TTL_EXCEEDED", description: "late"))
        await second.received(failed)
        let heard = await events.next(isolation: #isolation)
        #expect(heard == failed)
        channel.wanted = false
    }

    @Test func aKeyWantsItsChannelWhileOneManagerInTheForegroundAsksForIt() {
        #expect(!UpstreamService.wantsChannel([]))
        #expect(!UpstreamService.wantsChannel([(directChannel: false, background: false)]))
        // In the background, its wish waits.
        #expect(!UpstreamService.wantsChannel([(directChannel: true, background: true), (directChannel: false, background: false)]))
        #expect(UpstreamService.wantsChannel([(directChannel: true, background: true), (directChannel: true, background: false)]))
    }
}
