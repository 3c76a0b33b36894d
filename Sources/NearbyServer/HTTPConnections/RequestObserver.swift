import NIOCore
import NIOHTTP1

/// Sits right after the HTTP parser (and so before the encoder, for what goes
/// out) and tells the connection's
/// ``ConnectionGuard`` what they see: each request head decoded, each
/// response begun and finished, the switch to a WebSocket, and parse errors,
/// which it answers through the guard instead of letting them reach the
/// application (which would leave a first request's connection open with no
/// answer). It leaves the pipeline with the HTTP handlers when the
/// connection becomes a WebSocket.
final class RequestObserver: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private let connectionGuard: ConnectionGuard

    /// `connectionGuard` is the guard of the same channel, so on the same event loop.
    init(guard connectionGuard: ConnectionGuard) {
        self.connectionGuard = connectionGuard
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data) {
            connectionGuard.requestHeadDecoded(head)
        }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let error = error as? HTTPParserError else {
            context.fireErrorCaught(error)
            return
        }
        connectionGuard.parseFailed(error)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let head) where head.status == .switchingProtocols:
            connectionGuard.upgraded()
            // WebSocket frames follow, and this handler speaks HTTP only: it
            // leaves once the answer is written, before whoever wrote it
            // (the upgrade) goes on, but not in the middle of the write.
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.assumeIsolated().whenComplete { _ in
                context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            }
            written.futureResult.cascade(to: promise)
            context.write(data, promise: written)
        case .head(let head):
            // An interim response (100 Continue) is not the answer.
            if head.status.code >= 200 { connectionGuard.responseStarted() }
            context.write(data, promise: promise)
        case .body:
            context.write(data, promise: promise)
        case .end:
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.cascade(to: promise)
            context.write(data, promise: written)
            connectionGuard.responseEnded(written: written.futureResult)
        }
    }
}
