import Crypto
import Foundation
import Logging
import NearbyCore
import ServerAPI

/// The device registrations nearbyd holds with nearby-server, one per user
/// and API key (``Account``), kept in the state directory so a restarted
/// daemon is the same device. Entries are keyed by a hash of server URL, uid
/// and API key, the URL being the one of `[server] url` the registration
/// was made through; it is used through every URL of the list (the replicas
/// share one database), so a list that gains, loses or reorders URLs keeps
/// the registrations made through those it still has. The file is readable
/// by its owner only, as it holds device secrets.
///
/// The file is durable per-user state, so it is bounded and expires: a
/// registration not used for ``Limits/retention`` goes, and so does a
/// user's least recently used one beyond ``Limits/perUser`` (and anyone's
/// beyond ``Limits/total``); the server is told to forget what goes. A
/// registration in use is touched when its link or channel connects.
///
/// The link and the direct channel of an account both need its registration
/// and may ask at the same moment: the store registers once for both.
actor CredentialStore {
    /// How many registrations the store keeps, and for how long unused.
    struct Limits: Sendable {
        var perUser: Int
        var total: Int
        var retention: Duration
    }

    private struct Entry: Codable {
        var registration: DeviceRegistration
        var uid: UInt32
        var server: String
        /// When a link or channel last took it, milliseconds since the epoch.
        var usedAtMs: UInt64
    }

    private struct File: Codable {
        var version = 2
        var entries: [String: Entry]
    }

    private let path: String
    /// The server's URLs; the server is told of the registrations dropped.
    private let endpoints: ServerEndpoints
    private let limits: Limits
    private let logger: Logger
    private var entries: [String: Entry] = [:]
    /// Registrations on their way, by ``Account``: later callers wait for
    /// them, whichever URL they would register through.
    private var registering: [Account: Task<DeviceRegistration, any Error>] = [:]
    /// API keys the server refused lately, with its reason and when it may be
    /// asked again: until then registering fails at once, so a program that
    /// makes up keys costs the server one request per key per `refusedKeyRetry`.
    private var refusedKeys: [String: (message: String, until: ContinuousClock.Instant)] = [:]
    private let refusedKeyRetry: Duration
    /// When a registration was last used, and which are stale.
    private let clock: any WallClock
    /// A use is written down only this long after the last one written: a
    /// reconnecting link should not cost a write each time.
    private static let touchInterval: UInt64 = 3_600_000

    init(stateDirectory: String, endpoints: ServerEndpoints, limits: Limits, refusedKeyRetry: Duration, clock: any WallClock,
         logger: Logger) {
        self.clock = clock
        self.endpoints = endpoints
        self.limits = limits
        self.refusedKeyRetry = refusedKeyRetry
        self.logger = logger
        path = stateDirectory + "/registrations.json"
        guard let data = FileManager.default.contents(atPath: path) else { return }
        if let file = try? JSONDecoder().decode(File.self, from: data) {
            entries = file.entries
        } else if (try? JSONDecoder().decode([String: DeviceRegistration].self, from: data)) != nil {
            // Registrations from before users had their own (one per API key): nobody's now.
            logger.notice("device registrations from before per-user registrations are dropped", metadata: ["file": "\(path)"])
        } else {
            logger.error("cannot read the device registrations; starting with none", metadata: ["file": "\(path)"])
        }
    }

    /// The device registration of `account` with the server: the one stored
    /// (made through any of its URLs), or one made now through `client` (and
    /// stored). Callers asking while a registration is on its way share it.
    func registration(_ account: Account, with client: ServerClient) async throws -> DeviceRegistration {
        if let (key, stored) = stored(account) {
            touch(key, stored)
            return stored.registration
        }
        if let refused = refusedKeys[account.apiKey], refused.until > .now { throw ServerCallError.keyRefused(refused.message) }
        if let running = registering[account] { return try await running.value }
        let task = Task { () async throws -> DeviceRegistration in
            do {
                return try await client.register(apiKey: account.apiKey)
            } catch ServerCallError.unauthenticated(let message) {
                throw ServerCallError.keyRefused(message)
            }
        }
        registering[account] = task
        defer { registering[account] = nil }
        let registration: DeviceRegistration
        do {
            registration = try await task.value
        } catch ServerCallError.keyRefused(let message) {
            let now = ContinuousClock.now
            refusedKeys = refusedKeys.filter { $0.value.until > now }
            refusedKeys[account.apiKey] = (message, now + refusedKeyRetry)
            logger.warning("nearby-server refuses an API key (\(message)); asking again in \(refusedKeyRetry)",
                           metadata: ["account": "\(account)"])
            throw ServerCallError.keyRefused(message)
        }
        let key = Self.key(server: client.baseURL, account: account)
        entries[key] = Entry(registration: registration, uid: account.uid, server: client.baseURL, usedAtMs: clock.nowMs)
        dropStale(keeping: key)
        save()
        logger.info("registered as a device", metadata: ["device": "\(registration.device)", "project": "\(registration.project)",
                                                         "uid": "\(account.uid)"])
        return registration
    }

    /// The server refused `registration`: forgotten, so the next caller
    /// registers afresh, unless another caller has replaced it already (the
    /// link and the channel may both find the same credential refused).
    func forget(_ registration: DeviceRegistration, account: Account) {
        guard let (key, stored) = stored(account), stored.registration == registration else { return }
        entries[key] = nil
        save()
    }

    /// The entry of `account` made through one of the server's URLs, the
    /// first in the list's order should there be several.
    private func stored(_ account: Account) -> (key: String, entry: Entry)? {
        for server in endpoints.urls {
            let key = Self.key(server: server, account: account)
            if let entry = entries[key] { return (key, entry) }
        }
        return nil
    }

    /// Drops what has not been used within the retention, and each user's
    /// and everyone's least recently used beyond their bounds; `kept` (just
    /// made) stays. The server is asked to forget the devices among them
    /// that were registered through one of its URLs, without waiting for it.
    func dropStale(keeping kept: String? = nil) {
        let now = clock.nowMs
        let cutoff = now - min(now, UInt64(limits.retention / .milliseconds(1)))
        var dropped = entries.filter { $0.key != kept && $0.value.usedAtMs < cutoff }
        for key in dropped.keys { entries[key] = nil }
        let byAge = entries.sorted { $0.value.usedAtMs < $1.value.usedAtMs }
        var perUser = Dictionary(grouping: entries.values, by: \.uid).mapValues(\.count)
        var total = entries.count
        for (key, entry) in byAge where key != kept && (perUser[entry.uid, default: 0] > limits.perUser || total > limits.total) {
            entries[key] = nil
            dropped[key] = entry
            perUser[entry.uid, default: 0] -= 1
            total -= 1
        }
        guard !dropped.isEmpty else { return }
        logger.info("device registrations dropped (unused, or over the bounds)", metadata: ["count": "\(dropped.count)"])
        save()
        let servers = Set(endpoints.urls)
        let forsaken = dropped.values.filter { servers.contains($0.server) }.map(\.registration)
        Task.detached { [endpoints] in
            for registration in forsaken {
                _ = try? await endpoints.request { client in try await client.unregister(registration) }
            }
        }
    }

    /// Notes that a registration was taken now, on disk at most once an interval.
    private func touch(_ key: String, _ entry: Entry) {
        let now = clock.nowMs
        guard now >= entry.usedAtMs + Self.touchInterval else { return }
        entries[key]?.usedAtMs = now
        save()
    }

    private func save() {
        do {
            try StateFile.replace(path, with: JSONEncoder().encode(File(entries: entries)))
        } catch {
            logger.error("cannot save the device registrations: \(error)", metadata: ["file": "\(path)"])
        }
    }

    static func key(server: String, account: Account) -> String {
        SHA256.hash(data: Data("\(server)\n\(account.uid)\n\(account.apiKey)".utf8)).map { String(format: "%02x", $0) }.joined()
    }

}
