/// nearbyd's D-Bus API as data: the one place its names are written.
///
/// Every member, and every key of its `a{sv}` dictionaries, is a constant
/// here (``Manager1/publish``, ``StrategyOption/ttl``) by which the daemon
/// and the NearbyMessages library name it, so a misspelt name does not
/// compile. `make test` checks the rest against it: the daemon's live
/// introspection (`BusContractTests`), the shipped bus policy
/// (`dbus-policy/org.nearbyd.conf`: `BusPolicyContractTests`), and
/// `doc/dbus-api.md` (`BusDocumentationContractTests`); PolicyTests call every
/// member a client may use as another user, on a bus with the system bus's
/// rules and that policy.
public enum NearbyBusContract {
    /// The well-known name nearbyd owns.
    public static let busName = "org.nearbyd"
    /// The root object: ``nearby``, and the prefix of every object nearbyd makes.
    public static let rootPath = "/org/nearbyd"
    /// Where the library exports what nearbyd calls back (agents, dialogs).
    public static let clientExportRoot = "/org/nearbyd/client"
    /// What every error of nearbyd's own is named under.
    public static let errorPrefix = "org.nearbyd.Error."

    /// Who calls an interface's methods.
    public enum Caller: Sendable, Equatable {
        /// Any local program calls nearbyd (the policy opens it to everyone).
        case anyClient
        /// nearbyd calls clients that export it (the policy lets only
        /// nearbyd's user, and root, send to it).
        case nearbyd
    }

    /// A method, by name and argument signatures.
    public struct Method: Sendable, Equatable {
        public let name: String
        public let inputs: String
        public let outputs: String

        public init(_ name: String, in inputs: String = "", out outputs: String = "") {
            self.name = name
            self.inputs = inputs
            self.outputs = outputs
        }
    }

    /// A property: its type, whether it can be written and by whom.
    public struct Property: Sendable, Equatable {
        public enum Access: Sendable, Equatable {
            case read
            /// Written by the object's own client.
            case readWrite
            /// Written by root only: the bus policy refuses everyone else.
            case readWriteRoot
        }

        public let name: String
        public let type: String
        public let access: Access

        public init(_ name: String, _ type: String, _ access: Access = .read) {
            self.name = name
            self.type = type
            self.access = access
        }
    }

    /// A signal, by name and argument signature.
    public struct Signal: Sendable, Equatable {
        public let name: String
        public let arguments: String

        public init(_ name: String, _ arguments: String = "") {
            self.name = name
            self.arguments = arguments
        }
    }

    /// A key of an `a{sv}` dictionary, and the type of its value.
    public struct Key: Sendable, Equatable {
        public let name: String
        public let type: String

        public init(_ name: String, _ type: String) {
            self.name = name
            self.type = type
        }
    }

    /// One interface with all its members.
    public struct Interface: Sendable, Equatable {
        public let name: String
        public let caller: Caller
        public let methods: [Method]
        public let properties: [Property]
        public let signals: [Signal]

        public init(_ name: String, caller: Caller = .anyClient, methods: [Method] = [], properties: [Property] = [],
                    signals: [Signal] = []) {
            self.name = name
            self.caller = caller
            self.methods = methods
            self.properties = properties
            self.signals = signals
        }
    }

    // MARK: Members

    // Each interface's members, one constant each, named after the member
    // (doc/dbus-api.md says what each does); the interfaces below are built
    // from them.

    /// `org.nearbyd.Nearby1`'s members.
    public enum Nearby1 {
        public static let createManager = Method("CreateManager", in: "sa{sv}", out: "o")
        public static let registerPermissionAgent = Method("RegisterPermissionAgent", in: "o")
        public static let unregisterPermissionAgent = Method("UnregisterPermissionAgent", in: "o")
        public static let getPermission = Method("GetPermission", in: "sa{sv}", out: "a{sv}")
        public static let setPermission = Method("SetPermission", in: "sba{sv}")
        public static let listPermissions = Method("ListPermissions", in: "a{sv}", out: "aa{sv}")

