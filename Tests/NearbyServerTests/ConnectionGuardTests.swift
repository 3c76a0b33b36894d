import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
@testable import NearbyServer
import ServerAPI
import SummarisedLog
import Testing

@Suite(.timeLimit(.minutes(1)))
struct RequestHeadScannerTests {
    func scan(_ parts: [String], line: Int = 32, head: Int = 64) -> [RequestHeadScanner.Verdict] {
        var scanner = RequestHeadScanner(maxRequestLineBytes: line, maxHeadBytes: head)
        return parts.map { scanner.scan(Array($0.utf8)) }
    }

    @Test func findsTheEndOfTheHeadAcrossReads() {
        #expect(scan(["GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY"]) == [.complete(consumed: 27)])
        #expect(scan(["GET / HTTP/1.1\r", "\nHost: a\r\n\r", "\nnext"]) == [.incomplete, .incomplete, .complete(consumed: 1)])
        // Bare line feeds end lines too.
        #expect(scan(["GET / HTTP/1.1\nHost: a\n\n"]) == [.complete(consumed: 24)])
        // Empty lines before the request line are skipped, not taken for its end.
        #expect(scan(["\r\n\r\nGET / HTTP/1.1\r\n\r\n"]) == [.complete(consumed: 22)])
    }

    @Test func requestLineAtItsLimitPassesAndOneMoreByteDoesNot() {
        let atLimit = "GET /" + String(repeating: "a", count: 32 - 14) + " HTTP/1.1"
        #expect(atLimit.utf8.count == 32)
        #expect(scan([atLimit + "\r\n\r\n"], head: 100) == [.complete(consumed: 36)])
        // Its carriage return does not count, even when it arrives alone.
        #expect(scan([atLimit, "\r", "\n\r\n"], head: 100) == [.incomplete, .incomplete, .complete(consumed: 3)])
        #expect(scan([atLimit + "x"], head: 100) == [.requestLineTooLong])
        #expect(scan([atLimit, "x"], head: 100) == [.incomplete, .requestLineTooLong])
        // Header lines are held to the head's limit only.
        #expect(scan(["GET / HTTP/1.1\r\nX: " + String(repeating: "b", count: 40) + "\r\n\r\n"], head: 100)
            == [.complete(consumed: 63)])
    }

    @Test func headAtItsLimitPassesAndOneMoreByteDoesNot() {
        let head = "GET / HTTP/1.1\r\nX: " + String(repeating: "b", count: 64 - 23) + "\r\n\r\n"
        #expect(head.utf8.count == 64)
        #expect(scan([head]) == [.complete(consumed: 64)])
        #expect(scan(["GET / HTTP/1.1\r\nX: " + String(repeating: "b", count: 64 - 22) + "\r\n\r\n"]) == [.headTooLarge])
        // Empty lines before the head count: they are bytes the server reads.
        #expect(scan([String(repeating: "\r\n", count: 33)]) == [.headTooLarge])
    }

    @Test func hasStartedOnlyWithARequestByte() {
        var scanner = RequestHeadScanner(maxRequestLineBytes: 32, maxHeadBytes: 64)
        _ = scanner.scan(Array("\r\n".utf8))
        #expect(!scanner.hasStarted)
        _ = scanner.scan(Array("G".utf8))
        #expect(scanner.hasStarted)
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ChunkedBodyScannerTests {
    func scan(_ parts: [String]) -> [ChunkedBodyScanner.Verdict] {
        var scanner = ChunkedBodyScanner(maxLineBytes: 16, maxTrailerBytes: 32)
        return parts.map { scanner.scan(Array($0.utf8)) }
    }

    @Test func findsTheEndAcrossReads() {
        #expect(scan(["5\r\nhello\r\n0\r\n\r\nGET"]) == [.complete(consumed: 15)])
        #expect(scan(["5\r\nhel", "lo\r", "\n0\r\n", "X: 1\r\n\r", "\nGET"])
            == [.incomplete, .incomplete, .incomplete, .incomplete, .complete(consumed: 1)])
        // Extensions, upper-case digits, bare line feeds.
        #expect(scan(["A;name=v\n0123456789\n0\n\n"]) == [.complete(consumed: 23)])
        // Data that looks like a line end is data.
        #expect(scan(["2\r\n\r\n\r\n0\r\n\r\n"]) == [.complete(consumed: 12)])
    }

    @Test func whatItCannotFollowIsMalformed() {
        #expect(scan(["zz\r\n"]) == [.malformed])
        #expect(scan(["\r\n"]) == [.malformed])
        #expect(scan(["5\r\nhelloX"]) == [.malformed])
        #expect(scan([String(repeating: "0", count: 17)]) == [.malformed])
        #expect(scan(["FFFFFFFFFFFFFFFFF\r\n"]) == [.malformed])
        #expect(scan(["0\r\n" + String(repeating: "X: 1\r\n", count: 7)]) == [.malformed])
    }
}

@Suite(.timeLimit(.minutes(1)))
struct ConnectionRegistryTests {
    let loop = EmbeddedEventLoop()

    func channel() -> EmbeddedChannel { EmbeddedChannel(loop: loop) }

