import DBus
import Foundation
import Logging
import NearbyCore
import ServerAPI
import Synchronization

/// The direct channel of one ``Account`` (a user's registration under one
/// API key): the WebSocket to nearby-server
/// (`GET /v1/devices/{device}/channel`) that carries the upstream messages
/// of every app of the key and brings their downstream messages.
///
/// It connects while it is ``wanted``, to the current URL of
/// ``ServerEndpoints``, reconnecting with the daemon's backoff (at once on the
/// next URL when the server of one failed), and is closed as soon as it is not. ``onOpenChanged`` hears each time it
/// opens or closes, ``onEvent`` what the server writes while it is open; both
/// run on the bus actor, in order. Nothing of a connection that was closed is
/// heard after ``onOpenChanged(false)``.
///
/// It lives on the bus actor, with the ``UpstreamService`` it serves: whether
/// it is wanted follows D-Bus property writes, and what it hears becomes
/// D-Bus signals and property changes, each in order with the calls, and
/// without a hop. The connection itself (``Connect``) runs off the actor.
@BusActor
final class DirectChannel {
    /// Makes one connection to `server` and serves it until it ends: calls
    /// `opened` once the socket is open, writes each request of `requests`,
    /// hands each event to `received`, in order.
    typealias Connect = @Sendable (_ server: ServerClient, _ requests: AsyncStream<ChannelRequest>,
                                   _ opened: @escaping @Sendable () async -> Void,
                                   _ received: @escaping @Sendable (ChannelEvent) async -> Void) async throws -> Void

    /// The server broke the protocol (a frame that is not a ``ChannelEvent``):
    /// the connection is dropped, and the next one is made as after a failure
    /// to connect (on the next URL, or after the backoff), since the server
    /// may well do it again.
    struct ProtocolViolation: Error, CustomStringConvertible {
        var description: String
    }

    let account: Account
    private let connect: Connect
    private let endpoints: ServerEndpoints
    private let backoff: Backoff
    private let logger: Logger
    var onOpenChanged: (Bool) -> Void = { _ in }
    var onEvent: (ChannelEvent) -> Void = { _ in }
    /// The WebSocket is open: requests sent now are written.
    private(set) var isOpen = false
    private var task: Task<Void, Never>?
    private var outgoing: AsyncStream<ChannelRequest>.Continuation?
    /// Counts starts and stops: what a stopped run reports late is dropped.
    private var generation = 0

    init(account: Account, connect: @escaping Connect, endpoints: ServerEndpoints, backoff: Backoff, logger: Logger) {
        self.account = account
        self.connect = connect
        self.endpoints = endpoints
        self.backoff = backoff
        self.logger = logger
    }

    /// Connecting (or connected) while true; setting it false closes the channel at once.
    var wanted: Bool {
        get { task != nil }
        set {
            guard newValue != wanted else { return }
            generation += 1
            if newValue {
                let current = generation
                task = Task { await self.run(current) }
            } else {
                task?.cancel()
                task = nil
                ended(generation)
            }
        }
    }

    /// Writes `request` if the channel is open; otherwise it is dropped (the
    /// pending messages are all sent again when it opens).
    func send(_ request: ChannelRequest) {
        outgoing?.yield(request)
    }

    private func run(_ current: Int) async {
        await backoff.retry(over: endpoints) { endpoint in
            let (requests, sink) = AsyncStream.makeStream(of: ChannelRequest.self)
            var failure: (any Error)?
            do {
                try await connect(endpoint.client, requests, { await self.opened(sink, endpoint, current) },
                                  { event in await self.received(event, current) })
            } catch {
                failure = error
                if !Task.isCancelled {
                    logger.warning("direct channel: \(error)", metadata: ["account": "\(account)", "server": "\(endpoint.client.baseURL)"])
                }
            }
            sink.finish()
            return Backoff.Attempt(connected: ended(current) && !(failure is ProtocolViolation), failure: failure)
        }
    }

    private func opened(_ sink: AsyncStream<ChannelRequest>.Continuation, _ endpoint: ServerEndpoints.Endpoint, _ current: Int) async {
        await endpoints.succeeded(endpoint)
        guard current == generation else { return }
        outgoing = sink
        isOpen = true
        logger.info("direct channel open", metadata: ["account": "\(account)", "server": "\(endpoint.client.baseURL)"])
        onOpenChanged(true)
    }

    private func received(_ event: ChannelEvent, _ current: Int) {
        guard current == generation, isOpen else { return }
        onEvent(event)
    }

    /// The connection of `current` is over; says whether it had opened.
    @discardableResult
    private func ended(_ current: Int) -> Bool {
        guard current == generation else { return false }
        outgoing?.finish()
        outgoing = nil
        guard isOpen else { return false }
        isOpen = false
        logger.info("direct channel closed", metadata: ["account": "\(account)"])
        onOpenChanged(false)
        return true
    }

    /// The real connection: the device registration of the account (made
    /// once for the link and the channel, and good on every URL), then the
    /// WebSocket, at the device's home when a replica named one
    /// (``ServerEndpoints``): a replica's `307` is followed, and a home that
    /// fails before the socket opens gives way to `client`'s URL, each at
    /// once, up to ``ServerEndpoints/maxMoves`` times. A credential the server
    /// no longer accepts (``DeviceSocket`` finds out why an upgrade was
    /// refused) is forgotten, as the link does.
    nonisolated static func connector(account: Account, credentials: CredentialStore, endpoints: ServerEndpoints,
                                      logger: Logger) -> Connect {
        { client, requests, opened, received in
            let device = try await credentials.registration(account, with: client)
            var moves = 0
            let upgraded = Flag()
            while true {
                let home = await endpoints.homeClient(for: device.device) ?? client
                do {
                    try await run(device, at: home, requests: requests, logger: logger,
                                  opened: { upgraded.set(); await opened() }, received: received)
                    return
                } catch ServerCallError.moved(let base) where moves < ServerEndpoints.maxMoves && !upgraded.value {
                    moves += 1
                    await endpoints.moved(device.device, to: base, from: client)
                } catch where home.baseURL != client.baseURL && ServerEndpoints.isServerFailure(error) {
                    await endpoints.homeFailed(device.device)
                    guard moves < ServerEndpoints.maxMoves, !upgraded.value else { throw error }
                    moves += 1
                } catch ServerCallError.unauthenticated(let message) {
                    logger.warning("the server no longer knows this device (\(message)); registering again")
                    await credentials.forget(device, account: account)
                    throw ServerCallError.unauthenticated(message)
                }
            }
        }
    }

    /// The channel's WebSocket of `device` at `server`, until it closes.
    private nonisolated static func run(_ device: DeviceRegistration, at server: ServerClient, requests: AsyncStream<ChannelRequest>,
                                        logger: Logger, opened: @escaping @Sendable () async -> Void,
                                        received: @escaping @Sendable (ChannelEvent) async -> Void) async throws {
        try await DeviceSocket.run(server: server, path: APIPath.channel(device.device), device: device,
                                   maxFrameBytes: ChannelLimits.maximumFrameBytes, requests: requests, logger: logger,
                                   opened: opened) { text in
            let event: ChannelEvent
            do {
                event = try JSONDecoder().decode(ChannelEvent.self, from: Data(text.utf8))
            } catch {
                throw ProtocolViolation(description: "malformed frame from the server (\(error)): \(text.prefix(200))")
            }
            await received(event)
        }
    }
}

/// Whether a socket opened, set from its task and read after it.
private final class Flag: Sendable {
    private let state = Mutex(false)

    var value: Bool { state.withLock { $0 } }

    func set() { state.withLock { $0 = true } }
}
