import Foundation
import Logging
import NIOCore
import NIOEmbedded
import NIOTLS
import Testing
import TestSupport
@_spi(Testing) import XMPP

/// A connection's deadlines on a testing event loop whose time the test moves
/// by hand: each is met with a millisecond to spare, and missed by one.
@Suite(.timeLimit(.minutes(1)))
struct DeadlineTests {
    static let tlsHandshakeTimeout = Duration.seconds(10)
    static let negotiationTimeout = Duration.seconds(20)
    static let idleTimeout = Duration.seconds(120)
    static let pingTimeout = Duration.seconds(30)
    static let tick = Duration.milliseconds(1)

    /// A connection as the server sets it up, without the TLS handler: the test
    /// reports the end of the handshake itself.
    struct Connection {
        let channel = NIOAsyncTestingChannel()

        init() async throws {
            let server = XMPPServer(
                configuration: XMPPServerConfiguration(
                    host: "127.0.0.1", port: 0, domain: XMPPServerTests.domain, certificateChainPEM: "", privateKeyPEM: "",
                    tlsHandshakeTimeout: DeadlineTests.tlsHandshakeTimeout, negotiationTimeout: DeadlineTests.negotiationTimeout,
                    idleTimeout: DeadlineTests.idleTimeout, pingTimeout: DeadlineTests.pingTimeout),
                service: XMPPServerTests.EchoService(), logger: Logger(label: "deadline-tests"))
            try await channel.testingEventLoop.executeInContext { [channel] in try server.serve(withoutTLS: channel) }
            try await channel.connect(to: SocketAddress(ipAddress: "192.0.2.1", port: 40000))
        }

        var isOpen: Bool { channel.isActive }

        func advance(by duration: Duration) async {
            await channel.testingEventLoop.advanceTime(by: TimeAmount(duration))
        }

        /// What NIOSSL's handler reports once the handshake is done.
        func completeTLS() async throws {
            try await channel.testingEventLoop.executeInContext { [channel] in
                channel.pipeline.syncOperations.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
            }
        }

        func send(_ text: String) async throws {
            try await channel.writeInbound(ByteBuffer(string: text))
        }

        /// Everything written since the last call.
        func output() async throws -> String {
            var text = ""
            while let buffer = try await channel.readOutbound(as: ByteBuffer.self) { text += String(buffer: buffer) }
            return text
        }

        /// Everything written since the last call, once it contains `expected`.
        func output(containing expected: String) async throws -> String {
            try await withTimeout(10, "the server to write \(expected)") {
                var text = ""
                while !text.contains(expected) {
                    text += String(buffer: try await channel.waitForOutboundWrite(as: ByteBuffer.self))
                }
                return text
            }
        }

        /// SASL PLAIN and a bound resource, as a client does it.
        func logIn() async throws {
            try await send(XMPPServerTests.header)
            _ = try await output(containing: "</stream:features>")
            let credentials = "\0\(XMPPServerTests.username)\0\(XMPPServerTests.password)".data(using: .utf8)!.base64EncodedString()
            try await send("<auth xmlns='urn:ietf:params:xml:ns:xmpp-sasl' mechanism='PLAIN'>\(credentials)</auth>")
            _ = try await output(containing: "<success ")
            try await send(XMPPServerTests.header)
            _ = try await output(containing: "</stream:features>")
            try await send("<iq type='set' id='b1'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'/></iq>")
            _ = try await output(containing: "</jid>")
        }

        func finish() async {
            _ = try? await channel.finish(acceptAlreadyClosed: true)
        }
    }

    @Test func aConnectionWithoutTLSWithinTheHandshakeTimeoutIsClosed() async throws {
        let connection = try await Connection()
        await connection.advance(by: Self.tlsHandshakeTimeout - Self.tick)
        #expect(connection.isOpen)
        await connection.advance(by: Self.tick)
        #expect(!connection.isOpen)
        // No stream exists before TLS: nothing to say.
        #expect(try await connection.output().isEmpty)
        await connection.finish()
    }

    @Test func theNegotiationTimeoutRunsFromTheEndOfTheTLSHandshake() async throws {
        let connection = try await Connection()
        await connection.advance(by: Self.tlsHandshakeTimeout - Self.tick)
        try await connection.completeTLS()
        // Long past the TLS deadline, just inside the negotiation's.
        await connection.advance(by: Self.negotiationTimeout - Self.tick)
        #expect(connection.isOpen)
        try await connection.send(XMPPServerTests.header)
        _ = try await connection.output(containing: "</stream:features>")
        await connection.advance(by: Self.tick)
        let output = try await connection.output()
        #expect(output.contains("<stream:error><connection-timeout xmlns='urn:ietf:params:xml:ns:xmpp-streams'/>"), "\(output)")
        #expect(output.hasSuffix("</stream:stream>"))
        #expect(!connection.isOpen)
        await connection.finish()
    }

    @Test func aBoundStreamIsNotTimedOutByTheNegotiationTimeout() async throws {
        let connection = try await Connection()
        try await connection.completeTLS()
        try await connection.logIn()
        await connection.advance(by: Self.negotiationTimeout + Self.tick)
        #expect(connection.isOpen)
        #expect(try await connection.output().isEmpty)
        await connection.finish()
    }

    @Test func aSilentBoundStreamIsPingedAndClosedWhenThePingGoesUnanswered() async throws {
        let connection = try await Connection()
        try await connection.completeTLS()
        try await connection.logIn()
        await connection.advance(by: Self.idleTimeout - Self.tick)
        #expect(try await connection.output().isEmpty)
        await connection.advance(by: Self.tick)
        let ping = try await connection.output()
        #expect(ping.contains("type='get'") && ping.contains("<ping xmlns='urn:xmpp:ping'/>"), "\(ping)")
        // Answered (a whitespace keepalive is enough) a millisecond before its deadline.
        await connection.advance(by: Self.pingTimeout - Self.tick)
        try await connection.send(" ")
        await connection.advance(by: Self.tick)
        #expect(connection.isOpen)
        // The next ping comes an idle timeout after that answer; this one goes unanswered.
        await connection.advance(by: Self.idleTimeout - Self.tick - Self.tick)
        #expect(try await connection.output().isEmpty)
        await connection.advance(by: Self.tick)
        #expect(try await connection.output().contains("<ping xmlns='urn:xmpp:ping'/>"))
        await connection.advance(by: Self.pingTimeout - Self.tick)
        #expect(connection.isOpen)
        await connection.advance(by: Self.tick)
        let output = try await connection.output()
        #expect(output.contains("<stream:error><connection-timeout xmlns='urn:ietf:params:xml:ns:xmpp-streams'/>"), "\(output)")
        #expect(!connection.isOpen)
        await connection.finish()
    }

    @Test func trafficKeepsABoundStreamFromBeingPinged() async throws {
        let connection = try await Connection()
        try await connection.completeTLS()
        try await connection.logIn()
        // A stanza or a keepalive a little before each idle timeout: never a ping.
        for _ in 0..<5 {
            await connection.advance(by: Self.idleTimeout - Self.tick)
            try await connection.send("<presence/>")
        }
        #expect(try await connection.output().isEmpty)
        #expect(connection.isOpen)
        await connection.finish()
    }
}