        public static let version = Property("Version", "s")
        public static let availableMediums = Property("AvailableMediums", "as")
        public static let loginSessions = Property("LoginSessions", "s")
        public static let server = Property("Server", "s")
        public static let staticPublications = Property("StaticPublications", "a(sss)")
        public static let debugLogging = Property("DebugLogging", "b", .readWriteRoot)
    }

    /// `org.nearbyd.Manager1`'s members.
    public enum Manager1 {
        public static let publish = Method("Publish", in: "aysa{sv}", out: "o")
        public static let subscribe = Method("Subscribe", in: "a{sv}", out: "o")
        public static let release = Method("Release")

        public static let permissionGranted = Property("PermissionGranted", "b", .readWrite)
        public static let microphonePermissionError = Property("MicrophonePermissionError", "b")
        public static let bluetoothPowerError = Property("BluetoothPowerError", "b")
        public static let bluetoothPermissionError = Property("BluetoothPermissionError", "b")
        public static let apiKeyError = Property("ApiKeyError", "b")
        public static let background = Property("Background", "b", .readWrite)
    }

    /// `org.nearbyd.Upstream1`'s members.
    public enum Upstream1 {
        public static let sendMessage = Method("SendMessage", in: "a{ss}ssx")

        public static let directChannel = Property("DirectChannel", "b", .readWrite)
        public static let directChannelConnected = Property("DirectChannelConnected", "b")

        public static let sendSucceeded = Signal("SendSucceeded", "s")
        public static let sendFailed = Signal("SendFailed", "sss")
        public static let messageReceived = Signal("MessageReceived", "a{ss}ss")
    }

    /// The members `org.nearbyd.Publication1` and `org.nearbyd.Subscription1`
    /// have alike: the daemon keeps, and the library reads, the status of
    /// either the same way.
    public enum PublicationOrSubscription {
        public static let status = Property("Status", "s")
        public static let statusReason = Property("StatusReason", "s")
        public static let expired = Signal("Expired")
    }

    /// `org.nearbyd.Publication1`'s own members (and ``PublicationOrSubscription``'s).
    public enum Publication1 {
        public static let unpublish = Method("Unpublish")

        public static let namespace = Property("Namespace", "s")
        public static let type = Property("Type", "s")
        public static let expiresAt = Property("ExpiresAt", "t")
    }

    /// `org.nearbyd.Subscription1`'s own members (and ``PublicationOrSubscription``'s).
    public enum Subscription1 {
        public static let unsubscribe = Method("Unsubscribe")

        public static let messageFound = Signal("MessageFound", "ayssa{sv}")
        public static let messageLost = Signal("MessageLost", "ayssa{sv}")
        public static let distanceChanged = Signal("DistanceChanged", "ayssdd")
        public static let bleSignalChanged = Signal("BleSignalChanged", "ayssnn")
    }

    /// `org.nearbyd.PermissionAgent1`'s member.
    public enum PermissionAgent1 {
        public static let requestPermission = Method("RequestPermission", in: "sasa{sv}", out: "b")
    }

    /// `org.nearbyd.PermissionRequest1`'s member.
    public enum PermissionRequest1 {
        public static let request = Method("Request", in: "as", out: "b")
    }

    // MARK: Interfaces

    /// `org.nearbyd.Nearby1`, on ``rootPath``.
    public static let nearby = Interface(
        "org.nearbyd.Nearby1",
        methods: [
            Nearby1.createManager, Nearby1.registerPermissionAgent, Nearby1.unregisterPermissionAgent,
            Nearby1.getPermission, Nearby1.setPermission, Nearby1.listPermissions,
        ],
        properties: [
            Nearby1.version, Nearby1.availableMediums, Nearby1.loginSessions, Nearby1.server,
            Nearby1.staticPublications, Nearby1.debugLogging,
        ]
    )

