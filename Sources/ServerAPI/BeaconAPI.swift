import Foundation
import NearbyCore

// The beacon registry of nearby-server, in the shape of Google's Proximity
// Beacon API v1beta1: the same paths under /v1beta1, the same JSON field
// names. doc/server-api/openapi.yaml describes it for other clients; the
// differences from Google's API are listed in doc/nearby-server.md.
// Bytes are standard base64 with padding; times are strings, as Google's are.

/// Paths of the beacon registry. Resource names (`beacons/3!0a1b…`,
/// `beacons/3!0a1b…/attachments/ID`, `namespaces/NAME`) follow the version
/// prefix as they are: ``resource(_:)``.
public enum BeaconAPIPath {
    public static let version = "/v1beta1"
    /// `GET`: the caller's beacons.
    public static let beacons = "/v1beta1/beacons"
    /// `POST`: register a beacon.
    public static let register = "/v1beta1/beacons:register"
    /// `GET`: the caller's namespaces.
    public static let namespaces = "/v1beta1/namespaces"
    /// `POST` with a project's API key: what the beacons a device observed carry.
    public static let getForObserved = "/v1beta1/beaconinfo:getforobserved"

    /// The path of a resource name: a beacon, an attachment or a namespace.
    public static func resource(_ name: String) -> String { "\(version)/\(name)" }
    /// `POST`: a beacon's `activate`, `deactivate` or `decommission`.
    public static func action(_ beaconName: String, _ action: BeaconAction) -> String {
        "\(version)/\(beaconName):\(action.rawValue)"
    }
    /// `GET` and `POST`: a beacon's attachments.
    public static func attachments(_ beaconName: String) -> String { "\(version)/\(beaconName)/attachments" }
    /// `POST`: delete a beacon's attachments of one namespaced type.
    public static func batchDelete(_ beaconName: String) -> String { "\(version)/\(beaconName)/attachments:batchDelete" }
}

/// The status changes that have a path of their own (`PUT` never changes status).
public enum BeaconAction: String, Sendable, CaseIterable {
    case activate
    case deactivate
    /// Permanent: the advertised id can never be registered again.
    case decommission
}

/// The kinds of advertised id, as Google's `AdvertisedId.Type` names them.
public enum AdvertisedIdType: String, Codable, Sendable, CaseIterable {
    /// Eddystone-UID: 10-byte namespace and 6-byte instance.
    case eddystone = "EDDYSTONE"
    /// Eddystone-EID: the 8-byte ephemeral id the beacon broadcasts now.
    case eddystoneEID = "EDDYSTONE_EID"
    /// iBeacon: 16-byte proximity UUID, 2-byte major, 2-byte minor.
    case iBeacon = "IBEACON"
    /// AltBeacon: the 20-byte beacon id.
    case altBeacon = "ALTBEACON"

    /// The length every id of this type has.
    public var byteCount: Int {
        switch self {
        case .eddystone: 16
        case .eddystoneEID: 8
        case .iBeacon, .altBeacon: 20
        }
    }

    /// The number before `!` in a beacon name (`beacons/3!…`).
    public var nameCode: Int {
        switch self {
        case .iBeacon: 1
        case .eddystone: 3
        case .eddystoneEID: 4
        case .altBeacon: 5
        }
    }

    /// The type whose ``nameCode`` is `code`.
    public init?(nameCode code: Int) {
        guard let type = Self.allCases.first(where: { $0.nameCode == code }) else { return nil }
        self = type
    }
}

/// Google's `AdvertisedId`: what a beacon broadcasts, which identifies it.
public struct AdvertisedIdJSON: Codable, Sendable, Hashable {
    public var type: AdvertisedIdType
    /// The raw id, ``AdvertisedIdType/byteCount`` bytes (base64 in JSON).
    public var id: Data

    public init(type: AdvertisedIdType, id: Data) {
        self.type = type
        self.id = id
    }

    /// The beacon's resource name: `beacons/N!HEX`, N the type's ``AdvertisedIdType/nameCode``.
    public var beaconName: String { "beacons/\(type.nameCode)!\(Hex.encode(Array(id)))" }
}

