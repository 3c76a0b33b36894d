import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NearbyCore
import ServerAPI

/// The HTTP face of ``NearbyService`` (and of ``BeaconRegistry``, in
/// BeaconHTTPAPI.swift): decodes, authenticates, calls the service, encodes.
/// Every path and shape is ServerAPI's; every failure leaves as an
/// ``APIError`` body.
struct HTTPAPI: Sendable {
    let service: NearbyService
    /// The connections, which know whose each is when a load balancer said
    /// so; nil where requests come without them (the contract tests).
    var connections: ConnectionRegistry? = nil

    /// Whose request this is: the client a load balancer's PROXY protocol
    /// header named, or the connection's peer.
    private func clientAddress(_ context: APIRequestContext) -> ClientAddress {
        connections?.address(of: context.channel) ?? ClientAddress(context.remoteAddress)
    }

    private var maxBodyBytes: Int { service.configuration.limits.maxBodyBytes }

    /// A router with every route of the API behind the error middleware.
    func makeRouter() -> Router<APIRequestContext> {
        let router = Router(context: APIRequestContext.self)
        router.add(middleware: APIErrorMiddleware(logger: service.logger))
        if let directory = service.partitions?.directory {
            router.add(middleware: DeviceHomeMiddleware(directory: directory))
        }

        router.get("/v1/health") { _, _ in
            try Self.json(["status": "ok"])
        }
        router.get("/v1/ready") { _, _ in
            try await service.checkReady()
            return try Self.json(["status": "ready"])
        }
        router.post("/v1/devices") { request, context in
            let registration = try await service.registerDevice(apiKey: request.headers[Self.apiKeyField],
                                                                from: clientAddress(context))
            return try Self.json(registration, status: .created)
        }
        router.delete("/v1/devices/:device") { request, context in
            try await service.unregister(try await authenticate(request, context))
            return Response(status: .noContent)
        }
        router.post("/v1/devices/:device/tokens") { request, context in
            let device = try await authenticate(request, context)
            return try Self.json(try await service.issueToken(for: device), status: .created)
        }

        router.get("/v1/devices/:device/publications") { request, context in
            try Self.json(try await service.publications(of: try await authenticate(request, context)))
        }
        router.put("/v1/devices/:device/publications/:id") { request, context in
            let device = try await authenticate(request, context)
            let spec = try await decode(PublicationSpec.self, from: request)
            return try Self.json(try await service.putPublication(spec, id: try Self.parameter("id", context), for: device))
        }
        router.delete("/v1/devices/:device/publications/:id") { request, context in
            let device = try await authenticate(request, context)
            try await service.deletePublication(id: try Self.parameter("id", context), of: device)
            return Response(status: .noContent)
        }

        router.get("/v1/devices/:device/subscriptions") { request, context in
            try Self.json(try await service.subscriptions(of: try await authenticate(request, context)))
        }
        router.put("/v1/devices/:device/subscriptions/:id") { request, context in
            let device = try await authenticate(request, context)
            let spec = try await decode(SubscriptionSpec.self, from: request)
            return try Self.json(try await service.putSubscription(spec, id: try Self.parameter("id", context), for: device))
        }
        router.delete("/v1/devices/:device/subscriptions/:id") { request, context in
            let device = try await authenticate(request, context)
            try await service.deleteSubscription(id: try Self.parameter("id", context), of: device)
            return Response(status: .noContent)
        }

        router.post("/v1/devices/:device/changes") { request, context in
            let device = try await authenticate(request, context)
            let batch = try await decode(ChangeBatch.self, from: request)
            return try Self.json(try await service.applyChanges(batch, for: device))
        }

        router.post("/v1/devices/:device/sightings") { request, context in
            let device = try await authenticate(request, context)
            let report = try await decode(SightingReport.self, from: request)
            return try Self.json(try await service.reportSightings(report, from: device))
        }
        // A socket request reaches the router only when it was not upgraded:
        // say why (credentials first, as for every device path).
        for socket in ["stream", "channel"] {
            router.get("/v1/devices/:device/\(socket)") { request, context -> Response in
                _ = try await authenticate(request, context)
                throw APIError(.invalidArgument, "this path takes a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)")
            }
        }
        addBeaconRoutes(to: router)
        return router
    }

