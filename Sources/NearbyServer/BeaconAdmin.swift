import Foundation
import NearbyCore
import ServerAPI

/// The operator's view of the beacon registry: what `nearby-server beacon
/// ...` and `namespace ...` do, each as the project named, through the same
/// ``BeaconRegistry`` as the HTTP API. Inputs are as typed on a command line;
/// a refusal is a ``BeaconAdminError`` with the registry's message.
public struct BeaconAdmin: Sendable {
    private let storage: any ServerStorage
    private let registry: BeaconRegistry

    public init(storage: any ServerStorage, clock: any WallClock = SystemWallClock()) {
        self.storage = storage
        registry = BeaconRegistry(storage: storage, clock: clock)
    }

    /// `hex` is the id; dashes are skipped (a UUID's).
    public func register(project: String, type: AdvertisedIdType, hex: String, description: String?,
                         inactive: Bool) async throws -> Beacon {
        guard let bytes = Hex.decode(hex.replacingOccurrences(of: "-", with: "")) else {
            throw BeaconAdminError("--id '\(hex)' is not hexadecimal")
        }
        let request = Beacon(advertisedId: AdvertisedIdJSON(type: type, id: Data(bytes)), status: inactive ? .inactive : .active,
                             description: description)
        return try await run(project) { try await registry.register(request, by: $0) }
    }

    /// Every beacon of the project that passes `query` (as the API's `q`).
    public func list(project: String, query: String?) async throws -> [Beacon] {
        try await run(project) { caller in
            var beacons: [Beacon] = []
            var token: String?
            repeat {
                let page = try await registry.list(query: query, pageSize: BeaconRegistry.maxPageSize, pageToken: token, by: caller)
                beacons += page.beacons
                token = page.nextPageToken
            } while token != nil
            return beacons
        }
    }

    /// `beacon` is `beacons/N!HEX` or `N!HEX`.
    public func beacon(project: String, beacon: String) async throws -> Beacon {
        try await run(project) { try await registry.beacon(named: Self.name(beacon), by: $0) }
    }

    public func perform(_ action: BeaconAction, project: String, beacon: String) async throws -> Beacon {
        try await run(project) { try await registry.perform(action, on: Self.name(beacon), by: $0) }
    }

    public func delete(project: String, beacon: String) async throws {
        try await run(project) { try await registry.delete(named: Self.name(beacon), by: $0) }
    }

    /// Attaches `data` as `type` in `namespace` (nil: the project's).
    public func addAttachment(project: String, beacon: String, namespace: String?, type: String,
                              data: Data) async throws -> BeaconAttachment {
        try await run(project) { caller in
            let request = BeaconAttachment(namespacedType: "\(namespace ?? caller.namespace)/\(type)", data: data)
            return try await registry.addAttachment(request, to: Self.name(beacon), by: caller)
        }
    }

    /// `namespacedType` as the API's (nil: the project's namespace, every type).
    public func attachments(project: String, beacon: String, namespacedType: String?) async throws -> [BeaconAttachment] {
        try await run(project) {
            try await registry.attachments(of: Self.name(beacon), namespacedType: namespacedType, by: $0).attachments
        }
    }

    public func deleteAttachment(project: String, beacon: String, id: String) async throws {
        try await run(project) { try await registry.deleteAttachment(id: id, of: Self.name(beacon), by: $0) }
    }

    public func namespaces(project: String) async throws -> [BeaconNamespace] {
        try await run(project) { try await registry.namespaces(of: $0).namespaces }
    }

    /// `namespace` is `NAME` or `namespaces/NAME`.
    public func setVisibility(project: String, namespace: String, visibility: ServingVisibility) async throws -> BeaconNamespace {
        let name = namespace.hasPrefix("namespaces/") ? namespace : "namespaces/\(namespace)"
        return try await run(project) {
            try await registry.update(namespace: name, with: BeaconNamespace(servingVisibility: visibility), by: $0)
        }
    }

    private static func name(_ beacon: String) -> String {
        beacon.hasPrefix("beacons/") ? beacon : "beacons/\(beacon)"
    }

    /// Runs `body` as the project named; the registry's refusals become ``BeaconAdminError``.
    private func run<T>(_ project: String, _ body: (ProjectRecord) async throws -> T) async throws -> T {
        guard let caller = try await storage.project(name: project) else { throw StorageError.projectNotFound(project) }
        do {
            return try await body(caller)
        } catch let error as APIError {
            throw BeaconAdminError(error.message)
        }
    }
}

/// What the registry refused, in its words.
public struct BeaconAdminError: Error, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
