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
        /// Why it failed, once it has.
        public var failure: Failure?

        public init(apiKey: String, appID: String, message: UpstreamMessage, acceptedAtMs: UInt64) {
            self.apiKey = apiKey
            self.appID = appID
            self.message = message
            self.acceptedAtMs = acceptedAtMs
            expiresAtMs = acceptedAtMs + UInt64(message.ttlSeconds) * 1000
        }
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
        try migrator.migrate(queue)
    }

    /// Keeps `entry` until it is settled; nothing is written when it is refused.
    public func add(_ entry: Entry) throws {
        let data = String(decoding: try JSONEncoder().encode(entry.message.data), as: UTF8.self)
        let refusal: Refusal? = try queue.write { db in
            let pending = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox WHERE failure IS NULL AND apiKey = ? AND appID = ?",
                                           arguments: [entry.apiKey, entry.appID]) ?? 0
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM outbox WHERE failure IS NULL AND apiKey = ? AND appID = ? AND messageID = ?",
                                 arguments: [entry.apiKey, entry.appID, entry.message.messageID]) == true {
                return .duplicateID
            }
            guard pending < maxPendingPerApp else { return .full(limit: maxPendingPerApp) }
            // A failed message's id may be used again (its report, if still untold, goes).
            try db.execute(sql: """
                INSERT OR REPLACE INTO outbox (apiKey, appID, messageID, recipient, data, ttlSeconds, acceptedAtMs, expiresAtMs)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                """, arguments: [entry.apiKey, entry.appID, entry.message.messageID, entry.message.to, data,
                                 entry.message.ttlSeconds, Int64(entry.acceptedAtMs), Int64(entry.expiresAtMs)])
            return nil
        }
        if let refusal { throw refusal }
    }

    /// Forgets a message (delivered, or failed); false when it was not there.
    @discardableResult
    public func remove(apiKey: String, appID: String, messageID: String) throws -> Bool {
        try queue.write { db in
            try db.execute(sql: "DELETE FROM outbox WHERE apiKey = ? AND appID = ? AND messageID = ?",
                           arguments: [apiKey, appID, messageID])
            return db.changesCount > 0
        }
    }

    /// Marks the pending messages whose TTL has run out by `nowMs` as failed
    /// (`TTL_EXCEEDED`) and returns them, oldest first.
    public func failExpired(nowMs: UInt64) throws -> [Entry] {
        try queue.write { db in
            var expired = try Self.entries(db, where: "failure IS NULL AND expiresAtMs <= ?", [Int64(nowMs)])
            for index in expired.indices {
                let failure = Failure(error: "TTL_EXCEEDED",
                                      description: "not delivered within its TTL of \(expired[index].message.ttlSeconds) s")
                expired[index].failure = failure
                try db.execute(sql: """
                    UPDATE outbox SET failure = ?, failureDescription = ? WHERE apiKey = ? AND appID = ? AND messageID = ?
                    """, arguments: [failure.error, failure.description, expired[index].apiKey, expired[index].appID,
                                     expired[index].message.messageID])
            }
            return expired
        }
    }

    /// Takes out and returns an app's failed messages, oldest first: its app is
    /// being told.
    public func takeFailed(apiKey: String, appID: String) throws -> [Entry] {
        try queue.write { db in
            let failed = try Self.entries(db, where: "failure IS NOT NULL AND apiKey = ? AND appID = ?", [apiKey, appID])
            try db.execute(sql: "DELETE FROM outbox WHERE failure IS NOT NULL AND apiKey = ? AND appID = ?",
                           arguments: [apiKey, appID])
            return failed
        }
    }

    /// Every message not yet settled (pending or failed and untold), oldest first.
    public func all() throws -> [Entry] {
        try queue.read { db in try Self.entries(db, where: "1", []) }
    }

    /// When the next TTL runs out, if anything is pending.
    public func nextExpiryMs() throws -> UInt64? {
        try queue.read { db in
            try Int64.fetchOne(db, sql: "SELECT MIN(expiresAtMs) FROM outbox WHERE failure IS NULL").map { UInt64($0) }
        }
    }

    private static func entries(_ db: Database, where condition: String, _ arguments: StatementArguments) throws -> [Entry] {
        let rows = try Row.fetchAll(db, sql: "SELECT * FROM outbox WHERE \(condition) ORDER BY acceptedAtMs, messageID",
                                    arguments: arguments)
        return try rows.map { row in
            let dataText: String = row["data"]
            let data = try JSONDecoder().decode([String: String].self, from: Data(dataText.utf8))
            let message = UpstreamMessage(data: data, to: row["recipient"], messageID: row["messageID"],
                                          ttlSeconds: row["ttlSeconds"])
            var entry = Entry(apiKey: row["apiKey"], appID: row["appID"], message: message,
                              acceptedAtMs: UInt64(row["acceptedAtMs"] as Int64))
            entry.expiresAtMs = UInt64(row["expiresAtMs"] as Int64)
            if let error: String = row["failure"] { entry.failure = Failure(error: error, description: row["failureDescription"] ?? "") }
            return entry
        }
    }
}
