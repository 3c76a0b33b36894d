import Logging
import NIOCore
import NIOPosix
import NIOSSL
import SummarisedLog
import Synchronization

/// Why ``XMPPServer/start()`` failed.
public enum XMPPServerError: Error, Sendable {
    /// ``XMPPServer/start()`` was already called.
    case alreadyStarted
}

/// An XMPP client-to-server endpoint in the shape of FCM's XMPP connection
/// server: TLS from the first byte (no STARTTLS), SASL PLAIN, resource binding,
/// then `<message>` stanzas to and from the ``XMPPService``, one
/// ``XMPPService/serve(_:)`` per bound stream.
public final class XMPPServer: Sendable {
    private let core: ServerCore
    private let channel = Mutex<(any Channel)?>(nil)
    private let started = Atomic(false)

    public init(configuration: XMPPServerConfiguration, service: any XMPPService, logger: Logger) {
        core = ServerCore(configuration: configuration, service: service, logger: logger)
    }

    /// Starts listening; returns the bound port.
    public func start() async throws -> Int {
        guard started.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else {
            throw XMPPServerError.alreadyStarted
        }
        let configuration = core.configuration
        let sslContext = try TLSServerContext.make(certificateChainPEM: configuration.certificateChainPEM,
                                                   privateKeyPEM: configuration.privateKeyPEM)
        let core = self.core
        // One event loop for the listener and all its connections: a connection
        // is set up, and admitted, in the order it was accepted, so the oldest is
        // the one that came first; and a flood of TLS handshakes takes one core
        // at most from the rest of the process.
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton.next())
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.so_keepalive), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try core.accept(channel, sslContext: sslContext) }
            }
            .bind(host: configuration.host, port: configuration.port).get()
        self.channel.withLock { $0 = channel }
        let port = channel.localAddress?.port ?? configuration.port
        core.logger.info("XMPP server listening", metadata: ["host": "\(configuration.host)", "port": "\(port)"])
        return port
    }

    /// Stops accepting connections and ends the streams not yet bound at once
    /// (`system-shutdown`); waits up to `gracePeriod` for the bound sessions to
    /// end on their own (the service's last stanzas and ``XMPPSession/close(_:)``),
    /// then ends those left with `system-shutdown`. Returns once every connection
    /// is closed and every ``XMPPService/serve(_:)`` has returned (those still
    /// running then are cancelled first).
    public func shutdown(gracePeriod: Duration) async {
        if let channel = channel.withLock({ $0 }) {
            try? await channel.close()
        }
        let connections = core.beginShutdown()
        for connection in connections { connection.endIfNegotiating() }
        let deadline = Task {
            try? await Task.sleep(for: gracePeriod)
            guard !Task.isCancelled else { return }
            for connection in connections { connection.end(.systemShutdown) }
        }
        for connection in connections { try? await connection.channel.closeFuture.get() }
        deadline.cancel()
        for task in core.remainingServeTasks() {
            task.cancel()
            await task.value
        }
        core.logger.info("XMPP server stopped")
    }
}

extension XMPPServer {
    /// Serves `channel` as a connection just accepted (counted, deadlines and
    /// all), but with no TLS handler: the caller plays its part, delivering
    /// plaintext and firing `TLSUserEvent.handshakeCompleted`. Call it on the
    /// channel's event loop; the server need not be started. For tests and the
    /// xmpp-fuzz harness, which feed the stream handler bytes directly.
    @_spi(Testing) public func serve(withoutTLS channel: any Channel) throws {
        try core.accept(channel, sslContext: nil)
    }

    /// What the server holds for its connections now: all zero once every
    /// connection has closed and every ``XMPPService/serve(_:)`` has returned.
    @_spi(Testing) public var holdings: XMPPServerHoldings { core.holdings }

    /// Returns once the server holds nothing for any connection
    /// (``holdings`` is ``XMPPServerHoldings/none``): by then every ended
    /// session's serving task has let go of it.
    @_spi(Testing) public func released() async { await core.released() }
}

/// What an ``XMPPServer`` holds for its connections (tests count it).
@_spi(Testing) public struct XMPPServerHoldings: Sendable, Equatable {
    /// Connections accepted and not yet closed.
    public var connections: Int
    /// Sessions whose ``XMPPService/serve(_:)`` has not yet returned.
    public var serving: Int
    /// Connections counted against the limits, not yet logged in and logged in.
    public var unauthenticated: Int
    public var authenticated: Int

    public static let none = XMPPServerHoldings(connections: 0, serving: 0, unauthenticated: 0, authenticated: 0)
}

/// What the server and its connections share: configuration, service, the
/// connections alive (for shutdown) and their admission.
final class ServerCore: Sendable {
    let configuration: XMPPServerConfiguration
    let service: any XMPPService
    let logger: Logger
    /// Logins refused at `maximumConnections`: a line a minute at most, with how many.
    let refusedLogins: SummarisedLog

    /// One accepted connection, for shutdown and for being displaced.
    struct Connection: Sendable {
        let channel: any Channel
        let handler: NIOLoopBound<XMPPStreamHandler>

        func endIfNegotiating() {
            handler.eventLoop.execute { [handler] in
                if handler.value.isNegotiating { _ = handler.value.closeStream(.systemShutdown, text: "the server is shutting down") }
            }
        }

        func end(_ error: StreamError) {
            handler.eventLoop.execute { [handler] in _ = handler.value.closeStream(error, text: "the server is shutting down") }
        }

