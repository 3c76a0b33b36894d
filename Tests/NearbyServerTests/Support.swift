import Foundation
import Hummingbird
import HummingbirdTesting
import HummingbirdWSClient
import HummingbirdWSTesting
import Logging
import NIOCore
import NearbyCore
@testable import NearbyServer
import ServerAPI
import Testing

/// The time every test starts at (2023-11-14T22:13:20Z); tests move it by hand.
let startMs: UInt64 = 1_700_000_000_000

/// A fresh directory, removed when `body` ends however it ends.
func withTemporaryDirectory<T>(_ body: (URL) async throws -> T) async throws -> T {
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("nearby-server-tests-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    return try await body(directory)
}

/// The servers' logger in tests: silent, unless `NEARBY_TEST_LOG=debug` is
/// set to see what a failing test's servers said.
func quietLogger() -> Logger {
    var logger = Logger(label: "nearby-server-test")
    logger.logLevel = ProcessInfo.processInfo.environment["NEARBY_TEST_LOG"] == "debug" ? .debug : .critical
    return logger
}

func testConfiguration(databasePath: String, _ configure: (inout ServerConfiguration) -> Void = { _ in }) -> ServerConfiguration {
    var configuration = ServerConfiguration()
    configuration.databasePath = databasePath
    configuration.listen = ListenAddress(host: "127.0.0.1", port: 0)
    // HummingbirdTesting's live client connects once, when the server starts,
    // and sends its first head when the test gets to it: on a loaded machine
    // that can be later than the default 10 s, and the server rightly closes
    // the connection (tests of the timeout set their own).
    configuration.http.headerTimeoutSeconds = 600
    configure(&configuration)
    return configuration
}

/// Runs `body` against a server on a temporary database with a manual clock.
/// `live` serves over a real socket (needed for streams); otherwise requests
/// go straight to the router. No sweeper runs: tests call `sweep()`.
func withServer(live: Bool = false, configure: (inout ServerConfiguration) -> Void = { _ in },
                _ body: @escaping @Sendable (Harness) async throws -> Void) async throws {
    try await withTemporaryDirectory { directory in
        let clock = ManualWallClock(nowMs: startMs)
        let configuration = testConfiguration(databasePath: directory.appendingPathComponent("db/nearby.sqlite").path,
                                              configure)
        let server = try await NearbyServer.open(configuration: configuration, clock: clock, logger: quietLogger())
        try await server.makeApplication(sweepInterval: nil).test(live ? .live : .router) { client in
            try await body(Harness(server: server, clock: clock, client: client))
        }
    }
}

/// A test's view of one server: its clock, its client and shortcuts for the API.
struct Harness: Sendable {
    let server: NearbyServer
    let clock: ManualWallClock
    let client: any TestClientProtocol

    var service: NearbyService { server.service }

    /// Creates a project as the CLI does and returns its API key.
    func createProject(_ name: String) async throws -> String {
        try await ProjectAdmin(storage: service.storage, clock: clock).create(name: name).apiKey
    }

    func register(apiKey: String) async throws -> TestDevice {
        let response = try await request(.post, APIPath.devices, headers: [HTTPAPI.apiKeyField: apiKey])
        return TestDevice(registration: try decode(DeviceRegistration.self, response, status: .created))
    }

    /// A project with `count` devices.
    func devices(_ count: Int, project: String = "alpha") async throws -> [TestDevice] {
        let key = try await createProject(project)
        var devices: [TestDevice] = []
        for _ in 0..<count { devices.append(try await register(apiKey: key)) }
        return devices
    }

    func request(_ method: HTTPRequest.Method, _ path: String, headers: HTTPFields = [:], body: Data? = nil) async throws -> TestResponse {
        try await client.execute(uri: path, method: method, headers: headers, body: body.map { ByteBuffer(bytes: $0) })
    }

    func request(_ method: HTTPRequest.Method, _ path: String, as device: TestDevice, json: some Encodable) async throws -> TestResponse {
        try await request(method, path, headers: device.auth, body: try JSONEncoder().encode(json))
    }

    func issueToken(_ device: TestDevice) async throws -> IssuedToken {
        try decode(IssuedToken.self, try await request(.post, APIPath.tokens(device.id), headers: device.auth), status: .created)
    }

    @discardableResult
    func publish(_ device: TestDevice, _ id: String, type: String = "greeting", namespace: String = "",
                 content: String = "hello", mediums: [Medium] = [.ble], mode: DiscoveryMode = .broadcast,
                 ttlSeconds: UInt64 = 300) async throws -> PublicationRecord {
        let spec = PublicationSpec(namespace: namespace, type: type, content: Data(content.utf8), mediums: mediums, mode: mode,
                                   expiresAtMs: clock.nowMs + ttlSeconds * 1000)
        return try decode(PublicationRecord.self, try await request(.put, APIPath.publication(device.id, id), as: device, json: spec))
    }

    @discardableResult
    func subscribe(_ device: TestDevice, _ id: String, type: String = "", namespace: String = "", mediums: [Medium] = [.ble],
                   mode: DiscoveryMode = .scan, ttlSeconds: UInt64 = 0) async throws -> SubscriptionRecord {
        let spec = SubscriptionSpec(namespace: namespace, type: type, mediums: mediums, mode: mode,
                                    expiresAtMs: ttlSeconds == 0 ? 0 : clock.nowMs + ttlSeconds * 1000)
        return try decode(SubscriptionRecord.self, try await request(.put, APIPath.subscription(device.id, id), as: device, json: spec))
    }

    /// `observer` reports hearing (and no longer hearing) tokens.
    @discardableResult
    func report(_ observer: TestDevice, seen: [(Token, Medium)] = [], gone: [(Token, Medium)] = [],
                rssi: Int = -60) async throws -> [SightingResults.Status] {
        let report = SightingReport(
            seen: seen.map { .init(token: $0.0, medium: $0.1, rssi: rssi, distance: 1.5, seenAtMs: clock.nowMs) },
            gone: gone.map { .init(token: $0.0, medium: $0.1) })
        let results = try decode(SightingResults.self,
                                 try await request(.post, APIPath.sightings(observer.id), as: observer, json: report))
        return results.results.map(\.status)
    }

    /// Posts a batch of `device`'s changes and returns the results.
    func applyChanges(_ device: TestDevice, _ changes: [ChangeBatch.Change]) async throws -> ChangeResults {
        try decode(ChangeResults.self, try await request(.post, APIPath.changes(device.id), as: device, json: ChangeBatch(changes: changes)))
    }

    func openStream(_ device: TestDevice) async throws -> TestStream {
        try await TestStream.open(client: client, device: device)
    }
}

struct TestDevice: Sendable {
    let registration: DeviceRegistration
    var id: String { registration.device }
    var auth: HTTPFields { [.authorization: "Bearer \(registration.secret)"] }
}

struct UnexpectedResponse: Error, CustomStringConvertible {
    var description: String
}

/// Decodes a response body after checking its status.
func decode<T: Decodable>(_ type: T.Type, _ response: TestResponse, status: HTTPResponse.Status = .ok) throws -> T {
    let body = Data(response.body.readableBytesView)
    guard response.status == status else {
        throw UnexpectedResponse(description: "expected \(status), got \(response.status): \(String(decoding: body, as: UTF8.self))")
    }
    return try JSONDecoder().decode(T.self, from: body)
}

/// Checks a response is the named error, with a message mentioning `mentioning`.
func expectError(_ response: TestResponse, _ status: HTTPResponse.Status, _ code: APIError.Code, mentioning: String? = nil,
                 sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(response.status == status, sourceLocation: sourceLocation)
    guard let error = try? JSONDecoder().decode(APIError.self, from: Data(response.body.readableBytesView)) else {
        Issue.record("not an APIError body: \(String(buffer: response.body))", sourceLocation: sourceLocation)
        return
    }
    #expect(error.error == code, "\(error)", sourceLocation: sourceLocation)
    if let mentioning {
        #expect(error.message.contains(mentioning), "'\(error.message)' does not mention '\(mentioning)'", sourceLocation: sourceLocation)
    }
}

/// Events a stream received, handed out in order.
actor EventInbox {
    private var buffered: [StreamEvent] = []
    private var waiter: CheckedContinuation<StreamEvent?, Never>?
    private var finished = false

    func push(_ event: StreamEvent) {
        if let waiter {
            self.waiter = nil
            waiter.resume(returning: event)
        } else {
            buffered.append(event)
        }
    }

    func finish() {
        finished = true
        waiter?.resume(returning: nil)
        waiter = nil
    }

    func next() async -> StreamEvent? {
        if !buffered.isEmpty { return buffered.removeFirst() }
        if finished { return nil }
        return await withCheckedContinuation { waiter = $0 }
    }
}

/// A device's stream as a test drives it: events in order, requests out.
/// Opening waits for the first snapshot, so the server has the stream before
/// the test goes on.
final class TestStream: Sendable {
    private let inbox: EventInbox
    private let commands: AsyncStream<String?>.Continuation
    private let connection: Task<WebSocketCloseFrame?, any Error>

    private init(inbox: EventInbox, commands: AsyncStream<String?>.Continuation, connection: Task<WebSocketCloseFrame?, any Error>) {
        self.inbox = inbox
        self.commands = commands
        self.connection = connection
    }

    static func open(client: any TestClientProtocol, device: TestDevice) async throws -> TestStream {
        let inbox = EventInbox()
        let (commandStream, commands) = AsyncStream.makeStream(of: String?.self)
        // Default frame size, as nearbyd's client has: big events arrive fragmented.
        let configuration = WebSocketClientConfiguration(additionalHeaders: device.auth)
        let connection = Task {
            do {
                let closeFrame = try await connect(client, device, configuration, inbox, commandStream)
                await inbox.finish()
                return closeFrame
            } catch {
                // A refused upgrade must not leave a reader waiting.
                await inbox.finish()
                throw error
            }
        }
        let stream = TestStream(inbox: inbox, commands: commands, connection: connection)
        // The answer proves the server holds the stream.
        _ = try await stream.snapshot()
        return stream
    }

    private static func connect(_ client: any TestClientProtocol, _ device: TestDevice, _ configuration: WebSocketClientConfiguration,
                                _ inbox: EventInbox, _ commandStream: AsyncStream<String?>) async throws -> WebSocketCloseFrame? {
        try await client.ws(APIPath.stream(device.id), configuration: configuration, logger: quietLogger()) {
            inbound, outbound, _ in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for try await message in inbound.messages(maxSize: 1 << 24) {
                        guard case .text(let text) = message else { continue }
                        await inbox.push(try JSONDecoder().decode(StreamEvent.self, from: Data(text.utf8)))
                    }
                }
                group.addTask {
                    for await command in commandStream {
                        guard let command else { return }
                        try await outbound.write(.text(command))
                    }
                }
                try await group.next()
                group.cancelAll()
            }
        }
    }

    /// The next event; fails when the stream ended instead.
    func next() async throws -> StreamEvent {
        guard let event = await inbox.next() else { throw UnexpectedResponse(description: "the stream ended") }
        return event
    }

    /// Sends a raw text frame.
    func send(_ text: String) {
        commands.yield(text)
    }

    /// Asks for a snapshot and returns it, all its pages together. The next
    /// events must be its pages: this is also how a test checks that nothing
    /// else was pushed.
    func snapshot() async throws -> [Match] {
        send(#"{"request":"snapshot"}"#)
        var matches: [Match] = []
        while true {
            let event = try await next()
            guard case .snapshot(let page, let more) = event else {
                throw UnexpectedResponse(description: "expected a snapshot, got \(event)")
            }
            matches += page
            if !more { return matches }
        }
    }

    /// Checks that no event arrived since the last one taken.
    func expectNothingPushed(sourceLocation: SourceLocation = #_sourceLocation) async throws {
        send(#"{"request":"snapshot"}"#)
        let event = try await next()
        guard case .snapshot = event else {
            Issue.record("expected no event, got \(event)", sourceLocation: sourceLocation)
            return
        }
    }

    /// Closes from the client's side and waits until the connection is gone
    /// (by then the server has closed the stream). Nil when the channel was
    /// closed before the close handshake ended (seen on a loaded machine):
    /// closed all the same.
    @discardableResult
    func close() async throws -> WebSocketCloseFrame? {
        commands.yield(nil)
        commands.finish()
        do {
            return try await connection.value
        } catch ChannelError.ioOnClosedChannel {
            return nil
        }
    }

    /// Waits for the server to end the stream; returns its close frame.
    func closedByServer() async throws -> WebSocketCloseFrame? {
        while await inbox.next() != nil {}
        commands.finish()
        return try await connection.value
    }
}

/// A session's payloads one at a time, as the hub hands them out in arrays.
struct SessionPayloads {
    private var batches: AsyncStream<[String]>.Iterator
    private var buffered: ArraySlice<String> = []

    init(_ output: AsyncStream<[String]>) { batches = output.makeAsyncIterator() }

    /// The next payload, or nil once the session's output has finished.
    mutating func next() async -> String? {
        while buffered.isEmpty {
            guard let batch = await batches.next() else { return nil }
            buffered = batch[...]
        }
        return buffered.popFirst()
    }
}

extension AsyncStream<[String]> {
    /// The payloads one at a time.
    func payloads() -> SessionPayloads { SessionPayloads(self) }
}