    /// `org.nearbyd.Manager1`, on each manager `CreateManager` makes.
    public static let manager = Interface(
        "org.nearbyd.Manager1",
        methods: [Manager1.publish, Manager1.subscribe, Manager1.release],
        properties: [
            Manager1.permissionGranted, Manager1.microphonePermissionError, Manager1.bluetoothPowerError,
            Manager1.bluetoothPermissionError, Manager1.apiKeyError, Manager1.background,
        ]
    )

    /// `org.nearbyd.Upstream1`, on each manager too.
    public static let upstream = Interface(
        "org.nearbyd.Upstream1",
        methods: [Upstream1.sendMessage],
        properties: [Upstream1.directChannel, Upstream1.directChannelConnected],
        signals: [Upstream1.sendSucceeded, Upstream1.sendFailed, Upstream1.messageReceived]
    )

    /// `org.nearbyd.Publication1`, on each publication `Publish` makes.
    public static let publication = Interface(
        "org.nearbyd.Publication1",
        methods: [Publication1.unpublish],
        properties: [
            PublicationOrSubscription.status, PublicationOrSubscription.statusReason,
            Publication1.namespace, Publication1.type, Publication1.expiresAt,
        ],
        signals: [PublicationOrSubscription.expired]
    )

    /// `org.nearbyd.Subscription1`, on each subscription `Subscribe` makes.
    public static let subscription = Interface(
        "org.nearbyd.Subscription1",
        methods: [Subscription1.unsubscribe],
        properties: [PublicationOrSubscription.status, PublicationOrSubscription.statusReason],
        signals: [
            Subscription1.messageFound, Subscription1.messageLost, Subscription1.distanceChanged,
            Subscription1.bleSignalChanged, PublicationOrSubscription.expired,
        ]
    )

    /// `org.nearbyd.PermissionAgent1`: exported by a user's permission agent.
    public static let permissionAgent = Interface(
        "org.nearbyd.PermissionAgent1", caller: .nearbyd,
        methods: [PermissionAgent1.requestPermission]
    )

    /// `org.nearbyd.PermissionRequest1`: exported by an app's own permission dialog.
    public static let permissionRequest = Interface(
        "org.nearbyd.PermissionRequest1", caller: .nearbyd,
        methods: [PermissionRequest1.request]
    )

    // MARK: Dictionary keys

    // The keys of each `a{sv}` argument, reply and signal argument, one
    // constant each, named after the key. Each dictionary lists its keys: an
    // option dictionary what nearbyd accepts in it (anything else is
    // InvalidArguments), any other every key nearbyd puts in it;
    // doc/dbus-api.md has a table of each list.

    /// `CreateManager`'s `params`.
    public enum CreateManagerOption {
        public static let appId = Key("AppId", "s")
        public static let debugLogging = Key("DebugLogging", "b")
        public static let microphoneUsageDescription = Key("MicrophoneUsageDescription", "s")
        public static let bluetoothUsageDescription = Key("BluetoothUsageDescription", "s")
        /// What nearbyd accepts.
        public static let all = [appId, debugLogging, microphoneUsageDescription, bluetoothUsageDescription]
    }

    /// The `params` of `GetPermission`, `SetPermission` and `ListPermissions`.
    public enum PermissionOption {
        public static let user = Key("User", "u")
        /// What nearbyd accepts.
        public static let all = [user]
    }

    /// A decision as `GetPermission` replies it (and `ListPermissions` lists them).
    public enum PermissionEntryKey {
        public static let user = Key("User", "u")
        public static let appId = Key("AppId", "s")
        public static let decision = Key("Decision", "s")
        /// This and ``decidedAt`` only once somebody decided.
        public static let decidedBy = Key("DecidedBy", "s")
        public static let decidedAt = Key("DecidedAt", "t")
        /// What nearbyd replies.
        public static let all = [user, appId, decision, decidedBy, decidedAt]
    }

