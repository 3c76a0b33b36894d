import Foundation
import HTTPTypes
import Logging
import NIOSSL
import ServerAPI
import WSClient

/// A WebSocket the device keeps open to nearby-server (the stream, the direct
/// channel): authenticated with the device's bearer credential, kept alive by
/// pings, one JSON request per text frame out, text frames in.
enum DeviceSocket {
    /// Connects to `url` and serves the socket until it closes (or fails, or
    /// the task is cancelled): `opened` runs once the upgrade succeeded, then
    /// each request of `requests` is written as it comes and each text frame
    /// received goes to `received`, in order. An error thrown by `received`
    /// closes the socket and is rethrown. A refused upgrade (a 401, but
    /// WSClient does not say which status) throws
    /// `WebSocketClientError.webSocketUpgradeFailed`.
    static func run<Request: Encodable & Sendable>(
        url: String, tls: TLSConfiguration?, device: DeviceRegistration, maxFrameBytes: Int, requests: AsyncStream<Request>,
        logger: Logger,
        opened: @escaping @Sendable () async -> Void, received: @escaping @Sendable (String) async throws -> Void
    ) async throws {
        var configuration = WebSocketClientConfiguration(maxFrameSize: maxFrameBytes, autoPing: .enabled(timePeriod: .seconds(15)))
        configuration.additionalHeaders[.authorization] = "Bearer \(device.secret)"
        try await WebSocketClient.connect(url: url, configuration: configuration, tlsConfiguration: tls, logger: logger) { inbound, outbound, _ in
            await opened()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    let encoder = JSONEncoder()
                    for await request in requests {
                        try await outbound.write(.text(String(decoding: try encoder.encode(request), as: UTF8.self)))
                    }
                }
                for try await message in inbound.messages(maxSize: maxFrameBytes) {
                    guard case .text(let text) = message else { continue }
                    try await received(text)
                }
                group.cancelAll()
            }
        }
    }
}
