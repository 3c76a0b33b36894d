import Foundation
import Logging
import ServiceLifecycle
import XMPP

/// The XMPP endpoint as a service of the server's group: listens until
/// graceful shutdown, then tells every connection CONNECTION_DRAINING and
/// gives the application servers a moment to take their last acks before the
/// streams close.
struct XMPPEndpoint: Service {
    let service: NearbyService
    let onListening: @Sendable (ListenAddress) async -> Void
    /// How long connections may go on after CONNECTION_DRAINING.
    static let drainingPeriod: Duration = .seconds(3)

    func run() async throws {
        let settings = service.configuration.xmpp
        guard let certificatePath = settings.certificatePath, let privateKeyPath = settings.privateKeyPath else { return }
        let configuration = XMPPServerConfiguration(
            host: settings.listen.host, port: settings.listen.port, domain: settings.domain,
            certificateChainPEM: try TLSFiles.read(certificatePath, "[xmpp] certificate"),
            privateKeyPEM: try TLSFiles.read(privateKeyPath, "[xmpp] private-key"),
            maximumStanzaBytes: settings.maxStanzaBytes, maximumConnections: settings.maxConnections,
            maximumConnectionsPerUser: min(settings.maxConnectionsPerProject, settings.maxConnections),
            maximumUnauthenticatedConnections: settings.maxUnauthenticatedConnections,
            maximumUnauthenticatedConnectionsPerAddress: settings.maxUnauthenticatedConnectionsPerAddress,
            tlsHandshakeTimeout: .seconds(settings.tlsHandshakeTimeoutSeconds),
            negotiationTimeout: .seconds(settings.negotiationTimeoutSeconds),
            idleTimeout: .seconds(settings.idleTimeoutSeconds), pingTimeout: .seconds(settings.pingTimeoutSeconds))
        let server = XMPPServer(configuration: configuration,
                                service: CCSService(hub: service.connections, storage: service.storage, domain: settings.domain,
                                                    logger: service.logger),
                                logger: service.logger)
        let port = try await server.start()
        await onListening(ListenAddress(host: settings.listen.host, port: port))
        try? await gracefulShutdown()
        await service.connections.drain()
        await server.shutdown(gracePeriod: Self.drainingPeriod)
    }
}
