import Logging
import WSClient

/// The URLs of nearby-server (`[server] url`: replicas of one service on one
/// database, so a device registration made through one is good on all) and
/// the one nearbyd uses now. Every connection to the server (the REST calls
/// and the stream of each link, the direct channels, beacon lookups) takes
/// ``current`` and reports how it went, so they all share one choice.
///
/// The choice is sticky, as systemd-resolved's current DNS server is: the
/// current URL stays until a connection to it fails as a server fails
/// (``isServerFailure(_:)``), then the next one in the list is current, and
/// after the last the first again. A URL that failed is thus tried again
/// when its turn comes round, after the ones behind it. Nothing moves back to
/// the first URL while another works: the replicas are equals.
///
/// Replicas divide the devices among themselves, and one that does not serve
/// a device answers its requests with `307` to the replica that does
/// (``ServerCallError/moved(_:)``). That replica is the device's home, kept
/// here, and its requests and sockets go there directly until a connection
/// there fails as a server fails, when they go back to the list's URL, which
/// sends them on again.
actor ServerEndpoints {
    /// How many times in a row one request follows a replica's `307`: the
    /// owner of a device changes only when replicas come and go, so more is a
    /// loop between replicas whose views of the owners differ for a moment.
    static let maxMoves = 3

    /// One URL of the list, and where it stands in it.
    struct Endpoint: Sendable {
        let index: Int
        let client: ServerClient
    }

    /// The clients of the URLs, in the order configured.
    nonisolated let clients: [ServerClient]
    private var currentIndex = 0
    /// Why a connection to each URL last failed; nil since one succeeded, or
    /// before any was tried.
    private var failures: [String?]
    /// Where each device is served (by device id), for devices a replica sent elsewhere.
    private var homes: [String: ServerClient] = [:]
    private let logger: Logger

    /// `clients` must not be empty: the configuration has at least one URL.
    init(clients: [ServerClient], logger: Logger) {
        precondition(!clients.isEmpty, "nearby-server needs at least one URL")
        self.clients = clients
        failures = Array(repeating: nil, count: clients.count)
        self.logger = logger
    }

    /// The base URLs, in the order configured.
    nonisolated var urls: [String] { clients.map(\.baseURL) }

    /// The URL to connect to now.
    var current: Endpoint { Endpoint(index: currentIndex, client: clients[currentIndex]) }

    /// A connection to `endpoint` was made: it no longer counts as failed.
    func succeeded(_ endpoint: Endpoint) {
        failures[endpoint.index] = nil
    }

    /// A connection to `endpoint` ended with `error`. When that is the server
    /// failing and `endpoint` is still the current one, the next URL is
    /// current from now on; a failure of a URL another connection has already
    /// moved away from moves nothing further. An answer that refuses the
    /// request (a 4xx) says nothing against the URL and is not recorded.
    func failed(_ endpoint: Endpoint, _ error: any Error) {
        guard Self.isServerFailure(error) else { return }
        let reason = Self.reason(error)
        failures[endpoint.index] = reason
        guard endpoint.index == currentIndex, clients.count > 1 else { return }
        currentIndex = (currentIndex + 1) % clients.count
        logger.warning("nearby-server at \(endpoint.client.baseURL) failed (\(reason)); moving to \(clients[currentIndex].baseURL)")
    }

    /// The client for `device`'s requests and sockets on `endpoint`: its
    /// home, if a replica named one, else the endpoint's own.
    func client(for device: String, on endpoint: Endpoint) -> ServerClient {
        homes[device] ?? endpoint.client
    }

    /// `device`'s home, if a replica named one.
    func homeClient(for device: String) -> ServerClient? {
        homes[device]
    }

    /// A replica sent `device` to the one at `base` (a `307`): its requests
    /// go there from now on. Returns the client there.
    @discardableResult
    func moved(_ device: String, to base: String, from client: ServerClient) -> ServerClient {
        let home = client.at(base)
        if homes[device]?.baseURL != base {
            logger.info("nearby-server serves device \(device) at \(base)")
        }
        homes[device] = home
        return home
    }

    /// A connection to `device`'s home failed as a server fails: its
    /// requests go to the list's URL again, which sends them on to the
    /// replica that serves the device now. Says whether it had a home.
    @discardableResult
    func homeFailed(_ device: String) -> Bool {
        homes.removeValue(forKey: device) != nil
    }

    /// The URLs whose last connection failed, each with why, in the list's
    /// order: `URL: WHY; URL: WHY`. What the daemon says when none works.
    var failureSummary: String {
        zip(clients, failures).compactMap { client, failure in failure.map { "\(client.baseURL): \($0)" } }
            .joined(separator: "; ")
    }

    /// Runs one request on the current URL; when the server fails it, on the
    /// next, each URL at most once. Throws the last failure when none answered,
    /// or at once an answer that refuses the request.
    /// A replica's `307` is followed, up to ``maxMoves`` times.
    func request<Result: Sendable>(_ call: @Sendable (ServerClient) async throws -> Result) async throws -> Result {
        var tried: Set<Int> = []
        while true {
            let endpoint = current
            tried.insert(endpoint.index)
            do {
                var client = endpoint.client
                var moves = 0
                while true {
                    do {
                        let result = try await call(client)
                        succeeded(endpoint)
                        return result
                    } catch ServerCallError.moved(let base) where moves < Self.maxMoves {
                        moves += 1
                        client = client.at(base)
                    }
                }
            } catch {
                failed(endpoint, error)
                if tried.contains(currentIndex) || Task.isCancelled { throw error }
            }
        }
    }

    /// Whether `error` says the server at a URL failed (it could not be
    /// reached, the connection broke or timed out, TLS failed, it answered
    /// 5xx or nonsense, it closed a socket), so another URL may do better;
    /// false for an answer refusing the request, which any replica would give
    /// alike (a refused API key or credential, a malformed request), and for
    /// cancellation.
    nonisolated static func isServerFailure(_ error: any Error) -> Bool {
        switch error {
        case is CancellationError:
            false
        case ServerCallError.rejected(let status, _):
            status >= 500
        case ServerCallError.unauthenticated, ServerCallError.keyRefused, ServerCallError.moved:
            false
        case let error as WebSocketClientError where error == .webSocketUpgradeFailed:
            // DeviceSocket asked the server why with a REST call, which answered: the refusal is the request's.
            false
        default:
            true
        }
    }

    /// A failure in the words of `nearbyctl status`.
    nonisolated static func reason(_ error: any Error) -> String {
        if case ServerCallError.unreachable(let message) = error { return message }
        return "\(error)"
    }
}
