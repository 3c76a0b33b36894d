import Foundation
import NearbyCore

// The HTTP and WebSocket API of nearby-server, shared by the server and nearbyd.
// doc/server-api/openapi.yaml describes the same shapes for other clients.
// JSON throughout; times are milliseconds since the epoch; bytes are base64.

/// Paths of the API, version 1.
public enum APIPath {
    public static let health = "/v1/health"
    public static let ready = "/v1/ready"
    public static let devices = "/v1/devices"

    public static func device(_ device: String) -> String { "/v1/devices/\(device)" }
    public static func tokens(_ device: String) -> String { "/v1/devices/\(device)/tokens" }
    public static func publications(_ device: String) -> String { "/v1/devices/\(device)/publications" }
    public static func publication(_ device: String, _ id: String) -> String { "/v1/devices/\(device)/publications/\(id)" }
    public static func subscriptions(_ device: String) -> String { "/v1/devices/\(device)/subscriptions" }
    public static func subscription(_ device: String, _ id: String) -> String { "/v1/devices/\(device)/subscriptions/\(id)" }
    public static func sightings(_ device: String) -> String { "/v1/devices/\(device)/sightings" }
    public static func changes(_ device: String) -> String { "/v1/devices/\(device)/changes" }
    public static func stream(_ device: String) -> String { "/v1/devices/\(device)/stream" }

    /// The device a path of ``device(_:)`` or below names; nil for any other path.
    public static func device(inPath path: some StringProtocol) -> Substring? {
        let prefix = "/v1/devices/"
        guard path.hasPrefix(prefix) else { return nil }
        let rest = path.dropFirst(prefix.count)
        let device = rest.prefix { $0 != "/" }
        return device.isEmpty ? nil : Substring(device)
    }
}

/// Header that carries a project's API key when a device registers.
public let apiKeyHeader = "X-Api-Key"

/// `POST /v1/devices` (with ``apiKeyHeader``): a new device of the key's project.
/// `secret` is the device's bearer credential for every other call.
public struct DeviceRegistration: Codable, Sendable, Equatable {
    public var device: String
    public var secret: String
    public var project: String
    /// The project's own namespace: what an empty namespace stands for.
    public var namespace: String

    public init(device: String, secret: String, project: String, namespace: String) {
        self.device = device
        self.secret = secret
        self.project = project
        self.namespace = namespace
    }
}

/// `POST /v1/devices/{device}/tokens`: a freshly issued token. It is valid until
/// `expiresAtMs`; the device should ask for the next one at `refreshAtMs`, which
/// leaves an overlap in which both are valid.
public struct IssuedToken: Codable, Sendable, Equatable {
    public var token: Token
    public var expiresAtMs: UInt64
    public var refreshAtMs: UInt64

    public init(token: Token, expiresAtMs: UInt64, refreshAtMs: UInt64) {
        self.token = token
        self.expiresAtMs = expiresAtMs
        self.refreshAtMs = refreshAtMs
    }
}

/// `PUT /v1/devices/{device}/publications/{id}`: creates or replaces a publication.
public struct PublicationSpec: Codable, Sendable, Equatable {
    /// Empty: the project's namespace.
    public var namespace: String
    public var type: String
    public var content: Data
    public var mediums: [Medium]
    public var mode: DiscoveryMode
    public var expiresAtMs: UInt64
    /// `earshot`: matched only over audio heard within ``earshotMeters``. Absent: `default`.
    public var distance: DistanceType?

    public init(namespace: String, type: String, content: Data, mediums: [Medium], mode: DiscoveryMode,
                expiresAtMs: UInt64, distance: DistanceType? = nil) {
        self.namespace = namespace
        self.type = type
        self.content = content
        self.mediums = mediums
        self.mode = mode
        self.expiresAtMs = expiresAtMs
        self.distance = distance
    }
}

/// A publication as the server holds it (content left out of listings).
public struct PublicationRecord: Codable, Sendable, Equatable {
    public var id: String
    /// Resolved: never empty.
    public var namespace: String
    public var type: String
    public var mediums: [Medium]
    public var mode: DiscoveryMode
    public var expiresAtMs: UInt64

    public init(id: String, namespace: String, type: String, mediums: [Medium], mode: DiscoveryMode, expiresAtMs: UInt64) {
        self.id = id
        self.namespace = namespace
        self.type = type
        self.mediums = mediums
        self.mode = mode
        self.expiresAtMs = expiresAtMs
    }
}

public struct PublicationList: Codable, Sendable, Equatable {
    public var publications: [PublicationRecord]

    public init(publications: [PublicationRecord]) {
        self.publications = publications
    }
}

/// `PUT /v1/devices/{device}/subscriptions/{id}`: creates or replaces a subscription.
public struct SubscriptionSpec: Codable, Sendable, Equatable {
    /// Empty: the project's namespace.
    public var namespace: String
    /// Empty: every type of the namespace.
    public var type: String
    public var mediums: [Medium]
    public var mode: DiscoveryMode
    /// 0: no expiry.
    public var expiresAtMs: UInt64
    /// As for publications.
    public var distance: DistanceType?

