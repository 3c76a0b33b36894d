import Foundation
import GRDB
import NearbyCore

/// The upstream messages nearbyd has accepted and not yet settled, in one
/// SQLite file in the state directory: a message `SendMessage` accepted is on
/// disk before the call returns, so it survives a crash of the daemon or of
/// the machine (synchronous writes). A message that failed stays until its
/// app has been told.
///
/// Every access is asynchronous: GRDB runs it on the outbox's own queue, so
/// the caller (the daemon's bus thread) never waits for the disk.
///
/// A message is pending until it has a verdict: `succeeded` (the application
/// server acknowledged it) or `failed`. It stays, with its verdict, until its
/// app has been told or ``Limits/retentionMs`` has passed since; only then is
/// it taken out. An app is an ``Account`` (a user's registration under an API
/// key) and an app id: another user's app of the same key and id is another
/// app, and never sees, takes or blocks this one's messages.
public final class Outbox: Sendable {
    /// One message and whose it is.
    public struct Entry: Hashable, Sendable {
        /// The sending app: the user's registration and its app id.
        public var account: Account
        public var appID: String
        public var message: UpstreamMessage
        /// When it was accepted and when its TTL runs out, milliseconds since the epoch.
        public var acceptedAtMs: UInt64
        public var expiresAtMs: UInt64
        /// How it ended, once it has.
        public var verdict: Verdict?

        public init(account: Account, appID: String, message: UpstreamMessage, acceptedAtMs: UInt64) {
            self.account = account
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
        case appFull(limit: Int)
        /// The user keeps `limit` messages and untold verdicts already, over all its apps.
        case userFull(limit: Int)
        /// The outbox holds `limit` rows, over all users.
        case full(limit: Int)
    }

    /// How much the outbox keeps, per app, per user and in all, and for how long.
    public struct Limits: Sendable {
        /// Pending messages of one app.
        public var pendingPerApp: Int
        /// Rows of one user: pending messages and verdicts not yet told.
        public var rowsPerUser: Int
        /// Rows in all.
        public var rows: Int
        /// How long a verdict waits for its app to come back, milliseconds.
        public var retentionMs: UInt64

        public init(pendingPerApp: Int, rowsPerUser: Int, rows: Int, retentionMs: UInt64) {
            self.pendingPerApp = pendingPerApp
            self.rowsPerUser = rowsPerUser
            self.rows = rows
            self.retentionMs = retentionMs
        }
    }

    private let queue: DatabaseQueue
    public let limits: Limits

    /// Opens (creating when missing) the outbox at `path`.
    public init(path: String, limits: Limits) throws {
        var configuration = Configuration()
        configuration.label = "nearbyd-outbox"
        // WAL with full syncs: each commit is durable with one sync of the log,
        // where the rollback journal took three or four per commit.
        configuration.journalMode = .wal
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        queue = try DatabaseQueue(path: path, configuration: configuration)
        self.limits = limits
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
        migrator.registerMigration("v4") { db in
            // Apps belong to a user (the uid), and a verdict is kept for a while
            // (from settledAtMs). Rows from before have no user anyone can be
            // (uid -1): nobody is told of them, and they go with the retention.
            try db.execute(sql: """
                CREATE TABLE outbox_v4 (
                    uid INTEGER NOT NULL,
                    apiKey TEXT NOT NULL,
                    appID TEXT NOT NULL,
                    messageID TEXT NOT NULL,
                    recipient TEXT NOT NULL,
                    data TEXT NOT NULL,
                    ttlSeconds INTEGER NOT NULL,
                    acceptedAtMs INTEGER NOT NULL,
                    expiresAtMs INTEGER NOT NULL,
                    failure TEXT,
                    failureDescription TEXT,
                    succeeded INTEGER NOT NULL DEFAULT 0,
                    settledAtMs INTEGER,
                    PRIMARY KEY (uid, apiKey, appID, messageID)
                );
                INSERT INTO outbox_v4 (uid, apiKey, appID, messageID, recipient, data, ttlSeconds, acceptedAtMs, expiresAtMs,
                                       failure, failureDescription, succeeded, settledAtMs)
                    SELECT -1, apiKey, appID, messageID, recipient, data, ttlSeconds, acceptedAtMs, expiresAtMs,
                           failure, failureDescription, succeeded, acceptedAtMs FROM outbox ORDER BY rowid;
                DROP TABLE outbox;
                ALTER TABLE outbox_v4 RENAME TO outbox;
                CREATE INDEX outbox_expiry ON outbox(expiresAtMs);
                CREATE INDEX outbox_settled ON outbox(settledAtMs);
                CREATE INDEX outbox_user ON outbox(uid);
                """)
        }
        try migrator.migrate(queue)
    }