    func admittedID(_ admission: ConnectionRegistry.Admission) -> ConnectionRegistry.ID? {
        if case .admitted(let id, _) = admission { id } else { nil }
    }

    func evicted(_ admission: ConnectionRegistry.Admission) -> (any Channel)? {
        if case .admitted(_, let evicted) = admission { evicted } else { nil }
    }

    @Test func theOldestIdleOfTheAddressMakesRoomThenTheNewIsRefused() throws {
        let registry = ConnectionRegistry(limits: .init(total: 10, perAddress: 2))
        let a = ClientAddress("10.0.0.1")
        let first = channel(), second = channel()
        let firstID = try #require(admittedID(registry.admit(first, from: a)))
        let secondID = try #require(admittedID(registry.admit(second, from: a)))
        // The first went busy and came back: the second is now the oldest idle.
        #expect(registry.setBusy(firstID))
        #expect(registry.setIdle(firstID))
        let third = registry.admit(channel(), from: a)
        #expect(evicted(third) === second)
        #expect(!registry.setBusy(secondID), "an evicted connection is told so")
        // Another address is counted apart.
        #expect(evicted(registry.admit(channel(), from: ClientAddress("10.0.0.2"))) == nil)
        // Both of the address busy: refused.
        #expect(registry.setBusy(firstID))
        #expect(registry.setBusy(try #require(admittedID(third))))
        guard case .refused(.address(limit: 2)) = registry.admit(channel(), from: a) else {
            Issue.record("expected a refusal by address")
            return
        }
        #expect(registry.count == 3)
    }

    @Test func atTheTotalTheOldestIdleOfAnyAddressMakesRoom() throws {
        let registry = ConnectionRegistry(limits: .init(total: 2, perAddress: 2))
        let first = channel()
        let firstID = try #require(admittedID(registry.admit(first, from: ClientAddress("10.0.0.1"))))
        let secondID = try #require(admittedID(registry.admit(channel(), from: ClientAddress("10.0.0.2"))))
        let third = registry.admit(channel(), from: ClientAddress("10.0.0.3"))
        #expect(evicted(third) === first)
        #expect(registry.count == 2)
        registry.remove(firstID)
        #expect(registry.count == 2, "removing an evicted connection again changes nothing")
        #expect(registry.setBusy(secondID))
        #expect(registry.setBusy(try #require(admittedID(third))))
        guard case .refused(.total(limit: 2)) = registry.admit(channel(), from: ClientAddress("10.0.0.4")) else {
            Issue.record("expected a refusal by total")
            return
        }
    }

    /// At the total, the oldest idle connection of the address holding the
    /// most makes room, not the oldest of all: a flood displaces itself.
    @Test func atTheTotalTheFullestAddressMakesRoom() throws {
        let registry = ConnectionRegistry(limits: .init(total: 3, perAddress: 3))
        let lone = channel()
        _ = try #require(admittedID(registry.admit(lone, from: ClientAddress("10.0.0.1"))))
        let flood = [channel(), channel()]
        for connection in flood { _ = try #require(admittedID(registry.admit(connection, from: ClientAddress("10.0.0.2")))) }
        #expect(evicted(registry.admit(channel(), from: ClientAddress("10.0.0.3"))) === flood[0])
    }

    /// A project's WebSockets take its share and give it back when they close;
    /// another project's have theirs.
    @Test func aProjectsWebSocketsAreCountedAgainstItsShare() throws {
        let registry = ConnectionRegistry(limits: .init(total: 10, perAddress: 10, perProject: 2))
        let address = ClientAddress("10.0.0.1")
        let sockets = [channel(), channel(), channel(), channel()]
        var ids: [ConnectionRegistry.ID] = []
        for socket in sockets { ids.append(try #require(admittedID(registry.admit(socket, from: address)))) }
        #expect(registry.claimSocket(sockets[0], for: "alpha"))
        #expect(registry.claimSocket(sockets[0], for: "alpha"), "claimed again by the same: still its own")
        #expect(registry.claimSocket(sockets[1], for: "alpha"))
        #expect(!registry.claimSocket(sockets[2], for: "alpha"))
        #expect(registry.claimSocket(sockets[3], for: "beta"))
        registry.remove(ids[0])
        #expect(registry.claimSocket(sockets[2], for: "alpha"))
        #expect(!registry.claimSocket(channel(), for: "alpha"), "a channel the registry does not hold")
    }

    @Test func ipv6ClientsCountByTheirSlash64() throws {
        let one = ClientAddress(try SocketAddress(ipAddress: "2001:db8:1:2:aaaa::1", port: 1))
        let two = ClientAddress(try SocketAddress(ipAddress: "2001:db8:1:2:bbbb::2", port: 2))
        let other = ClientAddress(try SocketAddress(ipAddress: "2001:db8:1:3::1", port: 1))
        #expect(one == two)
        #expect(one != other)
        #expect(one.description == "2001:db8:1:2::/64")
        #expect(ClientAddress(try SocketAddress(ipAddress: "::ffff:192.0.2.7", port: 1)).description == "192.0.2.7")
        #expect(ClientAddress(try SocketAddress(ipAddress: "192.0.2.7", port: 1)).description == "192.0.2.7")
    }
}

/// The guard's clocks, moved by hand on NIO's embedded event loop.
@Suite(.timeLimit(.minutes(1)))
struct ConnectionGuardTimeTests {
    static let settings = ConnectionGuard.Settings(
        headerTimeout: .seconds(10), idleTimeout: .seconds(60), requestTimeout: .seconds(30),
        maxRequestLineBytes: 1024, maxHeadBytes: 4096)

    /// A connected channel with the guard in front of the HTTP parser, encoder and observer.
    func connection(_ registry: ConnectionRegistry = ConnectionRegistry(limits: .init(total: 10, perAddress: 10)))
        throws -> (EmbeddedChannel, ConnectionRegistry) {
        let channel = EmbeddedChannel()
        let connectionGuard = ConnectionGuard(registry: registry, settings: Self.settings, logger: quietLogger(),
                                              refusals: SummarisedLog(logger: quietLogger()))
        try channel.pipeline.syncOperations.addHandler(connectionGuard)
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder()))
        try channel.pipeline.syncOperations.addHandler(HTTPResponseEncoder())
        try channel.pipeline.syncOperations.addHandler(RequestObserver(guard: connectionGuard))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return (channel, registry)
    }

    func written(_ channel: EmbeddedChannel) throws -> String {
        var text = ""
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { text += String(buffer: buffer) }
        return text
    }

    @Test func aHeadMustBeWholeWithinTheHeaderTimeout() throws {
        let (channel, registry) = try connection()
        try channel.writeInbound(ByteBuffer(string: "GET /v1/hea"))
        channel.embeddedEventLoop.advanceTime(by: .seconds(10) - .nanoseconds(1))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .nanoseconds(1))
        #expect(try written(channel).hasPrefix("HTTP/1.1 408 Request Timeout\r\n"))
        #expect(!channel.isActive)
        #expect(registry.count == 0)
    }

