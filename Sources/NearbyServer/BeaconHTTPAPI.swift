import Foundation
import Hummingbird
import ServerAPI

/// The HTTP face of ``BeaconRegistry``, Google's Proximity Beacon API paths
/// under /v1beta1: authenticates (the admin key, or the API key for
/// `beaconinfo:getforobserved`), decodes, calls the registry, encodes.
extension HTTPAPI {
    func addBeaconRoutes(to router: Router<APIRequestContext>) {
        let registry = BeaconRegistry(storage: service.storage, clock: service.clock, limits: service.configuration.limits)
        @Sendable func admin(_ request: Request) async throws -> ProjectRecord {
            try await registry.project(adminAuthorization: request.headers[.authorization])
        }

        router.post("/v1beta1/beacons:register") { request, _ in
            let caller = try await admin(request)
            return try Self.json(try await registry.register(try await decode(Beacon.self, from: request), by: caller))
        }
        router.get("/v1beta1/beacons") { request, _ in
            let caller = try await admin(request)
            let query = request.uri.queryParameters
            return try Self.json(try await registry.list(query: query["q"].map(String.init), pageSize: try Self.pageSize(request),
                                                         pageToken: query["pageToken"].map(String.init), by: caller))
        }
        router.get("/v1beta1/beacons/:beacon") { request, context in
            let caller = try await admin(request)
            return try Self.json(try await registry.beacon(named: try Self.beaconName(context), by: caller))
        }
        router.put("/v1beta1/beacons/:beacon") { request, context in
            let caller = try await admin(request)
            let update = try await decode(Beacon.self, from: request)
            return try Self.json(try await registry.update(named: try Self.beaconName(context), with: update, by: caller))
        }
        router.delete("/v1beta1/beacons/:beacon") { request, context in
            let caller = try await admin(request)
            try await registry.delete(named: try Self.beaconName(context), by: caller)
            return try Self.json(EmptyResponse())
        }
        // `beacons/{beacon}:activate` and the like: the verb is part of the
        // beacon's path segment, so it is split off here.
        router.post("/v1beta1/beacons/:beacon") { request, context in
            let caller = try await admin(request)
            let segment = try Self.beaconName(context)
            guard let colon = segment.lastIndex(of: ":"),
                  let action = BeaconAction(rawValue: String(segment[segment.index(after: colon)...])) else {
                throw APIError(.notFound, "no route for POST \(request.uri.path); a beacon takes :activate, :deactivate or :decommission")
            }
            return try Self.json(try await registry.perform(action, on: String(segment[..<colon]), by: caller))
        }

        router.post("/v1beta1/beacons/:beacon/attachments") { request, context in
            let caller = try await admin(request)
            let attachment = try await decode(BeaconAttachment.self, from: request)
            return try Self.json(try await registry.addAttachment(attachment, to: try Self.beaconName(context), by: caller))
        }
        router.get("/v1beta1/beacons/:beacon/attachments") { request, context in
            let caller = try await admin(request)
            return try Self.json(try await registry.attachments(of: try Self.beaconName(context),
                                                                namespacedType: Self.namespacedType(request), by: caller))
        }
        router.delete("/v1beta1/beacons/:beacon/attachments/:attachment") { request, context in
            let caller = try await admin(request)
            try await registry.deleteAttachment(id: try Self.parameter("attachment", context), of: try Self.beaconName(context),
                                                by: caller)
            return try Self.json(EmptyResponse())
        }
        router.post("/v1beta1/beacons/:beacon/attachments:batchDelete") { request, context in
            let caller = try await admin(request)
            return try Self.json(try await registry.deleteAttachments(of: try Self.beaconName(context),
                                                                      namespacedType: Self.namespacedType(request), by: caller))
        }

        router.get("/v1beta1/namespaces") { request, _ in
            let caller = try await admin(request)
            return try Self.json(try await registry.namespaces(of: caller))
        }
        router.put("/v1beta1/namespaces/:namespace") { request, context in
            let caller = try await admin(request)
            let update = try await decode(BeaconNamespace.self, from: request)
            let name = "namespaces/\(try Self.parameter("namespace", context))"
            return try Self.json(try await registry.update(namespace: name, with: update, by: caller))
        }

        // The API key in its header, or in `?key=` as Google's API takes it.
        router.post("/v1beta1/beaconinfo:getforobserved") { request, _ in
            let key = request.headers[Self.apiKeyField] ?? request.uri.queryParameters["key"].map(String.init)
            let caller = try await registry.project(apiKey: key)
            let observed = try await decode(GetForObservedRequest.self, from: request)
            return try Self.json(try await registry.getForObserved(observed, by: caller))
        }
    }

    /// `beacons/` and the path's beacon segment, percent-decoded (`!` may come as `%21`).
    private static func beaconName(_ context: APIRequestContext) throws -> String {
        let segment = try parameter("beacon", context)
        return "beacons/\(segment.removingPercentEncoding ?? segment)"
    }

    private static func pageSize(_ request: Request) throws -> Int? {
        guard let text = request.uri.queryParameters["pageSize"], !text.isEmpty else { return nil }
        guard let size = Int(text) else { throw APIError(.invalidArgument, "pageSize '\(text)' is not a whole number") }
        return size
    }

    private static func namespacedType(_ request: Request) -> String? {
        request.uri.queryParameters["namespacedType"].map(String.init)
    }
}

/// Google's `Empty`: what deletes answer.
private struct EmptyResponse: Encodable {}
