import DBus
import NearbyCore

/// `/org/nearbyd`: `org.nearbyd.Nearby1`, where clients create their managers.
@BusActor
final class RootObject {
    nonisolated static let path: ObjectPath = "/org/nearbyd"
    nonisolated static let interfaceName = "org.nearbyd.Nearby1"

    unowned let service: NearbyService
    var exported: ExportedObject?

    init(service: NearbyService) {
        self.service = service
    }

    static let createManagerOptions: [String: Signature] = ["AppId": "s", "DebugLogging": "b"]

    static let interface = Interface<RootObject>(
        interfaceName,
        methods: [
            Method("CreateManager", inputs: [Argument("api_key", "s"), Argument("params", "a{sv}")],
                   outputs: [Argument("manager", "o")]) { root, call throws(DBusError) in
                let apiKey = try call.arguments.read(String.self)
                let raw = try call.arguments.read([String: Variant].self)
                let request = try checked { () throws(NearbyError) in
                    try ManagerRequest(apiKey: apiKey, options: Options(raw, allowed: createManagerOptions,
                                                                          context: "CreateManager params"))
                }
                // Finding the caller's uid is a round trip to the bus daemon: answer later.
                let reply = call.deferReply()
                let service = root.service
                let caller = call.caller.uniqueName
                Task { @BusActor in
                    do throws(NearbyError) {
                        let path = try await service.createManager(for: caller, request)
                        reply.reply { writer throws(DBusError) in try writer.append(path) }
                    } catch {
                        reply.fail(error.dbusError)
                    }
                }
            },
            Method("RegisterPermissionAgent", inputs: [Argument("agent", "o")]) { root, call throws(DBusError) in
                let agent = try call.arguments.read(ObjectPath.self)
                try checked { () throws(NearbyError) in try root.service.registerAgent(agent, for: call.caller.uniqueName) }
            },
            Method("UnregisterPermissionAgent", inputs: [Argument("agent", "o")]) { root, call throws(DBusError) in
                let agent = try call.arguments.read(ObjectPath.self)
                try checked { () throws(NearbyError) in try root.service.unregisterAgent(agent, for: call.caller.uniqueName) }
            },
        ],
        properties: [
            Property("Version", "s", emitsChange: false) { root, _ in .string(root.service.version) },
            Property("AvailableMediums", "as") { root, _ in .strings(root.service.availableMediums.map(\.rawValue).sorted()) },
            Property("DebugLogging", "b", get: { root, _ in .bool(root.service.debugLogging) },
                     set: { root, value, caller throws(DBusError) in
                         try checked { () throws(NearbyError) in
                             try root.service.setDebugLogging(value.bool ?? false, by: caller.uniqueName)
                         }
                     }),
        ]
    )
}

/// CreateManager's arguments, checked.
struct ManagerRequest: Sendable {
    let apiKey: String
    /// Nil: derived from the caller's uid and the API key.
    let appId: String?
    let debugLogging: Bool

    init(apiKey: String, options: Options) throws(NearbyError) {
        // The key travels in an HTTP header: printable ASCII without spaces only.
        guard (1...256).contains(apiKey.utf8.count),
              apiKey.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            throw .invalidArguments("api_key must be 1..256 printable ASCII characters without spaces")
        }
        self.apiKey = apiKey
        if let appId = options.string("AppId") {
            guard (1...255).contains(appId.utf8.count),
                  !appId.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                throw .invalidArguments("AppId must be 1..255 bytes without control characters")
            }
            self.appId = appId
        } else {
            appId = nil
        }
        debugLogging = options.bool("DebugLogging") ?? false
    }
}
