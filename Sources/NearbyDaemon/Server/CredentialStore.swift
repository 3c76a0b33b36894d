import Crypto
import Foundation
import Logging
import NearbyCore
import ServerAPI

/// The device registrations nearbyd holds with nearby-server, one per user
/// and API key (``Account``), kept in the state directory so a restarted
/// daemon is the same device. Entries are keyed by a hash of server URL, uid
/// and API key; the file is readable by its owner only, as it holds device
/// secrets.
///
/// The link and the direct channel of an account both need its registration
/// and may ask at the same moment: the store registers once for both.
actor CredentialStore {
    private let path: String
    private var entries: [String: DeviceRegistration]
    /// Registrations on their way, by entry key: later callers wait for them.
    private var registering: [String: Task<DeviceRegistration, any Error>] = [:]
    /// API keys the server refused lately, with its reason and when it may be
    /// asked again: until then registering fails at once, so a program that
    /// makes up keys costs the server one request per key per `refusedKeyRetry`.
    private var refusedKeys: [String: (message: String, until: ContinuousClock.Instant)] = [:]
    private let refusedKeyRetry: Duration

    init(stateDirectory: String, refusedKeyRetry: Duration) {
        self.refusedKeyRetry = refusedKeyRetry
        path = stateDirectory + "/registrations.json"
        let data = FileManager.default.contents(atPath: path) ?? Data()
        entries = (try? JSONDecoder().decode([String: DeviceRegistration].self, from: data)) ?? [:]
    }

    func registration(server: String, account: Account) -> DeviceRegistration? {
        entries[Self.key(server: server, account: account)]
    }

    func store(_ registration: DeviceRegistration?, server: String, account: Account) throws {
        entries[Self.key(server: server, account: account)] = registration
        let data = try JSONEncoder().encode(entries)
        try StateFile.replace(path, with: data)
    }

    /// The device registration of `account` with `client`'s server: the one
    /// stored, or one made now (and stored). Callers asking while a
    /// registration is on its way share it.
    func registration(_ account: Account, with client: ServerClient, logger: Logger) async throws -> DeviceRegistration {
        let key = Self.key(server: client.baseURL, account: account)
        if let stored = entries[key] { return stored }
        if let refused = refusedKeys[account.apiKey], refused.until > .now { throw ServerCallError.keyRefused(refused.message) }
        if let running = registering[key] { return try await running.value }
        let task = Task { () async throws -> DeviceRegistration in
            do {
                return try await client.register(apiKey: account.apiKey)
            } catch ServerCallError.unauthenticated(let message) {
                throw ServerCallError.keyRefused(message)
            }
        }
        registering[key] = task
        defer { registering[key] = nil }
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
        do {
            try store(registration, server: client.baseURL, account: account)
        } catch {
            logger.error("cannot save the device registration: \(error)")
        }
        logger.info("registered as a device", metadata: ["device": "\(registration.device)", "project": "\(registration.project)",
                                                         "uid": "\(account.uid)"])
        return registration
    }

    /// The server refused `registration`: forgotten, so the next caller
    /// registers afresh, unless another caller has replaced it already (the
    /// link and the channel may both find the same credential refused).
    func forget(_ registration: DeviceRegistration, server: String, account: Account) {
        guard entries[Self.key(server: server, account: account)] == registration else { return }
        try? store(nil, server: server, account: account)
    }

    private static func key(server: String, account: Account) -> String {
        SHA256.hash(data: Data("\(server)\n\(account.uid)\n\(account.apiKey)".utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
