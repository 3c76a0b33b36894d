import Foundation
import Logging
import NIOCore
import NIOHTTP1
import ServerAPI
import SummarisedLog

/// The first handler of every connection to the HTTP API, on its raw bytes:
/// it takes the connection's slot in the ``ConnectionRegistry`` (or refuses
/// it), holds each request head to the request-line and head limits before
/// the HTTP parser sees it, and closes a connection that is too slow: one
/// that sends no whole head in time, or whose request is not answered in
/// time. What it refuses it answers itself, with the API's error body, and
/// closes.
///
/// To know where each head begins it follows the requests the HTTP parser
/// decodes (``RequestObserver`` tells it each head and each finished
/// response): after a head, a body of the length the head declared, or a
/// chunked body followed chunk by chunk, then the next head. What it cannot
/// follow (an upgrade, a body the parser will refuse) is passed on as it
/// comes, and the connection closed once its requests are answered.
final class ConnectionGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    struct Settings: Sendable {
        var headerTimeout: TimeAmount
        var idleTimeout: TimeAmount
        var requestTimeout: TimeAmount
        var maxRequestLineBytes: Int
        var maxHeadBytes: Int
        /// The load balancers whose connections begin with a PROXY protocol
        /// header (``ProxyHeaderHandler``).
        var proxySources = AddressPrefixes.none
    }

    /// What the bytes arriving next are.
    private enum Framing {
        /// A request head, followed by the scanner.
        case head(RequestHeadScanner)
        /// A whole head went to the parser, which tells what follows it.
        case awaitingParser
        /// So many bytes of a body.
        case body(remaining: Int)
        /// A chunked body.
        case chunked(ChunkedBodyScanner)
        /// Not known (an upgrade, a body the parser refuses): passed on as
        /// they come; the connection closes once its requests are answered.
        case unframed
    }

    private let registry: ConnectionRegistry
    private let settings: Settings
    private let logger: Logger
    /// Connections refused at a limit: a line a minute at most, with how many.
    private let refusals: SummarisedLog
    /// This handler's place in the pipeline, while it is in one: the
    /// observer's calls come from a handler further on, which must not write
    /// raw bytes through the HTTP encoder.
    private var context: ChannelHandlerContext?
    private var id: ConnectionRegistry.ID?
    /// Whose connection this is: its peer's address, or the client a load
    /// balancer's PROXY protocol header names; nil until known.
    private var client: ClientAddress?
    /// Whether a ``ProxyHeaderHandler`` before this one is to say who the
    /// client is: the connection is admitted once it has.
    private let awaitsProxyHeader: Bool
    private var framing: Framing
    /// Requests whose head the parser decoded and whose response is not finished.
    private var outstanding = 0
    /// Whether the oldest outstanding request has had any of its response written.
    private var responding = false
    private var isWebSocket = false
    /// An answer that ends the connection once the requests before it are answered.
    private var pendingRefusal: CannedResponse?
    private var isClosing = false
    private var timer: Scheduled<Void>?
    private var deadline: NIODeadline?

    /// `refusals` is the server's, shared by every connection's guard.
    init(registry: ConnectionRegistry, settings: Settings, logger: Logger, refusals: SummarisedLog, awaitsProxyHeader: Bool = false) {
        self.registry = registry
        self.awaitsProxyHeader = awaitsProxyHeader
        self.settings = settings
        self.logger = logger
        self.refusals = refusals
        framing = .head(RequestHeadScanner(maxRequestLineBytes: settings.maxRequestLineBytes, maxHeadBytes: settings.maxHeadBytes))
    }

    // MARK: Lifecycle

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if context.channel.isActive && !awaitsProxyHeader { admit(context, as: ClientAddress(context.channel.remoteAddress)) }
    }

    func channelActive(context: ChannelHandlerContext) {
        if !awaitsProxyHeader { admit(context, as: ClientAddress(context.channel.remoteAddress)) }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        release()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        release()
        self.context = nil
    }

    private func admit(_ context: ChannelHandlerContext, as address: ClientAddress) {
        guard id == nil, !isClosing else { return }
        client = address
        switch registry.admit(context.channel, from: address) {
        case .admitted(let id, let evicted):
            self.id = id
            if let evicted {
                logger.debug("closing the oldest idle connection to make room", metadata: ["address": "\(address)"])
                evicted.close(promise: nil)
            }
            arm(context, in: settings.headerTimeout)
        case .refused(let refusal):
            refusals.note("\(refusal)", "connection refused", metadata: ["address": "\(address)", "reason": "\(refusal)"])
            end(context, with: .tooManyConnections(refusal))
        }
    }

    private func release() {
        timer?.cancel()
        timer = nil
        if let id { registry.remove(id) }
        id = nil
    }

    // MARK: Bytes in

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !isClosing, pendingRefusal == nil else { return }
        var buffer = unwrapInboundIn(data)
        while buffer.readableBytes > 0 {
            switch framing {
            case .head(var scanner):
                let wasStarted = scanner.hasStarted
                let verdict = scanner.scan(buffer.readableBytesView)
                switch verdict {
                case .incomplete:
                    framing = .head(scanner)
                    if !wasStarted && scanner.hasStarted { headStarted(context) }
                    context.fireChannelRead(wrapInboundOut(buffer))
                    return
                case .complete(let consumed):
                    framing = .awaitingParser
                    // The parser decodes the head as it goes by, and the observer says what follows it.
                    context.fireChannelRead(wrapInboundOut(buffer.readSlice(length: consumed)!))
                    if case .awaitingParser = framing {
                        // Nothing was decoded (a parse error, handled by then): stop following.
                        framing = .unframed
                    }
                case .requestLineTooLong:
                    refuse(context, with: .requestLineTooLong(settings.maxRequestLineBytes))
                    return
                case .headTooLarge:
                    refuse(context, with: .headTooLarge(settings.maxHeadBytes))
                    return
                }
            case .body(let remaining):
                let length = min(remaining, buffer.readableBytes)
                framing = length == remaining ? .head(newScanner()) : .body(remaining: remaining - length)
                context.fireChannelRead(wrapInboundOut(buffer.readSlice(length: length)!))
            case .chunked(var scanner):
                switch scanner.scan(buffer.readableBytesView) {
                case .incomplete:
                    framing = .chunked(scanner)
                    context.fireChannelRead(wrapInboundOut(buffer))
                    return
                case .complete(let consumed):
                    framing = .head(newScanner())
                    context.fireChannelRead(wrapInboundOut(buffer.readSlice(length: consumed)!))
                case .malformed:
                    framing = .unframed
                }
            case .awaitingParser, .unframed:
                context.fireChannelRead(wrapInboundOut(buffer))
                return
            }
            // A refusal or a close may have come from the parser meanwhile.
            guard !isClosing, pendingRefusal == nil else { return }
        }
    }

    private func newScanner() -> RequestHeadScanner {
        RequestHeadScanner(maxRequestLineBytes: settings.maxRequestLineBytes, maxHeadBytes: settings.maxHeadBytes)
    }

    /// The first byte of a head arrived on an idle connection: the head must
    /// be whole within the header timeout, if the idle one is not sooner over.
    private func headStarted(_ context: ChannelHandlerContext) {
        guard outstanding == 0 else { return }
        let headDeadline = context.eventLoop.now + settings.headerTimeout
        if let deadline, deadline <= headDeadline { return }
        arm(context, at: headDeadline)
    }

    // MARK: What the parser and the responses say (from RequestObserver)

    /// The parser decoded a request head.
    func requestHeadDecoded(_ head: HTTPRequestHead) {
        guard let context else { return }
        if case .awaitingParser = framing {
            framing = framing(after: head)
        }
        outstanding += 1
        guard outstanding == 1 else { return }
        responding = false
        if let id, !registry.setBusy(id) {
            // Evicted while its head arrived.
            close(context)
            return
        }
        arm(context, in: settings.requestTimeout)
    }

    /// What follows `head`: its body, then the next head.
    private func framing(after head: HTTPRequestHead) -> Framing {
        // After an upgrade HTTP ends.
        if head.headers.contains(name: "upgrade") || head.method == .CONNECT { return .unframed }
        let codings = head.headers[canonicalForm: "transfer-encoding"]
        if !codings.isEmpty {
            // Chunked must be the last coding of a request (RFC 9112 §6.1); else the parser refuses it.
            guard codings.last?.lowercased() == "chunked" else { return .unframed }
            return .chunked(ChunkedBodyScanner(maxLineBytes: settings.maxRequestLineBytes, maxTrailerBytes: settings.maxHeadBytes))
        }
        let lengths = head.headers["content-length"]
        guard let first = lengths.first else { return .head(newScanner()) }
        // The parser refuses anything else; then nothing follows anyway.
        guard lengths.allSatisfy({ $0 == first }), let length = Int(first), length >= 0 else { return .unframed }
        return length == 0 ? .head(newScanner()) : .body(remaining: length)
    }

    /// A response head went out.
    func responseStarted() {
        responding = true
    }

    /// A response was written whole (it is on its way: `written` completes
    /// once it is out).
    func responseEnded(written: EventLoopFuture<Void>) {
        guard let context, outstanding > 0 else { return }
        outstanding -= 1
        responding = false
        if outstanding > 0 {
            arm(context, in: settings.requestTimeout)
            return
        }
        if let refusal = pendingRefusal {
            end(context, with: refusal)
            return
        }
        if case .unframed = framing {
            // Where the next head begins is not known: this connection is done, once the answer is out.
            isClosing = true
            timer?.cancel()
            timer = nil
            written.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            return
        }
        if let id, !registry.setIdle(id) {
            close(context)
            return
        }
        arm(context, in: settings.idleTimeout)
        if case .head(let scanner) = framing, scanner.hasStarted { headStarted(context) }
    }

    /// The connection became a WebSocket: its own pings and limits hold from now on.
    func upgraded() {
        isWebSocket = true
        outstanding = 0
        framing = .unframed
        timer?.cancel()
        timer = nil
        deadline = nil
    }

    /// The parser could not read a request.
    func parseFailed(_ error: HTTPParserError) {
        guard let context else { return }
        refuse(context, with: error == .headerOverflow ? .headTooLarge(settings.maxHeadBytes) : .malformed(error))
    }

    // MARK: Events

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if awaitsProxyHeader, let proxied = event as? ProxiedClient {
            return admit(context, as: proxied.address)
        }
        // Graceful shutdown: a connection between requests has nothing to finish.
        if event is ChannelShouldQuiesceEvent, outstanding == 0, !isWebSocket, !headHasStarted {
            close(context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    private var headHasStarted: Bool {
        switch framing {
        case .head(let scanner): scanner.hasStarted
        case .awaitingParser, .body, .chunked, .unframed: true
        }
    }

    // MARK: Time

    private func clientDescription(_ context: ChannelHandlerContext) -> ClientAddress {
        client ?? ClientAddress(context.channel.remoteAddress)
    }

    private func arm(_ context: ChannelHandlerContext, in amount: TimeAmount) {
        arm(context, at: context.eventLoop.now + amount)
    }

    private func arm(_ context: ChannelHandlerContext, at deadline: NIODeadline) {
        timer?.cancel()
        self.deadline = deadline
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            timer = nil
            self.deadline = nil
            timedOut(context)
        }
    }

    private func timedOut(_ context: ChannelHandlerContext) {
        guard !isClosing, !isWebSocket else { return }
        if outstanding > 0 {
            // A request unanswered in time: its body did not come, or its response is not being read.
            logger.debug("request timed out", metadata: ["address": "\(clientDescription(context))"])
            if responding { close(context) } else { end(context, with: .requestTimeout(settings.requestTimeout)) }
        } else if headHasStarted {
            end(context, with: .requestTimeout(nil))
        } else {
            close(context)
        }
    }

    // MARK: Ending

    /// Answers `refusal` and closes, once the requests before it are answered.
    private func refuse(_ context: ChannelHandlerContext, with refusal: CannedResponse) {
        guard !isClosing, pendingRefusal == nil else { return }
        logger.debug("request refused", metadata: ["address": "\(clientDescription(context))",
                                                   "status": "\(refusal.status.code)"])
        if outstanding > 0 {
            pendingRefusal = refusal
        } else {
            end(context, with: refusal)
        }
    }

    private func end(_ context: ChannelHandlerContext, with response: CannedResponse) {
        guard !isClosing else { return }
        isClosing = true
        timer?.cancel()
        timer = nil
        context.writeAndFlush(wrapOutboundOut(response.bytes(allocator: context.channel.allocator)))
            .assumeIsolated()
            .whenComplete { _ in context.close(promise: nil) }
    }

    private func close(_ context: ChannelHandlerContext) {
        guard !isClosing else { return }
        isClosing = true
        timer?.cancel()
        timer = nil
        context.close(promise: nil)
    }
}

