import Foundation
import GRDB

/// The upstream messages nearbyd has accepted and not yet settled, in one
/// SQLite file in the state directory: a message `SendMessage` accepted is on
/// disk before the call returns, so it survives a crash of the daemon or of
/// the machine (synchronous writes). A message that failed stays until its
/// app has been told.
///
/// The outbox is owned by one actor of the daemon; GRDB's queue serialises
/// the file access itself.
///
/// A message is pending until it has a verdict: `succeeded` (the application
/// server acknowledged it) or `failed`. It stays, with its verdict, until its
/// app has been told; only then is it taken out.
public final class Outbox: Sendable {
    /// One pending message and whose it is.
    public struct Entry: Hashable, Sendable {
        /// The sending app: its project's API key and its app id.
        public var apiKey: String
        public var appID: String
        public var message: UpstreamMessage
        /// When it was accepted and when its TTL runs out, milliseconds since the epoch.
        public var acceptedAtMs: UInt64
        public var expiresAtMs: UInt64
        /// How it ended, once it has.
        public var verdict: Verdict?

        public init(apiKey: String, appID: String, message: UpstreamMessage, acceptedAtMs: UInt64) {
            self.apiKey = apiKey
            self.appID = appID
            self.message = message
            self.acceptedAtMs = acceptedAtMs
            expiresAtMs = acceptedAtMs + UInt64(message.ttlSeconds) * 1000
        }
    }

    /// How a message ended: what its app is told.
    public enum Verdict: Hashable, Sendable {
        /// `SendSucceeded`: the application server acknowledged it.
        case succeeded
        /// `SendFailed`.
        case failed(Failure)
    }

    /// `SendFailed`'s error code and description.
    public struct Failure: Hashable, Sendable {
        public var error: String
        public var description: String

        public init(error: String, description: String) {
            self.error = error
            self.description = description
        }
    }

    /// Why a message was not taken.
    public enum Refusal: Error, Equatable, Sendable {
        /// The app has a pending message with this id.
        case duplicateID
        /// The app has `limit` messages pending already.
        case full(limit: Int)
    }

    private let queue: DatabaseQueue
    /// Pending messages per app at most.
    public let maxPendingPerApp: Int