        /// Closes it at once: another connection took its place, at `limit`.
        func displace(at limit: ConnectionAdmission<ObjectIdentifier>.Limit) {
            let setting = limit == .perGroup ? "max-unauthenticated-connections-per-address" : "max-unauthenticated-connections"
            handler.eventLoop.execute { [handler] in handler.value.displace(at: setting) }
        }
    }

    private struct State {
        var connections: [ObjectIdentifier: Connection] = [:]
        var admission: ConnectionAdmission<ObjectIdentifier>
        var serveTasks: [ObjectIdentifier: Task<Void, Never>] = [:]
        var shuttingDown = false
        /// Waiting for the server to hold nothing (``released()``).
        var releaseWaiters: [CheckedContinuation<Void, Never>] = []

        var holdsNothing: Bool {
            connections.isEmpty && serveTasks.isEmpty && admission.unauthenticatedCount == 0 && admission.authenticatedCount == 0
        }

        /// The waiters to resume, if this change left nothing held.
        mutating func takeReleaseWaiters() -> [CheckedContinuation<Void, Never>] {
            guard holdsNothing else { return [] }
            defer { releaseWaiters = [] }
            return releaseWaiters
        }
    }

    private let state: Mutex<State>

    init(configuration: XMPPServerConfiguration, service: any XMPPService, logger: Logger) {
        self.configuration = configuration
        self.service = service
        self.logger = logger
        refusedLogins = SummarisedLog(logger: logger)
        state = Mutex(State(admission: ConnectionAdmission(
            maximumAuthenticated: configuration.maximumConnections,
            maximumAuthenticatedPerTenant: configuration.maximumConnectionsPerUser,
            maximumUnauthenticated: configuration.maximumUnauthenticatedConnections,
            maximumUnauthenticatedPerGroup: configuration.maximumUnauthenticatedConnectionsPerAddress)))
    }

    /// Sets up an accepted connection's pipeline, displacing the slowest
    /// unauthenticated connection when a limit is reached; closes it when
    /// shutting down. On the channel's event loop. Without `sslContext` the
    /// pipeline has no TLS handler, for tests that play its part.
    func accept(_ channel: any Channel, sslContext: NIOSSLContext?) throws {
        let id = ObjectIdentifier(channel)
        let socket = SocketEnd { [self] in state.withLock { $0.admission.receivedFirstBytes(id) } }
        let handler = XMPPStreamHandler(core: self, socket: socket, eventLoop: channel.eventLoop, logger: logger)
        let connection = Connection(channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop))
        let group = PeerAddressGroup(channel.remoteAddress)
        let (accepted, displaced) = state.withLock { state -> (Bool, (Connection?, ConnectionAdmission<ObjectIdentifier>.Limit)?) in
            guard !state.shuttingDown else { return (false, nil) }
            state.connections[id] = connection
            return (true, state.admission.admit(id, from: group).map { (state.connections[$0.id], $0.limit) })
        }
        guard accepted else {
            channel.close(promise: nil)
            return
        }
        if let (displaced, limit) = displaced { displaced?.displace(at: limit) }
        channel.closeFuture.whenComplete { [self] _ in
            let waiters = state.withLock { state in
                state.connections[id] = nil
                state.admission.remove(id)
                return state.takeReleaseWaiters()
            }
            for waiter in waiters { waiter.resume() }
        }
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(socket)
        if let sslContext { try pipeline.addHandler(NIOSSLServerHandler(context: sslContext)) }
        try pipeline.addHandler(handler)
    }

    /// The connection `channel` finished its TLS handshake.
    func handshakeCompleted(_ channel: any Channel) {
        state.withLock { $0.admission.handshakeCompleted(ObjectIdentifier(channel)) }
    }

    /// The connection `channel` authenticated as `username` (a bare JID):
    /// whether it may go on.
    func authenticate(_ channel: any Channel, as username: String) -> ConnectionAdmission<ObjectIdentifier>.Authentication {
        state.withLock { $0.admission.authenticate(ObjectIdentifier(channel), tenant: username) }
    }

    /// Runs the service on a newly bound session; once `serve` returns, the
    /// stream is closed if it is not yet.
    func serve(_ session: XMPPSession) {
        let id = ObjectIdentifier(session)
        let service = self.service
        // Handed to the task, which lets go of it before it counts itself done.
        let handOff = SessionHandOff(session)
        state.withLock { state in
            state.serveTasks[id] = Task {
                if let session = handOff.take() {
                    await service.serve(session)
                    await session.close(nil)
                }
                let waiters = self.state.withLock { state in
                    state.serveTasks[id] = nil
                    return state.takeReleaseWaiters()
                }
                for waiter in waiters { waiter.resume() }
            }
        }
    }

    func released() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state in
                if state.holdsNothing { return true }
                state.releaseWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    func beginShutdown() -> [Connection] {
        state.withLock { state in
            state.shuttingDown = true
            return Array(state.connections.values)
        }
    }

    var holdings: XMPPServerHoldings {
        state.withLock { state in
            XMPPServerHoldings(connections: state.connections.count, serving: state.serveTasks.count,
                               unauthenticated: state.admission.unauthenticatedCount,
                               authenticated: state.admission.authenticatedCount)
        }
    }

    func remainingServeTasks() -> [Task<Void, Never>] {
        state.withLock { Array($0.serveTasks.values) }
    }
}

/// A session handed to its serving task, which takes it: the task's closure
/// then holds only this, and the session goes when the task lets go of it.
private final class SessionHandOff: Sendable {
    private let session: Mutex<XMPPSession?>

    init(_ session: XMPPSession) { self.session = Mutex(session) }

    func take() -> XMPPSession? { session.withLock { $0.take() } }
}
