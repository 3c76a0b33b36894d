import DBus
import NearbyCore
import Upstream

/// `org.nearbyd.Upstream1`, on the manager's object: messages to the app's
/// application server (doc/dbus-api.md).
extension ManagerObject {
    nonisolated static let upstreamInterfaceName = "org.nearbyd.Upstream1"

    static let upstreamInterface = Interface<ManagerObject>(
        upstreamInterfaceName,
        methods: [
            Method("SendMessage", inputs: [Argument("data", "a{ss}"), Argument("to", "s"), Argument("message_id", "s"),
                                           Argument("ttl_seconds", "x")]) { object, call throws(DBusError) in
                let data = try call.arguments.read([String: String].self)
                let to = try call.arguments.read(String.self)
                let messageID = try call.arguments.read(String.self)
                let ttl = try call.arguments.read(Int64.self)
                try checked { () throws(NearbyError) in
                    try object.service.upstream.send(UpstreamMessage(data: data, to: to, messageID: messageID, ttlSeconds: ttl),
                                                     from: object)
                }
            },
        ],
        signals: [
            SignalDescription("SendSucceeded", [Argument("message_id", "s")]),
            SignalDescription("SendFailed", [Argument("message_id", "s"), Argument("error", "s"), Argument("description", "s")]),
            SignalDescription("MessageReceived", [Argument("data", "a{ss}"), Argument("from", "s"), Argument("message_id", "s")]),
        ]
    )

    /// `SendFailed` to this manager's owner.
    func emitSendFailed(_ messageID: String, error: String, description: String) {
        try? exported?.emitSignal(interface: Self.upstreamInterfaceName, member: "SendFailed") { writer throws(DBusError) in
            try writer.append(messageID)
            try writer.append(error)
            try writer.append(description)
        }
    }
}