extension ConnectionGuard.Settings {
    init(_ http: ServerConfiguration.HTTP) {
        self.init(headerTimeout: .seconds(Int64(http.headerTimeoutSeconds)), idleTimeout: .seconds(Int64(http.idleTimeoutSeconds)),
                  requestTimeout: .seconds(Int64(http.requestTimeoutSeconds)), maxRequestLineBytes: http.maxRequestLineBytes,
                  maxHeadBytes: http.maxHeaderBytes,
                  // Checked when the configuration was validated.
                  proxySources: (try? AddressPrefixes(http.proxyProtocolFrom, what: "[http] proxy-protocol-from")) ?? .none)
    }
}

/// The answers the guard gives itself, before or instead of the application:
/// a whole HTTP/1.1 response with an ``APIError`` body and `Connection: close`.
enum CannedResponse: Equatable {
    case requestLineTooLong(Int)
    case headTooLarge(Int)
    case requestTimeout(TimeAmount?)
    case tooManyConnections(ConnectionRegistry.Refusal)
    case malformed(HTTPParserError)

    var status: HTTPResponseStatus {
        switch self {
        case .requestLineTooLong: .uriTooLong
        case .headTooLarge: .requestHeaderFieldsTooLarge
        case .requestTimeout: .requestTimeout
        case .tooManyConnections: .serviceUnavailable
        case .malformed: .badRequest
        }
    }

