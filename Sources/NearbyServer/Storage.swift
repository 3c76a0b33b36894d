import Foundation
import NearbyCore

/// What the server keeps across restarts. One protocol, several engines: SQLite
/// for one machine (``SQLiteStorage``), and PostgreSQL (``PostgresStorage``),
/// which several replicas share. Every method is one transaction. Times are milliseconds
/// since the epoch; credentials arrive already hashed. The beacon registry's
/// part is ``BeaconStorage``, the connection server's ``ConnectionStorage``.
public protocol ServerStorage: BeaconStorage, ConnectionStorage {
    /// Answers once the database has answered one trivial query: whether it
    /// can be reached now (readiness). Throws why not.
    func ping() async throws

    // MARK: Projects

    /// Creates a project with its first API key, its admin key, its server
    /// key and its namespace. Throws ``StorageError/duplicateProject(_:)``.
    func createProject(_ project: ProjectRecord, apiKeyHash: Data, adminKeyHash: Data, serverKeyHash: Data) async throws
    /// Every project, by name, with how many devices it has.
    func projects() async throws -> [ProjectSummary]
    /// Deletes a project with its keys, devices, tokens, publications,
    /// subscriptions, namespace, and beacons with their attachments (its
    /// decommissioned ids stay retired). Returns whether it existed.
    func deleteProject(name: String) async throws -> Bool
    /// The project an API key belongs to.
    func project(apiKeyHash: Data) async throws -> ProjectRecord?
    /// The project an admin key belongs to.
    func project(adminKeyHash: Data) async throws -> ProjectRecord?
    /// The project of that name.
    func project(name: String) async throws -> ProjectRecord?
    /// Makes `adminKeyHash` the project's only admin key. Throws
    /// ``StorageError/projectNotFound(_:)``.
    func replaceAdminKey(project: String, adminKeyHash: Data, createdAtMs: UInt64) async throws
    /// The projects deleted after position `after` of the log of deletions,
    /// and the log's position after them (0 before any). The server asks
    /// every sweep, to notice projects deleted by `nearby-server project
    /// delete`, even when a project of the same name was created again since.
    func projectDeletions(after: Int64) async throws -> ProjectDeletions

    // MARK: Devices

    /// Registers a device unless its project already has `limit` devices:
    /// returns false then. Throws ``StorageError/projectNotFound(_:)``.
    func createDevice(_ device: DeviceRecord, secretHash: Data, limit: Int) async throws -> Bool
    /// The device a secret belongs to.
    func device(secretHash: Data) async throws -> DeviceRecord?
    /// Every device (to rebuild the in-memory state at start).
    func devices() async throws -> [DeviceRecord]
    /// The ids of the devices these projects have now.
    func deviceIDs(projects: Set<String>) async throws -> Set<String>
    /// Deletes a device with its tokens, publications and subscriptions.
    /// Returns whether it existed.
    func deleteDevice(id: String) async throws -> Bool
    /// Records that the device authenticated at `atMs`: its last-seen time.
    func touchDevice(id: String, atMs: UInt64) async throws
    /// A project's devices with when each was created and last seen, by id.
    func deviceActivity(project: String) async throws -> [DeviceActivity]
    /// Up to `limit` devices last seen before `lastSeenBeforeMs`, least recently seen first.
    func staleDevices(lastSeenBeforeMs: UInt64, limit: Int) async throws -> [DeviceRecord]
    /// The devices deleted, by anyone, after position `after` of the log of
    /// device deletions, and the log's position after them (0 before any).
    /// The server asks every sweep, to notice devices removed by `nearby-server
    /// project devices --remove-stale`. The log keeps a day of deletions.
    func deviceDeletions(after: Int64) async throws -> DeviceDeletions
    /// Forgets the ids of devices deleted before `deletedBeforeMs` (by the
    /// database's clock): an application server sending to one is then told
    /// `BAD_REGISTRATION` instead of `DEVICE_UNREGISTERED`. Returns how many.
    func purgeDeletedDevices(deletedBeforeMs: UInt64) async throws -> Int