    @Test func aConnectionThatSendsNothingIsClosedWithoutAnAnswer() throws {
        let (channel, _) = try connection()
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(try written(channel) == "")
        #expect(!channel.isActive)
    }

    @Test func afterAResponseTheNextHeadHasTheIdleTimeoutThenTheHeaderTimeout() throws {
        let (channel, _) = try connection()
        try channel.writeInbound(ByteBuffer(string: "GET /v1/health HTTP/1.1\r\nHost: a\r\n\r\n"))
        _ = try channel.readInbound(as: HTTPServerRequestPart.self)
        // The application answers after 25 s, within the request timeout.
        channel.embeddedEventLoop.advanceTime(by: .seconds(25))
        try channel.writeOutbound(HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: .ok,
                                                                              headers: ["content-length": "0"])))
        try channel.writeOutbound(HTTPServerResponsePart.end(nil))
        _ = try written(channel)
        // Idle: 60 s for the next head, whose first byte then leaves it 10 s at most.
        channel.embeddedEventLoop.advanceTime(by: .seconds(55))
        try channel.writeInbound(ByteBuffer(string: "GET"))
        channel.embeddedEventLoop.advanceTime(by: .seconds(5) - .nanoseconds(1))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .nanoseconds(1))
        #expect(!channel.isActive)
    }

    @Test func aRequestMustBeAnsweredWithinTheRequestTimeout() throws {
        let (channel, registry) = try connection()
        try channel.writeInbound(ByteBuffer(string: "POST /v1/devices HTTP/1.1\r\nContent-Length: 5\r\n\r\nab"))
        channel.embeddedEventLoop.advanceTime(by: .seconds(30) - .nanoseconds(1))
        #expect(channel.isActive)
        #expect(registry.count == 1)
        channel.embeddedEventLoop.advanceTime(by: .nanoseconds(1))
        let answer = try written(channel)
        #expect(answer.hasPrefix("HTTP/1.1 408 Request Timeout\r\n"))
        #expect(answer.contains(#""error":"request_timeout""#))
        #expect(!channel.isActive)
    }

    @Test func aWebSocketHasNoneOfTheseTimeouts() throws {
        let (channel, _) = try connection()
        try channel.writeInbound(ByteBuffer(string: "GET /s HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n"))
        try channel.writeOutbound(HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: .switchingProtocols)))
        channel.embeddedEventLoop.advanceTime(by: .hours(1))
        #expect(channel.isActive)
    }

    @Test func aRefusedConnectionIsAnswered503AndClosed() throws {
        let registry = ConnectionRegistry(limits: .init(total: 1, perAddress: 1))
        let (busy, _) = try connection(registry)
        try busy.writeInbound(ByteBuffer(string: "POST /v1/devices HTTP/1.1\r\nContent-Length: 5\r\n\r\n"))
        let (refused, _) = try connection(registry)
        let answer = try written(refused)
        #expect(answer.hasPrefix("HTTP/1.1 503 Service Unavailable\r\n"))
        #expect(answer.contains("Retry-After: 1\r\n"))
        #expect(!refused.isActive)
        #expect(busy.isActive)
    }
}
