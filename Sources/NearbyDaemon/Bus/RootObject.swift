import DBus
import NearbyBusContract
import NearbyCore

/// `/org/nearbyd`: `org.nearbyd.Nearby1`, where clients create their managers.
@BusActor
final class RootObject {
    nonisolated static let path = ObjectPath(stringLiteral: NearbyBusContract.rootPath)
    nonisolated static let interfaceName = NearbyBusContract.nearby.name

    unowned let service: DaemonService
    var exported: ExportedObject?

    init(service: DaemonService) {
        self.service = service
    }

    func export() throws(DBusError) {
        exported = try service.connection.export([Self.interface.bind(self)], at: Self.path)
    }

    func unexport() {
        exported?.unregister()
        exported = nil
    }

    /// Emits `PropertiesChanged` for one of `Nearby1`'s properties.
    func announce(_ property: NearbyBusContract.Property) {
        try? exported?.emitPropertiesChanged(interface: Self.interfaceName, [property.name])
    }

    static let createManagerOptions = Options.allowed(NearbyBusContract.CreateManagerOption.all)
    static let permissionOptions = Options.allowed(NearbyBusContract.PermissionOption.all)

    static let interface = Interface<RootObject>(
        interfaceName,
        methods: [
            Method(NearbyBusContract.Nearby1.createManager, inputs: ["api_key", "params"], outputs: ["manager"]) {
                root, call throws(DBusError) in
                let request = try ManagerRequest.read(Arguments(call))
                // Finding the caller's uid is a round trip to the bus daemon: answer later.
                let service = root.service
                let caller = call.caller.uniqueName
                later(call) { () async throws(NearbyError) in .objectPath(try await service.createManager(for: caller, request)) }
            },
            Method(NearbyBusContract.Nearby1.registerPermissionAgent, inputs: ["agent"]) { root, call throws(DBusError) in
                let agent = try Arguments(call).objectPath("agent")
                let service = root.service
                let caller = call.caller.uniqueName
                later(call) { () async throws(NearbyError) in
                    try await service.registerAgent(agent, for: caller)
                    return nil
                }
            },
            Method(NearbyBusContract.Nearby1.unregisterPermissionAgent, inputs: ["agent"]) { root, call throws(DBusError) in
                let agent = try Arguments(call).objectPath("agent")
                try checked { () throws(NearbyError) in
                    try root.service.permissions.unregisterAgent(agent, for: call.caller.uniqueName)
                }
            },
            Method(NearbyBusContract.Nearby1.getPermission, inputs: ["app_id", "params"], outputs: ["permission"]) {
                root, call throws(DBusError) in
                let (appId, user) = try readGetPermission(Arguments(call))
                let service = root.service
                let caller = call.caller.uniqueName
                later(call) { () async throws(NearbyError) in
                    let key = try await service.permissionReach(user, for: caller).key(appId)
                    return DBusValue.vardict(permissionEntry(key, service.permissions.decision(for: key)))
                }
            },
            Method(NearbyBusContract.Nearby1.setPermission, inputs: ["app_id", "granted", "params"]) { root, call throws(DBusError) in
                let (appId, granted, user) = try readSetPermission(Arguments(call))
                let service = root.service
                let caller = call.caller.uniqueName
                later(call) { () async throws(NearbyError) in
                    let key = try await service.permissionReach(user, for: caller).key(appId)
                    try await service.permissions.decide(key, granted: granted, by: .user)
                    return nil
                }
            },
            Method(NearbyBusContract.Nearby1.listPermissions, inputs: ["params"], outputs: ["permissions"]) {
                root, call throws(DBusError) in
                let user = try readListPermissions(Arguments(call))
                let service = root.service
                let caller = call.caller.uniqueName
                later(call) { () async throws(NearbyError) in
                    let reach = try await service.permissionReach(user, for: caller)
                    return DBusValue.array(element: "a{sv}", service.permissions.decisions(of: reach.uid).filter {
                        reach.reaches($0.key)
                    }.map {
                        DBusValue.vardict(permissionEntry($0.key, $0.decision))
                    })
                }
            },
        ],
        properties: [
            Property(NearbyBusContract.Nearby1.version, emitsChange: false) { root, _ in .string(root.service.version) },
            Property(NearbyBusContract.Nearby1.availableMediums) { root, _ in
                .strings(root.service.availableMediums.map(\.rawValue).sorted())
            },
            Property(NearbyBusContract.Nearby1.loginSessions) { root, _ in .string(root.service.sessions.status.description) },
            Property(NearbyBusContract.Nearby1.server) { root, _ in .string(root.service.serverStatus) },
            Property(NearbyBusContract.Nearby1.staticPublications) { root, _ in
                .array(element: "(sss)", root.service.staticPublications.map { entry in
                    switch entry.result {
                    case .success(let object):
                        .structure([.string(entry.file), .string(object.publication.status.rawValue), .string(object.path.rawValue)])
                    case .failure(let error):
                        .structure([.string(entry.file), .string("error"), .string(error.message)])
                    }
                })
            },
            Property(NearbyBusContract.Nearby1.debugLogging, get: { root, _ in .bool(root.service.debugLogging) },
                     set: { root, value, caller throws(DBusError) in
                         try checked { () throws(NearbyError) in
                             try root.service.setDebugLogging(value.bool ?? false, by: caller.uniqueName)
                         }
                     }),
        ]
    )
}

