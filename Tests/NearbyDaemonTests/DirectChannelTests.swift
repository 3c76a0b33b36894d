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
        /// The URL it was made to.
        let server: String
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

    /// Two URLs of one server; `backoff`'s delays, long or short.
    init(backoff: Backoff = Backoff(initial: .milliseconds(1), maximum: .milliseconds(2))) {
        let (connections, made) = AsyncStream.makeStream(of: Connection.self)
        self.connections = connections
        let endpoints = ServerEndpoints(clients: Self.urls.map { ServerClient(baseURL: $0, timeoutSeconds: 1) },
                                        logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        channel = DirectChannel(account: Account(uid: 1000, apiKey: "key"), connect: { server, requests, opened, received in
            let (ends, end) = AsyncStream.makeStream(of: (any Error)?.self)
            made.yield(Connection(server: server.baseURL, requests: requests, opened: opened, received: received, end: end))
            // Iteration stops when the channel cancels the connection's task.
            for await outcome in ends {
                if let outcome { throw outcome }
                return
            }
        }, endpoints: endpoints, backoff: backoff, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
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

    static let urls = ["http://a.example:8080", "http://b.example:8080"]

    /// The backoff is a minute here: a connection that failed as a server
    /// fails is followed at once by one to the next URL, which the test sees
    /// within its time limit; so is a connection lost after it opened, since
    /// that began a new round. A refusal (a 4xx) is no reason to move.
    @Test(.timeLimit(.minutes(1))) func aFailedServerCostsOneQuickRetryOnTheNextURL() async throws {
        let test = DirectChannelTests(backoff: Backoff(initial: .seconds(60), maximum: .seconds(60)))
        var connections = test.connections.makeAsyncIterator()
        var changes = test.changes.makeAsyncIterator()
        test.channel.wanted = true
        let first = try #require(await connections.next(isolation: #isolation))
        #expect(first.server == Self.urls[0])
        first.end.yield(ServerCallError.unreachable("GET /v1/devices/d/channel: connection refused"))
        let second = try #require(await connections.next(isolation: #isolation))
        #expect(second.server == Self.urls[1])
        await second.opened()
        #expect(await changes.next(isolation: #isolation) == true)
        second.end.yield(ServerCallError.rejected(status: 503, APIError(.unavailable, "the database does not answer")))
        #expect(await changes.next(isolation: #isolation) == false)
        let third = try #require(await connections.next(isolation: #isolation))
        #expect(third.server == Self.urls[0])
        #expect(!ServerEndpoints.isServerFailure(ServerCallError.rejected(status: 403, APIError(.permissionDenied, "no"))))
        #expect(!ServerEndpoints.isServerFailure(ServerCallError.keyRefused("unknown API key")))
        test.channel.wanted = false
    }

    @Test func aKeyWantsItsChannelWhileOneManagerInTheForegroundAsksForIt() {
        #expect(!UpstreamService.wantsChannel([]))
        #expect(!UpstreamService.wantsChannel([(directChannel: false, background: false)]))
        // In the background, its wish waits.
        #expect(!UpstreamService.wantsChannel([(directChannel: true, background: true), (directChannel: false, background: false)]))
        #expect(UpstreamService.wantsChannel([(directChannel: true, background: true), (directChannel: true, background: false)]))
    }
}
