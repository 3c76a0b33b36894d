import Foundation
import NearbyCore
@testable import NearbyServer
import ServerAPI
import TestSupport
import Testing

/// The storage engines the storage suite runs against, each test on each.
enum Engine: String, CaseIterable, CustomTestStringConvertible {
    case sqlite, postgres

    var testDescription: String { rawValue }
}

/// The storage suite: every method of ``ServerStorage`` through the protocol
/// only, on each ``Engine``, so that the engines cannot drift. Its suites are
/// nested here, so that they share one PostgreSQL cluster.
@Suite(.postgresCluster) struct StorageTests {}

/// Runs `body` on an empty storage of `engine`: a new SQLite file, or a new
/// database in the suite's PostgreSQL cluster. Removed or closed after.
func withStorage(_ engine: Engine, _ body: (any ServerStorage) async throws -> Void) async throws {
    switch engine {
    case .sqlite:
        try await withTemporaryDirectory { directory in
            try await body(try SQLiteStorage(path: directory.appendingPathComponent("nearby.sqlite").path))
        }
    case .postgres:
        let cluster = try #require(PostgresClusterTrait.current, "the suite has no PostgreSQL cluster: mark it .postgresCluster")
        let storage = try await PostgresStorage(url: try await cluster.createDatabase())
        do {
            try await body(storage)
        } catch {
            await storage.close()
            throw error
        }
        await storage.close()
    }
}

/// Runs `body` on `count` storages of one new database of `engine`, opened
/// at once, as several server processes (and the CLI) open one database.
func withStorages(_ engine: Engine, count: Int, _ body: ([any ServerStorage]) async throws -> Void) async throws {
    switch engine {
    case .sqlite:
        try await withTemporaryDirectory { directory in
            let path = directory.appendingPathComponent("nearby.sqlite").path
            try await body(try (0..<count).map { _ in try SQLiteStorage(path: path) })
        }
    case .postgres:
        let cluster = try #require(PostgresClusterTrait.current, "the suite has no PostgreSQL cluster: mark it .postgresCluster")
        let url = try await cluster.createDatabase()
        // Opened at once: their migrations take turns.
        let storages = try await withThrowingTaskGroup(of: PostgresStorage.self) { group in
            for _ in 0..<count { group.addTask { try await PostgresStorage(url: url) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        do {
            try await body(storages)
        } catch {
            for storage in storages { await storage.close() }
            throw error
        }
        for storage in storages { await storage.close() }
    }
}

/// A throwaway PostgreSQL cluster (``PostgresCluster``) around a suite and
/// everything in it: started before its first test, stopped after its last,
/// however they end.
struct PostgresClusterTrait: SuiteTrait, TestScoping {
    @TaskLocal static var current: PostgresCluster?

    var isRecursive: Bool { false }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        let cluster = try await PostgresCluster.start()
        do {
            try await Self.$current.withValue(cluster) { try await function() }
        } catch {
            await cluster.stop()
            throw error
        }
        await cluster.stop()
    }
}

extension Trait where Self == PostgresClusterTrait {
    /// The suite's tests can open a PostgreSQL storage (``withStorage(_:_:)``).
    static var postgresCluster: Self { Self() }
}

// MARK: Fixtures

/// A stand-in for a credential's hash: the storage compares bytes only.
func hash(_ text: String) -> Data { Data(text.utf8) }

func project(_ name: String, at createdAtMs: UInt64 = startMs) -> ProjectRecord {
    ProjectRecord(name: name, namespace: "\(name)-ns", createdAtMs: createdAtMs)
}

/// Creates the project `name` with keys named after it.
@discardableResult
func createProject(_ storage: any ServerStorage, _ name: String, at createdAtMs: UInt64 = startMs) async throws -> ProjectRecord {
    let record = project(name, at: createdAtMs)
    try await storage.createProject(record, apiKeyHash: hash("api-\(name)"), adminKeyHash: hash("admin-\(name)"),
                                    serverKeyHash: hash("server-\(name)"))
    return record
}

/// Registers the device `id` of `project` (secret named after it), without a limit.
@discardableResult
func createDevice(_ storage: any ServerStorage, _ id: String, of project: String, at createdAtMs: UInt64 = startMs) async throws -> DeviceRecord {
    let device = DeviceRecord(id: id, project: project, namespace: "\(project)-ns", createdAtMs: createdAtMs)
    #expect(try await storage.createDevice(device, secretHash: hash("secret-\(id)"), limit: .max))
    return device
}

func token(_ byte: UInt8) -> Token {
    Token(bytes: Array(repeating: byte, count: Token.byteCount))!
}

/// An Eddystone-UID beacon's id, all of whose 16 bytes are `byte`.
func beaconID(_ byte: UInt8, type: AdvertisedIdType = .eddystone) throws -> BeaconID {
    try BeaconID(AdvertisedIdJSON(type: type, id: Data(repeating: byte, count: type.byteCount)), field: "advertisedId")
}