    var error: APIError {
        switch self {
        case .requestLineTooLong(let limit):
            APIError(.uriTooLong, "the request line is longer than \(limit) bytes ([http] max-request-line-bytes)")
        case .headTooLarge(let limit):
            APIError(.headersTooLarge, "the request head is larger than \(limit) bytes ([http] max-header-bytes)")
        case .requestTimeout(let limit?):
            APIError(.requestTimeout,
                     "the request was not received and answered within \(limit.nanoseconds / 1_000_000_000) seconds ([http] request-timeout-seconds)")
        case .requestTimeout(nil):
            APIError(.requestTimeout, "the request head did not arrive in time ([http] header-timeout-seconds, idle-timeout-seconds)")
        case .tooManyConnections(.address(let limit)):
            APIError(.tooManyConnections,
                     "this address has \(limit) connections open, all busy ([http] max-connections-per-address)")
        case .tooManyConnections(.total(let limit)):
            APIError(.tooManyConnections, "the server has \(limit) connections open, all busy ([http] max-connections)")
        case .malformed(let error):
            APIError(.invalidArgument, "the request is not valid HTTP/1.1 (\(error))")
        }
    }

    func bytes(allocator: ByteBufferAllocator) -> ByteBuffer {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        let body = (try? encoder.encode(error)) ?? Data()
        var buffer = allocator.buffer(capacity: 160 + body.count)
        buffer.writeString("HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\n")
        buffer.writeString("Content-Type: application/json\r\nContent-Length: \(body.count)\r\nConnection: close\r\n")
        if status == .serviceUnavailable { buffer.writeString("Retry-After: 1\r\n") }
        buffer.writeString("\r\n")
        buffer.writeBytes(body)
        return buffer
    }
}
