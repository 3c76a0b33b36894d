import NearbyCore
import ServerAPI

/// What a server link tells the daemon, in order.
public enum LinkEvent: Sendable, Equatable {
    /// In step with the server at `server` (one of `[server] url`):
    /// `registered` are the publication and subscription ids it now holds;
    /// `namespace` is the project's own.
    case connected(namespace: String, registered: Set<String>, server: String)
    /// The server cannot be reached; the link retries by itself.
    case disconnected
    /// Why the link is not connected, after each failed round of attempts
    /// (one per URL of `[server] url`, ``Backoff``) whose reason differs from
    /// the last one's; `reached` when the server answered (it
    /// refused the API key), false when it could not be reached or its
    /// certificate was not trusted.
    case waiting(String, reached: Bool)
    /// The server refused to hold this publication or subscription; it is
    /// offered again after `[server] refused-change-retry` if `retried`.
    case refused(String, APIError, retried: Bool)
    /// One more publication or subscription is held by the server.
    case registered(String)
    /// The token to broadcast from now on (nil: none is valid).
    case token(Token?)
    /// Found, lost or a snapshot, from the stream.
    case stream(StreamEvent)
}

/// The daemon's view of one server link (one ``Account``): whether it is in
/// step with the server and which, why not, what the server holds and
/// refused, the project's namespace, the token to broadcast, and its stream's
/// snapshot under way. Changed by the link's events alone; its stream's
/// events change the found messages of the link's subscriptions too.
public struct LinkView: Sendable {
    @_spi(Testing) public private(set) var connected = false
    /// The URL of the server the link is connected to, or was last.
    @_spi(Testing) public private(set) var server: String?
    /// Why the link is not connected, as it last said.
    public private(set) var waiting: String?
    /// The server answered and refused the API key (unknown to it, or
    /// revoked), as the last round of attempts found; false once connected.
    public private(set) var keyRefused = false
    /// Why the server refused an object, by id, until it holds it.
    @_spi(Testing) public private(set) var refused: [String: String] = [:]
    public private(set) var namespace: String?
    public private(set) var token: Token?
    /// The publication and subscription ids the server holds.
    @_spi(Testing) public private(set) var registered: Set<String> = []
    private var matches = MatchStream()
    /// How often a refused object is offered again, for its reason (`30 s`).
    private let refusedRetry: String

    public init(refusedRetry: String) {
        self.refusedRetry = refusedRetry
    }

    /// What one event changed, for the daemon to act on.
    public struct Change: Sendable, Equatable {
        /// Whose status may have changed: every object of the link's, or one.
        public enum Statuses: Sendable, Equatable {
            case none
            case all
            case object(String)
        }

        public var statuses = Statuses.none
        /// The project's namespace, which publications without their own show.
        public var namespaceChanged = false
        /// The token to broadcast changed.
        public var tokenChanged = false
        /// Whether the server refuses the API key changed (``keyRefused``).
        public var keyRefusedChanged = false
        /// Whether the server could be reached, when this event says.
        public var reach: Reach?
        public var found: [FoundChange] = []
    }

    /// Whether a link reached its server.
    public enum Reach: Sendable, Equatable {
        /// Connected.
        case reached
        /// A round of attempts could not reach it (or did not trust its certificate), and why.
        case unreachable(String)
    }

    /// Applies the link's next event; its stream's change the found messages
    /// of the link's `subscriptions`.
    public mutating func apply(_ event: LinkEvent, subscriptions: some LinkSubscriptions) -> Change {
        var change = Change()
        switch event {
        case .connected(let namespace, let registered, let server):
            connected = true
            self.server = server
            waiting = nil
            change.keyRefusedChanged = keyRefused
            keyRefused = false
            change.namespaceChanged = self.namespace != namespace
            self.namespace = namespace
            self.registered = registered
            change.reach = .reached
            change.statuses = .all
        case .disconnected:
            connected = false
            registered = []
            matches.disconnected()
            change.statuses = .all
        case .waiting(let reason, let reached):
            waiting = reason
            change.keyRefusedChanged = keyRefused != reached
            keyRefused = reached
            if !reached { change.reach = .unreachable(reason) }
            change.statuses = .all
        case .registered(let id):
            registered.insert(id)
            refused[id] = nil
            change.statuses = .object(id)
        case .refused(let id, let error, let retried):
            refused[id] = retried
                ? "nearby-server refused it (\(error)); offered again every \(refusedRetry)"
                : "nearby-server refused it (\(error))"
            change.statuses = .object(id)
        case .token(let token):
            self.token = token
            change.tokenChanged = true
        case .stream(let event):
            change.found = matches.apply(event, to: subscriptions)
        }
        return change
    }

    /// The object stopped running (it waits): the server is to drop it.
    public mutating func stopped(_ id: String) {
        if !registered.isEmpty { registered.remove(id) }
    }

    /// The object ended: what the server said of it says nothing any more.
    public mutating func ended(_ id: String) {
        // Removing from a set hashes the id even when the set is empty, as it
        // is while the server holds none of the link's objects yet.
        if !registered.isEmpty { registered.remove(id) }
        // Refusals are rare: most ends hash nothing more.
        if !refused.isEmpty { refused[id] = nil }
    }

    /// A publication's or subscription's nearby part, while it runs: active
    /// once the server holds it and one of its mediums works; starting until
    /// then, with the reason.
    public func status(of id: String, mediums: Set<Medium>, available: Set<Medium>) -> (status: ObjectStatus, reason: String) {
        guard connected else { return (.starting, waiting ?? "connecting to nearby-server") }
        guard registered.contains(id) else { return (.starting, refused[id] ?? "being registered with nearby-server") }
        guard !mediums.isDisjoint(with: available) else {
            return (.starting, "none of its mediums (\(Medium.names(mediums))) is available now")
        }
        return (.active, "")
    }
}

extension Medium {
    /// Medium names for people and records: `audio,ble`.
    public static func names(_ mediums: Set<Medium>) -> String {
        mediums.map(\.rawValue).sorted().joined(separator: ",")
    }
}

extension LinkView {
    /// A subscription's status from its parts: its nearby part's (nil when
    /// it has none, or it waits) and whether its beacon part runs, which is
    /// active once BLE works. Active once each part that runs is.
    public static func subscriptionStatus(nearby: (status: ObjectStatus, reason: String)?, beaconsRun: Bool,
                                          available: Set<Medium>) -> (status: ObjectStatus, reason: String) {
        var result = (status: ObjectStatus.active, reason: "")
        if beaconsRun, !available.contains(.ble) { result = (.starting, "BLE is not available now") }
        if let nearby, nearby.status == .starting { result = nearby }
        return result
    }
}

extension LinkView {
    /// `Nearby1.Server`, from every link: `connected: URL` while a link is in
    /// step with the server at URL (`URL, URL`, in the order of `urls`, when
    /// links use different ones); else `unreachable: WHY` after a round of
    /// attempts that could not reach it, `connecting` before any round has
    /// ended, and `idle` while there is no link.
    public static func serverStatus(of links: [LinkView], urls: [String], unreachable: String?) -> String {
        let servers = Set(links.filter(\.connected).compactMap(\.server))
        if !servers.isEmpty { return "connected: " + urls.filter { servers.contains($0) }.joined(separator: ", ") }
        if let unreachable { return "unreachable: \(unreachable)" }
        return links.isEmpty ? "idle" : "connecting"
    }
}