    // MARK: Tokens

    /// Stores a token unless the same bytes are already stored (returns false).
    /// Throws ``StorageError/deviceNotFound(_:)``.
    func insertToken(_ token: TokenRecord) async throws -> Bool
    /// The stored records of these tokens, expired or not.
    func tokens(_ tokens: [Token]) async throws -> [Token: TokenRecord]
    /// Tokens that expire after `nowMs`.
    func liveTokens(nowMs: UInt64) async throws -> [TokenRecord]
    /// Forgets tokens that expired at or before `expiredBeforeMs`.
    func purgeTokens(expiredBeforeMs: UInt64) async throws

    // MARK: Publications and subscriptions

    /// Applies one device's changes in order, all in one transaction, and
    /// returns what each did. A put of a new id creates it only while the
    /// device has fewer than `limits` of its kind; otherwise it is skipped
    /// (``ChangeOutcome/limitReached``) and the later changes still apply.
    /// Throws ``StorageError/deviceNotFound(_:)``, having applied none.
    func applyChanges(_ changes: [ObjectChange], device: String, limits: ObjectLimits) async throws -> [ChangeOutcome]

    /// One device's publications, by id; or every device's when `device` is nil.
    func publications(device: String?) async throws -> [StoredPublication]
    /// The content of one publication, or nil when the device has none of that id.
    func publicationContent(device: String, id: String) async throws -> Data?
    /// Deletes publications that expire at or before `nowMs`.
    func deleteExpiredPublications(nowMs: UInt64) async throws

    /// One device's subscriptions, by id; or every device's when `device` is nil.
    func subscriptions(device: String?) async throws -> [StoredSubscription]
    /// Deletes subscriptions with an expiry at or before `nowMs` (never those with 0).
    func deleteExpiredSubscriptions(nowMs: UInt64) async throws
}

/// A project: an application's devices, keys and messages. Its namespace is
/// what an empty namespace in a publication or subscription stands for.
public struct ProjectRecord: Sendable, Equatable, Codable {
    public var name: String
    public var namespace: String
    public var createdAtMs: UInt64

    public init(name: String, namespace: String, createdAtMs: UInt64) {
        self.name = name
        self.namespace = namespace
        self.createdAtMs = createdAtMs
    }
}

/// A device as `project devices` shows it.
public struct DeviceActivity: Sendable, Equatable, Codable {
    public var device: String
    public var createdAtMs: UInt64
    /// When it last authenticated (to the hour: the server writes it at most hourly).
    public var lastSeenAtMs: UInt64

    public init(device: String, createdAtMs: UInt64, lastSeenAtMs: UInt64) {
        self.device = device
        self.createdAtMs = createdAtMs
        self.lastSeenAtMs = lastSeenAtMs
    }
}

/// Devices deleted since a position of the log of device deletions.
public struct DeviceDeletions: Sendable, Equatable {
    /// The log's position after these deletions: where the next question starts.
    public var position: Int64
    /// Each deleted device and its project.
    public var devices: [String: String]

    public init(position: Int64, devices: [String: String]) {
        self.position = position
        self.devices = devices
    }
}

/// A project as `project list` shows it.
public struct ProjectSummary: Sendable, Equatable {
    public var project: ProjectRecord
    public var deviceCount: Int

    public init(project: ProjectRecord, deviceCount: Int) {
        self.project = project
        self.deviceCount = deviceCount
    }
}

public struct DeviceRecord: Sendable, Equatable {
    public var id: String
    public var project: String
    /// The project's namespace (read with the device; not stored with it).
    public var namespace: String
    public var createdAtMs: UInt64

    public init(id: String, project: String, namespace: String, createdAtMs: UInt64) {
        self.id = id
        self.project = project
        self.namespace = namespace
        self.createdAtMs = createdAtMs
    }
}

