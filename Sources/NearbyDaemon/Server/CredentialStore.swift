import Crypto
import Foundation
import Logging
import ServerAPI

/// The device registrations nearbyd holds with nearby-server, one per API key,
/// kept in the state directory so a restarted daemon is the same device.
/// Entries are keyed by a hash of server URL and API key; the file is readable
/// by its owner only, as it holds device secrets.
///
/// The link and the direct channel of an API key both need its registration
/// and may ask at the same moment: the store registers once for both.
actor CredentialStore {
    private let path: String
    private var entries: [String: DeviceRegistration]
    /// Registrations on their way, by entry key: later callers wait for them.
    private var registering: [String: Task<DeviceRegistration, any Error>] = [:]

    init(stateDirectory: String) {
        path = stateDirectory + "/registrations.json"
        let data = FileManager.default.contents(atPath: path) ?? Data()
        entries = (try? JSONDecoder().decode([String: DeviceRegistration].self, from: data)) ?? [:]
    }

    func registration(server: String, apiKey: String) -> DeviceRegistration? {
        entries[Self.key(server: server, apiKey: apiKey)]
    }

    func store(_ registration: DeviceRegistration?, server: String, apiKey: String) throws {
        entries[Self.key(server: server, apiKey: apiKey)] = registration
        let data = try JSONEncoder().encode(entries)
        try StateFile.replace(path, with: data)
    }

    /// The device registration for `apiKey` with `client`'s server: the one
    /// stored, or one made now (and stored). Callers asking while a
    /// registration is on its way share it.
    func registration(apiKey: String, with client: ServerClient, logger: Logger) async throws -> DeviceRegistration {
        let key = Self.key(server: client.baseURL, apiKey: apiKey)
        if let stored = entries[key] { return stored }
        if let running = registering[key] { return try await running.value }
        let task = Task { () async throws -> DeviceRegistration in try await client.register(apiKey: apiKey) }
        registering[key] = task
        defer { registering[key] = nil }
        let registration = try await task.value
        do {
            try store(registration, server: client.baseURL, apiKey: apiKey)
        } catch {
            logger.error("cannot save the device registration: \(error)")
        }
        logger.info("registered as a device", metadata: ["device": "\(registration.device)", "project": "\(registration.project)"])
        return registration
    }

    /// The server refused `registration`: forgotten, so the next caller
    /// registers afresh, unless another caller has replaced it already (the
    /// link and the channel may both find the same credential refused).
    func forget(_ registration: DeviceRegistration, server: String, apiKey: String) {
        guard entries[Self.key(server: server, apiKey: apiKey)] == registration else { return }
        try? store(nil, server: server, apiKey: apiKey)
    }

    private static func key(server: String, apiKey: String) -> String {
        SHA256.hash(data: Data("\(server)\n\(apiKey)".utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
