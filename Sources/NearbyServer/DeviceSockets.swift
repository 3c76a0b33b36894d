import Hummingbird
import HummingbirdWebSocket
import NIOCore
import NIOWebSocket
import NearbyCore

/// The WebSockets a device opens: its stream of found and lost
/// (``StreamEndpoint``) and its direct channel (``ChannelEndpoint``).
enum DeviceSockets {
    enum Kind: String {
        case stream, channel
    }

    /// The device id and socket a path names (`/v1/devices/{device}/stream`
    /// or `/channel`), or nil for any other path.
    static func route(_ path: String?) -> (device: String, kind: Kind)? {
        guard let path else { return nil }
        let pathOnly = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
        let parts = pathOnly.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 5, parts[0].isEmpty, parts[1] == "v1", parts[2] == "devices", !parts[3].isEmpty,
              let kind = Kind(rawValue: String(parts[4])) else { return nil }
        return (String(parts[3]), kind)
    }

    /// Decides on an upgrade request: only a socket path with that device's
    /// credential is upgraded (else the answer is an empty 400). One beyond
    /// its project's share (`[http] max-websockets-per-project`) is closed
    /// once open, with 1013 (try again later) and the reason, as a
    /// WebSocket client hears a refusal.
    static func shouldUpgrade(_ head: HTTPRequest, channel: any Channel, service: NearbyService,
                              connections: ConnectionRegistry) async -> ShouldUpgradeResult<
        WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>
    > {
        guard let (device, kind) = route(head.path),
              // A device another replica serves: an upgrade cannot be
              // redirected, so it is refused (400), and the device's REST
              // calls are redirected (DeviceHomeMiddleware).
              service.partitions?.directory.elsewhere(device: device) == nil,
              let record = try? await service.authenticate(device: device, authorization: head.headerFields[.authorization])
        else { return .dontUpgrade }
        guard connections.claimSocket(channel, for: record.project) else {
            return .upgrade([:]) { _, outbound, _ in
                try await outbound.close(WebSocketErrorCode(codeNumber: 1013),
                                         reason: "the project's devices hold all the WebSockets the server takes of one project "
                                            + "([http] max-websockets-per-project)")
            }
        }
        return .upgrade([:]) { inbound, outbound, _ in
            switch kind {
            case .stream: try await StreamEndpoint.run(device: record, service: service, inbound: inbound, outbound: outbound)
            case .channel: await ChannelEndpoint.run(device: record, service: service, inbound: inbound, outbound: outbound)
            }
        }
    }
}
