import Foundation
import HummingbirdWebSocket
import Logging
import ServerAPI

/// `GET /v1/devices/{device}/channel`: a device's direct channel to the
/// connection server (ServerAPI/ChannelAPI.swift). The device writes
/// ``ChannelRequest``s, the server ``ChannelEvent``s.
enum ChannelEndpoint {
    /// Serves one channel until either side ends it.
    static func run(device: DeviceRecord, service: NearbyService, inbound: WebSocketInboundStream,
                    outbound: WebSocketOutboundWriter) async {
        let hub = service.connections
        let (id, events) = await hub.openChannel(device: device.id, project: device.project)
        let logger = service.logger
        logger.debug("channel opened", metadata: ["device": "\(device.id)"])
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                let encoder = JSONEncoder()
                do {
                    for await event in events {
                        try await outbound.writeTextMessage(String(decoding: try encoder.encode(event), as: UTF8.self))
                    }
                    // Finished: the device opened another channel, or left this one unread.
                    try await outbound.close(.normalClosure, reason: await hub.takeEndReason(of: id))
                } catch {
                    logger.debug("channel write failed", metadata: ["error": "\(error)"])
                }
            }
            group.addTask {
                let decoder = JSONDecoder()
                do {
                    for try await message in inbound.messages(maxSize: ChannelLimits.maximumFrameBytes) {
                        guard case .text(let text) = message,
                              let request = try? decoder.decode(ChannelRequest.self, from: Data(text.utf8)) else {
                            try await outbound.close(.unacceptableData, reason: "expected a text frame holding a channel request")
                            return
                        }
                        await hub.received(request, device: device.id, project: device.project)
                    }
                } catch {
                    // A frame over the size limit, or the connection failed.
                    logger.debug("channel read ended", metadata: ["error": "\(error)"])
                }
            }
            await group.next()
            group.cancelAll()
        }
        await hub.closeChannel(device: device.id, id: id)
        logger.debug("channel closed", metadata: ["device": "\(device.id)"])
    }
}
