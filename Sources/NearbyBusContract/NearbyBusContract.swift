/// nearbyd's D-Bus API as data: the one place its names are written.
///
/// The daemon exports what this describes, the NearbyMessages library calls
/// it by these names, and `make test` checks the rest against it: the
/// daemon's live introspection (`BusContractTests`), the shipped bus policy
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

    /// `org.nearbyd.Nearby1`, on ``rootPath``.
    public static let nearby = Interface(
        "org.nearbyd.Nearby1",
        methods: [
            Method("CreateManager", in: "sa{sv}", out: "o"),
            Method("RegisterPermissionAgent", in: "o"),
            Method("UnregisterPermissionAgent", in: "o"),
            Method("GetPermission", in: "sa{sv}", out: "a{sv}"),
            Method("SetPermission", in: "sba{sv}"),
            Method("ListPermissions", in: "a{sv}", out: "aa{sv}"),
        ],
        properties: [
            Property("Version", "s"),
            Property("AvailableMediums", "as"),
            Property("LoginSessions", "s"),
            Property("Server", "s"),
            Property("StaticPublications", "a(sss)"),
            Property("DebugLogging", "b", .readWriteRoot),
        ]
    )

    /// `org.nearbyd.Manager1`, on each manager `CreateManager` makes.
    public static let manager = Interface(
        "org.nearbyd.Manager1",
        methods: [
            Method("Publish", in: "aysa{sv}", out: "o"),
            Method("Subscribe", in: "a{sv}", out: "o"),
            Method("Release"),
        ],
        properties: [
            Property("PermissionGranted", "b", .readWrite),
            Property("MicrophonePermissionError", "b"),
            Property("BluetoothPowerError", "b"),
            Property("BluetoothPermissionError", "b"),
            Property("Background", "b", .readWrite),
        ]
    )

    /// `org.nearbyd.Upstream1`, on each manager too.
    public static let upstream = Interface(
        "org.nearbyd.Upstream1",
        methods: [Method("SendMessage", in: "a{ss}ssx")],
        properties: [
            Property("DirectChannel", "b", .readWrite),
            Property("DirectChannelConnected", "b"),
        ],
        signals: [
            Signal("SendSucceeded", "s"),
            Signal("SendFailed", "sss"),
            Signal("MessageReceived", "a{ss}ss"),
        ]
    )

    /// `org.nearbyd.Publication1`, on each publication `Publish` makes.
    public static let publication = Interface(
        "org.nearbyd.Publication1",
        methods: [Method("Unpublish")],
        properties: [
            Property("Status", "s"),
            Property("StatusReason", "s"),
            Property("Namespace", "s"),
            Property("Type", "s"),
            Property("ExpiresAt", "t"),
        ],
        signals: [Signal("Expired")]
    )

    /// `org.nearbyd.Subscription1`, on each subscription `Subscribe` makes.
    public static let subscription = Interface(
        "org.nearbyd.Subscription1",
        methods: [Method("Unsubscribe")],
        properties: [
            Property("Status", "s"),
            Property("StatusReason", "s"),
        ],
        signals: [
            Signal("MessageFound", "ayssa{sv}"),
            Signal("MessageLost", "ayssa{sv}"),
            Signal("DistanceChanged", "ayssdd"),
            Signal("BleSignalChanged", "ayssnn"),
            Signal("Expired"),
        ]
    )

    /// `org.nearbyd.PermissionAgent1`: exported by a user's permission agent.
    public static let permissionAgent = Interface(
        "org.nearbyd.PermissionAgent1", caller: .nearbyd,
        methods: [Method("RequestPermission", in: "sasa{sv}", out: "b")]
    )

    /// `org.nearbyd.PermissionRequest1`: exported by an app's own permission dialog.
    public static let permissionRequest = Interface(
        "org.nearbyd.PermissionRequest1", caller: .nearbyd,
        methods: [Method("Request", in: "as", out: "b")]
    )

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
