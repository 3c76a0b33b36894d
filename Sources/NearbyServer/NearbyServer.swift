import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOSSL
import SummarisedLog
import NearbyCore
import ServiceLifecycle
import Synchronization

/// A whole nearby-server: the service over its storage, served over HTTP and
/// WebSocket, with a periodic sweep for what expires.
public struct NearbyServer: Sendable {
    public let service: NearbyService
    /// The HTTP connections open, with their limits (`[http]`).
    let connections: ConnectionRegistry
    /// What the API is served over TLS with; nil for plain HTTP.
    let tls: NIOSSLContext?

    public var configuration: ServerConfiguration { service.configuration }

    /// Throws when `[http]`'s certificate or private key cannot be read or used.
    public init(service: NearbyService) throws {
        self.service = service
        let http = service.configuration.http
        connections = ConnectionRegistry(limits: .init(total: http.maxConnections, perAddress: http.maxConnectionsPerAddress,
                                                       perProject: http.websocketsPerProject))
        if let certificatePath = http.certificatePath, let privateKeyPath = http.privateKeyPath {
            tls = try TLSFiles.serverContext(certificatePath: certificatePath, privateKeyPath: privateKeyPath, section: "[http]")
        } else {
            tls = nil
        }
    }

    /// Opens the database the configuration names (creating a SQLite file
    /// when missing) and loads what it holds.
    public static func open(configuration: ServerConfiguration, clock: any WallClock = SystemWallClock(),
                            logger: Logger = Logger(label: "nearby-server")) async throws -> NearbyServer {
        let storage = try await configuration.openStorage()
        return try NearbyServer(service: try await NearbyService.start(storage: storage, configuration: configuration,
                                                                  clock: clock, logger: logger))
    }

    /// The application serving the API on the configured address.
    ///
    /// - Parameters:
    ///   - sweepInterval: how often expired publications, subscriptions and
    ///     stale sightings are removed; nil runs no sweeper (tests call
    ///     ``NearbyService/sweep()`` themselves).
    ///   - onListening: called once the socket is bound, with the real port
    ///     when port 0 was asked for.
    public func makeApplication(
        sweepInterval: Duration? = .seconds(1),
        onListening: @escaping @Sendable (ListenAddress) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let service = self.service
        let listen = configuration.listen
        let http = configuration.http
        let webSocket = HTTP1WebSocketUpgradeChannel.Configuration(
            // The guard holds heads to [http]'s limits before the parser sees
            // them; the parser's own are no tighter, a backstop.
            http1: HTTP1Channel.Configuration(httpDecoderConfiguration: .init(maxHeaderFieldSize: http.maxHeaderBytes,
                                                                              maxHeaderListSize: http.maxHeaderBytes)),
            ws: WebSocketServerConfiguration(
                // Clients' default (WSClient's too): larger events go out as
                // fragmented messages of frames this size.
                maxFrameSize: 1 << 14,
                // Finds half-open connections, whose sightings would otherwise linger.
                autoPing: .enabled(timePeriod: .seconds(30))
            )
        )
        let connections = self.connections
        let guardSettings = ConnectionGuard.Settings(http)
        let tls = self.tls
        let refusals = SummarisedLog(logger: service.logger)
        let server = HTTPServerBuilder { responder in
            GuardedChildChannel(
                inner: HTTP1WebSocketUpgradeChannel(responder: responder, configuration: webSocket) { head, channel, _ in
                    await DeviceSockets.shouldUpgrade(head, channel: channel, service: service, connections: connections)
                },
                registry: connections, settings: guardSettings, tls: tls, logger: service.logger, refusals: refusals)
        }
        return Application(
            router: HTTPAPI(service: service, connections: connections).makeRouter(),
            server: server,
            configuration: ApplicationConfiguration(address: .hostname(listen.host, port: listen.port),
                                                    serverName: "nearby-server"),
            services: sweepInterval.map { [SweepService(service: service, interval: $0)] } ?? [],
            onServerRunning: { channel in
                await onListening(ListenAddress(host: listen.host, port: channel.localAddress?.port ?? listen.port))
            },
            logger: service.logger
        )
    }

