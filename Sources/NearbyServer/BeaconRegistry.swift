import Foundation
import NearbyCore
import ServerAPI

/// The beacon registry's logic, free of HTTP: a project's beacons, their
/// attachments and its namespaces, in the shape of Google's Proximity Beacon
/// API. Every method acts for `caller`, a project that proved itself with its
/// admin key (or, for ``getForObserved(_:by:)``, its API key); another
/// project's beacon is answered as one that does not exist. Client mistakes
/// throw ``APIError``.
public struct BeaconRegistry: Sendable {
    let storage: any ServerStorage
    let clock: any WallClock
    let limits: ServerConfiguration.Limits

    public init(storage: any ServerStorage, clock: any WallClock = SystemWallClock(),
                limits: ServerConfiguration.Limits = ServerConfiguration.Limits()) {
        self.storage = storage
        self.clock = clock
        self.limits = limits
    }

    /// Listings without a `pageSize` get pages of this many.
    public static let defaultPageSize = 100
    public static let maxPageSize = 1000

    // MARK: Callers

    /// The project whose admin key `authorization` (`Bearer KEY`) carries.
    /// Read from storage every time, so a key replaced by the CLI stops at once.
    public func project(adminAuthorization authorization: String?) async throws -> ProjectRecord {
        try await CallerCredentials.project(adminAuthorization: authorization, storage: storage)
    }

    /// The project whose API key this is.
    public func project(apiKey: String?) async throws -> ProjectRecord {
        try await CallerCredentials.project(apiKey: apiKey, storage: storage)
    }

    // MARK: Beacons

    /// `POST /v1beta1/beacons:register`. An id registered by any project is
    /// `already_exists`, as is one ever decommissioned.
    public func register(_ request: Beacon, by caller: ProjectRecord) async throws -> Beacon {
        guard let advertised = request.advertisedId else {
            throw APIError(.invalidArgument, "missing field 'advertisedId' in the Beacon")
        }
        let status = request.status ?? .active
        guard status != .decommissioned else {
            throw APIError(.invalidArgument, "status DECOMMISSIONED cannot be registered; it is ACTIVE (the default) or INACTIVE")
        }
        var beacon = StoredBeacon(id: try BeaconID(advertised, field: "advertisedId"), project: caller.name, status: status,
                                  createdAtMs: clock.nowMs)
        try BeaconValidation.describe(&beacon, with: request)
        do {
            try await storage.registerBeacon(beacon)
        } catch let error as StorageError {
            switch error {
            case .beaconRegistered, .beaconRetired: throw APIError(.alreadyExists, error.description)
            case .projectNotFound: throw APIError(.unauthenticated, "project '\(caller.name)' no longer exists")
            default: throw error
            }
        }
        return Self.json(beacon)
    }

    /// `GET /v1beta1/beacons/{beacon}`.
    public func beacon(named name: String, by caller: ProjectRecord) async throws -> Beacon {
        Self.json(try await ownBeacon(name, caller))
    }

    /// `GET /v1beta1/beacons`: one page of the caller's beacons that pass
    /// `query` (see ``BeaconQuery``), in the order they were registered.
    public func list(query: String?, pageSize: Int?, pageToken: String?, by caller: ProjectRecord) async throws -> ListBeaconsResponse {
        let filter = try BeaconQuery.filter(query ?? "", maxTerms: limits.maxQueryTerms)
        let size = pageSize ?? Self.defaultPageSize
        guard (1...Self.maxPageSize).contains(size) else {
            throw APIError(.invalidArgument, "pageSize is \(size); it must be between 1 and \(Self.maxPageSize)")
        }
        var after: Int64 = 0
        if let pageToken, !pageToken.isEmpty {
            guard let position = Int64(pageToken), position > 0 else {
                throw APIError(.invalidArgument, "pageToken '\(pageToken)' is not a token this server gave")
            }
            after = position
        }
        let page = try await storage.beacons(project: caller.name, filter: filter, after: after, limit: size)
        return ListBeaconsResponse(beacons: page.beacons.map(Self.json), nextPageToken: page.next.map(String.init),
                                   totalCount: String(page.totalCount))
    }

