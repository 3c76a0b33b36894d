import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
@testable import NearbyServer
import ServerAPI
import TestSupport
import Testing

/// Connections as attackers hold them, over real sockets: heads too long,
/// heads that never end, bodies that never come, and more connections than
/// the server takes. Each limit at its edge: the limit passes, one more is
/// refused with the API's error and the connection closed.
@Suite(.timeLimit(.minutes(3)))
struct HTTPConnectionTests {
    /// A request whose request line is `length` bytes long (its CRLF aside).
    static func request(lineLength length: Int, path: String = "/v1/health?pad=", extra: String = "") -> String {
        let fixed = "GET \(path) HTTP/1.1".utf8.count
        let line = "GET \(path)\(String(repeating: "a", count: max(0, length - fixed))) HTTP/1.1"
        return "\(line)\r\nHost: test\r\n\(extra)\r\n"
    }

    /// A request whose head, its final empty line included, is `length` bytes.
    static func request(headLength length: Int) -> String {
        let bare = "GET /v1/health HTTP/1.1\r\nHost: test\r\nX-Pad: \r\n\r\n".utf8.count
        return "GET /v1/health HTTP/1.1\r\nHost: test\r\nX-Pad: \(String(repeating: "b", count: length - bare))\r\n\r\n"
    }

    static func port(_ harness: Harness) throws -> Int {
        try #require(harness.client.port)
    }

    @Test func requestLineAtTheLimitIsServedAndOneByteMoreIs414() async throws {
        try await withServer(live: true, configure: { $0.http.maxRequestLineBytes = 1024 }) { harness in
            let port = try Self.port(harness)
            let atLimit = try await RawConnection.open(port: port)
            try await atLimit.send(Self.request(lineLength: 1024))
            #expect(try await atLimit.response().status == 200)
            await atLimit.close()

            let over = try await RawConnection.open(port: port)
            try await over.send(Self.request(lineLength: 1025))
            let answer = try #require(RawResponse.all(in: try await over.closedByServer(within: 10)).first)
            #expect(answer.status == 414)
            #expect(answer.error?.error == .uriTooLong)
            #expect(answer.error?.message.contains("[http] max-request-line-bytes") == true)
        }
    }

    /// The report's attack: an 80 KiB request line got neither an answer nor a close.
    @Test func longRequestLineFromCurlIs414() async throws {
        try await withServer(live: true) { harness in
            let port = try Self.port(harness)
            let result = try await runProgram("/usr/bin/curl", [
                "-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}",
                "http://127.0.0.1:\(port)/v1/health?pad=\(String(repeating: "x", count: 80 * 1024))",
            ])
            #expect(result.status == 0, "\(result.output)")
            #expect(result.output.hasSuffix("\n414"), "\(result.output)")
            #expect(result.output.contains(#""error":"uri_too_long""#))
        }
    }

    @Test func headAtTheLimitIsServedAndOneByteMoreIs431() async throws {
        try await withServer(live: true, configure: { $0.http.maxHeaderBytes = 4096 }) { harness in
            let port = try Self.port(harness)
            let atLimit = try await RawConnection.open(port: port)
            try await atLimit.send(Self.request(headLength: 4096))
            #expect(try await atLimit.response().status == 200)
            await atLimit.close()

            let over = try await RawConnection.open(port: port)
            try await over.send(Self.request(headLength: 4097))
            let answer = try #require(RawResponse.all(in: try await over.closedByServer(within: 10)).first)
            #expect(answer.status == 431)
            #expect(answer.error?.error == .headersTooLarge)
            #expect(answer.error?.message.contains("[http] max-header-bytes") == true)
        }
    }

