import Foundation
import HTTPTypes
import Logging
import NIOSSL
import ServerAPI
import Synchronization
import WSClient

/// A WebSocket the device keeps open to nearby-server (the stream, the direct
/// channel): authenticated with the device's bearer credential, kept alive by
/// pings, one JSON request per text frame out, text frames in.
enum DeviceSocket {
    /// Connects to the WebSocket at `path` of `server` and serves it until it
    /// closes (or fails, or the task is cancelled): `opened` runs once the
    /// upgrade succeeded, then each request of `requests` is written as it
    /// comes and each text frame received goes to `received`, in order. An
    /// error thrown by `received` closes the socket and is rethrown. A refused
    /// upgrade is explained by a REST call with the same credential, since
    /// WSClient does not say which status it got: its `ServerCallError` is
    /// thrown (`unauthenticated` for a credential the server no longer
    /// accepts, `rejected` with a 5xx or `unreachable` for a server in
    /// trouble, which ``ServerEndpoints`` moves away from), or
    /// `WebSocketClientError.webSocketUpgradeFailed` when the call went
    /// through. A failed TLS handshake throws `ServerCallError.unreachable`
    /// with ``ServerTLS``'s words, as a REST call's does.
    static func run<Request: Encodable & Sendable>(
        server: ServerClient, path: String, device: DeviceRegistration, maxFrameBytes: Int, requests: AsyncStream<Request>,
        logger: Logger,
        opened: @escaping @Sendable () async -> Void, received: @escaping @Sendable (String) async throws -> Void
    ) async throws {
        var configuration = WebSocketClientConfiguration(maxFrameSize: maxFrameBytes, autoPing: .enabled(timePeriod: .seconds(15)))
        configuration.additionalHeaders[.authorization] = "Bearer \(device.secret)"
        // Only a failure before the upgrade is the handshake's: a TLS error
        // after it (the server gone mid-stream) is a lost server, said as such.
        let upgraded = Upgraded()
        do {
            try await serve(url: server.webSocketURL(path), configuration: configuration, tls: server.tls, requests: requests,
                            logger: logger, opened: { upgraded.set(); await opened() }, received: received)
        } catch let error as WebSocketClientError where error == .webSocketUpgradeFailed {
            // The call's own error says why; if it goes through, the upgrade's failure stands.
            _ = try await server.subscriptions(device)
            throw error
        } catch {
            // After the upgrade the server was lost (ServerLink says so, in words too).
            guard !upgraded.value,
                  let explained = ServerTLS.explain(error, caFile: server.caFile) ?? NetworkErrors.explain(error) else { throw error }
            throw ServerCallError.unreachable("WebSocket \(path): \(explained)")
        }
    }

    private static func serve<Request: Encodable & Sendable>(
        url: String, configuration: WebSocketClientConfiguration, tls: TLSConfiguration?, requests: AsyncStream<Request>,
        logger: Logger,
        opened: @escaping @Sendable () async -> Void, received: @escaping @Sendable (String) async throws -> Void
    ) async throws {
        try await WebSocketClient.connect(url: url, configuration: configuration, tlsConfiguration: tls, logger: logger) { inbound, outbound, _ in
            await opened()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    let encoder = JSONEncoder()
                    for await request in requests {
                        try await outbound.write(.text(String(decoding: try encoder.encode(request), as: UTF8.self)))
                    }
                }
                for try await message in inbound.messages(maxSize: configuration.maxFrameSize) {
                    guard case .text(let text) = message else { continue }
                    try await received(text)
                }
                group.cancelAll()
            }
        }
    }
}

/// Whether a socket's upgrade succeeded, set from the socket's task and read after it.
private final class Upgraded: Sendable {
    private let state = Mutex(false)

    var value: Bool { state.withLock { $0 } }

    func set() { state.withLock { $0 = true } }
}
