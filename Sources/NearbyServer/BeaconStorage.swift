import Foundation
import ServerAPI

/// The beacon registry's part of ``ServerStorage``: beacons, their
/// attachments, and namespaces with their visibility. Every method is one
/// transaction; a method that takes a `project` acts only on that project's
/// beacons and answers as if another project's did not exist.
public protocol BeaconStorage: Sendable {
    // MARK: Beacons

    /// Stores a new beacon. Throws ``StorageError/beaconRegistered(_:)`` when
    /// any project has its id, ``StorageError/beaconRetired(_:)`` when the id
    /// was ever decommissioned, ``StorageError/projectNotFound(_:)``.
    func registerBeacon(_ beacon: StoredBeacon) async throws
    /// The beacon with this id, whichever project's.
    func beacon(_ id: BeaconID) async throws -> StoredBeacon?
    /// One page of the project's beacons that pass `filter`, in the order they
    /// were registered, starting after position `after` (0: the first page).
    func beacons(project: String, filter: BeaconFilter, after: Int64, limit: Int) async throws -> BeaconPage
    /// Replaces what a client may change of the project's beacon (description,
    /// properties, stability, place); the rest of `beacon` is not read.
    /// Returns whether the project has the beacon.
    func updateBeacon(_ beacon: StoredBeacon) async throws -> Bool
    /// Sets the status of the project's beacon; decommissioning also retires
    /// its id for good. Returns whether the project has the beacon.
    func setBeaconStatus(_ id: BeaconID, project: String, status: BeaconStatus, atMs: UInt64) async throws -> Bool
    /// Deletes the project's beacon with its attachments. Returns whether it existed.
    func deleteBeacon(_ id: BeaconID, project: String) async throws -> Bool

    // MARK: Observations

    /// The active beacons among `ids`, each with its attachments in
    /// `attachmentNamespaces`, in creation order.
    func activeBeacons(_ ids: [BeaconID], attachmentNamespaces: Set<String>) async throws -> [ObservedBeacon]
    /// Keeps each telemetry frame as its active beacon's last.
    func recordTelemetry(_ telemetry: [BeaconTelemetry]) async throws

    // MARK: Attachments

    /// Adds an attachment to the project's beacon. Returns whether the project has the beacon.
    func addAttachment(_ attachment: StoredAttachment, project: String) async throws -> Bool
    /// The attachments of the project's beacon that pass `filter`, in creation order.
    func attachments(of beacon: BeaconID, project: String, filter: AttachmentFilter) async throws -> [StoredAttachment]
    /// Deletes one attachment of the project's beacon. Returns whether it existed.
    func deleteAttachment(id: String, of beacon: BeaconID, project: String) async throws -> Bool
    /// Deletes the attachments of the project's beacon that pass `filter` and returns how many.
    func deleteAttachments(of beacon: BeaconID, project: String, filter: AttachmentFilter) async throws -> Int

    // MARK: Namespaces

    /// The namespaces the project owns, by name.
    func namespaces(project: String) async throws -> [StoredNamespace]
    /// Those of `names` that exist, whichever project owns them.
    func namespaces(named names: Set<String>) async throws -> [StoredNamespace]
    /// Sets the visibility of the project's namespace. Returns whether the project owns it.
    func setServingVisibility(_ visibility: ServingVisibility, namespace: String, project: String) async throws -> Bool
}

/// A registered beacon as stored.
public struct StoredBeacon: Sendable, Equatable {
    public var id: BeaconID
    public var project: String
    public var status: BeaconStatus
    public var description: String?
    public var properties: [String: String]
    public var expectedStability: String?
    public var indoorLevel: String?
    public var latLng: LatLng?
    public var placeId: String?
    public var createdAtMs: UInt64
    public var lastTelemetry: Data?
    public var lastTelemetryAtMs: UInt64?

    public init(id: BeaconID, project: String, status: BeaconStatus, description: String? = nil,
                properties: [String: String] = [:], expectedStability: String? = nil, indoorLevel: String? = nil,
                latLng: LatLng? = nil, placeId: String? = nil, createdAtMs: UInt64, lastTelemetry: Data? = nil,
                lastTelemetryAtMs: UInt64? = nil) {
        self.id = id
        self.project = project
        self.status = status
        self.description = description
        self.properties = properties
        self.expectedStability = expectedStability
        self.indoorLevel = indoorLevel
        self.latLng = latLng
        self.placeId = placeId
        self.createdAtMs = createdAtMs
        self.lastTelemetry = lastTelemetry
        self.lastTelemetryAtMs = lastTelemetryAtMs
    }
}

/// Which beacons a listing keeps: each condition of each list must hold.
public struct BeaconFilter: Sendable, Equatable {
    public var statuses: [BeaconStatus] = []
    public var types: [AdvertisedIdType] = []
    /// Substrings of the description, compared without regard to ASCII case.
    public var descriptions: [String] = []

    public init(statuses: [BeaconStatus] = [], types: [AdvertisedIdType] = [], descriptions: [String] = []) {
        self.statuses = statuses
        self.types = types
        self.descriptions = descriptions
    }
}

/// One page of a listing.
public struct BeaconPage: Sendable, Equatable {
    public var beacons: [StoredBeacon]
    /// How many beacons pass the filter on all pages.
    public var totalCount: Int
    /// Where the next page starts; nil on the last page.
    public var next: Int64?

    public init(beacons: [StoredBeacon], totalCount: Int, next: Int64?) {
        self.beacons = beacons
        self.totalCount = totalCount
        self.next = next
    }
}

/// An active beacon that was observed, with the attachments storage was asked for.
public struct ObservedBeacon: Sendable, Equatable {
    public var beacon: StoredBeacon
    public var attachments: [StoredAttachment]

    public init(beacon: StoredBeacon, attachments: [StoredAttachment]) {
        self.beacon = beacon
        self.attachments = attachments
    }
}

/// A telemetry frame sent with an observation.
public struct BeaconTelemetry: Sendable, Equatable {
    public var beacon: BeaconID
    public var telemetry: Data
    public var observedAtMs: UInt64

    public init(beacon: BeaconID, telemetry: Data, observedAtMs: UInt64) {
        self.beacon = beacon
        self.telemetry = telemetry
        self.observedAtMs = observedAtMs
    }
}

public struct StoredAttachment: Sendable, Equatable {
    public var beacon: BeaconID
    /// Unique within the beacon.
    public var id: String
    public var namespace: String
    public var type: String
    public var data: Data
    public var createdAtMs: UInt64

    public init(beacon: BeaconID, id: String, namespace: String, type: String, data: Data, createdAtMs: UInt64) {
        self.beacon = beacon
        self.id = id
        self.namespace = namespace
        self.type = type
        self.data = data
        self.createdAtMs = createdAtMs
    }
}

/// Which attachments an operation touches: those in `namespaces`, of `type`
/// or of every type when it is nil.
public struct AttachmentFilter: Sendable, Equatable {
    public var namespaces: Set<String>
    public var type: String?

    public init(namespaces: Set<String>, type: String? = nil) {
        self.namespaces = namespaces
        self.type = type
    }
}

public struct StoredNamespace: Sendable, Equatable {
    public var name: String
    public var project: String
    public var servingVisibility: ServingVisibility

    public init(name: String, project: String, servingVisibility: ServingVisibility) {
        self.name = name
        self.project = project
        self.servingVisibility = servingVisibility
    }
}
