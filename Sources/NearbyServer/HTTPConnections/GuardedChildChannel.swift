import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import SummarisedLog

/// A child channel of Hummingbird's (`inner`, the HTTP/1 channel with its
/// WebSocket upgrade) with a ``ConnectionGuard`` in front of everything but
/// TLS (when `[http]` has a certificate) and a load balancer's PROXY protocol
/// header (``ProxyHeaderHandler``, for connections from `[http]
/// proxy-protocol-from`), and its ``RequestObserver`` right after the HTTP
/// parser. The guard's header timeout runs from the
/// connection's start, so it bounds the TLS handshake too.
struct GuardedChildChannel<Inner: ServerChildChannel>: ServerChildChannel {
    typealias Value = Inner.Value

    let inner: Inner
    let registry: ConnectionRegistry
    let settings: ConnectionGuard.Settings
    let tls: NIOSSLContext?
    let logger: Logger
    /// Refused connections, logged a line a minute at most (shared by every connection).
    let refusals: SummarisedLog

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let proxied = settings.proxySources.contains(channel.remoteAddress)
        let connectionGuard = ConnectionGuard(registry: registry, settings: settings, logger: self.logger, refusals: refusals,
                                              awaitsProxyHeader: proxied)
        do {
            try channel.pipeline.syncOperations.addHandler(connectionGuard, position: .first)
            if let tls {
                try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls), position: .first)
            }
            if proxied {
                // Before TLS: the balancer sends the header before the client's first byte.
                try channel.pipeline.syncOperations.addHandler(
                    ProxyHeaderHandler(timeout: settings.headerTimeout, maxBytes: settings.maxHeadBytes, refusals: refusals),
                    position: .first)
            }
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        return inner.setup(channel: channel, logger: logger).assumeIsolated().flatMapThrowing { value in
            let parser = try channel.pipeline.syncOperations.handler(type: ByteToMessageHandler<HTTPRequestDecoder>.self)
            try channel.pipeline.syncOperations.addHandler(RequestObserver(guard: connectionGuard), position: .after(parser))
            return value
        }.nonisolated()
    }

    /// What the connection's handling logs is about its peer (an upgrade that
    /// fails because the TLS handshake did, which Hummingbird's WebSocket
    /// channel logs as an error): at debug. Requests are logged with the
    /// application's logger, not this one.
    func handle(value: Value, logger: Logger) async {
        await inner.handle(value: value, logger: logger.peerErrorsAtDebug)
    }
}