    /// Every request of a kept-alive connection is held to the limits, also
    /// one sent before the previous was answered; a body is not taken for a head.
    @Test func laterRequestsOnAConnectionAreHeldToTheLimitsToo() async throws {
        try await withServer(live: true, configure: { $0.http.maxRequestLineBytes = 1024; $0.http.maxHeaderBytes = 4096 }) { harness in
            let port = try Self.port(harness)
            let connection = try await RawConnection.open(port: port)
            // A body larger than a head may be: refused for its API key, then the next request is served.
            let body = String(repeating: "{", count: 6000)
            try await connection.send("POST /v1/devices HTTP/1.1\r\nHost: test\r\nX-Api-Key: wrong\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
            #expect(try await connection.response(1).status == 401)
            try await connection.send(Self.request(lineLength: 1024))
            #expect(try await connection.response(2).status == 200)
            // The same body chunked, with an extension and a trailer.
            let chunked = "1000;x=y\r\n\(body.prefix(4096))\r\n\(String(6000 - 4096, radix: 16))\r\n\(body.dropFirst(4096))\r\n0\r\nX-T: 1\r\n\r\n"
            try await connection.send("POST /v1/devices HTTP/1.1\r\nHost: test\r\nX-Api-Key: wrong\r\nTransfer-Encoding: chunked\r\n\r\n\(chunked)")
            #expect(try await connection.response(3).status == 401)
            try await connection.send(Self.request(lineLength: 1024))
            #expect(try await connection.response(4).status == 200)
            // Two at once: the first is answered, the second refused.
            try await connection.send(Self.request(lineLength: 100) + Self.request(lineLength: 1025))
            let responses = RawResponse.all(in: try await connection.closedByServer(within: 10))
            #expect(responses.map(\.status) == [401, 200, 401, 200, 200, 414])
        }
    }

    /// What is not HTTP/1.1 is answered, first request or later, and the connection closed.
    @Test(arguments: ["HELLO WORLD\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\n"])
    func notHTTPIsAnswered400(request: String) async throws {
        try await withServer(live: true) { harness in
            let port = try Self.port(harness)
            let first = try await RawConnection.open(port: port)
            try await first.send(request)
            let answer = try #require(RawResponse.all(in: try await first.closedByServer(within: 10)).first)
            #expect(answer.status == 400)
            let later = try await RawConnection.open(port: port)
            try await later.send(Self.request(lineLength: 100) + request)
            #expect(RawResponse.all(in: try await later.closedByServer(within: 10)).map(\.status) == [200, 400])
        }
    }

    /// A body the guard cannot follow: the route's answer goes out, and the
    /// connection ends after it, since where a next head would begin is not known.
    @Test func aBodyThatCannotBeFollowedEndsItsConnectionAfterTheAnswer() async throws {
        try await withServer(live: true) { harness in
            let connection = try await RawConnection.open(port: try Self.port(harness))
            try await connection.send("GET /v1/health HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
            // The parser's own refusal of the body (400) may follow the answer.
            #expect(RawResponse.all(in: try await connection.closedByServer(within: 10)).first?.status == 200)
        }
    }

    /// The report's attack: `GET /v1/hea` and then nothing held a connection for good.
    @Test func aHeadThatDoesNotEndInTimeIs408AndClosed() async throws {
        // 3 s: time for the half head to be sent on a loaded machine before the server gives up on it.
        try await withServer(live: true, configure: { $0.http.headerTimeoutSeconds = 3 }) { harness in
            let port = try Self.port(harness)
            let started = ContinuousClock.now
            let halfHead = try await RawConnection.open(port: port)
            try await halfHead.send("GET /v1/hea")
            let silent = try await RawConnection.open(port: port)
            let answer = try #require(RawResponse.all(in: try await halfHead.closedByServer(within: 10)).first)
            #expect(answer.status == 408)
            #expect(answer.error?.error == .requestTimeout)
            // Nothing sent, nothing to answer: closed.
            #expect(try await silent.closedByServer(within: 10) == "")
            #expect(ContinuousClock.now - started >= .seconds(3))
        }
    }

    @Test func aKeptAliveConnectionWithNoNextRequestIsClosed() async throws {
        try await withServer(live: true, configure: { $0.http.idleTimeoutSeconds = 1 }) { harness in
            let connection = try await RawConnection.open(port: try Self.port(harness))
            try await connection.send(Self.request(lineLength: 100))
            let text = try await connection.closedByServer(within: 10)
            #expect(RawResponse.all(in: text).map(\.status) == [200])
        }
    }

    /// A body that never comes, as a response that is never read, ends at the request timeout.
    @Test func aBodyThatDoesNotComeIs408AndClosed() async throws {
        try await withServer(live: true, configure: { $0.http.requestTimeoutSeconds = 1 }) { harness in
            let device = try await Self.devices(1, harness)[0]
            let connection = try await RawConnection.open(port: try Self.port(harness))
            try await connection.send("""
                POST \(APIPath.sightings(device.id)) HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(device.registration.secret)\r\n\
                Content-Length: 100\r\n\r\n{"seen":
                """)
            let answer = try #require(RawResponse.all(in: try await connection.closedByServer(within: 10)).first)
            #expect(answer.status == 408)
            #expect(answer.error?.message.contains("[http] request-timeout-seconds") == true)
        }
    }

    /// Opens a connection and has one request answered on it, so that the
    /// server holds it idle from then, after the ones opened before.
    static func idleConnection(_ port: Int, from source: String = "127.0.0.1") async throws -> RawConnection {
        let connection = try await RawConnection.open(port: port, from: source)
        try await connection.send(request(lineLength: 100))
        _ = try await connection.response()
        return connection
    }

    /// Devices registered without the test's HTTP client, whose own
    /// connection would count against the limits these tests reach.
    static func devices(_ count: Int, _ harness: Harness, project: String = "alpha") async throws -> [TestDevice] {
        let key = try await harness.createProject(project)
        var devices: [TestDevice] = []
        for _ in 0..<count { devices.append(TestDevice(registration: try await harness.service.registerDevice(apiKey: key, from: ClientAddress("test")))) }
        return devices
    }

    /// Opens a connection the server holds busy: `device`'s stream, a WebSocket.
    static func busyConnection(_ port: Int, _ device: TestDevice, from source: String = "127.0.0.1") async throws -> RawConnection {
        let (connection, response) = try await upgrade(port, device, from: source)
        #expect(response.status == 101)
        return connection
    }

    /// Asks for `device`'s stream (`path`: its channel) on a new connection; the answer.
    static func upgrade(_ port: Int, _ device: TestDevice, path: String? = nil,
                        from source: String = "127.0.0.1") async throws -> (RawConnection, RawResponse) {
        let connection = try await RawConnection.open(port: port, from: source)
        try await connection.send("""
            GET \(path ?? APIPath.stream(device.id)) HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
            Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
            Authorization: Bearer \(device.registration.secret)\r\n\r\n
            """)
        return (connection, try await connection.response())
    }

    /// The report's attack, scaled down: devices holding one project's public
    /// API key open WebSockets from two addresses until the server would be
    /// full. They get their project's share (by default three quarters of
    /// `max-connections`); one more is closed once open, with 1013 (try again
    /// later) and the reason; and another project's device still opens its
    /// channel from a third address.
    @Test func oneProjectsWebSocketsLeaveAnotherProjectItsPlaces() async throws {
        try await withServer(live: true, configure: { $0.http.maxConnections = 8; $0.http.maxConnectionsPerAddress = 4 }) { harness in
            let port = try Self.port(harness)
            let alpha = try await Self.devices(8, harness)
            var held: [RawConnection] = []
            for (index, device) in alpha.prefix(6).enumerated() {
                held.append(try await Self.busyConnection(port, device, from: index < 3 ? "127.0.0.2" : "127.0.0.3"))
            }
            for (index, device) in alpha.suffix(2).enumerated() {
                let refused = try await Self.busyConnection(port, device, from: index == 0 ? "127.0.0.2" : "127.0.0.3")
                let close = try await refused.closedByServer(within: 10)
                // The close frame's reason (after its code, 1013).
                #expect(close.contains("[http] max-websockets-per-project"), "\(close)")
            }
            let beta = try await Self.devices(1, harness, project: "beta")[0]
            let (channel, answer) = try await Self.upgrade(port, beta, path: APIPath.channel(beta.id), from: "127.0.0.4")
            #expect(answer.status == 101)
            #expect(held.allSatisfy { $0.isOpen })
            await channel.close()
        }
    }

    @Test func perAddressLimitClosesTheOldestIdleConnectionFirst() async throws {
        try await withServer(live: true, configure: { $0.http.maxConnectionsPerAddress = 3 }) { harness in
            let port = try Self.port(harness)
            var connections: [RawConnection] = []
            for _ in 0..<3 { connections.append(try await Self.idleConnection(port)) }
            // Another address is not counted with these.
            let other = try await Self.idleConnection(port, from: "127.0.0.2")
            // The fourth from the address takes the first one's place.
            let fourth = try await RawConnection.open(port: port)
            try await fourth.send(Self.request(lineLength: 100))
            #expect(try await fourth.response().status == 200)
            #expect(RawResponse.all(in: try await connections[0].closedByServer(within: 10)).count == 1)
            #expect(connections[1].isOpen && connections[2].isOpen && other.isOpen)
            // The oldest idle is now the second.
            let fifth = try await Self.idleConnection(port)
            _ = try await connections[1].closedByServer(within: 10)
            #expect(connections[2].isOpen && fourth.isOpen && fifth.isOpen)
            #expect(harness.server.connections.count == 4)
        }
    }

    @Test func whenAllOfAnAddressAreBusyTheNextIsRefused503() async throws {
        try await withServer(live: true, configure: { $0.http.maxConnectionsPerAddress = 2 }) { harness in
            let port = try Self.port(harness)
            let devices = try await Self.devices(2, harness)
            let busy = [try await Self.busyConnection(port, devices[0]), try await Self.busyConnection(port, devices[1])]
            let refused = try await RawConnection.open(port: port)
            let answer = try #require(RawResponse.all(in: try await refused.closedByServer(within: 10)).first)
            #expect(answer.status == 503)
            #expect(answer.error?.error == .tooManyConnections)
            let message = answer.error?.message ?? ""
            #expect(message.contains("[http] max-connections-per-address"))
            #expect(answer.headers["retry-after"] == "1")
            #expect(busy.allSatisfy { $0.isOpen })
            // Another address still gets in.
            let other = try await RawConnection.open(port: port, from: "127.0.0.2")
            try await other.send(Self.request(lineLength: 100))
            #expect(try await other.response().status == 200)
        }
    }

    @Test func globalLimitClosesTheOldestIdleOfAnyAddressThenRefuses() async throws {
        try await withServer(live: true, configure: {
            $0.http.maxConnections = 3
            $0.http.maxConnectionsPerAddress = 2
            // The devices are one project's: no share below the total here.
            $0.http.maxWebSocketsPerProject = 3
        }) { harness in
            let port = try Self.port(harness)
            let devices = try await Self.devices(3, harness)
            let idle = try await Self.idleConnection(port, from: "127.0.0.2")
            let busy = [try await Self.busyConnection(port, devices[0]), try await Self.busyConnection(port, devices[1], from: "127.0.0.3")]
            // At the limit: the idle one makes room.
            let third = try await Self.busyConnection(port, devices[2], from: "127.0.0.4")
            _ = try await idle.closedByServer(within: 10)
            // Now all three are busy: refused.
            let refused = try await RawConnection.open(port: port, from: "127.0.0.5")
            let answer = try #require(RawResponse.all(in: try await refused.closedByServer(within: 10)).first)
            #expect(answer.status == 503)
            let message = answer.error?.message ?? ""
            #expect(message.contains("[http] max-connections)"))
            #expect((busy + [third]).allSatisfy { $0.isOpen })
        }
    }

    /// The report's attack, scaled down: connections that send `GET /v1/hea`
    /// and stop, more than the server takes. The server keeps at most its
    /// limit, closes every one of them, and answers others meanwhile.
    @Test func halfSentHeadsDoNotLockOthersOut() async throws {
        try await withServer(live: true, configure: {
            $0.http.maxConnections = 64
            $0.http.maxConnectionsPerAddress = 32
            $0.http.headerTimeoutSeconds = 2
        }) { harness in
            let port = try Self.port(harness)
            var attackers: [RawConnection] = []
            for index in 0..<150 {
                let connection = try await RawConnection.open(port: port, from: "127.0.1.\(index % 5 + 1)")
                do {
                    try await connection.send("GET /v1/hea")
                } catch ChannelError.ioOnClosedChannel {
                    // One beyond the limits: refused (503) and closed before it could send.
                }
                attackers.append(connection)
            }
            #expect(harness.server.connections.count <= 64)
            let health = try await runProgram("/usr/bin/curl", [
                "-sS", "--max-time", "5", "--interface", "127.0.2.1", "-o", "/dev/null", "-w", "%{http_code}",
                "http://127.0.0.1:\(port)/v1/health",
            ])
            #expect(health.output == "200", "\(health.output)")
            for attacker in attackers { _ = try await attacker.closedByServer(within: 15) }
        }
    }
}