public enum BeaconStatus: String, Codable, Sendable, CaseIterable {
    /// Returned by `beaconinfo:getforobserved`.
    case active = "ACTIVE"
    /// Registered, but not returned by `beaconinfo:getforobserved`.
    case inactive = "INACTIVE"
    /// For good: never returned again, and its id cannot be registered again.
    case decommissioned = "DECOMMISSIONED"
}

/// A registered beacon (Google's `Beacon`). On register, `advertisedId` is
/// required and `status` defaults to `ACTIVE`; output-only fields sent in a
/// request are ignored.
public struct Beacon: Codable, Sendable, Equatable {
    /// Output only: `beacons/N!HEX`.
    public var beaconName: String?
    /// Required on register; never changes afterwards.
    public var advertisedId: AdvertisedIdJSON?
    public var status: BeaconStatus?
    public var description: String?
    /// Free-form string pairs for the project's own use.
    public var properties: [String: String]?
    /// `STABLE`, `PORTABLE`, `MOBILE` or `ROVING`.
    public var expectedStability: String?
    public var indoorLevel: IndoorLevel?
    public var latLng: LatLng?
    public var placeId: String?
    /// Output only, an extension of Google's shape: the telemetry frame last
    /// sent with an observation of this beacon (base64).
    public var lastTelemetry: Data?
    /// Output only, an extension: when ``lastTelemetry`` was observed,
    /// milliseconds since the epoch as a decimal string.
    public var lastTelemetryTimeMs: String?

    public init(beaconName: String? = nil, advertisedId: AdvertisedIdJSON? = nil, status: BeaconStatus? = nil,
                description: String? = nil, properties: [String: String]? = nil, expectedStability: String? = nil,
                indoorLevel: IndoorLevel? = nil, latLng: LatLng? = nil, placeId: String? = nil,
                lastTelemetry: Data? = nil, lastTelemetryTimeMs: String? = nil) {
        self.beaconName = beaconName
        self.advertisedId = advertisedId
        self.status = status
        self.description = description
        self.properties = properties
        self.expectedStability = expectedStability
        self.indoorLevel = indoorLevel
        self.latLng = latLng
        self.placeId = placeId
        self.lastTelemetry = lastTelemetry
        self.lastTelemetryTimeMs = lastTelemetryTimeMs
    }
}

/// The floor a beacon is on.
public struct IndoorLevel: Codable, Sendable, Equatable {
    public var name: String

    public init(name: String) {
        self.name = name
    }
}

/// WGS84 degrees.
public struct LatLng: Codable, Sendable, Equatable {
    public var latitude: Double
    public var longitude: Double

    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
}

/// `GET /v1beta1/beacons`: one page of the caller's beacons.
public struct ListBeaconsResponse: Codable, Sendable, Equatable {
    public var beacons: [Beacon]
    /// Absent on the last page; otherwise the `pageToken` of the next.
    public var nextPageToken: String?
    /// How many beacons match the query on all pages, as a decimal string.
    public var totalCount: String

    public init(beacons: [Beacon], nextPageToken: String?, totalCount: String) {
        self.beacons = beacons
        self.nextPageToken = nextPageToken
        self.totalCount = totalCount
    }
}

/// Data a project attaches to a beacon (Google's `BeaconAttachment`). On
/// create, only `namespacedType` and `data` are read.
public struct BeaconAttachment: Codable, Sendable, Equatable {
    /// Output only: `beacons/N!HEX/attachments/ID`.
    public var attachmentName: String?
    /// `NAMESPACE/TYPE`: the namespace is one the project owns; the type is
    /// 1 to 100 characters without `/` or `*`.
    public var namespacedType: String
    /// 1 to 1024 bytes (base64 in JSON).
    public var data: Data
    /// Output only: milliseconds since the epoch as a decimal string.
    public var creationTimeMs: String?

    public init(attachmentName: String? = nil, namespacedType: String, data: Data, creationTimeMs: String? = nil) {
        self.attachmentName = attachmentName
        self.namespacedType = namespacedType
        self.data = data
        self.creationTimeMs = creationTimeMs
    }
}

/// `GET /v1beta1/beacons/{beacon}/attachments`.
public struct ListBeaconAttachmentsResponse: Codable, Sendable, Equatable {
    public var attachments: [BeaconAttachment]