    private func authenticate(_ request: Request, _ context: APIRequestContext) async throws -> DeviceRecord {
        try await service.authenticate(device: try Self.parameter("device", context),
                                       authorization: request.headers[.authorization])
    }

    /// Reads the whole body, up to the configured limit, and decodes it,
    /// naming the field at fault when it does not fit `T`.
    func decode<T: Decodable>(_ type: T.Type, from request: Request) async throws -> T {
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: maxBodyBytes)
        } catch let error as any HTTPResponseError where error.status == .contentTooLarge {
            throw APIError(.payloadTooLarge, "the request body is larger than \(maxBodyBytes) bytes ([limits] max-body-bytes)")
        }
        return try Self.decodeBody(T.self, from: Data(buffer.readableBytesView))
    }

    /// Decodes a whole request body, naming the field at fault when it does not fit `T`.
    static func decodeBody<T: Decodable>(_ type: T.Type, from body: Data) throws -> T {
        guard !body.isEmpty else {
            throw APIError(.invalidArgument, "the request body is empty; expected a JSON \(T.self)")
        }
        do {
            return try JSONDecoder().decode(T.self, from: body)
        } catch let error as DecodingError {
            throw APIError(.invalidArgument, Self.describe(error, expecting: "\(T.self)", body: body))
        }
    }

    static let apiKeyField = HTTPField.Name(ServerAPI.apiKeyHeader)!

    static func parameter(_ name: String, _ context: APIRequestContext) throws -> String {
        guard let value = context.parameters.get(name) else {
            throw APIError(.internalError, "route parameter '\(name)' is missing")
        }
        return value
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        let data = try encoder.encode(value)
        return Response(status: status, headers: [.contentType: "application/json"],
                        body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// One sentence about what in the body was wrong, with its JSON path.
    static func describe(_ error: DecodingError, expecting type: String, body: Data) -> String {
        func path(_ codingPath: [any CodingKey], _ last: (any CodingKey)? = nil) -> String {
            let keys = codingPath + (last.map { [$0] } ?? [])
            guard !keys.isEmpty else { return "the body" }
            var text = ""
            for key in keys {
                if let index = key.intValue { text += "[\(index)]" } else { text += text.isEmpty ? key.stringValue : ".\(key.stringValue)" }
            }
            return "'\(text)'"
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "missing field \(path(context.codingPath, key)) in the \(type)"
        case .valueNotFound(_, let context):
            return "\(path(context.codingPath)) must not be null"
        case .typeMismatch(let expected, let context):
            return "\(path(context.codingPath)) has the wrong type; expected \(Self.jsonType(expected))"
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty {
                return numberOutOfRange(in: body) ?? "the body is not valid JSON for a \(type)"
            }
            return "\(path(context.codingPath)) is invalid: \(Self.reason(context.debugDescription))"
        @unknown default:
            return "the body is not a valid \(type)"
        }
    }

    /// Foundation reports a number that does not fit its field (negative,
    /// fractional, too large) as "not valid JSON" without saying where: find it.
    private static func numberOutOfRange(in body: Data) -> String? {
        guard let root = try? JSONSerialization.jsonObject(with: body) else { return nil }
        func walk(_ value: Any, _ path: String) -> String? {
            if let object = value as? [String: Any] {
                for key in object.keys.sorted() {
                    let childPath = path.isEmpty ? key : "\(path).\(key)"
                    if let number = object[key] as? NSNumber, integerFields.contains(key) {
                        let double = number.doubleValue
                        let unsigned = key != "rssi"
                        if double != double.rounded() || (unsigned && (double < 0 || double >= 0x1p64))
                            || (!unsigned && abs(double) >= 0x1p63) {
                            return "'\(childPath)' must be a whole number\(unsigned ? " from 0 to \(UInt64.max)" : "")"
                        }
                    } else if let problem = walk(object[key]!, childPath) {
                        return problem
                    }
                }
            } else if let array = value as? [Any] {
                for (index, element) in array.enumerated() {
                    if let problem = walk(element, "\(path)[\(index)]") { return problem }
                }
            }
            return nil
        }
        return walk(root, "")
    }

    /// The integer fields of the API's request bodies.
    private static let integerFields: Set<String> = ["expiresAtMs", "seenAtMs", "rssi"]

    private static func jsonType(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type, is UInt64.Type, is Int64.Type: "an integer"
        case is Double.Type: "a number"
        case is [Any].Type: "an array"
        default: "an object"
        }
    }

    /// Foundation's wording for bad enum cases and base64 is for programmers; say it for API users.
    private static func reason(_ description: String) -> String {
        if description.contains("Medium") { return "a medium is one of: \(Medium.allCases.map(\.rawValue).joined(separator: ", "))" }
        if description.contains("DiscoveryMode") {
            return "a mode is one of: \(DiscoveryMode.allCases.map(\.rawValue).joined(separator: ", "))"
        }
        let enums: [(String, [String])] = [
            ("AdvertisedIdType", AdvertisedIdType.allCases.map(\.rawValue)),
            ("BeaconStatus", BeaconStatus.allCases.map(\.rawValue)),
            ("ServingVisibility", ServingVisibility.allCases.map(\.rawValue)),
        ]
        if let match = enums.first(where: { description.contains($0.0) }) {
            return "expected one of: \(match.1.joined(separator: ", "))"
        }
        if description.lowercased().contains("base64") { return "expected base64 text" }
        return description
    }
}