    /// `PUT /v1beta1/beacons/{beacon}`: replaces the description, properties,
    /// stability and place; what the request lacks is cleared. `status` is
    /// ignored (it has its own calls); `advertisedId` and `beaconName`, when
    /// given, must be the beacon's own.
    public func update(named name: String, with request: Beacon, by caller: ProjectRecord) async throws -> Beacon {
        var beacon = try await ownBeacon(name, caller)
        if let requested = request.beaconName, (try? BeaconID(name: requested)) != beacon.id {
            throw APIError(.invalidArgument, "beaconName '\(requested)' is not the beacon of the path, '\(beacon.id.name)'")
        }
        if let advertised = request.advertisedId, try BeaconID(advertised, field: "advertisedId") != beacon.id {
            throw APIError(.invalidArgument, "advertisedId cannot be changed; register the new id as another beacon")
        }
        try Self.requireNotDecommissioned(beacon, "updated")
        try BeaconValidation.describe(&beacon, with: request)
        // False also when it was decommissioned meanwhile: storage keeps it as it is then.
        guard try await storage.updateBeacon(beacon) else { throw Self.notFound(beacon.id, caller) }
        return Self.json(beacon)
    }

    /// `POST /v1beta1/beacons/{beacon}:activate`, `:deactivate` or
    /// `:decommission`. Asking for the status it has changes nothing; a
    /// decommissioned beacon stays so.
    public func perform(_ action: BeaconAction, on name: String, by caller: ProjectRecord) async throws -> Beacon {
        var beacon = try await ownBeacon(name, caller)
        let status: BeaconStatus = switch action {
        case .activate: .active
        case .deactivate: .inactive
        case .decommission: .decommissioned
        }
        if status != .decommissioned { try Self.requireNotDecommissioned(beacon, "\(action.rawValue)d") }
        guard try await storage.setBeaconStatus(beacon.id, project: caller.name, status: status, atMs: clock.nowMs) else {
            throw Self.notFound(beacon.id, caller)
        }
        beacon.status = status
        return Self.json(beacon)
    }

    /// `DELETE /v1beta1/beacons/{beacon}`: the beacon and its attachments. A
    /// decommissioned id stays retired.
    public func delete(named name: String, by caller: ProjectRecord) async throws {
        let id = try BeaconID(name: name)
        guard try await storage.deleteBeacon(id, project: caller.name) else { throw Self.notFound(id, caller) }
    }

    // MARK: Attachments

    /// `POST /v1beta1/beacons/{beacon}/attachments`, in a namespace the caller owns.
    public func addAttachment(_ request: BeaconAttachment, to beaconName: String,
                              by caller: ProjectRecord) async throws -> BeaconAttachment {
        let beacon = try await ownBeacon(beaconName, caller)
        let (namespace, type) = try NamespacedType.exact(request.namespacedType, field: "namespacedType")
        try BeaconValidation.attachmentData(request.data)
        try await requireOwned(namespace, caller)
        try Self.requireNotDecommissioned(beacon, "given attachments")
        let attachment = StoredAttachment(beacon: beacon.id, id: Hex.encode(Credentials.randomBytes(16)), namespace: namespace,
                                          type: type, data: request.data, createdAtMs: clock.nowMs)
        guard try await storage.addAttachment(attachment, project: caller.name) else { throw Self.notFound(beacon.id, caller) }
        return Self.json(attachment)
    }

    /// `GET /v1beta1/beacons/{beacon}/attachments`: those of `namespacedType`
    /// (see ``attachmentFilter(_:_:)``), in the order they were created.
    public func attachments(of beaconName: String, namespacedType: String?,
                            by caller: ProjectRecord) async throws -> ListBeaconAttachmentsResponse {
        let beacon = try await ownBeacon(beaconName, caller)
        let filter = try await attachmentFilter(namespacedType, caller)
        let stored = try await storage.attachments(of: beacon.id, project: caller.name, filter: filter)
        return ListBeaconAttachmentsResponse(attachments: stored.map(Self.json))
    }

    /// `DELETE /v1beta1/beacons/{beacon}/attachments/{id}`.
    public func deleteAttachment(id: String, of beaconName: String, by caller: ProjectRecord) async throws {
        let beacon = try BeaconID(name: beaconName)
        guard try await storage.deleteAttachment(id: id, of: beacon, project: caller.name) else {
            throw APIError(.notFound, "project '\(caller.name)' has no attachment '\(beacon.name)/attachments/\(id)'")
        }
    }

    /// `POST /v1beta1/beacons/{beacon}/attachments:batchDelete`: those of
    /// `namespacedType`, as for listing.
    public func deleteAttachments(of beaconName: String, namespacedType: String?,
                                  by caller: ProjectRecord) async throws -> DeleteAttachmentsResponse {
        let beacon = try await ownBeacon(beaconName, caller)
        let filter = try await attachmentFilter(namespacedType, caller)
        return DeleteAttachmentsResponse(numDeleted: try await storage.deleteAttachments(of: beacon.id, project: caller.name,
                                                                                         filter: filter))
    }

