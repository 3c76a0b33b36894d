import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NearbyCore
import ServerAPI

/// `GET /v1/devices/{device}/stream`: the WebSocket a device keeps open to
/// hear found and lost. The server writes ``StreamEvent`` text frames; the
/// device may write ``StreamRequest``s, answered in order on the same stream.
enum StreamEndpoint {
    /// Largest request a device may send; `{"request":"snapshot"}` is 22 bytes.
    static let maximumRequestBytes = 4096

    /// Serves one stream until either side ends it.
    static func run(device record: DeviceRecord, service: NearbyService, inbound: WebSocketInboundStream,
                    outbound: WebSocketOutboundWriter) async throws {
        let device = record.id
        guard let handle = try await service.openStream(device: record) else {
            try await outbound.close(.policyViolation, reason: "device is not registered")
            return
        }
        let logger = service.logger
        logger.debug("stream opened", metadata: ["device": "\(device)", "stream": "\(handle.id)"])
        defer { logger.debug("stream closed", metadata: ["device": "\(device)", "stream": "\(handle.id)"]) }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await writeEvents(handle, device: device, matcher: service.matcher, to: outbound, logger: logger)
            }
            group.addTask {
                await readRequests(device: device, handle: handle, service: service, inbound: inbound, outbound: outbound)
            }
            // Whichever side ends first ends the stream.
            await group.next()
            group.cancelAll()
        }
        await service.closeStream(device: device, handle: handle)
    }

    /// Writes the stream's outputs in order. A snapshot page with more to
    /// come is followed by the next only once it is written, so one page of
    /// a snapshot at most is held for the connection, however large the snapshot.
    private static func writeEvents(_ handle: StreamHandle, device: String, matcher: Matcher,
                                    to outbound: WebSocketOutboundWriter, logger: Logger) async {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        do {
            for await output in handle.outputs {
                switch output {
                case .event(let event):
                    try await outbound.writeTextMessage(String(decoding: try encoder.encode(event), as: UTF8.self))
                case .snapshotPage(let page, let generation):
                    try await outbound.writeTextMessage(String(decoding: try encoder.encode(page), as: UTF8.self))
                    await matcher.continueSnapshot(device: device, streamID: handle.id, generation: generation)
                case .close(let reason):
                    try await outbound.close(.normalClosure, reason: reason)
                    return
                }
            }
            // Finished without a close: the stream overflowed.
            guard !Task.isCancelled else { return }
            try await outbound.close(.policyViolation, reason: "too many events waiting; reconnect and ask for a snapshot")
        } catch {
            logger.debug("stream write failed", metadata: ["error": "\(error)"])
        }
    }

    private static func readRequests(device: String, handle: StreamHandle, service: NearbyService,
                                     inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async {
        do {
            for try await message in inbound.messages(maxSize: maximumRequestBytes) {
                guard case .text(let text) = message,
                      (try? JSONDecoder().decode(StreamRequest.self, from: Data(text.utf8))) == .snapshot
                else {
                    try await outbound.close(.unacceptableData, reason: #"expected a text frame {"request":"snapshot"}"#)
                    return
                }
                await service.matcher.sendSnapshot(device: device, streamID: handle.id)
            }
        } catch {
            // A request over the size limit, or the connection failed.
            service.logger.debug("stream read ended", metadata: ["error": "\(error)"])
        }
    }
}
