import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import Testing
import TestSupport
import XMPP

/// The server against real clients: slixmpp (python/ccs_client.py) for what an
/// application server does, a raw TLS connection for what none would send.
@Suite(.serialized)
struct XMPPServerTests {
    static let domain = "gcm.nearbyd.test"
    static let username = "myproject@gcm.nearbyd.test"
    /// Another project's application server, with the same password.
    static let otherUsername = "otherproject@gcm.nearbyd.test"
    static let password = "server-key"

    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let python = packageRoot.appendingPathComponent(".build/venv/bin/python").path
    static let clientScript = packageRoot.appendingPathComponent("Tests/XMPPTests/python/ccs_client.py").path

    /// The test certificate, and a file holding it for the client to trust.
    static let certificate: (certificatePEM: String, privateKeyPEM: String, file: String) = {
        let generated = try! SelfSignedCertificate.generate(commonName: domain, subjectAlternativeNames: [domain, "127.0.0.1"])
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("xmpp-tests-\(getpid()).pem").path
        try! generated.certificatePEM.write(toFile: file, atomically: true, encoding: .utf8)
        return (generated.certificatePEM, generated.privateKeyPEM, file)
    }()

    /// Echoes each message's gcm payload as "echo: …"; ends the session on "bye".
    struct EchoService: XMPPService {
        let bound = Inbox<String>()
        let received = Inbox<String>()
        let ended = Inbox<String>()
        /// What a session that received "wait" waits for before it ends.
        let release = Inbox<Bool>()

        func authenticate(username: String, password: String) async -> Bool {
            [XMPPServerTests.username, XMPPServerTests.otherUsername].contains(username) && password == XMPPServerTests.password
        }

        func serve(_ session: XMPPSession) async {
            bound.put(session.jid)
            for await stanza in session.stanzas {
                let text = stanza.child(named: "gcm", namespace: "google:mobile:data")?.text ?? ""
                received.put(text)
                if text == "bye" {
                    await session.close(nil)
                    break
                }
                if text == "wait" {
                    _ = try? await release.first(within: 600, "the test") { _ in true }
                    try? await session.send(XMLElement("message", elements: [
                        XMLElement("gcm", namespace: "google:mobile:data", text: "last words"),
                    ]))
                    await session.close(nil)
                    break
                }
                try? await session.send(XMLElement("message", elements: [
                    XMLElement("gcm", namespace: "google:mobile:data", text: "echo: " + text),
                ]))
            }
            ended.put(session.jid)
        }
    }

    /// Runs `body` against a started server, configured by `configure`; shuts it down afterwards.
    func withServer(
        _ configure: (inout XMPPServerConfiguration) -> Void = { _ in },
        service: EchoService = EchoService(),
        _ body: (XMPPServer, Int, EchoService) async throws -> Void
    ) async throws {
        var configuration = XMPPServerConfiguration(
            host: "127.0.0.1", port: 0, domain: Self.domain,
            certificateChainPEM: Self.certificate.certificatePEM, privateKeyPEM: Self.certificate.privateKeyPEM)
        configure(&configuration)
        var logger = Logger(label: "xmpp-test")
        logger.logLevel = .debug
        let server = XMPPServer(configuration: configuration, service: service, logger: logger)
        let port = try await server.start()
        do {
            try await body(server, port, service)
        } catch {
            await server.shutdown(gracePeriod: .zero)
            throw error
        }
        await server.shutdown(gracePeriod: .zero)
    }

    func client(port: Int, jid: String = username, password: String = password,
                _ arguments: [String] = []) async throws -> ChildProcess {
        try await ChildProcess(
            name: "slixmpp", executable: Self.python,
            arguments: [Self.clientScript, "--port", "\(port)", "--jid", jid, "--password", password,
                        "--ca", Self.certificate.file] + arguments)
    }