    public init(namespace: String, type: String, mediums: [Medium], mode: DiscoveryMode, expiresAtMs: UInt64,
                distance: DistanceType? = nil) {
        self.namespace = namespace
        self.type = type
        self.mediums = mediums
        self.mode = mode
        self.expiresAtMs = expiresAtMs
        self.distance = distance
    }
}

public struct SubscriptionRecord: Codable, Sendable, Equatable {
    public var id: String
    public var namespace: String
    public var type: String
    public var mediums: [Medium]
    public var mode: DiscoveryMode
    public var expiresAtMs: UInt64

    public init(id: String, namespace: String, type: String, mediums: [Medium], mode: DiscoveryMode, expiresAtMs: UInt64) {
        self.id = id
        self.namespace = namespace
        self.type = type
        self.mediums = mediums
        self.mode = mode
        self.expiresAtMs = expiresAtMs
    }
}

public struct SubscriptionList: Codable, Sendable, Equatable {
    public var subscriptions: [SubscriptionRecord]

    public init(subscriptions: [SubscriptionRecord]) {
        self.subscriptions = subscriptions
    }
}

/// `POST /v1/devices/{device}/changes`: several publication and subscription
/// changes in one request, applied in order. Each is answered on its own: one
/// that is refused (invalid, over a limit) does not stop the others. A device
/// that makes and ends many objects quickly sends one request per round trip
/// instead of one per change.
public struct ChangeBatch: Codable, Sendable, Equatable {
    public var changes: [Change]

    public init(changes: [Change]) {
        self.changes = changes
    }

    public enum Change: Codable, Sendable, Equatable {
        /// As `PUT /v1/devices/{device}/publications/{id}`.
        case putPublication(id: String, PublicationSpec)
        /// As `DELETE /v1/devices/{device}/publications/{id}`; an unknown id is not an error.
        case deletePublication(id: String)
        case putSubscription(id: String, SubscriptionSpec)
        case deleteSubscription(id: String)

        private enum CodingKeys: String, CodingKey {
            case op, id, publication, subscription
        }

        public var id: String {
            switch self {
            case .putPublication(let id, _), .deletePublication(let id), .putSubscription(let id, _),
                 .deleteSubscription(let id):
                id
            }
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let id = try container.decode(String.self, forKey: .id)
            switch try container.decode(String.self, forKey: .op) {
            case "put-publication": self = .putPublication(id: id, try container.decode(PublicationSpec.self, forKey: .publication))
            case "delete-publication": self = .deletePublication(id: id)
            case "put-subscription": self = .putSubscription(id: id, try container.decode(SubscriptionSpec.self, forKey: .subscription))
            case "delete-subscription": self = .deleteSubscription(id: id)
            case let other:
                throw DecodingError.dataCorruptedError(forKey: .op, in: container, debugDescription: "unknown op \(other)")
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            switch self {
            case .putPublication(_, let spec):
                try container.encode("put-publication", forKey: .op)
                try container.encode(spec, forKey: .publication)
            case .deletePublication:
                try container.encode("delete-publication", forKey: .op)
            case .putSubscription(_, let spec):
                try container.encode("put-subscription", forKey: .op)
                try container.encode(spec, forKey: .subscription)
            case .deleteSubscription:
                try container.encode("delete-subscription", forKey: .op)
            }
        }
    }
}

/// The answer to each change of a ``ChangeBatch``, in the same order: `error`
/// is absent when the change was applied.
public struct ChangeResults: Codable, Sendable, Equatable {
    public var results: [Result]

    public init(results: [Result]) {
        self.results = results
    }

    public struct Result: Codable, Sendable, Equatable {
        public var id: String
        public var error: APIError?

        public init(id: String, error: APIError? = nil) {
            self.id = id
            self.error = error
        }
    }
}

/// `POST /v1/devices/{device}/sightings`: tokens the device hears (`seen`, sent
/// when first heard and then periodically) and tokens it stopped hearing (`gone`).
public struct SightingReport: Codable, Sendable, Equatable {
    public var seen: [Seen]
    public var gone: [Gone]

    public init(seen: [Seen] = [], gone: [Gone] = []) {
        self.seen = seen
        self.gone = gone
    }

    public struct Seen: Codable, Sendable, Equatable {
        public var token: Token
        public var medium: Medium
        public var rssi: Int
        public var distance: Double
        public var seenAtMs: UInt64

        public init(token: Token, medium: Medium, rssi: Int, distance: Double, seenAtMs: UInt64) {
            self.token = token
            self.medium = medium
            self.rssi = rssi
            self.distance = distance
            self.seenAtMs = seenAtMs
        }
    }

    public struct Gone: Codable, Sendable, Equatable {
        public var token: Token
        public var medium: Medium

        public init(token: Token, medium: Medium) {
            self.token = token
            self.medium = medium
        }
    }
}

/// The verdict on each `seen` token of a report, in order.
public struct SightingResults: Codable, Sendable, Equatable {
    public var results: [Result]

    public init(results: [Result]) {
        self.results = results
    }

    public struct Result: Codable, Sendable, Equatable {
        public var token: Token
        public var status: Status