/// An ``APIError`` that goes away by itself: the same request succeeds
/// after `afterSeconds` (its `Retry-After`).
struct RetryLater: Error {
    let error: APIError
    let afterSeconds: Int
}

/// Turns every error into an ``APIError`` response with its status, so no
/// request ends without a named error, and logs what is the server's fault.
struct APIErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as RetryLater {
            var response = Self.response(error.error, for: request)
            response.headers[.retryAfter] = String(error.afterSeconds)
            return response
        } catch let error as APIError {
            if error.error == .internalError {
                logger.error("request failed", metadata: ["path": "\(request.uri.path)", "error": "\(error.message)"])
            }
            return Self.response(error, for: request)
        } catch let error as any HTTPResponseError {
            switch error.status {
            case .notFound, .methodNotAllowed:
                return Self.response(APIError(.notFound, "no route for \(request.method) \(request.uri.path)"))
            case .contentTooLarge:
                return Self.response(APIError(.payloadTooLarge, "the request body is too large"))
            case let status where (400..<500).contains(status.code):
                return Self.response(APIError(.invalidArgument, "the request is invalid (\(status))"))
            default:
                logger.error("request failed", metadata: ["path": "\(request.uri.path)", "error": "\(error)"])
                return Self.response(APIError(.internalError, "internal server error"))
            }
        } catch {
            logger.error("request failed", metadata: ["path": "\(request.uri.path)", "error": "\(error)"])
            return Self.response(APIError(.internalError, "internal server error"))
        }
    }

    static func response(_ error: APIError, for request: Request? = nil) -> Response {
        var response = (try? HTTPAPI.json(error, status: status(of: error.error)))
            ?? Response(status: .internalServerError)
        // Device and registry paths take bearer secrets; the API key paths take a header instead.
        if error.error == .unauthenticated, let request,
           ![APIPath.devices, BeaconAPIPath.getForObserved].contains(request.uri.path) {
            response.headers[.wwwAuthenticate] = "Bearer"
        }
        return response
    }

    /// The HTTP status each code travels with.
    static func status(of code: APIError.Code) -> HTTPResponse.Status {
        switch code {
        case .invalidArgument: .badRequest
        case .unauthenticated: .unauthorized
        case .permissionDenied: .forbidden
        case .notFound: .notFound
        case .alreadyExists: .conflict
        case .limitExceeded, .rateLimited: .tooManyRequests
        case .payloadTooLarge: .contentTooLarge
        case .uriTooLong: .uriTooLong
        case .headersTooLarge: .requestHeaderFieldsTooLarge
        case .requestTimeout: .requestTimeout
        case .tooManyConnections, .unavailable: .serviceUnavailable
        case .moved: .temporaryRedirect
        case .internalError: .internalServerError
        }
    }
}
