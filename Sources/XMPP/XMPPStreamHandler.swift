import Foundation
import Logging
import NIOCore
import NIOTLS

/// One client connection's XML stream, behind the TLS handler: stream headers,
/// SASL PLAIN, resource binding, then stanzas to and from an ``XMPPSession``.
///
/// It also keeps the connection's deadlines: the TLS handshake's, then the
/// stream negotiation's until a resource is bound, then, while bound, a ping
/// after `idleTimeout` of silence that must be answered within `pingTimeout`.
///
/// Like every channel handler, it lives on its channel's event loop; other
/// threads reach it only through `NIOLoopBound` and `EventLoop.execute`.
final class XMPPStreamHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        /// Waiting for the client's stream header; `username` once SASL succeeded.
        case awaitingHeader(username: String?)
        case awaitingAuth(failures: Int)
        /// An empty challenge was sent for an `<auth>` without initial response.
        case awaitingResponse(failures: Int)
        case authenticating(failures: Int)
        case awaitingBind(username: String)
        case bound(XMPPSession)
        /// Our `</stream:stream>` is out; waiting for the peer's, or the timer.
        case closing
        case closed
    }

    /// How long the peer has to close its side after our `</stream:stream>`.
    private static let closeTimeout: TimeAmount = .seconds(5)

    private let core: ServerCore
    private let socket: SocketEnd
    private let eventLoop: any EventLoop
    private let configuration: XMPPServerConfiguration
    private var logger: Logger
    private let parser: XMLStreamParser
    private let streamID: String
    private var state: State = .awaitingHeader(username: nil)
    private var context: ChannelHandlerContext?
    private var headerSent = false
    private var tlsEstablished = false
    /// The TLS handshake's deadline, then the negotiation's, until bound.
    private var deadline: Scheduled<Void>?
    /// While bound: when the peer last sent anything, and the next look at it.
    private var lastRead: NIODeadline = .uptimeNanoseconds(0)
    private var idleCheck: Scheduled<Void>?
    /// Set while a ping waits for the peer to send anything.
    private var pingTimer: Scheduled<Void>?
    private var pingsSent = 0
    private var closeTimer: Scheduled<Void>?
    /// Stanzas handed to the session that its service has not taken yet.
    private var queued = 0
    /// A read was asked for while reading was paused.
    private var readPending = false

    init(core: ServerCore, socket: SocketEnd, eventLoop: any EventLoop, logger: Logger) {
        self.core = core
        self.socket = socket
        self.eventLoop = eventLoop
        configuration = core.configuration
        parser = XMLStreamParser(maximumStanzaBytes: core.configuration.maximumStanzaBytes)
        streamID = Self.randomID()
        self.logger = logger
        self.logger[metadataKey: "xmpp-stream"] = "\(streamID)"
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(configuration.tlsHandshakeTimeout)) { [self] in
            logger.debug("TLS handshake timed out")
            state = .closed
            socket.closeNow()
        }
    }

    /// The context holds the handler: kept past this, each closed connection
    /// would keep its handler, parser and pipeline for good.
    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        idleCheck?.cancel()
        pingTimer?.cancel()
        closeTimer?.cancel()
        if case .bound(let session) = state { session.finish() }
        state = .closed
        logger.debug("connection closed")
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        if case .closed = state { return }
        if idleCheck != nil {
            lastRead = context.eventLoop.now
            // Anything at all answers a ping.
            pingTimer?.cancel()
            pingTimer = nil
        }
        let (events, error) = buffer.withUnsafeReadableBytes { parser.feed($0) }
        for event in events {
            switch state {
            case .closed: return
            case .closing:
                if event == .streamClosed { context.close(promise: nil) }
            default:
                handle(event)
            }
        }
        if let error {
            logger.debug("unusable input", metadata: ["error": "\(error)"])
            switch state {
            case .closed: break
            case .closing: context.close(promise: nil)
            default: fail(error.streamError, text: Self.describe(error))
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted? = event as? TLSUserEvent { tlsCompleted() }
        context.fireUserInboundEventTriggered(event)
    }

    // MARK: Deadlines

    private func tlsCompleted() {
        guard !tlsEstablished, let context else { return }
        tlsEstablished = true
        deadline?.cancel()
        core.handshakeCompleted(context.channel)
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(configuration.negotiationTimeout)) { [self] in
            logger.debug("negotiation timed out")
            abort(.connectionTimeout, text: "stream negotiation took too long")
        }
    }

    /// Looks, `idleTimeout` after the peer last sent anything, whether it has
    /// stayed silent since. Rescheduled at most once per `idleTimeout`, rather
    /// than on every read.
    private func scheduleIdleCheck(at time: NIODeadline) {
        guard let context else { return }
        idleCheck = context.eventLoop.assumeIsolated().scheduleTask(deadline: time) { [self] in
            guard case .bound(let session) = state, let context = self.context else { return }
            let timeout = TimeAmount(configuration.idleTimeout)
            let now = context.eventLoop.now
            if now - lastRead >= timeout {
                if pingTimer == nil { ping(session) }
                scheduleIdleCheck(at: now + timeout)
            } else {
                scheduleIdleCheck(at: lastRead + timeout)
            }
        }
    }

    /// Asks a silent peer for a sign of life (XEP-0199).
    private func ping(_ session: XMPPSession) {
        guard let context else { return }
        pingsSent += 1
        let ping = XMLElement("iq", attributes: ["type": "get", "id": "ping-\(pingsSent)", "from": configuration.domain, "to": session.jid],
                              elements: [XMLElement("ping", namespace: Namespace.ping)])
        write(ping.xml(inheriting: Namespace.client))
        pingTimer = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(configuration.pingTimeout)) { [self] in
            logger.debug("no answer to a ping")
            abort(.connectionTimeout, text: "no answer to a ping")
        }
    }

    /// Another connection took this one's place while it was not yet
    /// authenticated (``ConnectionAdmission``), at the limit `setting` names.
    func displace(at setting: String) {
        logger.debug("displaced by a newer connection", metadata: ["limit": "\(setting)"])
        guard tlsEstablished else {
            state = .closed
            socket.closeNow()
            return
        }
        abort(.resourceConstraint, text: "too many connections are logging in; connect again")
    }

    // MARK: Back-pressure

    func read(context: ChannelHandlerContext) {
        if readsPaused {
            readPending = true
        } else {
            context.read()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        resumeReadingIfPossible()
        context.fireChannelWritabilityChanged()
    }

    private var readsPaused: Bool {
        if queued >= configuration.maximumQueuedStanzas { return true }
        if case .authenticating = state { return true }
        // Answers to the peer's iqs pile up while it does not read them.
        return context.map { !$0.channel.isWritable } ?? false
    }

    private func resumeReadingIfPossible() {
        guard readPending, !readsPaused, let context else { return }
        readPending = false
        context.read()
    }

    /// The service took a stanza from its session.
    func stanzaTaken() {
        queued -= 1
        resumeReadingIfPossible()
    }

    // MARK: Calls from the session and the server

    func send(_ xml: String) -> EventLoopFuture<Void> {
        guard case .bound = state, let context else { return eventLoop.makeFailedFuture(XMPPSessionError.streamClosed) }
        return context.writeAndFlush(wrapOutboundOut(buffer(xml)))
    }

    /// Ends the stream (with a stream error if `error` is set) and returns the
    /// channel's close future.
    func closeStream(_ error: StreamError?, text: String?) -> EventLoopFuture<Void> {
        guard let context else { return eventLoop.makeSucceededVoidFuture() }
        if let error {
            fail(error, text: text)
        } else {
            end()
        }
        return context.channel.closeFuture
    }

    /// Whether the stream has not reached a bound session yet (for shutdown).
    var isNegotiating: Bool {
        switch state {
        case .bound, .closing, .closed: false
        default: true
        }
    }

    // MARK: The stream

    private func handle(_ event: XMLStreamEvent) {
        switch event {
        case .streamOpened(let header):
            guard case .awaitingHeader(let username) = state else {
                return fail(.badFormat)  // libxml2 reports a second root as an error; kept for safety.
            }
            openStream(header, username: username)
        case .stanza(let element):
            handle(element)
        case .streamClosed:
            logger.debug("peer closed the stream")
            if case .bound(let session) = state { session.finish() }
            write("</stream:stream>")
            state = .closed
            context?.close(promise: nil)
        }
    }

    private func openStream(_ header: XMLStreamHeader, username: String?) {
        sendHeader(to: header.attributes["from"])
        guard header.name == "stream", header.namespace == Namespace.stream else {
            return fail(.invalidNamespace, text: "the stream element must be {\(Namespace.stream)}stream")
        }
        guard header.namespaceDeclarations[""] == Namespace.client else {
            return fail(.invalidNamespace, text: "the default namespace must be \(Namespace.client)")
        }
        if let to = header.attributes["to"], to.lowercased() != configuration.domain.lowercased() {
            return fail(.hostUnknown, text: "this server is \(configuration.domain)")
        }
        let major = header.attributes["version"].flatMap { $0.split(separator: ".").first }.flatMap { Int($0) }
        guard let major, major >= 1 else {
            return fail(.unsupportedVersion, text: "XMPP 1.0 streams only")
        }
        if let username {
            write("<stream:features><bind xmlns='\(Namespace.bind)'/><session xmlns='\(Namespace.session)'><optional/></session></stream:features>")
            state = .awaitingBind(username: username)
        } else {
            write("<stream:features><mechanisms xmlns='\(Namespace.sasl)'><mechanism>PLAIN</mechanism></mechanisms></stream:features>")
            state = .awaitingAuth(failures: 0)
        }
    }

    private func sendHeader(to: String?) {
        guard !headerSent else { return }
        headerSent = true
        var header = "<?xml version='1.0'?><stream:stream from='\(XMLEscaping.attribute(configuration.domain))' id='\(streamID)'"
        if let to { header += " to='\(XMLEscaping.attribute(to))'" }
        write(header + " version='1.0' xml:lang='en' xmlns='\(Namespace.client)' xmlns:stream='\(Namespace.stream)'>")
    }

    private func handle(_ element: XMLElement) {
        switch state {
        case .awaitingAuth(let failures):
            if element.name == "auth", element.namespace == Namespace.sasl {
                authenticate(element, failures: failures)
            } else if element.name == "abort", element.namespace == Namespace.sasl {
                saslFailure("aborted", failures: failures)
            } else {
                fail(.notAuthorized, text: "authenticate first")
            }
        case .awaitingResponse(let failures):
            if element.name == "response", element.namespace == Namespace.sasl {
                checkPLAIN(element.text, failures: failures)
            } else if element.name == "abort", element.namespace == Namespace.sasl {
                saslFailure("aborted", failures: failures)
            } else {
                fail(.notAuthorized, text: "authenticate first")
            }
        case .authenticating:
            fail(.notAuthorized, text: "authentication in progress")
        case .awaitingBind(let username):
            if element.name == "iq", element.namespace == Namespace.client, element["type"] == "set",
               let bind = element.child(named: "bind", namespace: Namespace.bind) {
                self.bind(element, bind, username: username)
            } else {
                fail(.notAuthorized, text: "bind a resource first")
            }
        case .bound(let session):
            guard element.namespace == Namespace.client else {
                return fail(.unsupportedStanzaType, text: "unknown element {\(element.namespace ?? "")}\(element.name)")
            }
            switch element.name {
            case "message":
                queued += 1
                session.deliver(element)
            case "iq": answer(element)
            case "presence": break  // No presence service here.
            default: fail(.unsupportedStanzaType, text: "unknown element \(element.name)")
            }
        case .awaitingHeader, .closing, .closed:
            break
        }
    }

    // MARK: SASL PLAIN (RFC 6120 §6, RFC 4616)

    private func authenticate(_ auth: XMLElement, failures: Int) {
        guard auth["mechanism"] == "PLAIN" else {
            return saslFailure("invalid-mechanism", failures: failures)
        }
        let response = auth.text.trimmingCharacters(in: .whitespaces)
        if response.isEmpty {
            // No initial response: ask for it with an empty challenge.
            write("<challenge xmlns='\(Namespace.sasl)'/>")
            state = .awaitingResponse(failures: failures)
            return
        }
        checkPLAIN(response, failures: failures)
    }

    private func checkPLAIN(_ response: String, failures: Int) {
        let response = response.trimmingCharacters(in: .whitespaces)
        // "=" is an empty response (RFC 6120 §6.4.2), which PLAIN cannot use.
        guard response != "=", !response.isEmpty else { return saslFailure("malformed-request", failures: failures) }
        guard let decoded = Data(base64Encoded: response) else {
            return saslFailure("incorrect-encoding", failures: failures)
        }
        let parts = decoded.split(separator: 0, omittingEmptySubsequences: false)
        guard parts.count == 3,
              let authzid = String(validating: parts[0], as: UTF8.self),
              let authcid = String(validating: parts[1], as: UTF8.self),
              let password = String(validating: parts[2], as: UTF8.self),
              !authcid.isEmpty, !password.isEmpty
        else { return saslFailure("malformed-request", failures: failures) }
        // Clients send the JID's local part (slixmpp) or the whole bare JID (as
        // FCM's documentation has it); the service always sees the bare JID.
        let username = bareJID(authcid)
        guard authzid.isEmpty || bareJID(authzid) == username else {
            return saslFailure("invalid-authzid", failures: failures)
        }
        state = .authenticating(failures: failures)
        guard let context else { return }
        let service = core.service
        let promise = context.eventLoop.makePromise(of: Bool.self)
        promise.completeWithTask { await service.authenticate(username: username, password: password) }
        promise.futureResult.assumeIsolated().whenSuccess { [self] accepted in
            guard case .authenticating = state else { return }
            if accepted, let admission = self.context.map({ core.authenticate($0.channel, as: username) }), admission != .admitted {
                // Full, or displaced meanwhile (then its own close is on its way).
                switch admission {
                case .full:
                    core.refusedLogins.note("max-connections", "XMPP login refused: max-connections application server connections are open",
                                            metadata: ["username": "\(username)"])
                    abort(.resourceConstraint, text: "the server has as many application server connections as it takes")
                case .tenantFull:
                    // The project's own doing: at debug, like its other failures (its logins may come in floods).
                    logger.debug("XMPP login refused: max-connections-per-project of this project are open",
                                 metadata: ["username": "\(username)"])
                    abort(.resourceConstraint, text: "\(username) has as many connections open as the server takes of one project "
                        + "(\(configuration.maximumConnectionsPerUser))")
                case .admitted, .unknown:
                    abort(.resourceConstraint, text: "the server has as many application server connections as it takes")
                }
            } else if accepted {
                logger.debug("authenticated", metadata: ["username": "\(username)"])
                // Both sides start a new stream: a new parser for the client's.
                parser.reset()
                headerSent = false
                state = .awaitingHeader(username: username)
                write("<success xmlns='\(Namespace.sasl)'/>")
            } else {
                logger.debug("authentication refused", metadata: ["username": "\(username)"])
                saslFailure("not-authorized", failures: failures)
            }
            resumeReadingIfPossible()
        }
    }

    private func saslFailure(_ condition: String, failures: Int) {
        write("<failure xmlns='\(Namespace.sasl)'><\(condition)/></failure>")
        if failures + 1 >= configuration.maximumAuthenticationAttempts {
            fail(.policyViolation, text: "too many failed authentication attempts")
        } else {
            state = .awaitingAuth(failures: failures + 1)
        }
    }

    private func bareJID(_ identity: String) -> String {
        identity.contains("@") ? identity : "\(identity)@\(configuration.domain)"
    }

    // MARK: Binding and iq

    private func bind(_ iq: XMLElement, _ bind: XMLElement, username: String) {
        var resource = bind.child(named: "resource", namespace: Namespace.bind)?.text ?? ""
        if resource.isEmpty { resource = Self.randomID() }
        guard resource.utf8.count <= 1023, !resource.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }),
              !resource.allSatisfy(\.isWhitespace)
        else {
            return write(iqError(iq, type: "modify", condition: "bad-request"))
        }
        let jid = "\(username)/\(resource)"
        var result = XMLElement("iq", attributes: ["type": "result"],
                                elements: [XMLElement("bind", namespace: Namespace.bind, elements: [XMLElement("jid", text: jid)])])
        result["id"] = iq["id"]
        write(result.xml(inheriting: Namespace.client))
        deadline?.cancel()
        deadline = nil
        guard let context else { return }
        lastRead = context.eventLoop.now
        scheduleIdleCheck(at: lastRead + TimeAmount(configuration.idleTimeout))
        let session = XMPPSession(username: username, jid: jid, streamID: streamID,
                                  handler: NIOLoopBound(self, eventLoop: context.eventLoop))
        state = .bound(session)
        logger.debug("bound", metadata: ["jid": "\(jid)"])
        core.serve(session)
    }

    /// Answers an iq the server handles itself: session establishment and ping
    /// get a result, any other request `service-unavailable`; results and errors
    /// (answers to nothing the server sent) are dropped.
    private func answer(_ iq: XMLElement) {
        guard let type = iq["type"], type == "get" || type == "set" else { return }
        let payload = iq.elements.first
        if (type == "set" && payload?.name == "session" && payload?.namespace == Namespace.session)
            || (type == "get" && payload?.name == "ping" && payload?.namespace == Namespace.ping) {
            var result = XMLElement("iq", attributes: ["type": "result"])
            result["id"] = iq["id"]
            result["to"] = iq["from"]
            write(result.xml(inheriting: Namespace.client))
        } else {
            write(iqError(iq, type: "cancel", condition: "service-unavailable"))
        }
    }

    private func iqError(_ iq: XMLElement, type: String, condition: String) -> String {
        var error = XMLElement("iq", attributes: ["type": "error"], elements: [
            XMLElement("error", attributes: ["type": type], elements: [XMLElement(condition, namespace: Namespace.stanzas)]),
        ])
        error["id"] = iq["id"]
        error["to"] = iq["from"]
        return error.xml(inheriting: Namespace.client)
    }

    // MARK: Ending

    /// Sends a stream error and closes the stream.
    private func fail(_ error: StreamError, text: String? = nil) {
        switch state {
        case .closing, .closed: return
        default: break
        }
        logger.debug("stream error", metadata: ["condition": "\(error.condition)", "text": "\(text ?? "")"])
        sendHeader(to: nil)
        write(error.xml(text: text))
        end()
    }

    /// Sends a stream error and `</stream:stream>` and closes the socket at
    /// once, without waiting for the peer: for peers that are too slow or that
    /// must make room, whose descriptors are wanted back now.
    private func abort(_ error: StreamError, text: String) {
        switch state {
        case .closed: return
        case .bound(let session): session.finish()
        default: break
        }
        logger.debug("stream aborted", metadata: ["condition": "\(error.condition)", "text": "\(text)"])
        if case .closing = state {} else {
            sendHeader(to: nil)
            write(error.xml(text: text) + "</stream:stream>")
        }
        state = .closed
        socket.closeNow()
    }

    /// Sends `</stream:stream>` and closes once the peer has closed its side or
    /// after a few seconds.
    private func end() {
        switch state {
        case .closing, .closed: return
        case .bound(let session): session.finish()
        default: break
        }
        sendHeader(to: nil)
        write("</stream:stream>")
        state = .closing
        deadline?.cancel()
        idleCheck?.cancel()
        pingTimer?.cancel()
        guard let context else { return }
        closeTimer = context.eventLoop.assumeIsolated().scheduleTask(in: Self.closeTimeout) { [self] in
            self.context?.close(promise: nil)
        }
    }

    // MARK: Helpers

    private func buffer(_ string: String) -> ByteBuffer {
        context!.channel.allocator.buffer(string: string)
    }

    private func write(_ string: String) {
        guard let context else { return }
        context.writeAndFlush(wrapOutboundOut(buffer(string)), promise: nil)
    }

    private static func randomID() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<2).map { _ in String(generator.next() as UInt64, radix: 16) }.joined()
    }

    private static func describe(_ error: XMLStreamParserError) -> String {
        switch error {
        case .notWellFormed(let message): "not well-formed: \(message)"
        case .restrictedXML(let what): "XMPP forbids this XML: \(what)"
        case .stanzaTooLarge(let limit): "stanza longer than \(limit) bytes"
        case .nestedTooDeep(let limit): "elements nested deeper than \(limit)"
        case .undeclaredPrefix(let name): "undeclared namespace prefix in \(name)"
        case .textOutsideStanza: "text between stanzas"
        case .unsupportedEncoding: "the stream must be UTF-8"
        }
    }
}
