import Hummingbird
import HummingbirdWebSocket
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
    /// credential is upgraded. Anything else continues as plain HTTP, where
    /// the router answers with the APIError that says why.
    static func shouldUpgrade(_ head: HTTPRequest, service: NearbyService) async -> ShouldUpgradeResult<
        WebSocketDataHandler<HTTP1WebSocketUpgradeChannel.Context>
    > {
        guard let (device, kind) = route(head.path),
              let record = try? await service.authenticate(device: device, authorization: head.headerFields[.authorization])
        else { return .dontUpgrade }
        return .upgrade([:]) { inbound, outbound, _ in
            switch kind {
            case .stream: try await StreamEndpoint.run(device: record, service: service, inbound: inbound, outbound: outbound)
            case .channel: await ChannelEndpoint.run(device: record, service: service, inbound: inbound, outbound: outbound)
            }
        }
    }
}