    @Test func slixmppAuthenticatesBindsAndExchangesMessages() async throws {
        try await withServer { _, port, service in
            let client = try await client(port: port, ["--ping", "--send", #"hello <&> "world""#, "--send", "second", "--expect", "2"])
            defer { client.signal(SIGKILL) }
            let started = try await client.waitForLine(containing: "session_start", within: 30)
            #expect(started.hasPrefix("session_start \(Self.username)/"))
            try await client.waitForLine(containing: "pong", within: 30)
            try await client.waitForLine(containing: #"gcm echo: hello <&> "world""#, within: 30)
            try await client.waitForLine(containing: "gcm echo: second", within: 30)
            #expect(try await client.waitForExit(within: 30) == 0, "\(client.output)")
            #expect(service.received.values == [#"hello <&> "world""#, "second"])
            // The client's disconnect finishes the session's stanzas, and serve returns.
            _ = try await service.ended.first(within: 30, "serve to return") { _ in true }
            #expect(service.bound.values.first == String(started.dropFirst("session_start ".count)))
        }
    }

    @Test func aWrongPasswordFailsSASL() async throws {
        try await withServer { _, port, service in
            let client = try await client(port: port, password: "wrong")
            defer { client.signal(SIGKILL) }
            try await client.waitForLine(containing: "failed_auth", within: 30)
            #expect(!client.output.contains("session_start"))
            await client.stop(grace: 5)
            #expect(service.bound.values.isEmpty)
        }
    }

    @Test func anOversizedStanzaIsAPolicyViolation() async throws {
        try await withServer({ $0.maximumStanzaBytes = 4096 }) { _, port, service in
            let client = try await client(port: port, ["--send", "small", "--send", String(repeating: "x", count: 5000), "--stay"])
            defer { client.signal(SIGKILL) }
            try await client.waitForLine(containing: "stream_error policy-violation", within: 30)
            try await client.waitForLine(containing: "disconnected", within: 30)
            // The stanza before the oversized one is handed to the service before serve returns.
            _ = try await service.ended.first(within: 30, "serve to return") { _ in true }
            #expect(service.received.values == ["small"])
        }
    }

    @Test func theServiceClosingTheSessionEndsTheStream() async throws {
        try await withServer { _, port, service in
            let client = try await client(port: port, ["--send", "bye", "--stay"])
            defer { client.signal(SIGKILL) }
            try await client.waitForLine(containing: "disconnected", within: 30)
            #expect(!client.output.contains("stream_error"))
            #expect(try await client.waitForExit(within: 30) == 0)
            _ = try await service.ended.first(within: 30, "serve to return") { _ in true }
        }
    }

    @Test func malformedXMLGetsNotWellFormedAndTheServerServesOthers() async throws {
        try await withServer { _, port, _ in
            let bad = try await RawConnection(port: port)
            bad.send(Self.header + "<message><unclosed></message>")
            let answer = try await bad.waitFor("</stream:stream>")
            #expect(answer.contains("<stream:stream "))
            #expect(answer.contains("<stream:error><not-well-formed xmlns='urn:ietf:params:xml:ns:xmpp-streams'/>"))
            try await bad.waitForClose()

            let good = try await RawConnection(port: port)
            defer { good.close() }
            good.send(Self.header)
            let features = try await good.waitFor("</stream:features>")
            #expect(features.contains("<mechanism>PLAIN</mechanism>"))
        }
    }

    @Test(arguments: [
        ("<!DOCTYPE x [<!ENTITY a 'b'>]>", "restricted-xml"),
        ("<message>&a;</message>", "restricted-xml"),
        ("<message>hi</message>", "not-authorized"),
        ("<stream:stream to='other.example' version='1.0' xmlns='jabber:client' xmlns:stream='http://etherx.jabber.org/streams'>",
         "host-unknown"),
    ])
    func streamErrors(input: String, condition: String) async throws {
        try await withServer { _, port, _ in
            let client = try await RawConnection(port: port)
            defer { client.close() }
            client.send(input.hasPrefix("<stream:stream") || input.hasPrefix("<!DOCTYPE") ? input : Self.header + input)
            let answer = try await client.waitFor("</stream:stream>")
            #expect(answer.contains("<stream:error><\(condition) xmlns='urn:ietf:params:xml:ns:xmpp-streams'/>"), "\(answer)")
        }
    }

    @Test func aStreamNotBoundInTimeGetsConnectionTimeout() async throws {
        try await withServer({ $0.negotiationTimeout = .milliseconds(300) }) { _, port, _ in
            let client = try await RawConnection(port: port)
            defer { client.close() }
            client.send(Self.header)
            let answer = try await client.waitFor("</stream:stream>")
            #expect(answer.contains("<stream:features>"))
            #expect(answer.contains("<stream:error><connection-timeout xmlns='urn:ietf:params:xml:ns:xmpp-streams'/>"))
        }
    }

    @Test func aLoginBeyondMaxConnectionsIsRefusedWithResourceConstraint() async throws {
        try await withServer({ $0.maximumConnections = 1 }) { _, port, service in
            // The limit: one authenticated connection logs in.
            let first = try await client(port: port, ["--stay"])
            defer { first.signal(SIGKILL) }
            try await first.waitForLine(containing: "session_start", within: 30)
            // One more is refused once it authenticates, not before (it was let in to try).
            let second = try await client(port: port)
            defer { second.signal(SIGKILL) }
            try await second.waitForLine(containing: "stream_error resource-constraint", within: 30)
            try await second.waitForLine(containing: "disconnected", within: 30)
            #expect(!second.output.contains("session_start"))
            #expect(service.bound.values.count == 1)
            // The first one's slot is free again once it has gone.
            first.signal(SIGKILL)
            _ = try await service.ended.first(within: 30, "the first session to end") { _ in true }
            let third = try await client(port: port, ["--send", "hello", "--expect", "1"])
            defer { third.signal(SIGKILL) }
            try await third.waitForLine(containing: "gcm echo: hello", within: 30)
        }
    }

    /// One project's application servers holding every connection it may
    /// have (answering pings, so they stay) leave the others their places:
    /// its next login is refused with resource-constraint while the server
    /// has room, and another project's logs in.
    @Test func oneProjectHoldingItsShareLeavesAnotherProjectAPlace() async throws {
        try await withServer({ $0.maximumConnections = 3; $0.maximumConnectionsPerUser = 2 }) { _, port, service in
            let holders = [try await client(port: port, ["--stay"]), try await client(port: port, ["--stay"])]
            defer { for holder in holders { holder.signal(SIGKILL) } }
            for holder in holders { try await holder.waitForLine(containing: "session_start", within: 30) }
            let third = try await client(port: port)
            defer { third.signal(SIGKILL) }
            try await third.waitForLine(containing: "stream_error resource-constraint", within: 30)
            #expect(!third.output.contains("session_start"))
            let other = try await client(port: port, jid: Self.otherUsername, ["--send", "hello", "--expect", "1"])
            defer { other.signal(SIGKILL) }
            try await other.waitForLine(containing: "gcm echo: hello", within: 30)
            #expect(service.bound.values.count == 3)
        }
    }

    @Test func aFullUnauthenticatedPoolClosesAConnectionThatSentNothingForANewOne() async throws {
        try await withServer({ $0.maximumUnauthenticatedConnections = 3 }) { _, port, _ in
            // At the limit: one past TLS (the oldest), two idle TCP connections.
            let negotiating = try await RawConnection(port: port)
            defer { negotiating.close() }
            negotiating.send(Self.header)
            _ = try await negotiating.waitFor("</stream:features>")
            let idle = try await RawConnection(port: port, tls: false)
            defer { idle.close() }
            let kept = try await RawConnection(port: port, tls: false)
            defer { kept.close() }
            // One more: the first idle one makes room; the older one past TLS stays.
            let newcomer = try await RawConnection(port: port)
            defer { newcomer.close() }
            try await idle.waitForClose()
            newcomer.send(Self.header)
            _ = try await newcomer.waitFor("</stream:features>")
            try await kept.startTLS()
            kept.send(Self.header)
            _ = try await kept.waitFor("</stream:features>")
            negotiating.send("<message/>")
            _ = try await negotiating.waitFor("<not-authorized ")
        }
    }

    @Test func withEveryoneWaitingPastTLSTheOldestMakesRoomWithResourceConstraint() async throws {
        try await withServer({ $0.maximumUnauthenticatedConnections = 2 }) { _, port, _ in
            let oldest = try await RawConnection(port: port)
            defer { oldest.close() }
            oldest.send(Self.header)
            _ = try await oldest.waitFor("</stream:features>")
            let younger = try await RawConnection(port: port)
            defer { younger.close() }
            younger.send(Self.header)
            _ = try await younger.waitFor("</stream:features>")
            let newcomer = try await RawConnection(port: port)
            defer { newcomer.close() }
            let answer = try await oldest.waitFor("</stream:stream>")
            #expect(answer.contains("<stream:error><resource-constraint xmlns='urn:ietf:params:xml:ns:xmpp-streams'/>"))
            try await oldest.waitForClose()
            newcomer.send(Self.header)
            _ = try await newcomer.waitFor("</stream:features>")
            younger.send("<message/>")
            _ = try await younger.waitFor("<not-authorized ")
        }
    }

    @Test func aFloodFromAnotherAddressDoesNotDisplaceALoneConnection() async throws {
        try await withServer({ $0.maximumUnauthenticatedConnections = 3 }) { _, port, _ in
            // The oldest, and idle: the slowest of all, but alone at its address.
            let lone = try await RawConnection(port: port, tls: false, from: "127.0.0.4")
            defer { lone.close() }
            let first = try await RawConnection(port: port, tls: false, from: "127.0.0.2")
            defer { first.close() }
            let second = try await RawConnection(port: port, tls: false, from: "127.0.0.2")
            defer { second.close() }
            // Full: the address holding the most makes room.
            let third = try await RawConnection(port: port, from: "127.0.0.2")
            defer { third.close() }
            try await first.waitForClose()
            third.send(Self.header)
            _ = try await third.waitFor("</stream:features>")
            try await lone.startTLS()
            lone.send(Self.header)
            _ = try await lone.waitFor("</stream:features>")
        }
    }

    @Test func oneAddressBeyondItsLimitMakesRoomFromItsOwnConnections() async throws {
        try await withServer({ $0.maximumUnauthenticatedConnectionsPerAddress = 2 }) { _, port, _ in
            // The limit from 127.0.0.2; another address beside it.
            let first = try await RawConnection(port: port, tls: false, from: "127.0.0.2")
            defer { first.close() }
            let second = try await RawConnection(port: port, tls: false, from: "127.0.0.2")
            defer { second.close() }
            let elsewhere = try await RawConnection(port: port, tls: false, from: "127.0.0.3")
            defer { elsewhere.close() }
            // One more from 127.0.0.2 closes that address's oldest, nothing else.
            let third = try await RawConnection(port: port, from: "127.0.0.2")
            defer { third.close() }
            try await first.waitForClose()
            third.send(Self.header)
            _ = try await third.waitFor("</stream:features>")
            for kept in [second, elsewhere] {
                try await kept.startTLS()
                kept.send(Self.header)
                _ = try await kept.waitFor("</stream:features>")
            }
        }
    }

    @Test func aConnectionWithoutATLSHandshakeInTimeIsClosed() async throws {
        try await withServer({ $0.tlsHandshakeTimeout = .milliseconds(300) }) { _, port, _ in
            let silent = try await RawConnection(port: port, tls: false)
            defer { silent.close() }
            try await silent.waitForClose()
            #expect(silent.receivedText.isEmpty)
        }
    }

    @Test func aBoundStreamThatAnswersPingsStaysAndASilentOneIsClosed() async throws {
        try await withServer({
            $0.idleTimeout = .milliseconds(200)
            $0.pingTimeout = .seconds(2)
        }) { _, port, service in
            // slixmpp answers each ping: the third comes only if the first two were answered in time.
            let answering = try await client(port: port, ["--stay", "--print-pings"])
            defer { answering.signal(SIGKILL) }
            try await answering.waitForLine(containing: "session_start", within: 30)
            try await answering.waitForLine(containing: "server_ping 3", within: 30)
            #expect(!answering.output.contains("disconnected"))

            let silent = try await RawConnection(port: port)
            defer { silent.close() }
            try await silent.logIn()
            let answer = try await silent.waitFor("</stream:stream>")
            #expect(answer.contains("<ping xmlns='urn:xmpp:ping'/>"))
            #expect(answer.contains("<stream:error><connection-timeout xmlns='urn:ietf:params:xml:ns:xmpp-streams'/>"))
            try await silent.waitForClose()
            _ = try await service.ended.first(within: 30, "the silent session to end") { $0 == silent.jid }
        }
    }

    @Test func shutdownEndsStreamsWithSystemShutdownAfterTheGracePeriod() async throws {
        try await withServer { server, port, service in
            let client = try await client(port: port, ["--stay"])
            defer { client.signal(SIGKILL) }
            try await client.waitForLine(containing: "session_start", within: 30)
            let raw = try await RawConnection(port: port)
            defer { raw.close() }
            raw.send(Self.header)
            _ = try await raw.waitFor("</stream:features>")

            await server.shutdown(gracePeriod: .milliseconds(500))
            // The negotiating stream ends at once; the bound one after the grace period.
            let rawAnswer = try await raw.waitFor("</stream:stream>")
            #expect(rawAnswer.contains("<system-shutdown xmlns='urn:ietf:params:xml:ns:xmpp-streams'/>"))
            try await client.waitForLine(containing: "stream_error system-shutdown", within: 30)
            try await client.waitForLine(containing: "disconnected", within: 30)
            #expect(service.ended.values.count == 1)
            // No new connections.
            await #expect(throws: (any Error).self) {
                let late = try await RawConnection(port: port)
                defer { late.close() }
                late.send(Self.header)
                _ = try await late.waitFor("<stream:features>", within: 5)
            }
        }
    }

    @Test func shutdownLetsSessionsEndOnTheirOwnWithinTheGracePeriod() async throws {
        try await withServer { server, port, service in
            let client = try await client(port: port, ["--send", "wait", "--stay"])
            defer { client.signal(SIGKILL) }
            _ = try await service.received.first(within: 30, "the message") { $0 == "wait" }
            let shutdown = Task { await server.shutdown(gracePeriod: .seconds(600)) }
            // The service sends its last stanza and ends the stream itself, as a CCS
            // layer does after CONNECTION_DRAINING; shutdown returns long before its grace period.
            service.release.put(true)
            try await client.waitForLine(containing: "gcm last words", within: 30)
            try await client.waitForLine(containing: "disconnected", within: 30)
            #expect(!client.output.contains("stream_error"))
            try await withTimeout(30, "shutdown to return") { await shutdown.value }
        }
    }

    static let header = "<?xml version='1.0'?><stream:stream to='\(domain)' version='1.0' xmlns='jabber:client' xmlns:stream='http://etherx.jabber.org/streams'>"
}

/// A connection that sends whatever a test says and collects what comes back,
/// for what real clients never send: TLS from the first byte (certificate not
/// checked), or plain TCP until ``startTLS()``.
final class RawConnection: Sendable {
    private let channel: any Channel
    private let received: Inbox<String>
    private let closed: Inbox<Bool>
    private let boundJID = Mutex<String?>(nil)

    private final class Collector: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        let received: Inbox<String>
        let closed: Inbox<Bool>
        var text = ""

        init(received: Inbox<String>, closed: Inbox<Bool>) {
            self.received = received
            self.closed = closed
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            text += String(buffer: unwrapInboundIn(data))
            received.put(text)
        }

        func channelInactive(context: ChannelHandlerContext) {
            closed.put(true)
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)
        }
    }

