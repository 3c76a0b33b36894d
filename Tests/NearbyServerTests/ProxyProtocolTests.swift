import ConfigFile
import Foundation
@testable import NearbyServer
import Testing
import TestSupport

/// The PROXY protocol version 2 header a load balancer sends before a
/// client's bytes, read as the specification (haproxy's proxy-protocol.txt)
/// lays it out.
@Suite struct ProxyProtocolHeaderTests {
    /// A PROXY command header of `family` (1 IPv4, 2 IPv6, 3 UNIX) with
    /// these address bytes, and `extra` bytes of TLVs after them.
    static func header(command: UInt8 = 1, family: UInt8 = 1, addresses: [UInt8], extra: Int = 0) -> [UInt8] {
        let length = addresses.count + extra
        return ProxyProtocolHeader.signature + [0x20 | command, family << 4 | 1, UInt8(length >> 8), UInt8(length & 0xFF)]
            + addresses + [UInt8](repeating: 0, count: extra)
    }

    static let ipv4 = header(addresses: [203, 0, 113, 7, 10, 0, 0, 1, 0x30, 0x39, 0x1F, 0x90])

    @Test func anIPv4HeaderNamesTheClientAndSaysWhereItEnds() {
        let bytes = Self.ipv4 + Array("GET / HTTP/1.1\r\n".utf8)
        #expect(ProxyProtocolHeader.parse(bytes, maxBytes: 4096) == .complete(consumed: 28, client: ClientAddress("203.0.113.7")))
    }

    @Test func anIPv6ClientCountsByItsSlash64AndAMappedIPv4OneAsIPv4() {
        var v6 = [UInt8](repeating: 0, count: 36)
        v6[0] = 0x20; v6[1] = 0x01; v6[2] = 0x0d; v6[3] = 0xb8; v6[15] = 1
        #expect(ProxyProtocolHeader.parse(Self.header(family: 2, addresses: v6), maxBytes: 4096)
                == .complete(consumed: 52, client: ClientAddress("2001:db8:0:0::/64")))
        var mapped = [UInt8](repeating: 0, count: 36)
        mapped[10] = 0xFF; mapped[11] = 0xFF; mapped[12] = 198; mapped[13] = 51; mapped[14] = 100; mapped[15] = 9
        #expect(ProxyProtocolHeader.parse(Self.header(family: 2, addresses: mapped), maxBytes: 4096)
                == .complete(consumed: 52, client: ClientAddress("198.51.100.9")))
    }

    /// haproxy's health checks send LOCAL; UNSPEC gives no address: the
    /// connection's own peer stands.
    @Test func localAndUnspecifiedLeaveTheConnectionItsOwnAddress() {
        #expect(ProxyProtocolHeader.parse(Self.header(command: 0, family: 0, addresses: []), maxBytes: 4096)
                == .complete(consumed: 16, client: nil))
        #expect(ProxyProtocolHeader.parse(Self.header(family: 0, addresses: [], extra: 4), maxBytes: 4096)
                == .complete(consumed: 20, client: nil))
    }

    /// Each prefix of a header is incomplete; the whole is read the same
    /// however it is split.
    @Test func everyPrefixOfAHeaderWaitsForMore() {
        let bytes = Self.header(addresses: Array(Self.ipv4[16...]), extra: 30)
        for end in 0..<bytes.count {
            #expect(ProxyProtocolHeader.parse(bytes[..<end], maxBytes: 4096) == .incomplete, "prefix of \(end) bytes")
        }
        #expect(ProxyProtocolHeader.parse(bytes, maxBytes: 4096) == .complete(consumed: 58, client: ClientAddress("203.0.113.7")))
    }

    /// Refused at the first wrong byte, by name: plain HTTP, version 1's
    /// text line, another version, a header over the limit.
    @Test func whatIsNotAVersion2HeaderIsRefusedAtOnceWithItsReason() {
        #expect(ProxyProtocolHeader.parse(Array("GET /v1/health HTTP/1.1\r\n".utf8), maxBytes: 4096)
                == .refused("no PROXY protocol version 2 header"))
        #expect(ProxyProtocolHeader.parse(Array("G".utf8), maxBytes: 4096) == .refused("no PROXY protocol version 2 header"))
        guard case .refused(let v1) = ProxyProtocolHeader.parse(Array("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n".utf8), maxBytes: 4096) else {
            Issue.record("version 1 taken")
            return
        }
        #expect(v1.contains("version 1") && v1.contains("send-proxy-v2"))
        var version3 = Self.ipv4
        version3[12] = 0x31
        #expect(ProxyProtocolHeader.parse(version3, maxBytes: 4096) == .refused("a PROXY protocol header of version 3, not 2"))
    }

    /// The limit is the whole header's, TLVs included: at it taken, one over
    /// refused as soon as the length is read.
    @Test func aHeaderOverTheLimitIsRefusedFromItsLength() {
        let atLimit = Self.header(addresses: Array(Self.ipv4[16...]), extra: 100)
        #expect(ProxyProtocolHeader.parse(atLimit, maxBytes: 128) == .complete(consumed: 128, client: ClientAddress("203.0.113.7")))
        let over = Self.header(addresses: Array(Self.ipv4[16...]), extra: 101)
        #expect(ProxyProtocolHeader.parse(over[..<16], maxBytes: 128)
                == .refused("a PROXY protocol header of 129 bytes, more than the 128 taken"))
    }

    @Test func aLengthTooShortForTheFamilyIsRefused() {
        #expect(ProxyProtocolHeader.parse(Self.header(addresses: [1, 2, 3, 4]), maxBytes: 4096)
                == .refused("a PROXY protocol header too short for its IPv4 addresses"))
    }
}