    /// Keeps `entry` until it is settled; nothing is written when it is refused.
    public func add(_ entry: Entry) async throws {
        let data = String(decoding: try JSONEncoder().encode(entry.message.data), as: UTF8.self)
        let limits = limits
        let refusal: Refusal? = try await queue.write { db in
            // Unique among the pending messages of every app of the account: they share one
            // registration id, and application servers ack by registration id and message id.
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM outbox WHERE \(Self.pending) AND uid = ? AND apiKey = ? AND messageID = ?",
                                 arguments: [entry.account.uid, entry.account.apiKey, entry.message.messageID]) == true {
                return .duplicateID
            }
            let pending = try Int.fetchOne(db, sql: """
                SELECT COUNT(*) FROM outbox WHERE \(Self.pending) AND uid = ? AND apiKey = ? AND appID = ?
                """, arguments: [entry.account.uid, entry.account.apiKey, entry.appID]) ?? 0
            guard pending < limits.pendingPerApp else { return .appFull(limit: limits.pendingPerApp) }
            let ofUser = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox WHERE uid = ?", arguments: [entry.account.uid]) ?? 0
            guard ofUser < limits.rowsPerUser else { return .userFull(limit: limits.rowsPerUser) }
            let all = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM outbox") ?? 0
            guard all < limits.rows else { return .full(limit: limits.rows) }
            // A settled message's id may be used again (its verdict, if still untold, goes).
            try Self.insert(entry, data: data, db)
            return nil
        }
        if let refusal { throw refusal }
    }

    /// Gives a pending message its verdict at `nowMs` and returns it; nil when
    /// it is not pending (unknown, or settled already: a verdict repeated after
    /// a reconnect). `told`: its app hears the verdict now, so the message is
    /// removed in the same transaction instead of kept for ``takeSettled(_:appID:)``.
    public func settle(_ account: Account, appID: String, messageID: String, _ verdict: Verdict, nowMs: UInt64,
                       told: Bool = false) async throws -> Entry? {
        try await queue.write { db in
            guard var entry = try Self.entries(db, where: "\(Self.pending) AND uid = ? AND apiKey = ? AND appID = ? AND messageID = ?",
                                               [account.uid, account.apiKey, appID, messageID]).first else { return nil }
            entry.verdict = verdict
            if told {
                try db.execute(sql: "DELETE FROM outbox WHERE uid = ? AND apiKey = ? AND appID = ? AND messageID = ?",
                               arguments: [account.uid, account.apiKey, appID, messageID])
            } else {
                try Self.record(verdict, of: entry, at: nowMs, db)
            }
            return entry
        }
    }

    /// Keeps a settled message taken out for its app after all (the app left
    /// before it was told): it waits for the app's next manager again.
    public func keep(_ entry: Entry, nowMs: UInt64) async throws {
        guard let verdict = entry.verdict else { return }
        let data = String(decoding: try JSONEncoder().encode(entry.message.data), as: UTF8.self)
        try await queue.write { db in
            try Self.insert(entry, data: data, db)
            try Self.record(verdict, of: entry, at: nowMs, db)
        }
    }

    /// Fails the pending messages whose TTL has run out by `nowMs` and returns
    /// them, oldest first: `TTL_EXCEEDED`, or `SERVICE_NOT_AVAILABLE` for a
    /// TTL of 0 (now or never, and it was not delivered now). The messages of
    /// the accounts in `sparing` are left alone: their direct channel carries
    /// them, and the server judges their TTL.
    public func failExpired(nowMs: UInt64, sparing: Set<Account> = []) async throws -> [Entry] {
        try await queue.write { db in
            var expired = try Self.entries(db, where: "\(Self.pending) AND expiresAtMs <= ? AND \(Self.notIn(sparing))",
                                           StatementArguments([Int64(nowMs)]) + Self.arguments(sparing))
            for index in expired.indices {
                let ttl = expired[index].message.ttlSeconds
                let failure = ttl == 0
                    ? Failure(error: "SERVICE_NOT_AVAILABLE", description: "the direct channel closed before the server took the message, and the TTL is 0")
                    : Failure(error: "TTL_EXCEEDED", description: "not delivered within its TTL of \(ttl) s")
                expired[index].verdict = .failed(failure)
                try Self.record(.failed(failure), of: expired[index], at: nowMs, db)
            }
            return expired
        }
    }

