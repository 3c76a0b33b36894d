import DBus

/// A service with one of each kind of member, exported by the tests.
@BusActor
final class EchoService {
    var label = "initial"
    var waiting: [PendingReply] = []
    /// The calls `Keep` kept, against MethodCall's rule.
    var kept: [MethodCall] = []
    var exported: ExportedObject?

    static let interfaceName = "test.Echo"

    static let interface = Interface<EchoService>(
        interfaceName,
        methods: [
            Method("Echo", inputs: [Argument("value", "v")], outputs: [Argument("value", "v")]) { _, call throws(DBusError) in
                let value = try call.arguments.read(Variant.self)
                call.reply { writer throws(DBusError) in try writer.append(value) }
            },
            Method("Describe", inputs: [Argument("content", "ay"), Argument("type", "s"), Argument("options", "a{sv}")],
                   outputs: [Argument("summary", "s")]) { _, call throws(DBusError) in
                let content = try call.arguments.read([UInt8].self)
                let type = try call.arguments.read(String.self)
                let options = try call.arguments.read([String: Variant].self)
                let summary = "\(content.count) bytes of \(type); " + options.keys.sorted().joined(separator: ",")
                call.reply { writer throws(DBusError) in try writer.append(summary) }
            },
            // Declared 'v' but read as 's': the reader must refuse.
            Method("Misread", inputs: [Argument("value", "v")]) { _, call throws(DBusError) in
                _ = try call.arguments.read(String.self)
            },
            Method("Wait", outputs: [Argument("value", "u")]) { service, call throws(DBusError) in
                service.waiting.append(call.deferReply())
            },
            Method("Release", inputs: [Argument("value", "u")]) { service, call throws(DBusError) in
                let value = try call.arguments.read(UInt32.self)
                for pending in service.waiting { pending.reply { writer throws(DBusError) in try writer.append(value) } }
                service.waiting.removeAll()
            },
            // Keeps the call object itself, which a handler must not: the bus must not hand it to another call.
            Method("Keep") { service, call in
                service.kept.append(call)
            },
            // Declares an output and answers nothing: the bus fails the call for it.
            Method("Silent", outputs: [Argument("value", "u")]) { _, _ in },
            Method("Fail") { _, _ throws(DBusError) in
                throw DBusError("test.Error.Custom", "failed on purpose")
            },
            Method("Announce", inputs: [Argument("label", "s")]) { service, call throws(DBusError) in
                let label = try call.arguments.read(String.self)
                try service.exported?.emitSignal(interface: interfaceName, member: "Announced") { writer throws(DBusError) in
                    try writer.append(label)
                }
            },
        ],
        properties: [
            Property("Label", "s", get: { service, _ in .string(service.label) },
                     set: { service, value, _ throws(DBusError) in
                         service.label = value.string ?? ""
                         try service.exported?.emitPropertiesChanged(interface: interfaceName, ["Label"])
                     }),
            Property("Version", "u", emitsChange: false, get: { _, _ in .uint32(7) }),
        ],
        signals: [SignalDescription("Announced", [Argument("label", "s")])]
    )

    func export(on connection: BusConnection, at path: ObjectPath, access: Access = .anyone) throws {
        exported = try connection.export([Self.interface.bind(self)], at: path, access: access)
    }
}
