import NIOCore
import NIOExtras

/// A stream socket carrying one protocol line per frame, for both ends of the air.
typealias LineChannel = NIOAsyncChannel<ByteBuffer, ByteBuffer>

enum LineFraming {
    /// Lines longer than this close the connection: the protocol's lines are small.
    static let maximumLineBytes = 64 * 1024

    /// Sets up newline framing on a fresh channel and wraps it for async use.
    static func wrap(_ channel: any Channel) -> EventLoopFuture<LineChannel> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(
                ByteToMessageHandler(LineBasedFrameDecoder(), maximumBufferSize: maximumLineBytes))
            return try LineChannel(wrappingChannelSynchronously: channel)
        }
    }
}
