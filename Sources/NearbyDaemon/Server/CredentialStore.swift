import Crypto
import Foundation
import ServerAPI

/// The device registrations nearbyd holds with nearby-server, one per API key,
/// kept in the state directory so a restarted daemon is the same device.
/// Entries are keyed by a hash of server URL and API key; the file is readable
/// by its owner only, as it holds device secrets.
actor CredentialStore {
    private let path: String
    private var entries: [String: DeviceRegistration]

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
        let temporary = path + ".tmp"
        guard FileManager.default.createFile(atPath: temporary, contents: data, attributes: [.posixPermissions: 0o600]) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: temporary])
        }
        // rename(2) replaces the file atomically: a crash leaves the old or the new one.
        guard rename(temporary, path) == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
    }

    private static func key(server: String, apiKey: String) -> String {
        SHA256.hash(data: Data("\(server)\n\(apiKey)".utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
