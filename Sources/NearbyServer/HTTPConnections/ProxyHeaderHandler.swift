import NIOCore
import SummarisedLog

/// Told to the handlers after ``ProxyHeaderHandler`` once the connection's
/// PROXY protocol header is read: whose connection it is.
struct ProxiedClient: Sendable {
    let address: ClientAddress
}

/// The first handler of a connection from a load balancer listed in
/// `[http] proxy-protocol-from`, before TLS: reads the PROXY protocol
/// version 2 header (``ProxyProtocolHeader``) from the connection's first
/// bytes, tells the handlers after it whose connection it is
/// (``ProxiedClient``), passes on the bytes after the header and leaves the
/// pipeline. A connection whose header does not come whole within the
/// header timeout, or that is not a header this server takes, is closed
/// without an answer: what follows would be TLS or HTTP of unknown framing,
/// and only a misconfigured balancer sends it.
final class ProxyHeaderHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let timeout: TimeAmount
    private let maxBytes: Int
    private let refusals: SummarisedLog
    private var received: ByteBuffer?
    private var timer: Scheduled<Void>?
    private var done = false

    /// `maxBytes` bounds the header, TLVs included; `refusals` is the
    /// server's, shared by every connection.
    init(timeout: TimeAmount, maxBytes: Int, refusals: SummarisedLog) {
        self.timeout = timeout
        self.maxBytes = maxBytes
        self.refusals = refusals
    }

    func handlerAdded(context: ChannelHandlerContext) {
        timer = context.eventLoop.assumeIsolated().scheduleTask(in: timeout) { [self] in
            timer = nil
            refuse(context, "no whole PROXY protocol header within \(timeout.nanoseconds / 1_000_000_000) s")
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !done else { return context.fireChannelRead(data) }
        var bytes = unwrapInboundIn(data)
        if var held = received {
            held.writeBuffer(&bytes)
            bytes = held
        }
        switch ProxyProtocolHeader.parse(bytes.readableBytesView, maxBytes: maxBytes) {
        case .incomplete:
            received = bytes
        case .refused(let reason):
            refuse(context, reason)
        case .complete(let consumed, let client):
            done = true
            received = nil
            bytes.moveReaderIndex(forwardBy: consumed)
            context.fireUserInboundEventTriggered(ProxiedClient(address: client ?? ClientAddress(context.channel.remoteAddress)))
            if bytes.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(bytes)) }
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    private func refuse(_ context: ChannelHandlerContext, _ reason: String) {
        guard !done else { return }
        done = true
        received = nil
        let peer = ClientAddress(context.channel.remoteAddress)
        refusals.note("proxy header", "connection from a load balancer closed: \(reason) ([http] proxy-protocol-from lists \(peer))",
                      metadata: ["address": "\(peer)"])
        context.close(promise: nil)
    }
}