/// Answers `call` once `body` is done: for methods that wait on the bus
/// daemon (who the caller is) or on a person. `body` returns the one value of
/// the reply, or nil for an empty reply.
@BusActor
private func later(_ call: MethodCall, _ body: @escaping @BusActor @Sendable () async throws(NearbyError) -> DBusValue?) {
    let reply = call.deferReply()
    Task { @BusActor in
        do throws(NearbyError) {
            let value = try await body()
            reply.reply { writer throws(DBusError) in if let value { try writer.append(value) } }
        } catch {
            reply.fail(error.dbusError)
        }
    }
}

// The arguments of each method, read and checked: what its handler acts on
// (and what dbus-fuzz runs over any message).
extension RootObject {
    static func readGetPermission(_ arguments: Arguments) throws(DBusError) -> (appId: String, user: UInt32?) {
        let appId = try arguments.string("app_id")
        return (appId, try permissionUser(appId, arguments, method: NearbyBusContract.Nearby1.getPermission))
    }

    static func readSetPermission(_ arguments: Arguments) throws(DBusError) -> (appId: String, granted: Bool, user: UInt32?) {
        let appId = try arguments.string("app_id")
        let granted = try arguments.bool()
        return (appId, granted, try permissionUser(appId, arguments, method: NearbyBusContract.Nearby1.setPermission))
    }

    static func readListPermissions(_ arguments: Arguments) throws(DBusError) -> UInt32? {
        try permissionUser(arguments, method: NearbyBusContract.Nearby1.listPermissions)
    }

    /// The `User` of a permission method's params (the last argument), after
    /// checking `appId` and the params.
    private static func permissionUser(_ appId: String, _ arguments: Arguments,
                                       method: NearbyBusContract.Method) throws(DBusError) -> UInt32? {
        try checked { () throws(NearbyError) in try ManagerRequest.checkAppId(appId) }
        return try permissionUser(arguments, method: method)
    }

    /// The `User` of a permission method's params (the last argument).
    private static func permissionUser(_ arguments: Arguments, method: NearbyBusContract.Method) throws(DBusError) -> UInt32? {
        try arguments.options("\(method.name) params", allowed: permissionOptions)
            .uint32(NearbyBusContract.PermissionOption.user.name)
    }
}

/// A decision as `GetPermission` and `ListPermissions` show it.
@BusActor
private func permissionEntry(_ key: PermissionKey, _ decision: PermissionDecision?) -> [String: DBusValue] {
    typealias Key = NearbyBusContract.PermissionEntryKey
    var entry: [String: DBusValue] = [
        Key.user.name: .uint32(key.uid), Key.appId.name: .string(key.appId),
        Key.decision.name: .string(decision.map { $0.granted ? "granted" : "denied" } ?? "undecided"),
    ]
    if let decision {
        entry[Key.decidedBy.name] = .string(decision.decidedBy.rawValue)
        entry[Key.decidedAt.name] = .uint64(decision.decidedAt)
    }
    return entry
}

/// CreateManager's arguments, checked.
struct ManagerRequest: Sendable {
    let apiKey: String
    /// Nil: derived from the caller's uid and the API key.
    let appId: String?
    let debugLogging: Bool
    /// `MicrophoneUsageDescription` and `BluetoothUsageDescription`, by name.
    let usageDescriptions: [String: String]

    /// The usage descriptions CreateManager takes.
    static let usageDescriptionKeys = [
        NearbyBusContract.CreateManagerOption.microphoneUsageDescription.name,
        NearbyBusContract.CreateManagerOption.bluetoothUsageDescription.name,
    ]

    init(apiKey: String, options: Options) throws(NearbyError) {
        // The key travels in an HTTP header: printable ASCII without spaces only.
        guard (1...256).contains(apiKey.utf8.count),
              apiKey.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7f }) else {
            throw .invalidArguments("api_key must be 1..256 printable ASCII characters without spaces")
        }
        self.apiKey = apiKey
        if let appId = options.string(NearbyBusContract.CreateManagerOption.appId.name) {
            try Self.checkAppId(appId)
            self.appId = appId
        } else {
            appId = nil
        }
        debugLogging = options.bool(NearbyBusContract.CreateManagerOption.debugLogging.name) ?? false
        var descriptions: [String: String] = [:]
        for key in Self.usageDescriptionKeys {
            guard let text = options.string(key) else { continue }
            guard (1...1024).contains(text.utf8.count),
                  !text.unicodeScalars.contains(where: { $0 != "\n" && $0.properties.generalCategory == .control }) else {
                throw .invalidArguments("\(key) must be 1..1024 bytes without control characters other than newline")
            }
            descriptions[key] = text
        }
        usageDescriptions = descriptions
    }

    /// CreateManager's arguments, read and checked.
    @BusActor
    static func read(_ arguments: Arguments) throws(DBusError) -> ManagerRequest {
        let apiKey = try arguments.string("api_key")
        let options = try arguments.options("\(NearbyBusContract.Nearby1.createManager.name) params",
                                            allowed: RootObject.createManagerOptions)
        return try checked { () throws(NearbyError) in try ManagerRequest(apiKey: apiKey, options: options) }
    }

    static func checkAppId(_ appId: String) throws(NearbyError) {
        guard (1...255).contains(appId.utf8.count),
              !appId.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw .invalidArguments("AppId must be 1..255 bytes without control characters")
        }
    }
}