/// `[http] proxy-protocol-from`: addresses and prefixes of both families.
@Suite struct ProxyProtocolFromTests {
    @Test func addressesAndPrefixesMatchTheirClientsOnly() throws {
        let prefixes = try AddressPrefixes(["127.0.0.1", "10.0.0.0/8", "fd00::/8"], what: "x")
        #expect(prefixes.contains(try .init(ipAddress: "127.0.0.1", port: 1)))
        #expect(!prefixes.contains(try .init(ipAddress: "127.0.0.2", port: 1)))
        #expect(prefixes.contains(try .init(ipAddress: "10.255.0.3", port: 1)))
        #expect(!prefixes.contains(try .init(ipAddress: "11.0.0.1", port: 1)))
        #expect(prefixes.contains(try .init(ipAddress: "fd12::1", port: 1)))
        #expect(!prefixes.contains(try .init(ipAddress: "fe80::1", port: 1)))
        #expect(prefixes.contains(try .init(ipAddress: "::ffff:10.1.2.3", port: 1)))
        #expect(!AddressPrefixes.none.contains(try .init(ipAddress: "127.0.0.1", port: 1)))
    }

    @Test func aWrongEntryIsRefusedNamingTheKeyAndTheEntry() throws {
        for (entry, words) in [("lb.example", "not an IP address"), ("10.0.0.0/33", "0 to 32"), ("::/129", "0 to 128"), ("10.0.0.0/", "0 to 32")] {
            let error = try #require(throws: ConfigurationError.self) {
                try ServerConfiguration.parse("[http]\nproxy-protocol-from = [\"\(entry)\"]\n", source: "s.conf").validate()
            }
            #expect("\(error)".contains("[http] proxy-protocol-from") && "\(error)".contains(entry) && "\(error)".contains(words),
                    "\(error)")
        }
        let taken = try ServerConfiguration.parse("[http]\nproxy-protocol-from = [\"127.0.0.1\", \"::1\"]\n", source: "s.conf")
        #expect(taken.http.proxyProtocolFrom == ["127.0.0.1", "::1"])
    }
}

/// A real nearby-server with `[http] proxy-protocol-from` naming the test's
/// address: the header is required from it, read, and then the HTTP behind it
/// served; from any other address no header is read.
@Suite(.timeLimit(.minutes(2))) struct ProxyProtocolServerTests {
    static func withServer(_ body: @escaping (ServerProcess) async throws -> Void) async throws {
        try await withTemporaryDirectory { directory in
            let server = try await ServerProcess.start(in: directory, http: """
                proxy-protocol-from = ["127.0.0.1"]
                max-connections-per-address = 1
                header-timeout-seconds = 2
                """)
            try await body(server)
            await server.stop()
        }
    }

    /// A header naming `client`, and what follows it.
    static func header(client: [UInt8], then text: String = "") -> [UInt8] {
        ProxyProtocolHeaderTests.header(addresses: client + [127, 0, 0, 1, 0x30, 0x39, 0x1F, 0x90]) + Array(text.utf8)
    }

    @Test func aRequestAfterTheHeaderIsServed() async throws {
        try await Self.withServer { server in
            let connection = try await RawConnection.open(port: server.port)
            try await connection.send(Self.header(client: [203, 0, 113, 7], then: "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"))
            #expect(try await connection.response().status == 200)
        }
    }

    /// Connections count against the client the header names: with one
    /// connection an address, a second of the same client takes the first's
    /// place (it was idle), one of another client does not.
    @Test func connectionsCountAgainstTheClientTheHeaderNames() async throws {
        try await Self.withServer { server in
            let first = try await RawConnection.open(port: server.port)
            try await first.send(Self.header(client: [203, 0, 113, 7]))
            let other = try await RawConnection.open(port: server.port)
            try await other.send(Self.header(client: [198, 51, 100, 9]))
            try await other.send("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await other.response().status == 200)
            #expect(first.isOpen, "another client's connection took the first's place")
            let second = try await RawConnection.open(port: server.port)
            try await second.send(Self.header(client: [203, 0, 113, 7]))
            _ = try await first.closedByServer(within: 10, "the same client's idle connection to make room")
            try await second.send("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await second.response().status == 200)
        }
    }

    /// From a listed address a connection without a header is closed with
    /// no answer (the balancer is misconfigured), as is one whose header does
    /// not come within the header timeout; from another address a header is
    /// not read, and the HTTP parser refuses it.
    @Test func theHeaderIsRequiredFromTheBalancerAndReadFromNoOneElse() async throws {
        try await Self.withServer { server in
            let plain = try await RawConnection.open(port: server.port)
            try await plain.send("GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
            #expect(try await plain.closedByServer(within: 10) == "")
            let silent = try await RawConnection.open(port: server.port)
            try await silent.send(ProxyProtocolHeader.signature)
            #expect(try await silent.closedByServer(within: 10, "the header timeout") == "")
            let direct = try await RawConnection.open(port: server.port, from: "127.0.0.2")
            try await direct.send(Self.header(client: [203, 0, 113, 7], then: "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"))
            #expect(try await direct.closedByServer(within: 10).hasPrefix("HTTP/1.1 400"))
        }
    }
}
