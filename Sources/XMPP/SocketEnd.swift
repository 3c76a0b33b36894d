import NIOCore

/// The first handler of a connection's pipeline, at the socket's end of it:
/// it tells when the peer has sent its first bytes, and through it the stream
/// handler closes the socket at once.
///
/// A close from further in goes through the TLS handler, which first sends
/// its close_notify and then waits up to five seconds for the peer's: right
/// for an orderly end, but a peer that is shed or timed out would keep its
/// descriptor that long. A close from here reaches the socket directly.
final class SocketEnd: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private var context: ChannelHandlerContext?
    private var firstBytes: (() -> Void)?

    /// `firstBytes` is called once, when the first bytes arrive.
    init(firstBytes: @escaping () -> Void) {
        self.firstBytes = firstBytes
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if let firstBytes {
            self.firstBytes = nil
            firstBytes()
        }
        context.fireChannelRead(data)
    }

    /// Closes the socket; what was written and flushed before goes out first
    /// as far as the socket takes it without waiting.
    func closeNow() {
        context?.close(promise: nil)
    }
}