public struct TokenRecord: Sendable, Equatable {
    public var token: Token
    public var device: String
    public var issuedAtMs: UInt64
    public var expiresAtMs: UInt64

    public init(token: Token, device: String, issuedAtMs: UInt64, expiresAtMs: UInt64) {
        self.token = token
        self.device = device
        self.issuedAtMs = issuedAtMs
        self.expiresAtMs = expiresAtMs
    }
}

/// A publication as stored: namespace already resolved, mediums sorted.
public struct StoredPublication: Sendable, Equatable, Codable {
    public var device: String
    public var id: String
    public var namespace: String
    public var type: String
    public var content: Data
    public var mediums: [Medium]
    public var mode: DiscoveryMode
    public var expiresAtMs: UInt64
    public var distance: DistanceType

    public init(device: String, id: String, namespace: String, type: String, content: Data, mediums: [Medium],
                mode: DiscoveryMode, expiresAtMs: UInt64, distance: DistanceType = .default) {
        self.device = device
        self.id = id
        self.namespace = namespace
        self.type = type
        self.content = content
        self.mediums = mediums
        self.mode = mode
        self.expiresAtMs = expiresAtMs
        self.distance = distance
    }
}

/// A subscription as stored: namespace resolved, mediums sorted, expiry 0 for never.
public struct StoredSubscription: Sendable, Equatable, Codable {
    public var device: String
    public var id: String
    public var namespace: String
    public var type: String
    public var mediums: [Medium]
    public var mode: DiscoveryMode
    public var expiresAtMs: UInt64
    public var distance: DistanceType

    public init(device: String, id: String, namespace: String, type: String, mediums: [Medium], mode: DiscoveryMode,
                expiresAtMs: UInt64, distance: DistanceType = .default) {
        self.device = device
        self.id = id
        self.namespace = namespace
        self.type = type
        self.mediums = mediums
        self.mode = mode
        self.expiresAtMs = expiresAtMs
        self.distance = distance
    }
}

/// Projects deleted since a position of the log of deletions.
public struct ProjectDeletions: Sendable, Equatable {
    /// The log's position after these deletions: where the next question starts.
    public var position: Int64
    public var projects: Set<String>

    public init(position: Int64, projects: Set<String>) {
        self.position = position
        self.projects = projects
    }
}

/// A validated change to one of a device's publications or subscriptions.
public enum ObjectChange: Sendable, Equatable, Codable {
    case putPublication(StoredPublication)
    case deletePublication(id: String)
    case putSubscription(StoredSubscription)
    case deleteSubscription(id: String)
}

/// How many publications and subscriptions a device may hold.
public struct ObjectLimits: Sendable, Equatable {
    public var publications: Int
    public var subscriptions: Int

    public init(publications: Int, subscriptions: Int) {
        self.publications = publications
        self.subscriptions = subscriptions
    }
}

/// What one ``ObjectChange`` did.
public enum ChangeOutcome: Sendable, Equatable {
    case created
    case replaced
    /// It would be new, and the device is at its limit: nothing changed.
    case limitReached
    case deleted
    /// A delete of an id the device does not have: nothing changed.
    case absent
}

/// Failures a caller can act on; anything else is the engine's own error.
public enum StorageError: Error, Equatable, CustomStringConvertible {
    case duplicateProject(String)
    case projectNotFound(String)
    case deviceNotFound(String)
    /// A beacon of that name is registered (by any project).
    case beaconRegistered(String)
    /// The beacon of that name was decommissioned: its id is retired for good.
    case beaconRetired(String)

    public var description: String {
        switch self {
        case .duplicateProject(let name): "a project named '\(name)' already exists"
        case .projectNotFound(let name): "no project named '\(name)'"
        case .deviceNotFound(let id): "no device '\(id)'"
        case .beaconRegistered(let name): "beacon '\(name)' is already registered"
        case .beaconRetired(let name): "beacon '\(name)' was decommissioned; its id can never be registered again"
        }
    }
}
