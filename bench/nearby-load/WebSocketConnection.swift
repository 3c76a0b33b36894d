import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket

/// A device's WebSocket to the server (its stream, its direct channel): text
/// frames out, masked as a client's must be; text frames in, handed to
/// `received` on the connection's event loop; pings answered; `ended` called
/// once with the close code when it ends (-1 when it ended without one).
final class WebSocketConnection: Sendable {
    private let channel: any Channel

    private init(channel: any Channel) {
        self.channel = channel
    }

    var isOpen: Bool { channel.isActive }

    /// Why a WebSocket could not be opened.
    enum Failure: Error, CustomStringConvertible {
        /// The server answered the upgrade with something other than 101.
        case refused

        var description: String { "refused" }
    }

    /// Opens the WebSocket at `path` of `host`:`port` from `local`, with the device's bearer `secret`.
    static func connect(_ group: any EventLoopGroup, host: String, port: Int, path: String, secret: String, from local: String?,
                        received: @escaping @Sendable (ByteBuffer) -> Void,
                        ended: @escaping @Sendable (Int) -> Void) async throws -> WebSocketConnection {
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: path)
        head.headers.add(name: "Host", value: "\(host):\(port)")
        head.headers.add(name: "Authorization", value: "Bearer \(secret)")
        head.headers.add(name: "Content-Length", value: "0")
        let requestHead = head
        var bootstrap = ClientBootstrap(group: group)
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(10))
        if let local { bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: local, port: 0)) }
        let upgraded: EventLoopFuture<(any Channel)?> = try await bootstrap.connect(host: host, port: port) { channel in
            channel.eventLoop.makeCompletedFuture {
                let upgrader = NIOTypedWebSocketClientUpgrader<(any Channel)?>(maxFrameSize: 1 << 20) { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(FrameHandler(received: received, ended: ended))
                        return channel
                    }
                }
                let configuration = NIOTypedHTTPClientUpgradeConfiguration<(any Channel)?>(
                    upgradeRequestHead: requestHead, upgraders: [upgrader],
                    notUpgradingCompletionHandler: { channel in
                        channel.close(promise: nil)
                        return channel.eventLoop.makeSucceededFuture(nil)
                    })
                return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                    configuration: .init(upgradeConfiguration: configuration))
            }
        }
        guard let channel = try await upgraded.get() else { throw Failure.refused }
        return WebSocketConnection(channel: channel)
    }

    /// Sends one text frame.
    func send(_ text: ByteBuffer) {
        channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: text), promise: nil)
    }

    /// Closes the WebSocket (code 1000) and returns once the connection is
    /// closed, or after `within`, when it is closed without waiting more.
    func close(within timeout: TimeAmount = .seconds(5)) async {
        guard channel.isActive else { return }
        var code = channel.allocator.buffer(capacity: 2)
        code.write(webSocketErrorCode: .normalClosure)
        channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: code), promise: nil)
        let channel = self.channel
        let timer = channel.eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        try? await channel.closeFuture.get()
        timer.cancel()
    }
}

/// The frames of one upgraded connection.
private final class FrameHandler: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let received: @Sendable (ByteBuffer) -> Void
    private let ended: @Sendable (Int) -> Void
    private var code: Int?
    /// Whether a close frame went out: one that comes in then is the answer, not answered again.
    private var sentClose = false

    init(received: @escaping @Sendable (ByteBuffer) -> Void, ended: @escaping @Sendable (Int) -> Void) {
        self.received = received
        self.ended = ended
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text:
            received(frame.unmaskedData)
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(),
                                                                 data: frame.unmaskedData)), promise: nil)
        case .connectionClose:
            var data = frame.unmaskedData
            let received = data.readInteger(as: UInt16.self).map(Int.init) ?? 1005
            code = code ?? received
            if !sentClose {
                // The close answered, as the protocol asks, then the connection ended.
                var echo = context.channel.allocator.buffer(capacity: 2)
                echo.writeInteger(UInt16(received))
                context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(),
                                                                     data: echo)), promise: nil)
            }
            context.close(promise: nil)
        default:
            break
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let frame = unwrapOutboundIn(data)
        if frame.opcode == .connectionClose {
            guard !sentClose else {
                promise?.succeed()
                return
            }
            sentClose = true
        }
        context.write(data, promise: promise)
    }

    func channelInactive(context: ChannelHandlerContext) {
        ended(code ?? -1)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
