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
        try Self.replace(path, with: data)
    }

    /// Writes `data` to a fresh file that is the owner's alone from its creation
    /// (secrets are never readable by others, whatever the umask or the
    /// directory), makes it durable, then renames it over `path`: a crash leaves
    /// the old file or the new one.
    private static func replace(_ path: String, with data: Data) throws {
        let temporary = path + ".tmp"
        unlink(temporary)
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        let written = data.withUnsafeBytes { bytes in write(fd, bytes.baseAddress, bytes.count) }
        let synced = fsync(fd)
        close(fd)
        guard written == data.count, synced == 0, rename(temporary, path) == 0 else {
            let code = POSIXErrorCode(rawValue: errno) ?? .EIO
            unlink(temporary)
            throw POSIXError(code)
        }
    }

    private static func key(server: String, apiKey: String) -> String {
        SHA256.hash(data: Data("\(server)\n\(apiKey)".utf8)).map { String(format: "%02x", $0) }.joined()
    }
}