    public init(attachments: [BeaconAttachment]) {
        self.attachments = attachments
    }
}

/// `POST /v1beta1/beacons/{beacon}/attachments:batchDelete`.
public struct DeleteAttachmentsResponse: Codable, Sendable, Equatable {
    public var numDeleted: Int

    public init(numDeleted: Int) {
        self.numDeleted = numDeleted
    }
}

/// Who may read a namespace's attachments through `beaconinfo:getforobserved`.
public enum ServingVisibility: String, Codable, Sendable, CaseIterable {
    /// Only the project that owns the namespace (the default).
    case unlisted = "UNLISTED"
    /// Any project that asks for the namespace by name.
    case `public` = "PUBLIC"
}

/// A namespace of attachments (Google's `Namespace`). On `PUT`, only
/// `servingVisibility` is read.
public struct BeaconNamespace: Codable, Sendable, Equatable {
    /// `namespaces/NAME`.
    public var namespaceName: String?
    public var servingVisibility: ServingVisibility

    public init(namespaceName: String? = nil, servingVisibility: ServingVisibility) {
        self.namespaceName = namespaceName
        self.servingVisibility = servingVisibility
    }
}

/// `GET /v1beta1/namespaces`.
public struct ListNamespacesResponse: Codable, Sendable, Equatable {
    public var namespaces: [BeaconNamespace]

    public init(namespaces: [BeaconNamespace]) {
        self.namespaces = namespaces
    }
}

/// `POST /v1beta1/beaconinfo:getforobserved`, with a project's API key: the
/// beacons a device observed, and which attachments it wants of them.
public struct GetForObservedRequest: Codable, Sendable, Equatable {
    /// At most `[limits] max-observations-per-request` (100 by default).
    public var observations: [Observation]
    /// Each `*` (every type of the caller's own namespaces), `NAMESPACE/TYPE`
    /// or `NAMESPACE/*`; at most `[limits] max-namespaced-types-per-request`
    /// (16 by default). Empty or absent: the caller's own beacons, without
    /// attachments.
    public var namespacedTypes: [String]?

    public init(observations: [Observation], namespacedTypes: [String]? = nil) {
        self.observations = observations
        self.namespacedTypes = namespacedTypes
    }

    /// One beacon heard.
    public struct Observation: Codable, Sendable, Equatable {
        public var advertisedId: AdvertisedIdJSON
        /// The beacon's telemetry frame (Eddystone-TLM), at most 64 bytes:
        /// kept as the beacon's last telemetry.
        public var telemetry: Data?
        /// When it was heard, RFC 3339 (`2024-05-01T12:00:00Z`); absent: now.
        public var timestampMs: String?

        public init(advertisedId: AdvertisedIdJSON, telemetry: Data? = nil, timestampMs: String? = nil) {
            self.advertisedId = advertisedId
            self.telemetry = telemetry
            self.timestampMs = timestampMs
        }
    }
}

/// The answer to ``GetForObservedRequest``: one entry per observed beacon that
/// is registered, active, and either the caller's own or carries an attachment
/// the caller asked for and may read; in the order first observed.
public struct GetForObservedResponse: Codable, Sendable, Equatable {
    public var beacons: [BeaconInfo]

    public init(beacons: [BeaconInfo]) {
        self.beacons = beacons
    }
}

/// An observed beacon and the attachments the caller asked for.
public struct BeaconInfo: Codable, Sendable, Equatable {
    public var advertisedId: AdvertisedIdJSON
    public var beaconName: String
    /// Only for the caller's own beacons.
    public var description: String?
    public var attachments: [AttachmentInfo]

    public init(advertisedId: AdvertisedIdJSON, beaconName: String, description: String? = nil, attachments: [AttachmentInfo]) {
        self.advertisedId = advertisedId
        self.beaconName = beaconName
        self.description = description
        self.attachments = attachments
    }
}

/// One attachment of an observed beacon.
public struct AttachmentInfo: Codable, Sendable, Equatable {
    /// `NAMESPACE/TYPE`.
    public var namespacedType: String
    public var data: Data

    public init(namespacedType: String, data: Data) {
        self.namespacedType = namespacedType
        self.data = data
    }
}
