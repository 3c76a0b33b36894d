import DBus
import NearbyBusContract
import NearbyCore
import ServerAPI
import Upstream

/// `org.nearbyd.Upstream1`, on the manager's object: messages to and from the
/// app's application server (doc/dbus-api.md). The object is the service's
/// ``UpstreamManager``: its owner hears the signals.
extension ManagerObject: UpstreamManager {
    var account: Account { manager.account }
    var appID: String { manager.appId }

    nonisolated static let upstreamInterfaceName = NearbyBusContract.upstream.name

    static let upstreamInterface = Interface<ManagerObject>(
        upstreamInterfaceName,
        methods: [
            Method(NearbyBusContract.Upstream1.sendMessage, inputs: ["data", "to", "message_id", "ttl_seconds"]) {
                object, call throws(DBusError) in
                let message = try readSendMessage(Arguments(call))
                // The service answers when it knows: at once, or once the message is on disk.
                let reply = call.deferReply()
                object.service.upstream.send(message, from: object) { outcome in
                    switch outcome {
                    case .success: reply.reply()
                    case .failure(let error): reply.fail(error.dbusError)
                    }
                }
            },
        ],
        properties: [
            Property(NearbyBusContract.Upstream1.directChannel, get: { object, _ in .bool(object.directChannel) },
                     set: { object, value, _ throws(DBusError) in
                         let wanted = value.bool ?? false
                         guard wanted != object.directChannel else { return }
                         object.directChannel = wanted
                         try object.exported?.emitPropertiesChanged(interface: upstreamInterfaceName,
                                                                    [NearbyBusContract.Upstream1.directChannel.name])
                         object.service.upstream.managersChanged(object.manager.account)
                     }),
            Property(NearbyBusContract.Upstream1.directChannelConnected) { object, _ in
                .bool(object.service.upstream.isChannelOpen(object.manager.account))
            },
        ],
        signals: [
            SignalDescription(NearbyBusContract.Upstream1.sendSucceeded, ["message_id"]),
            SignalDescription(NearbyBusContract.Upstream1.sendFailed, ["message_id", "error", "description"]),
            SignalDescription(NearbyBusContract.Upstream1.messageReceived, ["data", "from", "message_id"]),
        ]
    )

    /// SendMessage's arguments, read within their bounds on the wire; the
    /// service checks the message's rules.
    static func readSendMessage(_ arguments: Arguments) throws(DBusError) -> UpstreamMessage {
        let data = try arguments.stringDictionary("data", maxEntries: CCSRules.maximumDataBytes,
                                                  maxBytes: CCSRules.maximumDataBytes)
        let to = try arguments.string("to")
        let messageID = try arguments.string("message_id")
        return UpstreamMessage(data: data, to: to, messageID: messageID, ttlSeconds: try arguments.int64())
    }

    /// `SendFailed` to this manager's owner.
    private func emitSendFailed(_ messageID: String, error: String, description: String) {
        try? exported?.emitSignal(interface: Self.upstreamInterfaceName, member: NearbyBusContract.Upstream1.sendFailed.name) {
            writer throws(DBusError) in
            try writer.append(messageID)
            try writer.append(error)
            try writer.append(description)
        }
    }

    /// `SendSucceeded` or `SendFailed` to this manager's owner.
    func emitVerdict(_ messageID: String, _ verdict: Outbox.Verdict) {
        switch verdict {
        case .succeeded:
            try? exported?.emitSignal(interface: Self.upstreamInterfaceName, member: NearbyBusContract.Upstream1.sendSucceeded.name) {
                writer throws(DBusError) in
                try writer.append(messageID)
            }
        case .failed(let failure):
            emitSendFailed(messageID, error: failure.error, description: failure.description)
        }
    }

    /// `MessageReceived` to this manager's owner.
    func emitMessageReceived(_ message: ChannelDownstream) {
        try? exported?.emitSignal(interface: Self.upstreamInterfaceName, member: NearbyBusContract.Upstream1.messageReceived.name) {
            writer throws(DBusError) in
            try writer.append(message.data)
            try writer.append(message.from)
            try writer.append(message.messageId)
        }
    }

    /// PropertiesChanged for `DirectChannelConnected`: its API key's channel opened or closed.
    func directChannelConnectedChanged() {
        try? exported?.emitPropertiesChanged(interface: Self.upstreamInterfaceName,
                                             [NearbyBusContract.Upstream1.directChannelConnected.name])
    }
}
