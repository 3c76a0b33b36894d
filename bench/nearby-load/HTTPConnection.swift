import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A server's answer to one request, its body whole.
struct HTTPAnswer: Sendable {
    let status: Int
    let headers: HTTPHeaders
    let body: ByteBuffer
}

/// Why a request got no answer.
enum HTTPFailure: Error, CustomStringConvertible {
    /// The connection closed (or was closed) before the answer came.
    case connectionClosed
    /// No answer within the request's time limit; its connection was closed.
    case timedOut

    var description: String {
        switch self {
        case .connectionClosed: "ConnectionClosed"
        case .timedOut: "TimedOut"
        }
    }
}

/// One kept-alive HTTP/1.1 connection to a server, one request at a time
/// (no pipelining), as a device's HTTP stack keeps one.
final class HTTPConnection: Sendable {
    let channel: any Channel
    private let host: String

    private init(channel: any Channel, host: String) {
        self.channel = channel
        self.host = host
    }

    var isOpen: Bool { channel.isActive }

    /// Connects to `host`:`port`, from `local` when given (a source address of its own).
    static func connect(_ group: any EventLoopGroup, host: String, port: Int, from local: String?) async throws -> HTTPConnection {
        var bootstrap = ClientBootstrap(group: group)
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(10))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(ExchangeHandler())
                }
            }
        if let local { bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: local, port: 0)) }
        let channel = try await bootstrap.connect(host: host, port: port).get()
        return HTTPConnection(channel: channel, host: "\(host):\(port)")
    }

    /// Sends one request and returns its answer; the connection is closed
    /// when none comes within `timeout`.
    func request(_ method: HTTPMethod, _ path: String, headers: [(String, String)] = [], body: ByteBuffer? = nil,
                 timeout: TimeAmount = .seconds(30)) async throws -> HTTPAnswer {
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
        head.headers.add(name: "Host", value: host)
        for (name, value) in headers { head.headers.add(name: name, value: value) }
        if let body {
            head.headers.add(name: "Content-Type", value: "application/json")
            head.headers.add(name: "Content-Length", value: "\(body.readableBytes)")
        } else if method == .POST || method == .PUT {
            head.headers.add(name: "Content-Length", value: "0")
        }
        let promise = channel.eventLoop.makePromise(of: HTTPAnswer.self)
        let channel = self.channel
        let timer = channel.eventLoop.scheduleTask(in: timeout) {
            channel.pipeline.fireErrorCaught(HTTPFailure.timedOut)
        }
        channel.writeAndFlush(Exchange(head: head, body: body, promise: promise), promise: nil)
        defer { timer.cancel() }
        return try await promise.futureResult.get()
    }

    func close() {
        channel.close(promise: nil)
    }
}

/// A request on its way to the connection's handler, with the promise its answer fulfils.
private struct Exchange: Sendable {
    let head: HTTPRequestHead
    let body: ByteBuffer?
    let promise: EventLoopPromise<HTTPAnswer>
}

/// Writes each exchange's request and fulfils its promise with the answer
/// that comes back, in order; fails every promise still waiting when the
/// connection ends or fails (and closes it then).
private final class ExchangeHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundIn = Exchange
    typealias OutboundOut = HTTPClientRequestPart

    private var waiting = CircularBuffer<EventLoopPromise<HTTPAnswer>>()
    private var head: HTTPResponseHead?
    private var body: ByteBuffer?
    private var closed = false

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let exchange = unwrapOutboundIn(data)
        guard !closed, context.channel.isActive else {
            exchange.promise.fail(HTTPFailure.connectionClosed)
            promise?.fail(HTTPFailure.connectionClosed)
            return
        }
        waiting.append(exchange.promise)
        context.write(wrapOutboundOut(.head(exchange.head)), promise: nil)
        if let body = exchange.body { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        context.write(wrapOutboundOut(.end(nil)), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body = nil
        case .body(var part):
            if body == nil { body = part } else { body!.writeBuffer(&part) }
        case .end:
            guard let head, !waiting.isEmpty else { return }
            self.head = nil
            let answer = HTTPAnswer(status: Int(head.status.code), headers: head.headers, body: body ?? ByteBuffer())
            body = nil
            waiting.removeFirst().succeed(answer)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(HTTPFailure.connectionClosed)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll(error)
        context.close(promise: nil)
    }

    private func failAll(_ error: any Error) {
        closed = true
        while let promise = waiting.popFirst() { promise.fail(error) }
    }
}