        public init(token: Token, status: Status) {
            self.token = token
            self.status = status
        }
    }

    public enum Status: String, Codable, Sendable {
        /// A valid token of a registered device of the reporter's project.
        case ok
        /// No device of the reporter's project was ever issued this token.
        case unknown
        /// The token's lifetime is over.
        case expired
    }
}

/// Every error response: a stable code and a sentence for people.
public struct APIError: Codable, Sendable, Equatable, Error, CustomStringConvertible {
    public var error: Code
    public var message: String

    public init(_ error: Code, _ message: String) {
        self.error = error
        self.message = message
    }

    public var description: String { "\(error.rawValue): \(message)" }

    public enum Code: String, Codable, Sendable {
        case invalidArgument = "invalid_argument"
        case unauthenticated
        case permissionDenied = "permission_denied"
        case notFound = "not_found"
        /// The object exists already (a beacon id registered before).
        case alreadyExists = "already_exists"
        case limitExceeded = "limit_exceeded"
        /// 429 with `Retry-After`: too many requests of this kind from this
        /// address or for this project just now; the same request succeeds later.
        case rateLimited = "rate_limited"
        case payloadTooLarge = "payload_too_large"
        /// 414: the request line is longer than the server takes.
        case uriTooLong = "uri_too_long"
        /// 431: the request head (line and header fields) is larger than the server takes.
        case headersTooLarge = "headers_too_large"
        /// 408: the request did not arrive, or was not answered, in time; the connection is closed.
        case requestTimeout = "request_timeout"
        /// 503: every connection slot is busy (from this address, or at all); try again later.
        case tooManyConnections = "too_many_connections"
        /// 503: the server runs but cannot serve now (its database does not answer).
        case unavailable
        /// 307, with `Location`: another replica serves the device (it owns the
        /// device's partition); this request and the device's next ones go there.
        case moved
        case internalError = "internal"
    }
}

// MARK: - Stream (WebSocket text frames, one JSON object each)

/// A subscription of this device and a publication near it that it matches.
public struct Match: Codable, Sendable, Equatable {
    public var subscription: String
    /// Opaque, stable id of the publication (unique across devices).
    public var source: String
    public var namespace: String
    public var type: String
    public var content: Data
    public var medium: Medium
    public var rssi: Int
    public var distance: Double

    public init(subscription: String, source: String, namespace: String, type: String, content: Data,
                medium: Medium, rssi: Int, distance: Double) {
        self.subscription = subscription
        self.source = source
        self.namespace = namespace
        self.type = type
        self.content = content
        self.medium = medium
        self.rssi = rssi
        self.distance = distance
    }
}

/// What the server pushes to a device.
public enum StreamEvent: Codable, Sendable, Equatable {
    /// A publication came near one of the device's subscriptions.
    case found(Match)
    /// It is no longer near (moved away, unpublished, expired).
    case lost(subscription: String, source: String)
    /// Every current match of the device's subscriptions, in answer to a
    /// ``StreamRequest/snapshot`` (after a reconnect, to drop what was lost
    /// meanwhile), a page at a time: every page but the last has `more` set
    /// (on the wire `"more": true`; absent on the last, so a snapshot of one
    /// page is a plain snapshot). Events may come between the pages, in the
    /// order things happened: a page lists the matches as they are when it is
    /// sent. The snapshot is the matches of all its pages together with those
    /// found since it began, less those lost since.
    case snapshot([Match], more: Bool = false)

    private enum CodingKeys: String, CodingKey {
        case event, match, subscription, source, matches, more
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        switch try container.decode(String.self, forKey: .event) {
        case "found": self = .found(try container.decode(Match.self, forKey: .match))
        case "lost":
            self = .lost(subscription: try container.decode(String.self, forKey: .subscription),
                         source: try container.decode(String.self, forKey: .source))
        case "snapshot":
            self = .snapshot(try container.decode([Match].self, forKey: .matches),
                             more: try container.decodeIfPresent(Bool.self, forKey: .more) ?? false)
        case let other:
            throw DecodingError.dataCorruptedError(forKey: .event, in: container, debugDescription: "unknown event \(other)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .found(let match):
            try container.encode("found", forKey: .event)
            try container.encode(match, forKey: .match)
        case .lost(let subscription, let source):
            try container.encode("lost", forKey: .event)
            try container.encode(subscription, forKey: .subscription)
            try container.encode(source, forKey: .source)
        case .snapshot(let matches, let more):
            try container.encode("snapshot", forKey: .event)
            try container.encode(matches, forKey: .matches)
            if more { try container.encode(true, forKey: .more) }
        }
    }
}

/// What a device sends on its stream.
public enum StreamRequest: String, Codable, Sendable {
    /// Ask for a ``StreamEvent/snapshot(_:)``.
    case snapshot

    private enum CodingKeys: String, CodingKey { case request }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let name = try container.decode(String.self, forKey: .request)
        guard let request = StreamRequest(rawValue: name) else {
            throw DecodingError.dataCorruptedError(forKey: .request, in: container, debugDescription: "unknown request \(name)")
        }
        self = request
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(rawValue, forKey: .request)
    }
}