    /// Takes out and returns an app's settled messages, oldest first: its app
    /// is being told.
    public func takeSettled(_ account: Account, appID: String) async throws -> [Entry] {
        try await queue.write { db in
            let condition = "NOT (\(Self.pending)) AND uid = ? AND apiKey = ? AND appID = ?"
            let arguments: StatementArguments = [account.uid, account.apiKey, appID]
            let settled = try Self.entries(db, where: condition, arguments)
            try db.execute(sql: "DELETE FROM outbox WHERE \(condition)", arguments: arguments)
            return settled
        }
    }

    /// Removes the verdicts no app came back for within the retention, and
    /// returns how many went.
    public func dropUntold(nowMs: UInt64) async throws -> Int {
        let cutoff = Int64(clamping: nowMs) - Int64(clamping: limits.retentionMs)
        return try await queue.write { db in
            try db.execute(sql: "DELETE FROM outbox WHERE NOT (\(Self.pending)) AND settledAtMs <= ?", arguments: [cutoff])
            return db.changesCount
        }
    }

    /// The pending messages of every app of `account`, in the order they were accepted.
    public func pending(_ account: Account) async throws -> [Entry] {
        try await queue.read { db in
            try Self.entries(db, where: "\(Self.pending) AND uid = ? AND apiKey = ?", [account.uid, account.apiKey])
        }
    }

    /// Every message whose app has not been told how it ended (pending, or
    /// settled and untold), in the order they were accepted.
    public func all() async throws -> [Entry] {
        try await queue.read { db in try Self.entries(db, where: "1", []) }
    }

    /// When the next TTL runs out, if anything is pending outside the accounts in `sparing`.
    public func nextExpiryMs(sparing: Set<Account> = []) async throws -> UInt64? {
        try await queue.read { db in
            try Int64.fetchOne(db, sql: "SELECT MIN(expiresAtMs) FROM outbox WHERE \(Self.pending) AND \(Self.notIn(sparing))",
                               arguments: Self.arguments(sparing)).map { UInt64($0) }
        }
    }

    /// The SQL condition of a message without a verdict.
    private static let pending = "failure IS NULL AND succeeded = 0"

    /// The SQL condition of a row of none of `accounts` (two `?` per account: uid, key).
    private static func notIn(_ accounts: Set<Account>) -> String {
        accounts.isEmpty ? "1" : "NOT (" + Array(repeating: "(uid = ? AND apiKey = ?)", count: accounts.count).joined(separator: " OR ") + ")"
    }

    private static func arguments(_ accounts: Set<Account>) -> StatementArguments {
        StatementArguments(accounts.flatMap { account -> [any DatabaseValueConvertible] in [account.uid, account.apiKey] })
    }

    private static func insert(_ entry: Entry, data: String, _ db: Database) throws {
        try db.execute(sql: """
            INSERT OR REPLACE INTO outbox (uid, apiKey, appID, messageID, recipient, data, ttlSeconds, acceptedAtMs, expiresAtMs)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, arguments: [entry.account.uid, entry.account.apiKey, entry.appID, entry.message.messageID, entry.message.to,
                             data, entry.message.ttlSeconds, Int64(entry.acceptedAtMs), Int64(entry.expiresAtMs)])
    }

    private static func record(_ verdict: Verdict, of entry: Entry, at nowMs: UInt64, _ db: Database) throws {
        let failure: Failure? = if case .failed(let failure) = verdict { failure } else { nil }
        try db.execute(sql: """
            UPDATE outbox SET succeeded = ?, failure = ?, failureDescription = ?, settledAtMs = ?
            WHERE uid = ? AND apiKey = ? AND appID = ? AND messageID = ?
            """, arguments: [failure == nil, failure?.error, failure?.description, Int64(clamping: nowMs), entry.account.uid,
                             entry.account.apiKey, entry.appID, entry.message.messageID])
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
            let uid: Int64 = row["uid"]
            var entry = Entry(account: Account(uid: UInt32(truncatingIfNeeded: uid), apiKey: row["apiKey"]), appID: row["appID"],
                              message: message, acceptedAtMs: UInt64(row["acceptedAtMs"] as Int64))
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
