import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import NIOSSL
import ServerAPI

/// Why a call to nearby-server failed.
enum ServerCallError: Error, CustomStringConvertible {
    /// The device credential (or API key) was refused: register again.
    case unauthenticated(String)
    /// The server understood and refused the request.
    case rejected(status: Int, APIError)
    /// The server could not be reached or answered nonsense.
    case unreachable(String)
    /// The server refused the API key lately; it is not asked again until
    /// `[server] refused-key-retry` has passed.
    case keyRefused(String)
    /// Another replica serves the device (`307`): its base URL, where this
    /// request and the device's next ones go (``ServerEndpoints``).
    case moved(String)

    var description: String {
        switch self {
        case .unauthenticated(let message): "credential refused: \(message)"
        case .rejected(let status, let error): "HTTP \(status): \(error)"
        case .unreachable(let message): "server unreachable: \(message)"
        case .keyRefused(let message): "the server refuses the API key: \(message)"
        case .moved(let url): "the device is served at \(url)"
        }
    }
}

/// The REST calls nearbyd makes to nearby-server (doc/server-api/openapi.yaml).
struct ServerClient: Sendable {
    /// The HTTP client of every call: AsyncHTTPClient's shared settings, but
    /// a connection that cannot be made fails its request at once, where the
    /// shared client would try again until the request's deadline. A dead
    /// replica then costs a moment before the next URL is tried, and the
    /// daemon's own backoff paces the retries. Lives as long as the process,
    /// so it is never shut down. Redirects are not followed: a `307` names
    /// the replica that serves the device, which ``ServerEndpoints`` keeps.
    private static let http: HTTPClient = {
        var configuration = HTTPClient.Configuration.singletonConfiguration
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.redirectConfiguration = .disallow
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration,
                          backgroundActivityLogger: Logger(label: "nearbyd.http") { _ in SwiftLogNoOpLogHandler() })
    }()

    let baseURL: String
    let timeout: TimeAmount
    /// How an `https://` server's certificate is checked (``ServerTLS``); nil for `http://`.
    let tls: TLSConfiguration?
    /// `[server] ca-file`, for words about a certificate it does not vouch for.
    let caFile: String?

    init(baseURL: String, timeoutSeconds: Double, tls: TLSConfiguration? = nil, caFile: String? = nil) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        timeout = .milliseconds(Int64(timeoutSeconds * 1000))
        self.tls = tls
        self.caFile = caFile
    }

    /// This client's settings for another replica of the service, at `baseURL`.
    func at(_ baseURL: String) -> ServerClient {
        ServerClient(baseURL: baseURL, timeout: timeout, tls: tls, caFile: caFile)
    }

    private init(baseURL: String, timeout: TimeAmount, tls: TLSConfiguration?, caFile: String?) {
        self.baseURL = baseURL
        self.timeout = timeout
        self.tls = tls
        self.caFile = caFile
    }

    /// The URL of a WebSocket of the API (the stream, the direct channel):
    /// the same server, over ws:// or wss://.
    func webSocketURL(_ path: String) -> String {
        let url = baseURL + path
        if url.hasPrefix("https://") { return "wss://" + url.dropFirst("https://".count) }
        return "ws://" + url.dropFirst("http://".count)
    }

    func register(apiKey: String) async throws(ServerCallError) -> DeviceRegistration {
        try await call(.POST, APIPath.devices, headers: [(apiKeyHeader, apiKey)])
    }

    func issueToken(_ device: DeviceRegistration) async throws(ServerCallError) -> IssuedToken {
        try await call(.POST, APIPath.tokens(device.device), device: device)
    }

    func apply(_ batch: ChangeBatch, _ device: DeviceRegistration) async throws(ServerCallError) -> ChangeResults {
        try await call(.POST, APIPath.changes(device.device), device: device, body: batch)
    }

    func publications(_ device: DeviceRegistration) async throws(ServerCallError) -> [PublicationRecord] {
        let list: PublicationList = try await call(.GET, APIPath.publications(device.device), device: device)
        return list.publications
    }

    func subscriptions(_ device: DeviceRegistration) async throws(ServerCallError) -> [SubscriptionRecord] {
        let list: SubscriptionList = try await call(.GET, APIPath.subscriptions(device.device), device: device)
        return list.subscriptions
    }

    func report(_ report: SightingReport, _ device: DeviceRegistration) async throws(ServerCallError) -> SightingResults {
        try await call(.POST, APIPath.sightings(device.device), device: device, body: report)
    }

    /// `DELETE /v1/devices/{device}`: the server forgets the device and all it had.
    func unregister(_ device: DeviceRegistration) async throws(ServerCallError) {
        _ = try await perform(.DELETE, APIPath.device(device.device), device: device)
    }

    func call<Response: Decodable>(
        _ method: HTTPMethod, _ path: String, device: DeviceRegistration? = nil,
        headers: [(String, String)] = [], body: (any Encodable)? = nil
    ) async throws(ServerCallError) -> Response {
        let data = try await perform(method, path, device: device, headers: headers, body: body)
        do {
            return try JSONDecoder().decode(Response.self, from: data)
        } catch {
            throw .unreachable("\(method) \(path): malformed answer: \(error)")
        }
    }

    /// Makes a request and returns the body of a successful answer.
    private func perform(
        _ method: HTTPMethod, _ path: String, device: DeviceRegistration? = nil,
        headers: [(String, String)] = [], body: (any Encodable)? = nil
    ) async throws(ServerCallError) -> Data {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        request.tlsConfiguration = tls
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let device { request.headers.add(name: "Authorization", value: "Bearer \(device.secret)") }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            do {
                request.body = .bytes(ByteBuffer(data: try JSONEncoder().encode(body)))
            } catch {
                throw .unreachable("cannot encode the request: \(error)")
            }
        }
        let status: Int
        let data: Data
        let location: String?
        do {
            let response = try await Self.http.execute(request, timeout: timeout)
            status = Int(response.status.code)
            location = response.headers.first(name: "Location")
            data = Data(buffer: try await response.body.collect(upTo: 64 << 20))
        } catch {
            throw .unreachable("\(method) \(path): \(ServerTLS.explain(error, caFile: caFile) ?? NetworkErrors.explain(error) ?? "\(error)")")
        }
        if status == 307 || status == 308 {
            guard let location, let home = Self.origin(of: location, like: baseURL) else {
                throw .unreachable("\(method) \(path): redirected to '\(location ?? "")', not a server of the same scheme")
            }
            throw .moved(home)
        }
        guard (200..<300).contains(status) else {
            let error = (try? JSONDecoder().decode(APIError.self, from: data))
                ?? APIError(.internalError, String(decoding: data.prefix(200), as: UTF8.self))
            if status == 401 { throw .unauthenticated(error.message) }
            throw .rejected(status: status, error)
        }
        return data
    }

    /// The scheme, host and port of `location`, when it is an absolute URL of
    /// `baseURL`'s scheme: a replica may send a device to another replica, not
    /// from TLS to plain HTTP.
    static func origin(of location: String, like baseURL: String) -> String? {
        guard let url = URLComponents(string: location), let scheme = url.scheme, let host = url.host, !host.isEmpty,
              baseURL.hasPrefix(scheme + "://") else { return nil }
        let bracketed = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        return "\(scheme)://\(bracketed)" + (url.port.map { ":\($0)" } ?? "")
    }
}
