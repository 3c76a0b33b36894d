import Foundation
import NIOCore
import NIOPosix
import ServerAPI
import Synchronization
import TestSupport

/// A TCP connection as an attacker holds it: raw bytes out, everything the
/// server sends kept until it closes. Closed by ``close()`` or by the server.
final class RawConnection: Sendable {
    private let channel: any Channel
    private let received: EventLoopFuture<ByteBuffer>
    /// Everything received so far, after each arrival.
    private let progress: Inbox<String>
    /// Everything received, once the connection closed.
    private let closed = Inbox<String>()

    private init(channel: any Channel, received: EventLoopFuture<ByteBuffer>, progress: Inbox<String>) {
        self.channel = channel
        self.received = received
        self.progress = progress
        received.whenComplete { [closed] result in
            if case .success(let buffer) = result { closed.put(String(buffer: buffer)) }
        }
    }

    /// Connects to 127.0.0.1:`port`, from `source` (another loopback address
    /// stands for another client).
    static func open(port: Int, from source: String = "127.0.0.1") async throws -> RawConnection {
        let promise = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: ByteBuffer.self)
        let progress = Inbox<String>()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(to: try SocketAddress(ipAddress: source, port: 0))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Collector(promise: promise, progress: progress))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        return RawConnection(channel: channel, received: promise.futureResult, progress: progress)
    }

    /// A connection a test lets go of is closed: the server under test
    /// waits for its connections when it shuts down.
    deinit {
        channel.close(promise: nil)
    }

    func send(_ text: String) async throws {
        try await channel.writeAndFlush(ByteBuffer(string: text))
    }

    func send(_ bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(ByteBuffer(bytes: bytes))
    }

    /// Whether the server has closed the connection (as far as this side knows).
    var isOpen: Bool { channel.isActive }

    /// What the server sent by the time it closed the connection; fails with
    /// ``TimedOut`` if it is still open after `seconds`.
    func closedByServer(within seconds: Double, _ what: String = "the server to close the connection") async throws -> String {
        try await closed.first(within: seconds, what) { _ in true }
    }

    /// The `count`th response on the connection (1 is the first), once it has
    /// arrived whole; the connection may stay open.
    func response(_ count: Int = 1, within seconds: Double = 10) async throws -> RawResponse {
        let text = try await progress.first(within: seconds, "response \(count)") { RawResponse.all(in: $0).count >= count }
        return RawResponse.all(in: text)[count - 1]
    }

    /// Waits until `count` of `connections` are closed by the server; fails
    /// with ``TimedOut`` after `seconds`.
    static func closedByServer(count: Int, of connections: [RawConnection], within seconds: Double) async throws {
        let closures = Inbox<Int>()
        let closed = Mutex(0)
        for connection in connections {
            connection.received.whenComplete { _ in
                closures.put(closed.withLock { count in
                    count += 1
                    return count
                })
            }
        }
        _ = try await closures.first(within: seconds, "\(count) connections to be closed by the server") { $0 >= count }
    }

    func close() async {
        try? await channel.close()
    }

    private final class Collector: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer

        private let promise: EventLoopPromise<ByteBuffer>
        private let progress: Inbox<String>
        private var buffer = ByteBuffer()

        init(promise: EventLoopPromise<ByteBuffer>, progress: Inbox<String>) {
            self.promise = promise
            self.progress = progress
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var part = unwrapInboundIn(data)
            buffer.writeBuffer(&part)
            progress.put(String(buffer: buffer))
        }

        func channelInactive(context: ChannelHandlerContext) {
            promise.succeed(buffer)
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            // A reset: what came before it is still the answer.
            context.close(promise: nil)
        }
    }
}

/// An HTTP response as read off a raw connection.
struct RawResponse: Sendable {
    let status: Int
    let headers: [String: String]
    let body: String

    /// The whole responses at the start of `text`, in order (each with a
    /// `Content-Length`, as the server writes them).
    static func all(in text: String) -> [RawResponse] {
        var responses: [RawResponse] = []
        var rest = Substring(text)
        while let split = rest.range(of: "\r\n\r\n") {
            let lines = rest[..<split.lowerBound].components(separatedBy: "\r\n")
            let statusParts = lines[0].split(separator: " ")
            guard statusParts.count >= 2, let status = Int(statusParts[1]) else { break }
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            let length = Int(headers["content-length"] ?? "0") ?? 0
            let bodyBytes = rest[split.upperBound...].utf8
            guard bodyBytes.count >= length else { break }
            let bodyEnd = bodyBytes.index(bodyBytes.startIndex, offsetBy: length)
            responses.append(RawResponse(status: status, headers: headers,
                                         body: String(decoding: bodyBytes[..<bodyEnd], as: UTF8.self)))
            rest = rest[bodyEnd...]
        }
        return responses
    }

    /// The body as the API's error, if it is one.
    var error: APIError? { try? JSONDecoder().decode(APIError.self, from: Data(body.utf8)) }
}