    /// Opens (creating when missing) the outbox at `path`.
    public init(path: String, maxPendingPerApp: Int) throws {
        var configuration = Configuration()
        configuration.label = "nearbyd-outbox"
        // WAL with full syncs: each commit is durable with one sync of the log,
        // where the rollback journal took three or four per commit.
        configuration.journalMode = .wal
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        queue = try DatabaseQueue(path: path, configuration: configuration)
        self.maxPendingPerApp = maxPendingPerApp
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE outbox (
                    apiKey TEXT NOT NULL,
                    appID TEXT NOT NULL,
                    messageID TEXT NOT NULL,
                    recipient TEXT NOT NULL,
                    data TEXT NOT NULL,
                    ttlSeconds INTEGER NOT NULL,
                    acceptedAtMs INTEGER NOT NULL,
                    expiresAtMs INTEGER NOT NULL,
                    PRIMARY KEY (apiKey, appID, messageID)
                );
                CREATE INDEX outbox_expiry ON outbox(expiresAtMs);
                """)
        }
        migrator.registerMigration("v2") { db in
            try db.execute(sql: """
                ALTER TABLE outbox ADD COLUMN failure TEXT;
                ALTER TABLE outbox ADD COLUMN failureDescription TEXT;
                """)
        }
        migrator.registerMigration("v3") { db in
            // A verdict of success, kept like a failure until the app is told.
            try db.execute(sql: "ALTER TABLE outbox ADD COLUMN succeeded INTEGER NOT NULL DEFAULT 0")
        }
        try migrator.migrate(queue)
    }

    /// Keeps `entry` until it is settled; nothing is written when it is refused.
    public func add(_ entry: Entry) throws {
        let data = String(decoding: try JSONEncoder().encode(entry.message.data), as: UTF8.self)
        let refusal: Refusal? = try queue.write { db in
            let pending = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox WHERE \(Self.pending) AND apiKey = ? AND appID = ?",
                                           arguments: [entry.apiKey, entry.appID]) ?? 0
            // Unique among the pending messages of every app of the API key: they share one
            // registration id, and application servers ack by registration id and message id.
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM outbox WHERE \(Self.pending) AND apiKey = ? AND messageID = ?",
                                 arguments: [entry.apiKey, entry.message.messageID]) == true {
                return .duplicateID
            }
            guard pending < maxPendingPerApp else { return .full(limit: maxPendingPerApp) }
            // A settled message's id may be used again (its verdict, if still untold, goes).
            try db.execute(sql: """
                INSERT OR REPLACE INTO outbox (apiKey, appID, messageID, recipient, data, ttlSeconds, acceptedAtMs, expiresAtMs)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [entry.apiKey, entry.appID, entry.message.messageID, entry.message.to, data,
                                 entry.message.ttlSeconds, Int64(entry.acceptedAtMs), Int64(entry.expiresAtMs)])
            return nil
        }
        if let refusal { throw refusal }
    }

    /// Gives a pending message its verdict and returns it; nil when it is not
    /// pending (unknown, or settled already: a verdict repeated after a
    /// reconnect). `told`: its app hears the verdict now, so the message is
    /// removed in the same transaction instead of kept for ``takeSettled(apiKey:appID:)``.
    public func settle(apiKey: String, appID: String, messageID: String, _ verdict: Verdict, told: Bool = false) throws -> Entry? {
        try queue.write { db in
            guard var entry = try Self.entries(db, where: "\(Self.pending) AND apiKey = ? AND appID = ? AND messageID = ?",
                                               [apiKey, appID, messageID]).first else { return nil }
            entry.verdict = verdict
            if told {
                try db.execute(sql: "DELETE FROM outbox WHERE apiKey = ? AND appID = ? AND messageID = ?",
                               arguments: [apiKey, appID, messageID])
            } else {
                try Self.record(verdict, of: entry, db)
            }
            return entry
        }
    }

    /// Fails the pending messages whose TTL has run out by `nowMs` and returns
    /// them, oldest first: `TTL_EXCEEDED`, or `SERVICE_NOT_AVAILABLE` for a
    /// TTL of 0 (now or never, and it was not delivered now). The messages of
    /// the API keys in `sparing` are left alone: their direct channel carries
    /// them, and the server judges their TTL.
    public func failExpired(nowMs: UInt64, sparing: Set<String> = []) throws -> [Entry] {
        try queue.write { db in
            var expired = try Self.entries(db, where: "\(Self.pending) AND expiresAtMs <= ? AND \(Self.notIn(sparing))",
                                           StatementArguments([Int64(nowMs)]) + StatementArguments(Array(sparing)))
            for index in expired.indices {
                let ttl = expired[index].message.ttlSeconds
                let failure = ttl == 0
                    ? Failure(error: "SERVICE_NOT_AVAILABLE", description: "the direct channel closed before the server took the message, and the TTL is 0")
                    : Failure(error: "TTL_EXCEEDED", description: "not delivered within its TTL of \(ttl) s")
                expired[index].verdict = .failed(failure)
                try Self.record(.failed(failure), of: expired[index], db)
            }
            return expired
        }
    }

    /// Takes out and returns an app's settled messages, oldest first: its app
    /// is being told.
    public func takeSettled(apiKey: String, appID: String) throws -> [Entry] {
        try queue.write { db in
            let settled = try Self.entries(db, where: "NOT (\(Self.pending)) AND apiKey = ? AND appID = ?", [apiKey, appID])
            try db.execute(sql: "DELETE FROM outbox WHERE NOT (\(Self.pending)) AND apiKey = ? AND appID = ?",
                           arguments: [apiKey, appID])
            return settled
        }
    }

    /// The pending messages of every app of `apiKey`, in the order they were accepted.
    public func pending(apiKey: String) throws -> [Entry] {
        try queue.read { db in try Self.entries(db, where: "\(Self.pending) AND apiKey = ?", [apiKey]) }
    }

    /// Every message whose app has not been told how it ended (pending, or
    /// settled and untold), in the order they were accepted.
    public func all() throws -> [Entry] {
        try queue.read { db in try Self.entries(db, where: "1", []) }
    }

    /// When the next TTL runs out, if anything is pending outside the API keys in `sparing`.
    public func nextExpiryMs(sparing: Set<String> = []) throws -> UInt64? {
        try queue.read { db in
            try Int64.fetchOne(db, sql: "SELECT MIN(expiresAtMs) FROM outbox WHERE \(Self.pending) AND \(Self.notIn(sparing))",
                               arguments: StatementArguments(Array(sparing))).map { UInt64($0) }
        }
    }

    /// The SQL condition of a message without a verdict.
    private static let pending = "failure IS NULL AND succeeded = 0"

    /// The SQL condition of an API key not among `apiKeys` (as many `?` as keys).
    private static func notIn(_ apiKeys: Set<String>) -> String {
        apiKeys.isEmpty ? "1" : "apiKey NOT IN (\(Array(repeating: "?", count: apiKeys.count).joined(separator: ", ")))"
    }

    private static func record(_ verdict: Verdict, of entry: Entry, _ db: Database) throws {
        let failure: Failure? = if case .failed(let failure) = verdict { failure } else { nil }
        try db.execute(sql: """
            UPDATE outbox SET succeeded = ?, failure = ?, failureDescription = ? WHERE apiKey = ? AND appID = ? AND messageID = ?
            """, arguments: [failure == nil, failure?.error, failure?.description, entry.apiKey, entry.appID,
                             entry.message.messageID])
    }

    /// Entries in the order they were accepted: a replaced row (an id used
    /// again) gets a new rowid, greater than any before it.
    private static func entries(_ db: Database, where condition: String, _ arguments: StatementArguments) throws -> [Entry] {
        let rows = try Row.fetchAll(db, sql: "SELECT * FROM outbox WHERE \(condition) ORDER BY rowid", arguments: arguments)
        return try rows.map { row in
            let dataText: String = row["data"]
            let data = try JSONDecoder().decode([String: String].self, from: Data(dataText.utf8))
            let message = UpstreamMessage(data: data, to: row["recipient"], messageID: row["messageID"],
                                          ttlSeconds: row["ttlSeconds"])
            var entry = Entry(apiKey: row["apiKey"], appID: row["appID"], message: message,
                              acceptedAtMs: UInt64(row["acceptedAtMs"] as Int64))
            entry.expiresAtMs = UInt64(row["expiresAtMs"] as Int64)
            if let error: String = row["failure"] {
                entry.verdict = .failed(Failure(error: error, description: row["failureDescription"] ?? ""))
            } else if row["succeeded"] as Bool {
                entry.verdict = .succeeded
            }
            return entry
        }
    }
}