    /// Connects to the server on 127.0.0.1, from `source` (another loopback
    /// address, for per-address limits) when given.
    init(port: Int, tls: Bool = true, from source: String? = nil) async throws {
        let received = Inbox<String>()
        let closed = Inbox<Bool>()
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if tls { try channel.pipeline.syncOperations.addHandler(try Self.tlsHandler()) }
                    try channel.pipeline.syncOperations.addHandler(Collector(received: received, closed: closed))
                }
            }
        if let source { bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: source, port: 0)) }
        channel = try await bootstrap.connect(host: "127.0.0.1", port: port).get()
        self.received = received
        self.closed = closed
    }

    private static func tlsHandler() throws -> NIOSSLClientHandler {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .none
        return try NIOSSLClientHandler(context: NIOSSLContext(configuration: tls), serverHostname: nil)
    }

    /// Starts TLS on a connection opened without it.
    func startTLS() async throws {
        try await channel.eventLoop.submit { [channel] in
            try channel.pipeline.syncOperations.addHandler(try Self.tlsHandler(), position: .first)
        }.get()
    }

    func send(_ text: String) {
        channel.writeAndFlush(channel.allocator.buffer(string: text), promise: nil)
    }

    /// Everything received so far.
    var receivedText: String { received.values.last ?? "" }

    /// Everything received, once it contains `text`.
    func waitFor(_ text: String, within seconds: Double = 30) async throws -> String {
        try await received.first(within: seconds, "the server to send \(text)") { $0.contains(text) }
    }

    func waitForClose(within seconds: Double = 30) async throws {
        _ = try await closed.first(within: seconds, "the server to close the connection") { _ in true }
    }

    /// Logs in as ``XMPPServerTests/username`` and binds a resource, as slixmpp
    /// does, and then sends nothing more.
    func logIn() async throws {
        send(XMPPServerTests.header)
        _ = try await waitFor("</stream:features>")
        let credentials = Data("\0\(XMPPServerTests.username)\0\(XMPPServerTests.password)".utf8).base64EncodedString()
        send("<auth xmlns='urn:ietf:params:xml:ns:xmpp-sasl' mechanism='PLAIN'>\(credentials)</auth>")
        _ = try await waitFor("<success ")
        send(XMPPServerTests.header)
        _ = try await waitFor("<bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'/>")
        send("<iq type='set' id='b1'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'><resource>raw</resource></bind></iq>")
        _ = try await waitFor("</jid>")
        boundJID.withLock { $0 = "\(XMPPServerTests.username)/raw" }
    }

    /// The full JID after ``logIn()``.
    var jid: String? { boundJID.withLock { $0 } }

    func close() {
        channel.close(promise: nil)
    }
}