    /// Absent: the caller's namespace, every type. Otherwise a pattern (see
    /// ``NamespacedType/pattern(_:field:)``) whose namespace the caller owns.
    private func attachmentFilter(_ text: String?, _ caller: ProjectRecord) async throws -> AttachmentFilter {
        guard let text else { return AttachmentFilter(namespaces: [caller.namespace]) }
        let pattern = try NamespacedType.pattern(text, field: "namespacedType")
        guard let namespace = pattern.namespace else {
            return AttachmentFilter(namespaces: try await ownedNamespaces(caller), type: pattern.type)
        }
        try await requireOwned(namespace, caller)
        return AttachmentFilter(namespaces: [namespace], type: pattern.type)
    }

    // MARK: Namespaces

    /// `GET /v1beta1/namespaces`: the caller's.
    public func namespaces(of caller: ProjectRecord) async throws -> ListNamespacesResponse {
        ListNamespacesResponse(namespaces: try await storage.namespaces(project: caller.name).map(Self.json))
    }

    /// `PUT /v1beta1/namespaces/{namespace}`: sets `servingVisibility` of
    /// `name` (`namespaces/NAME`), a namespace the caller owns.
    public func update(namespace name: String, with request: BeaconNamespace,
                       by caller: ProjectRecord) async throws -> BeaconNamespace {
        guard name.hasPrefix("namespaces/") else {
            throw APIError(.invalidArgument, "namespace name '\(name)' is not namespaces/NAME")
        }
        if let requested = request.namespaceName, requested != name {
            throw APIError(.invalidArgument, "namespaceName '\(requested)' is not the namespace of the path, '\(name)'")
        }
        let namespace = String(name.dropFirst("namespaces/".count))
        guard try await storage.setServingVisibility(request.servingVisibility, namespace: namespace, project: caller.name) else {
            throw APIError(.notFound, "project '\(caller.name)' has no namespace '\(name)'")
        }
        return Self.json(StoredNamespace(name: namespace, project: caller.name, servingVisibility: request.servingVisibility))
    }

    /// The namespaces the caller owns: today one, its name (``ProjectRecord/namespace``).
    func ownedNamespaces(_ caller: ProjectRecord) async throws -> Set<String> {
        Set(try await storage.namespaces(project: caller.name).map(\.name))
    }

    private func requireOwned(_ namespace: String, _ caller: ProjectRecord) async throws {
        guard try await ownedNamespaces(caller).contains(namespace) else {
            throw APIError(.permissionDenied, "project '\(caller.name)' does not own namespace '\(namespace)'")
        }
    }

    // MARK: Helpers

    /// The caller's beacon of that name; another project's is not found.
    private func ownBeacon(_ name: String, _ caller: ProjectRecord) async throws -> StoredBeacon {
        let id = try BeaconID(name: name)
        guard let beacon = try await storage.beacon(id), beacon.project == caller.name else {
            throw Self.notFound(id, caller)
        }
        return beacon
    }

    private static func notFound(_ id: BeaconID, _ caller: ProjectRecord) -> APIError {
        APIError(.notFound, "project '\(caller.name)' has no beacon '\(id.name)'")
    }

    private static func requireNotDecommissioned(_ beacon: StoredBeacon, _ what: String) throws(APIError) {
        guard beacon.status != .decommissioned else {
            throw APIError(.invalidArgument, "beacon '\(beacon.id.name)' is decommissioned; it cannot be \(what)")
        }
    }

    static func json(_ beacon: StoredBeacon) -> Beacon {
        Beacon(beaconName: beacon.id.name, advertisedId: beacon.id.advertisedId, status: beacon.status,
               description: beacon.description, properties: beacon.properties, expectedStability: beacon.expectedStability,
               indoorLevel: beacon.indoorLevel.map(IndoorLevel.init(name:)), latLng: beacon.latLng, placeId: beacon.placeId,
               lastTelemetry: beacon.lastTelemetry, lastTelemetryTimeMs: beacon.lastTelemetryAtMs.map { String($0) })
    }

    static func json(_ attachment: StoredAttachment) -> BeaconAttachment {
        BeaconAttachment(attachmentName: "\(attachment.beacon.name)/attachments/\(attachment.id)",
                         namespacedType: "\(attachment.namespace)/\(attachment.type)", data: attachment.data,
                         creationTimeMs: String(attachment.createdAtMs))
    }

    static func json(_ namespace: StoredNamespace) -> BeaconNamespace {
        BeaconNamespace(namespaceName: "namespaces/\(namespace.name)", servingVisibility: namespace.servingVisibility)
    }
}