/// Kept-alive connections from one source address, at most `limit` to each
/// server at once (below the server's `max-connections-per-address`): a
/// request takes an idle one, or opens one, or waits for one to come back.
final class HTTPPool: Sendable {
    struct Endpoint: Hashable, Sendable {
        let host: String
        let port: Int
    }

    private struct State {
        var idle: [Endpoint: [HTTPConnection]] = [:]
        var open: [Endpoint: Int] = [:]
        var waiters: [Endpoint: [CheckedContinuation<Next, Never>]] = [:]
        var closed = false
    }

    private let group: any EventLoopGroup
    private let local: String?
    private let limit: Int
    private let state = Mutex(State())

    init(group: any EventLoopGroup, from local: String?, limit: Int) {
        self.group = group
        self.local = local
        self.limit = limit
    }

    /// Sends a request to the server of `base` (`http://host:port`) on one of the pool's connections.
    func request(_ base: String, _ method: HTTPMethod, _ path: String, headers: [(String, String)] = [],
                 body: ByteBuffer? = nil) async throws -> HTTPAnswer {
        let endpoint = try Self.endpoint(base)
        let connection = try await checkOut(endpoint)
        do {
            let answer = try await connection.request(method, path, headers: headers, body: body)
            checkIn(connection, endpoint)
            return answer
        } catch {
            connection.close()
            checkIn(nil, endpoint)
            throw error
        }
    }

    /// What a request does next for a connection.
    private enum Next: Sendable {
        case use(HTTPConnection)
        case open
        /// Look again: a place came free (a connection closed).
        case again
    }

    private func checkOut(_ endpoint: Endpoint) async throws -> HTTPConnection {
        while true {
            // Decided, or queued as a waiter, under one lock: a connection returned meanwhile is not missed.
            let next: Next = await withCheckedContinuation { continuation in
                let decided: Next? = state.withLock { state in
                    while let connection = state.idle[endpoint]?.popLast() {
                        if connection.isOpen { return .use(connection) }
                        state.open[endpoint, default: 1] -= 1
                    }
                    if state.open[endpoint, default: 0] < limit {
                        state.open[endpoint, default: 0] += 1
                        return .open
                    }
                    state.waiters[endpoint, default: []].append(continuation)
                    return nil
                }
                if let decided { continuation.resume(returning: decided) }
            }
            switch next {
            case .use(let connection):
                return connection
            case .open:
                do {
                    return try await HTTPConnection.connect(group, host: endpoint.host, port: endpoint.port, from: local)
                } catch {
                    checkIn(nil, endpoint)
                    throw error
                }
            case .again:
                continue
            }
        }
    }

    /// Returns a connection after its request (nil: it closed, its place is
    /// free): to the first request waiting, or to the idle ones.
    private func checkIn(_ connection: HTTPConnection?, _ endpoint: Endpoint) {
        let connection = connection.flatMap { $0.isOpen ? $0 : nil }
        let waiter: CheckedContinuation<Next, Never>? = state.withLock { state in
            if connection == nil { state.open[endpoint, default: 1] -= 1 }
            if var waiters = state.waiters[endpoint], !waiters.isEmpty {
                let first = waiters.removeFirst()
                state.waiters[endpoint] = waiters
                return first
            }
            if let connection { state.idle[endpoint, default: []].append(connection) }
            return nil
        }
        waiter?.resume(returning: connection.map(Next.use) ?? .again)
    }

    /// Closes every idle connection.
    func close() {
        let idle = state.withLock { state in
            defer { state.idle = [:] }
            return state.idle.values.flatMap { $0 }
        }
        for connection in idle { connection.close() }
    }

    /// `http://host:port` (no path) as an endpoint.
    static func endpoint(_ base: String) throws -> Endpoint {
        guard base.hasPrefix("http://") else { throw URLError(base) }
        let rest = base.dropFirst("http://".count)
        guard let colon = rest.lastIndex(of: ":"), let port = Int(rest[rest.index(after: colon)...]) else { throw URLError(base) }
        return Endpoint(host: String(rest[..<colon]), port: port)
    }

    struct URLError: Error, CustomStringConvertible {
        let url: String
        init(_ url: String) { self.url = url }
        var description: String { "not an http://HOST:PORT URL: \(url)" }
    }
}
