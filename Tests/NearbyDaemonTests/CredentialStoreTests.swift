import Foundation
import Logging
import NearbyCore
import ServerAPI
import Testing
@testable import NearbyDaemon

/// The device registrations are durable per-user state: bounded per user and
/// in all, and dropped when unused.
@Suite struct CredentialStoreTests {
    let directory: URL
    let unreachable = ServerClient(baseURL: "http://127.0.0.1:9", timeoutSeconds: 0.2)

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("credentials-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    var path: String { directory.appendingPathComponent("registrations.json").path }

    /// A registrations.json with one entry per (key, uid, days since its last use).
    func write(_ entries: [(key: String, uid: UInt32, daysAgo: Double)]) throws {
        let now = Date().timeIntervalSince1970 * 1000
        var objects: [String: Any] = [:]
        for entry in entries {
            objects[entry.key] = [
                "registration": ["device": "d-\(entry.key)", "secret": "s", "project": "p", "namespace": "n"],
                "uid": entry.uid, "server": unreachable.baseURL, "usedAtMs": UInt64(now - entry.daysAgo * 86_400_000),
            ] as [String: Any]
        }
        let data = try JSONSerialization.data(withJSONObject: ["version": 2, "entries": objects])
        try data.write(to: URL(fileURLWithPath: path))
    }

    func kept() throws -> Set<String> {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        return Set((object["entries"] as? [String: Any] ?? [:]).keys)
    }

    @Test func unusedRegistrationsGoAndEachUserKeepsItsShare() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        try write([
            ("fresh", 1000, 1), ("stale", 1000, 100), ("old", 1000, 30), ("older", 1000, 40),
            ("other", 2000, 50), ("other-new", 2000, 2),
        ])
        let store = CredentialStore(stateDirectory: directory.path,
                                    limits: CredentialStore.Limits(perUser: 2, total: 3, retention: .seconds(90 * 86_400)),
                                    refusedKeyRetry: .seconds(600), logger: Logger(label: "test"))
        await store.dropStale(client: unreachable)
        // "stale" is past the retention; user 1000 keeps its two latest; then the oldest of all go down to three.
        #expect(try kept() == ["fresh", "old", "other-new"])
    }
}
