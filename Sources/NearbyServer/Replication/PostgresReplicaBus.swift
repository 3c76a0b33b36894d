import Foundation
import Logging
import PostgresNIO
import Synchronization

/// ``ReplicaBus`` over PostgreSQL's LISTEN/NOTIFY on one channel
/// (``matching``, ``connections``). PostgreSQL delivers a channel's notifications to every
/// session listening, the sender's included, in the order their transactions
/// committed: the one order the replicas' matchers need.
///
/// A payload must be shorter than 8000 bytes: a longer message is stored in
/// the table `replicaMessage` and its notification, sent in the same
/// transaction, names its row (`@ID`). Rows are kept ``retentionMs``, long
/// enough for any replica still listening to have read them.
///
/// The listener holds one connection of its own (the pool's connections
/// come and go) and checks it every ``heartbeat``: a connection that died
/// silently, or a database restarted, is noticed, and the bus joins again
/// with backoff, up to ``maximumBackoff``, until the database answers.
final class PostgresReplicaBus: ReplicaBus {
    /// The matchers' channel (``ReplicatedMatcherFeed``).
    static let matching = "nearby_replicas"
    /// The connection hubs' channel (``ConnectionEventFeed``).
    static let connections = "nearby_connections"
    /// The longest payload sent inline: NOTIFY takes fewer than 8000 bytes.
    static let inlineBytes = 7900
    static let retentionMs: Int64 = 600_000
    static let heartbeat = Duration.seconds(10)
    static let maximumBackoff = Duration.seconds(5)

    private let storage: PostgresStorage
    private let channel: String
    private let logger: Logger
    /// When the stored messages were last pruned, in the database's milliseconds.
    private let lastPruneMs = Mutex<UInt64>(0)

    var packedBytes: Int { Self.inlineBytes }

    init(storage: PostgresStorage, channel: String, logger: Logger) {
        self.storage = storage
        self.channel = channel
        self.logger = logger
    }

    func publish(_ message: String) async throws {
        if message.utf8.count <= Self.inlineBytes {
            // The rows are read: the statement's failure comes with them,
            // after query() has returned, and would otherwise be lost.
            for try await _ in try await storage.client.query("SELECT pg_notify(\(channel), \(message))", logger: logger) {}
            return
        }
        try await storage.write { connection in
            let id = try await self.storage.value(
                Int64.self, "INSERT INTO replicaMessage (payload) VALUES (\(message)) RETURNING id", on: connection)!
            try await connection.query("SELECT pg_notify(\(channel), \("@\(id)"))", logger: self.logger)
        }
        try await pruneIfDue()
    }

    /// Deletes stored messages past retention, once a minute at most.
    private func pruneIfDue() async throws {
        let now = UInt64(Date().timeIntervalSince1970 * 1000)
        guard lastPruneMs.withLock({ last in
            guard now >= last + 60_000 else { return false }
            last = now
            return true
        }) else { return }
        try await storage.client.query("DELETE FROM replicaMessage WHERE createdAtMs < nearby_now_ms() - \(Self.retentionMs)",
                                       logger: logger)
    }

    func listen(_ deliver: @escaping @Sendable (ReplicaDelivery) async throws -> Void) async {
        var backoff = Duration.milliseconds(100)
        while !Task.isCancelled {
            do {
                try await listenOnce(deliver) { backoff = .milliseconds(100) }
            } catch where !Task.isCancelled {
                try? await deliver(.left)
                logger.warning("lost the other replicas' notifications; joining again",
                               metadata: ["reason": "\(PostgresStorage.reason(error))", "retryIn": "\(backoff)"])
            } catch {
                return
            }
            do {
                try await Task.sleep(for: backoff)
            } catch {
                return
            }
            backoff = min(backoff * 2, Self.maximumBackoff)
        }
    }

    /// Listens on a new connection until it fails or the task is cancelled.
    private func listenOnce(_ deliver: @escaping @Sendable (ReplicaDelivery) async throws -> Void,
                            joined: () -> Void) async throws {
        let connection = try await PostgresConnection.connect(configuration: try storage.location.connectionConfiguration,
                                                              id: 1, logger: logger)
        do {
            try await connection.listen(on: channel) { notifications in
                // Listening from here on: what storage holds now, then what changes.
                try await deliver(.joined)
                joined()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for try await notification in notifications {
                            try await deliver(.message(try await self.resolve(notification.payload)))
                        }
                        throw ReplicationError(message: "the notifications ended")
                    }
                    group.addTask {
                        while true {
                            try await Task.sleep(for: Self.heartbeat)
                            let outcome = await FirstOutcome.race(within: Self.heartbeat) {
                                try await connection.query("SELECT 1", logger: self.logger)
                            }
                            if case .failure(let error) = outcome { throw error }
                        }
                    }
                    // Either ends only by failing (or cancellation): then both end.
                    defer { group.cancelAll() }
                    try await group.next()
                }
            }
        } catch {
            try? await connection.close()
            throw error
        }
        try? await connection.close()
    }

    /// The message a payload is or names.
    private func resolve(_ payload: String) async throws -> String {
        guard payload.hasPrefix("@"), let id = Int64(payload.dropFirst()) else { return payload }
        let stored = try await storage.read { connection in
            try await self.storage.value(String.self, "SELECT payload FROM replicaMessage WHERE id = \(id)", on: connection)
        }
        guard let stored else {
            // Pruned: this replica fell further behind than the retention.
            throw ReplicationError(message: "replica message \(id) is no longer stored")
        }
        return stored
    }
}