    /// Serves until SIGTERM or SIGINT, then shuts down gracefully: open
    /// streams are closed, requests in flight finish, application servers
    /// are told CONNECTION_DRAINING.
    ///
    /// - Parameters:
    ///   - onListening: as in ``makeApplication(sweepInterval:onListening:)``.
    ///   - onXMPPListening: called once the XMPP endpoint is listening (only
    ///     when `[xmpp]` has a certificate), with its real port.
    ///   - onShutdown: called when shutdown begins.
    ///   - onOverdue: called if the process is still shutting down
    ///     ``shutdownDeadline`` after it began; the command exits there.
    public func run(onListening: @escaping @Sendable (ListenAddress) async -> Void,
                    onXMPPListening: @escaping @Sendable (ListenAddress) async -> Void = { _ in },
                    onShutdown: @escaping @Sendable () -> Void,
                    onOverdue: @escaping @Sendable () -> Void = {}) async throws {
        let (ports, port) = AsyncStream.makeStream(of: Int.self)
        let application = makeApplication(onListening: { address in
            port.yield(address.port)
            port.finish()
            await onListening(address)
        })
        let xmpp: [any Service] = configuration.xmpp.isEnabled ? [XMPPEndpoint(service: service, onListening: onXMPPListening)] : []
        let server = self.configuration
        let partitions: [any Service] = service.partitions.map {
            [PartitionService(partitions: $0, configuration: server, ports: ports)]
        } ?? []
        let deadline = Mutex<ShutdownDeadline?>(nil)
        var configuration = ServiceGroupConfiguration(
            // In reverse order at shutdown: the partitions are given up first.
            services: [application] + xmpp + partitions + [ShutdownNotice(action: { [service] in
                deadline.withLock { $0 = ShutdownDeadline(after: Self.shutdownDeadline, expire: onOverdue) }
                service.beginStopping()
                onShutdown()
            })],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: service.logger
        )
        // A peer that never answers a close must not hold the process: what
        // is still running then is cancelled, and the deadline covers a part
        // that does not return when cancelled.
        configuration.maximumGracefulShutdownDuration = Self.gracefulShutdownDuration
        defer { deadline.withLock { $0?.cancel() } }
        try await ServiceGroup(configuration: configuration).run()
    }

    /// How long the graceful phase of a shutdown may take before what is
    /// still running is cancelled.
    static let gracefulShutdownDuration: Duration = .seconds(8)
    /// How long after SIGTERM a shutdown may take in all (nearby-server.md
    /// promises it).
    public static let shutdownDeadline: Duration = .seconds(10)
}

/// Calls ``NearbyService/sweep()`` every `interval` until shutdown.
struct SweepService: Service {
    let service: NearbyService
    let interval: Duration

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                while true {
                    try await Task.sleep(for: interval)
                    await service.sweep()
                }
            }
        } catch is CancellationError {
            // Shutdown: the sleep was cut short.
        }
    }
}

/// Runs the replica's partition rounds once it listens, as the URL it is
/// reached at.
private struct PartitionService: Service {
    let partitions: PartitionOwnership
    let configuration: ServerConfiguration
    let ports: AsyncStream<Int>

    func run() async throws {
        let ports = self.ports
        guard let port = await cancelWhenGracefulShutdown({ await ports.first { _ in true } }) else { return }
        await partitions.run(url: configuration.advertisedURL(port: port))
    }
}

/// Tells its action when graceful shutdown begins. Last in the group, so it
/// is the first to hear.
private struct ShutdownNotice: Service {
    let action: @Sendable () -> Void

    func run() async throws {
        try await gracefulShutdown()
        action()
    }
}
