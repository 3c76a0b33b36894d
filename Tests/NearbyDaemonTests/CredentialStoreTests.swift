import Foundation
import Logging
import NearbyCore
import ServerAPI
import Testing
@testable import NearbyDaemon

/// The device registrations are durable per-user state: bounded per user and
/// in all, and dropped when unused; one made through any URL of the server's
/// list is used through all of them.
@Suite(.timeLimit(.minutes(1))) struct CredentialStoreTests {
    let directory: URL
    /// Port 9 (discard) has no listener here: a request to it is refused at once.
    let unreachable = ServerClient(baseURL: "http://127.0.0.1:9", timeoutSeconds: 0.2)
    let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
    /// The stores' clock: a registration's age is counted on it.
    let clock = ManualWallClock(nowMs: 1_800_000_000_000)

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("credentials-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    var path: String { directory.appendingPathComponent("registrations.json").path }

    /// A registrations.json with one entry per (key, uid, days since its last use).
    func write(_ entries: [(key: String, uid: UInt32, daysAgo: Double)]) throws {
        let now = Double(clock.nowMs)
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
        let store = CredentialStore(stateDirectory: directory.path, endpoints: ServerEndpoints(clients: [unreachable], logger: logger),
                                    limits: CredentialStore.Limits(perUser: 2, total: 3, retention: .seconds(90 * 86_400)),
                                    refusedKeyRetry: .seconds(600), clock: clock, logger: logger)
        await store.dropStale()
        // "stale" is past the retention; user 1000 keeps its two latest; then the oldest of all go down to three.
        #expect(try kept() == ["fresh", "old", "other-new"])
    }

    /// Retention is counted on the store's clock: a registration last used
    /// 89 days ago is kept, and dropped once two more days have passed.
    @Test func aRegistrationGoesOnceItsRetentionHasPassed() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        try write([("recent", 1000, 89)])
        let store = CredentialStore(stateDirectory: directory.path, endpoints: ServerEndpoints(clients: [unreachable], logger: logger),
                                    limits: CredentialStore.Limits(perUser: 2, total: 3, retention: .seconds(90 * 86_400)),
                                    refusedKeyRetry: .seconds(600), clock: clock, logger: logger)
        await store.dropStale()
        #expect(try kept() == ["recent"])
        clock.advance(bySeconds: 2 * 86_400)
        await store.dropStale()
        #expect(try kept().isEmpty)
    }

    /// A registration kept under the second URL of the list is the account's
    /// through the first too (no request: the first URL answers nothing),
    /// and forgetting it forgets it whichever URL found it refused.
    @Test func aRegistrationMadeThroughOneURLServesThemAll() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let second = ServerClient(baseURL: "http://127.0.0.1:10", timeoutSeconds: 0.2)
        let account = Account(uid: 1000, apiKey: "key")
        let key = CredentialStore.key(server: second.baseURL, account: account)
        let registration = ["device": "d", "secret": "s", "project": "p", "namespace": "n"]
        let entry: [String: Any] = ["registration": registration, "uid": 1000, "server": second.baseURL,
                                    "usedAtMs": clock.nowMs]
        try JSONSerialization.data(withJSONObject: ["version": 2, "entries": [key: entry]]).write(to: URL(fileURLWithPath: path))
        let store = CredentialStore(stateDirectory: directory.path,
                                    endpoints: ServerEndpoints(clients: [unreachable, second], logger: logger),
                                    limits: CredentialStore.Limits(perUser: 2, total: 3, retention: .seconds(90 * 86_400)),
                                    refusedKeyRetry: .seconds(600), clock: clock, logger: logger)
        let found = try await store.registration(account, with: unreachable)
        #expect(found == DeviceRegistration(device: "d", secret: "s", project: "p", namespace: "n"))
        await store.forget(found, account: account)
        #expect(try kept().isEmpty)
    }
}