    /// `Publish`'s and `Subscribe`'s `params`: the keys they share mean the same for both.
    public enum PublishOrSubscribeOption {
        public static let namespace = Key("Namespace", "s")
        public static let type = Key("Type", "s")
        public static let deviceTypes = Key("DeviceTypes", "as")
        public static let strategy = Key("Strategy", "a{sv}")
        public static let beaconStrategy = Key("BeaconStrategy", "a{sv}")
        public static let permissionRequestHandler = Key("PermissionRequestHandler", "o")
        /// What `Publish` accepts.
        public static let publish = [namespace, strategy, permissionRequestHandler]
        /// What `Subscribe` accepts.
        public static let subscribe = [namespace, type, deviceTypes, strategy, beaconStrategy, permissionRequestHandler]
    }

    /// The `Strategy` dictionary of `Publish` and `Subscribe` params.
    public enum StrategyOption {
        public static let mediums = Key("Mediums", "as")
        public static let mode = Key("Mode", "s")
        public static let ttl = Key("TTL", "u")
        public static let distance = Key("Distance", "s")
        public static let allowInBackground = Key("AllowInBackground", "b")
        /// What nearbyd accepts.
        public static let all = [mediums, mode, ttl, distance, allowInBackground]
    }

    /// The `BeaconStrategy` dictionary of `Subscribe` params.
    public enum BeaconStrategyOption {
        public static let includeIBeacons = Key("IncludeIBeacons", "b")
        public static let lowPowerPreferred = Key("LowPowerPreferred", "b")
        public static let allowInBackground = Key("AllowInBackground", "b")
        public static let rawBeacons = Key("RawBeacons", "b")
        /// What nearbyd accepts.
        public static let all = [includeIBeacons, lowPowerPreferred, allowInBackground, rawBeacons]
    }

    /// The `info` of `MessageFound` and `MessageLost`.
    public enum MessageInfoKey {
        public static let medium = Key("Medium", "s")
        public static let rssi = Key("Rssi", "n")
        public static let distanceMeters = Key("DistanceMeters", "d")
        /// Beacon messages only: ``BeaconInfoKey``'s.
        public static let beacon = Key("Beacon", "a{sv}")
        /// What nearbyd sends.
        public static let all = [medium, rssi, distanceMeters, beacon]
    }

    /// The `Beacon` of a beacon message's `info`.
    public enum BeaconInfoKey {
        public static let kind = Key("Kind", "s")
        public static let id = Key("Id", "s")
        public static let txPower = Key("TxPower", "n")
        /// What nearbyd sends.
        public static let all = [kind, id, txPower]
    }

    /// The `details` of `RequestPermission`.
    public enum PermissionDetailKey {
        public static let user = Key("User", "u")
        public static let client = Key("Client", "s")
        /// When the bus knows it.
        public static let processId = Key("ProcessId", "u")
        /// The app's own usage descriptions pass on under their `CreateManager` keys, when it gave them.
        public static let microphoneUsageDescription = CreateManagerOption.microphoneUsageDescription
        public static let bluetoothUsageDescription = CreateManagerOption.bluetoothUsageDescription
        /// What nearbyd sends.
        public static let all = [user, client, processId, microphoneUsageDescription, bluetoothUsageDescription]
    }

    /// Every interface: nearbyd's own, then those it calls on clients.
    public static let interfaces = [nearby, manager, upstream, publication, subscription, permissionAgent, permissionRequest]

    /// The standard interfaces nearbyd's objects answer too (sd-bus's), which
    /// clients may use.
    public static let standardInterfaces = [
        "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Peer",
    ]

    /// nearbyd's own errors, `org.nearbyd.Error.<name>`.
    public enum Error: String, Sendable, CaseIterable {
        case invalidArguments = "InvalidArguments"
        case notPermitted = "NotPermitted"
        case limitExceeded = "LimitExceeded"
        case notSupported = "NotSupported"
        case accessDenied = "AccessDenied"
        case doesNotExist = "DoesNotExist"
        case failed = "Failed"

        /// The full D-Bus error name.
        public var busName: String { NearbyBusContract.errorPrefix + rawValue }
    }
}
