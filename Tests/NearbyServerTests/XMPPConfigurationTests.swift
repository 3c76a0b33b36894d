import ConfigFile
@testable import NearbyServer
import Testing

/// `[xmpp]`'s connection limits and deadlines: defaults, and each bound
/// accepted while one past it is refused, naming the key.
@Suite(.timeLimit(.minutes(1)))
struct XMPPConfigurationTests {
    @Test func defaults() throws {
        let xmpp = try ServerConfiguration.parse("", source: "test.conf").xmpp
        #expect(xmpp.maxConnections == 1000)
        #expect(xmpp.maxUnauthenticatedConnections == 256)
        #expect(xmpp.maxUnauthenticatedConnectionsPerAddress == 32)
        #expect(xmpp.tlsHandshakeTimeoutSeconds == 10)
        #expect(xmpp.negotiationTimeoutSeconds == 20)
        #expect(xmpp.idleTimeoutSeconds == 120)
        #expect(xmpp.pingTimeoutSeconds == 30)
    }

    @Test func everyKeyIsRead() throws {
        let xmpp = try ServerConfiguration.parse("""
            [xmpp]
            max-unauthenticated-connections = 500
            max-unauthenticated-connections-per-address = 50
            tls-handshake-timeout-seconds = 5
            negotiation-timeout-seconds = 15
            idle-timeout-seconds = 600
            ping-timeout-seconds = 60
            """, source: "test.conf").xmpp
        #expect(xmpp.maxUnauthenticatedConnections == 500)
        #expect(xmpp.maxUnauthenticatedConnectionsPerAddress == 50)
        #expect(xmpp.tlsHandshakeTimeoutSeconds == 5)
        #expect(xmpp.negotiationTimeoutSeconds == 15)
        #expect(xmpp.idleTimeoutSeconds == 600)
        #expect(xmpp.pingTimeoutSeconds == 60)
    }

    @Test(arguments: [
        ("max-connections", 1, 100_000),
        ("max-unauthenticated-connections", 1, 4096),
        ("tls-handshake-timeout-seconds", 1, 300),
        ("negotiation-timeout-seconds", 1, 300),
        ("idle-timeout-seconds", 1, 86_400),
        ("ping-timeout-seconds", 1, 3600),
    ])
    func bounds(key: String, lowest: Int, highest: Int) throws {
        // Per address may not exceed the total: keep it at its lowest here.
        let other = key == "max-unauthenticated-connections" ? "max-unauthenticated-connections-per-address = 1\n" : ""
        for value in [lowest, highest] {
            _ = try ServerConfiguration.parse("[xmpp]\n\(other)\(key) = \(value)", source: "test.conf")
        }
        for value in [lowest - 1, highest + 1] {
            #expect(throws: ConfigurationError(
                "test.conf: [xmpp] \(key) is \(value); it must be between \(lowest) and \(highest)")) {
                try ServerConfiguration.parse("[xmpp]\n\(other)\(key) = \(value)", source: "test.conf")
            }
        }
    }

    @Test func perAddressMayReachTheTotalButNotExceedIt() throws {
        let text = "[xmpp]\nmax-unauthenticated-connections = 40\nmax-unauthenticated-connections-per-address = "
        _ = try ServerConfiguration.parse(text + "40", source: "test.conf")
        _ = try ServerConfiguration.parse(text + "1", source: "test.conf")
        #expect(throws: ConfigurationError(
            "test.conf: [xmpp] max-unauthenticated-connections-per-address is 41; it must be between 1 and 40")) {
            try ServerConfiguration.parse(text + "41", source: "test.conf")
        }
        #expect(throws: ConfigurationError(
            "test.conf: [xmpp] max-unauthenticated-connections-per-address is 0; it must be between 1 and 40")) {
            try ServerConfiguration.parse(text + "0", source: "test.conf")
        }
    }
}
